"""Wall time and peak RSS of converting and loading a GPT-2-small-shaped checkpoint (random weights, made here), each
operation in a fresh interpreter (scripts/measurement_log.md, "Conversion and loading: memory and time").

    python -m scripts.bench.conversion_benchmark [--json OUT.json] [--n-layer N --n-embd D --n-head H]
"""

import argparse
import json
import os
import tempfile
from pathlib import Path

from scripts.bench.measure import MODEL_IMPORTS, measure_in_subprocess, measure_load, weights_bytes


def conversion_benchmark(work_dir: str | os.PathLike, gpt2_config: dict | None = None, seed: int = 0) -> dict:
    """Wall time and peak RSS of converting a GPT-2 checkpoint (made here with random weights, GPT-2 small's
    shape unless `gpt2_config` says otherwise) and of loading it, relative to the checkpoint's bytes.

    Rows: conversion from `model.safetensors` and from `pytorch_model.bin`; `TinyGPTForCausalLM.from_pretrained` of
    the converted folder and of the GPT-2 folder itself (converted on the fly); transformers' own
    `GPT2LMHeadModel.from_pretrained` of the same folder as the reference. Loads are followed by one read of every
    weight, so memory-mapped tensors count in full."""
    from transformers import GPT2LMHeadModel

    from hf_tinygpt.convert.verify import random_gpt2_folder

    work = Path(work_dir)
    gpt2_st, gpt2_bin = work / "gpt2-safetensors", work / "gpt2-bin"
    random_gpt2_folder(str(gpt2_st), seed=seed, **(gpt2_config or {}))
    GPT2LMHeadModel.from_pretrained(gpt2_st).save_pretrained(gpt2_bin, safe_serialization=False)
    tiny = work / "tinygpt"
    checkpoint_bytes = weights_bytes(gpt2_st)
    conversions = [
        (
            f"convert {source} → tinygpt",
            f"gpt2_to_tinygpt({str(folder)!r}, {str(tiny)!r}, tokenizer='gpt2', force=True)",
        )
        for source, folder in [("model.safetensors", gpt2_st), ("pytorch_model.bin", gpt2_bin)]
    ]
    loads = [
        ("TinyGPT from_pretrained(tinygpt folder)", "TinyGPTForCausalLM", tiny),
        ("TinyGPT from_pretrained(GPT-2 folder)", "TinyGPTForCausalLM", gpt2_st),
        ("GPT2LMHeadModel from_pretrained (reference)", "GPT2LMHeadModel", gpt2_st),
    ]
    measurements = [(label, measure_in_subprocess(MODEL_IMPORTS, statement)) for label, statement in conversions]
    measurements += [(label, measure_load(model_class, folder)) for label, model_class, folder in loads]
    rows = [
        {"operation": label, **measured, "peak_added_per_checkpoint_byte": measured["peak_added"] / checkpoint_bytes}
        for label, measured in measurements
    ]
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
    """`conversion_benchmark` in a scratch folder: prints its table, and writes its JSON to `out_json` if given."""
    with tempfile.TemporaryDirectory() as work:
        result = conversion_benchmark(work, **kwargs)
    print(format_conversion_table(result))
    if out_json:
        Path(out_json).write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="also write the measurements here")
    parser.add_argument("--n-layer", type=int, default=12)
    parser.add_argument("--n-embd", type=int, default=768)
    parser.add_argument("--n-head", type=int, default=12)
    parser.add_argument("--vocab-size", type=int, default=50257)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    shape = dict(n_layer=args.n_layer, n_embd=args.n_embd, n_head=args.n_head, vocab_size=args.vocab_size)
    run_conversion_benchmark(args.json, gpt2_config=shape, seed=args.seed)


if __name__ == "__main__":
    main()
