"""The `cable` scheme: a learned bias on every token, summed between query and key (CABLE). One file of the positions
chapter (positions.py); part of the model bundle."""

import torch
from torch import nn

from .positions_fox import ForgetGate


class ContextAwareBias(ForgetGate):
    """`cable` (Veisi et al. 2025, "Context-aware Biases for Length Extrapolation"): each token t sets a bias per
    head from what it holds, β_t = −softplus(w·x_t + b) ≤ 0, and query i's score of key j gains the biases of the
    tokens after j:
        s_ij = q_i·k_j / √head_dim + Σ_{j<l≤i} β_l.
    This is FoX's sum with another reading of the same linear layer: −softplus(u) = log σ(−u), so a CABLE layer is
    a FoX layer whose gate weights are negated (a test pins it), and everything else, the keys carrying β into the
    cache included, is FoX's. Layers start as the authors' do (weights N(0, 0.02), bias 0: β = −log 2).

    Where the authors' code differs: their attention scales q·k by 1/√n_embd (Cable.py at 087c3a11) or not at all
    (src/Cable.py at 2d7410b4); here it is 1/√head_dim, as in every other scheme, so that the bias alone differs
    when CABLE is set beside them.
    """

    name = "cable"
    known_as = "CABLE"
    where_it_acts = (
        "cable adds nothing to the embeddings: each token's learned bias is summed into the scores of the keys before "
        "it"
    )
    no_gpt2_twin = "CABLE's biases are added to the attention scores, which GPT-2's attention does not"
    no_exact_twin = (
        "none sums learned per-token biases into its scores. CABLE TinyGPTs run as they are: transformers (eager or "
        "sdpa attention) or ONNX Runtime"
    )
    ACTS = "adds each token's learned biases to the attention scores in its own attention"
    config_fields = {}  # not FoX's `fox_rope_theta`: the authors' CABLE has no other position signal

    @classmethod
    def rope_theta_of(cls, config) -> None:
        return None

    def log_gate(self, gate_input: torch.Tensor) -> torch.Tensor:
        """β_t = −softplus(w·x_t + b), which FoX's attention sums as it sums log f_t."""
        return -nn.functional.softplus(gate_input)
