"""Run the learner's notebooks top to bottom with a real kernel and keep their outputs, as the web shows them:

    python -m scripts.notebooks.execute                       # every notebook of scripts/notebooks, in place
    python -m scripts.notebooks.execute NAME.ipynb            # that one only
    python -m scripts.notebooks.execute --check               # run them into a temporary folder, fail on an error

Each executed notebook records the SHA-256 of the code it ran (`metadata.hf_tinygpt.executed_code`) and the machine
it ran on; tests/test_notebooks.py fails when a notebook's code no longer matches what was executed."""

import argparse
import hashlib
import os
import platform
import sys
import tempfile
from pathlib import Path

import nbformat
import torch
import transformers
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent
TIMEOUT_S = 600  # per cell


def code_digest(notebook) -> str:
    """SHA-256 of the notebook's code cells, in order: what `executed_code` must equal."""
    code = "\n\0\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
    return hashlib.sha256(code.encode()).hexdigest()


def machine() -> str:
    """The CPU (its model name where Linux says it), its cores, and the versions that ran the notebook."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    cpu = names[0] if names else platform.processor() or platform.machine()
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, transformers {transformers.__version__}"


def execute(path: Path, out: Path, notebook=None) -> None:
    """Run the notebook at `path` (from its own folder), or `notebook` (a shorter copy of it) from there, and write
    it, with its outputs, to `out`."""
    notebook = notebook or nbformat.read(path, as_version=4)
    # Streams kept as a reader sees them: a progress bar's carriage returns leave its last state, not every redraw.
    NotebookClient(
        notebook,
        timeout=TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        coalesce_streams=True,
    ).execute()
    notebook.metadata["hf_tinygpt"] = {"executed_code": code_digest(notebook), "executed_on": machine()}
    staging = out.with_name(f".{out.name}.partial")
    nbformat.write(notebook, staging)
    staging.replace(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="NAME", help="notebooks of scripts/notebooks (default: all)")
    parser.add_argument("--check", action="store_true", help="write the executed copies to a temporary folder")
    args = parser.parse_args(argv)
    every = sorted(NOTEBOOKS.glob("*.ipynb"))
    unknown = sorted(set(args.names) - {path.name for path in every})
    if unknown:
        parser.error(f"no notebook {', '.join(unknown)} in {NOTEBOOKS}; there are {', '.join(p.name for p in every)}")
    with tempfile.TemporaryDirectory() as scratch:
        for path in [p for p in every if p.name in args.names] if args.names else every:
            out = Path(scratch) / path.name if args.check else path
            execute(path, out)
            print(f"executed {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
