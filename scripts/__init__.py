"""Development tools of hf_tinygpt, not part of the installed package: benchmarks, the length-extrapolation study,
the engines' venvs, shipping the default model. Run them from the repository root as `python -m scripts.NAME`
(scripts/README.md lists them, with what they measured)."""
