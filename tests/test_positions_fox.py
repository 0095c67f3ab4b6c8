"""`fox`: its forget gates on a worked example, and its attention against two references someone else wrote:
x-transformers' data-dependent ALiBi and fla-core's naive forgetting attention. (The generic checks, cached decoding,
padding, saving, exports and the rest, run on it from the registry.)"""

import math

import pytest
import torch
from conftest import VOCAB, fla_naive_reference, tiny_config, tiny_model
from torch import nn
from transformers import DynamicCache, StaticCache

from hf_tinygpt.model.positions import ForgetGate, apply_rotary


def attend(scheme, x, q, k, v, layer_idx=0):
    """The scheme's attention on (B, H, T, D) q, k, v, its gates read from x (B, T, C); output (B, T, H, D)."""
    causal = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).tril()[None, None]
    keys = scheme.with_forget_gates(x, k, layer_idx=layer_idx)
    output, _ = scheme.attend(nn.Module().eval(), q, keys, v, causal, scaling=q.shape[-1] ** -0.5)
    return output


def gated_inputs(seed=0):
    torch.manual_seed(seed)
    scheme = ForgetGate(tiny_config("fox"))  # n_embd 32, 4 heads of 8
    for gate in scheme.gates:  # trained-looking gates: some heads forget fast, some hardly at all
        nn.init.normal_(gate.weight, std=0.3)
        nn.init.uniform_(gate.bias, -2.0, 6.0)
    x = torch.randn(2, 40, 32)
    q, k, v = (torch.randn(2, 4, 40, 8) for _ in range(3))
    return scheme, x, q, k, v


def test_fox_attention_equals_x_transformers_data_dependent_alibi():
    """x-transformers 2.31.10, `DataDependentAlibi` in x_transformers/x_transformers.py (the forget gate as
    data-dependent ALiBi): our gate's weights in its linear layer, its bias added to the scores."""
    x_transformers = pytest.importorskip("x_transformers.x_transformers", reason="the [dev] extra's x-transformers")
    scheme, x, q, k, v = gated_inputs()
    reference = x_transformers.DataDependentAlibi(dim=32, heads=4)
    reference.to_forget_gates[0].load_state_dict(scheme.gates[0].state_dict())
    scores = (q[..., :-1] @ k[..., :-1].transpose(-1, -2)) / math.sqrt(8) + reference(x)  # the gate's feature off
    scores = scores.masked_fill(~torch.ones(40, 40, dtype=torch.bool).tril(), -torch.inf)
    expected = (scores.softmax(-1) @ v).transpose(1, 2)
    assert (attend(scheme, x, q, k, v) - expected).abs().max() <= 1e-5


def naive_forgetting_attn():
    """fla-core 0.6.0's `naive_forgetting_attn` (fla/ops/forgetting_attn/naive.py), the plain PyTorch reference of
    the Forgetting Transformer's kernels."""
    return fla_naive_reference("forgetting_attn/naive.py", "naive_forgetting_attn")


def test_fox_attention_equals_fla_cores_naive_forgetting_attention():
    reference = naive_forgetting_attn()
    scheme, x, q, k, v = gated_inputs(seed=1)
    log_forget = nn.functional.logsigmoid(scheme.gates[1](x))  # (B, T, H), the log gates fla takes
    read = q[..., :-1], k[..., :-1], v  # the features q·k reads: the last one of each key carries its gate
    expected = reference(*(t.transpose(1, 2) for t in read), log_forget, scale=8**-0.5)
    assert (attend(scheme, x, q, k, v, layer_idx=1) - expected).abs().max() <= 1e-5


def test_a_constant_forget_gate_is_alibis_line():
    """The worked example: gates that ignore the content (weights 0, bias b_h) forget the same share at every
    token, so key j, i − j tokens back, is discounted by (i − j)·log σ(b_h): ALiBi's line, slope −log σ(b_h)."""
    scheme = ForgetGate(tiny_config("fox"))
    bias = torch.tensor([-1.0, 0.0, 2.0, 5.0])
    nn.init.zeros_(scheme.gates[0].weight)
    scheme.gates[0].bias.data.copy_(bias)
    keys = scheme.with_forget_gates(torch.randn(1, 6, 32), torch.zeros(1, 4, 6, 8))
    causal = torch.ones(6, 6, dtype=torch.bool).tril()[None, None]
    distance = (torch.arange(6)[:, None] - torch.arange(6)[None, :]).float()
    line = distance * nn.functional.logsigmoid(bias)[:, None, None]  # (H, q, k)
    decay = scheme.decay(keys[..., -1], causal)[0]
    assert torch.allclose(decay.masked_fill(~causal[0], 0), line.masked_fill(~causal[0], 0), atol=1e-6)


def test_each_key_gives_its_last_feature_to_its_gate():
    """Where this differs from the paper, so that caches keep transformers' shape: the key's last feature carries
    log f_t into the cache, and q·k reads the other head_dim − 1 features (scaled by 1/√head_dim still)."""
    scheme, x, q, k, v = gated_inputs()
    keys = scheme.with_forget_gates(x, k)
    assert keys.shape == k.shape and torch.equal(keys[..., :-1], k[..., :-1])
    assert torch.allclose(keys[..., -1], nn.functional.logsigmoid(scheme.gates[0](x)).transpose(1, 2))
    changed = q.clone(), k.clone()
    changed[0][..., -1], changed[1][..., -1] = 100.0, -100.0
    assert torch.equal(attend(scheme, x, q, k, v), attend(scheme, x, *changed, v))


