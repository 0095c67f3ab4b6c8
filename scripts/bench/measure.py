"""The measuring tools the benchmarks share: wall time and peak memory of one operation in a fresh interpreter,
memory read bandwidth, timings paired round by round (scripts/measurement_log.md, "Speed" says why they are paired), and
the machine a figure was measured on (its CPU, and the instructions a llama.cpp build uses against the CPU's)."""

import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping
from pathlib import Path

# Each operation runs in its own Python process so that one measurement's allocations (and the allocator's cached
# pages) cannot hide or inflate another's. Peak RSS is Linux's VmHWM, reset once the imports are done: the figure
# is what the operation itself added, not what importing torch costs.
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
    return result | {"peak_added": result["peak_rss"] - result["rss_before"]}


def weights_bytes(folder: str | os.PathLike) -> int:
    """Bytes of a model folder's weight files (safetensors or pickles, sharded or not)."""
    names = ("model", "pytorch_model")
    return sum(p.stat().st_size for p in Path(folder).iterdir() if p.name.startswith(names) and p.suffix != ".json")


# What every measured process imports before its operation (so that the operation's peak leaves the imports out).
MODEL_IMPORTS = """
import torch
from transformers import GPT2LMHeadModel
from hf_tinygpt import TinyGPTForCausalLM
from hf_tinygpt.convert.conversions import gpt2_to_tinygpt
"""


def measure_load(model_class: str, folder: str | os.PathLike) -> dict:
    """`model_class.from_pretrained(folder)` in a fresh process, then one read of every weight (so memory-mapped
    tensors count in full): its wall time and peak RSS, as `measure_in_subprocess` gives them."""
    touch = "sum(float(p.float().sum()) for p in model.parameters())"
    return measure_in_subprocess(MODEL_IMPORTS, f"model = {model_class}.from_pretrained({str(folder)!r})\n{touch}")


