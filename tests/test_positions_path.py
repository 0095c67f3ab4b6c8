"""`path`: its transforms on a worked example, its attention against fla-core's naive PaTH attention, and what its
rewritten cache allows and refuses. (The generic checks, cached decoding, padding, saving, exports and the rest, run
on it from the registry.)"""

import copy

import pytest
import torch
from conftest import fla_naive_reference, tiny_config, tiny_model
from torch import nn
from transformers.cache_utils import Cache, DynamicCache, DynamicSlidingWindowLayer, StaticCache

from hf_tinygpt.model.positions import HouseholderPath


def attend(scheme, x, q, k, v, layer_idx=0):
    """The scheme's attention on (B, H, T, D) q, k, v, its transforms read from x (B, T, C); output (B, T, H, D)."""
    causal = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).tril()[None, None]
    module = nn.Module().eval()
    module.layer_idx = layer_idx
    output, _ = scheme.attend(module, q, k, v, causal, scaling=q.shape[-1] ** -0.5, hidden_states=x)
    return output


def path_inputs(seed=0, length=70):
    torch.manual_seed(seed)
    scheme = HouseholderPath(tiny_config("path"))  # n_embd 32, 4 heads of 8
    for strength in scheme.strengths:  # trained-looking strengths: some tokens reflect (β near 2), some pass by
        nn.init.normal_(strength.weight, std=0.5)
    x = torch.randn(2, length, 32)
    q, k, v = (torch.randn(2, 4, length, 8) for _ in range(3))
    return scheme, x, q, k, v


def naive_path_attn():
    """fla-core 0.6.0's `naive_path_attn` (fla/ops/path_attn/naive.py), the plain PyTorch reference of PaTH's
    kernels."""
    return fla_naive_reference("path_attn/naive.py", "naive_path_attn")


@pytest.mark.parametrize("layer_idx", [0, 1])
def test_path_attention_equals_fla_cores_naive_path_attention(layer_idx):
    """70 tokens, more than one of fla's chunks of 64 (its reference treats chunks and the steps between them apart);
    no forget gate (g = 0)."""
    reference = naive_path_attn()
    scheme, x, q, k, v = path_inputs(seed=layer_idx)
    w, beta = scheme.transforms(x, layer_idx)
    bthd = (t.transpose(1, 2) for t in (q, k, v, w))
    expected = reference(*bthd, beta.transpose(1, 2), torch.zeros(2, 70, 4), scale=8**-0.5)
    assert (attend(scheme, x, q, k, v, layer_idx) - expected).abs().max() <= 1e-5


def test_one_reflection_repeated_flips_every_other_key():
    """The worked example: every token reflects along the same w (β = 2), and a reflection twice is the identity,
    so query i reads key j as it is when i − j is even and reflected, k − 2(w·k)w, when it is odd."""
    scheme = HouseholderPath(tiny_config("path"))
    w = nn.functional.normalize(torch.randn(1, 4, 1, 8), dim=-1).expand(1, 4, 6, 8)
    beta = torch.full((1, 4, 6), 2.0)
    q, k = torch.randn(1, 4, 6, 8), torch.randn(1, 4, 6, 8)
    acts_on = (torch.arange(6)[:, None] > torch.arange(6))[None, None]
    scores, keys_after = scheme.through_transforms(q, k, w, beta, acts_on)
    reflected = k - 2 * (k * w).sum(-1, keepdim=True) * w
    odd = ((torch.arange(6)[:, None] - torch.arange(6)) % 2 == 1)[None, None, :, :, None]
    read = torch.where(odd, reflected[:, :, None], k[:, :, None])  # (1, H, i, j, D): key j as query i reads it
    expected = (q[:, :, :, None] * read).sum(-1)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    assert torch.allclose(scores[..., causal], expected[..., causal], atol=1e-5)
    last_reads = torch.where(odd[:, :, -1], reflected, k)  # what the cache holds: keys as the last token leaves them
    assert torch.allclose(keys_after, last_reads, atol=1e-5)


def test_directions_depend_on_their_own_token_alone():
    """Where this differs from flash-linear-attention's layer: no short convolution mixes the two tokens before into
    w_t, so nothing but token t's own input sets its transform (and the cache needs no inputs of past tokens)."""
    scheme, x, *_ = path_inputs()
    changed = x.clone()
    changed[:, :10] = torch.randn(2, 10, 32)
    w, beta = scheme.transforms(x, 0)
    w_changed, beta_changed = scheme.transforms(changed, 0)
    assert torch.equal(w[:, :, 10:], w_changed[:, :, 10:]) and torch.equal(beta[:, :, 10:], beta_changed[:, :, 10:])
    assert torch.allclose(w.norm(dim=-1), torch.ones(2, 4, 70)) and 0 < beta.min() and beta.max() < 2


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_chunks_through_the_rewritten_cache_equal_one_forward(cache):
    """Prompt, then chunks of 3 and single tokens: each chunk transforms the keys the cache holds in place."""
    model = tiny_model("path").eval()
    ids = torch.randint(0, model.config.vocab_size, (2, 20))
    held = DynamicCache(config=model.config) if cache == "dynamic" else StaticCache(model.config, max_cache_len=24)
    logits = []
    for start, end in [(0, 8), (8, 11), (11, 12), (12, 15), (15, 20)]:
        logits.append(model(ids[:, start:end], cache=held, use_cache=True).logits)
    assert (torch.cat(logits, 1) - model(ids).logits).abs().max() <= 1e-5


def test_a_cache_that_hands_out_copies_is_refused_by_name():
    model = tiny_model("path").eval()
    sliding = Cache(layers=[DynamicSlidingWindowLayer(sliding_window=64) for _ in range(model.config.n_layer)])
    with pytest.raises(ValueError, match="'path' transforms the keys it has cached.*DynamicSlidingWindowLayer"):
        model(torch.randint(0, 64, (1, 5)), cache=sliding, use_cache=True)


def test_a_crop_is_refused_since_it_cannot_undo_the_transforms():
    """transformers ≥ 5.25 refuses assisted decoding by the layers' `is_croppable`; before, it crops without
    asking (once the model rejects a guess), and the layer's own `crop` refuses. A crop that removes nothing is no
    crop."""
    model = tiny_model("path")
    assistant = copy.deepcopy(model)  # its final norm negated: it guesses the model's least likely token
    assistant.transformer.ln_f.weight.data.neg_(), assistant.transformer.ln_f.bias.data.neg_()
    with pytest.raises(ValueError, match="cache that can be cropped|cache cannot be cropped back"):
        model.generate(torch.randint(0, 64, (1, 5)), assistant_model=assistant, max_new_tokens=8, do_sample=False)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.randint(0, 64, (1, 5)), cache=cache, use_cache=True)
    cache.crop(0)
    copied = copy.deepcopy(cache)
    with pytest.raises(ValueError, match="'path' keeps each cached key as the tokens after it transformed it"):
        copied.crop(-2)
    assert copied.get_seq_length() == cache.get_seq_length() == 5


def test_training_with_the_cache_on_reaches_every_parameter():
    """A training step with `use_cache` on (the config's default): the cache's keys are rewritten after autograd
    has kept them, so the scores read a copy."""
    model = tiny_model("path").train()
    ids = torch.randint(0, model.config.vocab_size, (2, 12))
    model(ids, labels=ids, use_cache=True).loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.transformer.wpe.parameters())


def test_its_kernel_is_named():
    with pytest.raises(ValueError, match="transforms each key .*attn_implementation='flex_attention'"):
        tiny_model("path", attn_implementation="flex_attention")
