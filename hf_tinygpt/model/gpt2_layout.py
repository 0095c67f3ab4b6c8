"""The GPT-2 ↔ TinyGPT weight and config mapping, declared once.

TinyGPT's module tree uses GPT-2's names, so a GPT-2 state dict maps onto it with three rules:
  1. keys gain the `transformer.` prefix when they lack it (the Hub's original `gpt2` files have none);
  2. GPT-2's Conv1D weights, stored (in, out), become `nn.Linear`'s (out, in) as transposed views: no copy, and
     the matmul is the one GPT-2 runs;
  3. the legacy `attn.bias` / `attn.masked_bias` buffers (a causal mask saved as weights) are dropped.
The head is tied, so `lm_head.weight` is optional on the way in and equal to `wte` on the way out.

The way out also takes TinyGPTs that are GPT-2 in disguise, exactly up to `n_positions`: fixed position rows
(sinusoidal, or none: zeros) become GPT-2's `wpe`, and scaled token embeddings (`scale_embeddings`) become a
pre-scaled `wte` with the original matrix as an untied head.

Pure data and tensor renaming, no I/O: used by the config (a GPT-2 config.json reads as a TinyGPTConfig), by
`TinyGPTForCausalLM.from_pretrained` (a GPT-2 checkpoint converts on the fly) and by the converters in
`hf_tinygpt.convert`. It travels with the model's remote code, so it imports torch only.
"""

import torch

PREFIX = "transformer."
CONV1D_WEIGHTS = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")
LEGACY_BUFFERS = (".attn.bias", ".attn.masked_bias")
HEAD = "lm_head.weight"
TIED_TO = PREFIX + "wte.weight"

# GPT2Config fields that TinyGPTConfig shares, with the same name and meaning.
SHARED_CONFIG_FIELDS = (
    "vocab_size",
    "n_positions",
    "n_embd",
    "n_layer",
    "n_head",
    "n_inner",
    "activation_function",
    "resid_pdrop",
    "embd_pdrop",
    "attn_pdrop",
    "layer_norm_epsilon",
    "initializer_range",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "tie_word_embeddings",
    "use_cache",
)
# GPT2Config options that change the math, with the value TinyGPT reproduces.
GPT2_ONLY_OPTIONS = {
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False,
    "add_cross_attention": False,
}


def _is_conv1d(key: str) -> bool:
    return key.endswith(CONV1D_WEIGHTS)


def refuse_gpt2_only_options(values: dict, where: str):
    """A ValueError naming a GPT-2 option in `values` set to math TinyGPT does not reproduce."""
    for option, supported in GPT2_ONLY_OPTIONS.items():
        if values.get(option, supported) != supported:
            raise ValueError(f"{where} has {option}={values[option]!r}; TinyGPT reproduces only {option}={supported!r}")


def tinygpt_fields_of_gpt2(gpt2_config: dict) -> dict:
    """TinyGPTConfig fields (learned positions) with the same math as a GPT-2 `config.json` dict, or a ValueError
    naming a GPT-2 option TinyGPT does not reproduce."""
    refuse_gpt2_only_options(gpt2_config, "GPT-2 config")
    fields = {name: gpt2_config[name] for name in SHARED_CONFIG_FIELDS if name in gpt2_config}
    dtype = gpt2_config.get("dtype", gpt2_config.get("torch_dtype"))
    if dtype is not None:
        fields["dtype"] = dtype
    return {"model_type": "tinygpt", "position_embedding_type": "learned", **fields}


def gpt2_fields_of_tinygpt(config) -> dict:
    """GPT2Config fields for a TinyGPTConfig that GPT-2 can express, or a ValueError naming what it cannot."""
    if reason := config.position_scheme().no_gpt2_twin:
        raise ValueError(
            f"This TinyGPT cannot be expressed as GPT-2: position_embedding_type="
            f"{config.position_embedding_type!r} ({reason})"
        )
    fields = {name: getattr(config, name) for name in SHARED_CONFIG_FIELDS}
    # Scaled embeddings are stored pre-scaled in GPT-2's wte; the head then keeps the unscaled matrix, untied.
    fields["tie_word_embeddings"] = config.tie_word_embeddings and not config.scale_embeddings
    # `n_ctx`: GPT-2's legacy name for the context, gone from GPT2Config but read by engines' converters
    # (llama.cpp's convert_hf_to_gguf.py fails without it).
    return {**fields, **GPT2_ONLY_OPTIONS, "n_ctx": config.n_positions}


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


def tinygpt_state_dict_to_gpt2(
    state_dict: dict[str, torch.Tensor], config, position_rows: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """TinyGPT tensors → `GPT2LMHeadModel` names and Conv1D layout, for a config `gpt2_fields_of_tinygpt` accepts.
    `position_rows` (n_positions, n_embd) is what the scheme adds at positions 0..n_positions-1, GPT-2's `wpe`
    (None: the learned rows `state_dict` holds). A tied head is written once, as wte."""
    gpt2 = {key: tensor.t().contiguous() if _is_conv1d(key) else tensor for key, tensor in state_dict.items()}
    head = gpt2.pop(HEAD, None)
    if position_rows is not None:
        gpt2[PREFIX + "wpe.weight"] = position_rows.to(gpt2[TIED_TO].dtype)
    if config.scale_embeddings:  # the head reads the unscaled matrix, the input the scaled one (as TinyGPT computes)
        gpt2[HEAD] = gpt2[TIED_TO] if config.tie_word_embeddings else head
        gpt2[TIED_TO] = gpt2[TIED_TO] * config.n_embd**0.5
    elif not config.tie_word_embeddings:
        gpt2[HEAD] = head
    return gpt2
