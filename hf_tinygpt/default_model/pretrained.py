"""What TinyGPT's `from_pretrained` and `save_pretrained` add to transformers' own: GPT-2 checkpoints read with
transformers' GPT2LMHeadModel and mapped onto TinyGPT, and saved folders that every client can load.

Part of the model bundle saved beside the weights: it imports transformers and its siblings only.
"""

import contextlib
import copy
import importlib
import warnings

import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedConfig

from .compat import resolve_revision
from .configuration_tinygpt import TinyGPTConfig
from .gpt2_layout import HEAD, LEGACY_BUFFERS, TIED_TO, gpt2_state_dict_to_tinygpt

# What `from_pretrained` passes on to the Hub when it reads config.json and GPT-2's weights.
HUB_KWARGS = ("cache_dir", "force_download", "proxies", "local_files_only", "token", "revision", "subfolder")
# `from_pretrained`'s own arguments that are config attributes too: they go to transformers, not into the config.
LOADING_KWARGS = ("dtype", "torch_dtype", "quantization_config", "attn_implementation")


def read_config(pretrained_model_name_or_path, kwargs: dict) -> tuple[TinyGPTConfig, dict | None, dict]:
    """Read config.json once: (the TinyGPTConfig with the config fields in `kwargs` applied, GPT-2's config dict for a
    GPT-2 checkpoint or None, the kwargs left for loading the weights). A dict is config.json as the caller read it
    (`from_pretrained(src, config=config_dict)`): nothing is read again, and the weights come from the revision in
    `kwargs`, which should be the one the caller read it from."""
    if isinstance(pretrained_model_name_or_path, dict):
        config_dict = copy.deepcopy(pretrained_model_name_or_path)  # the caller's dict stays as it was
    else:
        hub = {key: kwargs[key] for key in HUB_KWARGS if key in kwargs}
        revision_args = {key: hub[key] for key in ("token", "local_files_only", "cache_dir") if key in hub}
        hub["revision"] = resolve_revision(pretrained_model_name_or_path, hub.get("revision"), **revision_args)
        kwargs = {**kwargs, "revision": hub["revision"]}  # the weights come from the commit the config came from
        config_dict, _ = PreTrainedConfig.get_config_dict(pretrained_model_name_or_path, **hub)
    loading = {key: kwargs[key] for key in LOADING_KWARGS if key in kwargs}
    others = {key: value for key, value in kwargs.items() if key not in loading}
    config, unused = TinyGPTConfig.from_dict(config_dict, return_unused_kwargs=True, **others)  # GPT-2's translates
    return config, config_dict if config_dict.get("model_type") == "gpt2" else None, {**unused, **loading}


