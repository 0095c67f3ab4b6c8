"""Where a TinyGPT's parameters live: token embedding, positions, blocks, final norm, head."""

import torch

from .configuration_tinygpt import TinyGPTConfig
from .modeling_tinygpt import TinyGPTForCausalLM


def parameter_breakdown(model_or_config: TinyGPTForCausalLM | TinyGPTConfig) -> dict[str, int]:
    """Parameter counts by part, plus `total`. A tied head counts 0: it is the token embedding.

    For GPT-2 small's shape: V·C + P·C + N·(12C² + 13C) + 2C = 124,439,808.
    """
    if isinstance(model_or_config, TinyGPTConfig):
        with torch.device("meta"):  # shapes only: no memory, no initialisation
            model = TinyGPTForCausalLM(model_or_config)
    else:
        model = model_or_config
    body = model.transformer

    def count(module):
        return sum(p.numel() for p in module.parameters())

    parts = {
        "token_embedding": count(body.wte),
        "position_embedding": count(body.positions),
        "blocks": count(body.h),
        "final_norm": count(body.ln_f),
        "lm_head": 0 if model.lm_head.weight is body.wte.weight else count(model.lm_head),
    }
    parts["total"] = sum(parts.values())
    assert parts["total"] == sum(p.numel() for p in model.parameters())  # nothing counted twice or missed
    return parts
