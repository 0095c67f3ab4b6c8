"""The main job: load a model through `AutoModelForCausalLM` and stream its continuation of a prompt."""

import math
import os
import sys
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, TextStreamer, TorchAoConfig, set_seed
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from ..folders.bundled import DEFAULT_MODEL_DIR, gpt2_tokenizer, own_tokenizer
from ..folders.errors import needs_extra
from ..folders.reading import load_strictly, read_config_dict, reading_checkpoint
from ..model.positions import positions_reach
from ..settings import hub_kwargs, hub_revision, hub_token, setting
from .int8 import use_int8_kernels


def int8_weight_only():
    """transformers' `TorchAoConfig` for int8 weight-only weights (torchao's `Int8WeightOnlyConfig`: one scale per
    row), the tied token table included: half the bytes of bf16 for a decoding step to read. Activations stay in
    the dtype the model is loaded in (bfloat16 is the one to pick)."""
    try:
        from torchao.quantization import Int8WeightOnlyConfig
    except ImportError as error:
        raise needs_extra("int8", error) from None
    return TorchAoConfig(Int8WeightOnlyConfig(), include_input_output_embeddings=True)


def load_for_generation(model: str | None = None, *, int8: bool = False, **hub_kwargs):
    """(model, tokenizer) for a tinygpt or GPT-2 folder or Hub id; None means the shipped default model. A model
    without tokenizer files (the default one) gets the bundled GPT-2 tokenizer. `int8`: quantized as it loads
    (`int8_weight_only`), with bfloat16 activations, multiplied in int8 on a CPU (`use_int8_kernels`)."""
    source = str(model or DEFAULT_MODEL_DIR)
    model_type = read_config_dict(source, **hub_kwargs).get("model_type")
    if model_type not in CONFIG_MAPPING:  # tinygpt is registered there when hf_tinygpt is imported
        raise ValueError(
            f"{source}: model_type {model_type!r} is not an architecture transformers knows; "
            "generation runs tinygpt and GPT-2 checkpoints, and transformers' own architectures"
        )
    quantized = {"dtype": torch.bfloat16, "quantization_config": int8_weight_only()} if int8 else {}
    with reading_checkpoint(source):
        loaded = load_strictly(source, AutoModelForCausalLM, **quantized, **hub_kwargs).eval()
    if int8:
        use_int8_kernels(loaded)
    tokenizer = own_tokenizer(source, vocab_size=loaded.config.vocab_size, **hub_kwargs)
    if tokenizer is None:
        tokenizer = gpt2_tokenizer()
        if len(tokenizer) > loaded.config.vocab_size:
            raise ValueError(
                f"{source} has no tokenizer files, and its vocabulary ({loaded.config.vocab_size} tokens) "
                "is smaller than the bundled GPT-2 tokenizer's: it needs its own tokenizer"
            )
    return loaded, tokenizer


@torch.no_grad()
def generate_text(
    prompt: str,
    model=None,
    tokenizer=None,
    *,
    max_new_tokens: int = 60,
    temperature: float = 0.8,
    top_k: int | None = 40,
    top_p: float | None = None,
    seed: int | None = None,
    stream=None,
    quiet: bool = False,
) -> str:
    """Continue `prompt`, writing tokens to `stream` (default: stdout) as they are produced, unless `quiet`; returns
    the whole text. temperature 0 means greedy decoding. `model`: a loaded model, with its `tokenizer`; or a folder
    or Hub id (None: the shipped default model), loaded with its own tokenizer, and then no `tokenizer`."""
    check_generation_options(
        prompt, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed
    )
    if model is None or isinstance(model, (str, os.PathLike)):
        if tokenizer is not None:
            raise ValueError(
                "`tokenizer` goes with a loaded model; a model given by path (or None, the default model) "
                "is loaded with its own tokenizer: leave `tokenizer` out, or pass the model loaded"
            )
        model, tokenizer = load_for_generation(model)
    elif not callable(getattr(model, "generate", None)):
        raise ValueError(
            f"`model` must be a loaded model, a folder or Hub id, or None (the shipped model), got {model!r:.60}"
        )
    elif tokenizer is None:
        raise ValueError(
            "a loaded model needs its `tokenizer`: pass it too, or give the model's path and "
            "both are loaded (load_for_generation)"
        )
    if seed is not None:
        set_seed(seed)
    inputs = tokenizer(prompt, return_tensors="pt")
    total = inputs.input_ids.shape[1] + max_new_tokens
    if (reach := positions_reach(model.config)) is not None and total > reach:
        raise ValueError(
            f"the prompt ({inputs.input_ids.shape[1]} tokens) + `max_new_tokens` ({max_new_tokens}) is "
            f"{total} tokens, past this model's context of {reach} (its positions stop "
            "there): shorten the prompt or ask for fewer tokens"
        )
    sampling = {"do_sample": True, "temperature": temperature, "top_k": top_k, "top_p": top_p}
    options = sampling if temperature > 0 else {"do_sample": False}
    streamer = None if quiet else _Streamer(tokenizer, stream or sys.stdout)
    output = model.generate(
        **inputs, max_new_tokens=max_new_tokens, streamer=streamer, pad_token_id=tokenizer.eos_token_id, **options
    )
    return tokenizer.decode(output[0], skip_special_tokens=True)


