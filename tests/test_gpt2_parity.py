"""TinyGPT with learned positions *is* GPT-2: same weights, same logits, same tokens, as transformers' GPT2LMHeadModel.

Every comparison is against the real library on random weights saved by `GPT2LMHeadModel.save_pretrained`.
"""

import pytest
import torch
from conftest import VOCAB, random_gpt2

from hf_tinygpt import TinyGPTForCausalLM
from hf_tinygpt.model.compat import CACHE_FIELD

SHAPES = [  # (n_embd, n_layer, n_head, n_positions, extra GPT2Config options)
    (32, 2, 4, 64, {}),
    (48, 3, 6, 40, {"n_inner": 80}),
    (64, 1, 1, 128, {"activation_function": "relu", "layer_norm_epsilon": 1e-6}),
    (24, 4, 3, 32, {"activation_function": "gelu"}),
]


@pytest.fixture(scope="module", params=SHAPES, ids=lambda s: f"C{s[0]}-L{s[1]}-H{s[2]}-P{s[3]}")
def pair(request, tmp_path_factory):
    """(GPT2LMHeadModel, TinyGPTForCausalLM loaded from the folder that GPT-2 saved)."""
    n_embd, n_layer, n_head, n_positions, extra = request.param
    gpt2 = random_gpt2(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_positions=n_positions, **extra)
    folder = tmp_path_factory.mktemp("gpt2")
    gpt2.save_pretrained(folder)
    tiny = TinyGPTForCausalLM.from_pretrained(folder).eval()
    return gpt2, tiny


def test_gpt2_folder_loads_as_learned_tinygpt(pair):
    gpt2, tiny = pair
    assert tiny.config.position_embedding_type == "learned"
    assert tiny.lm_head.weight is tiny.transformer.wte.weight
    # Conv1D (in, out) became nn.Linear (out, in)
    block = tiny.transformer.h[0]
    assert torch.equal(block.attn.c_attn.weight, gpt2.transformer.h[0].attn.c_attn.weight.t())
    assert torch.equal(block.mlp.c_proj.weight, gpt2.transformer.h[0].mlp.c_proj.weight.t())


def test_logits_equal(pair):
    gpt2, tiny = pair
    ids = torch.randint(0, VOCAB, (3, gpt2.config.n_positions))
    with torch.no_grad():
        delta = (tiny(ids).logits - gpt2(ids).logits).abs().max()
    assert delta <= 1e-5


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_logits_equal_per_attention_kernel(pair, attn):
    gpt2, tiny = pair
    gpt2.set_attn_implementation(attn)
    tiny.set_attn_implementation(attn)
    ids = torch.randint(0, VOCAB, (2, 17))
    with torch.no_grad():
        assert (tiny(ids).logits - gpt2(ids).logits).abs().max() <= 1e-5


def test_loss_hidden_states_and_attentions_equal(pair):
    gpt2, tiny = pair
    gpt2.set_attn_implementation("eager")
    tiny.set_attn_implementation("eager")
    ids = torch.randint(0, VOCAB, (2, 12))
    labels = ids.clone()
    labels[0, :4] = -100
    with torch.no_grad():
        ours = tiny(ids, labels=labels, output_hidden_states=True, output_attentions=True)
        theirs = gpt2(ids, labels=labels, output_hidden_states=True, output_attentions=True)
    assert abs(ours.loss.item() - theirs.loss.item()) <= 1e-5
    assert len(ours.hidden_states) == len(theirs.hidden_states) == tiny.config.n_layer + 1
    for a, b in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        assert (a - b).abs().max() <= 1e-5
    assert len(ours.attentions) == tiny.config.n_layer
    for a, b in zip(ours.attentions, theirs.attentions, strict=True):
        assert a.shape == (2, tiny.config.n_head, 12, 12)
        assert (a - b).abs().max() <= 1e-5


def test_greedy_generate_identical(pair):
    gpt2, tiny = pair
    prompt = torch.randint(1, VOCAB, (2, 5))
    kwargs = dict(max_new_tokens=12, do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(prompt))
    assert torch.equal(tiny.generate(prompt, **kwargs), gpt2.generate(prompt, **kwargs))


