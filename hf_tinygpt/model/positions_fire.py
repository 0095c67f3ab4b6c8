"""The `fire` scheme: a learned function of the relative distance (FIRE).
One file of the positions chapter (positions.py); part of the model bundle."""

import torch
from torch import nn
from transformers import initialization as init

from .checks import is_int, is_positive_number, require
from .positions_interface import AttentionBias


class FireBias(AttentionBias):
    """`fire` (Li et al. 2023): b_h(i, j) = f_θ(ψ(i − j) / ψ(max(L, i)))_h with ψ(x) = log(c·x + 1) and f_θ a small
    MLP (1 → `fire_mlp_width` → n_head, ReLU). Dividing by ψ(max(L, i)) maps every distance of a query into [0, 1]
    ("progressive interpolation"), so a longer input asks f_θ nothing new; L keeps short prefixes from being
    stretched. c starts at `fire_init_c` and L at `fire_init_L` (L = |multiplier · fire_init_L|, the multiplier
    learned from 1), as in the authors' listing; f_θ's layers start as GPT-2's linear layers do (N(0,
    initializer_range), zero biases), so the bias starts near zero.
    """

    name = "fire"
    known_as = "FIRE"
    reads_position_ids = True  # a query's i in ψ(max(L, i)): past L, its own position moves the bias
    config_fields = {"fire_mlp_width": 32, "fire_init_c": 0.1, "fire_init_L": 512.0}
    bias_title = "FIRE: per-head learned function of distance, for a query at position {query}"
    where_it_acts = (
        "fire adds nothing to the embeddings: it biases the attention scores by a learned function of distance"
    )
    pictures = ("fire_bias", "token_vs_position")
    no_gpt2_twin = (
        "FIRE biases the attention scores by a learned function of distance, which GPT-2's attention does not"
    )
    exact_twin = None
    no_exact_twin = (
        "none has FIRE's learned bias. FIRE TinyGPTs run as they are: transformers (eager or sdpa attention) or ONNX "
        "Runtime"
    )

    @classmethod
    def check_config(cls, config):
        width = config.fire_mlp_width
        require(config, "fire_mlp_width", is_int(width) and 1 <= width < 2**16, "an integer in [1, 2^16)")
        for name in ("fire_init_c", "fire_init_L"):
            require(config, name, is_positive_number(getattr(config, name)), "a finite number > 0")

    def __init__(self, config):
        super().__init__(config)
        width = config.fire_mlp_width
        self.mlp = nn.Sequential(nn.Linear(1, width), nn.ReLU(), nn.Linear(width, config.n_head))
        self.c = nn.Parameter(torch.empty(()))
        self.L_multiplier = nn.Parameter(torch.empty(()))
        self.init_c, self.init_L, self.eps = config.fire_init_c, config.fire_init_L, 1e-6

    def init_parameters(self):
        init.constant_(self.c, self.init_c)
        init.constant_(self.L_multiplier, 1.0)

    def bias_of_distance(self, distance, query_positions):
        def psi(x):
            return torch.log(torch.abs(self.c * x) + 1)

        threshold = torch.abs(self.L_multiplier * self.init_L)
        normalizer = psi(torch.maximum(query_positions.float(), threshold))[:, :, None]  # (B, q, 1)
        interpolated = psi(distance[:, 0]) / (normalizer + self.eps)  # (B, q, k), in [0, 1]
        return self.mlp(interpolated[..., None].to(self.mlp[0].weight.dtype)).permute(0, 3, 1, 2)
