"""Writing a model folder: the weights, the config, the generation config and the tokenizer, as
`from_pretrained` and `pipeline` read them (a card is written by whoever knows where the model came from)."""

import os

import torch
from transformers import GenerationConfig

from .bundled import load_tokenizer

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def save_model_folder(model, folder: str | os.PathLike, *, tokenizer_from: str | None):
    """Save `model` + tokenizer + generation config into `folder` (a staging folder from `output_folder`)."""
    model.save_pretrained(folder)
    GenerationConfig.from_model_config(model.config).save_pretrained(folder)
    if tokenizer_from is not None:
        load_tokenizer(tokenizer_from).save_pretrained(folder)
