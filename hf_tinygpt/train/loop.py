"""Train a TinyGPT from scratch on plain-text files, with accelerate: one CPU process, or data-parallel on many
processes/GPUs/machines through `accelerate launch` or `torchrun`, with no change to the code.

The run is a pure function of its settings: the batch of step s is drawn from a permutation seeded by (seed, epoch),
so a resumed run sees exactly the batches an uninterrupted one would, and N processes split exactly the global
batch one process would take whole.
"""

import contextlib
import copy
import json
import math
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model
from tqdm.auto import tqdm
from transformers import get_cosine_with_min_lr_schedule_with_warmup

from ..folders.errors import needs_extra
from ..folders.outputs import (
    check_output,
    output_folder,
    read_manifest,
    record,
    record_tree,
    remove_leftovers_in,
    run_folder,
    unproven,
    write_recorded_file,
)
from ..folders.reading import describe, load_strictly, read_config_dict, read_json_object, refuse_what_is_not_a_file
from ..folders.training_history import LOSS_CURVE, checked_history, loss_curve_png, write_history
from ..model.configuration_tinygpt import TinyGPTConfig
from ..model.modeling_tinygpt import TinyGPTForCausalLM
from .settings import SMALL_MODEL
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

try:
    from accelerate import Accelerator
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS, get_available_trackers
    from accelerate.utils import ProjectConfiguration, gather_object, set_seed
except ImportError as error:
    raise needs_extra("train", error) from error

CHECKPOINTS = "checkpoints"  # OUT/checkpoints/step-000100: what resuming needs
FINAL = "model"  # OUT/model: the complete tinygpt folder
TRACKERS, TRACKER_RUN = "trackers", "hf-tinygpt"  # OUT/trackers/hf-tinygpt: where TensorBoard writes


