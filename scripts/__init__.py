"""Development tools of hf_tinygpt, not part of the installed package: the conversion and push scripts, shipping the
default model, the length-extrapolation study; the benchmarks and the engines' venvs are in `scripts.bench`. Run them
from the repository root as `python -m scripts.NAME` (scripts/README.md lists them, with what they measured)."""
