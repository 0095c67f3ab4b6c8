"""Reading checkpoints safely, and checking what they hold: JSON configs, tensors (pickles only with
`weights_only=True`), and whether a state dict fits a config. Everything wrong is named."""

import contextlib
import json
import logging
import math
import os
import pickle
import stat
import threading
from pathlib import Path

import torch
from huggingface_hub import file_exists, hf_hub_download, snapshot_download
from safetensors import SafetensorError, safe_open
from transformers import GenerationConfig, PreTrainedConfig

from ..model.compat import resolve_revision
from ..model.configuration_tinygpt import TinyGPTConfig
from ..model.gpt2_layout import HEAD, TIED_TO
from ..model.modeling_tinygpt import TinyGPTForCausalLM
from .errors import HubRequestError, describe, describe_answer, first_line, hub_answer

HUB_OPTIONS = ("revision", "token")  # what the command line passes on for a Hub id
# The code files a tinygpt folder's `auto_map` may name: this package's own, which is what runs here (never the copy).
OWN_CLASSES = {
    "AutoConfig": "configuration_tinygpt.TinyGPTConfig",
    "AutoModel": "modeling_tinygpt.TinyGPTModel",
    "AutoModelForCausalLM": "modeling_tinygpt.TinyGPTForCausalLM",
}

# What a malformed checkpoint (a truncated safetensors file, an index without weight_map, a config.json where a
# weights file belongs, a garbage tokenizer.json) raises from deep inside transformers, safetensors or torch.
MALFORMED = (
    KeyError,
    AttributeError,
    TypeError,
    IndexError,
    RuntimeError,
    SafetensorError,
    pickle.UnpicklingError,
    UnicodeDecodeError,
    RecursionError,
)


@contextlib.contextmanager
def reading_checkpoint(source):
    """Around code that reads someone else's checkpoint: a malformed one becomes a ValueError naming it (our own
    ValueError and OSError, which already name what is wrong, pass through)."""
    try:
        yield
    except MALFORMED as error:
        raise ValueError(f"{source}: cannot read this checkpoint ({describe(error)})") from error


def refuse_what_is_not_a_file(path, what: str | None = None):
    """A ValueError for a path that exists and is not a regular file (a FIFO, a device, a socket): reading one would
    wait forever, or read what no file holds."""
    with contextlib.suppress(OSError):
        if not stat.S_ISREG(os.stat(path).st_mode) and not os.path.isdir(path):
            raise ValueError(f"{what or path} is not a regular file (a FIFO, device or socket?): give a file")


def read_json_object(path, what: str | None = None) -> dict:
    """A JSON file that must hold an object, or a ValueError naming the file and what is wrong with it."""
    what = what or str(path)
    refuse_what_is_not_a_file(path, what)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{what} is a folder, not a JSON file")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{what}: no such file")
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:  # JSONDecodeError is a ValueError
        raise ValueError(f"{what} is not valid JSON ({error})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what} holds a JSON {type(value).__name__}, not an object of config fields")
    return value


def refuse_revision_of_a_local_path(path, hub_kwargs: dict):
    """A Hub revision given with a local file or folder would be ignored by the loaders: an error instead."""
    if hub_kwargs.get("revision") is not None and os.path.lexists(path):
        kind = "folder" if Path(path).is_dir() else "file"
        raise ValueError(
            f"`revision` is a revision of a Hub repo, and {path} is a local {kind}, which has none: leave `revision` "
            "out (or give a Hub id)"
        )


def at_one_revision(path_or_repo_id, hub_kwargs: dict) -> dict:
    """`hub_kwargs` with a Hub id's revision resolved to the commit it names now (transformers 5.24 and later; as
    given before): every file read with them, config.json first, then comes from that one commit."""
    if os.path.lexists(str(path_or_repo_id)):
        return hub_kwargs
    options = {key: hub_kwargs[key] for key in ("token", "local_files_only", "cache_dir") if key in hub_kwargs}
    return {**hub_kwargs, "revision": resolve_revision(str(path_or_repo_id), hub_kwargs.get("revision"), **options)}


def hub_options(kwargs: dict) -> dict:
    """Of a load's keyword arguments, those huggingface_hub's downloads take (`HUB_OPTIONS`)."""
    return {key: value for key, value in kwargs.items() if key in HUB_OPTIONS}


def cannot_be_a_hub_id(path: str) -> bool:
    """Whether `path`, no folder here, is no Hub id either (a path, deeper than owner/name, or a file): a missing
    folder, then, to be named as such and not sent to the Hub."""
    return path.startswith(("/", ".")) or path.count("/") > 1 or Path(path).is_file()


