"""The `fox` scheme: a forget gate on every token, whose running product fades what lies further back (the Forgetting
Transformer). One file of the positions chapter (positions.py); part of the model bundle."""

import functools

import torch
from torch import nn

from .positions_interface import (
    PositionScheme,
    all_heads_here,
    check_kernel,
    keys_each_query_sees,
    own_slots,
    softmax_attention,
)


class ForgetGate(PositionScheme):
    """`fox` (Lin et al., ICLR 2025, "Forgetting Transformer: Softmax Attention with a Forget Gate"): each token t
    sets a forget gate per head from what it holds, f_t = σ(w·x_t + b) with x_t the attention layer's input, and
    query i discounts key j by the gates of the tokens after it:
        s_ij = q_i·k_j / √head_dim + Σ_{j<l≤i} log f_l,
    a data-dependent ALiBi (a constant f gives ALiBi's line, with slope −log f). No other position signal: order
    comes from what the gates forget. Each layer has its own gates (an nn.Linear from n_embd to n_head, started as
    GPT-2's layers and the authors' are: weights N(0, 0.02), bias 0).

    The gate's log travels with its key: `keys_carry` appends log f_t to each key as one more feature, so every
    cache (dynamic, static, quantized) keeps it beside the key, and this scheme's attention (`attention`) takes it
    off again and sums it over the keys. Sums are taken in float32 as running totals c_j = Σ_{l≤j} log f_l, the
    bias being c_i − c_j, as the authors' naive reference computes it; with left padding the padding's gates shift
    every c by the same amount, which the difference cancels.
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
    needs_full_mask = True
    ACTS = "adds each token's forget gates to the attention scores in its own attention"

    def __init__(self, config):
        super().__init__()
        self.scheme, self.num_heads = config.position_embedding_type, config.n_head
        check_kernel(config, self.ACTS)
        self.gates = nn.ModuleList(nn.Linear(config.n_embd, config.n_head) for _ in range(config.n_layer))

    def log_gate(self, gate_input: torch.Tensor) -> torch.Tensor:
        """log f_t from the gate's linear layer's output w·x_t + b."""
        return nn.functional.logsigmoid(gate_input)

    def keys_carry(self, layer_idx):
        return functools.partial(self.with_forget_gates, layer_idx=layer_idx)

    def with_forget_gates(self, hidden_states: torch.Tensor, key: torch.Tensor, cache=None, layer_idx: int = 0):
        """`key` (B, H, T, head_dim) with log f_t of each token appended: (B, H, T, head_dim + 1)."""
        log_forget = self.log_gate(self.gates[layer_idx](hidden_states).float())  # (B, T, n_head)
        all_heads_here(key, self.num_heads, self.scheme, "learns a forget gate per head for")
        key = torch.cat((key, log_forget.transpose(1, 2)[..., None].to(key.dtype)), dim=-1)
        layers = getattr(cache, "layers", ())
        if layer_idx < len(layers) and getattr(layers[layer_idx], "is_initialized", False):
            if layers[layer_idx].keys.shape[-1] != key.shape[-1]:  # sized before its first use, from the config
                raise ValueError(
                    f"position_embedding_type={self.scheme!r} carries each token's gate in its keys, head_dim + 1 = "
                    f"{key.shape[-1]} features, but this cache was made for keys of "
                    f"{layers[layer_idx].keys.shape[-1]}: let the cache size itself on first use, as generate() and "
                    "StaticCache do (transformers' exporters, which size keys and values alike from the config, "
                    "cannot carry it)"
                )
        return key

    def decay(self, log_forget: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
        """(B, H, q, k) float32: Σ_{j<l≤i} log f_l for query i (at its own cache slot) and key j, from the gates'
        logs (B, H, k) and the keys each query sees (B, 1, q, k)."""
        total = log_forget.float().cumsum(-1)  # c_j
        own = own_slots(seen).clamp(min=0).expand(-1, total.shape[1], -1)  # a query that sees nothing: any slot
        return total.gather(-1, own)[..., None] - total[..., None, :]

    def attention(self, layer_idx):
        return self.attend

    def attend(self, module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        """Eager attention (transformers' attention-interface signature) with the forget gates' decay added."""
        seen = keys_each_query_sees(attention_mask, self.scheme, self.ACTS)
        key, log_forget = key[..., :-1], key[..., -1]
        scores = (query @ key.transpose(-1, -2)) * scaling + self.decay(log_forget, seen)
        return softmax_attention(module, scores, seen, value, dropout)
