"""Fine-tuning with peft, as the README shows it: peft has no default target modules for model_type "tinygpt", so
LoRA names TinyGPT's projections (`c_attn`, `c_proj`, `c_fc`); the merged model saves and loads as a plain TinyGPT."""

import pytest
import torch
from conftest import tiny_model

from hf_tinygpt import TinyGPTForCausalLM

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("scheme", ["learned", "rope"])
def test_lora_on_tinygpt_projections_trains_merges_and_reloads(tmp_path, scheme):
    peft = pytest.importorskip("peft", reason="peft is part of the [dev] extra: pip install -e '.[dev]'")
    model = tiny_model(scheme)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj", "c_fc"], task_type="CAUSAL_LM")
    tuned = peft.get_peft_model(model, lora)
    trainable = {name for name, param in tuned.named_parameters() if param.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)  # only the adapters train
    assert len(trainable) == 2 * 4 * model.config.n_layer  # A and B for c_attn, attn.c_proj, c_fc, mlp.c_proj

    ids = torch.randint(0, model.config.vocab_size, (4, 16))
    optimizer = torch.optim.AdamW([p for p in tuned.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(20):
        loss = tuned(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]

    tuned.eval()
    with torch.no_grad():
        expected = tuned(input_ids=ids).logits
    merged = tuned.merge_and_unload()
    merged.save_pretrained(tmp_path)
    reloaded = TinyGPTForCausalLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert (reloaded(ids).logits - expected).abs().max() < 1e-4  # merging adds A·B into the weight: rounding only


@pytest.mark.parametrize("scheme", ["t5", "cope", "pope", "fox", "cable", "path"])
def test_a_schemes_own_weights_train_as_modules_to_save(scheme):
    """(With `modules_to_save=["wpe"]` CoPE, PoPE, FoX, CABLE and PaTH kept calling the frozen original: peft's
    trainable copy was saved in the adapter but took no gradient.) The copy is what the model runs, adapter on or
    off."""
    peft = pytest.importorskip("peft", reason="peft is part of the [dev] extra: pip install -e '.[dev]'")
    model = tiny_model(scheme)
    lora = peft.LoraConfig(r=4, target_modules=["c_attn"], modules_to_save=["wpe"], task_type="CAUSAL_LM")
    tuned = peft.get_peft_model(model, lora)
    ids = torch.randint(0, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    tuned(input_ids=ids, labels=ids).loss.backward()
    copies = {name: p for name, p in tuned.named_parameters() if "modules_to_save" in name}
    assert copies and all(p.grad is not None and p.grad.abs().sum() > 0 for p in copies.values()), copies.keys()
    with torch.no_grad():
        for p in copies.values():  # noise: a constant added to a bias table moves no softmax
            p.add_(0.5 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
        moved = tuned(input_ids=ids).logits
        with tuned.disable_adapter():  # the original, not the copy, without the adapter
            original = tuned(input_ids=ids).logits
    assert (moved - original).abs().max() > 1e-3
    with torch.no_grad():
        torch.testing.assert_close(original, tiny_model(scheme)(ids).logits, atol=1e-6, rtol=0)
