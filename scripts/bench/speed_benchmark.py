"""TinyGPT against transformers' GPT2LMHeadModel on the same weights: prefill and decode throughput (dynamic cache,
static cache, static cache + torch.compile through CompiledDecoder), fp32, bf16 and int8 (weights quantized as they
load through transformers' TorchAoConfig, bf16 activations, TinyGPT in bf16 beside it; the [int8] extra),
from_pretrained time and memory, and the decode ceiling set by memory bandwidth; with --llama-cpp, llama.cpp's
batch-1 decode of the same weights (f32, f16, q8_0 GGUFs made by its own converter) in the same rounds.
How it measures, and what it measured: scripts/measurement_log.md, "Speed".

    python -m scripts.bench.speed_benchmark [--model GPT2_FOLDER] [--json OUT.json]  # else: random GPT-2 small, seed 0
    python -m scripts.bench.speed_benchmark --llama-cpp                               # and llama.cpp beside it
    python -m scripts.bench.speed_benchmark --tiny                                    # a smoke run on a tiny model
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import torch
from transformers import GPT2LMHeadModel

from hf_tinygpt import TinyGPTForCausalLM
from hf_tinygpt.convert.verify import random_gpt2_folder
from hf_tinygpt.generate.compiled_decoding import (
    DYNAMO_SETTINGS,
    GEMV_AUTOTUNE_SETTINGS,
    INDUCTOR_SETTINGS,
    CompiledDecoder,
)
from hf_tinygpt.generate.int8 import use_int8_kernels
from hf_tinygpt.generate.text import int8_weight_only
from scripts.bench.llama_cpp_timer import LlamaCppTimer
from scripts.bench.measure import (
    cpu,
    cpu_line,
    machine,
    measure_load,
    memory_bandwidth,
    paired_timings,
    timed,
    weights_bytes,
)

# How decode rows generate: transformers' default (dynamic cache), `cache_implementation="static"`, and a
# CompiledDecoder (static cache + torch.compile, README "Speed").
DECODE_CACHES = {"dynamic": "dynamic cache", "static": "static cache", "compiled": "static cache + torch.compile"}

# "int8": weights quantized as they load with `hf_tinygpt.generate.text.int8_weight_only()` (transformers'
# TorchAoConfig), activations in bfloat16. transformers' GPT-2 runs its bfloat16 model: the config quantizes none of its
# Conv1D projections, and loaded through it the same model ran at a third of its plain speed (a peer handicapped for
# nothing). TinyGPT in bfloat16 joins the decode rounds under this name: int8's gain over our own bfloat16.
INT8_PEER = "tinygpt bfloat16"

# Which GGUF a decode row of each dtype is set beside: the same bytes per weight, and llama.cpp's 8-bit type. They
# join the batch-1 rows of these caches (the timer's worker holds one prompt).
LLAMA_CPP_PEERS = {"float32": ("f32",), "bfloat16": ("f16", "q8_0"), "int8": ("q8_0", "f16")}
LLAMA_CPP_CACHES = ("dynamic", "compiled")

# `--emulate-avx2`: an AVX-512 machine measuring as an AVX2 one would. ATen's kernels and oneDNN's stop at AVX2 (set
# before torch starts: the run starts again with them), inductor writes 256-bit vectors, and llama.cpp is compiled for
# AVX2 (scripts/bench/engines.py). What stays: the caches and memory of this CPU, and instructions chosen by other
# libraries (MKL's fp32 GEMM dispatches on its own).
AVX2_EMULATION = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
AVX2_SIMDLEN = 256

# Where torch's eager bf16 products are slow, its eager bf16 rows (prefill, plain and static-cache `generate`) are
# left out: a CPU without bf16 instructions spent over 15 minutes in them before any result (scripts/README.md,
# "bf16 and int8 on AVX2"), and int8 prefill rows, where HF GPT-2 runs its bf16 model. The compiled rows stay.
EAGER_BF16_LEFT_OUT = (
    "bfloat16 prefill, plain and static-cache rows and int8 prefill rows left out: eager bf16 products are many "
    "times slower than float32 on a CPU without bf16 instructions (AVX-512 BF16 or AMX, with ATen's AVX-512 "
    "kernels), and HF GPT-2's int8 model is its bf16 one; the compiled rows run"
)


def restart_emulating_avx2(module: str, argv=None):
    """Run `python -m module ARGV` again in place of this process with `AVX2_EMULATION` set, unless it is set: ATen
    and oneDNN read their caps once, when torch starts."""
    if any(os.environ.get(key) != value for key, value in AVX2_EMULATION.items()):
        arguments = sys.argv[1:] if argv is None else list(argv)
        os.execve(sys.executable, [sys.executable, "-m", module, *arguments], os.environ | AVX2_EMULATION)


def eager_bf16_is_slow_here() -> bool:
    """Whether torch's eager bf16 products are slow here: no bf16 instructions, or ATen capped below AVX-512."""
    here = cpu()
    return not here["cpu_bf16"] or here["cpu_capability"] != "AVX512"