def read_config_dict(path_or_repo_id, **hub_kwargs) -> dict:
    """The `config.json` of a folder or Hub repo as a dict (a FileNotFoundError or ValueError names what is wrong).
    A config that asks for code of its own (`auto_map`) is refused: this package never runs a folder's code."""
    path = str(path_or_repo_id)
    refuse_revision_of_a_local_path(path, hub_kwargs)
    if Path(path).is_dir():
        if not (Path(path) / "config.json").is_file():
            inside = Path(path) / "model"  # a training run's folder holds its model there
            hint = f"; a training run's is {inside}" if (inside / "config.json").is_file() else ""
            raise FileNotFoundError(f"{path}: no config.json (expected a model folder{hint})")
        config_dict = read_json_object(Path(path) / "config.json", what=f"{path}/config.json")
    elif Path(path).is_file():
        raise FileNotFoundError(f"{path} is a file: give the model folder that holds config.json (or a Hub id)")
    elif cannot_be_a_hub_id(path):
        raise FileNotFoundError(f"{path}: no such model folder (nor a Hub id)")
    else:
        try:
            config_dict, _ = PreTrainedConfig.get_config_dict(path, **hub_kwargs)
        except OSError as error:
            answer = hub_answer(error)
            if answer is not None and answer.response.status_code != 404:  # answered, not missing: say what it said
                said = describe_answer(answer, [hub_kwargs.get("token")])
                raise HubRequestError(
                    f"reading {path} from the Hub failed: {said}", answer.response.status_code
                ) from error
            raise FileNotFoundError(f"{path}: no config.json there ({first_line(error)})") from None
    refuse_foreign_code(config_dict, f"{path}/config.json")
    return config_dict


def tinygpt_folder(src: str, **hub_kwargs) -> tuple[Path, Path | None] | None:
    """The local folder of a tinygpt SRC, and for a Hub id (downloaded through the HF cache) the cache folder its
    links stay in; None if SRC is GPT-2."""
    config = read_config_dict(src, **hub_kwargs)
    if config.get("model_type") == "gpt2":
        return None
    if config.get("model_type") != TinyGPTConfig.model_type:
        raise ValueError(f"{src}: model_type {config.get('model_type')!r} is neither tinygpt nor gpt2")
    if Path(src).is_dir():
        return Path(src), None
    snapshot = Path(snapshot_download(src, **hub_kwargs))
    return snapshot, snapshot.parent.parent


def refuse_foreign_code(config: dict, where: str, *, tokenizer: bool = False):
    """A ValueError if a config.json or tokenizer_config.json asks transformers to run code that came with it: any
    `auto_map` but the one a tinygpt folder carries, which names this package's own classes (and those run here)."""
    auto_map = config.get("auto_map")
    if auto_map is None:
        return
    ours = not tokenizer and isinstance(auto_map, dict) and all(OWN_CLASSES.get(k) == v for k, v in auto_map.items())
    if ours and config.get("model_type") != TinyGPTConfig.model_type:  # the auto_map is right, the type is not
        raise ValueError(
            f"{where}: model_type is {config.get('model_type')!r}, but its auto_map names a tinygpt's classes: set "
            f'model_type to "{TinyGPTConfig.model_type}"'
        )
    if not ours:
        raise ValueError(
            f"{where}: its auto_map ({json.dumps(auto_map)[:200]}) names code that came with the model; "
            "hf-tinygpt never runs a folder's code. Remove auto_map if the model is a tinygpt, GPT-2 or "
            "an architecture transformers has"
        )


def check_weights_index(folder) -> list[str]:
    """The shard files a local folder's weights indexes name, or a ValueError if one names a shard outside the
    folder (`../elsewhere`, `/abs`): transformers would read it."""
    named = []
    for name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = Path(folder) / name
        if not index.is_file():
            continue
        weight_map = read_json_object(index).get("weight_map")
        shard_names = weight_map.values() if isinstance(weight_map, dict) else [None]
        if not weight_map or not all(isinstance(name, str) for name in shard_names):
            raise ValueError(f"{index}: no weight_map (tensor name → shard file name)")
        shards = sorted(set(weight_map.values()))
        if bad := [shard for shard in shards if Path(shard).name != shard or shard in (".", "..")]:
            raise ValueError(f"{index}: shard names must be files in the folder itself, got {bad}")
        named += shards
    return named


