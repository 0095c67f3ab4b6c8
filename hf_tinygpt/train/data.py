"""A run's data: its tokenizer, and text files, a token folder or a dataset, tokenized once into the data cache and
cut into blocks of `block_size` tokens (the loop draws each step's batch from them)."""

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..folders.bundled import load_tokenizer, tokenizer_sha256
from .settings import TrainingSettings
from .token_files import file_token_ids, pack, run_tokens


@dataclass
class RunData:
    """What a run trains and is measured on, and the tokenizer that made it."""

    blocks: object  # (n_blocks, block_size) token ids, a view of the memory-mapped training tokens
    description: str  # how the model card describes the training data
    validation: object | None  # the held-out tokens (memory-mapped), cut to `validation_tokens`
    identity: dict  # what the tokens are made of (`TokenFile.identity` by split): a resumed run must go on with it
    tokenizer: object  # the run's tokenizer: a new model takes its size and end-of-text id
    tokenizer_from: str  # the tokenizer's folder, or "gpt2" for the bundled BPE
    tokenizer_sha256: str  # which tokenizer exactly (`tokenizer_sha256`), as the card records it


def run_data(settings: TrainingSettings, accelerator) -> RunData:
    """The run's tokenizer, training blocks and held-out tokens. The main process tokenizes into the data cache
    (once: later runs reuse it); the others then map its files."""
    if settings.batch_size % (accelerator.num_processes * settings.grad_accum):
        raise ValueError(
            f"`TrainingSettings.batch_size` {settings.batch_size} does not split over {accelerator.num_processes} "
            f"process(es) × {settings.grad_accum} micro-batches (`TrainingSettings.grad_accum`)"
        )
    tokenizer_from = settings.tokenizer or "gpt2"
    tokenizer = load_tokenizer(tokenizer_from)
    if tokenizer.eos_token_id is None:
        raise ValueError(
            f"the tokenizer {tokenizer_from} (`TrainingSettings.tokenizer`) has no end-of-text (eos) token, which "
            "training puts after each file: give its tokenizer_config.json an eos_token"
        )
    with accelerator.main_process_first():
        train_file, description, validation_file = run_tokens(settings, tokenizer, tokenizer_from)
    blocks = pack(train_file.tokens, settings.block_size, what=", ".join(settings.train) or settings.dataset)
    if accelerator.is_main_process:
        warn_of_what_is_not_learned(train_file.tokens, blocks, tokenizer)
    if settings.batch_size > len(blocks):
        raise ValueError(
            f"`TrainingSettings.batch_size` {settings.batch_size} is more than the {len(blocks)} blocks of "
            f"{settings.block_size} tokens the training data holds: lower `TrainingSettings.batch_size` or "
            "`TrainingSettings.block_size`"
        )
    return RunData(
        blocks=blocks,
        description=description,
        validation=None if validation_file is None else validation_file.tokens[: settings.validation_tokens],
        identity={"train": train_file.identity(), "validation": validation_file and validation_file.identity()},
        tokenizer=tokenizer,
        tokenizer_from=tokenizer_from,
        tokenizer_sha256=tokenizer_sha256(tokenizer),
    )


def warn_of_what_is_not_learned(tokens, blocks, tokenizer, share: float = 0.01):
    """Say so where more than `share` of the training tokens teach the model nothing of the text: the tokens past the
    last whole block (they may be a whole file), or the tokenizer's unknown token, read where it has no word for the
    text (judged on a million tokens, in 16 runs spread over the text)."""
    if (left := len(tokens) - blocks.shape[0] * blocks.shape[1]) > share * len(tokens):
        warnings.warn(
            f"the last {left:,} of the {len(tokens):,} training tokens do not fill a block of {blocks.shape[1]} "
            "(`TrainingSettings.block_size`): they are not trained on; lower `TrainingSettings.block_size` or add text",
            stacklevel=2,
        )
    unknown = tokenizer.unk_token_id
    if unknown is None or unknown == tokenizer.eos_token_id:  # GPT-2's BPE has no word it cannot read
        return
    chunk, chunks = 1 << 16, 16  # runs, not a stride through it all: a few pages of a large file are read
    starts = range(0, len(tokens), max(chunk, len(tokens) // chunks))
    sample = np.concatenate([np.asarray(tokens[start : start + chunk]) for start in starts][:chunks])
    if (found := float((sample == unknown).mean())) > share:
        warnings.warn(
            f"{found:.0%} of the training tokens are the tokenizer's unknown token {tokenizer.unk_token!r}: the "
            "tokenizer (`TrainingSettings.tokenizer`) has no token for much of this text; train with one made for it",
            stacklevel=2,
        )


def tokenize_files(files: list[Path], tokenizer) -> torch.Tensor:
    """All files as one stream of token ids in memory, each file followed by the end-of-text token (for a small
    text; training reads its data from a token file instead)."""
    return torch.tensor([i for ids in file_token_ids(files, tokenizer) for i in ids], dtype=torch.long)
