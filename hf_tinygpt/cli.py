"""`hf-tinygpt`: the package's command line. Each verb is a thin layer over a library function."""

import argparse
import json
import os
import sys

from .configuration_tinygpt import TinyGPTConfig
from .gpt2_layout import gpt2_config_to_tinygpt, read_config_dict
from .params import parameter_breakdown


def load_config(model_or_config: str) -> TinyGPTConfig:
    """A TinyGPTConfig from a config.json file, a model folder or a Hub id (tinygpt or GPT-2)."""
    if os.path.isfile(model_or_config):
        with open(model_or_config) as f:
            config_dict = json.load(f)
    elif model_or_config.startswith((os.sep, ".")) and not os.path.isdir(model_or_config):
        raise FileNotFoundError(f"{model_or_config}: no such file or folder")
    else:
        config_dict = read_config_dict(model_or_config)
        if config_dict is None:
            raise FileNotFoundError(f"{model_or_config}: no config.json there (expected a file, folder or Hub id)")
    model_type = config_dict.get("model_type")
    if model_type == "gpt2":
        return gpt2_config_to_tinygpt(config_dict)
    if model_type not in (None, TinyGPTConfig.model_type):
        raise ValueError(f"{model_or_config}: model_type {model_type!r} is neither tinygpt nor gpt2")
    return TinyGPTConfig.from_dict(config_dict)


def params_command(args) -> int:
    config = load_config(args.model)
    parts = parameter_breakdown(config)
    width = max(map(len, parts))
    print(f"{args.model}: {config.position_embedding_type} positions, {config.n_layer} layers, "
          f"n_embd {config.n_embd}, {config.n_head} heads, vocab {config.vocab_size}")  # fmt: skip
    for name, count in parts.items():
        note = " (tied to token_embedding)" if name == "lm_head" and config.tie_word_embeddings else ""
        print(f"  {name:<{width}}  {count:>14,}{note}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-tinygpt", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)
    params = verbs.add_parser("params", help="parameter breakdown of a model folder, Hub id or config.json")
    params.add_argument("model", help="model folder, Hub id, or config.json (tinygpt or GPT-2)")
    params.set_defaults(run=params_command)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, FileNotFoundError, OSError) as error:
        print(f"hf-tinygpt {args.verb}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