def read_tinygpt_config(model_or_config: str, **hub_kwargs) -> TinyGPTConfig:
    """A TinyGPTConfig from a config.json file, a model folder or a Hub id (tinygpt or GPT-2)."""
    refuse_revision_of_a_local_path(model_or_config, hub_kwargs)
    if Path(model_or_config).is_file():
        config_dict = read_json_object(model_or_config)
    else:
        config_dict = read_config_dict(model_or_config, **hub_kwargs)
    model_type = config_dict.get("model_type")
    if model_type not in (None, "gpt2", TinyGPTConfig.model_type):
        raise ValueError(f"{model_or_config}: model_type {model_type!r} is neither tinygpt nor gpt2")
    return TinyGPTConfig.from_dict(config_dict)  # a GPT-2 config reads as the TinyGPT with the same math


def has_tokenizer(src, **hub_kwargs) -> bool:
    """Whether a folder or Hub repo carries tokenizer files (fast `tokenizer.json` or BPE `vocab.json`)."""
    names = ("tokenizer.json", "vocab.json")
    if Path(src).is_dir():
        for name in names:  # one that is there but no file would be skipped for the bundled tokenizer: say so
            refuse_what_is_not_a_file(Path(src) / name)
        return any((Path(src) / name).is_file() for name in names)
    return any(file_exists(str(src), name, **hub_options(hub_kwargs)) for name in names)


def read_state_dict(weights_file: str) -> dict[str, torch.Tensor]:
    """All tensors of one `.safetensors` or pickle file; pickles only with `weights_only=True` (no code runs)."""
    try:
        if weights_file.endswith(".safetensors"):
            from safetensors.torch import load_file

            tensors = load_file(weights_file)
        else:
            try:
                tensors = torch.load(weights_file, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as error:
                if "_use_new_zipfile_serialization" not in str(error):
                    raise
                tensors = torch.load(weights_file, map_location="cpu", weights_only=True)  # pre-zip pickle: no mmap
    except Exception as error:  # truncated, corrupt, or a pickle that wants to run code
        raise ValueError(f"{weights_file}: cannot read the tensors ({describe(error)})") from error
    if not isinstance(tensors, dict) or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in tensors.items()):
        raise ValueError(f"{weights_file}: holds {type(tensors).__name__}, not a state dict (tensor names → tensors)")
    return tensors


class _NoLoadReport(logging.Filter):
    """transformers' report of the tensors a checkpoint lacks or has too many of, left out for the thread that loads
    strictly: `load_strictly` raises an error that lists them (the report would first say they were initialised at
    random). A report of conversion errors is kept: transformers' error then points to it."""

    def __init__(self):
        super().__init__()
        self.thread = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        said = record.getMessage()
        elsewhere = record.thread not in (self.thread, None)  # None: logging records no threads
        return elsewhere or "LOAD REPORT" not in said or "CONVERSION" in said


# The generation settings a folder's users get, and what each must be (transformers' own `validate` accepts
# `temperature: -5` and `max_length: "x"`, and `generate` then crashes on them or misreads them).
_GENERATION_RULES = {
    "max_length": ("an integer >= 1", lambda v: _integer(v) and v >= 1),
    "max_new_tokens": ("an integer >= 1", lambda v: _integer(v) and v >= 1),
    "min_new_tokens": ("an integer >= 0", lambda v: _integer(v) and v >= 0),
    "temperature": ("a finite number >= 0", lambda v: _number(v) and 0 <= v < math.inf),
    "top_k": ("an integer >= 0", lambda v: _integer(v) and v >= 0),
    "top_p": ("a number in (0, 1]", lambda v: _number(v) and 0 < v <= 1),
    "repetition_penalty": ("a finite number > 0", lambda v: _number(v) and 0 < v < math.inf),
}


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # NaN is no number


def generation_problems(settings: dict) -> list[str]:
    """Each of the generation `settings` that `generate` would crash on or misread, as `name must be ..., got value`."""
    problems = []
    for name, (what, fine) in _GENERATION_RULES.items():
        value = settings.get(name)
        if value is not None and not fine(value):
            problems.append(f"{name} must be {what}, got {value!r}")
    return problems


def read_generation_config(folder: Path, where: str | None = None) -> GenerationConfig:
    """The folder's generation_config.json, read once, as `GenerationConfig` reads it, every setting `generate` takes
    checked first; a ValueError names the file (as `where`, if given) and the setting (transformers names neither,
    and a model's `from_pretrained` drops a file it cannot read)."""
    path = folder / "generation_config.json"
    settings = read_json_object(path, what=where)
    path = where or path
    if problems := generation_problems(settings):
        raise ValueError(f"{path}: {'; '.join(problems)}: fix it, or remove it")
    try:
        return GenerationConfig.from_dict(settings)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{path}: not a generation config ({describe(error)})") from None


