"""The `stick_breaking` scheme: attention that takes from the nearest keys first, with no softmax and no positions.
One file of the positions chapter (positions.py); part of the model bundle."""

import torch
from torch import nn

from .checks import require
from .positions_interface import PositionScheme, check_kernel, keys_each_query_sees, own_slots


class StickBreakingAttention(PositionScheme):
    """`stick_breaking` (Tan et al., ICLR 2025, "Scaling Stick-Breaking Attention"): no softmax and no position
    signal. Query i breaks a stick of length 1 from its nearest key backwards: key j takes the share
    β_ij = σ(s_ij) of what the keys between them left, so its weight is A_ij = β_ij · Π_{j<k<i} (1 − β_ik), s_ij the
    attention score (q·k/√head_dim). Order comes from that recency: a key behind a strongly taken one gets little.
    What no key takes, 1 − Σ_j A_ij, goes to the query's own value, as the authors' reference does.

    `stick_breaking_attend_current` (default false, the authors' default): whether the query's own key takes part
    in the breaking, nearest of all, or only the keys before it. Computed in log space, as the authors' reference
    is: log A_ij = log σ(s_ij) + Σ_{j<k} log σ(−s_ik) over the keys the query sees; masked keys (later, or padding)
    take nothing and break nothing, so a cached step computes what the full forward would.
    """

    name = "stick_breaking"
    known_as = "stick-breaking attention"
    config_fields = {"stick_breaking_attend_current": False}
    where_it_acts = (
        "stick_breaking adds nothing to the embeddings: each query takes from its nearest keys first, instead of a "
        "softmax"
    )
    no_gpt2_twin = "stick-breaking replaces the softmax of attention, which GPT-2's attention keeps"
    exact_twin = None
    no_exact_twin = (
        "none breaks a stick instead of taking a softmax. Stick-breaking TinyGPTs run as they are: transformers (eager "
        "or sdpa attention) or ONNX Runtime"
    )
    pictures = ("stick_breaking_weights", "token_vs_position")
    needs_full_mask = True
    ACTS = "replaces the softmax with stick-breaking over the keys"

    @classmethod
    def check_config(cls, config):
        current = config.stick_breaking_attend_current
        require(config, "stick_breaking_attend_current", isinstance(current, bool), "true or false")

    def __init__(self, config):
        super().__init__()
        self.scheme, self.attend_current = config.position_embedding_type, config.stick_breaking_attend_current
        check_kernel(config, self.ACTS)

    def attention(self, layer_idx):
        return self.attend

    def weights(self, scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """A_ij (B, H, q, k) in float32 for the `scores` s_ij and the keys each query may break at (`allowed`)."""
        scores = scores.float()
        taken = nn.functional.logsigmoid(scores).masked_fill(~allowed, -torch.inf)  # log β_ij
        left = nn.functional.logsigmoid(-scores).masked_fill(~allowed, 0.0)  # log (1 − β_ij)
        behind = left.flip(-1).cumsum(-1).flip(-1) - left  # Σ over the keys after j (nearer the query)
        return (taken + behind).exp()

    def attend(self, module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        """Stick-breaking attention (transformers' attention-interface signature). The weights it returns are the
        ones the values are mixed with: A_ij, and what is left on the query's own key."""
        allowed = keys_each_query_sees(attention_mask, self.scheme, self.ACTS)  # (B, 1, q, k)
        own = torch.arange(key.shape[-2], device=key.device) == own_slots(allowed)[..., None]
        weights = self.weights(
            (query @ key.transpose(-1, -2)) * scaling, allowed if self.attend_current else allowed & ~own
        )
        weights = weights + (1 - weights.sum(-1, keepdim=True)) * own  # what no key took
        weights = nn.functional.dropout(weights.to(value.dtype), p=dropout, training=module.training)
        return (weights @ value).transpose(1, 2).contiguous(), weights  # (B, T, H, D), as the kernels return it