@dataclass
class TrainingSettings:
    out: str
    train: list[str] = field(default_factory=list)  # text files or folders, or one token folder
    validation: list[str] = field(default_factory=list)  # held-out text files, or one token folder
    glob: str = "*.txt"
    # Or a 🤗 dataset ([datasets] extra): a `save_to_disk` folder, or what `datasets.load_dataset` takes (a Hub id, a
    # folder of data files); its `dataset_split` split, the text in its `text_column`.
    dataset: str | None = None
    dataset_config: str | None = None
    dataset_split: str = "train"
    text_column: str = "text"
    data_cache: str | None = None  # where token files are kept; None: $HF_TINYGPT_CACHE/tokens (~/.cache/hf_tinygpt)
    tokenizer: str | None = None  # a tokenizer folder; None: the bundled GPT-2 BPE
    config: dict = field(default_factory=dict)  # TinyGPTConfig fields
    init_from: str | None = None  # a tinygpt or GPT-2 folder or Hub id to start from; None: random weights
    init_revision: str | None = None  # the Hub revision of `init_from`: branch, tag or commit
    block_size: int = 128
    batch_size: int = 16  # global: split across processes
    grad_accum: int = 1  # micro-batches per step: each process takes batch_size / processes / grad_accum at a time
    steps: int = 1000
    learning_rate: float = 1e-3
    min_lr_ratio: float = 0.1  # cosine decay ends at this fraction of the peak
    warmup_steps: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    bf16: bool = False
    compile: bool = False  # the model through torch.compile (inductor)
    seed: int = 0
    eval_every: int = 200
    eval_batch_size: int = 4  # logits are batch × block × vocab floats
    validation_tokens: int | None = None  # validation perplexity over the first this many held-out tokens; None: all
    save_every: int = 200
    keep_checkpoints: int = 2
    save_dtype: str | None = None  # float32 / bfloat16 / float16 for the final weights
    resume: bool = False
    force: bool = False
    command: str = ""  # what produced this run, for the model card
    # The accelerate trackers that get every step's metrics: "tensorboard" (into OUT/trackers), "wandb", ...
    report_to: list[str] = field(default_factory=list)

    def __post_init__(self):
        """Every setting checked at the door, the message naming the field (`TrainingSettings.steps`)."""
        at_least = {
            "block_size": 2,
            "batch_size": 1,
            "grad_accum": 1,
            "steps": 1,
            "eval_every": 1,
            "eval_batch_size": 1,
            "save_every": 1,
            "keep_checkpoints": 1,
            "warmup_steps": 0,
            "seed": 0,
        }
        for name, low in at_least.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"`TrainingSettings.{name}` must be an integer >= {low}, got {value!r}")
        tokens = self.validation_tokens
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 2):
            raise ValueError(f"`TrainingSettings.validation_tokens` must be None or an integer >= 2, got {tokens!r}")
        for name, (low, high) in {
            "learning_rate": (0, math.inf),
            "min_lr_ratio": (0, 1),
            "weight_decay": (0, math.inf),
            "grad_clip": (0, math.inf),
        }.items():
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not low <= value <= high
                or not math.isfinite(value)
                or (name == "learning_rate" and value == 0)
            ):
                raise ValueError(
                    f"`TrainingSettings.{name}` must be a finite number in [{low}, {high}]"
                    f"{' and not 0' if name == 'learning_rate' else ''}, got {value!r}"
                )
        from ..folders.model_folder import DTYPES

        if self.init_revision is not None and self.init_from is None:
            raise ValueError(
                "`TrainingSettings.init_revision` is the revision of `TrainingSettings.init_from`: set both"
            )
        if self.init_revision is not None and os.path.lexists(self.init_from):
            raise ValueError(
                f"`TrainingSettings.init_revision` is a revision of a Hub repo, and `TrainingSettings.init_from` "
                f"({self.init_from}) is a local folder, which has none: leave `TrainingSettings.init_revision` out"
            )
        if not (isinstance(self.out, (str, os.PathLike)) and str(self.out)):
            raise ValueError(f"`TrainingSettings.out` must be a path, got {self.out!r}")
        if not isinstance(self.config, dict):
            raise ValueError(f"`TrainingSettings.config` must be a dict of TinyGPTConfig fields, got {self.config!r}")
        for name in ("dataset", "dataset_config", "tokenizer", "init_from", "data_cache"):
            if (value := getattr(self, name)) is not None and not (isinstance(value, str) and value):
                raise ValueError(f"`TrainingSettings.{name}` must be None or a non-empty string, got {value!r}")
        for name in ("train", "validation"):
            paths = getattr(self, name)
            if not isinstance(paths, (list, tuple)) or not all(isinstance(p, str) and p for p in paths):
                raise ValueError(f"`TrainingSettings.{name}` must be a list of non-empty paths, got {paths!r}")
        for name in ("out", "train", "validation", "dataset", "tokenizer", "init_from", "data_cache"):
            value = getattr(self, name)
            for path in value if isinstance(value, (list, tuple)) else [value]:
                try:  # the model card records the paths as UTF-8 text: an undecodable name would fail at the end
                    str(path or "").encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError(
                        f"`TrainingSettings.{name}`: {path!r} is not valid UTF-8, which the model card records; "
                        "rename it"
                    ) from None
        if self.save_dtype is not None and self.save_dtype not in DTYPES:
            raise ValueError(f"`TrainingSettings.save_dtype` must be one of {sorted(DTYPES)}, got {self.save_dtype!r}")
        if not self.train and not self.dataset:
            raise ValueError(
                "`TrainingSettings.train` needs at least one text file or folder (or give `TrainingSettings.dataset`)"
            )
        if self.train and self.dataset:
            raise ValueError("`TrainingSettings.train` and `TrainingSettings.dataset` are both set: give one of them")
        if not _stays_inside(self.glob):
            raise ValueError(
                "`TrainingSettings.glob` must be a pattern inside each `TrainingSettings.train` folder, such as "
                f"'*.txt', got {self.glob!r}"
            )
        known = {
            *TinyGPTConfig.__dataclass_fields__,
            *TinyGPTConfig.attribute_map,
            "rope_theta",
            "rope_parameters",
            "partial_rotary_factor",
            "rope_scaling",
        }
        if not isinstance(self.report_to, (list, tuple)) or any(not isinstance(t, str) for t in self.report_to):
            raise ValueError(f"`TrainingSettings.report_to` must be a list of tracker names, got {self.report_to!r}")
        trackers = sorted(LOGGER_TYPE_TO_CLASS)
        if unknown := sorted(set(self.report_to) - set(trackers)):
            raise ValueError(
                f"`TrainingSettings.report_to`: {', '.join(unknown)} is not a tracker accelerate supports "
                f"({', '.join(trackers)})"
            )
        available = {str(tracker) for tracker in get_available_trackers()}
        if missing := [name for name in self.report_to if name not in available]:
            raise ValueError(
                f"`TrainingSettings.report_to`: {', '.join(missing)} is not installed (pip install {' '.join(missing)})"
            )
        if unknown := sorted(set(self.config) - known):
            raise ValueError(
                f"`TrainingSettings.config`: {', '.join(unknown)} {'is not a' if len(unknown) == 1 else 'are not'} "
                "TinyGPTConfig field(s) (a typo would otherwise be ignored)"
            )


# ---- data ----------------------------------------------------------------------------------------------------


def _stays_inside(glob) -> bool:
    """Whether `glob` is a pattern that matches only inside the folder it is applied to."""
    return isinstance(glob, str) and bool(glob) and not Path(glob).is_absolute() and ".." not in Path(glob).parts


def text_files(paths: list[str], glob: str = "*.txt", exclude: list[str] = ()) -> list[Path]:
    """Files named directly, plus those matching `glob` in named folders (sorted), minus `exclude` (held out)."""
    held_out = {Path(p).resolve() for p in exclude}
    if not _stays_inside(glob):
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
            settings.dataset_config,
            settings.dataset_split,
            settings.text_column,
            tokenizer,
            tokenizer_from,
            cache,
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


