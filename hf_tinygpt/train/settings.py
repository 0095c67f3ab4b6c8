"""What a training run is asked to do: `TrainingSettings`, each field checked at the door and described once (its
`help`, which the command line shows for the flag that sets it), and what of them a resumed run must keep."""

import dataclasses
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..folders.errors import needs_extra
from ..folders.model_folder import DTYPES
from ..folders.reading import read_json_object, refuse_what_is_not_a_file
from ..model.checks import is_number
from ..model.configuration_tinygpt import TinyGPTConfig
from ..model.positions import POSITION_SCHEME_CLASSES, positions_reach
from ..settings import setting
from .token_files import cache_folder, is_token_folder, stays_inside

# What `hf-tinygpt train` builds unless told otherwise: small enough to train on a CPU in minutes (the 50,257 × 64
# tied head is most of its 3.4 M parameters). TinyGPTConfig's own defaults are GPT-2 small's 124 M.
SMALL_MODEL = {"n_layer": 4, "n_embd": 64, "n_head": 4}


@dataclass
class TrainingSettings:
    out: str = setting(
        help="run folder: checkpoints/ and the final model/ (written atomically)", group="output", metavar="DIR"
    )
    force: bool = setting(False, "replace an earlier output of hf-tinygpt at `out`", group="output")
    # ---- data
    train: list[str] = setting(
        [],
        "text files or folders (folders: files matching `glob`), or one token folder",
        group="data",
        reads=True,
    )
    validation: list[str] = setting(
        [],
        "held-out text files or folders (left out of `train` folders), or one token folder (default: none, no "
        "perplexity)",
        group="data",
        reads=True,
    )
    glob: str = setting("*.txt", "which files of a `train` or `validation` folder to use", group="data")
    dataset: str | None = setting(
        None,
        "instead of `train`: a Hugging Face dataset ([datasets] extra), a save_to_disk folder or what load_dataset "
        "takes (a Hub id, a folder of data files; default: none, the files of `train`)",
        group="data",
        reads=True,
    )
    dataset_config: str | None = setting(
        None, "the `dataset` configuration (load_dataset's name; default: the dataset's own)", group="data"
    )
    dataset_split: str = setting("train", "the `dataset` split to train on", group="data")
    text_column: str = setting("text", "the `dataset` column that holds the text", group="data")
    data_cache: str | None = setting(
        None,
        "where tokenized data is kept for later runs (default: $HF_TINYGPT_CACHE/tokens, ~/.cache/hf_tinygpt/tokens)",
        group="data",
        metavar="FOLDER",
        reads=True,
    )
    tokenizer: str | None = setting(
        None,
        "the tokenizer to train with (default: gpt2): 'gpt2' (the GPT-2 BPE shipped here), or a folder or Hub id",
        group="data",
        metavar="gpt2|PATH",
        reads=True,
    )
    # ---- model
    config: dict = setting({}, "TinyGPTConfig fields (default: the small model, `SMALL_MODEL`)", flag=False)
    init_from: str | None = setting(
        None,
        "start from this tinygpt or GPT-2 folder or Hub id (its shape; only dropout may change) instead of random "
        "weights (default: none, random weights)",
        group="model",
        metavar="MODEL",
        reads=True,
    )
    init_revision: str | None = setting(
        None,
        "the Hub revision of `init_from`: branch, tag or commit (default: main)",
        group="model",
        flag="--revision",
        metavar="REVISION",
    )
    # ---- optimisation
    block_size: int = setting(128, "tokens per training sequence", group="optimisation")
    batch_size: int = setting(16, "sequences per step, over all processes", group="optimisation")
    grad_accum: int = setting(
        1,
        "split each process's share of a step into this many micro-batches, for batches bigger than memory",
        group="optimisation",
    )
    steps: int = setting(500, "optimizer steps", group="optimisation")
    learning_rate: float = setting(1e-3, "peak learning rate (AdamW)", group="optimisation", flag="--lr", metavar="LR")
    min_lr_ratio: float = setting(0.1, "cosine decay ends at the learning rate × this", group="optimisation")
    warmup_steps: int = setting(100, "linear warmup steps", group="optimisation")
    weight_decay: float = setting(0.1, "AdamW weight decay of the matrices", group="optimisation")
    grad_clip: float = setting(1.0, "max gradient norm (0: no clipping)", group="optimisation")
    compile: bool = setting(False, "compile the model with torch.compile (inductor)", group="optimisation")
    bf16: bool = setting(False, "bf16 autocast (CPU or GPU)", group="optimisation")
    seed: int = setting(0, "weights, data order and dropout", group="optimisation")
    # ---- evaluation and output
    eval_every: int = setting(200, "steps between validation perplexities", group="output")
    eval_batch_size: int = setting(
        4, "windows per validation batch (logits are batch × block × vocab floats)", group="output"
    )
    validation_tokens: int | None = setting(
        None,
        "validation perplexity over the first this many held-out tokens (default: all of them)",
        group="output",
    )
    save_every: int = setting(200, "steps between checkpoints", group="output")
    keep_checkpoints: int = setting(2, "how many of the newest checkpoints are kept", group="output")
    save_dtype: str | None = setting(
        None,
        "dtype of the final weights (default: float32, as trained)",
        choices=sorted(DTYPES),
        group="output",
    )
    resume: bool = setting(False, "continue from the last complete checkpoint in `out`", group="output")
    command: str = setting("", "what produced this run, for the model card", flag=False, group="output")
    report_to: list[str] = setting(
        [],
        "send the metrics to these accelerate trackers (tensorboard writes into `out`/trackers; wandb, mlflow, ...)",
        group="output",
        metavar="TRACKER",
    )

    def __post_init__(self):
        """Every setting checked at the door, the message naming the field (`TrainingSettings.steps`)."""
        _check_numbers(self)
        _check_paths(self)
        _check_data(self)
        _check_config(self)
        _check_trackers(self)