def test_with_rope_it_equals_x_transformers_rotary_and_data_dependent_alibi():
    """FoX with RoPE, as its authors compare it: q and k rotated, then the forget gates' bias. Against
    x-transformers 2.31.10's `RotaryEmbedding` and `apply_rotary_pos_emb` (x_transformers/x_transformers.py), which
    pair features (2i, 2i + 1) where rotate_half pairs (i, i + R/2): the reference reads the same features
    reordered, which leaves every q·k as it is. head_dim 8: R = 6 features turn, the 7th passes, the 8th is the gate's."""
    x_transformers = pytest.importorskip("x_transformers.x_transformers", reason="the [dev] extra's x-transformers")
    torch.manual_seed(2)
    scheme = ForgetGate(tiny_config("fox", fox_rope_theta=500.0))
    x, positions = torch.randn(2, 40, 32), torch.arange(40)
    q, k, v = (torch.randn(2, 4, 40, 8) for _ in range(3))
    turned_q, turned_k = apply_rotary(q, k, scheme.rotary_cos_sin(x, positions[None]))
    output = attend(scheme, x, turned_q, turned_k, v)

    paired = torch.stack((torch.arange(3), torch.arange(3) + 3), dim=-1).flatten().tolist() + [6]  # 0,3,1,4,2,5,6
    freqs, _ = x_transformers.RotaryEmbedding(dim=6, base=500.0)(positions)
    rq, rk = (x_transformers.apply_rotary_pos_emb(t[..., paired], freqs) for t in (q, k))
    alibi = x_transformers.DataDependentAlibi(dim=32, heads=4)
    alibi.to_forget_gates[0].load_state_dict(scheme.gates[0].state_dict())
    scores = (rq @ rk.transpose(-1, -2)) / math.sqrt(8) + alibi(x)
    scores = scores.masked_fill(~torch.ones(40, 40, dtype=torch.bool).tril(), -torch.inf)
    expected = (scores.softmax(-1) @ v).transpose(1, 2)
    assert (output - expected).abs().max() <= 1e-5
    unturned = attend(scheme, x, q, k, v)
    assert (unturned - expected).abs().max() > 1e-2  # the rotation is not a no-op here


@pytest.mark.parametrize("cache", [DynamicCache, StaticCache])
def test_with_rope_it_decodes_and_pads_as_one_forward(cache):
    """The generic checks, for the option: chunks through either cache equal one forward (the positions the cache
    counts are the rotations'), and a left-padded batch gives each prompt's tokens alone."""
    model = tiny_model("fox", fox_rope_theta=100.0, initializer_range=0.2)
    ids = torch.randint(0, VOCAB, (2, 20))
    with torch.no_grad():
        full = model(ids).logits
        kept = cache(config=model.config, max_cache_len=24) if cache is StaticCache else cache(config=model.config)
        steps = [model(ids[:, :7], cache=kept).logits]
        steps += [model(ids[:, t : t + 1], cache=kept).logits for t in range(7, 20)]
    assert (torch.cat(steps, dim=1) - full).abs().max() <= 1e-5
    prompts, kwargs = [[5, 17, 33, 2, 9], [12, 7]], dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    batch = model.generate(
        torch.tensor([prompts[0], [0, 0, 0, *prompts[1]]]),
        attention_mask=torch.tensor([[1] * 5, [0, 0, 0, 1, 1]]),
        **kwargs,
    )
    for row, prompt in enumerate(prompts):
        assert batch[row, 5:].tolist() == model.generate(torch.tensor([prompt]), **kwargs)[0, len(prompt) :].tolist()


def test_its_rope_field_is_checked():
    with pytest.raises(ValueError, match="fox_rope_theta must be null or a finite number > 0, got 0"):
        tiny_model("fox", fox_rope_theta=0)
    with pytest.raises(ValueError, match=r"head_dim \(2\) must be at least 3"):
        tiny_model("fox", fox_rope_theta=1e4, n_embd=8, n_head=4)
    with pytest.raises(ValueError, match="fox_rope_theta only applies to position_embedding_type='fox', not 'cable'"):
        tiny_model("cable", fox_rope_theta=1e4)
    for scheme in ("fox", "cable"):  # a head of one feature was taken, and its q·k read nothing: q and k were ignored
        with pytest.raises(
            ValueError, match=rf"{scheme} keeps what each key carries .*: head_dim \(1\) must be at least 2"
        ):
            tiny_model(scheme, n_embd=4, n_head=4)


def test_gates_start_as_the_authors_do():
    """zhixuan-lin/forgetting-transformer's `ForgettingAttentionLayer` (fgate_type="full"): weights N(0, 0.02), bias
    0, so every gate starts at σ(0) = 1/2. (x-transformers starts its bias at 5 instead, σ(5) ≈ 0.993.)"""
    model = tiny_model("fox", n_embd=256, n_head=4)
    gate = model.transformer.wpe.gates[1]
    assert torch.equal(gate.bias, torch.zeros(4)) and abs(gate.weight.std().item() - 0.02) < 2e-3


def test_its_kernel_is_named():
    with pytest.raises(ValueError, match="forget gates .*attn_implementation='flex_attention'"):
        tiny_model("fox", attn_implementation="flex_attention")