@torch.no_grad()
def perplexity(model, tokens, block_size: int, batch_size: int = 16, accelerator=None) -> float:
    """exp(mean next-token loss) over `tokens` (a tensor or a memory-mapped array, read a batch at a time) cut into
    non-overlapping windows of `block_size` (each window's first token has no context and is not scored). With an
    accelerator, windows are shared out and summed."""
    windows = [(start, min(start + block_size, len(tokens))) for start in range(0, len(tokens), block_size)]
    if windows and windows[-1][1] - windows[-1][0] < 2:  # a 1-token tail has nothing to score
        windows.pop()
    rank, world = (accelerator.process_index, accelerator.num_processes) if accelerator else (0, 1)
    device = accelerator.device if accelerator else next(model.parameters()).device
    total, count = torch.zeros((), dtype=torch.float64, device=device), torch.zeros((), device=device)
    mine = windows[rank::world]
    was_training = model.training
    model.eval()
    for start in range(0, len(mine), batch_size):
        chunk = [np.asarray(tokens[a:b], dtype=np.int64) for a, b in mine[start : start + batch_size]]
        for same_length in _by_length(chunk):
            ids = torch.from_numpy(np.stack(same_length)).to(device)
            logits = model(ids, use_cache=False).logits.float()
            nll = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten(), reduction="sum")
            total += nll.double()
            count += ids[:, 1:].numel()
    model.train(was_training)
    if accelerator is not None:
        total, count = accelerator.reduce(total, "sum"), accelerator.reduce(count, "sum")
    return math.exp(total.item() / count.item())


def _by_length(blocks):
    lengths = sorted({len(b) for b in blocks})
    return [[b for b in blocks if len(b) == n] for n in lengths]


# ---- the run -------------------------------------------------------------------------------------------------


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def keep_freed_memory() -> bool:
    """Make glibc's malloc keep large blocks a process frees, for the next step to reuse (process-wide, for good).

    A CPU training step allocates and frees tensors of hundreds of MB (the logits over the vocabulary and their
    gradients). glibc serves each from a fresh mmap and returns it to the system when freed, so every step faults in
    and zeroes all of them again, in the kernel (scripts/README.md, "Training speed", has what it cost). With no
    mmaps and no trimming they stay in the heap and are reused. The process's memory then never shrinks below its
    peak, which a training process reaches at every step anyway. Returns whether the setting took (glibc only)."""
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)
    return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the run after a checkpoint was saved; the main process's message says where and how to go on
    (the other processes' is empty, so that it is said once)."""


# The signals that ask a run to stop: Ctrl-C, `kill` (and a batch system's preemption), a closed terminal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _StopRequest:
    """Ctrl-C, SIGTERM or SIGHUP asks the loop to stop after the current step (a checkpoint is then saved): nothing
    is lost. A second one stops at once."""

    def __init__(self):
        self.requested = False
        self._previous = {}

    def __enter__(self):
        for number in STOP_SIGNALS:
            self._previous[number] = signal.signal(number, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.requested:  # a second one: stop now
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc):
        for number, previous in self._previous.items():
            signal.signal(number, previous)


def _checkpoint_dirs(out: Path) -> list[Path]:
    """Complete checkpoints, oldest first. Each is written beside its place and renamed in when complete, so a
    checkpoint cut short by a kill is never taken for the newest (nor is a `step-N` without progress.json)."""
    return sorted(p for p in (out / CHECKPOINTS).glob("step-*") if (p / PROGRESS).is_file())


# A checkpoint holds only safe formats: weights as safetensors, optimizer and schedule state and each process's RNG
# state as tensors/numbers that `torch.load(weights_only=True)` reads without running any code. (accelerate's
# `load_state` unpickles registered objects with weights_only=False, so a crafted run folder could run code.)
PROGRESS, WEIGHTS, TRAINING_STATE = "progress.json", "model.safetensors", "training_state.pt"


def _rng_file(folder: Path, rank: int) -> Path:
    return folder / f"rng_state_{rank}.pt"


def _rng_state() -> dict:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict):
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(folder: Path, accelerator, model, optimizer, schedule, progress: dict):
    """The main process writes the checkpoint (with every process's RNG state, gathered) through `output_folder`:
    it appears as `step-N` only when complete, and a checkpoint of the same step from an earlier run is replaced."""
    rng_states = gather_object([_rng_state()])  # one per process, in rank order
    if accelerator.is_main_process:
        # A checkpoint of ours from an earlier run of the same step (proven unchanged when resuming) is replaced.
        with output_folder(folder, force=True, kind="checkpoint") as staging:
            for rank, state in enumerate(rng_states):
                torch.save(state, _rng_file(staging, rank))
            save_model(accelerator.unwrap_model(model, keep_torch_compile=False), str(staging / WEIGHTS))
            state = {"optimizer": optimizer.state_dict(), "schedule": schedule.state_dict()}
            torch.save(state, staging / TRAINING_STATE)
            (staging / PROGRESS).write_text(json.dumps(progress, indent=2))
    accelerator.wait_for_everyone()


