"""The `t5` scheme: a learned bias per bucket of distances (T5).
One file of the positions chapter (positions.py); part of the model bundle."""

import math

import torch
from torch import nn

from .checks import is_int, require
from .positions_interface import AttentionBias


def t5_buckets(distance: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's causal buckets of a distance d ≥ 0: one bucket each for d < num_buckets / 2, then buckets that widen
    logarithmically up to `max_distance`; every longer distance shares the last one."""
    exact = num_buckets // 2
    widening = torch.log(distance.clamp(min=exact) / exact) / math.log(max_distance / exact) * (num_buckets - exact)
    return torch.where(distance < exact, distance, (exact + widening.long()).clamp(max=num_buckets - 1)).long()


class T5Bias(AttentionBias):
    """`t5` (Raffel et al. 2020): b_h(i, j) = w[bucket(i − j), h], a learned table of `relative_attention_num_buckets`
    rows of n_head biases, read through T5's causal buckets (`t5_buckets`) and shared by all layers, as in T5.

    Every distance past `relative_attention_max_distance` shares the last bucket, so any length runs. The table
    starts as GPT-2's embeddings do, N(0, initializer_range), where T5 draws it with std factor · d_model^-0.5.
    """

    name = "t5"
    known_as = "T5 bias"
    config_fields = {"relative_attention_num_buckets": 32, "relative_attention_max_distance": 128}  # T5's names, values

    bias_title = "T5: per-head learned bias of each bucket of distances"
    where_it_acts = "t5 adds nothing to the embeddings: it biases the attention scores by bucket of distance"
    pictures = ("t5_bias", "token_vs_position")
    no_gpt2_twin = (
        "T5's bias adds a learned value per bucket of distances to the attention scores, which GPT-2's does not"
    )
    exact_twin = None
    no_exact_twin = (
        "the T5 family (T5, MT5, UMT5) are encoder-decoders with RMSNorm, no linear biases and no 1/√head_dim scaling. "
        "T5-bias TinyGPTs run as they are: transformers (eager or sdpa attention) or ONNX Runtime"
    )

    @classmethod
    def check_config(cls, config):
        buckets, distance = config.relative_attention_num_buckets, config.relative_attention_max_distance
        require(
            config,
            "relative_attention_num_buckets",
            is_int(buckets) and 2 <= buckets < 2**20,
            "an integer in [2, 2^20)",
        )
        require(
            config,
            "relative_attention_max_distance",
            is_int(distance) and buckets // 2 < distance < 2**31,
            f"an integer above relative_attention_num_buckets / 2 ({buckets // 2}: the buckets below it are one "
            "distance each)",
        )

    def __init__(self, config):
        super().__init__(config)
        self.num_buckets = config.relative_attention_num_buckets
        self.max_distance = config.relative_attention_max_distance
        self.relative_attention_bias = nn.Embedding(self.num_buckets, config.n_head)  # T5's name and layout

    def bias_of_distance(self, distance, query_positions):
        buckets = t5_buckets(distance, self.num_buckets, self.max_distance)
        return self.relative_attention_bias(buckets[:, 0]).permute(0, 3, 1, 2)  # (B, q, k, H) -> (B, H, q, k)
