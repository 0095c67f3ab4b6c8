"""What our AVX2 kernels (hf_tinygpt/generate/avx2_products.py) change in a decoding step: TinyGPT's CompiledDecoder
built with them and without them (inductor's own products), batch 1, greedy, in the same rounds between memory
probes. Prints each one's tok/s and the paired ratio. The kernels are taken only where the CPU, as ATen reports it,
lacks AVX-512 BF16; on an AVX-512 BF16 machine `--emulate-avx2` measures as speed_benchmark's does (ATen and oneDNN
capped at AVX2, inductor at 256-bit vectors), and `--on-avx512-bf16` takes the kernels there as it is, against
inductor's AVX-512 products (what decides whether such CPUs should take them: scripts/measurement_log.md, "bf16 at
batch 1 on AVX-512 BF16").

    python -m scripts.bench.avx2_kernels [--model GPT2_FOLDER] [--dtypes bfloat16 int8] [--rounds 5]
                                         [--emulate-avx2 | --on-avx512-bf16]
    python -m scripts.bench.avx2_kernels --tiny                  # a smoke run on a tiny model, no autotuning
"""

import argparse
import json
import tempfile
from pathlib import Path
from unittest import mock

import torch

from hf_tinygpt import TinyGPTForCausalLM
from hf_tinygpt.convert.verify import random_gpt2_folder
from hf_tinygpt.generate.avx2_products import avx2_products_available, avx2_products_wanted
from hf_tinygpt.generate.compiled_decoding import CompiledDecoder
from scripts.bench.measure import cpu_line, machine, memory_bandwidth, paired_decodes
from scripts.bench.speed_benchmark import (
    AVX2_EMULATION,
    AVX2_SIMDLEN,
    TINY_GPT2,
    load_options,
    restart_emulating_avx2,
)

GREEDY = dict(do_sample=False, eos_token_id=None, pad_token_id=0)


def decoders(model, max_length: int, autotune: bool, on_avx512_bf16: bool) -> dict[str, CompiledDecoder]:
    """{"with": a decoder on our kernels (taken on an AVX-512 BF16 CPU too if `on_avx512_bf16`), "without": one on
    inductor's products} of the same model."""
    wanted = avx2_products_available if on_avx512_bf16 else avx2_products_wanted
    with mock.patch("hf_tinygpt.generate.avx2_products.avx2_products_wanted", wanted):
        with_kernels = CompiledDecoder(model, max_length=max_length, autotune=autotune)
    with mock.patch("hf_tinygpt.generate.compiled_decoding.use_avx2_products", lambda model: False):
        without = CompiledDecoder(model, max_length=max_length, autotune=autotune)
    if not with_kernels.avx2_products or without.avx2_products:
        raise RuntimeError(
            "the kernels are not taken here: the CPU has AVX-512 BF16 (use --emulate-avx2 or --on-avx512-bf16)"
        )
    return {"with": with_kernels, "without": without}


def compare(
    folder: str, dtype: str, *, rounds: int, prompt_length: int, new_tokens: int, autotune: bool, probe, on_avx512_bf16
):
    """One dtype's row: tok/s with and without the kernels, and their paired ratio (with's speed over without's)."""
    model = TinyGPTForCausalLM.from_pretrained(folder, **load_options(dtype)).eval()
    built = decoders(model, prompt_length + new_tokens, autotune, on_avx512_bf16)
    ids = torch.randint(0, model.config.vocab_size, (1, prompt_length), generator=torch.Generator().manual_seed(1))
    options = dict(attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, **GREEDY)
    row = paired_decodes(
        lambda: built["with"].generate(ids, **options),
        lambda: built["without"].generate(ids, **options),
        new_tokens,
        rounds,
        probe,
    )
    return {"dtype": dtype, "with_tok_s": row.pop("ours_tok_s"), "without_tok_s": row.pop("theirs_tok_s")} | row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a GPT-2 folder (default: GPT-2 small's shape, random weights, made here)")
    parser.add_argument("--dtypes", nargs="+", choices=["bfloat16", "int8"], default=["bfloat16", "int8"])
    parser.add_argument("--rounds", type=int, default=5)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--emulate-avx2", action="store_true", help="as speed_benchmark's --emulate-avx2")
    where.add_argument("--on-avx512-bf16", action="store_true", help="take the kernels on this AVX-512 BF16 CPU too")
    parser.add_argument("--json", help="also write the measurements here")
    parser.add_argument("--tiny", action="store_true", help="tiny model, few tokens, no autotuning: checks the script")
    args = parser.parse_args(argv)
    if args.emulate_avx2:
        restart_emulating_avx2("scripts.bench.avx2_kernels", argv)
    if args.emulate_avx2:
        torch._inductor.config.cpp.simdlen = AVX2_SIMDLEN
    on_avx512_bf16 = args.on_avx512_bf16 and not avx2_products_wanted()  # the flag changes nothing elsewhere
    if not (avx2_products_wanted() or on_avx512_bf16 and avx2_products_available()):
        raise SystemExit(
            "this CPU (as ATen reports it) has AVX-512 BF16: the kernels are not taken; use --emulate-avx2 or "
            "--on-avx512-bf16"
        )
    sizes = dict(prompt_length=8, new_tokens=8, autotune=False) if args.tiny else {}
    sizes = dict(prompt_length=32, new_tokens=128, autotune=True) | sizes
    probe = (lambda: memory_bandwidth(32 * 2**20, 1)) if args.tiny else memory_bandwidth
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.model or random_gpt2_folder(
            str(Path(scratch) / "gpt2"), seed=0, **(TINY_GPT2 if args.tiny else {})
        )
        rows = [
            compare(folder, dtype, rounds=args.rounds, probe=probe, on_avx512_bf16=on_avx512_bf16, **sizes)
            for dtype in args.dtypes
        ]
    taken = {"emulated": "AVX2"} if args.emulate_avx2 else {"taken_on": "AVX-512 BF16"} if on_avx512_bf16 else {}
    result = {"rows": rows, "machine": machine() | taken}
    print("| dtype | with our AVX2 kernels, tok/s | inductor's products, tok/s | with/without (pairs) | same tokens |")
    print("|---|---:|---:|---:|---|")
    for row in rows:
        pairs = f"{min(row['paired_ratios']):.2f}–{max(row['paired_ratios']):.2f}"
        print(
            f"| {row['dtype']} | {row['with_tok_s']:,.1f} | {row['without_tok_s']:,.1f} | {row['ratio']:.2f}× ({pairs}) "
            f"| {row['same_tokens']} |"
        )
    emulated = f"; EMULATED AVX2: {AVX2_EMULATION}, inductor simdlen {AVX2_SIMDLEN}" if args.emulate_avx2 else ""
    emulated += "; the kernels TAKEN ON AN AVX-512 BF16 CPU, against inductor's AVX-512 products" * on_avx512_bf16
    print(
        f"{cpu_line(result['machine'])}{emulated}; probes {min(min(r['probes_GBps']) for r in rows):.0f}–"
        f"{max(max(r['probes_GBps']) for r in rows):.0f} GB/s"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
