"""`stick_breaking`: its weights on a worked example, and its attention against its authors' reference. (The
generic checks, cached decoding, padding, saving, exports and the rest, run on it from the registry.)"""

import math

import pytest
import torch
from conftest import tiny_config, tiny_model
from torch import nn

from hf_tinygpt.model.positions import StickBreakingAttention


def as_its_authors_compute_it(q, k, v, attend_current):
    """Re-derived from shawntan/stickbreaking-attention at ea69b8dd (`stickbreaking` in
    stickbreaking_attention/sb_ref.py, and `ref_fwd` in tests/test_attn.py, which calls it): log σ of the scores with
    the masked ones at −1e5, log σ(−score) with the masked ones at 0 summed over the later keys by a strictly
    lower-triangular matrix, and what is left added to the query's own value."""
    length = q.shape[-2]
    later = torch.ones(length, length).tril(-1)
    masked = torch.ones(length, length).triu(1 if attend_current else 0).bool()
    logits = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    log_z = nn.functional.logsigmoid(logits).masked_fill(masked, -1e5)
    log_beta = nn.functional.logsigmoid(-logits).masked_fill(masked, 0)
    attention = (log_z + torch.einsum("bhij,jk->bhik", log_beta, later)).exp()
    return attention @ v + (1 - attention.sum(dim=-1))[..., None] * v


def attend(scheme, q, k, v):
    causal = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).tril()[None, None]
    output, weights = scheme.attend(nn.Module().eval(), q, k, v, causal, scaling=q.shape[-1] ** -0.5)
    return output.transpose(1, 2), weights


@pytest.mark.parametrize("attend_current", [False, True])
def test_stick_breaking_attention_equals_its_authors_reference(attend_current):
    scheme = StickBreakingAttention(tiny_config("stick_breaking", stick_breaking_attend_current=attend_current))
    q, k, v = (torch.randn(2, 4, 40, 8) for _ in range(3))
    output, weights = attend(scheme, q, k, v)
    assert (output - as_its_authors_compute_it(q, k, v, attend_current)).abs().max() <= 1e-5
    assert torch.allclose(weights.sum(-1), torch.ones(2, 4, 40))  # every query's stick is handed out whole


def test_stick_breaking_weights_on_a_worked_example():
    """One head of size 1, scores s_2j = q_2·k_j: the third query breaks its stick at key 1 first (β = σ(s_21)), then
    at key 0 (β = σ(s_20) of what is left), and keeps the rest for its own value."""
    scheme = StickBreakingAttention(tiny_config("stick_breaking"))
    q, k = torch.tensor([0.0, 0.0, 1.0]).view(1, 1, 3, 1), torch.tensor([2.0, -1.0, 5.0]).view(1, 1, 3, 1)
    _, weights = attend(scheme, q, k, torch.zeros(1, 1, 3, 1))
    beta_1, beta_0 = torch.sigmoid(torch.tensor(-1.0)), torch.sigmoid(torch.tensor(2.0))
    expected = torch.stack([beta_0 * (1 - beta_1), beta_1, (1 - beta_1) * (1 - beta_0)])
    assert torch.allclose(weights[0, 0, 2], expected) and torch.equal(weights[0, 0, 0], torch.tensor([1.0, 0, 0]))


def test_its_field_is_checked_and_its_kernel_named():
    with pytest.raises(ValueError, match="stick_breaking_attend_current must be true or false, got 1"):
        tiny_config("stick_breaking", stick_breaking_attend_current=1)
    with pytest.raises(ValueError, match="stick_breaking_attend_current only applies to .*'stick_breaking'"):
        tiny_config("alibi", stick_breaking_attend_current=True)
    with pytest.raises(ValueError, match="replaces the softmax with stick-breaking .*attn_implementation='flex"):
        tiny_model("stick_breaking", attn_implementation="flex_attention")
