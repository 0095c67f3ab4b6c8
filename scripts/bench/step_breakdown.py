"""Where a decoding step of TinyGPT's CompiledDecoder spends its time: every weight product (by kind, with the GB/s at
which it reads its weights, against the memory probe), attention and the other compiled kernels, the compiled step's
call (dynamo's lookup, guards, the graph's wrapper), eager ops around it, and what the profiler does not see
(generate's Python); and how many GEMM kernels inductor generated with AMX tiles, which it ranks first wherever the
CPU has them. The speed benchmark says how fast a step is; this says where its time goes. scripts/README.md,
"Where a step's time goes", has what it found. With `--rounds N` it also times, without the profiler and in the
same rounds between memory probes, a step of `generate`, the compiled forward alone and the weight products alone
(what `generate`'s loop adds, and what the step's other kernels and its call add). The profiler's own cost per kernel
event lands mostly in "compiled step's call", several times what the call costs unprofiled (scripts/measurement_log.md,
"bf16 at batch 1 on AVX-512 BF16"): read the call's cost from the rounds.

    python -m scripts.bench.step_breakdown [--model GPT2_FOLDER] [--dtypes bfloat16 int8] [--batches 1 8] [--rounds N]
                                     [--json OUT.json]
    python -m scripts.bench.step_breakdown --tiny                  # a smoke run on a tiny model, no autotuning
"""

import argparse
import functools
import json
import re
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

import torch
from torch._dynamo.utils import counters  # private: inductor counts its AMX GEMM kernels there, and nowhere public

from hf_tinygpt import TinyGPTForCausalLM
from hf_tinygpt.convert.verify import random_gpt2_folder
from hf_tinygpt.generate.compiled_decoding import CompiledDecoder
from scripts.bench.measure import cpu_line, machine, memory_bandwidth, timed
from scripts.bench.speed_benchmark import TINY_GPT2, load_options, tensor_bytes

# The profiler's names for a weight product: ATen's and ours (eager, or a compiled step's extern kernel) and, with
# inductor's kernel profiling on, its own GEMM templates ("graph_0_gemm_m1n768k768_kernel", "graph_1_kernel", or with
# an epilogue fused in "graph_0_gemm_m1n768k768_cpp_fused_add_gelu_...") and the kernels it fuses an int8 product into
# ("graph_1_cpp_fused__weight_int8pack_mm_add_gelu_..."); its other kernels are "graph_N_cpp_fused_...".
EXTERN_PRODUCTS = {
    "aten::mm",
    "aten::addmm",
    "mkldnn::_linear_pointwise",
    "aten::_weight_int8pack_mm",
    "hf_tinygpt::int8_dot_products",
    "hf_tinygpt_avx2::bf16_products",
    "hf_tinygpt_avx2::int8_products",
}
COMPILED_KERNEL = re.compile(r"graph_\d+_")
COMPILED_PRODUCT = re.compile(r"graph_\d+_(gemm_|cpp_fused__weight_int8pack_mm)")
# What it costs to enter a compiled step: dynamo's cache lookup and guards, the compiled region, the graph's wrappers.
STEP_CALL_EVENTS = ("TorchDynamo Cache Lookup", "Torch-Compiled Region", "## Call CompiledFxGraph", "AOTDispatcher")

TOP_EVENTS = 12  # the costliest profiler events per step, by name, kept in the results (which kernels ran)
PARTS = ("products", "attention kernels", "other compiled kernels", "compiled step's call", "eager ops")


def event_part(name: str) -> str:
    """Which of `PARTS` a profiler event of this name belongs to."""
    if (
        name in EXTERN_PRODUCTS
        or COMPILED_PRODUCT.match(name)
        or (COMPILED_KERNEL.match(name) and "cpp_fused" not in name)
    ):
        return "products"
    if COMPILED_KERNEL.match(name):
        return "attention kernels" if "softmax" in name else "other compiled kernels"
    return "compiled step's call" if name.startswith(STEP_CALL_EVENTS) else "eager ops"


def weight_products(model) -> list[tuple[str, int]]:
    """(kind, weight bytes) of every linear layer in the order a step multiplies them: the blocks' ("attn.c_attn",
    ...), then the head ("lm_head")."""
    linears = [(name, module) for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)]
    return [(re.sub(r"^transformer\.h\.\d+\.", "", name), tensor_bytes(module.weight)) for name, module in linears]