def test_sampling_identical_under_same_seed(pair):
    gpt2, tiny = pair
    prompt = torch.randint(1, VOCAB, (2, 4))
    kwargs = dict(max_new_tokens=12, do_sample=True, top_k=20, top_p=0.9, temperature=1.3, pad_token_id=0)
    kwargs["attention_mask"] = torch.ones_like(prompt)
    torch.manual_seed(7)
    ours = tiny.generate(prompt, **kwargs)
    torch.manual_seed(7)
    theirs = gpt2.generate(prompt, **kwargs)
    assert torch.equal(ours, theirs)


def left_padded(prompts, pad_id=0):
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    return ids, mask


def test_left_padded_batch_equals_each_prompt_alone_and_gpt2(pair):
    gpt2, tiny = pair
    prompts = [[5, 17, 33, 2, 9, 41, 8], [12, 7], [100, 3, 55, 6]]
    ids, mask = left_padded(prompts)
    kwargs = dict(max_new_tokens=10, do_sample=False, pad_token_id=0)
    batch = tiny.generate(ids, attention_mask=mask, **kwargs)
    assert torch.equal(batch, gpt2.generate(ids, attention_mask=mask, **kwargs))
    width = ids.shape[1]
    for row, prompt in enumerate(prompts):
        alone = tiny.generate(torch.tensor([prompt]), **kwargs)
        assert batch[row, width:].tolist() == alone[0, len(prompt) :].tolist()


def test_left_padded_forward_logits_equal_unpadded(pair):
    gpt2, tiny = pair
    prompts = [[5, 17, 33, 2, 9, 41, 8], [12, 7, 99]]
    ids, mask = left_padded(prompts)
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        batch = tiny(ids, attention_mask=mask, position_ids=position_ids).logits
        reference = gpt2(ids, attention_mask=mask, position_ids=position_ids).logits
        alone = tiny(torch.tensor([prompts[1]])).logits
    assert (batch[mask.bool()] - reference[mask.bool()]).abs().max() <= 1e-5
    assert (batch[1, -3:] - alone[0]).abs().max() <= 1e-5


def test_real_checkpoint_written_by_transformers_4_36():
    """A real file from transformers 4.36 (random weights): same logits as transformers 5's GPT2LMHeadModel."""
    from pathlib import Path

    from transformers import GPT2LMHeadModel

    folder = Path(__file__).parent / "fixtures" / "fake-gpt2-transformers-4.36"
    gpt2 = GPT2LMHeadModel.from_pretrained(folder).eval()
    tiny = TinyGPTForCausalLM.from_pretrained(folder).eval()
    ids = torch.tensor([[15496, 995, 11, 257, 1332, 13]])  # "Hello world, a test."
    with torch.no_grad():
        assert (tiny(ids).logits - gpt2(ids).logits).abs().max() <= 1e-5
        assert abs(tiny(ids, labels=ids).loss.item() - gpt2(ids, labels=ids).loss.item()) <= 1e-5


def test_token_type_ids_are_embedded_like_gpt2(pair):
    gpt2, tiny = pair
    ids = torch.randint(0, VOCAB, (2, 9))
    segments = torch.randint(0, 2, (2, 9))
    with torch.no_grad():
        assert (
            tiny(ids, token_type_ids=segments).logits - gpt2(ids, token_type_ids=segments).logits
        ).abs().max() <= 1e-5
    # generate takes them too (it refused them as a model_kwargs typo), and carries the last one on, as GPT-2's does.
    greedy = dict(max_new_tokens=5, do_sample=False, output_scores=True, return_dict_in_generate=True)
    ours, theirs = (model.generate(ids, token_type_ids=segments, **greedy) for model in (tiny, gpt2))
    assert torch.equal(ours.sequences, theirs.sequences)
    assert max((a - b).abs().max() for a, b in zip(ours.scores, theirs.scores, strict=True)) <= 1e-5


