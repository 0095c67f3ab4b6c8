"""The TinyGPT → GPT-NeoX mapping: a RoPE TinyGPT is transformers' GPTNeoXForCausalLM with sequential residuals.

Same math, piece by piece: pre-LN blocks with LayerNorm biases, q/k/v/output projections with biases, rotate-half
RoPE on the first `partial_rotary_factor` of each head (transformers' RoPE utilities on both sides), a GELU MLP,
a final LayerNorm; `use_parallel_residual=False` gives x + attn(ln_1 x), then x + mlp(ln_2 x). Two layouts differ:
  1. TinyGPT's c_attn stacks [all q | all k | all v]; GPT-NeoX's query_key_value stacks [q, k, v] per head;
  2. scaled token embeddings (`scale_embeddings`) become a pre-scaled `embed_in`, with the unscaled matrix as the
     head. The head is always written out (untied), even when TinyGPT ties it: llama.cpp's GPT-NeoX needs an output
     matrix of its own (its GPT-2 falls back to the embeddings; its GPT-NeoX does not).
Only the exporter uses it, so it lives here rather than in the model bundle.
"""

import torch

from .gpt2_layout import HEAD, PREFIX, TIED_TO

NEOX_NAMES = {  # TinyGPT name (after `transformer.`) → GPT-NeoX name (after `gpt_neox.`); per block after `h.N.`
    "ln_1": "input_layernorm",
    "attn.c_attn": "attention.query_key_value",
    "attn.c_proj": "attention.dense",
    "ln_2": "post_attention_layernorm",
    "mlp.c_fc": "mlp.dense_h_to_4h",
    "mlp.c_proj": "mlp.dense_4h_to_h",
}


def gpt_neox_fields_of_tinygpt(config) -> dict:
    """GPTNeoXConfig fields with the same math as a rope TinyGPTConfig, or a ValueError naming why there is none."""
    if config.position_scheme().exact_twin != "gpt_neox":
        raise ValueError(
            f"GPT-NeoX rotates q and k (RoPE); position_embedding_type="
            f"{config.position_embedding_type!r} has no GPT-NeoX twin"
        )
    if config.no_rope_layer_interval:
        raise ValueError(
            f"GPT-NeoX rotates q and k in every layer; no_rope_layer_interval={config.no_rope_layer_interval} "
            "leaves some layers unrotated, which it cannot express"
        )
    if config.rope_parameters.get("rope_type") == "proportional":
        raise ValueError(
            "GPT-NeoX turns the first partial_rotary_factor share of each head with frequencies spread over that share; "
            "p-RoPE (rope_type='proportional') keeps the whole head's frequencies and turns the rest by 0, which it "
            "does not express"
        )
    if config.embd_pdrop != config.resid_pdrop:
        raise ValueError(
            f"GPT-NeoX has one hidden dropout; embd_pdrop ({config.embd_pdrop}) and resid_pdrop "
            f"({config.resid_pdrop}) differ"
        )
    return dict(
        vocab_size=config.vocab_size,
        hidden_size=config.n_embd,
        num_hidden_layers=config.n_layer,
        num_attention_heads=config.n_head,
        intermediate_size=config.n_inner or 4 * config.n_embd,
        hidden_act=config.activation_function,
        attention_dropout=config.attn_pdrop,
        hidden_dropout=config.resid_pdrop,
        max_position_embeddings=config.n_positions,
        initializer_range=config.initializer_range,
        layer_norm_eps=config.layer_norm_epsilon,
        use_cache=config.use_cache,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        tie_word_embeddings=False,
        use_parallel_residual=False,
        attention_bias=True,
        rope_parameters=dict(config.rope_parameters),
    )


def gpt_neox_legacy_fields(config) -> dict:
    """GPT-NeoX's original names for the RoPE settings, which engines' converters still read: llama.cpp's reads
    `rotary_pct` (and assumes 0.25 without it). GPTNeoXConfig's constructor consumes them into `rope_parameters`,
    so the exporter sets them on the config afterwards."""
    rope = config.rope_parameters
    return {"rotary_pct": rope.get("partial_rotary_factor", 1.0), "rotary_emb_base": rope["rope_theta"]}


def _per_head_qkv(tensor: torch.Tensor, n_head: int) -> torch.Tensor:
    """[all q | all k | all v] rows → [q_0, k_0, v_0, q_1, k_1, v_1, ...] (weight or bias)."""
    rest = tensor.shape[1:]
    return tensor.reshape(3, n_head, -1, *rest).transpose(0, 1).reshape(tensor.shape).contiguous()


def tinygpt_state_dict_to_gpt_neox(
    state_dict: dict[str, torch.Tensor], config, head: str = "lm_head.weight"
) -> dict[str, torch.Tensor]:
    """TinyGPT tensors → `GPTNeoXForCausalLM` names and layout; `head` is its output matrix's name (`lm_head` in
    transformers 5, `embed_out` in the original checkpoints)."""
    neox = {}
    for key, tensor in state_dict.items():
        if key in (HEAD, TIED_TO):
            continue
        name = key.removeprefix(PREFIX)
        if name.startswith("h."):
            _, layer, rest = name.split(".", 2)
            module, _, param = rest.rpartition(".")
            if module == "attn.c_attn":
                tensor = _per_head_qkv(tensor, config.n_head)
            name = f"layers.{layer}.{NEOX_NAMES[module]}.{param}"
        else:
            name = name.replace("ln_f.", "final_layer_norm.")
        neox["gpt_neox." + name] = tensor
    wte, head_matrix = state_dict[TIED_TO], state_dict.get(HEAD, state_dict[TIED_TO])
    embed_in = neox["gpt_neox.embed_in.weight"] = wte * config.n_embd**0.5 if config.scale_embeddings else wte
    # a copy where the two would share memory: save_pretrained keeps only one of an untied model's shared tensors
    neox[head] = head_matrix.clone() if head_matrix.data_ptr() == embed_in.data_ptr() else head_matrix
    return neox