def greedy_decoding(decoder, ids):
    """`generate(max_new_tokens=N)`: the decoder's greedy decoding of `ids` to exactly N new tokens (no EOS)."""
    options = dict(eos_token_id=None, do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(ids))
    return functools.partial(decoder.generate, ids, **options)


def seconds_per_step(generate, new_tokens: int) -> float:
    """A `generate` of `new_tokens` + 1 tokens less one of 1 (the prefill alone, run last), per token."""
    return (
        timed(lambda: generate(max_new_tokens=new_tokens + 1)) - timed(lambda: generate(max_new_tokens=1))
    ) / new_tokens


def _profiled(generate, new_tokens: int):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        wall = timed(lambda: generate(max_new_tokens=new_tokens))
    events = sorted(profile.events(), key=lambda event: event.time_range.start)
    return wall, [(event.name, event_part(event.name), event.self_cpu_time_total / 1e6) for event in events]


def _products_by_kind(products: list[tuple[str, int]], long_events, short_events, new_tokens: int):
    """The last `new_tokens` steps' product calls of the long run, matched in order to `products` (`calls` per
    weight), summed by kind: ({kind: {weights, bytes, s, GBps}}, calls), or ({}, None) where they do not match."""
    long_products = [seconds for _, part, seconds in long_events if part == "products"]
    prefill = sum(part == "products" for _, part, _ in short_events)
    calls, left = divmod(len(long_products) - prefill, new_tokens * len(products))
    if not calls or left:
        return {}, None
    steps = torch.tensor(long_products[prefill:]).reshape(new_tokens, len(products), calls).sum(-1)
    by_kind = {}
    for (kind, weight_bytes), seconds in zip(products, steps.mean(0).tolist(), strict=True):
        entry = by_kind.setdefault(kind, {"weights": 0, "bytes": 0, "s": 0.0})
        entry["weights"] += 1
        entry["bytes"] += weight_bytes
        entry["s"] += seconds
    return {kind: entry | {"GBps": entry["bytes"] / entry["s"] / 1e9} for kind, entry in by_kind.items()}, calls


def step_breakdown(model, batch: int, new_tokens: int, prompt_length: int = 32, autotune: bool = True) -> dict:
    """One CompiledDecoder of `model` for `batch`, profiled over a `generate` of `new_tokens` + 1 and of 1 (the
    prefill alone): the difference, per step. Every profiled event's own time goes to one of `PARTS`; "unprofiled"
    is the rest of the wall time. The products' events are matched, in order, to `weight_products` (several calls
    per weight where a product is split); without a match only their total is given."""
    amx_before = counters["inductor"]["cpp_micro_gemm_amx_counter"]
    # Inductor's own switch for a profiler event per compiled kernel; without it the step is one event.
    with torch._inductor.config.patch({"cpp.enable_kernel_profile": True}):
        decoder = CompiledDecoder(model, batch_size=batch, max_length=prompt_length + new_tokens + 1, autotune=autotune)
    amx_kernels = counters["inductor"]["cpp_micro_gemm_amx_counter"] - amx_before
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt_length))
    generate = greedy_decoding(decoder, ids)
    generate(max_new_tokens=new_tokens + 1)
    plain = [seconds_per_step(generate, new_tokens) for _ in range(3)]
    (long_wall, long_events), (short_wall, short_events) = _profiled(generate, new_tokens + 1), _profiled(generate, 1)
    per_step, per_name = defaultdict(float), defaultdict(float)
    for events, sign in ((long_events, 1), (short_events, -1)):
        for name, part, seconds in events:
            per_step[part] += sign * seconds / new_tokens
            per_name[name] += sign * seconds / new_tokens
    products = weight_products(model)
    by_kind, calls = _products_by_kind(products, long_events, short_events, new_tokens)
    if by_kind:  # the steps' own product calls, rather than the difference of two runs' (their prefills differ)
        per_step["products"] = sum(entry["s"] for entry in by_kind.values())
    profiled_s = (long_wall - short_wall) / new_tokens
    parts = {part: per_step[part] for part in PARTS} | {"unprofiled": profiled_s - sum(per_step.values())}
    return {
        "batch": batch,
        "new_tokens": new_tokens,
        "step_s": statistics.median(plain),
        "profiled_step_s": profiled_s,
        "parts_s": parts,
        "product_calls_per_weight": calls,
        "amx_gemm_kernels_generated": amx_kernels,
        "int8_dot_products": decoder.int8_dot_products,
        "products": by_kind,
        "weight_bytes": sum(weight_bytes for _, weight_bytes in products),
        "top_events_s": dict(sorted(per_name.items(), key=lambda item: -item[1])[:TOP_EVENTS]),
    }


