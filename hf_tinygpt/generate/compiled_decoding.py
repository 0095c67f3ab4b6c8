"""Fast decoding on a CPU: transformers' own compiled generation, set up so that the compiled step pays off.

A decoding step's speed is set by how fast the weights stream from memory. In eager mode on a CPU, slow GEMV
kernels, many small kernels of Python and dispatch, and SDPA's CPU kernel for one query keep it far from that limit
(scripts/measurement_log.md, "Speed", has the measurements). `CompiledDecoder` removes all three with torch's own
kernels: a `StaticCache` lets `generate` compile the step (transformers' auto-compile); inductor *freezing* folds the
weights into it as constants, so that inductor pre-packs them and picks its GEMM by measuring; attention runs as eager
matmul + softmax, which inductor fuses. Our own kernels: int8 products of 5 to 16 rows (batch 8) go to
`int8_dot_products`, where inductor's int8 GEMM is slow (int8_dot_products.py says why), and on CPUs without AVX-512
BF16, bf16 and int8 products of up to 4 rows (batch 1 to 4) go to avx2_products.cpp, where inductor's are bound by
arithmetic (avx2_products.py). Nothing outside the decoder changes: it decodes with a private copy of the model (modules, config, parameters and buffers), a cache of its own,
and a backend of its own, so that dynamo never reuses another decoder's frozen step (it reuses a step under an equal
backend, and two "inductor" are equal).

The copy of the weights is what keeps a decoder to the weights it compiled: the frozen step holds some as constants
of its own (packed, `c_fc`'s say) and reads others from the module's tensors (`ln_f`'s), and the prompt's eager
forward reads them all, so with shared parameters a change made where no version counter sees it (`p.data.mul_(2)`,
`p.data[[0, 1]] = p.data[[1, 0]]`) reached some of a decode and not the rest. Checking the weights' contents on every
call instead costs a large part of a decode. The cost is one more copy of the weights per decoder, and like the packed
constants it outlives the decoder: the step's generated module holds it (scripts/measurement_log.md, "Costs", has both
measured).

A plain greedy call (no logits processors, stopping at a length or EOS) takes the decoder's own loop through
`generate(custom_generate=...)`: the step's inputs are made once and moved on in place instead of made again each
token, the same tokens for a few per cent of a step where Python is slow (`greedy_decoding`).

The private APIs it needs, and why:
- `CompileConfig._compile_all_devices`: transformers auto-compiles the decoding step only on CUDA/XPU unless it is
  set; there is no public switch for a CPU.
- `torch._inductor.config.patch(freezing=..., max_autotune=..., cpp_wrapper=...)` while the step compiles, once,
  when the decoder is built: `torch.compile(options={"freezing": True})` compiles without freezing in torch 2.13.
  The patch is process-wide for those seconds, so builds are serialised. It also turns off inductor's FX graph cache, which keys
  a frozen step on the weights' shapes, not their values.
- `torch._dynamo.config.patch(recompile_limit=...)`: every decoder's step is one more entry on the code object all
  modules' `__call__` share, and the default limit would make the ninth decoder in a process fail; it is raised to
  dynamo's ceiling on any one code object's compiles (`accumulated_recompile_limit`, 256).
- `torch._dynamo.exc.FailOnRecompileLimitHit`: how dynamo stops a compile at that limit; for a built decoder it
  means a call its step cannot take, which the decoder reports as such.
- `GenerationMixin._sample`: transformers' own decoding loop, which `greedy_decoding` hands every call it does not
  take itself; `generate` calls a `custom_generate` instead of its loop, and the loop has no public name.
- `Tensor._version`: the in-place version counters are how a decoder notices that the model's weights changed after
  its build (an optimizer step, `load_state_dict`, an in-place op), to refuse rather than decode the old ones; a
  change through `.data` bumps no counter, goes unnoticed, and leaves the decoder with its copy as built.
"""

import copy
import itertools
import threading

import torch
from transformers import CompileConfig, StaticCache
from transformers.generation import EosTokenCriteria, GenerationMixin, MaxLengthCriteria

from ..model.compat import CACHE_FIELD
from ..model.positions import positions_reach
from .avx2_products import MAX_ROWS as AVX2_MAX_ROWS
from .avx2_products import use_avx2_products
from .int8 import INT8_KERNEL_ROWS_PER_CALL, Int8Linear, use_int8_kernels
from .int8_dot_products import use_int8_dot_products