@dataclass
class ModelShape:
    """The model a new run builds, as a few settings: a JSON file of TinyGPTConfig fields, and the fields most runs
    change, which win over the file. `config_fields()` is what `TrainingSettings.config` takes."""

    config: str | None = setting(
        None, "JSON file of TinyGPTConfig fields (default: the small model below)", group="model", reads=True
    )
    position: str | None = setting(
        None, "position scheme (default: learned)", group="model", choices=list(POSITION_SCHEME_CLASSES)
    )
    n_layer: int | None = setting(None, f"blocks (default: {SMALL_MODEL['n_layer']})", group="model")
    n_embd: int | None = setting(None, f"width (default: {SMALL_MODEL['n_embd']})", group="model")
    n_head: int | None = setting(None, f"attention heads (default: {SMALL_MODEL['n_head']})", group="model")
    n_positions: int | None = setting(None, "context the model allows (default: `block_size`)", group="model")
    dropout: float | None = setting(None, "resid/embd/attn dropout (default: 0.1)", group="model")

    def config_fields(self) -> dict:
        if self.dropout is not None and not (is_number(self.dropout) and 0 <= self.dropout < 1):
            raise ValueError(f"`dropout` must be a number in [0, 1), got {self.dropout!r}")
        fields = read_json_object(self.config, f"{self.config} (`config`)") if self.config else {}
        named = {"position_embedding_type": self.position, "n_positions": self.n_positions}
        named |= {name: getattr(self, name) for name in ("n_layer", "n_embd", "n_head")}
        named |= dict.fromkeys(DROPOUT_FIELDS, self.dropout)
        return fields | {name: value for name, value in named.items() if value is not None}


_DEFAULTS = {setting.name: setting.default for setting in dataclasses.fields(TrainingSettings)}
# The settings that are paths a run reads (or, for the data cache, writes besides OUT): those marked `reads`.
INPUTS = tuple(setting.name for setting in dataclasses.fields(TrainingSettings) if setting.metadata.get("reads"))
# What a run may change in the config of the model it starts from: dropout acts only while training.
DROPOUT_FIELDS = ("resid_pdrop", "embd_pdrop", "attn_pdrop")


