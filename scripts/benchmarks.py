"""Measurements that need a fresh interpreter: wall time and peak memory of loading and converting checkpoints.

Each operation runs in its own Python process so that one measurement's allocations (and the allocator's cached
pages) cannot hide or inflate another's. Peak RSS is read from Linux's VmHWM after resetting it once the imports
are done, so the figure is what the operation itself added, not what importing torch costs.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

_CHILD = r"""
import json, re, sys, time
def status(field):
    with open("/proc/self/status") as f:
        return int(re.search(field + r":\s+(\d+) kB", f.read()).group(1)) * 1024
{setup}
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset VmHWM: the peak from here on is the operation's
rss_before = status("VmRSS")
start = time.perf_counter()
{statement}
wall = time.perf_counter() - start
print("MEASURED " + json.dumps({{"wall_s": wall, "rss_before": rss_before, "peak_rss": status("VmHWM")}}))
"""


def measure_in_subprocess(setup: str, statement: str) -> dict:
    """Run `setup` then `statement` in a fresh interpreter and return the statement's wall time (`wall_s`), the
    RSS just before it (`rss_before`), its peak RSS (`peak_rss`) and the growth `peak_added` (bytes)."""
    code = _CHILD.format(setup=textwrap.dedent(setup), statement=textwrap.dedent(statement))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("MEASURED ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"measured subprocess failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(lines[-1].removeprefix("MEASURED "))
    result["peak_added"] = result["peak_rss"] - result["rss_before"]
    return result


def weights_bytes(folder: str | os.PathLike) -> int:
    """Bytes of a model folder's weight files (safetensors or pickles, sharded or not)."""
    names = ("model", "pytorch_model")
    return sum(p.stat().st_size for p in Path(folder).iterdir() if p.name.startswith(names) and p.suffix != ".json")


_IMPORTS = """
import torch
from transformers import GPT2LMHeadModel
from hf_tinygpt import TinyGPTForCausalLM
from hf_tinygpt.checkpoints.convert import gpt2_to_tinygpt
"""


def measure_load(model_class: str, folder: str | os.PathLike) -> dict:
    """`model_class.from_pretrained(folder)` in a fresh process, then one read of every weight (so memory-mapped
    tensors count in full): its wall time and peak RSS, as `measure_in_subprocess` gives them."""
    touch = "sum(float(p.float().sum()) for p in model.parameters())"
    return measure_in_subprocess(_IMPORTS, f"model = {model_class}.from_pretrained({str(folder)!r})\n{touch}")


def conversion_benchmark(work_dir: str | os.PathLike, gpt2_config: dict | None = None, seed: int = 0) -> dict:
    """Wall time and peak RSS of converting a GPT-2 checkpoint (made here with random weights, GPT-2 small's
    shape unless `gpt2_config` says otherwise) and of loading it, relative to the checkpoint's bytes.

    Rows: conversion from `model.safetensors` and from `pytorch_model.bin`; `TinyGPTForCausalLM.from_pretrained` of
    the converted folder and of the GPT-2 folder itself (converted on the fly); transformers' own
    `GPT2LMHeadModel.from_pretrained` of the same folder as the reference. Loads are followed by one read of every
    weight, so memory-mapped tensors count in full."""
    from transformers import GPT2LMHeadModel

    from hf_tinygpt.checkpoints.verify import random_gpt2_folder

    work = Path(work_dir)
    gpt2_st, gpt2_bin = work / "gpt2-safetensors", work / "gpt2-bin"
    random_gpt2_folder(str(gpt2_st), seed=seed, **(gpt2_config or {}))
    GPT2LMHeadModel.from_pretrained(gpt2_st).save_pretrained(gpt2_bin, safe_serialization=False)
    tiny = work / "tinygpt"
    checkpoint_bytes = weights_bytes(gpt2_st)
    # (label, statement); each runs in a fresh process after _IMPORTS
    operations = [
        (
            "convert model.safetensors → tinygpt",
            f"gpt2_to_tinygpt({str(gpt2_st)!r}, {str(tiny)!r}, tokenizer='gpt2', force=True)",
        ),
        (
            "convert pytorch_model.bin → tinygpt",
            f"gpt2_to_tinygpt({str(gpt2_bin)!r}, {str(tiny)!r}, tokenizer='gpt2', force=True)",
        ),
    ]
    loads = [
        ("TinyGPT from_pretrained(tinygpt folder)", "TinyGPTForCausalLM", tiny),
        ("TinyGPT from_pretrained(GPT-2 folder)", "TinyGPTForCausalLM", gpt2_st),
        ("GPT2LMHeadModel from_pretrained (reference)", "GPT2LMHeadModel", gpt2_st),
    ]
    measurements = [(label, measure_in_subprocess(_IMPORTS, statement)) for label, statement in operations]
    measurements += [(label, measure_load(model_class, folder)) for label, model_class, folder in loads]
    rows = []
    for label, measured in measurements:
        rows.append(
            {
                "operation": label,
                **measured,
                "peak_added_per_checkpoint_byte": measured["peak_added"] / checkpoint_bytes,
            }
        )
    return {"checkpoint_bytes": checkpoint_bytes, "rows": rows}


