"""Fast decoding on a CPU: transformers' own compiled generation, set up so that the compiled step pays off.

A decoding step multiplies one token's activations by every weight matrix, so its speed is set by how fast the
weights stream from memory. In eager mode on a CPU three things keep it far from that limit (measured and
explained in README "Speed"): the GEMV kernels (MKL's bf16 path reads weights at about 15 GB/s where a plain
sum reads 35 or more), ~100 small kernels of Python and dispatch per step, and SDPA's CPU kernel costing ~200 µs
a call for one query. `CompiledDecoder` removes all three without writing a kernel of its own:

- a `StaticCache` lets `generate` compile the decoding step (transformers' auto-compile, with `compile_config`);
- inductor *freezing* folds the weights into that step as constants, which lets inductor pre-pack them and pick
  its CPP GEMM template by measuring it against ATen (`max_autotune`);
- attention runs as plain matmul + softmax (`attn_implementation="eager"`), which inductor fuses for one query.

Freezing binds the compiled step to the cache it compiled with (`StaticCache` marks its tensors as static
addresses) and to the weights as they were then. Dynamo picks a step by guards on the model's identity and on
tensor shapes, never on which cache object or which weight values it froze, so:
- all decoders of one model share one cache per batch size and length (reset before every call, never replaced);
- after the weights change, a new decoder drops the process's compiled steps (`torch._dynamo.reset()`) so that
  its step compiles again with the new weights, and an older decoder refuses to run.
The frozen, pre-packed weights are a second copy in memory, which torch keeps even after the decoder and the model
are gone (README "Speed" says what holds it).
"""

import itertools
import threading
import weakref

import torch
from transformers import CompileConfig, StaticCache

from ..model.modeling_tinygpt import CACHE_FIELD

# Inductor settings in force while the decoding step compiles (and recompiles). `torch.compile(options=...)` does
# not apply `freezing` in torch 2.13, so they are patched into inductor's config around each `generate` instead.
# The last two keep autotuning from printing every candidate kernel's timing to stderr; older torch lacks them.
_QUIET_AUTOTUNE = {"autotune_num_choices_displayed": 0, "max_autotune_report_choices_stats": False}
INDUCTOR_SETTINGS = {"freezing": True}
AUTOTUNE_SETTINGS = {"max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"} | {
    key: value for key, value in _QUIET_AUTOTUNE.items() if hasattr(torch._inductor.config, key)
}

# Every decoder's step is one more compiled entry on the same code object (`Module.__call__`'s), and dynamo's
# default limit of 8 entries would make the ninth decoder in a process fail under fullgraph=True.
DYNAMO_SETTINGS = {"recompile_limit": 64}

# One `generate` at a time in the whole process: decoders of one model share a cache (and a compiled step bound to
# it), and the inductor/dynamo settings above are process-wide, so a second thread would decode from the first
# one's positions or compile without freezing. (Seen without the lock: wrong greedy tokens, no error.)
_ONE_AT_A_TIME = threading.Lock()

# Per model: the weights its compiled steps froze, and its caches by (batch size, max length).
_COMPILED_FOR = weakref.WeakKeyDictionary()


def weights_fingerprint(model) -> tuple:
    """Where every parameter and buffer lives and how often it was changed in place (`_version`): any change to the
    weights, by an optimizer, `load_state_dict` or `.to()`, changes this."""
    return tuple((t.data_ptr(), t._version) for t in itertools.chain(model.parameters(), model.buffers()))


class CompiledDecoder:
    """`generate` for one batch size and at most `max_length` tokens (prompt + new), with the step compiled.

    Works for any transformers causal LM whose cache can be static: TinyGPT, and GPT2LMHeadModel for comparison.
    The model is switched to eager attention (see the module docstring); the first call compiles (tens of
    seconds for GPT-2 small on 2 cores; `autotune=False` skips timing candidate kernels, for a faster compile and
    a slower step), later calls reuse the compiled step. Safe to call from several threads:
    calls run one at a time.
    """

    def __init__(self, model, *, batch_size: int = 1, max_length: int | None = None, autotune: bool = True):
        self.model = model.eval()
        if model.config._attn_implementation != "eager":
            model.set_attn_implementation("eager")
        self.batch_size = batch_size
        self.max_length = max_length or model.config.n_positions
        # Autotuning picks the fastest GEMM kernels by timing them: worth its compile time for speed, not for tests.
        self.inductor_settings = INDUCTOR_SETTINGS | (AUTOTUNE_SETTINGS if autotune else {})
        # Learned positions stop at n_positions. The eager model says so itself, but that check is skipped inside
        # the compiled step, so it is made here, once (GPT-2's config has no position_embedding_type: learned).
        learned = getattr(model.config, "position_embedding_type", "learned") == "learned"
        if learned and self.max_length > model.config.n_positions:
            raise ValueError(f"max_length={self.max_length} exceeds n_positions={model.config.n_positions}, the "
                             "last position this model's learned position embeddings cover.")  # fmt: skip
        self.weights = weights_fingerprint(model)
        compiled = _COMPILED_FOR.get(model)
        if compiled is not None and compiled["weights"] != self.weights:
            # The model's existing steps would pass its guards and run the old weights.
            torch._dynamo.reset()
            compiled = None
        if compiled is None:
            compiled = _COMPILED_FOR[model] = {"weights": self.weights, "caches": {}}
        shape = (batch_size, self.max_length)
        if shape not in compiled["caches"]:
            compiled["caches"][shape] = StaticCache(config=model.config, max_cache_len=self.max_length)
        self.cache = compiled["caches"][shape]
        self.compile_config = CompileConfig(fullgraph=True, dynamic=False, mode=None)
        # transformers auto-compiles the decoding step only on accelerators unless the config says all devices.
        self.compile_config._compile_all_devices = True

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, *, max_new_tokens: int, **generate_kwargs) -> torch.Tensor:
        """`model.generate(input_ids, max_new_tokens=..., **generate_kwargs)` through the compiled step."""
        batch, length = input_ids.shape
        if batch != self.batch_size:
            raise ValueError(f"This decoder was built for batch size {self.batch_size}, got {batch}: build one "
                             "CompiledDecoder per batch size (a compiled step is bound to its cache).")  # fmt: skip
        if length + max_new_tokens > self.max_length:
            raise ValueError(f"Prompt ({length} tokens) + max_new_tokens ({max_new_tokens}) exceeds this decoder's "
                             f"max_length={self.max_length}: build it with a larger max_length.")  # fmt: skip
        if weights_fingerprint(self.model) != self.weights:
            raise ValueError("The model's weights changed after this decoder was built, and its compiled step has "
                             "the old ones frozen in: build a new CompiledDecoder (it compiles again).")  # fmt: skip
        with _ONE_AT_A_TIME:
            self.cache.reset()
            with torch._inductor.config.patch(self.inductor_settings), torch._dynamo.config.patch(DYNAMO_SETTINGS):
                return self.model.generate(input_ids, max_new_tokens=max_new_tokens, compile_config=self.compile_config,
                                           **{CACHE_FIELD: self.cache}, **generate_kwargs)  # fmt: skip