def load_checkpoint(folder: Path, accelerator, model, optimizer, schedule):
    """The inverse of `save_checkpoint`, reading nothing that can run code."""
    try:
        load_model(
            accelerator.unwrap_model(model, keep_torch_compile=False),
            str(folder / WEIGHTS),
            device=str(accelerator.device),
        )
        state = torch.load(folder / TRAINING_STATE, map_location="cpu", weights_only=True)
        rng = torch.load(_rng_file(folder, accelerator.process_index), map_location="cpu", weights_only=True)
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        _set_rng_state(rng)
    except (OSError, RuntimeError, KeyError, ValueError, SafetensorError, pickle.UnpicklingError) as error:
        raise ValueError(f"{folder}: cannot resume from this checkpoint ({describe(error)})") from error


def _changed_settings(saved: dict, now: dict) -> list[str]:
    # Settings that do not change what the run computes.
    free = {
        "out",
        "resume",
        "force",
        "command",
        "eval_every",
        "save_every",
        "keep_checkpoints",
        "report_to",
        "data_cache",
    }
    # A setting added since the checkpoint was saved had its default then.
    default = {name: field.default for name, field in TrainingSettings.__dataclass_fields__.items()}
    return sorted(key for key in now if key not in free and saved.get(key, default[key]) != now[key])


def _changed_data(saved, now: dict) -> list[str]:
    """What differs between the data a checkpoint was saved on and the run's now (both `TokenFile.identity`s, by
    split): each source by its path, else the split's tokens."""
    changed = []
    for split in ("train", "validation"):
        before, after = (saved or {}).get(split) or {}, now.get(split) or {}
        if before == after:
            continue
        sources = {s.get("path"): s for s in before.get("sources", []) if isinstance(s, dict)}
        paths = [s["path"] for s in after.get("sources", []) if sources.get(s["path"]) != s]
        paths += sorted(set(sources) - {s["path"] for s in after.get("sources", [])})
        changed += [f"{path} ({split})" for path in paths] or [f"the {split} tokens"]
    return changed


def _comparable(settings: TrainingSettings) -> dict:
    """The settings as a checkpoint records them: paths absolute, so that `data` and `./data` are one setting."""

    def absolute(path):
        return str(Path(path).absolute().resolve()) if path not in (None, "gpt2") and Path(path).exists() else path

    fields = asdict(settings)
    fields["train"] = [absolute(p) for p in settings.train]
    fields["validation"] = [absolute(p) for p in settings.validation]
    fields["tokenizer"] = absolute(settings.tokenizer)
    fields["init_from"] = absolute(settings.init_from)
    fields["dataset"] = absolute(settings.dataset)
    return fields


# What a run may change in the config of the model it starts from: dropout acts only while training.
DROPOUT_FIELDS = ("resid_pdrop", "embd_pdrop", "attn_pdrop")


def starting_model(settings: TrainingSettings, vocab_size: int, token: str | None = None) -> TinyGPTForCausalLM:
    """The model of `init_from`, loaded strictly in float32 (a GPT-2 checkpoint converted as it loads), with the
    run's dropout; it must take the tokenizer's ids and the run's blocks."""
    hub = {"revision": settings.init_revision, "token": token}
    if quantized := read_config_dict(settings.init_from, **hub).get("quantization_config"):
        method = quantized.get("quant_method", "quantized") if isinstance(quantized, dict) else "quantized"
        raise ValueError(
            f"{settings.init_from} (`TrainingSettings.init_from`) holds {method} weights (its config.json has a "
            "quantization_config): training needs float weights; start from the model it was quantized from"
        )
    if fixed := sorted(set(settings.config) - set(DROPOUT_FIELDS)):
        raise ValueError(
            f"`TrainingSettings.config` sets {', '.join(fixed)}, which the model of `TrainingSettings.init_from` "
            f"({settings.init_from}) fixes; only dropout ({', '.join(DROPOUT_FIELDS)}) may change"
        )
    model = load_strictly(settings.init_from, dtype=torch.float32, **hub, **settings.config)  # the run's dropout
    if vocab_size > model.config.vocab_size:
        raise ValueError(
            f"the tokenizer has {vocab_size} tokens, more than the {model.config.vocab_size} rows of "
            f"{settings.init_from} (`TrainingSettings.init_from`): train with the tokenizer it was made with"
        )
    if model.config.position_embedding_type == "learned" and model.config.n_positions < settings.block_size:
        raise ValueError(
            f"`TrainingSettings.block_size` {settings.block_size} > n_positions {model.config.n_positions} of "
            f"{settings.init_from} (`TrainingSettings.init_from`, learned positions)"
        )
    return model


def cpu_has_bf16_instructions() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX-512 BF16 or AMX), by torch's own probes (private, so a
    torch without them counts as having the instructions: no warning rather than a wrong one)."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    probes = [probe for probe in probes if probe is not None]
    return not probes or any(probe() for probe in probes)