@dataclass(frozen=True)
class SpeedSettings:
    """What the benchmark runs; the defaults are the full run of scripts/measurement_log.md, "Speed"."""

    dtypes: tuple[str, ...] = ("float32", "bfloat16", "int8")
    caches: tuple[str, ...] = tuple(DECODE_CACHES)
    repeats: int = 3
    prefill_shapes: tuple[tuple[int, int], ...] = ((1, 1024), (8, 128))
    decode_batches: tuple[int, ...] = (1, 8)
    prompt_length: int = 32
    new_tokens: int = 128
    seed: int = 0
    # The weights `int8_gemv_bandwidth` multiplies, as (rows, columns); None: TinyGPT's own block weights.
    int8_gemv_products: tuple[tuple[int, int], ...] | None = None
    int8_gemv_one_product_bytes: int = 128 * 2**20
    int8_gemv_read_bytes: int = 256 * 2**20  # what each timing of the int8 products reads, for a steady figure
    int8_gemv_repeats: int = 5
    # Whether compiles (CompiledDecoder, the int8 products) time candidate kernels: the full run measures the steps
    # as they are used; without it they compile in a fraction of the time, into slower steps.
    autotune: bool = True
    probe: Callable[[], float] = memory_bandwidth  # bytes/s read, taken before every round


# --tiny: a tiny model and short inputs, to check the script only, with every costly part at its smallest: decoding
# at batch 1 alone (llama.cpp's batch; a compiled row compiles one decoder per peer), no autotuning, a few calls per
# int8 timing, a small probe. The model keeps GPT-2's vocabulary: llama.cpp's converter wants GPT-2's tokenizer.
TINY = SpeedSettings(
    repeats=1,
    new_tokens=4,
    prefill_shapes=((1, 32), (2, 16)),
    decode_batches=(1,),
    prompt_length=8,
    int8_gemv_products=((64, 64),) * 4,
    int8_gemv_one_product_bytes=2**20,
    int8_gemv_read_bytes=2**20,
    int8_gemv_repeats=1,
    autotune=False,
    probe=partial(memory_bandwidth, 32 * 2**20, 1),
)
TINY_GPT2 = dict(n_layer=2, n_embd=32, n_head=2)


# ---- the peers: who runs in the rounds -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelPeer:
    """A transformers model in the rounds, under its name in the results: "hf" (GPT2LMHeadModel), "tinygpt" or
    INT8_PEER. `step_bytes`: the weight bytes one decoding step reads; `autotune`: whether its CompiledDecoder
    times candidate kernels."""

    name: str
    model: torch.nn.Module
    step_bytes: int
    autotune: bool = True

    def prefill(self, ids: torch.Tensor) -> Callable[[], object]:
        return partial(self.model, ids, use_cache=True, logits_to_keep=1)

    def decode(self, cache: str, ids: torch.Tensor, new_tokens: int) -> Callable[[], object]:
        """A greedy `generate` of exactly `new_tokens` through `cache` (DECODE_CACHES). For "compiled", the
        CompiledDecoder is built (and its step compiled) here, outside the timings."""
        # No EOS, so exactly `new_tokens` each; `min_new_tokens` would add a logits processor that is neither
        # model's (scripts/measurement_log.md, "Speed").
        options = dict(
            max_new_tokens=new_tokens,
            eos_token_id=None,
            do_sample=False,
            pad_token_id=0,
            attention_mask=torch.ones_like(ids),
        )
        if cache == "compiled":
            decoder = CompiledDecoder(
                self.model, batch_size=len(ids), max_length=ids.shape[1] + new_tokens, autotune=self.autotune
            )
            return partial(decoder.generate, ids, **options)
        if cache == "static":
            return partial(self.model.generate, ids, cache_implementation="static", **options)
        return partial(self.model.generate, ids, **options)


@dataclass(frozen=True)
class LlamaCppPeer:
    """llama.cpp decoding with its GGUF of `outtype`, in the timer's worker: batch 1, a prompt of its own of the same
    length, the same number of new tokens."""

    timer: LlamaCppTimer
    outtype: str

    @property
    def name(self) -> str:
        return f"llama.cpp {self.outtype}"

    @property
    def step_bytes(self) -> int:
        return self.timer.gguf_bytes[self.outtype]  # its whole GGUF per token (the head is the tied token embedding)

    def decode(self, cache: str, ids: torch.Tensor, new_tokens: int) -> Callable[[], object]:
        return partial(self.timer.run, self.outtype)


def tensor_bytes(tensor) -> int:
    """Bytes a tensor holds; for a quantized tensor subclass (torchao's), those of the tensors it is made of."""
    if hasattr(tensor, "__tensor_flatten__"):
        inner = (getattr(tensor, name) for name in tensor.__tensor_flatten__()[0])
        return sum(tensor_bytes(t) for t in inner if t is not None)
    return tensor.numel() * tensor.element_size()


def model_peer(name: str, model: torch.nn.Module, autotune: bool = True) -> ModelPeer:
    # A decoding step reads every parameter once (the tied embedding is read as the head).
    return ModelPeer(name, model, step_bytes=sum(tensor_bytes(p) for p in model.parameters()), autotune=autotune)


def load_options(dtype: str) -> dict:
    """`from_pretrained`'s arguments for `dtype`, SDPA; "int8": bfloat16 with int8 weights (`int8_weight_only`)."""
    if dtype == "int8":
        return dict(dtype=torch.bfloat16, attn_implementation="sdpa", quantization_config=int8_weight_only())
    return dict(dtype=getattr(torch, dtype), attn_implementation="sdpa")


