"""Wall time and peak RSS of converting and loading a GPT-2-small-shaped checkpoint (random weights, made here).

python scripts/benchmark_conversion.py [--json OUT.json] [--n-layer N --n-embd D --n-head H]
"""

import argparse

from benchmarks import run_conversion_benchmark  # scripts/benchmarks.py, beside this script

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="also write the measurements here")
    parser.add_argument("--n-layer", type=int, default=12)
    parser.add_argument("--n-embd", type=int, default=768)
    parser.add_argument("--n-head", type=int, default=12)
    parser.add_argument("--vocab-size", type=int, default=50257)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    shape = dict(n_layer=args.n_layer, n_embd=args.n_embd, n_head=args.n_head, vocab_size=args.vocab_size)
    run_conversion_benchmark(args.json, gpt2_config=shape, seed=args.seed)
