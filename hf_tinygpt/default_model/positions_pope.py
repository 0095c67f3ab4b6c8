"""The `pope` scheme: polar coordinates, magnitudes from the content and phases from the position (PoPE).
One file of the positions chapter (positions.py); part of the model bundle."""

import math

import torch
from torch import nn
from transformers import initialization as init

from .positions_interface import (
    PositionScheme,
    all_heads_here,
    check_kernel,
    keys_each_query_sees,
    own_slots,
    softmax_attention,
)


class PolarPositions(PositionScheme):
    """`pope` (Gopalakrishnan et al. 2025, "Decoupling the 'What' and 'Where' with Polar Coordinate Positional
    Embeddings", arXiv 2509.10534): each of the head_dim features of q and k becomes a complex number whose
    magnitude is the content, softplus(q_d), and whose phase is the position, p·θ_d with θ_d = 10000^(−d/head_dim)
    (one frequency per feature, not per pair). The score is the real part of q·conj(k):
        s_ij = Σ_d softplus(q_id)·softplus(k_jd)·cos((i − j)·θ_d − δ_hd) / √head_dim,
    so what a key holds and where it stands no longer mix, as they do when RoPE turns the raw features. δ_hd, a
    learned phase per head and feature kept in [−2π, 0], starts at 0 and is shared by the layers, as in
    x-transformers' `PolarEmbedding`, the reference. The features become (cos, sin) pairs, so q and k are twice as
    wide inside attention; the values keep their size.

    This scheme brings its own attention (`attention`): eager attention on the polar q and k. Positions are cache
    slots: only i − j enters the score, and with left padding slot distances are token distances.
    """

    name = "pope"
    known_as = "PoPE"
    where_it_acts = "pope adds nothing to the embeddings: q and k take phases by position, magnitudes by content"
    no_gpt2_twin = "PoPE turns q and k into polar coordinates inside attention, which GPT-2's attention does not"
    exact_twin = None
    no_exact_twin = (
        "none takes q and k to polar coordinates. PoPE TinyGPTs run as they are: transformers (eager or sdpa "
        "attention) or ONNX Runtime"
    )
    pictures = ("pope_phases", "token_vs_position")
    needs_full_mask = True
    ACTS = "takes q and k to polar coordinates inside its own attention"

    def __init__(self, config, base: float = 10000.0):
        super().__init__()
        self.scheme, self.num_heads, self.dim, self.base = (
            config.position_embedding_type,
            config.n_head,
            config.head_size,
            base,
        )
        check_kernel(config, self.ACTS)
        self.phase_bias = nn.Parameter(torch.empty(config.n_head, 1, config.head_size))  # δ, x-transformers' shape
        self.register_fixed_buffers()

    def fixed_buffers(self):
        return {"inv_freq": 1.0 / self.base ** (torch.arange(self.dim, dtype=torch.float) / self.dim)}

    def init_parameters(self):
        init.zeros_(self.phase_bias)

    def polar(self, x: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
        """softplus(x_d)·(cos φ_d, sin φ_d) for each feature d, side by side: (..., head_dim) → (..., 2·head_dim), in
        float32. (Side by side, not the cos half then the sin half: compiled by torch 2.13's inductor, the halves'
        concatenation decoded 1e-3 away from eager.)"""
        magnitude = nn.functional.softplus(x.float())
        return (magnitude[..., None] * torch.stack((phase.cos(), phase.sin()), dim=-1)).flatten(-2)

    def attention(self, layer_idx):
        return self.attend

    def attend(self, module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        """Eager attention (transformers' attention-interface signature) on q and k in polar coordinates."""
        seen = keys_each_query_sees(attention_mask, self.scheme, self.ACTS)  # (B, 1, q, k)
        all_heads_here(query, self.num_heads, self.scheme, "learns a phase per head for")
        query_phase = own_slots(seen)[..., None].float() * self.inv_freq  # (B, 1, q, head_dim)
        key_slots = torch.arange(key.shape[-2], device=key.device, dtype=torch.float)
        key_phase = key_slots[:, None] * self.inv_freq + self.phase_bias.float().clamp(-2 * math.pi, 0.0)
        scores = (self.polar(query, query_phase) @ self.polar(key, key_phase).transpose(-1, -2)) * scaling
        return softmax_attention(module, scores, seen, value, dropout)