def memory_bandwidth(bytes_: int = 512 * 2**20, repeats: int = 5) -> float:
    """Bytes/s this machine reads from memory: the best of `repeats` sums over a buffer far larger than the caches
    (reading, as a decoding step reads its weights; a copy would also count writes). The figure drifts within
    minutes on a shared machine (scripts/measurement_log.md, "Speed"), so the speed benchmark probes it in every
    round."""
    import torch

    source = torch.ones(bytes_ // 4)
    return bytes_ / min(timed(source.sum) for _ in range(repeats))


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of `fn` takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def paired_timings(runs: Mapping[str, Callable[[], object]], repeats: int, probe=memory_bandwidth) -> dict:
    """Time each of `runs` (name → a call to time; "hf" and "tinygpt" among them) back to back, `repeats` times,
    with `probe()` before each round.

    Who goes first rotates round by round, so that running right after the probe favours no one over a multiple of
    len(runs) rounds (over fewer, the first names go first once more than the last). The ratio is the median of each
    round's own HF/TinyGPT time ratio (TinyGPT's speed over HF's): the runs of a round see the same phase of the
    machine's drifting bandwidth, which a ratio of two medians would not pair up. Any other name (a peer such as
    llama.cpp) gets its own paired ratios against TinyGPT the same way, under "peers"."""
    names = tuple(runs)
    times, probes = {name: [] for name in names}, []
    for repeat in range(repeats):
        probes.append(probe())
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(timed(runs[name]))
    paired = {
        name: [theirs / ours for theirs, ours in zip(times[name], times["tinygpt"], strict=True)] for name in names
    }
    peers = {
        name: {"paired_ratios": paired[name], "ratio": statistics.median(paired[name])}
        for name in names
        if name not in ("hf", "tinygpt")
    }
    timed_rounds = {
        "times": times,
        "probes": probes,
        "paired_ratios": paired["hf"],
        "ratio": statistics.median(paired["hf"]),
    }
    return timed_rounds | ({"peers": peers} if peers else {})


def paired_decodes(
    ours: Callable[[], object], theirs: Callable[[], object], new_tokens: int, rounds: int, probe
) -> dict:
    """Two greedy decodes of `new_tokens` each (calls that return their token ids), a warm-up each, then timed in
    `rounds` paired rounds (`paired_timings`): each one's tok/s, the paired ratio (ours' speed over theirs'), the
    pairs, the probes in GB/s, and whether the two gave the same tokens."""
    import torch

    outputs = ours(), theirs()
    timed = paired_timings({"tinygpt": ours, "hf": theirs}, rounds, probe)
    return {
        "ours_tok_s": new_tokens / statistics.median(timed["times"]["tinygpt"]),
        "theirs_tok_s": new_tokens / statistics.median(timed["times"]["hf"]),
        "ratio": timed["ratio"],
        "paired_ratios": timed["paired_ratios"],
        "probes_GBps": [p / 1e9 for p in timed["probes"]],
        "same_tokens": torch.equal(*outputs),
    }


def cpu_flags() -> tuple[str, set[str]]:
    """The CPU's model name and its instruction-set flags, from /proc/cpuinfo (("unknown", set()) elsewhere)."""
    model, flags = "unknown", set()
    if Path("/proc/cpuinfo").is_file():
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    return model, flags


def cpu() -> dict:
    """The CPU, the vector ISA torch's kernels dispatch to, and whether the CPU multiplies bf16 itself (AVX-512 BF16,
    AMX): machines with the same model name differ in these, and bf16 figures differ by an order of magnitude
    between them (scripts/measurement_log.md, "Training speed")."""
    import torch

    model, flags = cpu_flags()
    return {
        "cpu": model,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_bf16": sorted(flags & {"avx512_bf16", "amx_bf16"}),
    }


def machine() -> dict:
    """What a benchmark's figures depend on besides the code: `cpu()`, the libraries, the day."""
    import torch
    import transformers

    return cpu() | {"torch": torch.__version__, "transformers": transformers.__version__, "date": time.strftime("%F")}


def cpu_line(machine: dict) -> str:
    """`cpu()`'s fields as one line for a report."""
    bf16 = ", ".join(machine["cpu_bf16"]) or "none"
    return f"{machine['cpu']}, {machine['cpu_capability']}, bf16 instructions: {bf16}"


# llama.cpp's names for the instructions its CPU backend was compiled with (`llama_print_system_info`), and the
# /proc/cpuinfo flag of each.
LLAMA_CPP_FEATURE_FLAGS = {
    "AVX": "avx",
    "AVX2": "avx2",
    "F16C": "f16c",
    "FMA": "fma",
    "AVX512": "avx512f",
    "AVX512_VBMI": "avx512vbmi",
    "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16",
    "AMX_INT8": "amx_int8",
    "AMX_BF16": "amx_bf16",
}


def llama_cpp_build_check(system_info: str, flags: set[str]) -> dict:
    """What a llama.cpp build was compiled for (`llama_print_system_info()`, "AVX2 = 1 | ..."), set against this
    CPU's `flags`. llama-cpp-python compiles for the machine pip builds it on and pip's wheel cache keeps the build,
    so a venv can hold a build made for another CPU: `missing_here`, instructions it uses that this CPU lacks (it may
    die with SIGILL), and `unused_here`, instructions this CPU has that it does not use (it runs slower than a build
    made here)."""
    built = set()
    for part in system_info.split("|"):  # "CPU : SSE3 = 1 | AVX = 1 | ... | REPACK = 1 | "
        name, _, value = part.partition("=")
        if value.strip() == "1":
            built.add(name.split(":")[-1].strip())
    built &= set(LLAMA_CPP_FEATURE_FLAGS)
    return {
        "built_with": sorted(built),
        "missing_here": sorted(name for name in built if LLAMA_CPP_FEATURE_FLAGS[name] not in flags),
        "unused_here": sorted(
            name for name, flag in LLAMA_CPP_FEATURE_FLAGS.items() if flag in flags and name not in built
        ),
    }