# The last two keep autotuning from printing every candidate kernel's timing to stderr; older torch lacks them.
_QUIET_AUTOTUNE = {"autotune_num_choices_displayed": 0, "max_autotune_report_choices_stats": False}
# No FX graph cache: it keys a frozen step on the weights' shapes, not their values, and a step from it multiplied
# int8 weights packed from another model's (an int8 decoder of new weights decoded with the old ones, torch 2.13).
INDUCTOR_SETTINGS = {"freezing": True, "fx_graph_cache": False, "fx_graph_remote_cache": False}
AUTOTUNE_SETTINGS = {"max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"} | {
    key: value for key, value in _QUIET_AUTOTUNE.items() if hasattr(torch._inductor.config, key)
}
# Autotuning times each candidate GEMM on weights that stay in cache, while a decoding step reads every weight from
# memory once: at batch 1, and for int8 products at any batch, its pick is slower than inductor's CPP template alone;
# from a few rows on, ATen's bf16 and fp32 GEMMs are worth having (scripts/README.md, "Why CompiledDecoder is set up
# as it is").
GEMV_AUTOTUNE_SETTINGS = AUTOTUNE_SETTINGS | {"max_autotune_gemm_backends": "CPP"}
# The step's ~100 kernel calls made from C++ rather than Python: a faster step where Python is slow (an AVX2 EPYC), for
# a few seconds more of compile; so with autotuning, the settings for the fastest step (scripts/measurement_log.md,
# "bf16 and int8 on AVX2").
FASTEST_STEP_SETTINGS = {"cpp_wrapper": True}
# Dynamo's ceiling on one code object's compiles (64 was outgrown by the slow tier's decoders in one worker).
DYNAMO_SETTINGS = {"recompile_limit": getattr(torch._dynamo.config, "accumulated_recompile_limit", 256)}
# The step's guards leave out the decoder's private modules (most of a step's guards, and faster decoding:
# scripts/measurement_log.md, "Why CompiledDecoder is set up as it is"): nothing changes those modules, the decoder
# checks the weights itself, and no other decoder's step can be taken for this one's, since each compiles under a
# backend of its own.
_SKIP_MODULE_GUARDS = getattr(torch.compiler, "skip_guard_on_all_nn_modules_unsafe", None)  # torch >= 2.7
GUARD_SETTINGS = {"guard_filter_fn": _SKIP_MODULE_GUARDS} if _SKIP_MODULE_GUARDS else {}

# Decoders compile one at a time: the settings above are process-wide while they are patched in.
_BUILDING = threading.Lock()
# The build decodes 3 tokens after a 1-token prompt, so that the step compiles and then runs once as compiled.
_BUILD_NEW_TOKENS = 3
MIN_MAX_LENGTH = 1 + _BUILD_NEW_TOKENS


class _CompileAfterBuild(Exception):
    """Dynamo was about to compile a built decoder's step again."""


class StepBackend:
    """Inductor for one decoder's step, equal to no other backend: dynamo reuses a compiled step only under an equal
    backend, and two `torch.compile(backend="inductor")` are equal. It compiles only while the decoder is built, under
    the build's settings. An input that changes the step's graph later (`output_hidden_states=True`, say) would
    compile it outside them, unfrozen: slower, and with int8 weights an error inside inductor's lowering."""

    def __init__(self):
        self.inductor = torch._dynamo.lookup_backend("inductor")
        self.building = True

    def __deepcopy__(self, memo):  # `generate` deep-copies its generation config, this backend included
        return self

    def __call__(self, *args, **kwargs):
        if not self.building:
            raise _CompileAfterBuild()
        return self.inductor(*args, **kwargs)


# Dynamo about to compile a built decoder's step again: through its backend, or stopped before that by the limit on
# compiled entries per code object (every decoder's step is one on the same code object).
_STEP_WOULD_COMPILE = (_CompileAfterBuild, getattr(torch._dynamo.exc, "FailOnRecompileLimitHit", _CompileAfterBuild))


def _raised_by(error: BaseException, kind) -> bool:
    """Whether `error` is, or was raised while handling, an exception of `kind` (dynamo wraps a backend's)."""
    while error is not None:
        if isinstance(error, kind):
            return True
        error = getattr(error, "inner_exception", None) or error.__cause__ or error.__context__
    return False


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # bool is a subclass of int


