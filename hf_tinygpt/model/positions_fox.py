"""The `fox` scheme: a forget gate on every token, whose running product fades what lies further back (the Forgetting
Transformer). One file of the positions chapter (positions.py); part of the model bundle."""

import functools

import torch
from torch import nn

from .checks import is_positive_number, require
from .positions_interface import (
    PositionScheme,
    all_heads_here,
    check_kernel,
    keys_each_query_sees,
    own_slots,
    softmax_attention,
)
from .positions_rope import rope_frequencies, rotation_angles


class ForgetGate(PositionScheme):
    """`fox` (Lin et al., ICLR 2025, "Forgetting Transformer: Softmax Attention with a Forget Gate"): each token t
    sets a forget gate per head from what it holds, f_t = σ(w·x_t + b) with x_t the attention layer's input, and
    query i discounts key j by the gates of the tokens after it:
        s_ij = q_i·k_j / √head_dim + Σ_{j<l≤i} log f_l,
    a data-dependent ALiBi (a constant f gives ALiBi's line, with slope −log f). By default no other position signal:
    order comes from what the gates forget, as in the paper's FoX. Each layer has its own gates (an nn.Linear from
    n_embd to n_head, started as GPT-2's layers and the authors' are: weights N(0, 0.02), bias 0).

    Its field: `fox_rope_theta`, null (the default: no rotation) or RoPE's base θ: q and k are then rotated too, as
    in the paper's comparison of FoX with and without RoPE, by p·θ^(−2i/R) on the first R features of each head,
    R the largest even count of the head_dim − 1 features q·k reads (head_dim − 2 for an even head_dim, whose
    other feature passes through unturned, as in RoPE's partial rotation).

    The gate's log travels with its key, in the key's last feature: `keys_carry` writes log f_t there, so every
    cache keeps it beside the key in transformers' own shape (B, n_head, T, head_dim), static caches, exporters and
    transformers' cache checks included, and this scheme's attention (`attention`) reads it back. Where this
    differs from the paper: q·k reads the other head_dim − 1 features (still scaled by 1/√head_dim), so each head
    gives one feature of its keys to the gate (a test pins it). Sums are taken in float32 as running totals
    c_j = Σ_{l≤j} log f_l, the bias being c_i − c_j, as the authors' naive reference computes it, over the tokens
    the mask shows: a masked token (padding, or one hidden inside a sequence) forgets nothing.
    """

    name = "fox"
    known_as = "FoX"
    where_it_acts = (
        "fox adds nothing to the embeddings: each token's forget gates discount the scores of the keys before it"
    )
    no_gpt2_twin = "the forget gates bias the attention scores, which GPT-2's attention does not"
    exact_twin = None
    no_exact_twin = (
        "none gates its keys with a forget gate. FoX TinyGPTs run as they are: transformers (eager or sdpa "
        "attention) or ONNX Runtime"
    )
    pictures = ("gate_bias", "token_vs_position")
    needs_full_mask = True
    config_fields = {"fox_rope_theta": None}
    ACTS = "adds each token's forget gates to the attention scores in its own attention"

    @classmethod
    def rope_theta_of(cls, config) -> float | None:
        """RoPE's base θ for q and k; None: they are not rotated."""
        return config.fox_rope_theta

    @classmethod
    def check_config(cls, config):
        if config.head_size < 2:  # a head of one feature would give it all to the gate: q·k would read nothing
            raise ValueError(
                f"{config.position_embedding_type} keeps what each key carries (FoX's gate, CABLE's bias) in its last "
                f"feature and q·k reads the others: head_dim ({config.head_size}) must be at least 2 (see n_embd, n_head)"
            )
        if cls.rope_theta_of(config) is None:
            return
        require(config, "fox_rope_theta", is_positive_number(config.fox_rope_theta), "null or a finite number > 0")
        if config.head_size < 3:
            raise ValueError(
                f"fox_rope_theta rotates pairs of the head_dim − 1 features q·k reads: head_dim ({config.head_size}) "
                "must be at least 3 (see n_embd, n_head)"
            )

    def __init__(self, config):
        super().__init__()
        self.scheme, self.num_heads = config.position_embedding_type, config.n_head
        check_kernel(config, self.ACTS)
        self.gates = nn.ModuleList(nn.Linear(config.n_embd, config.n_head) for _ in range(config.n_layer))
        self.rope_theta = self.rope_theta_of(config)
        self.rotary_dim = (config.head_size - 1) // 2 * 2
        self.register_fixed_buffers()

    def fixed_buffers(self):
        if self.rope_theta is None:
            return {}
        return {"inv_freq": rope_frequencies(self.rope_theta, self.rotary_dim)}

    def rotary_cos_sin(self, hidden_states, position_ids):
        if self.rope_theta is None:
            return None
        angles = rotation_angles(position_ids, self.inv_freq)  # (B, T, R)
        return angles.cos().to(hidden_states.dtype), angles.sin().to(hidden_states.dtype)

    def log_gate(self, gate_input: torch.Tensor) -> torch.Tensor:
        """log f_t from the gate's linear layer's output w·x_t + b."""
        return nn.functional.logsigmoid(gate_input)

    def keys_carry(self, layer_idx):
        return functools.partial(self.with_forget_gates, layer_idx=layer_idx)

    def with_forget_gates(self, hidden_states: torch.Tensor, key: torch.Tensor, layer_idx: int = 0) -> torch.Tensor:
        """`key` (B, H, T, head_dim) with its last feature replaced by log f_t of its token."""
        log_forget = self.log_gate(self.gates[layer_idx](hidden_states).float())  # (B, T, n_head)
        all_heads_here(key, self.num_heads, self.scheme, "learns a forget gate per head for")
        return torch.cat((key[..., :-1], log_forget.transpose(1, 2)[..., None].to(key.dtype)), dim=-1)

    def decay(self, log_forget: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
        """(B, H, q, k) float32: Σ_{j<l≤i} log f_l for query i (at its own cache slot) and key j, from the gates'
        logs (B, H, k) and the keys each query sees (B, 1, q, k). A token no query sees (padding, or one masked
        inside a sequence) forgets nothing, as in flash-linear-attention's ForgettingAttention, which drops every
        masked token before its gates are summed (`unpad_input`, fla/layers/forgetting_attn.py@20ceee52)."""
        shown = seen.any(-2)  # (B, 1, k)
        total = log_forget.float().masked_fill(~shown, 0).cumsum(-1)  # c_j
        own = own_slots(seen).clamp(min=0).expand(-1, total.shape[1], -1)  # a query that sees nothing: any slot
        return total.gather(-1, own)[..., None] - total[..., None, :]

    def attention(self, layer_idx):
        return self.attend

    def attend(self, module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        """Eager attention (transformers' attention-interface signature) with the forget gates' decay added."""
        seen = keys_each_query_sees(attention_mask, self.scheme, self.ACTS)
        query, key, log_forget = query[..., :-1], key[..., :-1], key[..., -1]  # the last feature is the gate's
        scores = (query @ key.transpose(-1, -2)) * scaling + self.decay(log_forget, seen)
        return softmax_attention(module, scores, seen, value, dropout)