class ProductsInOrder(torch.nn.Module):
    """A model's linear layers, each applied to an input of its own: the weight products of a step, one after
    another, without the kernels between them."""

    def __init__(self, model):
        super().__init__()
        self.linears = torch.nn.ModuleList(m for m in model.modules() if isinstance(m, torch.nn.Linear))

    def forward(self, inputs):
        return [linear(x) for linear, x in zip(self.linears, inputs, strict=True)]


def nested_timings(
    model,
    batch: int,
    new_tokens: int,
    rounds: int,
    prompt_length: int = 32,
    autotune: bool = True,
    probe_bytes: int = 512 * 2**20,
) -> list[dict]:
    """`rounds` rounds, each between two memory probes, of three timings without the profiler, each a part of the
    one before: a `generate` step of a CompiledDecoder (difference of `new_tokens` + 1 tokens and 1, per token); its
    compiled forward alone, called `new_tokens` times after a prefill with one decoding step's inputs, as `generate`
    makes them (the positions advance with the cache, the mask stays that of the first step); the products alone,
    the decoder's linear layers one after another, compiled under the settings its step compiled under (best of
    5). The differences are what `generate`'s loop adds, and what the step's other kernels and dynamo's call add."""
    if not rounds:
        return []
    decoder = CompiledDecoder(model, batch_size=batch, max_length=prompt_length + new_tokens + 1, autotune=autotune)
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt_length))
    generate = greedy_decoding(decoder, ids)
    step_inputs = []
    prepare = decoder.model.prepare_inputs_for_generation

    @functools.wraps(prepare)  # generate checks its arguments against this signature
    def recording(*args, **kwargs):
        step_inputs.append(prepare(*args, **kwargs))
        return step_inputs[-1]

    decoder.model.prepare_inputs_for_generation = recording  # the decoder's private copy: no one else calls it
    generate(max_new_tokens=2)
    del decoder.model.prepare_inputs_for_generation
    forward, inputs = decoder.model.get_compiled_call(decoder.compile_config), step_inputs[-1]
    products = ProductsInOrder(decoder.model).eval()
    activations = [torch.randn(batch, 1, linear.in_features).to(model.dtype) for linear in products.linears]
    with torch.no_grad(), torch._inductor.config.patch(decoder.inductor_settings):
        products_step = torch.compile(products, fullgraph=True, dynamic=False)
        products_step(activations)

    def forward_steps():
        with torch.no_grad():
            for _ in range(new_tokens):
                forward(**inputs, return_dict=True)

    results = []
    for _ in range(rounds):
        probe = memory_bandwidth(probe_bytes) / 1e9
        # Its prefill alone runs last: the forward's calls go on from that cache, where a decode's steps would.
        generate_step_s = seconds_per_step(generate, new_tokens)
        forward_s = timed(forward_steps) / new_tokens
        with torch.no_grad():
            products_s = min(timed(lambda: products_step(activations)) for _ in range(5))
        results.append(
            {
                "probes_GBps": [probe, memory_bandwidth(probe_bytes) / 1e9],
                "generate_step_s": generate_step_s,
                "forward_alone_s": forward_s,
                "products_alone_s": products_s,
            }
        )
    return results


