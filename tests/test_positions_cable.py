"""`cable`: its attention against its authors' code, and what it shares with FoX. (The generic checks, cached decoding,
padding, saving, exports and the rest, run on it from the registry.)"""

import math

import torch
from conftest import tiny_config, tiny_model
from torch import nn

from hf_tinygpt.model.positions import ContextAwareBias, ForgetGate


def attend(scheme, x, q, k, v):
    causal = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).tril()[None, None]
    keys = scheme.with_forget_gates(x, k)
    output, _ = scheme.attend(nn.Module().eval(), q, keys, v, causal, scaling=q.shape[-1] ** -0.5)
    return output


def as_its_authors_compute_it(h_attn, x, q, k, v):
    """Re-derived from axiomlab/Cable at 2d7410b4, `CausalSelfAttention.forward` in src/Cable.py: b = the running
    sum over tokens of −softplus(h_attn(x)), the bias b_i − b_j under a causal −inf, added to the scores, softmax,
    values. Their scores are q·k unscaled (q and k divided by √(C / n_embd) = 1); here q·k / √head_dim, as in the
    model (head_dim 8; its keys' last feature carries the bias, as FoX's does), so that the bias alone is
    compared."""
    b = torch.cumsum(-nn.functional.softplus(h_attn(x)), dim=1).permute(0, 2, 1)  # (B, nh, T)
    length = x.shape[1]
    causal = torch.triu(torch.full((length, length), float("-inf")), diagonal=1)
    bias = (b.unsqueeze(3) - b.unsqueeze(2)) + causal
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(8) + bias
    return (nn.functional.softmax(scores, dim=-1) @ v).transpose(1, 2)


def test_cable_attention_equals_its_authors_code():
    torch.manual_seed(0)
    scheme = ContextAwareBias(tiny_config("cable"))  # n_embd 32, 4 heads of 8
    nn.init.normal_(scheme.gates[0].weight, std=0.3)
    nn.init.uniform_(scheme.gates[0].bias, -3.0, 3.0)
    x, (q, k, v) = torch.randn(2, 40, 32), (torch.randn(2, 4, 40, 8) for _ in range(3))
    expected = as_its_authors_compute_it(scheme.gates[0], x, q[..., :-1], k[..., :-1], v)
    assert (attend(scheme, x, q, k, v) - expected).abs().max() <= 1e-5


def test_a_cable_layer_is_a_fox_layer_with_its_gate_negated():
    """−softplus(u) = log σ(−u): CABLE's biases are FoX's log forget gates of the negated linear layer."""
    torch.manual_seed(1)
    cable, fox = ContextAwareBias(tiny_config("cable")), ForgetGate(tiny_config("fox"))
    nn.init.normal_(cable.gates[0].weight, std=0.3)
    nn.init.uniform_(cable.gates[0].bias, -3.0, 3.0)
    fox.gates[0].weight.data.copy_(-cable.gates[0].weight)
    fox.gates[0].bias.data.copy_(-cable.gates[0].bias)
    x, (q, k, v) = torch.randn(2, 40, 32), (torch.randn(2, 4, 40, 8) for _ in range(3))
    assert (attend(cable, x, q, k, v) - attend(fox, x, q, k, v)).abs().max() <= 1e-5  # rounding, summed over 40


def test_biases_start_as_the_authors_do():
    """Their `_init_weights`: every nn.Linear N(0, 0.02) with bias 0, so every token's bias starts near −log 2."""
    model = tiny_model("cable", n_embd=256, n_head=4)
    gate = model.transformer.wpe.gates[0]
    assert torch.equal(gate.bias, torch.zeros(4)) and abs(gate.weight.std().item() - 0.02) < 2e-3
    assert torch.allclose(model.transformer.wpe.log_gate(torch.zeros(1)), torch.tensor([-math.log(2)]))
