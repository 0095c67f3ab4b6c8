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