def warn_if_bf16_is_slow_here(settings: TrainingSettings, device: torch.device):
    """bf16 autocast on a CPU without bf16 instructions trains ~14x slower than float32 (scripts/README.md,
    "Training speed"): say so once, before the run, with the way out."""
    if settings.bf16 and device.type == "cpu" and not cpu_has_bf16_instructions():
        warnings.warn(
            "`TrainingSettings.bf16`: this CPU has no bf16 instructions (AVX-512 BF16 or AMX), so bf16 autocast "
            "trains about 14x slower than float32 here; leave `bf16=True` out to train in float32",
            stacklevel=3,
        )


def build_config(settings: TrainingSettings, vocab_size: int, eos_token_id: int) -> TinyGPTConfig:
    fields = {
        **SMALL_MODEL,
        "n_positions": settings.block_size,
        "vocab_size": vocab_size,
        "bos_token_id": eos_token_id,
        "eos_token_id": eos_token_id,
        **settings.config,
    }
    config = TinyGPTConfig(**fields)
    if config.position_embedding_type == "learned" and config.n_positions < settings.block_size:
        raise ValueError(
            f"`TrainingSettings.block_size` {settings.block_size} > n_positions {config.n_positions} (learned positions)"
        )
    return config


def inputs_of(settings: TrainingSettings) -> dict:
    """Every path a run reads (or, for the data cache, writes besides OUT), by its setting: OUT may neither be,
    contain nor lie inside any of them (`refuse_inputs`)."""
    return {
        "`TrainingSettings.train`": settings.train,
        "`TrainingSettings.validation`": settings.validation,
        "`TrainingSettings.tokenizer`": settings.tokenizer,
        "`TrainingSettings.dataset`": settings.dataset,
        "`TrainingSettings.init_from`": settings.init_from,
        "`TrainingSettings.data_cache`": cache_folder(settings.data_cache),  # a Path: protected before it exists
    }


def train(settings: TrainingSettings, *, token: str | None = None) -> tuple[TinyGPTForCausalLM, dict]:
    """Run (or resume) a training run; returns (this process's model, a summary). The final model is written to
    OUT/model, its summary (loss history, validation perplexities, wall time) to OUT/summary.json. `token`: for a
    Hub `init_from`, a Hub token (never recorded; default: the one huggingface_hub knows).

    Everything that can be wrong with the settings, OUT or the data is found before the run folder is touched."""
    from ..folders.bundled import load_tokenizer

    protect = inputs_of(settings)
    out = check_output(settings.out, force=settings.force, protect=protect, reuse=settings.resume)
    if settings.resume and (out / FINAL).exists():  # it is written again at the end: say now if that would lose work
        check_output(out / FINAL, force=True)
    # cpu=True where there is no accelerator: accelerate then also treats `torchrun` on CPUs as data-parallel (gloo).
    # bf16 is torch's own autocast in the step, not accelerate's mixed_precision, which is fixed per process.
    accelerator = Accelerator(
        cpu=not torch.accelerator.is_available(),
        gradient_accumulation_steps=settings.grad_accum,
        log_with=settings.report_to or None,
        project_config=ProjectConfiguration(project_dir=str(out), logging_dir=str(out / TRACKERS)),
    )
    if accelerator.is_main_process:
        warn_if_bf16_is_slow_here(settings, accelerator.device)
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
    # The main process tokenizes into the data cache (once: later runs reuse it); the others then map its files.
    with accelerator.main_process_first():
        train_data, train_description = training_data(settings, tokenizer, tokenizer_from)
        validation_file = validation_data(settings, tokenizer, tokenizer_from)
    validation = None if validation_file is None else validation_file.tokens[: settings.validation_tokens]
    # What the tokens are made of: a resumed run must go on with the very data it started on.
    data = {"train": train_data.identity(), "validation": validation_file and validation_file.identity()}
    what = ", ".join(settings.train) or settings.dataset
    train_blocks = pack(train_data.tokens, settings.block_size, what=what)
    if settings.batch_size > len(train_blocks):
        raise ValueError(
            f"`TrainingSettings.batch_size` {settings.batch_size} is more than the {len(train_blocks)} blocks of "
            f"{settings.block_size} tokens the training data holds: lower `TrainingSettings.batch_size` or "
            "`TrainingSettings.block_size`"
        )
    if settings.init_from:
        start = starting_model(settings, len(tokenizer), token)
    else:
        start = build_config(settings, len(tokenizer), tokenizer.eos_token_id)

    # The main process holds OUT's lock for the whole run; with `force` an earlier run is swapped out here.
    with (
        run_folder(out, force=settings.force, resume=settings.resume, protect=protect)
        if accelerator.is_main_process
        else contextlib.nullcontext()
    ):
        accelerator.wait_for_everyone()
        return _train(
            settings, accelerator, out, start, tokenizer_from, train_description, train_blocks, validation, data
        )