def load_peers(folder: str, dtype: str, autotune: bool = True) -> tuple[ModelPeer, ...]:
    """GPT-2 ("hf") and TinyGPT loaded from the same folder in `dtype`, both SDPA; for "int8", GPT-2 in bfloat16 (it
    has no int8 form) and TinyGPT in bfloat16 too (INT8_PEER). `autotune`: the peers' CompiledDecoders'."""
    options = load_options(dtype)
    loads = [("hf", GPT2LMHeadModel, load_options("bfloat16" if dtype == "int8" else dtype))]
    loads += [("tinygpt", TinyGPTForCausalLM, options)]
    loads += [(INT8_PEER, TinyGPTForCausalLM, load_options("bfloat16"))] if dtype == "int8" else []

    def loaded(cls, kwargs):  # TinyGPT's int8 weights multiplied in int8, as `hf-tinygpt generate --int8` does
        model = cls.from_pretrained(folder, **kwargs).eval()
        return use_int8_kernels(model) if cls is TinyGPTForCausalLM else model

    return tuple(model_peer(name, loaded(cls, kwargs), autotune) for name, cls, kwargs in loads)


def llama_cpp_peers(timer: LlamaCppTimer | None, dtype: str) -> tuple[LlamaCppPeer, ...]:
    """The GGUFs set beside `dtype` (LLAMA_CPP_PEERS) that run on this machine."""
    if timer is None:
        return ()
    return tuple(LlamaCppPeer(timer, outtype) for outtype in LLAMA_CPP_PEERS.get(dtype, ()) if outtype in timer.ggufs)


# ---- the measurements: one row each ----------------------------------------------------------------------------------


def timed_row(dtype: str, measure: str, runs: dict, tokens: int, settings: SpeedSettings, warmups: int = 1) -> dict:
    """Warm every run up, then time them in paired rounds (`paired_timings`; "hf" and "tinygpt" first): the fields
    every row has. tok/s are medians; `rounds` keeps each round's probe and tok/s."""
    for _ in range(warmups):
        for run in runs.values():
            run()
    rounds = paired_timings(runs, settings.repeats, settings.probe)
    times = rounds["times"]
    row = {
        "dtype": dtype,
        "measure": measure,
        "memory_bandwidth_GBps": statistics.median(rounds["probes"]) / 1e9,
        "paired_ratios": rounds["paired_ratios"],
        "ratio": rounds["ratio"],
        "rounds": {
            "probe_GBps": [probe / 1e9 for probe in rounds["probes"]],
            "tok_s": {name: [tokens / t for t in times[name]] for name in runs},
        },
        "hf_tok_s": tokens / statistics.median(times["hf"]),
        "tinygpt_tok_s": tokens / statistics.median(times["tinygpt"]),
    }
    if "peers" not in rounds:
        return row
    peers = {name: peer | {"tok_s": tokens / statistics.median(times[name])} for name, peer in rounds["peers"].items()}
    return row | {"peers": peers}


def prefill_row(dtype: str, pair: tuple[ModelPeer, ModelPeer], ids: torch.Tensor, settings: SpeedSettings) -> dict:
    """HF's and TinyGPT's prefill of `ids`: one forward with the cache on, logits of the last position only."""
    batch, length = ids.shape
    with torch.inference_mode():
        runs = {peer.name: peer.prefill(ids) for peer in pair}
        return timed_row(dtype, f"prefill {batch}×{length}", runs, batch * length, settings)


def decode_row(dtype: str, peers: tuple, cache: str, ids: torch.Tensor, settings: SpeedSettings) -> dict:
    """Greedy decoding of `ids` through `cache` by every peer in the same rounds, and how near each came to the
    ceiling. Compiled rows warm up twice: their first calls compile and then run slower for a while."""
    batch = len(ids)
    runs = {peer.name: peer.decode(cache, ids, settings.new_tokens) for peer in peers}
    measure = f"decode batch {batch}, {DECODE_CACHES[cache]}"
    warmups = 2 if cache == "compiled" else 1
    row = timed_row(dtype, measure, runs, batch * settings.new_tokens, settings, warmups)
    step_bytes = {peer.name: peer.step_bytes for peer in peers}
    return row | {"batch": batch, "cache": cache} | ceiling_fields(row, step_bytes, batch)


def ceiling_tok_s(bandwidth: float, step_bytes: int, batch: int) -> float:
    """Tokens/s if a decoding step only read its weights, at `bandwidth` bytes/s."""
    return bandwidth / step_bytes * batch


def of_ceiling_by_round(rounds: dict, name: str, step_bytes: int, batch: int) -> list[float]:
    """`name`'s fraction of the ceiling in each round, against the probe taken just before it: the probe swings
    within minutes while a decoder's speed hardly moves (scripts/measurement_log.md, "Speed")."""
    return [
        tok_s / ceiling_tok_s(probe * 1e9, step_bytes, batch)
        for tok_s, probe in zip(rounds["tok_s"][name], rounds["probe_GBps"], strict=True)
    ]


