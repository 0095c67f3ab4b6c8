"""What the explorer's largest allowed requests take (hf_tinygpt/explore/limits.py): each endpoint's largest request
on one model, sent through Gradio's own client to the app serving on loopback, each in a fresh process. Prints each
request's wall time and the peak memory it added to the process; the bound the README states ("Explore in the
browser") lies above the largest of these.

    python -m scripts.bench.explorer_memory [--schemes shipped learned rope t5 fire cope] [--json OUT]
    python -m scripts.bench.explorer_memory --tiny       # a smoke run on a tiny model

The models are GPT-2 small's shape (12 layers of 12 heads, 768 wide, 1,024 positions, GPT-2's vocabulary),
untrained: memory depends on the shape and the scheme, not on the weights. `shipped` is the shipped model.
"""

import argparse
import json
import tempfile
from pathlib import Path

from hf_tinygpt.explore.limits import MAX_NEW_TOKENS, MAX_PROMPT_TOKENS, MAX_TEXT_TOKENS, MAX_WINDOW
from scripts.bench.measure import cpu_line, machine, measure_in_subprocess

GPT2_SMALL = dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12)
TINY = dict(vocab_size=50257, n_positions=64, n_embd=16, n_layer=2, n_head=2)

# The app serves in the measured process itself, and one small request of each kind has run before the reset of
# the peak: what is measured is the largest request, not Gradio's start or matplotlib's first figure.
SETUP = """
import json, sys
from gradio_client import Client
from hf_tinygpt.explore.app import build_app, launch
from hf_tinygpt.explore.views import load_models
from scripts.explorer_screenshots import free_port

def words(count):  # a text of exactly `count` GPT-2 tokens
    return " ".join(["the"] * count)

source, scheme = sys.argv[1], sys.argv[2]
if scheme == "shipped":
    models = load_models([])
else:
    from hf_tinygpt.plots.positions import load_for_plots
    model, label = load_for_plots(source, scheme)
    model.set_attn_implementation("eager")
    models = [(label, model)]
demo = build_app(models)
port = free_port()
launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
client = Client(f"http://127.0.0.1:{{port}}/", verbose=False)
for small in {warm_up}:
    client.predict(*small["inputs"], api_name=small["api_name"])
"""


def requests(n_positions: int, n_layer: int, n_head: int, learned: bool) -> dict[str, str]:
    """The largest request each endpoint takes for a model of this shape, as the code of its inputs (`words(n)` is
    a text of n GPT-2 tokens); a learned table bounds the prompt and what is generated after it by its rows."""
    prompt = min(MAX_PROMPT_TOKENS, n_positions) if learned else MAX_PROMPT_TOKENS
    new_tokens = min(MAX_NEW_TOKENS, n_positions - 1) if learned else MAX_NEW_TOKENS
    before = min(prompt, n_positions - new_tokens) if learned else prompt
    return {
        "/token_position": f"words({prompt})",
        "/position_scheme": f"words({prompt}), 16, {min(4 * n_positions, 8192)}, 0",
        "/attention": f"words({prompt}), {n_layer - 1}, {n_head - 1}",
        "/past_length": f"words({MAX_TEXT_TOKENS}), {MAX_WINDOW}",
        "/generate": f"words({before}), {new_tokens}",
    }


def warm_up() -> list[dict]:
    """One small request of each kind."""
    return [
        {"api_name": "/token_position", "inputs": ["The cat sat"]},
        {"api_name": "/position_scheme", "inputs": ["The cat sat", 2, 8, 0]},
        {"api_name": "/attention", "inputs": ["The cat sat", 0, 0]},
        {"api_name": "/past_length", "inputs": [" ".join(["the"] * 64), 16]},
        {"api_name": "/generate", "inputs": ["The cat sat", 2]},
    ]


def measure(scheme: str, shape: dict, config_file: Path) -> dict:
    learned = scheme == "learned"
    if scheme == "shipped":
        from hf_tinygpt.folders.bundled import DEFAULT_MODEL_DIR

        config = json.loads((DEFAULT_MODEL_DIR / "config.json").read_text())
        learned = config["position_embedding_type"] == "learned"
        shape = {key: config[key] for key in ("n_positions", "n_layer", "n_head")}
    largest = requests(shape["n_positions"], shape["n_layer"], shape["n_head"], learned)
    setup = SETUP.format(warm_up=warm_up()).replace("sys.argv[1], sys.argv[2]", f"{str(config_file)!r}, {scheme!r}")
    rows = {}
    for api_name, inputs in largest.items():
        statement = f"client.predict({inputs}, api_name={api_name!r})"
        result = measure_in_subprocess(setup, statement)
        rows[api_name] = {"wall_s": round(result["wall_s"], 2), "peak_added_mib": round(result["peak_added"] / 2**20)}
        rows[api_name]["peak_rss_mib"] = round(result["peak_rss"] / 2**20)
        print(
            f"  {scheme:<9} {api_name:<17} {rows[api_name]['wall_s']:>7.1f} s  "
            f"+{rows[api_name]['peak_added_mib']:>6,} MiB  (peak {rows[api_name]['peak_rss_mib']:,} MiB)",
            flush=True,
        )
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schemes", nargs="+", default=["shipped", "learned", "rope", "t5", "fire", "cope"])
    parser.add_argument("--tiny", action="store_true", help="a tiny model of each scheme: a smoke run")
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args(argv)
    shape = TINY if args.tiny else GPT2_SMALL
    about = machine()
    print(f"the explorer's largest requests, one model each ({cpu_line(about)}):", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        config_file = Path(scratch) / "config.json"
        config_file.write_text(json.dumps({"model_type": "tinygpt", **shape}))
        figures = {scheme: measure(scheme, shape, config_file) for scheme in args.schemes}
    worst = max((row["peak_rss_mib"], scheme, api) for scheme, rows in figures.items() for api, row in rows.items())
    print(f"largest: {worst[1]} {worst[2]}, a peak of {worst[0]:,} MiB for the whole process")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": about, "shape": shape, "figures": figures}, indent=1))


if __name__ == "__main__":
    main()
