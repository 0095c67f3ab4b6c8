"""The `alibi` scheme: a fixed linear bias by distance (ALiBi).
One file of the positions chapter (positions.py); part of the model bundle."""

import math

import torch

from .positions_interface import AttentionBias


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """Per-head slopes from the ALiBi paper: a geometric sequence starting at 2^(-8/n) for n a power of two;
    otherwise the closest smaller power of two, plus every other slope of the next power of two."""

    def power_of_2_slopes(n):
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = power_of_2_slopes(closest) + power_of_2_slopes(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float)


class AlibiPositions(AttentionBias):
    """`alibi` (Press et al. 2021): b_h(i, j) = −m_h · (i − j), a fixed slope m_h per head. Nothing is learned."""

    name = "alibi"
    known_as = "ALiBi"
    bias_title = "ALiBi: per-head bias against distance (−slope × distance)"
    where_it_acts = "alibi adds nothing to the embeddings: it biases the attention scores by distance"
    pictures = ("alibi_bias", "token_vs_position")
    no_gpt2_twin = "ALiBi biases the attention scores by distance, which GPT-2's attention does not"
    exact_twin = None
    no_exact_twin = (
        "BLOOM normalises the token embeddings with an extra LayerNorm; Falcon divides the bias by √head_dim and builds"
        " it in bfloat16; MPT has no biases and uses the exact (erf) GELU. ALiBi TinyGPTs run as they are: transformers"
        " (eager or sdpa attention) or ONNX Runtime"
    )

    def __init__(self, config):
        super().__init__(config)
        self.register_fixed_buffers()

    def fixed_buffers(self):
        return {"slopes": alibi_slopes(self.num_heads)}

    def bias_of_distance(self, distance, query_positions):
        return -self.slopes.to(distance.device)[:, None, None] * distance