def ceiling_fields(row: dict, step_bytes: dict[str, int], batch: int) -> dict:
    """A decode row's fractions of the bandwidth ceiling, against the row's median probe and round by round. HF and
    TinyGPT are both set against TinyGPT's bytes (in int8 rows HF reads its bf16 weights, twice that); each peer
    against its own."""
    bandwidth = row["memory_bandwidth_GBps"] * 1e9
    ceiling = ceiling_tok_s(bandwidth, step_bytes["tinygpt"], batch)
    fields = {
        "ceiling_tok_s": ceiling,
        "hf_of_ceiling": row["hf_tok_s"] / ceiling,
        "tinygpt_of_ceiling": row["tinygpt_tok_s"] / ceiling,
        "tinygpt_of_ceiling_by_round": of_ceiling_by_round(row["rounds"], "tinygpt", step_bytes["tinygpt"], batch),
    }
    if "peers" not in row:
        return fields
    peers = {}
    for name, peer in row["peers"].items():
        peer_ceiling = ceiling_tok_s(bandwidth, step_bytes[name], batch)
        peers[name] = peer | {
            "ceiling_tok_s": peer_ceiling,
            "of_ceiling": peer["tok_s"] / peer_ceiling,
            "of_ceiling_by_round": of_ceiling_by_round(row["rounds"], name, step_bytes[name], batch),
        }
    return fields | {"peers": peers}


def dtype_rows(
    dtype: str,
    pair: tuple[ModelPeer, ModelPeer],
    extra: tuple,
    settings: SpeedSettings,
    llama_cpp: LlamaCppTimer | None,
) -> list[dict]:
    """Every prefill and decode row of one dtype: `pair` (HF, TinyGPT) in every row, `extra` peers and llama.cpp's
    in decode rows. Prompts are random ids, drawn row by row from torch's seed."""
    vocab = pair[0].model.config.vocab_size
    slow = dtype in ("bfloat16", "int8") and eager_bf16_is_slow_here()
    shapes = () if slow else settings.prefill_shapes
    caches = ("compiled",) if slow and dtype == "bfloat16" else settings.caches
    rows = [prefill_row(dtype, pair, torch.randint(0, vocab, shape), settings) for shape in shapes]
    for cache in (cache for cache in settings.caches if cache in caches):
        for batch in settings.decode_batches:
            ids = torch.randint(0, vocab, (batch, settings.prompt_length))
            with_llama_cpp = batch == 1 and cache in LLAMA_CPP_CACHES
            peers = (*pair, *extra, *(llama_cpp_peers(llama_cpp, dtype) if with_llama_cpp else ()))
            rows.append(decode_row(dtype, peers, cache, ids, settings))
    return rows


class _Int8Products(torch.nn.Module):
    """Products of one row of bf16 activations with random int8 weights of the given (rows, columns), one after
    another, through the op TinyGPT's `Int8Linear` emits for a few rows (`_weight_int8pack_mm`)."""

    def __init__(self, shapes, generator: torch.Generator):
        super().__init__()
        weights = [torch.randint(-127, 128, shape, dtype=torch.int8, generator=generator) for shape in shapes]
        scales = [torch.rand(rows, generator=generator).to(torch.bfloat16) for rows, _ in shapes]
        self.weights = torch.nn.ParameterList(torch.nn.Parameter(w, requires_grad=False) for w in weights)
        self.scales = torch.nn.ParameterList(torch.nn.Parameter(s, requires_grad=False) for s in scales)

    def forward(self, inputs: dict[str, torch.Tensor]):
        return [
            torch.ops.aten._weight_int8pack_mm(inputs[str(weight.shape[1])], weight, scale)
            for weight, scale in zip(self.weights, self.scales, strict=True)
        ]


def _call_repeatedly(fn: Callable, argument, calls: int) -> None:
    for _ in range(calls):
        fn(argument)