# Below this, logits / temperature overflow to inf in float32 and sampling has no distribution to draw from.
MIN_TEMPERATURE = 1e-3


def _is_number(value, kind=(int, float)) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)  # bool is a subclass of int


# transformers' `set_seed` seeds numpy too, which takes no seed outside this range.
SEED_RANGE = range(2**32)


def check_generation_options(
    prompt: str,
    *,
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    seed: int | None = None,
):
    """A ValueError naming the argument for anything `generate` would silently ignore, misread or crash on."""
    if not isinstance(prompt, str):
        raise ValueError(f"`prompt` must be the text to continue, a str, got {type(prompt).__name__}")
    if not prompt:
        raise ValueError("the prompt is empty: give the text to continue")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes on the command line arrive as lone surrogates
        raise ValueError("the prompt is not valid UTF-8 text: check the terminal's encoding") from None
    if not (_is_number(max_new_tokens, int) and max_new_tokens >= 1):
        raise ValueError(f"`max_new_tokens` must be an integer >= 1, got {max_new_tokens!r}")
    if not (_is_number(temperature) and (temperature == 0 or MIN_TEMPERATURE <= temperature < math.inf)):
        raise ValueError(
            f"`temperature` must be 0 (greedy decoding) or a finite number >= {MIN_TEMPERATURE:g}, got {temperature!r}"
        )
    if top_k is not None and not (_is_number(top_k, int) and top_k >= 0):
        raise ValueError(f"`top_k` must be an integer >= 0 (0: no limit), got {top_k!r}")
    if top_p is not None and not (_is_number(top_p) and 0 < top_p <= 1):
        raise ValueError(f"`top_p` must be in (0, 1], got {top_p!r}")
    if seed is not None and not (_is_number(seed, int) and seed in SEED_RANGE):
        raise ValueError(f"`seed` must be None (a fresh seed) or an integer from 0 to 2**32 - 1, got {seed!r}")


class _Streamer(TextStreamer):
    """transformers' TextStreamer, writing to any stream (flushed per piece) instead of print()."""

    def __init__(self, tokenizer, stream):
        super().__init__(tokenizer, skip_special_tokens=True)
        self.stream = stream

    def on_finalized_text(self, text: str, stream_end: bool = False):
        self.stream.write(text + ("\n" if stream_end else ""))
        self.stream.flush()


@dataclass
class GenerationSettings:
    """What `generate_from` (`hf-tinygpt generate`) is asked to do."""

    prompt: str = setting(help="text to continue", positional=True)
    model: str | None = setting(
        None, "tinygpt or GPT-2 folder or Hub id (default: the shipped Shakespeare model)", reads=True
    )
    max_new_tokens: int = setting(60, "tokens to generate")
    temperature: float = setting(0.8, "0: greedy decoding")
    top_k: int = setting(40, "sample from the k likeliest tokens (0: all)")
    top_p: float | None = setting(None, "nucleus sampling: the smallest set with this probability (default: off)")
    seed: int | None = setting(
        None, "for reproducible sampling (default: a fresh seed each run)", minimum=0, maximum=2**32 - 1
    )
    int8: bool = setting(
        False,
        "int8 weights, bfloat16 activations: quantized with torchao as the model loads (the [int8] extra); on a CPU, "
        "decodes faster than bfloat16",
    )
    revision: str | None = hub_revision()
    token: str | None = hub_token()


def generate_from(settings: GenerationSettings) -> str:
    """The model loaded (`load_for_generation`) and the prompt continued, streamed to stdout: the whole text."""
    s = settings
    hub = hub_kwargs(s)
    model, tokenizer = load_for_generation(s.model, int8=s.int8, **hub)
    options = dict(max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p, seed=s.seed)
    return generate_text(s.prompt, model, tokenizer, top_k=s.top_k or None, **options)