def _check_numbers(settings: TrainingSettings):
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
        value = getattr(settings, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"`TrainingSettings.{name}` must be an integer >= {low}, got {value!r}")
    tokens = settings.validation_tokens
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 2):
        raise ValueError(f"`TrainingSettings.validation_tokens` must be None or an integer >= 2, got {tokens!r}")
    for name, (low, high) in {
        "learning_rate": (0, math.inf),
        "min_lr_ratio": (0, 1),
        "weight_decay": (0, math.inf),
        "grad_clip": (0, math.inf),
    }.items():
        value = getattr(settings, name)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not low <= value <= high
            or not math.isfinite(value)
            or (name == "learning_rate" and value == 0)
        ):
            within = "> 0" if name == "learning_rate" else (f">= {low}" if high == math.inf else f"in [{low}, {high}]")
            raise ValueError(f"`TrainingSettings.{name}` must be a finite number {within}, got {value!r}")
    if settings.warmup_steps >= settings.steps and not settings.resume:  # the default 100 warmup steps, a short run
        warnings.warn(
            f"`TrainingSettings.warmup_steps` ({settings.warmup_steps}) >= `TrainingSettings.steps` ({settings.steps}): "
            "the learning rate never reaches `TrainingSettings.learning_rate`, nor decays; lower "
            "`TrainingSettings.warmup_steps`",
            stacklevel=1,  # the package's line: the command line says it in flags
        )
    if settings.save_dtype is not None and settings.save_dtype not in DTYPES:
        raise ValueError(f"`TrainingSettings.save_dtype` must be one of {sorted(DTYPES)}, got {settings.save_dtype!r}")


def _check_paths(settings: TrainingSettings):
    if settings.init_revision is not None and settings.init_from is None:
        raise ValueError("`TrainingSettings.init_revision` is the revision of `TrainingSettings.init_from`: set both")
    if settings.init_revision is not None and os.path.lexists(settings.init_from):
        raise ValueError(
            f"`TrainingSettings.init_revision` is a revision of a Hub repo, and `TrainingSettings.init_from` "
            f"({settings.init_from}) is a local folder, which has none: leave `TrainingSettings.init_revision` out"
        )
    if not (isinstance(settings.out, (str, os.PathLike)) and str(settings.out)):
        raise ValueError(f"`TrainingSettings.out` must be a path, got {settings.out!r}")
    if settings.resume and settings.force:
        raise ValueError(
            "`TrainingSettings.resume` and `TrainingSettings.force` are both set: resume goes on with the run in "
            "`TrainingSettings.out`, force trains anew in its place; set one"
        )
    if settings.resume and not os.path.lexists(settings.out):  # a mistyped folder would train from step 0 unsaid
        raise FileNotFoundError(
            f"{settings.out} (`TrainingSettings.out`): no such run folder, so nothing to resume; leave "
            "`TrainingSettings.resume` out to start a run there"
        )
    for name in ("dataset", "dataset_config", "tokenizer", "init_from", "data_cache"):
        if (value := getattr(settings, name)) is not None and not (isinstance(value, str) and value):
            raise ValueError(f"`TrainingSettings.{name}` must be None or a non-empty string, got {value!r}")
    for name in ("train", "validation"):
        paths = getattr(settings, name)
        if not isinstance(paths, (list, tuple)) or not all(isinstance(p, str) and p for p in paths):
            raise ValueError(f"`TrainingSettings.{name}` must be a list of non-empty paths, got {paths!r}")
        for path in paths:  # a FIFO would be read forever
            refuse_what_is_not_a_file(path, f"{path} (`TrainingSettings.{name}`)")
    for name in ("out", *INPUTS):
        value = getattr(settings, name)
        for path in value if isinstance(value, (list, tuple)) else [value]:
            try:  # the model card records the paths as UTF-8 text: an undecodable name would fail at the end
                str(path or "").encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(
                    f"`TrainingSettings.{name}`: {path!r} is not valid UTF-8, which the model card records; rename it"
                ) from None


def _check_data(settings: TrainingSettings):
    if not settings.train and not settings.dataset:
        raise ValueError(
            "`TrainingSettings.train` needs at least one text file or folder (or give `TrainingSettings.dataset`)"
        )
    if settings.train and settings.dataset:
        raise ValueError("`TrainingSettings.train` and `TrainingSettings.dataset` are both set: give one of them")
    if not stays_inside(settings.glob):
        raise ValueError(
            "`TrainingSettings.glob` must be a pattern inside each `TrainingSettings.train` folder, such as "
            f"'*.txt', got {settings.glob!r}"
        )
    # An option that does not apply to the data given is refused, not ignored.
    for name in ("dataset_config", "dataset_split", "text_column") if not settings.dataset else ():
        if getattr(settings, name) != _DEFAULTS[name]:
            raise ValueError(f"`TrainingSettings.{name}` applies to `TrainingSettings.dataset`, which is not set")
    for name in ("eval_every", "eval_batch_size", "validation_tokens") if not settings.validation else ():
        if getattr(settings, name) != _DEFAULTS[name]:
            raise ValueError(f"`TrainingSettings.{name}` applies to `TrainingSettings.validation`, which is not set")
    folders = [
        path for path in settings.train + settings.validation if Path(path).is_dir() and not is_token_folder(path)
    ]
    if settings.glob != _DEFAULTS["glob"] and not folders:
        raise ValueError(
            "`TrainingSettings.glob` picks the files of `TrainingSettings.train` and `TrainingSettings.validation` "
            "folders, and no folder of text files is given (a token folder holds tokens)"
        )