# More weights than a checkpoint holds that a config may ask for before its load is refused unbuilt: transformers
# fills every tensor the checkpoint has at another size at random, at the config's size, before it compares them.
CONFIG_OVERREACH = 2**27


def refuse_a_config_larger_than_its_weights(folder: Path, config_dict: dict, shards: list[str]):
    """A ValueError naming config.json where a tinygpt or GPT-2 folder's config asks for far more weights than its
    checkpoint holds (`shards`, as its index names them, or its one file; safetensors' headers read, a pickle mapped,
    not their tensors): `n_positions: 2**30` would be allocated, then refused."""
    if config_dict.get("model_type") not in ("tinygpt", "gpt2"):
        return
    shapes = {}
    default = ["model.safetensors" if (folder / "model.safetensors").is_file() else "pytorch_model.bin"]
    for name in shards or default:
        try:
            if name.endswith(".safetensors"):
                with safe_open(folder / name, framework="pt") as weights:
                    shapes |= {key: tuple(weights.get_slice(key).get_shape()) for key in weights.keys()}
            else:  # torch's zip format, mapped: the shapes are read, the tensors stay on disk
                weights = torch.load(folder / name, map_location="cpu", weights_only=True, mmap=True)
                shapes |= {key: tuple(tensor.shape) for key, tensor in weights.items()}
        except (SafetensorError, OSError, RuntimeError, pickle.UnpicklingError, AttributeError):
            return  # the load names a file it cannot read (or an older pickle format, which cannot be mapped)
    try:
        config = TinyGPTConfig.from_dict(config_dict)  # GPT-2's reads as its TinyGPT twin: the same weights
        with torch.device("meta"):
            model = TinyGPTForCausalLM(config)
    except (ValueError, TypeError):
        return  # the load names the field
    wanted, held = sum(p.numel() for p in model.parameters()), sum(math.prod(shape) for shape in shapes.values())
    if wanted - held > CONFIG_OVERREACH:
        larger = [
            f"{key} is {shapes[key]} in the checkpoint, {tuple(tensor.shape)} in the model"
            for key, tensor in model.state_dict().items()
            if key in shapes and shapes[key] != tuple(tensor.shape) and config_dict["model_type"] == "tinygpt"
        ]
        raise ValueError(
            f"{folder / 'config.json'} describes a model of {wanted:,} weights, and the checkpoint holds {held:,}"
            + (f" ({'; '.join(larger[:3])})" if larger else "")
            + ": its sizes (n_positions, vocab_size, n_embd, n_layer, ...) are not these weights': fix config.json"
        )


def hub_generation_config(repo_id: str, kwargs: dict) -> Path | None:
    """A Hub repo's generation_config.json in the HF cache, fetched as transformers would (at the revision and with
    the token in `kwargs`); None where it has none, or cannot be fetched now (transformers then says why)."""
    try:
        return Path(hf_hub_download(repo_id, "generation_config.json", **hub_options(kwargs)))
    except (OSError, ValueError):  # none there (EntryNotFoundError is an OSError), offline, no such repo
        return None


