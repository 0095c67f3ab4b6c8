"""The GPT-2 ↔ TinyGPT weight and config mapping, declared once.

TinyGPT's module tree uses GPT-2's names, so a GPT-2 state dict maps onto it with three rules:
  1. keys gain the `transformer.` prefix when they lack it (the Hub's original `gpt2` files have none);
  2. GPT-2's Conv1D weights, stored (in, out), become `nn.Linear`'s (out, in) as transposed views: no copy, so a
     memory-mapped checkpoint loads in about one copy of its bytes, and the matmul is the one GPT-2 runs;
  3. the legacy `attn.bias` / `attn.masked_bias` buffers (a causal mask saved as weights) are dropped.
The head is tied, so `lm_head.weight` is optional on the way in and equal to `wte` on the way out.

Used by `TinyGPTForCausalLM.from_pretrained` (a GPT-2 folder or Hub repo converts on the fly), and by the
conversion scripts in both directions. Imports transformers and siblings only (it travels with remote code).
"""

import json
import os

import torch
from transformers.utils.hub import cached_file, get_checkpoint_shard_files

from .configuration_tinygpt import TinyGPTConfig

PREFIX = "transformer."
CONV1D_WEIGHTS = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")
LEGACY_BUFFERS = (".attn.bias", ".attn.masked_bias")
HEAD = "lm_head.weight"
TIED_TO = PREFIX + "wte.weight"

# GPT2Config fields that TinyGPTConfig shares, with the same name and meaning.
SHARED_CONFIG_FIELDS = (
    "vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "activation_function", "resid_pdrop",
    "embd_pdrop", "attn_pdrop", "layer_norm_epsilon", "initializer_range", "bos_token_id", "eos_token_id",
    "pad_token_id", "tie_word_embeddings", "use_cache",
)  # fmt: skip
# GPT2Config options that change the math, with the value TinyGPT reproduces.
GPT2_ONLY_OPTIONS = {
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False,
    "add_cross_attention": False,
}
# Which safetensors/pickle files hold the weights, in the order transformers itself looks for them.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
HUB_KWARGS = ("cache_dir", "force_download", "proxies", "local_files_only", "token", "revision", "subfolder")


def _is_conv1d(key: str) -> bool:
    return key.endswith(CONV1D_WEIGHTS)


def gpt2_config_to_tinygpt(gpt2_config: dict, **overrides) -> TinyGPTConfig:
    """A learned-position TinyGPTConfig with the same math as a GPT-2 `config.json` dict, or a ValueError."""
    for option, supported in GPT2_ONLY_OPTIONS.items():
        if gpt2_config.get(option, supported) != supported:
            raise ValueError(
                f"GPT-2 config has {option}={gpt2_config[option]!r}; TinyGPT reproduces only {option}={supported!r}"
            )
    fields = {name: gpt2_config[name] for name in SHARED_CONFIG_FIELDS if name in gpt2_config}
    dtype = gpt2_config.get("dtype", gpt2_config.get("torch_dtype"))
    if dtype is not None:
        fields["dtype"] = dtype
    return TinyGPTConfig(position_embedding_type="learned", **fields, **overrides)


def tinygpt_config_to_gpt2(config: TinyGPTConfig) -> dict:
    """GPT2Config keyword arguments for a TinyGPT that GPT-2 can express, or a ValueError naming what it cannot."""
    cannot = []
    if config.position_embedding_type != "learned":
        cannot.append(f"position_embedding_type={config.position_embedding_type!r} (GPT-2 has learned positions)")
    if config.scale_embeddings:
        cannot.append("scale_embeddings=True (GPT-2 does not scale token embeddings)")
    if not config.tie_word_embeddings:
        cannot.append("tie_word_embeddings=False (GPT-2's head is tied to wte)")
    if cannot:
        raise ValueError("This TinyGPT cannot be expressed as GPT-2: " + "; ".join(cannot))
    fields = {name: getattr(config, name) for name in SHARED_CONFIG_FIELDS}
    return {**fields, **GPT2_ONLY_OPTIONS}