def format_conversion_table(result: dict) -> str:
    mib = 2**20
    lines = [
        f"checkpoint: {result['checkpoint_bytes'] / mib:,.0f} MiB of weights",
        f"| {'operation':<44} | wall s | peak RSS MiB | added MiB | added / checkpoint |",
        f"|{'-' * 46}|-------:|-------------:|----------:|-------------------:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['operation']:<44} | {row['wall_s']:6.2f} | {row['peak_rss'] / mib:12,.0f} "
            f"| {row['peak_added'] / mib:9,.0f} | {row['peak_added_per_checkpoint_byte']:17.2f}× |"
        )
    return "\n".join(lines)


def run_conversion_benchmark(out_json: str | None = None, **kwargs) -> dict:
    with tempfile.TemporaryDirectory() as work:
        result = conversion_benchmark(work, **kwargs)
    print(format_conversion_table(result))
    if out_json:
        Path(out_json).write_text(json.dumps(result, indent=2) + "\n")
    return result


# ---- speed: TinyGPT against transformers' GPT-2 on the same weights ----------------------------------------------


def memory_bandwidth(bytes_: int = 512 * 2**20, repeats: int = 5) -> float:
    """Bytes/s this machine reads from memory: the best of `repeats` sums over a buffer far larger than the caches
    (reading, as a decoding step reads its weights; a copy would also count writes).

    On the shared machine this was written on, the figure drifts between about 35 and 68 GB/s over minutes, so
    the speed benchmark measures it again inside every decode row's repeats."""
    import torch

    source = torch.ones(bytes_ // 4)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        source.sum()
        best = min(best, time.perf_counter() - start)
    return bytes_ / best


def block_products(model) -> list[tuple[int, int]]:
    """(rows, columns) of every weight in `model`'s blocks, in the order a decoding step multiplies them."""
    import torch

    return [tuple(m.weight.shape) for m in model.transformer.h.modules() if isinstance(m, torch.nn.Linear)]


def int8_gemv_bandwidth(
    products: list[tuple[int, int]], one_product_bytes: int = 128 * 2**20, repeats: int = 5
) -> dict:
    """Bytes/s at which the int8 products of a CompiledDecoder's int8 step read their weights from memory: the op
    TinyGPT's `Linear` emits for a few rows (`_weight_int8pack_mm`, one row of bf16 activations), compiled with the
    decoder's settings (inductor's CPP GEMM template), in one compiled call. `products_GBps`: the `products` (rows,
    columns) one after another, as a step multiplies its block weights (`block_products`: GPT-2 small's 48, of
    0.6–2.4 MB); `one_product_GBps`: a single weight of `one_product_bytes`; `probe_GBps`: `memory_bandwidth` right
    after.

    Where the first is well below the second, a step loses time at every product it starts (threads, ramp-up), not
    in reading; where the second is below the probe, the kernel cannot keep up with memory."""
    import torch

    from hf_tinygpt.tools.compiled_decoding import DYNAMO_SETTINGS, GEMV_AUTOTUNE_SETTINGS, INDUCTOR_SETTINGS

    generator = torch.Generator().manual_seed(0)

    class Int8Products(torch.nn.Module):
        def __init__(self, shapes):
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

    inputs = {str(c): torch.randn(1, c, generator=generator).to(torch.bfloat16) for c in {c for _, c in products}}
    cases = {"products": products, "one_product": [(one_product_bytes // products[0][1], products[0][1])]}
    result = {"products": len(products), "one_product_rows": cases["one_product"][0][0]}
    settings = INDUCTOR_SETTINGS | GEMV_AUTOTUNE_SETTINGS
    with torch.no_grad(), torch._inductor.config.patch(settings), torch._dynamo.config.patch(DYNAMO_SETTINGS):
        for name, shapes in cases.items():
            eager = Int8Products(shapes).eval()
            compiled = torch.compile(eager, fullgraph=True)
            # The compiled kernels must compute the products, or their speed means nothing (bf16: ~3 digits).
            for got, want in zip(compiled(inputs), eager(inputs), strict=True):
                torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * want.abs().max().item())
            weight_bytes = sum(weight.numel() for weight in eager.weights)
            calls = max(3, 256 * 2**20 // weight_bytes)  # ~256 MB read per timing
            run = lambda step=compiled, calls=calls: [step(inputs) for _ in range(calls)]  # noqa: E731
            best = min(_timed(run) for _ in range(repeats)) / calls
            result[f"{name}_GBps"] = weight_bytes / best / 1e9
    result["probe_GBps"] = memory_bandwidth() / 1e9
    return result


def _tensor_bytes(tensor) -> int:
    """Bytes a tensor holds; for a quantized tensor subclass (torchao's), those of the tensors it is made of."""
    if hasattr(tensor, "__tensor_flatten__"):
        inner = (getattr(tensor, name) for name in tensor.__tensor_flatten__()[0])
        return sum(_tensor_bytes(t) for t in inner if t is not None)
    return tensor.numel() * tensor.element_size()


def _decode_bytes_per_step(model) -> int:
    """Weights read for one decoding step: every parameter once (the tied embedding is read as the head)."""
    return sum(_tensor_bytes(p) for p in model.parameters())


def _ceiling_tok_s(bandwidth: float, step_bytes: int, batch: int) -> float:
    """Tokens/s if a decoding step only read its weights, at `bandwidth` bytes/s."""
    return bandwidth / step_bytes * batch


def _of_ceiling_by_round(rounds: dict, name: str, step_bytes: int, batch: int) -> list[float]:
    """`name`'s fraction of the ceiling in each round, against the probe taken just before it: the probe swings within
    minutes (32 to 59 GB/s between two rounds of one row) while a decoder's speed hardly moves."""
    return [
        tok_s / _ceiling_tok_s(probe * 1e9, step_bytes, batch)
        for tok_s, probe in zip(rounds["tok_s"][name], rounds["probe_GBps"], strict=True)
    ]


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def paired_timings(make_fn, repeats: int, probe=memory_bandwidth, names=("hf", "tinygpt")) -> dict:
    """Time `make_fn(name)()` for each of `names` back to back, `repeats` times, `probe()` before each round.

    Who goes first rotates (HF first in even repeats, when there are two), so that running right after the probe
    favours no one. The ratio is the median of each round's own HF/TinyGPT time ratio (TinyGPT's speed over HF's):
    the runs of a round see the same phase of the machine's drifting bandwidth, which a ratio of two medians would
    not pair up. Any other name (a peer such as llama.cpp) gets its own paired ratios the same way."""
    times, probes = {name: [] for name in names}, []
    for repeat in range(repeats):
        probes.append(probe())
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(_timed(make_fn(name)))
    paired = {name: [theirs / ours for theirs, ours in zip(times[name], times["tinygpt"], strict=True)] for name in names}
    timed = {"times": times, "probes": probes, "paired_ratios": paired["hf"], "ratio": statistics.median(paired["hf"])}
    peers = [name for name in names if name not in ("hf", "tinygpt")]
    if peers:
        timed["peers"] = {
            name: {"paired_ratios": paired[name], "ratio": statistics.median(paired[name])} for name in peers
        }
    return timed


class LlamaCppTimer:
    """llama.cpp (llama-cpp-python from PyPI, in its own venv: scripts/engines.py) decoding one prompt greedily on
    request, in a worker process that stays up so that its runs interleave with TinyGPT's in the same rounds.

    The GGUFs are made the way a user would make them: `hf-tinygpt convert --to gpt2` of the GPT-2 folder, then
    llama.cpp's own convert_hf_to_gguf.py, one per type. A type whose first run fails (q8_0 died with SIGILL in one
    build of llama.cpp on this CPU) is left out, with the reason in `unavailable`."""

    def __init__(
        self,
        gpt2_folder: str,
        work: Path,
        prompt: list[int],
        new_tokens: int,
        threads: int,
        types=("f32", "f16", "q8_0"),
    ):
        from engines import WORKER, WORKER_ENV, convert_to_gguf, llama_cpp_engine, worker_result, write_inputs

        from hf_tinygpt.checkpoints.convert import export_tinygpt

        engine = llama_cpp_engine()
        export_tinygpt(gpt2_folder, str(work / "gpt2-export"), to="gpt2", verify_tolerance=1e-5)
        inputs = write_inputs(work / "llama_inputs.json", [prompt], new_tokens)
        one_token = write_inputs(work / "one_token.json", [prompt], 1)
        self.ggufs, self.unavailable = {}, {}
        for outtype in types:
            gguf = convert_to_gguf(engine, work / "gpt2-export", work / f"model-{outtype}.gguf", outtype)
            try:  # a one-token run in a process of its own: a crash there must not take the timer down
                worker_result(engine[0], "llama_cpp", gguf, one_token)
                self.ggufs[outtype] = gguf
            except RuntimeError as failed:
                self.unavailable[outtype] = str(failed).splitlines()[-1][-300:]
        self.gguf_bytes = {outtype: gguf.stat().st_size for outtype, gguf in self.ggufs.items()}
        self.process = subprocess.Popen(
            [str(engine[0]), str(WORKER), "llama_cpp_timer", str(threads), *map(str, self.ggufs.values()), str(inputs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **WORKER_ENV},
        )
        self.index = {outtype: i for i, outtype in enumerate(self.ggufs)}
        self.prompt_length, self.new_tokens = len(prompt), new_tokens
        self._read()  # loaded

    def _read(self) -> dict:
        from engine_worker import RESULT

        for line in self.process.stdout:
            if line.startswith(RESULT):
                return json.loads(line.removeprefix(RESULT))
        raise RuntimeError(f"llama.cpp's timer ended (exit {self.process.wait()})")

    def run(self, outtype: str) -> dict:
        self.process.stdin.write(f"{self.index[outtype]}\n")
        self.process.stdin.flush()
        result = self._read()
        if len(result["tokens"]) != self.new_tokens:
            raise RuntimeError(f"llama.cpp {outtype} made {len(result['tokens'])} tokens, not {self.new_tokens}")
        # The same work as `generate`'s: the whole prompt in one prefill, then a decoding step per further token
        # (llama.cpp reports a count of 0 as 1).
        done = (result["prompt_tokens_evaluated"], result["decoding_steps"])
        expected = (max(1, self.prompt_length), max(1, self.new_tokens - 1))
        if done != expected:
            raise RuntimeError(
                f"llama.cpp {outtype} evaluated {done[0]} prompt tokens and {done[1]} decoding steps; "
                f"a run is {expected[0]} and {expected[1]}."
            )
        return result

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.write("\n")
            self.process.stdin.close()
            self.process.wait(timeout=60)


# Which GGUF a decode row of each dtype is set beside: the same bytes per weight, and llama.cpp's 8-bit type.
LLAMA_CPP_PEERS = {"float32": ("f32",), "bfloat16": ("f16", "q8_0"), "int8": ("q8_0", "f16")}

# "int8": weights quantized as they load with `hf_tinygpt.tools.generate.int8_weight_only()` (transformers'
# TorchAoConfig), activations in bfloat16. transformers' GPT-2 gets the same config (it quantizes none of its Conv1D
# projections), and TinyGPT in bfloat16 joins the rounds as a peer: int8's gain over our own bfloat16.
INT8_PEER = "tinygpt bfloat16"


# How decode rows generate: transformers' default (dynamic cache), `cache_implementation="static"`, and a
# CompiledDecoder (static cache + torch.compile, README "Speed").
DECODE_CACHES = {"dynamic": "dynamic cache", "static": "static cache", "compiled": "static cache + torch.compile"}


def speed_benchmark(
    folder: str,
    *,
    dtypes=("float32", "bfloat16"),
    repeats: int = 3,
    prefill_shapes=((1, 1024), (8, 128)),
    decode_batches=(1, 8),
    prompt_length: int = 32,
    new_tokens: int = 128,
    caches=tuple(DECODE_CACHES),
    seed: int = 0,
    llama_cpp: LlamaCppTimer | None = None,
    int8_gemv: dict | None = None,
) -> dict:
    """Side-by-side timings of transformers' GPT2LMHeadModel and TinyGPT loaded from the same GPT-2 `folder`.

    Each measurement is `paired_timings` over `repeats` after a warm-up (two for compiled rows, whose first calls
    compile and then run slower for a while): median tok/s, and the median of the pairs' TinyGPT/HF ratios. Memory
    bandwidth is the probe before each pair, and a decode row's ceiling uses its median. Both models get the same
    treatment in every row; "compiled" decodes through a `CompiledDecoder` for each. With `llama_cpp`, its runs on
    the GGUFs of LLAMA_CPP_PEERS join the rounds of the batch-1 dynamic and compiled decode rows ("peers"). After
    the int8 rows, `int8_gemv_bandwidth` of TinyGPT's block weights (or of `int8_gemv`'s arguments): how fast the
    compiled int8 products read, beside the probe."""
    import torch
    from transformers import GPT2LMHeadModel

    from hf_tinygpt import TinyGPTForCausalLM
    from hf_tinygpt.tools.compiled_decoding import CompiledDecoder
    from hf_tinygpt.tools.generate import int8_weight_only

    torch.manual_seed(seed)
    result = {"threads": torch.get_num_threads(), "rows": []}
    for dtype_name in dtypes:
        int8 = dtype_name == "int8"
        options = dict(dtype=torch.bfloat16 if int8 else getattr(torch, dtype_name), attn_implementation="sdpa")
        quantized = options | {"quantization_config": int8_weight_only()} if int8 else options
        models = {
            "hf": GPT2LMHeadModel.from_pretrained(folder, **quantized).eval(),
            "tinygpt": TinyGPTForCausalLM.from_pretrained(folder, **quantized).eval(),
        }
        if int8:
            models[INT8_PEER] = TinyGPTForCausalLM.from_pretrained(folder, **options).eval()
        vocab = models["hf"].config.vocab_size
        bytes_per_step = _decode_bytes_per_step(models["tinygpt"])

        def run_pair(label, make_fn, tokens, warmups=1, peers=()):
            names = ("hf", "tinygpt", *peers)
            for _ in range(warmups):
                for name in names:
                    make_fn(name)()
            timed = paired_timings(make_fn, repeats, names=names)
            row = {
                "dtype": dtype_name,
                "measure": label,
                "memory_bandwidth_GBps": statistics.median(timed["probes"]) / 1e9,
                "paired_ratios": timed["paired_ratios"],
                "ratio": timed["ratio"],
                "rounds": {
                    "probe_GBps": [probe / 1e9 for probe in timed["probes"]],
                    "tok_s": {name: [tokens / t for t in timed["times"][name]] for name in names},
                },
            }
            for name in ("hf", "tinygpt"):
                row[f"{name}_tok_s"] = tokens / statistics.median(timed["times"][name])
            if peers:
                row["peers"] = {
                    name: {**timed["peers"][name], "tok_s": tokens / statistics.median(timed["times"][name])}
                    for name in peers
                }
            return row

        with torch.inference_mode():
            for batch, length in prefill_shapes:
                ids = torch.randint(0, vocab, (batch, length))

                def prefill(name, ids=ids):
                    return lambda: models[name](ids, use_cache=True, logits_to_keep=1)

                result["rows"].append(run_pair(f"prefill {batch}×{length}", prefill, batch * length))
        decoders = {}
        for cache in caches:
            for batch in decode_batches:
                ids = torch.randint(0, vocab, (batch, prompt_length))

                def decode(name, ids=ids, cache=cache, batch=batch):
                    if name.startswith("llama.cpp "):
                        return lambda: llama_cpp.run(name.removeprefix("llama.cpp "))
                    # Exactly `new_tokens` each: no EOS. (`min_new_tokens` would do it too, but its logits
                    # processor scans the whole vocabulary every step, ~0.15 ms that is neither model's.)
                    kwargs = dict(
                        max_new_tokens=new_tokens,
                        eos_token_id=None,
                        do_sample=False,
                        pad_token_id=0,
                        attention_mask=torch.ones_like(ids),
                    )
                    if cache == "compiled":
                        if (name, batch) not in decoders:
                            decoders[name, batch] = CompiledDecoder(
                                models[name], batch_size=batch, max_length=prompt_length + new_tokens
                            )
                        return lambda: decoders[name, batch].generate(ids, **kwargs)
                    if cache == "static":
                        kwargs["cache_implementation"] = "static"
                    return lambda: models[name].generate(ids, **kwargs)

                peers = [INT8_PEER] if int8 else []
                if llama_cpp is not None and batch == 1 and cache in ("dynamic", "compiled"):
                    peers += [f"llama.cpp {t}" for t in LLAMA_CPP_PEERS.get(dtype_name, ()) if t in llama_cpp.ggufs]
                row = run_pair(
                    f"decode batch {batch}, {DECODE_CACHES[cache]}",
                    decode,
                    batch * new_tokens,
                    warmups=2 if cache == "compiled" else 1,
                    peers=peers,
                )
                bandwidth = row["memory_bandwidth_GBps"] * 1e9
                ceiling = _ceiling_tok_s(bandwidth, bytes_per_step, batch)
                row |= {
                    "batch": batch,
                    "cache": cache,
                    "ceiling_tok_s": ceiling,
                    "hf_of_ceiling": row["hf_tok_s"] / ceiling,
                    "tinygpt_of_ceiling": row["tinygpt_tok_s"] / ceiling,
                    "tinygpt_of_ceiling_by_round": _of_ceiling_by_round(
                        row["rounds"], "tinygpt", bytes_per_step, batch
                    ),
                }
                for name, peer in row.get("peers", {}).items():
                    # llama.cpp reads its whole GGUF per token (the head is the tied token embedding, as ours)
                    peer_bytes = (
                        _decode_bytes_per_step(models[name])
                        if name in models
                        else llama_cpp.gguf_bytes[name.removeprefix("llama.cpp ")]
                    )
                    peer["ceiling_tok_s"] = _ceiling_tok_s(bandwidth, peer_bytes, batch)
                    peer["of_ceiling"] = peer["tok_s"] / peer["ceiling_tok_s"]
                    peer["of_ceiling_by_round"] = _of_ceiling_by_round(row["rounds"], name, peer_bytes, batch)
                result["rows"].append(row)
        if int8:
            result["int8_gemv"] = int8_gemv_bandwidth(
                **{"products": block_products(models["tinygpt"])} | (int8_gemv or {})
            )
    result["fastest_decode"] = fastest_decode(result["rows"])
    return result


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


def _percent_with_rounds(fraction: float, by_round: list[float]) -> str:
    return f"{100 * fraction:.0f} % ({100 * min(by_round):.0f}–{100 * max(by_round):.0f})"


def format_speed_table(result: dict) -> str:
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
        pairs = f"{min(row['paired_ratios']):.2f}–{max(row['paired_ratios']):.2f}"
        lines.append(
            f"| {row['dtype']} | {row['measure']} | {row['hf_tok_s']:,.1f} | {row['tinygpt_tok_s']:,.1f} "
            f"| {row['ratio']:.2f}× | {pairs} | {row['memory_bandwidth_GBps']:.0f} | {ceiling} |"
        )
    peer_rows = [(row, name, peer) for row in result["rows"] for name, peer in row.get("peers", {}).items()]
    if peer_rows:
        lines += [
            "",
            "Decode beside peers in the same rounds: llama.cpp (llama-cpp-python, same threads, batch 1; its ceiling = "
            "bandwidth ÷ its GGUF's bytes) and, for int8, TinyGPT in bfloat16 (the same cache)",
            "| dtype | TinyGPT | TinyGPT tok/s | peer | peer tok/s | TinyGPT/peer | pairs | GB/s "
            "| TinyGPT % of ceiling | peer % of ceiling |",
            "|---|---|---:|---|---:|---:|---:|---:|---:|---:|",
        ]
        for row, name, peer in peer_rows:
            pairs = f"{min(peer['paired_ratios']):.2f}–{max(peer['paired_ratios']):.2f}"
            peer_name = f"{name} GGUF" if name.startswith("llama.cpp") else name
            lines.append(
                f"| {row['dtype']} | {row['measure']} | {row['tinygpt_tok_s']:,.1f} | {peer_name} "
                f"| {peer['tok_s']:,.1f} | {peer['ratio']:.2f}× | {pairs} | {row['memory_bandwidth_GBps']:.0f} "
                f"| {_percent_with_rounds(row['tinygpt_of_ceiling'], row['tinygpt_of_ceiling_by_round'])} "
                f"| {_percent_with_rounds(peer['of_ceiling'], peer['of_ceiling_by_round'])} |"
            )
    if gemv := result.get("int8_gemv"):
        lines.append(
            f"int8 products compiled as in the int8 step (one row, from memory): {gemv['products']} of the "
            f"step's shapes one after another {gemv['products_GBps']:.1f} GB/s, one of "
            f"{gemv['one_product_rows']:,} rows {gemv['one_product_GBps']:.1f} GB/s; probe {gemv['probe_GBps']:.1f} GB/s"
        )
    for outtype, reason in result.get("llama_cpp_unavailable", {}).items():
        lines.append(f"llama.cpp {outtype}: not run here ({reason})")
    for best in result.get("fastest_decode", []):
        lines.append(
            f"{best['dtype']} {best['decode']}: TinyGPT's fastest ({best['tinygpt_measure']}) "
            f"{best['tinygpt_tok_s']:,.1f} tok/s = {best['ratio']:.2f}× HF GPT-2's default generate "
            f"({best['hf_default_tok_s']:,.1f} tok/s), {100 * best['tinygpt_of_ceiling']:.0f} % of the ceiling"
        )
    return "\n".join(lines)


def run_speed_benchmark(
    model: str | None = None,
    out_json: str | None = None,
    gpt2_config: dict | None = None,
    load_memory: bool = True,
    llama_cpp: bool = False,
    **kwargs,
) -> dict:
    """The whole benchmark on `model` (a GPT-2 folder), or on a GPT-2-small-shaped one made here with a seed; with
    `llama_cpp`, llama.cpp's batch-1 decode beside ours (its venv is built on first use: a compile of ~10 min)."""
    import torch

    from hf_tinygpt.checkpoints.verify import random_gpt2_folder

    with tempfile.TemporaryDirectory() as scratch:
        folder = model or random_gpt2_folder(
            str(Path(scratch) / "gpt2"), seed=kwargs.get("seed", 0), **(gpt2_config or {})
        )
        timer = None
        if llama_cpp:
            vocab = json.loads((Path(folder) / "config.json").read_text())["vocab_size"]
            prompt = torch.randint(
                0, vocab, (kwargs.get("prompt_length", 32),), generator=torch.Generator().manual_seed(1)
            )
            timer = LlamaCppTimer(
                folder, Path(scratch), prompt.tolist(), kwargs.get("new_tokens", 128), torch.get_num_threads()
            )
        try:
            result = speed_benchmark(folder, llama_cpp=timer, **kwargs)
        finally:
            if timer is not None:
                timer.close()
        if timer is not None:
            result["llama_cpp_unavailable"] = timer.unavailable
            result["llama_cpp_gguf_bytes"] = timer.gguf_bytes
        if load_memory:
            checkpoint = weights_bytes(folder)
            result["from_pretrained"] = {}
            for name, model_class in [("hf", "GPT2LMHeadModel"), ("tinygpt", "TinyGPTForCausalLM")]:
                measured = measure_load(model_class, folder)
                result["from_pretrained"][name] = {
                    **measured,
                    "peak_added_per_weight_byte": measured["peak_added"] / checkpoint,
                }
    print(format_speed_table(result))
    for name, measured in result.get("from_pretrained", {}).items():
        print(
            f"from_pretrained {name}: {measured['wall_s']:.2f} s, peak RSS +{measured['peak_added'] / 2**20:,.0f} MiB "
            f"({measured['peak_added_per_weight_byte']:.2f}× the weights)"
        )
    if out_json:
        Path(out_json).write_text(json.dumps(result, indent=2) + "\n")
    return result
