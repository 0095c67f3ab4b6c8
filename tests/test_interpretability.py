"""The tools interpretability people use, on TinyGPT: nnsight traces and edits it; TransformerLens (4.x, its
TransformerBridge) runs the exact GPT-2 and GPT-NeoX exports with our logits and attention patterns; and
`output_attentions=True` returns the weights each scheme's attention actually applied to the values."""

import pytest
import torch
from conftest import text_model

from hf_tinygpt import gpt2_tokenizer
from hf_tinygpt.convert.conversions import export_gpt2, export_gpt_neox

PROMPT = "The cat sat on the mat by the door, and the cat slept"


def prompt_ids():
    return torch.tensor([gpt2_tokenizer()(PROMPT)["input_ids"]])


@torch.no_grad()
def test_output_attentions_are_the_weights_the_values_were_mixed_with(scheme):
    """For every scheme (biases, CoPE's gates and all): the returned weights times each head's values are what
    enters the output projection."""
    model = text_model(scheme, seed=1).eval()
    model.set_attn_implementation("eager")
    config, seen = model.config, {}
    head_size = config.n_embd // config.n_head
    hooks = []
    for index, block in enumerate(model.transformer.h):
        hooks.append(
            block.attn.c_attn.register_forward_hook(lambda m, a, out, i=index: seen.__setitem__(("v", i), out))
        )
        hooks.append(
            block.attn.c_proj.register_forward_pre_hook(lambda m, a, i=index: seen.__setitem__(("o", i), a[0]))
        )
    ids = prompt_ids()
    attentions = model(ids, output_attentions=True).attentions
    for hook in hooks:
        hook.remove()
    batch, length = ids.shape
    for index, weights in enumerate(attentions):
        values = (
            seen["v", index][..., 2 * config.n_embd :].view(batch, length, config.n_head, head_size).transpose(1, 2)
        )
        mixed = (weights @ values).transpose(1, 2).reshape(batch, length, config.n_embd)
        assert torch.allclose(mixed, seen["o", index], atol=1e-6), f"layer {index}"
        assert torch.allclose(weights.sum(-1), torch.ones(()), atol=1e-6) and not weights.triu(1).any()


def test_nnsight_reads_and_edits_a_block_as_the_models_own_forward_does():
    nnsight = pytest.importorskip("nnsight")
    model = text_model("alibi", seed=1).eval()
    ids = prompt_ids()
    traced = nnsight.NNsight(model)
    with traced.trace(ids):
        first_block = traced.transformer.h[0].output.save()
        logits = traced.output.logits.save()
    with torch.no_grad():
        ours = model(ids, output_hidden_states=True)
    assert torch.equal(first_block, ours.hidden_states[1]) and torch.equal(logits, ours.logits)

    shift = torch.randn(model.config.n_embd, generator=torch.Generator().manual_seed(0))
    with traced.trace(ids):
        traced.transformer.h[0].output[:] += shift
        edited = traced.output.logits.save()
    hook = model.transformer.h[0].register_forward_hook(lambda module, args, output: output + shift)
    with torch.no_grad():
        expected = model(ids).logits
    hook.remove()
    assert (edited - ours.logits).abs().max() > 1e-2  # the edit reached the logits...
    assert torch.allclose(edited, expected, atol=1e-6)  # ...exactly as the forward with that edit says


@pytest.mark.parametrize("scheme", ["learned", "sinusoidal", "none", "rope"])
def test_transformer_lens_runs_the_exact_exports(scheme):
    """GPT-2's export for the schemes GPT-2 can express, GPT-NeoX's for RoPE, booted by TransformerLens' bridge:
    the logits and every layer's `hook_pattern` equal ours; its HookedTransformer-compatible mode (LayerNorms
    folded, weights centred) gives the same log-probabilities."""
    bridge_module = pytest.importorskip("transformer_lens.model_bridge")
    model = text_model(scheme, seed=1).eval()
    model.set_attn_implementation("eager")
    export = export_gpt_neox(model) if scheme == "rope" else export_gpt2(model)
    bridge = bridge_module.TransformerBridge.boot_transformers(
        f"tinygpt-{scheme}", hf_model=export, tokenizer=gpt2_tokenizer()
    )
    ids = prompt_ids()
    with torch.no_grad():
        ours = model(ids, output_attentions=True)
        logits, cache = bridge.run_with_cache(ids)
        assert (logits - ours.logits).abs().max() <= 1e-4
        for layer, weights in enumerate(ours.attentions):
            assert (cache[f"blocks.{layer}.attn.hook_pattern"] - weights).abs().max() <= 1e-5, f"layer {layer}"
        bridge.enable_compatibility_mode()
        log_probs = bridge(ids).log_softmax(-1)
    assert (log_probs - ours.logits.log_softmax(-1)).abs().max() <= 1e-4
