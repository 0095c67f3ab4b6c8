"""A run's data: text files, a token folder or a dataset, tokenized once into the data cache and read a batch at a
time; the batch of step s is drawn from a permutation seeded by (seed, epoch), so a resumed run sees exactly the
batches an uninterrupted one would, and N processes split exactly the global batch one process would take whole."""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..folders.reading import refuse_what_is_not_a_file
from .settings import TrainingSettings, stays_inside
from .token_files import (
    TokenFile,
    cache_folder,
    dataset_tokens,
    file_token_ids,
    is_token_folder,
    read_token_folder,
    text_tokens,
    tokenizer_identity,
)


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
        train_file, description = training_data(settings, tokenizer, tokenizer_from)
        validation_file = validation_data(settings, tokenizer, tokenizer_from)
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


def text_files(paths: list[str], glob: str = "*.txt", exclude: list[str] = ()) -> list[Path]:
    """Files named directly, plus those matching `glob` in named folders (sorted), minus `exclude` (held out)."""
    held_out = {Path(p).resolve() for p in exclude}
    if not stays_inside(glob):
        raise ValueError(f"`glob` must be a pattern inside each folder of `paths`, such as '*.txt', got {glob!r}")
    files = []
    for path in map(Path, paths):
        refuse_what_is_not_a_file(path)  # a FIFO would be read forever
        if path.is_dir():
            files += sorted(f for f in path.glob(glob) if f.is_file())
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"{path}: no such file or folder")
    files = [f for f in files if f.resolve() not in held_out]
    if not files:
        raise ValueError(f"no text files in {', '.join(paths)} (matching {glob!r}, after holding out validation)")
    return files


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


def _token_folder(paths: list[str], what: str, tokenizer, tokenizer_from) -> TokenFile | None:
    """The token folder that `paths` (`TrainingSettings.what`) names, made with the run's tokenizer; None: they are
    text files."""
    folders = [path for path in paths if is_token_folder(path)]
    if not folders:
        return None
    if len(paths) > 1:
        raise ValueError(f"`TrainingSettings.{what}`: a token folder ({folders[0]}) must be its only source")
    return read_token_folder(paths[0], tokenizer_identity(tokenizer, tokenizer_from), f"`TrainingSettings.{what}`")


def training_data(settings, tokenizer, tokenizer_from) -> tuple[TokenFile, str]:
    """The training tokens (from the data cache, tokenized there the first time) and how the card describes them."""
    cache = cache_folder(settings.data_cache)
    if settings.dataset:
        data = dataset_tokens(
            settings.dataset,
            config=settings.dataset_config,
            split=settings.dataset_split,
            text_column=settings.text_column,
            tokenizer=tokenizer,
            tokenizer_name=tokenizer_from,
            cache=cache,
        )
        return data, f"the {settings.dataset_split} split of {settings.dataset} (column `{settings.text_column}`)"
    if data := _token_folder(settings.train, "train", tokenizer, tokenizer_from):
        return data, f"the token folder {settings.train[0]} ({data.info['tokens']:,} tokens)"
    files = text_files(settings.train, settings.glob, exclude=settings.validation)
    data = text_tokens(files, tokenizer, tokenizer_from, cache)
    return data, f"{len(files)} text files ({', '.join(settings.train)}, `{settings.glob}`)"


def validation_data(settings, tokenizer, tokenizer_from) -> TokenFile | None:
    """The held-out tokens (memory-mapped), or None without validation files."""
    if not settings.validation:
        return None
    for path in settings.validation:
        refuse_what_is_not_a_file(path, f"{path} (`TrainingSettings.validation`)")  # a FIFO would be read forever
    data = _token_folder(settings.validation, "validation", tokenizer, tokenizer_from) or text_tokens(
        [Path(p) for p in settings.validation], tokenizer, tokenizer_from, cache_folder(settings.data_cache)
    )
    if data.info["tokens"] <= data.info["documents"]:  # nothing but the end-of-text token after each
        raise ValueError(f"validation data {', '.join(settings.validation)} is empty: nothing to measure perplexity on")
    return data


def batch_indices(step: int, batch_size: int, n_blocks: int, seed: int) -> torch.Tensor:
    """The block indices of global batch `step`: consecutive slices of a fresh permutation for each epoch."""
    positions = torch.arange(step * batch_size, (step + 1) * batch_size)
    epochs, offsets = positions // n_blocks, positions % n_blocks
    permutations = {
        int(e): torch.randperm(n_blocks, generator=torch.Generator().manual_seed(seed * 100_003 + int(e)))
        for e in epochs.unique()
    }
    return torch.stack([permutations[int(e)][o] for e, o in zip(epochs, offsets, strict=True)])
