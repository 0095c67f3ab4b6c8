#!/usr/bin/env python
"""TinyGPT against transformers' GPT2LMHeadModel on the same weights: prefill and decode throughput (dynamic cache,
static cache, static cache + torch.compile through CompiledDecoder), fp32, bf16 and int8 (weights quantized as they
load through transformers' TorchAoConfig, bf16 activations, TinyGPT in bf16 beside it; the [int8] extra),
from_pretrained time and memory, and the decode ceiling set by memory bandwidth; with --llama-cpp, llama.cpp's
batch-1 decode of the same weights (f32, f16, q8_0 GGUFs made by its own converter) in the same rounds.

    python scripts/benchmark.py [--model GPT2_FOLDER] [--json OUT.json]     # default: random GPT-2 small, seed 0
    python scripts/benchmark.py --llama-cpp                                  # and llama.cpp beside it
    python scripts/benchmark.py --tiny                                       # a smoke run on a tiny model
"""

import argparse

from benchmarks import DECODE_CACHES, run_speed_benchmark  # scripts/benchmarks.py, beside this script

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a GPT-2 folder (default: GPT-2 small's shape, random weights, made here)")
    parser.add_argument("--json", help="also write the measurements here")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument(
        "--dtypes", nargs="+", choices=["float32", "bfloat16", "int8"], default=["float32", "bfloat16", "int8"]
    )
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
        "builds its venv on first use (scripts/engines.py; a ~10 min compile, once)",
    )
    parser.add_argument("--tiny", action="store_true", help="tiny model, short inputs: checks the script only")
    args = parser.parse_args()
    options = dict(
        repeats=args.repeats,
        new_tokens=args.new_tokens,
        dtypes=args.dtypes,
        caches=args.caches,
        llama_cpp=args.llama_cpp,
    )
    if args.tiny:  # GPT-2's vocabulary all the same: llama.cpp's converter wants GPT-2's tokenizer with it
        options |= dict(
            repeats=1,
            new_tokens=4,
            prefill_shapes=((1, 32), (2, 16)),
            decode_batches=(1, 2),
            prompt_length=8,
            gpt2_config=dict(n_layer=2, n_embd=32, n_head=2),
            int8_gemv=dict(products=[(64, 64)] * 4, one_product_bytes=2**20),
        )
    run_speed_benchmark(args.model, args.json, **options)
