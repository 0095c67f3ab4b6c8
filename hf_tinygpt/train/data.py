"""A run's data: text files, a token folder or a dataset, tokenized once into the data cache and read a batch at a
time; the batch of step s is drawn from a permutation seeded by (seed, epoch), so a resumed run sees exactly the
batches an uninterrupted one would, and N processes split exactly the global batch one process would take whole."""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .settings import TrainingSettings
from .token_files import file_token_ids, run_tokens


@dataclass
class RunData:
    """What a run trains and is measured on."""

    blocks: object  # (n_blocks, block_size) token ids, a view of the memory-mapped training tokens
    description: str  # how the model card describes the training data
    validation: object | None  # the held-out tokens (memory-mapped), cut to `validation_tokens`
    identity: dict  # what the tokens are made of (`TokenFile.identity` by split): a resumed run must go on with it
    tokenizer_from: str  # the tokenizer's folder, or "gpt2" for the bundled BPE


def run_data(settings: TrainingSettings, tokenizer, tokenizer_from: str, accelerator) -> RunData:
    """The run's training blocks and held-out tokens. The main process tokenizes into the data cache (once: later
    runs reuse it); the others then map its files."""
    with accelerator.main_process_first():
        train_file, description, validation_file = run_tokens(settings, tokenizer, tokenizer_from)
    blocks = pack(train_file.tokens, settings.block_size, what=", ".join(settings.train) or settings.dataset)
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
        tokenizer_from=tokenizer_from,
    )


def batch(data: RunData, step: int, settings: TrainingSettings, accelerator) -> torch.Tensor:
    """This process's share of the global batch of `step`, as int64 ids on the run's device."""
    indices = batch_indices(step, settings.batch_size, len(data.blocks), settings.seed)
    share = settings.batch_size // accelerator.num_processes
    mine = indices[accelerator.process_index * share : (accelerator.process_index + 1) * share]
    ids = read_blocks(data.blocks, mine)
    if accelerator.device.type != "cpu":  # pinned host memory lets the copy overlap the previous step
        ids = ids.pin_memory().to(accelerator.device, non_blocking=True)
    return ids


def tokenize_files(files: list[Path], tokenizer) -> torch.Tensor:
    """All files as one stream of token ids in memory, each file followed by the end-of-text token (for a small
    text; training reads its data from a token file instead)."""
    return torch.tensor([i for ids in file_token_ids(files, tokenizer) for i in ids], dtype=torch.long)


def pack(tokens, block_size: int, what: str = "the training data"):
    """(n_blocks, block_size) non-overlapping blocks, a view of `tokens` (a tensor or a memory-mapped array): block i
    is tokens[i * block_size : (i + 1) * block_size]. The ragged tail is dropped."""
    n_blocks = len(tokens) // block_size
    if n_blocks == 0:
        raise ValueError(f"{what}: {len(tokens)} tokens do not fill one block of {block_size} (`block_size`)")
    return tokens[: n_blocks * block_size].reshape(n_blocks, block_size)


def read_blocks(blocks, indices: torch.Tensor) -> torch.Tensor:
    """The blocks at `indices` as int64 ids: only these are read from the token file."""
    return torch.from_numpy(np.asarray(blocks[indices.numpy()], dtype=np.int64))


def batch_indices(step: int, batch_size: int, n_blocks: int, seed: int) -> torch.Tensor:
    """The block indices of global batch `step`: consecutive slices of a fresh permutation for each epoch."""
    positions = torch.arange(step * batch_size, (step + 1) * batch_size)
    epochs, offsets = positions // n_blocks, positions % n_blocks
    permutations = {
        int(e): torch.randperm(n_blocks, generator=torch.Generator().manual_seed(seed * 100_003 + int(e)))
        for e in epochs.unique()
    }
    return torch.stack([permutations[int(e)][o] for e, o in zip(epochs, offsets, strict=True)])