def _check_config(settings: TrainingSettings):
    if not isinstance(settings.config, dict):
        raise ValueError(f"`TrainingSettings.config` must be a dict of TinyGPTConfig fields, got {settings.config!r}")
    if unknown := sorted(set(settings.config) - TinyGPTConfig.field_names()):
        raise ValueError(
            f"`TrainingSettings.config`: {', '.join(unknown)} {'is not a' if len(unknown) == 1 else 'are not'} "
            "TinyGPTConfig field(s) (a typo would otherwise be ignored)"
        )
    fixed = sorted(set(settings.config) - set(DROPOUT_FIELDS))
    if settings.init_from is not None and fixed:
        raise ValueError(
            f"the model of `TrainingSettings.init_from` ({settings.init_from}) fixes its shape, and the run's config "
            f"sets {', '.join(fixed)}: leave {'it' if len(fixed) == 1 else 'them'} out; only dropout may change"
        )
    build_config(settings, vocab_size=1, eos_token_id=0)  # its values, before any text is tokenized


def build_config(settings: TrainingSettings, vocab_size: int, eos_token_id: int) -> TinyGPTConfig:
    """The config of a new model: the small model, sized for the run's blocks and tokenizer, as `config` changes it."""
    fields = {
        **SMALL_MODEL,
        "n_positions": settings.block_size,
        "vocab_size": vocab_size,
        "bos_token_id": eos_token_id,
        "eos_token_id": eos_token_id,
        **settings.config,
    }
    config = TinyGPTConfig(**fields)
    if config.vocab_size < vocab_size:  # found out only at the first step, as a token id with no row
        raise ValueError(
            f"`TrainingSettings.config` sets vocab_size {config.vocab_size}, fewer than the tokenizer's {vocab_size} "
            "tokens: leave vocab_size out (a new model takes the tokenizer's)"
        )
    if (reach := positions_reach(config)) is not None and reach < settings.block_size:
        raise ValueError(
            f"`TrainingSettings.block_size` {settings.block_size} > n_positions {reach} "
            f"({config.position_embedding_type} positions)"
        )
    return config


def _check_trackers(settings: TrainingSettings):
    if not isinstance(settings.report_to, (list, tuple)) or any(not isinstance(t, str) for t in settings.report_to):
        raise ValueError(f"`TrainingSettings.report_to` must be a list of tracker names, got {settings.report_to!r}")
    try:
        from accelerate.tracking import LOGGER_TYPE_TO_CLASS, get_available_trackers
    except ImportError as error:
        raise needs_extra("train", error) from error
    trackers = sorted(LOGGER_TYPE_TO_CLASS)
    if unknown := sorted(set(settings.report_to) - set(trackers)):
        raise ValueError(
            f"`TrainingSettings.report_to`: {', '.join(unknown)} is not a tracker accelerate supports "
            f"({', '.join(trackers)})"
        )
    available = {str(tracker) for tracker in get_available_trackers()}
    if missing := [name for name in settings.report_to if name not in available]:
        raise ValueError(
            f"`TrainingSettings.report_to`: {', '.join(missing)} is not installed (pip install {' '.join(missing)})"
        )


def inputs_of(settings: TrainingSettings) -> dict:
    """Every path a run reads (or, for the data cache, writes besides OUT), by its setting: OUT may neither be,
    contain nor lie inside any of them (`refuse_inputs`)."""
    paths = {f"`TrainingSettings.{name}`": getattr(settings, name) for name in INPUTS}
    paths["`TrainingSettings.data_cache`"] = cache_folder(settings.data_cache)  # a Path: protected before it exists
    return paths