def run_step_breakdown(
    folder: str,
    dtypes,
    batches,
    new_tokens: int,
    autotune: bool = True,
    probe_bytes: int = 512 * 2**20,
    rounds: int = 0,
) -> dict:
    """`step_breakdown` of TinyGPT loaded from `folder` in each of `dtypes`, at each of `batches`, with the memory
    probe read before and after each: this machine's bandwidth swings within minutes, and a product is set against
    the higher of the two. With `rounds`, each row also gets `nested_timings`."""
    rows = []
    for dtype in dtypes:
        model = TinyGPTForCausalLM.from_pretrained(folder, **load_options(dtype)).eval()
        for batch in batches:
            before = memory_bandwidth(probe_bytes) / 1e9
            row = step_breakdown(model, batch, new_tokens, autotune=autotune)
            probes = [before, memory_bandwidth(probe_bytes) / 1e9]
            row["rounds"] = nested_timings(model, batch, new_tokens, rounds, autotune=autotune, probe_bytes=probe_bytes)
            rows.append({"dtype": dtype, "probes_GBps": probes, "probe_GBps": max(probes)} | row)
    return {"threads": torch.get_num_threads(), "rows": rows, "machine": machine()}


def format_step_breakdown(result: dict) -> str:
    lines = [f"# Where a CompiledDecoder step's time goes ({cpu_line(result['machine'])}, {result['threads']} threads)"]
    for row in result["rows"]:
        step = row["profiled_step_s"]
        lines += [
            "",
            f"## {row['dtype']}, batch {row['batch']}: {row['step_s'] * 1e3:.2f} ms a step ({step * 1e3:.2f} profiled);"
            f" the weights at {row['weight_bytes'] / row['step_s'] / 1e9:.1f} GB/s over the whole step;"
            f" probe {row['probes_GBps'][0]:.1f} and {row['probes_GBps'][1]:.1f} GB/s before and after",
            "",
            "| part | ms / step | share | weights | GB/s | % of the higher probe |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for kind, entry in row["products"].items():
            percent = 100 * entry["GBps"] / row["probe_GBps"]
            lines.append(
                f"| {kind} | {entry['s'] * 1e3:.3f} | {entry['s'] / step:.0%} | {entry['weights']} |"
                f" {entry['GBps']:.1f} | {percent:.0f} % |"
            )
        for part, seconds in row["parts_s"].items():
            label = "products, all" if part == "products" else part
            lines.append(f"| {label} | {seconds * 1e3:.3f} | {seconds / step:.0%} | | | |")
        top = ", ".join(f"{name[:60]} {seconds * 1e3:.2f}" for name, seconds in row["top_events_s"].items())
        lines.append(f"\nCostliest events (ms / step): {top}")
        if row["int8_dot_products"]:
            lines.append("Its int8 products ran on `int8_dot_products` (AVX-512 BF16 dot products).")
        if row["amx_gemm_kernels_generated"]:
            lines.append(f"Inductor generated {row['amx_gemm_kernels_generated']} GEMM kernels with AMX tiles for it.")
        if row["product_calls_per_weight"] is None:
            lines.append("\nThe product calls did not match the weights one to one: only their total is given.")
        if row["rounds"]:
            lines += [
                "",
                "Unprofiled, round by round (ms; in brackets the weights' bytes ÷ the time, as % of the probe before):",
                "",
                "| probe before, after (GB/s) | generate's step | forward alone | products alone |",
                "|---|---:|---:|---:|",
            ]
        for timing in row["rounds"]:
            before, after = timing["probes_GBps"]
            cells = [
                f"{timing[key] * 1e3:.2f} ({100 * row['weight_bytes'] / timing[key] / 1e9 / before:.0f} %)"
                for key in ("generate_step_s", "forward_alone_s", "products_alone_s")
            ]
            lines.append(f"| {before:.1f}, {after:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a GPT-2 folder (default: GPT-2 small's shape, random weights, made here)")
    parser.add_argument("--dtypes", nargs="+", choices=["float32", "bfloat16", "int8"], default=["bfloat16", "int8"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=0, help="unprofiled rounds of nested timings per row")
    parser.add_argument("--json", help="also write the measurements here")
    parser.add_argument("--tiny", action="store_true", help="tiny model, few tokens, no autotuning: checks the script")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.model or random_gpt2_folder(str(Path(scratch) / "gpt2"), **(TINY_GPT2 if args.tiny else {}))
        result = run_step_breakdown(
            folder,
            args.dtypes,
            args.batches,
            4 if args.tiny else args.new_tokens,
            autotune=not args.tiny,
            probe_bytes=2**20 if args.tiny else 512 * 2**20,
            rounds=args.rounds,
        )
    print(format_step_breakdown(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