def gpt2_state_dict_to_tinygpt(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """GPT-2 tensors (any prefix, Conv1D layout, with or without legacy buffers) → TinyGPT's names and layout."""
    converted = {}
    for key in list(state_dict):
        tensor = state_dict.pop(key)  # pop as we go: the source and the result are never both fully in memory
        if key.endswith(LEGACY_BUFFERS):
            continue
        if key != HEAD and not key.startswith(PREFIX):
            key = PREFIX + key
        converted[key] = tensor.t() if _is_conv1d(key) else tensor  # a view; save_pretrained makes it contiguous
    return converted


def tinygpt_state_dict_to_gpt2(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """TinyGPT tensors → `GPT2LMHeadModel` names and Conv1D layout (the tied head is written once, as wte)."""
    return {
        key: tensor.t().contiguous() if _is_conv1d(key) else tensor
        for key, tensor in state_dict.items()
        if key != HEAD
    }


def check_state_dict(config: TinyGPTConfig, state_dict: dict[str, torch.Tensor], source: str = "checkpoint"):
    """Raise a ValueError listing every missing, unexpected or wrongly shaped tensor (by name) for `config`."""
    from .modeling_tinygpt import TinyGPTForCausalLM

    with torch.device("meta"):
        expected = {key: tensor.shape for key, tensor in TinyGPTForCausalLM(config).state_dict().items()}
    if config.tie_word_embeddings:
        expected.pop(HEAD)
        if HEAD in state_dict and TIED_TO in state_dict and not torch.equal(state_dict[HEAD], state_dict[TIED_TO]):
            raise ValueError(f"{source}: {HEAD} differs from {TIED_TO}, but the config ties them")
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
    if not_float := sorted(f"{key} ({tensor.dtype})" for key, tensor in state_dict.items() if not tensor.is_floating_point()):
        problems.append(f"not floating-point weights: {', '.join(not_float)}")
    if problems:
        raise ValueError(f"{source} does not match the config ({config.n_layer} layers, n_embd {config.n_embd}): "
                         + " | ".join(problems))  # fmt: skip


def check_finite(state_dict: dict[str, torch.Tensor], source: str = "checkpoint"):
    """Raise a ValueError naming every tensor that holds inf or NaN: such weights only ever give NaN logits."""
    bad = [key for key, tensor in state_dict.items() if tensor.is_floating_point() and not torch.isfinite(tensor).all()]
    if bad:
        raise ValueError(f"{source}: tensors with inf or NaN values: {', '.join(sorted(bad))}")


def read_state_dict(weights_file: str) -> dict[str, torch.Tensor]:
    """All tensors of one `.safetensors` or pickle file; pickles only with `weights_only=True` (no code runs)."""
    try:
        if weights_file.endswith(".safetensors"):
            from safetensors.torch import load_file

            return load_file(weights_file)
        try:
            return torch.load(weights_file, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as error:
            if "_use_new_zipfile_serialization" not in str(error):
                raise
            return torch.load(weights_file, map_location="cpu", weights_only=True)  # pre-zip pickle: no mmap
    except Exception as error:  # truncated, corrupt, or a pickle that wants to run code
        raise ValueError(f"{weights_file}: cannot read the tensors ({type(error).__name__}: {error})") from error


def optional_file(path_or_repo_id, filename: str, **hub_kwargs) -> str | None:
    """The local path of `filename` in a folder or Hub repo (through the HF cache), or None if it has none."""
    return cached_file(
        path_or_repo_id,
        filename,
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
        **hub_kwargs,
    )


def resolve_weight_files(path_or_repo_id, **hub_kwargs) -> list[str]:
    """The local paths of a checkpoint's weight files (downloading through the HF cache if it is a Hub repo)."""
    for name in WEIGHT_FILES:
        resolved = optional_file(path_or_repo_id, name, **hub_kwargs)
        if resolved is None:
            continue
        if name.endswith(".index.json"):
            files, _ = get_checkpoint_shard_files(path_or_repo_id, resolved, **hub_kwargs)
            return files
        return [resolved]
    raise FileNotFoundError(f"{path_or_repo_id} has none of the weight files {', '.join(WEIGHT_FILES)}")


def read_config_dict(path_or_repo_id, **hub_kwargs) -> dict | None:
    """The checkpoint's `config.json` as a dict, or None when there is none."""
    path = str(path_or_repo_id)
    if path.startswith((os.sep, ".")) and not os.path.isdir(path):  # a local path, not a Hub id
        raise FileNotFoundError(f"{path}: no such file or folder")
    resolved = optional_file(path_or_repo_id, "config.json", **hub_kwargs)
    if resolved is None:
        return None
    return read_json_object(resolved, what=f"{path_or_repo_id}'s config.json")


def read_json_object(path, what: str | None = None) -> dict:
    """A JSON file that must hold an object, or a ValueError naming the file and what is wrong with it."""
    what = what or str(path)
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError is a ValueError
        raise ValueError(f"{what} is not valid JSON ({error})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what} holds a JSON {type(value).__name__}, not an object of config fields")
    return value


def load_gpt2_checkpoint(path_or_repo_id, gpt2_config: dict, **hub_kwargs) -> tuple[TinyGPTConfig, dict]:
    """(config, state dict) in TinyGPT form for the GPT-2 checkpoint whose `config.json` is `gpt2_config`;
    every tensor present, named and shaped as TinyGPT expects, or a ValueError listing what is not."""
    config = gpt2_config_to_tinygpt(gpt2_config)
    state_dict = {}
    for weights_file in resolve_weight_files(path_or_repo_id, **hub_kwargs):
        state_dict.update(gpt2_state_dict_to_tinygpt(read_state_dict(weights_file)))
    check_state_dict(config, state_dict, source=str(path_or_repo_id))
    return config, state_dict


def gpt2_checkpoint_as_tinygpt(path_or_repo_id, **hub_kwargs) -> tuple[TinyGPTConfig, dict] | None:
    """(config, state dict) in TinyGPT form if `path_or_repo_id` is a GPT-2 checkpoint (`model_type: gpt2`),
    None if it is anything else (a tinygpt folder, say)."""
    if path_or_repo_id is None or os.path.isfile(path_or_repo_id):
        return None
    gpt2_config = read_config_dict(path_or_repo_id, **hub_kwargs)
    if gpt2_config is None or gpt2_config.get("model_type") != "gpt2":
        return None
    return load_gpt2_checkpoint(path_or_repo_id, gpt2_config, **hub_kwargs)
