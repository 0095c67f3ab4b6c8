"""Writing a model folder: the weights, the config, the generation config and the tokenizer, as
`from_pretrained` and `pipeline` read them (a card is written by whoever knows where the model came from)."""

import os
from pathlib import Path

import torch
from transformers import GenerationConfig

from .bundled import load_tokenizer
from .training_history import write_history

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def save_model_folder(model, folder: str | os.PathLike, *, tokenizer, generation=None, history: list | None = None):
    """Save `model` (its weights, config and the installed package's code files) into `folder` (a staging folder
    from `output_folder`), with its generation config (default: from the model's config), its tokenizer (one, or
    where `load_tokenizer` reads one; None: none) and its training history (the numbers and their curve)."""
    if isinstance(tokenizer, (str, os.PathLike)):  # refused where the model has no row for some of its ids
        tokenizer = load_tokenizer(tokenizer, vocab_size=model.config.vocab_size)
    model.save_pretrained(folder)
    (generation or GenerationConfig.from_model_config(model.config)).save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    if history:
        write_history(Path(folder), list(history))