def _resume(out: Path, settings, data, accelerator, model, optimizer, schedule) -> tuple[int, list[dict], float, str]:
    """Load the newest checkpoint that loads (an unreadable one is reported and skipped); the step it was at, the
    history up to it, the seconds spent training so far and the command that started the run (what its card
    records: the recipe, not the command that resumed it).
    Checkpoints a kill cut short are removed first: only those the run's manifest proves ours."""
    if accelerator.is_main_process:
        for name in (read_manifest(out) or {}).get("outputs", []):
            folder = out / name
            if re.fullmatch(rf"{CHECKPOINTS}/step-\d+", name) and folder.is_dir() and not (folder / PROGRESS).is_file():
                shutil.rmtree(folder)  # a step-N of ours without its progress: never complete
                record(out, forget=[name])
        remove_leftovers_in(out / CHECKPOINTS)  # the staging folders of saves a kill cut short
    accelerator.wait_for_everyone()
    for folder in reversed(_checkpoint_dirs(out)):
        try:
            progress = read_json_object(folder / PROGRESS)
            step, saved = progress.get("step"), progress.get("settings")
            if not (isinstance(step, int) and step >= 0 and isinstance(saved, dict)):
                raise ValueError(f"{folder / PROGRESS} has no step and settings")
            history = progress.get("history") or []  # a checkpoint from before histories were kept has none
            if history:
                checked_history(history, f"{folder / PROGRESS}")
            wall = progress.get("wall_s", 0.0)
            if isinstance(wall, bool) or not isinstance(wall, (int, float)) or not 0 <= wall < math.inf:
                raise ValueError(f"{folder / PROGRESS}: wall_s must be a number of seconds, got {wall!r:.40}")
        except (OSError, ValueError) as error:
            if accelerator.is_main_process:
                tqdm.write(f"skipping {folder}: {error}", file=sys.stderr)
            continue
        if changed := _changed_settings(saved, _comparable(settings)):
            raise ValueError(
                f"`TrainingSettings.resume` needs the settings the run started with; changed: {', '.join(changed)}"
            )
        if "data" in progress and (changed := _changed_data(progress["data"], data)):
            raise ValueError(
                f"`TrainingSettings.resume`: the data changed since {folder} was saved: {', '.join(changed[:3])}; "
                "continue on the data the run started on, or start a new run"
            )
        if step > settings.steps:
            raise ValueError(f"{folder} is at step {step}, past `TrainingSettings.steps` {settings.steps}")
        try:
            load_checkpoint(folder, accelerator, model, optimizer, schedule)
        except ValueError as error:
            if accelerator.is_main_process:
                tqdm.write(f"skipping {folder}: {error}", file=sys.stderr)
            continue
        if accelerator.is_main_process:
            tqdm.write(f"resumed from {folder} (step {step})")
        return step, history, wall, saved.get("command") or settings.command
    return 0, [], 0.0, settings.command


def _report(accelerator, out: Path, metrics: dict, step: int):
    """The step's metrics to the trackers of `report_to`; what they write under OUT is then recorded as ours."""
    accelerator.log(metrics, step=step)
    if accelerator.is_main_process:
        for tracker in accelerator.trackers:
            getattr(tracker.tracker, "flush", lambda: None)()  # TensorBoard's writer buffers in a thread
        record_tree(out, TRACKERS)


def _end_report(accelerator, out: Path):
    accelerator.end_training()
    if accelerator.is_main_process:
        record_tree(out, TRACKERS)


def adamw(groups: list[dict], learning_rate: float) -> torch.optim.AdamW:
    """AdamW, fused (one kernel over every parameter) where torch has that kernel for the parameters' device, else
    its multi-tensor path: the same update, in fewer passes over the weights."""
    try:
        return torch.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.95), fused=True)
    except RuntimeError:  # no fused kernel for this device
        return torch.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.95))


