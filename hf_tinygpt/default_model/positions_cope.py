"""The `cope` scheme: positions counted from the attention scores (CoPE).
One file of the positions chapter (positions.py); part of the model bundle."""

import functools

import torch
from torch import nn
from transformers import initialization as init

from .checks import is_int, require
from .positions_interface import (
    PositionScheme,
    all_heads_here,
    check_kernel,
    keys_each_query_sees,
    softmax_attention,
)


class CopePositions(PositionScheme):
    """`cope` (Golovneva et al. 2024, "Contextual Position Encoding"): positions counted by the content. In each
    layer, query i gates every key j it may see with g_ij = σ(s_ij), s_ij its attention score (q·k/√head_dim), and
    puts key j at the contextual position p_ij = Σ_{j ≤ k ≤ i} g_ik: the sum of the gates from j up to the query
    itself, a fractional count of what lies between. The score gains q_i·e[p_ij], interpolated between the learned
    vectors e[⌊p⌋] and e[⌈p⌉] of that layer (`cope_max_positions` of them, shared by the heads, as the authors'
    layer has; positions past the last one share it). Masked keys (later, or padding) get gate 0, so a row's count
    starts at its own real tokens and a cached step counts what the full forward would.

    This scheme reads the scores, so it brings its own attention (`attention`): eager attention with that one
    addition. The vectors start at zero, as in the authors' listing and x-transformers.
    """

    name = "cope"
    known_as = "CoPE"
    config_fields = {"cope_max_positions": 64}
    where_it_acts = "cope adds nothing to the embeddings: it counts positions from the attention scores in every layer"
    pictures = ("cope_positions", "token_vs_position")
    no_gpt2_twin = "CoPE adds position logits counted from the attention scores, which GPT-2's attention does not"
    exact_twin = None
    no_exact_twin = (
        "none counts positions from the attention scores. CoPE TinyGPTs run as they are: transformers (eager or sdpa "
        "attention) or ONNX Runtime"
    )

    needs_full_mask = True
    ACTS = "adds position logits computed from the attention scores themselves"

    @classmethod
    def check_config(cls, config):
        most = config.cope_max_positions
        require(config, "cope_max_positions", is_int(most) and 1 <= most < 2**20, "an integer in [1, 2^20)")

    def __init__(self, config):
        super().__init__()
        self.scheme, self.num_heads = config.position_embedding_type, config.n_head
        check_kernel(config, self.ACTS)
        self.pos_emb = nn.Parameter(torch.empty(config.n_layer, config.cope_max_positions, config.head_size))

    def init_parameters(self):
        init.zeros_(self.pos_emb)

    def contextual_positions(self, scores: torch.Tensor) -> torch.Tensor:
        """p_ij = Σ_{j ≤ k ≤ i} σ(s_ik) for the masked `scores` (B, H, q, k), clamped at the last position vector."""
        return scores.sigmoid().flip(-1).cumsum(-1).flip(-1).clamp(max=self.pos_emb.shape[1] - 1)

    def position_logits(self, query: torch.Tensor, scores: torch.Tensor, layer_idx: int) -> torch.Tensor:
        """(B, H, q, k): q_i·e[p_ij] for the masked `scores` (B, H, q, k) of `query` (B, H, q, head_dim)."""
        positions = self.contextual_positions(scores)
        logits = query @ self.pos_emb[layer_idx].to(query.dtype).T  # (B, H, q, cope_max_positions): q_i·e[p]
        below, fraction = positions.floor(), positions - positions.floor()
        at_floor, at_ceiling = logits.gather(-1, below.long()), logits.gather(-1, positions.ceil().long())
        return at_ceiling * fraction + at_floor * (1 - fraction)

    def attention(self, layer_idx):
        return functools.partial(self.attend, layer_idx=layer_idx)

    def attend(self, module, query, key, value, attention_mask, dropout=0.0, scaling=None, layer_idx=0, **kwargs):
        """Eager attention (transformers' attention-interface signature) with CoPE's logits added to the scores."""
        allowed = keys_each_query_sees(attention_mask, self.scheme, self.ACTS)
        all_heads_here(query, self.num_heads, self.scheme, "learns position vectors shared by")
        scores = (query @ key.transpose(-1, -2)) * scaling
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)  # masked keys count no position
        return softmax_attention(
            module, scores + self.position_logits(query, scores, layer_idx), allowed, value, dropout
        )