def from_gpt2_checkpoint(load_tinygpt, pretrained_model_name_or_path, gpt2_config: dict, *model_args, **kwargs):
    """Read a GPT-2 checkpoint with transformers' GPT2LMHeadModel (any layout it reads: safetensors or pickles,
    sharded, local or on the Hub), map its tensors onto TinyGPT (`gpt2_layout`: transposed views, no copy) and give
    them to `load_tinygpt` (transformers' `from_pretrained` for TinyGPT). The loading info, if asked for, is GPT-2's
    in TinyGPT's names."""
    wants_info = kwargs.pop("output_loading_info", False)
    hub = {key: kwargs.pop(key) for key in HUB_KWARGS if key in kwargs}
    gpt2, info = GPT2LMHeadModel.from_pretrained(
        pretrained_model_name_or_path,
        config=GPT2Config.from_dict(gpt2_config),
        output_loading_info=True,
        ignore_mismatched_sizes=kwargs.get("ignore_mismatched_sizes", False),
        generation_config=kwargs.get("generation_config"),  # one read already made is not made again
        **hub,
    )
    info["unexpected_keys"] = [key for key in info["unexpected_keys"] if not key.endswith(LEGACY_BUFFERS)]
    state_dict = gpt2_state_dict_to_tinygpt(gpt2.state_dict())
    del gpt2
    if kwargs["config"].tie_word_embeddings:  # the head is wte: a TinyGPT checkpoint does not hold it either
        head = state_dict.pop(HEAD, None)  # GPT-2 keeps a head the checkpoint holds apart, whatever its config says
        if (
            head is not None
            and head.data_ptr() != state_dict[TIED_TO].data_ptr()
            and not head.equal(state_dict[TIED_TO])
        ):
            raise ValueError(
                f"{pretrained_model_name_or_path}: {HEAD} differs from {TIED_TO}, but the config ties them "
                "(tie_word_embeddings): set tie_word_embeddings to false in its config.json to keep the head it holds"
            )
    elif state_dict[HEAD].data_ptr() == state_dict[TIED_TO].data_ptr():  # untied here, tied in GPT-2's checkpoint
        state_dict[HEAD] = state_dict[HEAD].clone()  # a head of its own, GPT-2's to begin with
    if kwargs.get("quantization_config") is not None:  # quantized from GPT-2's transposed views, kernels want rows
        state_dict = {key: tensor.contiguous() for key, tensor in state_dict.items()}
    model, ours = load_tinygpt(None, *model_args, state_dict=state_dict, output_loading_info=True, **kwargs)
    info = {key: [*info[key], *ours[key]] for key in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    return (model, info) if wants_info else model


def _without_tied_head(module, state_dict, prefix, metadata):
    state_dict.pop(prefix + HEAD, None)


@contextlib.contextmanager
def saving_as_tinygpt(model):
    """While `model.save_pretrained` runs:

    - when the classes are registered for the Auto API (importing hf_tinygpt does it), `config.auto_map` names both
      model classes, whichever one is saved: a client may build the body from a saved LM's config (vLLM's
      Transformers backend calls `AutoModel.from_config`);
    - a tied head is left out of the weights, as transformers leaves it out of plain weights: a quantized one it
      would write again under its own name, and then fail to load the folder back.
    """
    if type(model)._auto_class is not None:
        module = type(model).__module__.rsplit(".", 1)[-1]  # the file's name, as the copy beside the weights imports
        classes = {"AutoModel": f"{module}.TinyGPTModel", "AutoModelForCausalLM": f"{module}.TinyGPTForCausalLM"}
        model.config.auto_map = {**(getattr(model.config, "auto_map", None) or {}), **classes}
    hook = model._register_state_dict_hook(_without_tied_head) if model.config.tie_word_embeddings else None
    try:
        yield
    finally:
        if hook is not None:
            hook.remove()


def quantize_tied_table(model):
    """After `from_pretrained` with torchao's `TorchAoConfig(..., include_input_output_embeddings=True)`: the tied
    token table quantized once, for the lookup and the head alike, as the config asks (transformers leaves a tied
    table as it is), so that `save_pretrained` writes it once. Nothing happens without such a config."""
    settings = getattr(getattr(model, "hf_quantizer", None), "quantization_config", None)
    if not getattr(settings, "include_input_output_embeddings", False):  # not torchao's, or not the embeddings
        return
    head, table = model.get_output_embeddings(), model.get_input_embeddings()
    if model.config.tie_word_embeddings and head is not None and type(head.weight) is nn.Parameter:  # not yet
        # Imported by name only here: a saved folder's copy of this file must load where torchao is not installed.
        importlib.import_module("torchao.quantization").quantize_(head, settings.get_apply_tensor_subclass())
        table.weight = head.weight


def cpu_has_bf16_instructions() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX-512 BF16 or AMX), by torch's own probes (private, so a
    torch without them counts as having the instructions: no warning rather than a wrong one)."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    probes = [probe for probe in probes if probe is not None]
    return not probes or any(probe() for probe in probes)


def warn_if_eager_bf16_is_slow_here(model):
    """A bf16 model (not quantized) on a CPU without bf16 instructions: its eager products run several times slower
    than float32's (scripts/measurement_log.md, "bf16 and int8 on AVX2"), so say so once, with the ways out."""
    quantized = getattr(model, "hf_quantizer", None) is not None  # int8 weights: int8 products
    if model.dtype != torch.bfloat16 or model.device.type != "cpu" or quantized or cpu_has_bf16_instructions():
        return
    warnings.warn(
        "TinyGPT loaded in bfloat16 on a CPU without bf16 instructions (AVX-512 BF16 or AMX): its eager products "
        "(`generate`, `pipeline`, a forward) run several times slower than in float32 here. Load it with "
        "dtype=torch.float32, or with int8 weights (hf_tinygpt.generate.text.int8_weight_only()), or decode "
        "with hf_tinygpt.generate.compiled_decoding.CompiledDecoder, which multiplies bf16 with kernels of its "
        "own on such a CPU",
        stacklevel=3,  # the caller of from_pretrained
    )