@pytest.mark.parametrize("tolerance, verdict", [(1.0, True), (0.5, False)])
def test_verify_gpt2_and_a_verified_conversion_give_one_verdict(tmp_path, cli, monkeypatch, tolerance, verdict):
    """The library decides, the same way for verify-gpt2 and convert --verify: max |Δlogits| at most the tolerance
    per unit of the logits' scale (here a Δ of 1.0 on a scale of 1.0, made up), and for verify-gpt2 the same greedy
    tokens as well."""
    from pathlib import Path

    from hf_tinygpt.convert import conversions, verify

    folder = Path(__file__).parent / "fixtures" / "fake-gpt2-transformers-4.36"
    result = verify.verify_gpt2_checkpoint(str(folder), "Hello world", tolerance=1e-5)
    assert result["ok"] and result["tolerance"] == 1e-5 and result["tinygpt_tokens"] == result["gpt2_tokens"]
    assert result["max_abs_logit_delta"] <= 1e-5 * result["logit_scale"]

    for module in (verify, conversions):
        monkeypatch.setattr(module, "max_logit_delta", lambda a, b, ids: (1.0, 1.0))
    assert verify.verify_gpt2_checkpoint(str(folder), "Hello world", tolerance=tolerance)["ok"] is verdict
    out = cli("verify-gpt2", folder, "--tolerance", tolerance)
    assert out.returncode == (0 if verdict else 1) and ("OK: identical" if verdict else "MISMATCH") in out.stdout
    assert out.stdout.startswith(f"Loading {folder} into transformers' GPT2LMHeadModel and into TinyGPT")
    converted = cli("convert", folder, "--out", tmp_path / "tiny", "--verify", "--tolerance", tolerance)
    assert converted.returncode == (0 if verdict else 2)
    assert ("verify: max |Δlogits| = 1" in converted.stdout) if verdict else ("verification failed" in converted.stderr)


def test_verify_gpt2_continues_as_far_as_a_short_context_reaches_and_names_a_prompt_that_fills_it(tmp_path):
    """A GPT-2 of 16 positions: the default prompt (13 tokens) and 3 new tokens are compared, not 16 that run past
    the learned table; a prompt that leaves no room to continue is refused by name."""
    from hf_tinygpt.convert.verify import VerificationSettings, verify_gpt2_checkpoint

    random_gpt2(vocab_size=50257, n_positions=16).save_pretrained(tmp_path)
    result = verify_gpt2_checkpoint(str(tmp_path), VerificationSettings.text)
    assert result["ok"] and len(result["tinygpt_tokens"]) == 3 and result["tinygpt_tokens"] == result["gpt2_tokens"]
    with pytest.raises(ValueError, match=r"`text` is 16 tokens long, and .* has 16 positions: no room for a cont"):
        verify_gpt2_checkpoint(str(tmp_path), " a" * 16)


class HostReads(torch.overrides.TorchFunctionMode):
    """Counts every read of a tensor's value back into Python (`int(t)`, `t.item()`, `bool(t)`, ...): on an
    accelerator each one waits for the device to finish, once per decoding step if a forward makes it."""

    READS = {
        torch.Tensor.item,
        torch.Tensor.__int__,
        torch.Tensor.__bool__,
        torch.Tensor.__float__,
        torch.Tensor.__index__,
        torch.Tensor.tolist,
    }

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += func in self.READS
        return func(*args, **kwargs or {})


@pytest.mark.parametrize("padded", [False, True])
def test_a_decoding_step_reads_no_more_back_to_the_host_than_gpt2s(pair, padded):
    """Validating the token ids (and the positions' range) at every step would read them back each time: a
    decoding step makes the reads GPT-2's makes (its mask's), and no more."""
    gpt2, tiny = pair
    ids = torch.randint(0, VOCAB, (2, 6))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0 if padded else 1
    reads = {}
    for name, model in (("gpt2", gpt2), ("tiny", tiny)):
        with torch.no_grad():
            cache = getattr(model(ids, attention_mask=mask, use_cache=True), CACHE_FIELD)
            step = {
                "attention_mask": torch.cat([mask, torch.ones(2, 1, dtype=mask.dtype)], 1),
                "use_cache": True,
                "position_ids": mask.sum(1, keepdim=True),
                CACHE_FIELD: cache,
            }
            with HostReads() as counted:
                model(torch.randint(0, VOCAB, (2, 1)), **step)
        reads[name] = counted.count
    assert reads["tiny"] <= reads["gpt2"]