def _train(settings, accelerator, out, start, tokenizer_from, train_description, train_blocks, validation, data):
    """`start`: the model to train (from `init_from`), or the config of a new one; `data`: what its tokens are made
    of (`TokenFile.identity`), recorded with each checkpoint."""
    main = accelerator.is_main_process
    set_seed(settings.seed)
    model = start if isinstance(start, TinyGPTForCausalLM) else TinyGPTForCausalLM(start)
    decay = [p for p in model.parameters() if p.dim() >= 2]  # matrices decay; biases and LayerNorms do not
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    optimizer = adamw(groups, settings.learning_rate)
    schedule = get_cosine_with_min_lr_schedule_with_warmup(
        optimizer, settings.warmup_steps, settings.steps, min_lr_rate=settings.min_lr_ratio
    )
    # The schedule is not prepared: accelerate would step it once per process, but our batch size is global.
    model, optimizer = accelerator.prepare(model, optimizer)
    if settings.compile:  # not accelerate's dynamo_backend: the first Accelerator of a process fixes that for all
        model = torch.compile(model)
    resumed = _resume(out, settings, data, accelerator, model, optimizer, schedule) if settings.resume else None
    step, history, wall_before, command = resumed or (0, [], 0.0, settings.command)
    settings = replace(settings, command=command)
    if step == settings.steps and (out / FINAL).is_dir() and (out / "summary.json").is_file():
        if main:
            tqdm.write(f"{out}: this run already finished at step {step}; nothing to do", file=sys.stderr)
        return accelerator.unwrap_model(model, keep_torch_compile=False), read_json_object(out / "summary.json")

    if settings.report_to:
        if main:  # recorded before the trackers write there
            record(out, folders=[TRACKERS])
        hyperparameters = {
            k: v if isinstance(v, (int, float, str, bool)) else json.dumps(v) for k, v in asdict(settings).items()
        }
        accelerator.init_trackers(TRACKER_RUN, config=hyperparameters)

    def checkpoint():
        folder = out / CHECKPOINTS / f"step-{step:06d}"
        if main:  # recorded before it appears, forgotten after it is gone: the run folder stays provably ours
            record(out, folders=[CHECKPOINTS], outputs=[f"{CHECKPOINTS}/{folder.name}"])
        at = {  # what progress.json records
            "step": step,
            "settings": _comparable(settings),
            "data": data,
            "history": history,
            "wall_s": wall_before + time.perf_counter() - started,
        }
        save_checkpoint(folder, accelerator, model, optimizer, schedule, at)
        if main:
            for old in _checkpoint_dirs(out)[: -settings.keep_checkpoints]:
                if problems := unproven(old):  # someone changed it meanwhile: leave it
                    tqdm.write(f"keeping {old}: it holds {', '.join(problems[:3])}", file=sys.stderr)
                    continue
                shutil.rmtree(old)
                record(out, forget=[f"{CHECKPOINTS}/{old.name}"])

    per_process = settings.batch_size // accelerator.num_processes
    tokens_per_step = settings.batch_size * settings.block_size
    started = time.perf_counter()
    progress = tqdm(
        total=settings.steps, initial=step, disable=not main, desc="training", unit="step", dynamic_ncols=True
    )
    model.train()
    try:  # a run folder that vanishes (deleted, its disk unmounted) loses no training: it is saved elsewhere
        with _StopRequest() as stop:
            while step < settings.steps:
                tick = time.perf_counter()
                indices = batch_indices(step, settings.batch_size, len(train_blocks), settings.seed)
                mine = indices[accelerator.process_index * per_process : (accelerator.process_index + 1) * per_process]
                lr = schedule.get_last_lr()[0]  # the rate this step uses
                step_loss = 0.0
                # accelerate's accumulate: backward divides each micro-batch's loss by grad_accum, and the gradients
                # are synchronised across processes and applied (optimizer.step) only after the last micro-batch.
                batch = read_blocks(train_blocks, mine)
                if accelerator.device.type != "cpu":  # pinned host memory lets the copy overlap the previous step
                    batch = batch.pin_memory().to(accelerator.device, non_blocking=True)
                for micro_ids in batch.chunk(settings.grad_accum):
                    with accelerator.accumulate(model):
                        with torch.autocast(accelerator.device.type, dtype=torch.bfloat16, enabled=settings.bf16):
                            loss = model(
                                input_ids=micro_ids, labels=micro_ids, use_cache=False
                            ).loss  # no cache to build
                        accelerator.backward(loss)
                        if settings.grad_clip and accelerator.sync_gradients:
                            accelerator.clip_grad_norm_(model.parameters(), settings.grad_clip)
                        optimizer.step()
                        optimizer.zero_grad(set_to_none=True)
                    step_loss += loss.detach() / settings.grad_accum  # micro-batches hold equally many tokens
                schedule.step()
                step += 1
                mean_loss = accelerator.reduce(step_loss, "mean").item()
                tokens_per_s = tokens_per_step / (time.perf_counter() - tick)
                progress.update(1)
                progress.set_postfix(loss=f"{mean_loss:.3f}", tok_s=f"{tokens_per_s:,.0f}")
                logged = {"step": step, "train_loss": mean_loss, "lr": lr, "tokens_per_s": tokens_per_s}
                if validation is not None and (step % settings.eval_every == 0 or step == settings.steps):
                    logged["validation_perplexity"] = perplexity(
                        model, validation, settings.block_size, settings.eval_batch_size, accelerator
                    )
                history.append(logged)
                if settings.report_to:
                    _report(accelerator, out, {k: v for k, v in logged.items() if k != "step"}, step)
                if "validation_perplexity" in logged and main:
                    tqdm.write(
                        f"step {step}: train loss {mean_loss:.4f}, validation perplexity "
                        f"{logged['validation_perplexity']:.2f}"
                    )
                    write_recorded_file(out, LOSS_CURVE, loss_curve_png(history))
                stop_now = accelerator.reduce(torch.tensor(float(stop.requested), device=accelerator.device), "sum") > 0
                if step % settings.save_every == 0 or stop_now:
                    checkpoint()
                if stop_now:
                    progress.close()
                    if settings.report_to:
                        _end_report(accelerator, out)
                    said = f"checkpoint saved at step {step}; continue with `TrainingSettings.resume=True`"
                    raise TrainingInterrupted(said if main else "")
        progress.close()
        if settings.report_to:
            _end_report(accelerator, out)
        wall = wall_before + time.perf_counter() - started

        summary = {
            "steps": step,
            "final_train_loss": history[-1]["train_loss"] if history else None,
            "wall_s": wall,
            "history": history,
        }
        model = accelerator.unwrap_model(model, keep_torch_compile=False)
        if main:
            record(out, outputs=[FINAL])
            summary["validation_perplexity"] = _write_final_model(
                model,
                out / FINAL,
                settings,
                tokenizer_from,
                train_description,
                train_blocks.size,
                validation,
                wall,
                accelerator,
                history=history,
            )
            write_recorded_file(out, "summary.json", (json.dumps(summary, indent=2) + "\n").encode())
    except OSError as error:
        if out.is_dir() or not main:
            raise
        progress.close()
        raise _run_folder_vanished(
            out, step, accelerator.unwrap_model(model, keep_torch_compile=False), tokenizer_from
        ) from error
    accelerator.wait_for_everyone()
    return model, summary


