"""torch.export (ExecuTorch's entry point), in this venv: every scheme's exported program decodes as `generate` does."""

import pytest
import torch
from conftest import SCHEME_VARIANTS, tiny_model

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("variant", SCHEME_VARIANTS)
def test_an_exported_program_decodes_transformers_greedy_tokens(variant):
    """transformers' `TorchExportableModuleForDecoderOnlyLM` exports the model with a static cache; the program, fed
    the prompt one token at a time and then its own best token, gives `generate`'s greedy tokens and, at every
    step, the logits of a full forward. (transformers' own `.generate` helper for such a program feeds the prompt's
    last token twice, so its tokens differ: it is not used here.)"""
    from transformers import GenerationConfig
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    scheme, fields = SCHEME_VARIANTS[variant]
    model = tiny_model(scheme, **fields)
    length = 32
    cache = {"batch_size": 1, "max_cache_len": length}
    model.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static", max_length=length, cache_config=cache
    )
    program = TorchExportableModuleForDecoderOnlyLM(model).export(
        input_ids=torch.tensor([[1]]), cache_position=torch.tensor([0])
    )
    step = program.module()
    prompt = [5, 9, 3, 7]
    expected = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False, pad_token_id=0)[0].tolist()

    sequence, step_logits = list(prompt), []
    for position in range(len(prompt) + 7):
        logits = step(input_ids=torch.tensor([[sequence[position]]]), cache_position=torch.tensor([position]))
        step_logits.append(logits[0, -1])
        if position >= len(prompt) - 1:
            sequence.append(int(logits[0, -1].argmax()))
    assert sequence == expected
    with torch.no_grad():
        full = model(torch.tensor([sequence])).logits[0, : len(step_logits)]
    assert (torch.stack(step_logits) - full).abs().max() <= 1e-5