def check_decoder_arguments(*, batch_size, max_length, autotune):
    """A ValueError naming the argument for a `CompiledDecoder` argument that would build a decoder other than the
    one asked for (`max_length=0` meant n_positions, `batch_size=True` batch 1) or fail inside the build."""
    if not (_is_int(batch_size) and batch_size >= 1):
        raise ValueError(f"`batch_size` must be an integer >= 1, got {batch_size!r}")
    if max_length is not None and not (_is_int(max_length) and max_length >= MIN_MAX_LENGTH):
        raise ValueError(
            f"`max_length` must be None (the model's n_positions) or an integer >= {MIN_MAX_LENGTH} (prompt + new "
            f"tokens; the build decodes {_BUILD_NEW_TOKENS} tokens after a 1-token prompt), got {max_length!r}"
        )
    if not isinstance(autotune, bool):
        raise ValueError(f"`autotune` must be True or False, got {autotune!r}")


def weights_fingerprint(model) -> tuple:
    """Where every parameter and buffer lives and how often it was changed in place (`_version`): a change to the
    weights by an optimizer, `load_state_dict`, `.to()` or an in-place op changes this; one through `.data` does
    not."""
    return tuple((t.data_ptr(), t._version) for t in itertools.chain(model.parameters(), model.buffers()))


def int8_products_only(model) -> bool:
    """Whether every linear layer of `model` multiplies int8 weights in int8 (`Int8Linear`), as TinyGPT's do when
    loaded with `int8_weight_only()` and given `use_int8_kernels`."""
    linears = [module for module in model.modules() if isinstance(module, torch.nn.Linear)]
    return bool(linears) and all(isinstance(module, Int8Linear) for module in linears)


def private_copy(model):
    """A copy of `model`: modules, config, parameters and buffers (tied weights stay tied, copied once), so that
    nothing done to `model` afterwards reaches the copy."""
    return copy.deepcopy(model)


# What `generate` hands a decoding loop that `greedy_decoding` carries from token to token itself.
_GREEDY_MODEL_KWARGS = {CACHE_FIELD, "attention_mask", "position_ids", "use_cache", "logits_to_keep"}
# `generate` arguments it does not pass to a `custom_generate` callable: with them, transformers' own loop runs.
_LOOP_ARGUMENTS = ("streamer", "synced_gpus", "assistant_model", "custom_generate")


def greedy_decoding(model, input_ids, logits_processor, stopping_criteria, generation_config, **model_kwargs):
    """A decoder's loop for `generate` (its `custom_generate`) when it decodes greedily with nothing to apply to the
    logits and stops at a length or EOS: the compiled step's inputs are made once, by `prepare_inputs_for_generation`,
    and then moved on in place (the token, its position, one more column of the mask), where transformers' loop makes
    them again every token: a few per cent of a step on a CPU where Python is slow (scripts/measurement_log.md, "bf16
    and int8 on AVX2"). The same tokens as transformers' loop, which runs anything else."""
    plain = (
        not generation_config.do_sample
        and not generation_config.return_dict_in_generate
        and getattr(generation_config, "prefill_chunk_size", None) is None
        and len(logits_processor) == 0
        and all(type(criterion) in (MaxLengthCriteria, EosTokenCriteria) for criterion in stopping_criteria)
        and set(model_kwargs) <= _GREEDY_MODEL_KWARGS
        and model_kwargs.get("use_cache") is not False
    )
    if not plain:
        return GenerationMixin._sample(
            model,
            input_ids,
            logits_processor=logits_processor,
            stopping_criteria=stopping_criteria,
            generation_config=generation_config,
            **model_kwargs,
        )
    step_forward = model.get_compiled_call(generation_config.compile_config)
    prompt = model.prepare_inputs_for_generation(input_ids, is_first_iteration=True, **model_kwargs)
    logits = model(**prompt, return_dict=True).logits  # the prompt runs eagerly, as in transformers' loop
    eos = [criterion.eos_token_id for criterion in stopping_criteria if isinstance(criterion, EosTokenCriteria)]
    pad = generation_config.pad_token_id
    if eos and pad is None:  # as transformers' loop pads: with the first EOS id
        pad = eos[0].flatten()[0]
    unfinished = torch.ones(len(input_ids), dtype=torch.bool, device=input_ids.device)
    step = movable = None
    while True:
        next_tokens = logits[:, -1].to(copy=True, dtype=torch.float32).argmax(-1)
        if eos:  # a finished sequence goes on with padding, as in transformers' loop
            next_tokens = torch.where(unfinished, next_tokens, pad)
        input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
        unfinished &= ~stopping_criteria(input_ids, None)
        if not unfinished.any():
            return input_ids
        if not movable:  # the step's inputs, as transformers' loop makes them
            if (positions := model_kwargs.get("position_ids")) is not None:
                model_kwargs["position_ids"] = torch.cat([positions, positions[:, -1:] + 1], dim=-1)
            if (mask := model_kwargs.get("attention_mask")) is not None:
                model_kwargs["attention_mask"] = torch.cat([mask, mask.new_ones(len(mask), 1)], dim=-1)
            step = model.prepare_inputs_for_generation(input_ids, next_sequence_length=1, **model_kwargs)
            slot = input_ids.shape[1] - 1  # the token's place in the static cache: the mask's column it opens
            movable = isinstance(step.get("attention_mask"), torch.Tensor) and step.get("position_ids") is not None
        else:  # every row attends to its own new token: its column opens as the last one did
            step["input_ids"].copy_(next_tokens[:, None])
            step["position_ids"].add_(1)
            step["attention_mask"][..., slot + 1] = step["attention_mask"][..., slot]
            slot += 1
        logits = step_forward(**step, return_dict=True).logits