def _run_folder_vanished(out: Path, step: int, model, tokenizer_from) -> OSError:
    """The run folder is gone: the model as trained so far is written to a folder beside where it was (or the
    temporary folder, where that is gone too), and the error says where, and at which step the run stopped."""
    from ..folders.model_folder import save_model_folder

    stamp = time.strftime("%Y%m%d-%H%M%S")
    for place in (out.parent, Path(tempfile.gettempdir())):
        rescued = place / f"{out.name}-rescued-step-{step}-{stamp}"
        try:
            with output_folder(rescued) as staging:
                save_model_folder(model, staging, tokenizer_from=tokenizer_from)
        except OSError:
            continue
        return FileNotFoundError(
            f"the run folder {out} vanished during the run, at step {step}: the model as trained so far is saved in "
            f"{rescued} (go on with `TrainingSettings.init_from` set to it)"
        )
    return FileNotFoundError(
        f"the run folder {out} vanished during the run, at step {step}, and the model could not be saved elsewhere"
    )


def _write_final_model(
    model, folder: Path, settings, tokenizer_from, data, train_tokens, validation, wall, accelerator, history=()
) -> float | None:
    """OUT/model, atomically: weights (in `save_dtype`), tokenizer, generation config, the loss history and its
    curve, and a card (showing the curve) whose validation perplexity is measured on the weights exactly as written."""
    from ..folders.model_card import render_model_card
    from ..folders.model_folder import DTYPES, save_model_folder

    if bad := [key for key, t in model.state_dict().items() if t.is_floating_point() and not torch.isfinite(t).all()]:
        raise ValueError(
            f"training diverged: {len(bad)} tensors hold inf or NaN ({', '.join(bad[:3])}, ...); nothing "
            f"written to {folder}; lower `TrainingSettings.learning_rate`"
        )
    dtype = DTYPES.get(settings.save_dtype) if settings.save_dtype else None
    to_save = model if dtype is None else copy.deepcopy(model).to(dtype)
    with output_folder(folder, force=True) as staging:  # OUT/model is ours: the run folder is locked
        save_model_folder(to_save, staging, tokenizer_from=tokenizer_from)
        if history:
            write_history(staging, list(history))
        ppl = None
        if validation is not None:
            written = load_strictly(staging, dtype=torch.float32)
            ppl = perplexity(written, validation, settings.block_size, settings.eval_batch_size)
        device = accelerator.device.type
        if device == "cpu":
            device = f"CPU ({torch.get_num_threads()} threads)"
        hardware = (
            f"{accelerator.num_processes} process{'es' if accelerator.num_processes > 1 else ''} × {device}"
            f"{', bf16 autocast' if settings.bf16 else ''}"
        )
        training = {
            "train_description": data,  # what the run trained on, as `training_data` describes it
            "train_paths": settings.train or [settings.dataset],  # a published card names them without folders
            "train_tokens": int(train_tokens),
            "steps": settings.steps,
            "tokens_per_step": settings.batch_size * settings.block_size,
            "hardware": hardware,
            "wall_time": f"{wall / 60:.1f} min",
            "validation_perplexity": ppl,
            "validation_description": ", ".join(Path(p).name for p in settings.validation) or None,
            "validation_tokens": int(len(validation)) if validation is not None else 0,
            "block_size": settings.block_size,
            "command": settings.command,
            "seed": settings.seed,
            "learning_rate": settings.learning_rate,
        }
        hub_id = settings.init_from if settings.init_from and not Path(settings.init_from).exists() else None
        card = render_model_card(  # a local starting folder is not named: a published card would show its path
            model.config,
            model_id=str(folder),
            provenance={"made_by": "training", "training": training},
            base_model=hub_id,
            loss_curve=LOSS_CURVE if history else None,
        )
        card.save(staging / "README.md")
    return ppl
