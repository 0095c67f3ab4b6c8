"""Benchmarks and the measuring tools they share, development tools of hf_tinygpt (not part of the installed
package): TinyGPT's speed against transformers' GPT-2 and llama.cpp, training against nanoGPT, where a decoding
step's time goes, conversion and data costs, and the engines' venvs (ONNX Runtime, vLLM, llama.cpp, trl) that the
benchmarks and tests/test_engines.py use. Run them from the repository root as `python -m scripts.bench.NAME`
(scripts/README.md lists them, with what they measured)."""