class CompiledDecoder:
    """`generate` for one batch size and at most `max_length` tokens (prompt + new), with the step compiled.

    Works for any transformers causal LM whose cache can be static: TinyGPT, and GPT2LMHeadModel for comparison.
    Building it compiles the step (how long that takes: scripts/measurement_log.md, "Costs"; `autotune=False` skips
    timing candidate kernels and compiles the step's calls as Python, for a faster compile and a slower step); calls
    reuse it. The model is left as it was. The decoder decodes with its own copy of the weights as they were at build
    time (one more copy of the weights in memory; scripts/measurement_log.md, "Costs", has the figures), frozen into
    the step: after the model's weights change visibly (an optimizer step, `load_state_dict`, an in-place op), calls
    refuse and a new decoder compiles the new ones; a change through `.data`, which it cannot see, leaves it decoding
    the weights it was built with. Arguments that change what the step computes (`output_hidden_states`,
    `output_attentions`, `use_cache=False`) or the rows it decodes (`num_beams`, `num_return_sequences`) are refused,
    since the step compiles only at the build. Safe to call from several threads: a decoder's calls run one at a time.
    """

    def __init__(self, model, *, batch_size: int = 1, max_length: int | None = None, autotune: bool = True):
        check_decoder_arguments(batch_size=batch_size, max_length=max_length, autotune=autotune)
        self.source = model
        self.batch_size = batch_size
        self.max_length = model.config.n_positions if max_length is None else max_length
        if self.max_length < MIN_MAX_LENGTH:  # only a model of under 4 positions gets here, through its default
            raise ValueError(
                f"`max_length` defaults to n_positions={self.max_length}, and a decoder needs at least "
                f"{MIN_MAX_LENGTH} positions to compile its step: this model is too short for one"
            )
        # Where the positions stop, the eager model says so itself, but that check is skipped inside the compiled
        # step, so it is made here, once.
        if (reach := positions_reach(model.config)) is not None and self.max_length > reach:
            raise ValueError(
                f"max_length={self.max_length} exceeds n_positions={reach}, the "
                "last position this model's positions reach."
            )
        self.model = use_int8_kernels(private_copy(model).eval())  # int8 weights multiplied in int8, if any
        self.model.set_attn_implementation("eager")
        # Above 4 rows, int8 products go to AVX-512 BF16 dot products where the CPU has them (int8_dot_products.py).
        self.int8_dot_products = batch_size > INT8_KERNEL_ROWS_PER_CALL and use_int8_dot_products(self.model)
        # Up to 4 rows, bf16 and int8 products go to our AVX2 kernels where the CPU lacks AVX-512 BF16
        # (avx2_products.py).
        self.avx2_products = batch_size <= AVX2_MAX_ROWS and use_avx2_products(self.model)
        self.cache = StaticCache(config=self.model.config, max_cache_len=self.max_length)
        self.backend = StepBackend()
        self.compile_config = CompileConfig(
            fullgraph=True, dynamic=False, mode=None, backend=self.backend, options=dict(GUARD_SETTINGS)
        )
        # transformers auto-compiles the decoding step only on accelerators unless the config says all devices.
        self.compile_config._compile_all_devices = True
        self._one_at_a_time = threading.Lock()
        self.weights = weights_fingerprint(model)
        template_only = batch_size == 1 or int8_products_only(self.model)
        autotuning = GEMV_AUTOTUNE_SETTINGS if template_only else AUTOTUNE_SETTINGS
        settings = INDUCTOR_SETTINGS | (autotuning | FASTEST_STEP_SETTINGS if autotune else {})
        self.inductor_settings = settings  # what the step was compiled under
        with _BUILDING, torch._inductor.config.patch(settings), torch._dynamo.config.patch(DYNAMO_SETTINGS):
            # Two decoding steps through the compiled path: the step compiles, frozen, with this decoder's cache. The
            # mask says the prompt of pad ids is no padding (without it, generate warns of right padding).
            prompt = torch.zeros(batch_size, 1, dtype=torch.long, device=model.device)
            options = dict(do_sample=False, eos_token_id=None, pad_token_id=0, attention_mask=torch.ones_like(prompt))
            self.generate(prompt, max_new_tokens=_BUILD_NEW_TOKENS, **options)
        self.backend.building = False

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, *, max_new_tokens: int, **generate_kwargs) -> torch.Tensor:
        """`model.generate(input_ids, max_new_tokens=..., **generate_kwargs)` through the compiled step."""
        batch, length = input_ids.shape
        if batch != self.batch_size:
            raise ValueError(
                f"This decoder was built for batch size {self.batch_size}, got {batch}: build one "
                "CompiledDecoder per batch size (a compiled step is bound to its cache)."
            )
        if length + max_new_tokens > self.max_length:
            raise ValueError(
                f"Prompt ({length} tokens) + max_new_tokens ({max_new_tokens}) exceeds this decoder's "
                f"max_length={self.max_length}: build it with a larger max_length."
            )
        self._refuse_what_the_step_cannot_do(generate_kwargs)
        if weights_fingerprint(self.source) != self.weights:
            raise ValueError(
                "The model's weights changed after this decoder was built, and it decodes with its copy "
                "of the old ones: build a new CompiledDecoder (it compiles again)."
            )
        with self._one_at_a_time:
            self.cache.reset()
            try:
                loop = {} if set(_LOOP_ARGUMENTS) & set(generate_kwargs) else {"custom_generate": greedy_decoding}
                return self.model.generate(
                    input_ids,
                    max_new_tokens=max_new_tokens,
                    compile_config=self.compile_config,
                    **{CACHE_FIELD: self.cache},
                    **loop,
                    **generate_kwargs,
                )
            except Exception as error:
                if self.backend.building or not _raised_by(error, _STEP_WOULD_COMPILE):
                    raise
                raise ValueError(
                    f"One of this call's arguments ({', '.join(sorted(generate_kwargs))}) changes what this "
                    "decoder's compiled step computes, and the step compiles only when the decoder is built, with "
                    "the weights frozen in: call the model's own generate for it."
                ) from None

    def _refuse_what_the_step_cannot_do(self, generate_kwargs: dict):
        """Name the argument (or the `generation_config` field) that asks for what the compiled step does not do:
        more rows than a sequence per prompt (its cache holds `batch_size` rows), no cache, or other outputs."""
        given = generate_kwargs.get("generation_config")

        def asked(name):  # as generate reads it: the call's, else the given config's, else the model's
            if name in generate_kwargs:
                return generate_kwargs[name]
            if given is not None and getattr(given, name, None) is not None:
                return getattr(given, name)
            return getattr(self.model.generation_config, name, None)

        if (rows := max(asked("num_beams") or 1, asked("num_return_sequences") or 1)) > 1:
            raise ValueError(
                f"num_beams / num_return_sequences make {rows} rows of each prompt, and this decoder's step and "
                "cache decode one row per prompt: call the model's own generate for beam search or several "
                "sequences per prompt."
            )
        if asked("use_cache") is False:
            raise ValueError(
                "use_cache=False: this decoder's step decodes through its static cache: call the model's own "
                "generate to decode without a cache."
            )
        if outputs := [name for name in ("output_hidden_states", "output_attentions") if asked(name)]:
            raise ValueError(
                f"{' and '.join(outputs)} change{'s' * (len(outputs) == 1)} what this decoder's compiled step "
                "computes, and the step compiles only when the decoder is built, with the weights frozen in: call the "
                "model's own generate for it."
            )