def _compiled_int8_read_GBps(products: _Int8Products, inputs: dict, repeats: int, read_bytes: int) -> float:
    """GB/s at which `products`, compiled in one call, read their weights (the best of `repeats` timings, each of
    enough calls to read about `read_bytes`)."""
    compiled = torch.compile(products, fullgraph=True)
    # The compiled kernels must compute the products, or their speed means nothing (bf16: ~3 digits).
    for got, want in zip(compiled(inputs), products(inputs), strict=True):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * want.abs().max().item())
    weight_bytes = sum(weight.numel() for weight in products.weights)
    calls = max(3, read_bytes // weight_bytes)
    best = min(timed(partial(_call_repeatedly, compiled, inputs, calls)) for _ in range(repeats)) / calls
    return weight_bytes / best / 1e9


def int8_gemv_bandwidth(products: list[tuple[int, int]], settings: SpeedSettings = SpeedSettings()) -> dict:
    """How fast the int8 products of a CompiledDecoder's int8 step read their weights from memory, compiled with the
    decoder's settings (with `settings.autotune`, inductor picks its CPP GEMM template by timing it).
    `products_GBps`: the `products` (rows, columns) one after another, as a step multiplies its block weights
    (`block_products`); `one_product_GBps`: a single weight of `int8_gemv_one_product_bytes`; `probe_GBps`: the
    settings' probe right after. Each GB/s is the best of `int8_gemv_repeats` timings of `int8_gemv_read_bytes`.

    Where the first is well below the second, a step loses time at every product it starts (threads, ramp-up), not
    in reading; where the second is below the probe, the kernel cannot keep up with memory."""
    generator = torch.Generator().manual_seed(0)
    inputs = {str(c): torch.randn(1, c, generator=generator).to(torch.bfloat16) for c in {c for _, c in products}}
    one_product = [(settings.int8_gemv_one_product_bytes // products[0][1], products[0][1])]
    cases = {"products": products, "one_product": one_product}
    compile_settings = INDUCTOR_SETTINGS | (GEMV_AUTOTUNE_SETTINGS if settings.autotune else {})
    with torch.no_grad(), torch._inductor.config.patch(compile_settings), torch._dynamo.config.patch(DYNAMO_SETTINGS):
        read = {
            f"{name}_GBps": _compiled_int8_read_GBps(
                _Int8Products(shapes, generator).eval(),
                inputs,
                settings.int8_gemv_repeats,
                settings.int8_gemv_read_bytes,
            )
            for name, shapes in cases.items()
        }
    return {
        "products": len(products),
        "one_product_rows": one_product[0][0],
        **read,
        "probe_GBps": settings.probe() / 1e9,
    }


def block_products(model) -> list[tuple[int, int]]:
    """(rows, columns) of every weight in `model`'s blocks, in the order a decoding step multiplies them."""
    return [tuple(m.weight.shape) for m in model.transformer.h.modules() if isinstance(m, torch.nn.Linear)]


def from_pretrained_costs(folder: str) -> dict:
    """Each model's `from_pretrained` of `folder` in a fresh process (`measure_load`): wall time and peak RSS, and
    the peak's growth per byte of the folder's weights."""
    checkpoint = weights_bytes(folder)
    measured = {
        name: measure_load(cls, folder) for name, cls in [("hf", "GPT2LMHeadModel"), ("tinygpt", "TinyGPTForCausalLM")]
    }
    return {name: m | {"peak_added_per_weight_byte": m["peak_added"] / checkpoint} for name, m in measured.items()}


def fastest_decode(rows: list[dict]) -> list[dict]:
    """Per dtype and batch: TinyGPT's fastest decode row against HF GPT-2's default `generate` (dynamic cache)."""
    summary = []
    for default in [row for row in rows if row.get("cache") == "dynamic"]:
        same = [row for row in rows if row["dtype"] == default["dtype"] and row.get("batch") == default["batch"]]
        best = max(same, key=lambda row: row["tinygpt_tok_s"])
        summary.append(
            {
                "dtype": default["dtype"],
                "decode": f"decode batch {default['batch']}",
                "tinygpt_measure": best["measure"],
                "tinygpt_tok_s": best["tinygpt_tok_s"],
                "hf_default_tok_s": default["hf_tok_s"],
                "ratio": best["tinygpt_tok_s"] / default["hf_tok_s"],
                "tinygpt_of_ceiling": best["tinygpt_of_ceiling"],
            }
        )
    return summary


# ---- the whole benchmark ---------------------------------------------------------------------------------------------


def speed_benchmark(
    folder: str, settings: SpeedSettings = SpeedSettings(), llama_cpp: LlamaCppTimer | None = None
) -> dict:
    """Side-by-side timings of transformers' GPT2LMHeadModel and TinyGPT loaded from the same GPT-2 `folder`, dtype
    by dtype (`dtype_rows`), both given the same treatment in every row (in int8 rows GPT-2 runs in bf16: it has no
    int8 form); with `llama_cpp`, its GGUFs join the rounds
    of the batch-1 decode rows ("peers"). After the int8 rows, `int8_gemv_bandwidth` of TinyGPT's block weights
    (or of the settings' products)."""
    torch.manual_seed(settings.seed)
    rows, gemv, left_out = [], {}, []
    if {"bfloat16", "int8"} & set(settings.dtypes) and eager_bf16_is_slow_here():
        left_out.append(EAGER_BF16_LEFT_OUT)
        print(EAGER_BF16_LEFT_OUT, file=sys.stderr)
    for dtype in settings.dtypes:
        hf, tinygpt, *extra = load_peers(folder, dtype, settings.autotune)
        rows += dtype_rows(dtype, (hf, tinygpt), tuple(extra), settings, llama_cpp)
        if dtype == "int8":
            products = settings.int8_gemv_products or block_products(tinygpt.model)
            gemv = {"int8_gemv": int8_gemv_bandwidth(list(products), settings)}
    fastest = fastest_decode(rows)
    return {"threads": torch.get_num_threads(), "rows": rows, **gemv, "fastest_decode": fastest, "left_out": left_out}


def start_llama_cpp(folder: str, work: Path, settings: SpeedSettings, avx2_only: bool = False) -> LlamaCppTimer:
    """llama.cpp's timer on GGUFs of `folder`, for a prompt of the settings' length (random ids, seed 1)."""
    vocab = json.loads((Path(folder) / "config.json").read_text())["vocab_size"]
    prompt = torch.randint(0, vocab, (settings.prompt_length,), generator=torch.Generator().manual_seed(1))
    threads = torch.get_num_threads()
    return LlamaCppTimer(folder, work, prompt.tolist(), settings.new_tokens, threads, avx2_only=avx2_only)


def run_speed_benchmark(
    settings: SpeedSettings = SpeedSettings(),
    model: str | None = None,
    out_json: str | None = None,
    gpt2_config: dict | None = None,
    load_memory: bool = True,
    llama_cpp: bool = False,
    emulate_avx2: bool = False,
) -> dict:
    """The whole benchmark on `model` (a GPT-2 folder), or on one of GPT-2 small's shape (or `gpt2_config`'s) made
    here with the settings' seed; prints the report and writes the JSON to `out_json`. With `llama_cpp`, llama.cpp
    joins the batch-1 decode rows (its venv is built on first use, a long compile: scripts/measurement_log.md, "Speed").
    `emulate_avx2`: in a process started with `AVX2_EMULATION`, inductor and llama.cpp stop at AVX2 too."""
    if emulate_avx2 and torch.backends.cpu.get_cpu_capability() != "AVX2":
        raise RuntimeError(f"emulating AVX2 needs the process started with {AVX2_EMULATION} (main() does that)")
    if emulate_avx2:
        torch._inductor.config.cpp.simdlen = AVX2_SIMDLEN
    with tempfile.TemporaryDirectory() as scratch:
        folder = model or random_gpt2_folder(str(Path(scratch) / "gpt2"), seed=settings.seed, **(gpt2_config or {}))
        llama = start_llama_cpp(folder, Path(scratch), settings, emulate_avx2) if llama_cpp else nullcontext()
        with llama as timer:
            result = speed_benchmark(folder, settings, timer)
        if timer is not None:
            result = result | {
                "llama_cpp_unavailable": timer.unavailable,
                "llama_cpp_gguf_bytes": timer.gguf_bytes,
                "llama_cpp_build": timer.build,
            }
        if load_memory:
            result = result | {"from_pretrained": from_pretrained_costs(folder)}
    result = result | {"machine": machine() | ({"emulated": "AVX2"} if emulate_avx2 else {})}
    print(format_speed_report(result))
    if out_json:
        Path(out_json).write_text(json.dumps(result, indent=2) + "\n")
    return result


# ---- several runs ----------------------------------------------------------------------------------------------------


def separate_runs(runs: int, child_argv: list[str], work: Path) -> list[dict]:
    """`runs` whole benchmarks, each in a fresh process of this script with `child_argv` (its report printed as it
    goes): a figure quoted from them is their median, with their range."""
    results = []
    for run in range(runs):
        out_json = work / f"run{run + 1}.json"
        print(f"\n# run {run + 1} of {runs}", flush=True)
        subprocess.run(
            [sys.executable, "-m", "scripts.bench.speed_benchmark", *child_argv, "--json", str(out_json)], check=True
        )
        results.append(json.loads(out_json.read_text()))
    return results


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def across_runs(results: list[dict]) -> list[dict]:
    """Each comparison of TinyGPT's in the runs' rows (against HF GPT-2 in every row, and against each peer of a decode
    row), with each figure's median and range over the runs; `crosses_parity` where the runs' ratios lie on both
    sides of 1.0×. Runs made on different CPUs or llama.cpp builds are not combined."""
    setups = {
        json.dumps([{k: v for k, v in r["machine"].items() if k != "date"}, r.get("llama_cpp_build")], sort_keys=True)
        for r in results
    }
    if len(setups) > 1:
        raise ValueError(f"These runs were made on different machines or llama.cpp builds: {sorted(setups)}")
    comparisons = {}
    for result in results:
        for row in result["rows"]:
            versus = [("HF GPT-2", row["hf_tok_s"], row["ratio"], row.get("hf_of_ceiling"))]
            versus += [(n, p["tok_s"], p["ratio"], p.get("of_ceiling")) for n, p in row.get("peers", {}).items()]
            for name, tok_s, ratio, of_ceiling in versus:
                figures = comparisons.setdefault(
                    (row["dtype"], row["measure"], name), {"tinygpt_tok_s": [], "tok_s": [], "ratio": []}
                )
                figures["tinygpt_tok_s"].append(row["tinygpt_tok_s"])
                figures["tok_s"].append(tok_s)
                figures["ratio"].append(ratio)
                if of_ceiling is not None:
                    figures.setdefault("tinygpt_of_ceiling", []).append(row["tinygpt_of_ceiling"])
                    figures.setdefault("of_ceiling", []).append(of_ceiling)
    combined = []
    for (dtype, measure, against), figures in comparisons.items():
        if len(figures["ratio"]) != len(results):
            raise ValueError(f"{dtype} {measure} against {against} is not in every run")
        spread = {name: _spread(values) for name, values in figures.items()}
        ratio = spread["ratio"]
        crosses = ratio["min"] < 1 < ratio["max"]
        combined.append({"dtype": dtype, "measure": measure, "against": against, **spread, "crosses_parity": crosses})
    return combined


def format_across_runs(results: list[dict], combined: list[dict]) -> str:
    """`across_runs`' comparisons as a table (median, runs' range), and each run's median probe."""

    def spread(figure: dict, scale: float = 1, fmt: str = ",.1f", unit: str = "") -> str:
        low, mid, high = (scale * figure[key] for key in ("min", "median", "max"))
        return f"{mid:{fmt}}{unit} ({low:{fmt}}–{high:{fmt}})"

    lines = [
        f"\nAcross {len(results)} separate runs: each figure the median of the runs' (a run's ratio is the median of "
        "its paired rounds), in brackets the runs' range",
        "| dtype | TinyGPT | TinyGPT tok/s | against | their tok/s | TinyGPT/them | TinyGPT % of ceiling "
        "| their % of ceiling | |",
        "|---|---|---:|---|---:|---:|---:|---:|---|",
    ]
    for c in combined:
        ceilings = (
            f"{spread(c['tinygpt_of_ceiling'], 100, '.0f', ' %')} | {spread(c['of_ceiling'], 100, '.0f', ' %')}"
            if "of_ceiling" in c
            else " | "
        )
        note = "the runs' range crosses 1.0×: neither ahead nor behind over these runs" if c["crosses_parity"] else ""
        lines.append(
            f"| {c['dtype']} | {c['measure']} | {spread(c['tinygpt_tok_s'])} | {c['against']} | {spread(c['tok_s'])} "
            f"| {spread(c['ratio'], fmt='.2f', unit='×')} | {ceilings} | {note} |"
        )
    bandwidth = [statistics.median(row["memory_bandwidth_GBps"] for row in r["rows"]) for r in results]
    lines.append(f"probe, each run's median GB/s: {', '.join(f'{b:.0f}' for b in bandwidth)}")
    return "\n".join(lines)


# ---- the report ------------------------------------------------------------------------------------------------------


def _percent_with_rounds(fraction: float, by_round: list[float]) -> str:
    return f"{100 * fraction:.0f} % ({100 * min(by_round):.0f}–{100 * max(by_round):.0f})"


def _pairs(paired_ratios: list[float]) -> str:
    return f"{min(paired_ratios):.2f}–{max(paired_ratios):.2f}"


def _rows_table(result: dict) -> list[str]:
    lines = [
        f"{result['threads']} threads; TinyGPT/HF = median of the repeats' paired ratios (pairs: their range); "
        "ceiling = memory read bandwidth (measured within the row) ÷ weight bytes per step; TinyGPT's % of it: "
        "against the row's median probe (each round against the probe just before it: their range)",
        "| dtype | measure | HF GPT-2 tok/s | TinyGPT tok/s | TinyGPT/HF | pairs | GB/s | ceiling tok/s "
        "| HF % of ceiling | TinyGPT % of ceiling |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        ceiling = (
            f"{row['ceiling_tok_s']:,.1f} | {100 * row['hf_of_ceiling']:.0f} % "
            f"| {_percent_with_rounds(row['tinygpt_of_ceiling'], row['tinygpt_of_ceiling_by_round'])}"
            if "ceiling_tok_s" in row
            else " | | "
        )
        lines.append(
            f"| {row['dtype']} | {row['measure']} | {row['hf_tok_s']:,.1f} | {row['tinygpt_tok_s']:,.1f} "
            f"| {row['ratio']:.2f}× | {_pairs(row['paired_ratios'])} | {row['memory_bandwidth_GBps']:.0f} | {ceiling} |"
        )
    return lines


def _peers_table(result: dict) -> list[str]:
    peer_rows = [(row, name, peer) for row in result["rows"] for name, peer in row.get("peers", {}).items()]
    if not peer_rows:
        return []
    lines = [
        "",
        "Decode beside peers in the same rounds: llama.cpp (llama-cpp-python, same threads, batch 1; its ceiling = "
        "bandwidth ÷ its GGUF's bytes) and, for int8, TinyGPT in bfloat16 (the same cache)",
        "| dtype | TinyGPT | TinyGPT tok/s | peer | peer tok/s | TinyGPT/peer | pairs | GB/s "
        "| TinyGPT % of ceiling | peer % of ceiling |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row, name, peer in peer_rows:
        peer_name = f"{name} GGUF" if name.startswith("llama.cpp") else name
        lines.append(
            f"| {row['dtype']} | {row['measure']} | {row['tinygpt_tok_s']:,.1f} | {peer_name} "
            f"| {peer['tok_s']:,.1f} | {peer['ratio']:.2f}× | {_pairs(peer['paired_ratios'])} "
            f"| {row['memory_bandwidth_GBps']:.0f} "
            f"| {_percent_with_rounds(row['tinygpt_of_ceiling'], row['tinygpt_of_ceiling_by_round'])} "
            f"| {_percent_with_rounds(peer['of_ceiling'], peer['of_ceiling_by_round'])} |"
        )
    return lines


def _notes(result: dict) -> list[str]:
    lines = list(result.get("left_out", []))
    if gemv := result.get("int8_gemv"):
        lines.append(
            f"int8 products compiled as in the int8 step (one row, from memory): {gemv['products']} of the "
            f"step's shapes one after another {gemv['products_GBps']:.1f} GB/s, one of "
            f"{gemv['one_product_rows']:,} rows {gemv['one_product_GBps']:.1f} GB/s; probe {gemv['probe_GBps']:.1f} GB/s"
        )
    if machine := result.get("machine"):
        line = f"{cpu_line(machine)}; torch {machine['torch']}, transformers {machine['transformers']}"
        if machine.get("emulated"):
            line += f"; EMULATED {machine['emulated']}: {AVX2_EMULATION}, inductor simdlen {AVX2_SIMDLEN}"
        lines.append(line)
    if build := result.get("llama_cpp_build"):
        lines.append(f"llama.cpp {build['version']}, built with {' '.join(build['built_with'])}")
        if build["missing_here"] or build["unused_here"]:
            lines.append(
                "llama.cpp was built for another CPU: it uses "
                f"{' '.join(build['missing_here']) or 'nothing'} this CPU lacks and leaves out "
                f"{' '.join(build['unused_here']) or 'nothing'} this CPU has (pip's wheel cache keeps a build: "
                "`pip cache remove llama_cpp_python`, then rebuild its venv)"
            )
    for outtype, reason in result.get("llama_cpp_unavailable", {}).items():
        lines.append(f"llama.cpp {outtype}: not run here ({reason})")
    for best in result.get("fastest_decode", []):
        lines.append(
            f"{best['dtype']} {best['decode']}: TinyGPT's fastest ({best['tinygpt_measure']}) "
            f"{best['tinygpt_tok_s']:,.1f} tok/s = {best['ratio']:.2f}× HF GPT-2's default generate "
            f"({best['hf_default_tok_s']:,.1f} tok/s), {100 * best['tinygpt_of_ceiling']:.0f} % of the ceiling"
        )
    for name, measured in result.get("from_pretrained", {}).items():
        lines.append(
            f"from_pretrained {name}: {measured['wall_s']:.2f} s, peak RSS +{measured['peak_added'] / 2**20:,.0f} MiB "
            f"({measured['peak_added_per_weight_byte']:.2f}× the weights)"
        )
    return lines


def format_speed_report(result: dict) -> str:
    """The rows, the peers beside TinyGPT, then one line per note (int8 products, llama.cpp types left out, the
    fastest decode against HF's default, from_pretrained costs)."""
    return "\n".join(_rows_table(result) + _peers_table(result) + _notes(result))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a GPT-2 folder (default: GPT-2 small's shape, random weights, made here)")
    parser.add_argument("--json", help="also write the measurements here")
    parser.add_argument("--repeats", type=int, default=SpeedSettings.repeats)
    parser.add_argument("--new-tokens", type=int, default=SpeedSettings.new_tokens)
    parser.add_argument("--dtypes", nargs="+", choices=list(SpeedSettings.dtypes), default=list(SpeedSettings.dtypes))
    parser.add_argument(
        "--caches",
        nargs="+",
        choices=list(DECODE_CACHES),
        default=list(DECODE_CACHES),
        help="how decode rows generate (default: all three)",
    )
    parser.add_argument(
        "--llama-cpp",
        action="store_true",
        help="batch-1 decode of llama.cpp (f32, f16, q8_0 GGUFs) beside ours, in the same rounds; "
        "builds its venv on first use (scripts/bench/engines.py; a long compile, once)",
    )
    parser.add_argument(
        "--tiny", action="store_true", help="tiny model, short inputs, no autotuning: checks the script only"
    )
    parser.add_argument(
        "--decode-batches",
        type=int,
        nargs="+",
        default=list(SpeedSettings.decode_batches),
        help="batch sizes of the decode rows (default: 1 8; llama.cpp joins batch 1)",
    )
    parser.add_argument(
        "--emulate-avx2",
        action="store_true",
        help="measure as a CPU with AVX2 and no AVX-512 would (ATen, oneDNN and inductor capped at AVX2, llama.cpp "
        "compiled for AVX2); the figures say emulated",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="this many separate runs, each in a fresh process, then every figure's median and range over them",
    )
    args = parser.parse_args(argv)
    if args.emulate_avx2:
        restart_emulating_avx2("scripts.bench.speed_benchmark", argv)
    if args.runs > 1:
        child_argv = ["--repeats", str(args.repeats), "--new-tokens", str(args.new_tokens)]
        child_argv += ["--dtypes", *args.dtypes, "--caches", *args.caches]
        child_argv += ["--decode-batches", *map(str, args.decode_batches)]
        child_argv += ["--model", args.model] * bool(args.model) + ["--llama-cpp"] * args.llama_cpp
        child_argv += ["--tiny"] * args.tiny + ["--emulate-avx2"] * args.emulate_avx2
        with tempfile.TemporaryDirectory() as work:
            results = separate_runs(args.runs, child_argv, Path(work))
        combined = across_runs(results)
        print(format_across_runs(results, combined))
        if args.json:
            Path(args.json).write_text(json.dumps({"runs": results, "across_runs": combined}, indent=2) + "\n")
        return
    settings = TINY if args.tiny else SpeedSettings(repeats=args.repeats, new_tokens=args.new_tokens)
    settings = replace(settings, dtypes=tuple(args.dtypes), caches=tuple(args.caches))
    if not args.tiny:
        settings = replace(settings, decode_batches=tuple(args.decode_batches))
    run_speed_benchmark(
        settings,
        args.model,
        args.json,
        gpt2_config=TINY_GPT2 if args.tiny else None,
        llama_cpp=args.llama_cpp,
        emulate_avx2=args.emulate_avx2,
    )


if __name__ == "__main__":
    main()
