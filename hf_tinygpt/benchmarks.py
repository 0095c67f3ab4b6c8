"""Measurements that need a fresh interpreter: wall time and peak memory of loading and converting checkpoints.

Each operation runs in its own Python process so that one measurement's allocations (and the allocator's cached
pages) cannot hide or inflate another's. Peak RSS is read from Linux's VmHWM after resetting it once the imports
are done, so the figure is what the operation itself added, not what importing torch costs.
"""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
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
from hf_tinygpt.convert import gpt2_to_tinygpt
"""
_TOUCH = "sum(float(p.float().sum()) for p in model.parameters())  # read every weight once"


def conversion_benchmark(work_dir: str | os.PathLike, gpt2_config: dict | None = None, seed: int = 0) -> dict:
    """Wall time and peak RSS of converting a GPT-2 checkpoint (made here with random weights, GPT-2 small's
    shape unless `gpt2_config` says otherwise) and of loading it, relative to the checkpoint's bytes.

    Rows: conversion from `model.safetensors` and from `pytorch_model.bin`; `TinyGPTForCausalLM.from_pretrained` of
    the converted folder and of the GPT-2 folder itself (converted on the fly); transformers' own
    `GPT2LMHeadModel.from_pretrained` of the same folder as the reference. Loads are followed by one read of every
    weight, so memory-mapped tensors count in full."""
    from transformers import GPT2LMHeadModel

    from .verify import random_gpt2_folder

    work = Path(work_dir)
    gpt2_st, gpt2_bin = work / "gpt2-safetensors", work / "gpt2-bin"
    random_gpt2_folder(str(gpt2_st), seed=seed, **(gpt2_config or {}))
    GPT2LMHeadModel.from_pretrained(gpt2_st).save_pretrained(gpt2_bin, safe_serialization=False)
    tiny = work / "tinygpt"
    checkpoint_bytes = weights_bytes(gpt2_st)
    # (label, statement); each runs in a fresh process after _IMPORTS
    operations = [
        ("convert model.safetensors → tinygpt", f"gpt2_to_tinygpt({str(gpt2_st)!r}, {str(tiny)!r}, "
                                                 "tokenizer='gpt2', force=True)"),
        ("convert pytorch_model.bin → tinygpt", f"gpt2_to_tinygpt({str(gpt2_bin)!r}, {str(tiny)!r}, "
                                                 "tokenizer='gpt2', force=True)"),
        ("TinyGPT from_pretrained(tinygpt folder)", f"model = TinyGPTForCausalLM.from_pretrained({str(tiny)!r})\n"
                                                     + _TOUCH),
        ("TinyGPT from_pretrained(GPT-2 folder)", f"model = TinyGPTForCausalLM.from_pretrained({str(gpt2_st)!r})\n"
                                                   + _TOUCH),
        ("GPT2LMHeadModel from_pretrained (reference)", f"model = GPT2LMHeadModel.from_pretrained({str(gpt2_st)!r})\n"
                                                         + _TOUCH),
    ]  # fmt: skip
    rows = []
    for label, statement in operations:
        measured = measure_in_subprocess(_IMPORTS, statement)
        rows.append({"operation": label, **measured, "peak_added_per_checkpoint_byte": measured["peak_added"] / checkpoint_bytes})
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