def load_strictly(source, model_class=TinyGPTForCausalLM, **kwargs):
    """`model_class.from_pretrained(source, **kwargs)`, strictly: a checkpoint whose tensors do not fit the model
    (missing, unexpected or wrongly shaped ones) is a ValueError that lists them, where transformers would warn and
    initialise them at random, and so is one with inf or NaN weights or a generation_config.json `generate` would
    crash on or misread (`read_generation_config`). Every load the command line makes goes through here.

    config.json is read once: a `config` given is the one the caller read (`read_config_dict`'s dict, which a class
    other than TinyGPT's builds its config from, or a config object), and is not read again; otherwise a local
    folder's is read here, and a TinyGPT is built from that read."""
    refuse_revision_of_a_local_path(str(source), kwargs)
    given = kwargs.get("config")
    if Path(str(source)).is_dir():
        if (Path(source) / "generation_config.json").is_file():  # read first: transformers refuses some values unnamed
            kwargs["generation_config"] = read_generation_config(Path(source))
        if not isinstance(given, (dict, PreTrainedConfig)):
            config_dict = read_config_dict(source)  # refuses an auto_map of foreign code, naming it
            if given is None and issubclass(model_class, TinyGPTForCausalLM):  # it takes config.json as read
                kwargs["config"] = config_dict
        shards = check_weights_index(source)
        if isinstance(read := given if given is not None else config_dict, dict):
            refuse_a_config_larger_than_its_weights(Path(source), read, shards)
    elif not cannot_be_a_hub_id(str(source)) and (fetched := hub_generation_config(str(source), kwargs)):
        kwargs["generation_config"] = read_generation_config(fetched.parent, f"{source}: generation_config.json")
    report, no_report = logging.getLogger("transformers.modeling_utils"), _NoLoadReport()
    report.addFilter(no_report)  # what it reports, the ValueError below names
    try:
        if isinstance(given, dict) and not issubclass(model_class, TinyGPTForCausalLM):
            kwargs["config"] = model_class.config_class.from_dict(given)  # a field it refuses is named below
        model, info = model_class.from_pretrained(
            source, output_loading_info=True, ignore_mismatched_sizes=True, trust_remote_code=False, **kwargs
        )
    except ValueError as error:  # a config field the config class refuses names the field, not the folder
        if str(source) in str(error):
            raise
        raise ValueError(f"{source}: {error}") from error
    finally:
        report.removeFilter(no_report)
    mismatched = [
        f"{key} is {tuple(theirs)} in the checkpoint, {tuple(ours)} in the model"
        for key, theirs, ours in info["mismatched_keys"]
    ]
    if info["missing_keys"] or info["unexpected_keys"] or mismatched:
        shape = f"{model.config.num_hidden_layers} layers"
        if scheme := getattr(model.config, "position_embedding_type", None):
            shape = f"{scheme} positions, {shape}"
        raise ValueError(
            f"{source}: the checkpoint does not match the model ({shape}). Missing: {sorted(info['missing_keys'])}. "
            f"Unexpected: {sorted(info['unexpected_keys'])}. Wrong shape: {sorted(mismatched)}."
        )
    check_finite(model.state_dict(), str(source))  # such weights only ever give NaN: publish or train from none
    return model


def check_state_dict(config: TinyGPTConfig, state_dict: dict[str, torch.Tensor], source: str = "checkpoint"):
    """Raise a ValueError listing every missing, unexpected, wrongly shaped or non-float tensor for `config`."""
    with torch.device("meta"):
        expected = {key: tensor.shape for key, tensor in TinyGPTForCausalLM(config).state_dict().items()}
    if config.tie_word_embeddings:
        expected.pop(HEAD)
        if HEAD in state_dict and TIED_TO in state_dict and not torch.equal(state_dict[HEAD], state_dict[TIED_TO]):
            raise ValueError(
                f"{source}: {HEAD} differs from {TIED_TO}, but the config ties them (tie_word_embeddings): set "
                "tie_word_embeddings to false in its config.json to keep the head it holds"
            )
        state_dict.pop(HEAD, None)
    problems = []
    if missing := sorted(expected.keys() - state_dict.keys()):
        problems.append(f"missing tensors: {', '.join(missing)}")
    if unexpected := sorted(state_dict.keys() - expected.keys()):
        problems.append(f"unexpected tensors: {', '.join(unexpected)}")
    wrong = [
        f"{key} has shape {tuple(state_dict[key].shape)}, expected {tuple(shape)}"
        for key, shape in expected.items()
        if key in state_dict and state_dict[key].shape != shape
    ]
    if wrong:
        problems.append("wrong shapes: " + "; ".join(wrong))
    if not_float := sorted(f"{key} ({t.dtype})" for key, t in state_dict.items() if not t.is_floating_point()):
        problems.append(f"not floating-point weights: {', '.join(not_float)}")
    if problems:
        raise ValueError(
            f"{source} does not match the config ({config.n_layer} layers, n_embd {config.n_embd}): "
            + " | ".join(problems)
        )


def _all_finite(values: torch.Tensor) -> bool:
    """Whether every value is finite: a finite sum says so in one pass (inf and NaN carry into any sum, 20× faster than
    `isfinite(...).all()` on GPT-2's embedding); a sum that overflows is looked at value by value."""
    return bool(torch.isfinite(values.sum(dtype=torch.float32))) or bool(torch.isfinite(values).all())


def check_finite(state_dict: dict[str, torch.Tensor], source: str = "checkpoint"):
    """Raise a ValueError naming every tensor that holds inf or NaN: such weights only ever give NaN logits."""
    bad = [
        key
        for key, tensor in state_dict.items()  # a quantized tensor's values are what it dequantizes to
        if tensor.is_floating_point() and not _all_finite(tensor.dequantize())
    ]
    if bad:
        raise ValueError(f"{source}: tensors with inf or NaN values: {', '.join(sorted(bad))}")
