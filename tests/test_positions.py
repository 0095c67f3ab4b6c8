"""The position schemes: what each one computes, and that each one decodes and saves exactly."""

import json
import math

import pytest
import torch
from conftest import VOCAB, tiny_config, tiny_model
from transformers import DynamicCache, LlamaConfig, StaticCache
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from hf_tinygpt import POSITION_SCHEME_CLASSES, TinyGPTConfig, TinyGPTForCausalLM
from hf_tinygpt.model.gpt_neox_layout import gpt_neox_fields_of_tinygpt
from hf_tinygpt.model.positions import (
    AlibiPositions,
    ContextAwareBias,
    CopePositions,
    FireBias,
    ForgetGate,
    HouseholderPath,
    KerpleBias,
    LearnedPositions,
    NoPositions,
    PolarPositions,
    RotaryPositions,
    SinusoidalPositions,
    StickBreakingAttention,
    T5Bias,
    XposPositions,
    apply_rotary,
)

# ---- every scheme: cache, save/load, generate ---------------------------------------------------------------


def decode_step_by_step(model, ids, cache, prefix=5):
    """Prefill `prefix` tokens, then feed the rest one at a time through `cache`; return all logits."""
    with torch.no_grad():
        logits = [model(ids[:, :prefix], cache=cache, use_cache=True).logits]
        for t in range(prefix, ids.shape[1]):
            logits.append(model(ids[:, t : t + 1], cache=cache, use_cache=True).logits)
    return torch.cat(logits, dim=1)


@pytest.mark.parametrize("cache_kind", ["dynamic", "static"])
def test_cached_decoding_equals_full_forward(scheme, cache_kind):
    model = tiny_model(scheme)
    ids = torch.randint(0, VOCAB, (2, 20))
    with torch.no_grad():
        full = model(ids).logits
    if cache_kind == "dynamic":
        cache = DynamicCache(config=model.config)
    else:
        cache = StaticCache(config=model.config, max_cache_len=32)
    assert (decode_step_by_step(model, ids, cache) - full).abs().max() <= 1e-5


def test_generate_with_static_cache_equals_dynamic(scheme):
    model = tiny_model(scheme)
    prompt = torch.randint(1, VOCAB, (2, 6))
    kwargs = dict(max_new_tokens=10, do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(prompt))
    dynamic = model.generate(prompt, **kwargs)
    static = model.generate(prompt, cache_implementation="static", **kwargs)
    assert torch.equal(dynamic, static)
    assert dynamic.shape == (2, 16)


def test_left_padded_generate_equals_each_prompt_alone(scheme):
    model = tiny_model(scheme)
    prompts = [[5, 17, 33, 2, 9, 41, 8], [12, 7], [100, 3, 55, 6]]
    width = max(map(len, prompts))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :], mask[row, width - len(prompt) :] = torch.tensor(prompt), 1
    kwargs = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    batch = model.generate(ids, attention_mask=mask, **kwargs)
    for row, prompt in enumerate(prompts):
        alone = model.generate(torch.tensor([prompt]), **kwargs)
        assert batch[row, width:].tolist() == alone[0, len(prompt) :].tolist(), f"prompt {row}"


def moved_from_its_start(model, seed=0):
    """`model` with every parameter moved by noise: a gate or bias that starts neutral acts like a trained one."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    return model


def test_a_token_masked_inside_a_sequence_reaches_no_other_token(scheme):
    """(FoX's and CABLE's gates and PaTH's transforms of a masked token still acted on the tokens after it: their
    logits moved when only the masked token changed.) A token the attention mask hides inside a sequence (packed
    texts, a custom mask) changes nothing else, in every scheme."""
    model = moved_from_its_start(tiny_model(scheme))
    ids = torch.randint(1, VOCAB, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[:, 4] = 0
    changed = ids.clone()
    changed[:, 4] = (ids[:, 4] + 1) % VOCAB
    others = [0, 1, 2, 3, 5, 6, 7, 8]
    with torch.no_grad():
        logits, logits_changed = (model(i, attention_mask=mask).logits[:, others] for i in (ids, changed))
    torch.testing.assert_close(logits_changed, logits, atol=1e-6, rtol=0)


def test_a_scheme_module_put_in_its_place_is_the_one_that_acts(scheme):
    """(CoPE, PoPE, FoX, CABLE and PaTH kept calling the module they were built with: one put in its place, as
    peft's `modules_to_save` puts a trainable copy, saved its weights but moved no logit and took no gradient.)"""
    import copy

    model = tiny_model(scheme)
    name = POSITION_SCHEME_CLASSES[scheme].module_name
    replacement = moved_from_its_start(copy.deepcopy(getattr(model.transformer, name)))
    setattr(model.transformer, name, replacement)
    reloaded = tiny_model(scheme)
    reloaded.load_state_dict(model.state_dict())
    ids = torch.randint(1, VOCAB, (2, 9), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(model(ids).logits, reloaded(ids).logits, atol=1e-6, rtol=0)
    model(ids, labels=ids).loss.backward()
    assert all(parameter.grad is not None for parameter in replacement.parameters())


def test_packed_documents_are_apart_in_a_forward_without_a_cache(scheme):
    """transformers reads packed documents (position_ids restarting at 0, no attention_mask) as apart only when no
    cache is made (`find_packed_sequence_indices`): then each document is read as if alone, in every scheme. With a
    cache (the config's `use_cache=True`) they attend to each other, as Llama's do: README's Limits says so."""
    model = moved_from_its_start(tiny_model(scheme))
    first, second = torch.randint(1, VOCAB, (1, 5)), torch.randint(1, VOCAB, (1, 7))
    packed = torch.cat([first, second], dim=1)
    position_ids = torch.cat([torch.arange(5), torch.arange(7)])[None]
    with torch.no_grad():
        apart = model(packed, position_ids=position_ids, use_cache=False).logits
        together = model(packed, position_ids=position_ids).logits
        alone = [model(document, use_cache=False).logits for document in (first, second)]
    torch.testing.assert_close(apart, torch.cat(alone, dim=1), atol=1e-5, rtol=0)
    assert (together[:, 5:] - alone[1]).abs().max() > 1e-3  # the cache's absence is what keeps them apart


@pytest.mark.parametrize("scheme", ["fox", "cable", "path"])
@pytest.mark.parametrize("cache_kind", ["dynamic", "static"])
def test_a_masked_token_is_as_if_it_were_not_there_where_order_comes_from_the_tokens(scheme, cache_kind):
    """FoX, CABLE and PaTH have no positions besides their tokens' gates and transforms, and
    flash-linear-attention's ForgettingAttention and PaTHAttention drop every token the 2D mask hides before they
    are applied (`unpad_input`: fla/layers/forgetting_attn.py@20ceee52, fla/layers/path_attn.py@27289fcb,
    fla/layers/utils.py@00937f20): a prompt with a masked token decodes as the prompt without it."""
    model = moved_from_its_start(tiny_model(scheme))
    prompt = [5, 17, 33, 2, 9, 41, 8]
    holed = torch.tensor([prompt[:3] + [77] + prompt[3:]])
    mask = torch.ones_like(holed)
    mask[0, 3] = 0
    kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    if cache_kind == "static":
        kwargs["cache_implementation"] = "static"
    with_hole = model.generate(holed, attention_mask=mask, **kwargs)
    alone = model.generate(torch.tensor([prompt]), **kwargs)
    assert with_hole.sequences[0, holed.shape[1] :].tolist() == alone.sequences[0, len(prompt) :].tolist()
    torch.testing.assert_close(torch.stack(with_hole.scores), torch.stack(alone.scores), atol=1e-5, rtol=0)


@pytest.mark.parametrize("scheme", ["fox", "cable", "path"])
@pytest.mark.parametrize("cache_kind", ["dynamic", "static"])
def test_a_masked_token_prefilled_in_a_chunk_of_its_own_is_left_out_too(scheme, cache_kind):
    """(PaTH took a chunk whose every token was masked for one it shows: a prompt prefilled a chunk at a time, the
    masked token alone in one, moved the last logits by up to 1.8.)"""
    model = moved_from_its_start(tiny_model(scheme))
    prompt = [5, 17, 33, 2, 9, 41, 8]
    holed = torch.tensor([prompt[:3] + [77] + prompt[3:]])
    mask = torch.ones_like(holed)
    mask[0, 3] = 0
    cache = (
        DynamicCache(config=model.config) if cache_kind == "dynamic" else StaticCache(model.config, max_cache_len=16)
    )
    with torch.no_grad():
        alone = model(torch.tensor([prompt])).logits[0, -1]
        for begin, end in [(0, 3), (3, 4), (4, 8)]:
            chunk = model(holed[:, begin:end], attention_mask=mask[:, :end], cache=cache, use_cache=True)
    torch.testing.assert_close(chunk.logits[0, -1], alone, atol=1e-5, rtol=0)


def test_save_load_round_trip(scheme, tmp_path):
    model = tiny_model(scheme)
    model.save_pretrained(tmp_path)
    loaded = TinyGPTForCausalLM.from_pretrained(tmp_path).eval()
    assert loaded.config.position_embedding_type == scheme
    ids = torch.randint(0, VOCAB, (2, 16))
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)


def test_a_model_cast_to_bf16_keeps_its_computed_buffers_as_a_bf16_load_does(scheme, tmp_path):
    """(`model.to(torch.bfloat16)` rounded RoPE's and the sinusoidal rows' frequencies to bf16, where
    `from_pretrained(dtype=torch.bfloat16)` keeps them float32: logits 3× and 8× further from fp32's.) A scheme's
    computed buffers stay float32 whatever the weights are cast to, and move with the model."""
    model = tiny_model(scheme)
    model.save_pretrained(tmp_path)
    loaded = TinyGPTForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    cast = model.to(torch.bfloat16)
    positions = cast.transformer.positions
    for name, value in positions.fixed_buffers().items():
        assert getattr(positions, name).dtype == value.dtype and torch.equal(getattr(positions, name), value), name
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(cast(ids).logits, loaded(ids).logits)
    assert all(buffer.dtype == torch.float32 for buffer in cast.half().buffers() if buffer.is_floating_point())


def test_each_scheme_builds_its_own_module(scheme):
    """The config's name builds the class registered under it, as the module its class names; only learned positions
    are a table of rows (GPT-2's `wpe.weight`)."""
    model = tiny_model(scheme)
    positions = model.transformer.positions
    assert type(positions) is POSITION_SCHEME_CLASSES[scheme] and positions.name == scheme
    assert model.transformer.get_submodule(positions.module_name) is positions
    assert ("transformer.wpe.weight" in model.state_dict()) == (scheme == "learned")


def test_the_built_in_schemes_in_reading_order():
    """The names saved configs carry, each with its class, in the order the chapter reads."""
    classes = [LearnedPositions, SinusoidalPositions, RotaryPositions, XposPositions, PolarPositions, AlibiPositions]
    classes += [T5Bias, KerpleBias, FireBias, CopePositions, ForgetGate, ContextAwareBias, HouseholderPath]
    classes += [StickBreakingAttention, NoPositions]
    names = ["learned", "sinusoidal", "rope", "xpos", "pope", "alibi", "t5", "kerple", "fire", "cope", "fox", "cable"]
    names += ["path", "stick_breaking", "none"]
    assert [POSITION_SCHEME_CLASSES[name] for name in names] == classes
    assert list(POSITION_SCHEME_CLASSES)[: len(names)] == names


# ---- order: NoPE is blind to the order of earlier tokens; every other scheme is not ---------------------------


def last_logits_before_and_after_shuffling_the_prefix(model, length=12):
    ids = torch.randint(0, VOCAB, (1, length))
    shuffled = ids.clone()
    shuffled[0, :-1] = ids[0, :-1][torch.randperm(length - 1, generator=torch.Generator().manual_seed(3))]
    assert not torch.equal(shuffled, ids)
    with torch.no_grad():
        return model(ids).logits[0, -1], model(shuffled).logits[0, -1]


def test_nope_property(scheme):
    """One layer without positions sees a bag of earlier tokens: shuffling them leaves the last output unchanged.
    Every real scheme sees the order. (Weights at scale 0.5 so tokens and positions are of similar size.)"""
    model = tiny_model(scheme, n_layer=1, initializer_range=0.5)
    if scheme == "cope":  # its position vectors start at zero, as its authors' do: a trained model's are not
        torch.nn.init.normal_(model.transformer.positions.pos_emb, std=0.5)
    before, after = last_logits_before_and_after_shuffling_the_prefix(model)
    if scheme == "none":
        assert (before - after).abs().max() <= 1e-5
    else:
        assert (before - after).abs().max() > 1e-3  # 100× the float noise of the NoPE case


def test_causal_mask_alone_leaks_order_after_two_layers():
    """Why NoPE models can still learn order: from layer 2 on, position i's state summarises tokens 0..i, so the
    causal mask itself makes earlier states position-dependent."""
    model = tiny_model("none", n_layer=2, initializer_range=0.5)
    before, after = last_logits_before_and_after_shuffling_the_prefix(model)
    assert (before - after).abs().max() > 0.1


# ---- length: learned positions stop at n_positions, the others run past it ------------------------------------


def test_learned_positions_refuse_inputs_past_n_positions():
    model = tiny_model("learned", n_positions=16)
    with pytest.raises(ValueError, match="n_positions=16"):
        model(torch.randint(0, VOCAB, (1, 17)))
    with pytest.raises(ValueError, match="n_positions=16"):
        model.generate(torch.randint(1, VOCAB, (1, 10)), max_new_tokens=10, do_sample=False, pad_token_id=0)
    # A negative position (`mask.cumsum(-1) - 1` unclamped) was torch's bare "index out of range in self".
    with pytest.raises(ValueError, match=r"position_ids must be >= 0, and -1 was given .*clamp"):
        model(torch.randint(0, VOCAB, (1, 3)), position_ids=torch.tensor([[-1, 0, 1]]))


def test_how_far_a_model_reaches_is_its_schemes_to_say(monkeypatch):
    """`positions_reach` asks the scheme's class: learned rows end at n_positions, the rest do not end, a GPT-2
    config is learned rows. What asks it follows the class: given a reach, RoPE is refused past it too."""
    from transformers import GPT2Config

    from hf_tinygpt import gpt2_tokenizer
    from hf_tinygpt.generate.text import generate_text
    from hf_tinygpt.model.positions import positions_reach

    for scheme in POSITION_SCHEME_CLASSES:
        assert positions_reach(tiny_config(scheme, n_positions=40)) == (40 if scheme == "learned" else None)
    assert positions_reach(GPT2Config(n_positions=32)) == 32
    model = tiny_model("rope", vocab_size=50257, n_positions=40)
    monkeypatch.setattr(POSITION_SCHEME_CLASSES["rope"], "reach", classmethod(lambda cls, config: 12))
    with pytest.raises(ValueError, match="past this model's context of 12"):
        generate_text("The cat sat", model=model, tokenizer=gpt2_tokenizer(), max_new_tokens=10)


def test_sequence_past_n_positions_in_a_cache_is_refused():
    model = tiny_model("learned", n_positions=8)
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    model(torch.randint(0, VOCAB, (1, 8)), cache=cache, use_cache=True)
    with pytest.raises(ValueError, match="position 8 was requested"):
        model(torch.randint(0, VOCAB, (1, 1)), cache=cache, use_cache=True)


@pytest.mark.parametrize("scheme_name", ["sinusoidal", "rope", "alibi", "none"])
def test_other_schemes_run_past_n_positions(scheme_name):
    model = tiny_model(scheme_name, n_positions=16)
    ids = torch.randint(0, VOCAB, (1, 40))
    with torch.no_grad():
        full = model(ids).logits
    cache = DynamicCache(config=model.config)
    assert torch.isfinite(full).all()
    assert (decode_step_by_step(model, ids, cache, prefix=10) - full).abs().max() <= 1e-5


# ---- sinusoidal --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1.0, 0.25])
def test_sinusoidal_rows_equal_the_closed_formula(scale):
    d = 32
    positions = SinusoidalPositions(tiny_config("sinusoidal", n_embd=d, sinusoidal_scale=scale))
    p = torch.tensor([0, 1, 7, 63, 1000])
    rows = positions.rows(p)
    for row, pos in zip(rows, p.tolist(), strict=True):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert row[2 * i].item() == pytest.approx(scale * math.sin(angle), abs=1e-4)
            assert row[2 * i + 1].item() == pytest.approx(scale * math.cos(angle), abs=1e-4)


def test_sinusoidal_rows_start_at_the_size_of_the_token_embeddings():
    """Unit rows (Vaswani's) would dwarf GPT-2-initialised tokens (std 0.02) and train far slower: by default each
    dimension of a row has the rms of an initial token embedding, ×√d with scale_embeddings."""
    for scale_embeddings in (False, True):
        model = tiny_model("sinusoidal", n_embd=64, scale_embeddings=scale_embeddings)
        rows = model.transformer.positions.rows(torch.arange(4096))
        tokens = model.transformer.wte.weight * (8.0 if scale_embeddings else 1.0)
        assert rows.pow(2).mean().sqrt() == pytest.approx(tokens.std().item(), rel=0.05)


def test_sinusoidal_configs_saved_before_the_scale_option_keep_unit_rows(tmp_path):
    model = tiny_model("sinusoidal")
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["sinusoidal_scale"] == pytest.approx(0.02 * math.sqrt(2))  # saved explicitly from now on
    del config["sinusoidal_scale"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert TinyGPTForCausalLM.from_pretrained(tmp_path).config.sinusoidal_scale == 1.0
    handwritten = {"position_embedding_type": "sinusoidal", "n_embd": 32, "n_head": 4}  # not saved by transformers
    assert TinyGPTConfig.from_dict(handwritten).sinusoidal_scale == pytest.approx(0.02 * math.sqrt(2))


def test_sinusoidal_rows_are_added_to_token_embeddings():
    model = tiny_model("sinusoidal")
    ids = torch.randint(0, VOCAB, (1, 9))
    with torch.no_grad():
        first_hidden = model(ids, output_hidden_states=True).hidden_states[0]
    expected = model.transformer.wte(ids) + model.transformer.wpe.rows(torch.arange(9))
    assert (first_hidden - expected).abs().max() <= 1e-6


def test_scale_embeddings_multiplies_tokens_by_sqrt_d():
    model = tiny_model("sinusoidal", scale_embeddings=True)
    ids = torch.randint(0, VOCAB, (1, 9))
    with torch.no_grad():
        first_hidden = model(ids, output_hidden_states=True).hidden_states[0]
    expected = model.transformer.wte(ids) * math.sqrt(32) + model.transformer.wpe.rows(torch.arange(9))
    assert (first_hidden - expected).abs().max() <= 1e-5


# ---- rope --------------------------------------------------------------------------------------------------


def llama_rotary(config, rope_parameters):
    """transformers' LLaMA rotary embedding for the same head size, theta and scaling."""
    llama = LlamaConfig(
        hidden_size=config.n_embd,
        num_attention_heads=config.n_head,
        max_position_embeddings=config.n_positions,
        rope_parameters=dict(rope_parameters),
    )
    return LlamaRotaryEmbedding(llama)


ROPE_VARIANTS = [
    {"rope_type": "default", "rope_theta": 10000.0},
    {"rope_type": "default", "rope_theta": 500.0},
    {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
    {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0},
]


@pytest.mark.parametrize("rope_parameters", ROPE_VARIANTS, ids=lambda p: f"{p['rope_type']}-{p['rope_theta']:g}")
def test_rope_rotates_q_and_k_like_llama(rope_parameters):
    config = tiny_config("rope", n_embd=64, n_head=4, n_positions=32, rope_parameters=dict(rope_parameters))
    ours, llama = RotaryPositions(config), llama_rotary(config, rope_parameters)
    q, k = torch.randn(2, 4, 80, 16), torch.randn(2, 4, 80, 16)
    position_ids = torch.arange(80).expand(2, 80)  # 80 > n_positions: dynamic NTK rescales here
    expected_q, expected_k = apply_rotary_pos_emb(q, k, *llama(q, position_ids))
    got_q, got_k = apply_rotary(q, k, ours(q, position_ids))
    assert (got_q - expected_q).abs().max() <= 1e-5
    assert (got_k - expected_k).abs().max() <= 1e-5


def test_partial_rotary_leaves_the_tail_of_each_head_alone():
    config = tiny_config("rope", n_embd=64, n_head=4, partial_rotary_factor=0.5)
    rotary = RotaryPositions(config)
    assert rotary.rotary_dim == 8
    q, k = torch.randn(1, 4, 10, 16), torch.randn(1, 4, 10, 16)
    got_q, got_k = apply_rotary(q, k, rotary(q, torch.arange(10)[None]))
    assert torch.equal(got_q[..., 8:], q[..., 8:]) and torch.equal(got_k[..., 8:], k[..., 8:])
    # the rotated part is LLaMA's rotation of an 8-dim head
    full = tiny_config("rope", n_embd=32, n_head=4)  # head_dim 8, fully rotated
    expected_q, _ = apply_rotary_pos_emb(
        q[..., :8], k[..., :8], *llama_rotary(full, {"rope_type": "default"})(q, torch.arange(10)[None])
    )
    assert (got_q[..., :8] - expected_q).abs().max() <= 1e-5


def gemma4_rotary(config, rope_parameters):
    """transformers' Gemma 4 rotary embedding (its text model's, for full attention) for the same head size."""
    gemma4 = pytest.importorskip("transformers.models.gemma4.modeling_gemma4", reason="transformers without Gemma 4")
    gemma4_config = gemma4.Gemma4TextConfig(
        hidden_size=config.n_embd,
        num_attention_heads=config.n_head,
        num_key_value_heads=config.n_head,
        head_dim=config.head_size,
        global_head_dim=config.head_size,
        num_hidden_layers=1,
        layer_types=["full_attention"],
        vocab_size=config.vocab_size,
        rope_parameters={"full_attention": dict(rope_parameters)},
    )
    return gemma4.Gemma4TextRotaryEmbedding(gemma4_config), gemma4.apply_rotary_pos_emb


@pytest.mark.parametrize("kept", [0.25, 0.5, 1.0])
def test_p_rope_rotates_q_and_k_like_gemma_4(kept):
    """p-RoPE (rope_type "proportional"): q and k as transformers' Gemma 4 rotates them, and the pairs past the kept
    share of the highest frequencies do not turn at all: dims i and i + 8 of a 16-dim head, for i ≥ 8·kept."""
    rope_parameters = {"rope_type": "proportional", "rope_theta": 10000.0, "partial_rotary_factor": kept}
    if "proportional" not in RotaryPositions.ROPE_TYPES:
        pytest.skip("this transformers has no proportional RoPE (Gemma 4's)")
    config = tiny_config("rope", n_embd=64, n_head=4, rope_parameters=dict(rope_parameters))
    ours = RotaryPositions(config)
    gemma4, rotate = gemma4_rotary(config, rope_parameters)
    q, k = torch.randn(2, 4, 80, 16), torch.randn(2, 4, 80, 16)
    position_ids = torch.arange(80).expand(2, 80)
    cos, sin = gemma4(q, position_ids, "full_attention")
    got_q, got_k = apply_rotary(q, k, ours(q, position_ids))
    assert (got_q - rotate(q, cos, sin)).abs().max() <= 1e-5 and (got_k - rotate(k, cos, sin)).abs().max() <= 1e-5
    turning = int(8 * kept)
    for x, got in ((q, got_q), (k, got_k)):
        assert torch.equal(got[..., turning:8], x[..., turning:8]) and torch.equal(
            got[..., 8 + turning :], x[..., 8 + turning :]
        )
    assert ours.rotary_dim == 16 and torch.count_nonzero(ours.inv_freq) == turning
    with pytest.raises(ValueError, match="p-RoPE .* which it does not express"):
        gpt_neox_fields_of_tinygpt(config)


def modded_nanogpt_rotary(x: torch.Tensor) -> torch.Tensor:
    """modded-nanogpt's half-truncated RoPE, re-derived from `Rotary` in KellerJordan/modded-nanogpt's
    records/123124_Target350M/train_gpt.py at 55393e85: head_dim/4 frequencies (1/1024)^linspace(0, 1), then as many
    zeros; dims i and i + head_dim/2 turn by −p·θ_i. x is (B, T, H, D), as theirs."""
    dim, length = x.shape[-1], x.shape[1]
    inv_freq = (1 / 1024) ** torch.linspace(0, 1, steps=dim // 4, dtype=torch.float32)
    inv_freq = torch.cat([inv_freq, inv_freq.new_zeros(dim // 4)])
    theta = torch.einsum("i,j -> ij", torch.arange(length, dtype=torch.float32), inv_freq)
    cos, sin = theta.cos()[None, :, None, :], theta.sin()[None, :, None, :]
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos + x2 * sin, x1 * (-sin) + x2 * cos), 3)


def test_modded_nanogpts_half_truncated_rope_is_p_rope_with_half_kept():
    """The speedrun's RoPE is the p-RoPE option with half the pairs kept and rope_theta = 1024^(D / (2(D/4 − 1)))
    (so that the kept frequencies are theirs), turning the other way: theirs(x) = S·ours(S·x), S negating each
    head's second half. S is a fixed sign on q's and k's rows, so the two models are the same family."""
    if "proportional" not in RotaryPositions.ROPE_TYPES:
        pytest.skip("this transformers has no proportional RoPE (Gemma 4's)")
    head_dim = 16
    theta = 1024.0 ** (head_dim / (2 * (head_dim / 4 - 1)))
    rope_parameters = {"rope_type": "proportional", "rope_theta": theta, "partial_rotary_factor": 0.5}
    ours = RotaryPositions(tiny_config("rope", n_embd=64, n_head=4, rope_parameters=rope_parameters))
    q, k = torch.randn(2, 4, 96, head_dim), torch.randn(2, 4, 96, head_dim)
    flip = torch.cat([torch.ones(head_dim // 2), -torch.ones(head_dim // 2)])  # S
    got_q, got_k = apply_rotary(q * flip, k * flip, ours(q, torch.arange(96).expand(2, 96)))
    for x, got in ((q, got_q), (k, got_k)):
        theirs = modded_nanogpt_rotary(x.transpose(1, 2)).transpose(1, 2)
        assert (got * flip - theirs).abs().max() <= 1e-5


def test_rope_dot_product_depends_only_on_the_offset():
    rotary = RotaryPositions(tiny_config("rope", n_embd=64, n_head=4))
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(query_position, key_position):
        cos, sin = rotary(q, torch.tensor([[query_position, key_position]]))
        rq, _ = apply_rotary(q, q, (cos[:, :1], sin[:, :1]))
        rk, _ = apply_rotary(k, k, (cos[:, 1:], sin[:, 1:]))
        return (rq * rk).sum().item()

    for offset in (0, 3, 17):
        scores = [score(start + offset, start) for start in (0, 5, 40, 300)]
        assert max(scores) - min(scores) <= 1e-4, scores
    assert abs(score(3, 0) - score(17, 0)) > 1e-3  # ... and it does depend on the offset


# ---- alibi -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_head", [1, 4, 6, 8, 12])
def test_alibi_slopes_equal_bloom(n_head):
    """BLOOM's ALiBi (transformers) puts slope·key_position on the scores; ours puts -slope·distance. Per query
    row they differ by a constant, which softmax ignores, so the slopes must be identical."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    positions = AlibiPositions(tiny_config("alibi", n_embd=8 * n_head, n_head=n_head))
    bloom = build_alibi_tensor(torch.ones(1, 2), n_head, torch.float32)  # (heads, 1, 2): slope · [0, 1]
    assert torch.allclose(positions.slopes, bloom[:, 0, 1], atol=1e-7)


def test_alibi_bias_is_minus_slope_times_distance():
    positions = AlibiPositions(tiny_config("alibi"))
    bias = positions.bias(query_length=3, key_length=8, past_length=5)
    assert bias.shape == (1, 4, 3, 8)
    for h, slope in enumerate(positions.slopes.tolist()):
        for i in range(3):
            for j in range(8):  # keys after the query, which the causal mask hides, are at distance 0
                assert bias[0, h, i, j].item() == pytest.approx(-slope * max(5 + i - j, 0))


# ---- t5, kerple, fire: each bias equals someone else's, and so does a whole attention layer --------------------


def t5_attention(config):
    """transformers' own T5 self-attention of a T5 decoder (causal buckets) for the same heads and buckets."""
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    t5 = T5Config(
        d_model=config.n_embd,
        d_kv=config.head_size,
        num_heads=config.n_head,
        relative_attention_num_buckets=config.relative_attention_num_buckets,
        relative_attention_max_distance=config.relative_attention_max_distance,
        is_decoder=True,
        dropout_rate=0.0,
    )
    t5._attn_implementation = "eager"
    return T5Attention(t5, has_relative_attention_bias=True, layer_idx=0).eval()


@pytest.mark.parametrize(("buckets", "max_distance"), [(32, 128), (8, 20), (2, 5)])
def test_t5_bias_equals_t5_attentions_compute_bias(buckets, max_distance):
    config = tiny_config("t5", relative_attention_num_buckets=buckets, relative_attention_max_distance=max_distance)
    ours, t5 = T5Bias(config), t5_attention(config)
    torch.nn.init.normal_(ours.relative_attention_bias.weight)
    t5.relative_attention_bias.load_state_dict(ours.relative_attention_bias.state_dict())
    for query_length, key_length, past in [(300, 300, 0), (1, 301, 300), (7, 40, 33)]:
        with torch.no_grad():
            expected = t5.compute_bias(query_length, key_length, past_seen_tokens=past)
            bias = ours.bias(query_length, key_length, past)
        causal = torch.arange(key_length)[None, :] <= (torch.arange(query_length) + past)[:, None]
        assert torch.equal(bias[..., causal], expected[..., causal])  # the same bucket, so the same table entry


def test_t5_attention_layer_equals_t5s_own():
    """A whole attention layer: T5's (no 1/√d scaling, no biases) given our q weights / √d, our k, v and output
    weights, and its own relative bias with our table, equals ours on a causal input."""
    model = tiny_model("t5", n_layer=1, initializer_range=0.3)
    model.set_attn_implementation("eager")
    attention, positions = model.transformer.h[0].attn, model.transformer.wpe
    t5 = t5_attention(model.config)
    with torch.no_grad():
        attention.c_attn.bias.zero_()
        attention.c_proj.bias.zero_()
        q, k, v = attention.c_attn.weight.chunk(3)
        t5.q.weight.copy_(q / math.sqrt(model.config.head_size))
        t5.k.weight.copy_(k)
        t5.v.weight.copy_(v)
        t5.o.weight.copy_(attention.c_proj.weight)
        t5.relative_attention_bias.load_state_dict(positions.relative_attention_bias.state_dict())
        x = torch.randn(2, 13, model.config.n_embd)
        causal = torch.ones(13, 13, dtype=torch.bool).tril()[None, None]
        ours, _ = attention(x, positions.bias_attention(causal.expand(2, 1, 13, 13), torch.arange(13)[None], x.dtype))
        additive = torch.zeros(1, 1, 13, 13).masked_fill(~causal, torch.finfo(torch.float32).min)
        expected, _, _ = t5(x, mask=additive)
    assert (ours - expected).abs().max() <= 1e-5


def kerple_as_its_authors_compute_it(kernel: str, r1: torch.Tensor, r2: torch.Tensor, length: int) -> torch.Tensor:
    """KERPLE's bias as ParallelKerpleLog / ParallelKerplePower compute it in the authors' code
    (chijames/KERPLE, megatron/mpu/layers.py @ 73f1ee2d24722cdbe277d473899321218f5cbd00), re-derived here: the
    distance matrix is tril(i − j); the log kernel is −bias_p · log(1 + bias_a · diff) and the power kernel
    −bias_a · diff^bias_p, each parameter clamped to ≥ 0.01 (the power's exponent also ≤ 2) before it is used.
    In the paper's names (and ours) r1 is the factor in front and r2 the one inside."""
    diff = torch.tril(torch.arange(length)[:, None] - torch.arange(length)[None, :]).float()
    factor = r1.clamp(min=0.01)[:, None, None]
    if kernel == "log":
        return (-factor * torch.log(1 + r2.clamp(min=0.01)[:, None, None] * diff))[None]
    return (-diff.pow(r2.clamp(min=0.01, max=2)[:, None, None]) * factor)[None]


def causal_part(length: int) -> torch.Tensor:
    return torch.ones(length, length, dtype=torch.bool).tril()


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_kerple_bias_equals_the_authors_code_and_the_papers_formula(kernel):
    positions = KerpleBias(tiny_config("kerple", kerple_kernel=kernel))
    with torch.no_grad():  # one head below each bound, one above the power kernel's, the rest drawn as they draw them
        positions.r1.copy_(torch.tensor([-0.5, 1.5, 0.7, 0.3]))
        positions.r2.copy_(torch.tensor([0.5, 0.003, 2.5, 1.2]))
        bias = positions.bias(50, 50, 0)
    expected = kerple_as_its_authors_compute_it(kernel, positions.r1.detach(), positions.r2.detach(), 50)
    assert (bias - expected)[..., causal_part(50)].abs().max() <= 1e-6
    # The paper's formula on a worked example: head 1 (r1 = 1.5, r2 = 0.01 after the clamp), distance 4.
    paper = -1.5 * math.log(1 + 0.01 * 4) if kernel == "log" else -1.5 * 4**0.01
    assert bias[0, 1, 10, 6].item() == pytest.approx(paper, rel=1e-6)


def test_kerple_keeps_its_parameters_in_bounds_with_their_gradient_passed_through():
    """The authors clamp the stored parameters in place at each forward; ours clamps the value used and lets the
    gradient through, so a parameter below its bound still learns (and the forward writes to no parameter)."""
    positions = KerpleBias(tiny_config("kerple", kerple_kernel="power"))
    with torch.no_grad():
        positions.r1.copy_(torch.tensor([-1.0, 0.5, 0.5, 0.5]))
        positions.r2.copy_(torch.tensor([1.0, 3.0, 1.0, 1.0]))
    bias = positions.bias(9, 9, 0)
    assert bias[0, 0, 8, 0].item() == pytest.approx(-0.01 * 8)  # r1 used as 0.01
    assert bias[0, 1, 8, 0].item() == pytest.approx(-0.5 * 8**2)  # r2 used as 2
    bias[..., causal_part(9)].sum().backward()
    assert positions.r1.grad[0] != 0 and positions.r2.grad[1] != 0 and torch.isfinite(positions.r2.grad).all()
    assert positions.r1[0].item() == -1.0  # not written to


def fire_as_its_authors_compute_it(fire: FireBias, length: int) -> torch.Tensor:
    """FIRE's bias as the listing in the paper's appendix computes it, in the version
    mcleish7/arithmetic, cramming/architectures/embeddings.py @ 86022a57d38c0fde46444d62e8dcbebcc0af614c (class FIRE,
    line 419) runs, re-derived here for evaluation (positions 0..length-1): distances log(|c·(i − j)| + 1) divided by
    log(|c·max(i, |L_multiplier · init_L|)| + 1) + eps, through the MLP, heads first."""
    positions = torch.arange(length, dtype=torch.float)
    distances = positions[:, None] - positions[None, :]
    normalizer = torch.max(positions, torch.abs(fire.L_multiplier * fire.init_L))[:, None]
    distances = torch.log(torch.abs(fire.c * distances) + 1)
    normalizer = torch.log(torch.abs(fire.c * normalizer) + 1)
    return fire.mlp((distances / (normalizer + 1e-6)).unsqueeze(-1)).unsqueeze(0).permute(0, 3, 1, 2)


def test_fire_bias_equals_the_authors_code_and_the_papers_formula():
    model = tiny_model("fire", fire_init_L=16.0, initializer_range=0.5)
    fire = model.transformer.wpe
    with torch.no_grad():
        fire.c.fill_(0.3)
        fire.L_multiplier.fill_(1.25)  # L = 20: queries before position 20 share one normaliser, later ones their own
        bias = fire.bias(60, 60, 0)
        expected = fire_as_its_authors_compute_it(fire, 60)
    assert (bias - expected)[..., causal_part(60)].abs().max() <= 1e-6
    # The paper's formula on a worked example, with f_θ the identity (one unit, weights 1): ψ(d) / ψ(max(L, i)).
    worked = tiny_model("fire", fire_mlp_width=1, fire_init_c=1.0, fire_init_L=4.0).transformer.wpe
    with torch.no_grad():
        for layer in (worked.mlp[0], worked.mlp[2]):
            layer.weight.fill_(1.0)
            layer.bias.zero_()
        bias = worked.bias(10, 10, 0)[0, 0]
    assert bias[9, 6].item() == pytest.approx(math.log(1 + 3) / math.log(1 + 9), rel=1e-5)  # i = 9 past L
    assert bias[2, 0].item() == pytest.approx(math.log(1 + 2) / math.log(1 + 4), rel=1e-5)  # i = 2 below L = 4


def test_fire_counts_a_querys_position_from_its_rows_first_real_token():
    """FIRE's bias depends on where the query is, not only on the distance: a left-padded row's positions start at
    its first real token (transformers' generate passes them), so its bias is that of the row alone."""
    fire = tiny_model("fire", fire_init_L=2.0, initializer_range=0.5).transformer.wpe
    with torch.no_grad():
        alone = fire.bias(6, 6, 0)
        padded = fire.bias(10, 10, 0, position_ids=torch.arange(-4, 6).clamp(min=0)[None])
    assert torch.allclose(padded[..., 4:, 4:], alone, atol=1e-6)
    assert not torch.allclose(fire.bias(10, 10, 0)[..., 4:, 4:], alone, atol=1e-3)


# ---- xPos, CoPE and RoPE in some layers: against x-transformers and Llama 4 ------------------------------------


def interleaved(head_dim: int, n_head: int = 1) -> torch.Tensor:
    """The rows that put our rotate-half pairs (i, i + head_dim/2) where x-transformers' interleaved pairs
    (2i, 2i + 1) are, in every head: dot products over a head are unchanged by it."""
    pairs = torch.stack((torch.arange(head_dim // 2), torch.arange(head_dim // 2) + head_dim // 2), -1).flatten()
    return (torch.arange(n_head)[:, None] * head_dim + pairs[None]).flatten()


def x_transformers_attention(model, pairs=True, **options):
    """x-transformers' own Attention (causal, eager) holding layer 0's weights of `model`, whose projections have
    no biases (theirs have none), q and k rows reordered into x-transformers' interleaved pairs (unless `pairs` is
    false: PoPE turns each feature alone)."""
    from x_transformers.x_transformers import Attention

    attn, config = model.transformer.h[0].attn, model.config
    rows = interleaved(config.head_size, config.n_head) if pairs else torch.arange(config.n_embd)
    reference = Attention(dim=config.n_embd, dim_head=config.head_size, heads=config.n_head, causal=True, **options)
    q, k, v = attn.c_attn.weight.split(config.n_embd)
    with torch.no_grad():
        attn.c_attn.bias.zero_()
        attn.c_proj.bias.zero_()
        for layer, weight in zip((reference.to_q, reference.to_k, reference.to_v), (q[rows], k[rows], v), strict=True):
            layer.weight.copy_(weight)
        reference.to_out.weight.copy_(attn.c_proj.weight)
    return reference.eval()


def layer_zero(model, x: torch.Tensor, attention_mask=None) -> torch.Tensor:
    """Layer 0's attention of `model` on hidden states `x` (1, T, C), its rotation, mask and the scheme's own
    attention as the model gives them."""
    from transformers.masking_utils import create_causal_mask

    positions, position_ids = model.transformer.positions, torch.arange(x.shape[1])[None]
    mask = create_causal_mask(model.config, x, attention_mask, None, position_ids, allow_is_causal_skip=False)
    rotary = positions.rotary_cos_sin(x, position_ids)
    with torch.no_grad():
        out, _ = model.transformer.h[0].attn(
            x,
            mask,
            rotary=rotary,
            attend=positions.attention(0),
            keys_carry=positions.keys_carry(0),
            position_ids=position_ids,
        )
    return out


def test_xpos_scores_equal_x_transformers_rotary_embedding_with_xpos():
    """q·kᵀ after xPos equals x-transformers' `RotaryEmbedding(use_xpos=True)` applied as its attention applies it
    (scale to q, 1/scale to k). Its exponent is centred in the sequence, ours counted from 0: a factor that cancels
    in q·k, so the scores are compared (the rotated vectors differ by it)."""
    from x_transformers.x_transformers import RotaryEmbedding, apply_rotary_pos_emb

    xpos = tiny_model("xpos", xpos_scale_base=32.0).transformer.positions
    q, k = torch.randn(2, 1, 4, 90, 8, generator=torch.Generator().manual_seed(0)).unbind(0)
    cos, sin, key_cos, key_sin = xpos.rotary_cos_sin(q[:, 0], torch.arange(90)[None])
    ours_q, ours_k = apply_rotary(q, k, (cos, sin, key_cos, key_sin))
    freqs, scale = RotaryEmbedding(8, use_xpos=True, scale_base=32.0)(torch.arange(90))
    rows = interleaved(8)
    their_q, their_k = (
        apply_rotary_pos_emb(q[..., rows], freqs, scale),
        apply_rotary_pos_emb(k[..., rows], freqs, scale**-1),
    )
    ours, theirs = ours_q @ ours_k.transpose(-1, -2), their_q @ their_k.transpose(-1, -2)
    # Per unit of |q_i|·|k_j|: the two sides reach one product through scales up to ζ_0^(∓90/32) ≈ 34 apart (5e-6
    # at most over 30 seeds)
    size = q.norm(dim=-1)[..., :, None] * k.norm(dim=-1)[..., None, :]
    assert ((ours - theirs).abs() / size).max() <= 1e-5


def test_xpos_attention_layer_equals_x_transformers_attention():
    model = tiny_model("xpos", n_layer=1, initializer_range=0.3, xpos_scale_base=16.0)
    reference = x_transformers_attention(model, flash=False)
    from x_transformers.x_transformers import RotaryEmbedding

    x = torch.randn(1, 40, 32)
    with torch.no_grad():
        theirs = reference(x, rotary_pos_emb=RotaryEmbedding(8, use_xpos=True, scale_base=16.0)(torch.arange(40)))
    assert (layer_zero(model, x) - theirs).abs().max() <= 1e-5


def test_xpos_shrinks_each_pairs_product_by_zeta_to_the_distance_over_gamma():
    """The paper's formula on a worked example: a query and a key that are the same unit vector in pair k's first
    dimension give q_i·k_j = ζ_k^((i−j)/γ) · cos((i−j)·θ_k), ζ_k = (2k/d + 0.4)/1.4, θ_k = 10000^(-2k/d)."""
    xpos = tiny_model("xpos", xpos_scale_base=20.0).transformer.positions
    d, k = 8, 1
    unit = torch.zeros(1, 1, 50, d)
    unit[..., k] = 1.0
    q, key = apply_rotary(unit, unit, xpos.rotary_cos_sin(unit[:, 0], torch.arange(50)[None]))
    products = (q @ key.transpose(-1, -2))[0, 0]
    zeta, theta = (2 * k / d + 0.4) / 1.4, 10000 ** (-2 * k / d)
    for i, j in ((49, 0), (30, 29), (12, 5)):
        assert products[i, j].item() == pytest.approx(zeta ** ((i - j) / 20) * math.cos((i - j) * theta), rel=1e-4)


def test_xpos_refuses_a_position_whose_key_scale_would_overflow():
    model = tiny_model("xpos", xpos_scale_base=4.0)
    last = model.transformer.positions.last_position(torch.float32)
    assert last == int(4.0 * (math.log(torch.finfo(torch.float32).max) - 8 * math.log(2)) / -math.log(0.4 / 1.4))
    ids = torch.randint(0, VOCAB, (1, 1))
    with torch.no_grad():
        assert torch.isfinite(model(ids, position_ids=torch.tensor([[last]])).logits).all()
        with pytest.raises(ValueError, match=f"past position {last} overflows torch.float32; position {last + 1}"):
            model(ids, position_ids=torch.tensor([[last + 1]]))


def test_pope_attention_layer_equals_x_transformers_polar_embedding():
    """A whole attention layer against x-transformers' Attention given `polar_pos_emb` from its `PolarEmbedding`,
    with the learned phases δ set to ours, some of them past [−2π, 0], where both sides clamp them."""
    from x_transformers.x_transformers import PolarEmbedding

    model = tiny_model("pope", n_layer=1, initializer_range=0.3)
    pope = model.transformer.positions
    polar = PolarEmbedding(8, 4)
    with torch.no_grad():
        pope.phase_bias.uniform_(-8.0, 1.0)
        polar.learned_bias.copy_(pope.phase_bias)
    reference = x_transformers_attention(model, pairs=False, flash=False)
    x = torch.randn(1, 40, 32)
    with torch.no_grad():
        theirs = reference(x, polar_pos_emb=polar(torch.arange(40)))
    assert (layer_zero(model, x) - theirs).abs().max() <= 1e-5


def test_pope_scores_are_its_formula_on_a_worked_example():
    """q = k = 0 in every feature, δ = 0: magnitudes softplus(0) = ln 2, so the score of a key m positions back is
    (ln 2)² · Σ_d cos(m·θ_d), θ_d = 10000^(−d/head_dim), over √head_dim."""
    pope = tiny_model("pope").transformer.positions
    zeros = torch.zeros(1, 1, 30, 8)
    phases = torch.arange(30.0)[:, None] * pope.inv_freq
    scores = (pope.polar(zeros, phases) @ pope.polar(zeros, phases).transpose(-1, -2))[0, 0] / math.sqrt(8)
    theta = 10000 ** (-torch.arange(8.0) / 8)
    for i, j in ((29, 0), (10, 7), (5, 5)):
        expected = math.log(2) ** 2 * torch.cos((i - j) * theta).sum() / math.sqrt(8)
        assert scores[i, j].item() == pytest.approx(expected.item(), rel=1e-5)


def test_cope_position_logits_equal_x_transformers_cope():
    from x_transformers.x_transformers import CoPE

    cope = tiny_model("cope", cope_max_positions=7).transformer.positions
    reference = CoPE(dim=8, heads=4, max_pos=7)
    with torch.no_grad():
        cope.pos_emb.normal_()
        reference.pos_emb.copy_(cope.pos_emb[1])
    query = torch.randn(2, 4, 12, 8)
    scores = torch.randn(2, 4, 12, 12).masked_fill(~causal_part(12), torch.finfo(torch.float32).min)
    with torch.no_grad():
        assert (cope.position_logits(query, scores, layer_idx=1) - reference(query, scores)).abs().max() <= 1e-6


def test_cope_counts_the_gates_from_each_key_up_to_the_query():
    """The paper's formula on a worked example: with e[p]·q = p (so the interpolated logit is the position itself),
    key j of query i sits at p_ij = Σ_{j ≤ k ≤ i} σ(s_ik), clamped at cope_max_positions − 1."""
    cope = tiny_model("cope", cope_max_positions=5).transformer.positions
    with torch.no_grad():
        cope.pos_emb[0, :, 0] = torch.arange(5.0)
    query = torch.zeros(1, 1, 6, 8)
    query[..., 0] = 1.0
    scores = torch.randn(1, 1, 6, 6).masked_fill(~causal_part(6), torch.finfo(torch.float32).min)
    positions = cope.position_logits(query, scores, layer_idx=0)[0, 0]
    gates = scores[0, 0].sigmoid()
    for i, j in ((5, 0), (5, 5), (3, 1), (2, 0)):
        assert positions[i, j].item() == pytest.approx(min(gates[i, j : i + 1].sum().item(), 4.0), rel=1e-5)
    assert positions[5, 0].item() > positions[5, 4].item()  # farther keys sit at larger positions


def test_cope_attention_layer_equals_x_transformers_attention():
    model = tiny_model("cope", n_layer=1, initializer_range=0.3, cope_max_positions=6)
    model.set_attn_implementation("eager")
    with torch.no_grad():
        model.transformer.positions.pos_emb.normal_(0, 0.5)
    reference = x_transformers_attention(model, flash=False, use_cope=True, cope_max_pos=6)
    with torch.no_grad():
        # its q has our dims reordered (`interleaved`), so the position vectors e[p] that q meets are reordered too
        reference.attend.cope.pos_emb.copy_(model.transformer.positions.pos_emb[0][:, interleaved(8)])
        x = torch.randn(1, 11, 32)
        theirs = reference(x)
        without_positions = x_transformers_attention(model, flash=False)(x)
    assert (layer_zero(model, x) - theirs).abs().max() <= 1e-5
    assert (theirs - without_positions).abs().max() > 1e-2  # CoPE's logits did change the layer


def test_rope_skips_the_layers_llama_4_configures_without_it():
    """`no_rope_layer_interval` leaves the layers Llama 4's config marks (`no_rope_layers[i] == 0`) unrotated; with
    interval 1 no layer rotates and the model is the NoPE model with the same weights."""
    from transformers import Llama4TextConfig

    for layers, interval in ((8, 4), (5, 2), (3, 1), (6, 7)):
        rope = tiny_model("rope", n_layer=layers, no_rope_layer_interval=interval).transformer.positions
        llama4 = Llama4TextConfig(num_hidden_layers=layers, no_rope_layer_interval=interval).no_rope_layers
        assert [rope.rotary_in_layer("cos, sin", i) is not None for i in range(layers)] == [bool(x) for x in llama4]
    unrotated, nope = tiny_model("rope", no_rope_layer_interval=1), tiny_model("none")
    nope.load_state_dict(unrotated.state_dict())
    ids = torch.randint(0, VOCAB, (2, 12))
    with torch.no_grad():
        assert torch.equal(unrotated(ids).logits, nope(ids).logits)
        assert not torch.allclose(tiny_model("rope", no_rope_layer_interval=2)(ids).logits, nope(ids).logits)
    with pytest.raises(ValueError, match="GPT-NeoX rotates q and k in every layer; no_rope_layer_interval=2"):
        gpt_neox_fields_of_tinygpt(tiny_config("rope", no_rope_layer_interval=2))


def test_the_learned_biases_start_where_their_docstrings_say():
    """Where a start differs from the reference's, it is pinned here: T5's table and FIRE's MLP start as GPT-2's
    layers do (T5 draws with std d_model^-0.5, the FIRE listing with PyTorch's defaults); KERPLE's and FIRE's
    scalars start as their authors' do."""
    t5 = tiny_model("t5", n_embd=64, n_head=8, relative_attention_num_buckets=512, relative_attention_max_distance=1024)
    t5 = t5.transformer.wpe
    assert t5.relative_attention_bias.weight.std().item() == pytest.approx(0.02, rel=0.1)
    fire = tiny_model("fire", fire_init_c=0.3, fire_init_L=100.0).transformer.wpe
    assert fire.c.item() == pytest.approx(0.3) and fire.L_multiplier.item() == 1.0 and fire.init_L == 100.0
    assert not fire.mlp[0].bias.any() and not fire.mlp[2].bias.any()
    for kernel, (r1_max, r2_max) in {"log": (2.0, 1.0), "power": (1.0, 2.0)}.items():
        kerple = tiny_model("kerple", n_embd=512, n_head=128, kerple_kernel=kernel).transformer.wpe
        for value, top in ((kerple.r1, r1_max), (kerple.r2, r2_max)):
            assert 0 <= value.min() and value.max() <= top and value.max() > 0.8 * top  # U(0, top)


def bias_by_its_reference(model, length: int) -> torch.Tensor:
    scheme, positions = model.config.position_embedding_type, model.transformer.wpe
    if scheme == "alibi":
        from transformers.models.bloom.modeling_bloom import build_alibi_tensor

        slopes = build_alibi_tensor(torch.ones(1, 2), model.config.n_head, torch.float32)[:, 0, 1]
        distance = torch.arange(length)[:, None] - torch.arange(length)[None, :]
        return (-slopes[:, None, None] * distance)[None]
    if scheme == "t5":
        t5 = t5_attention(model.config)
        t5.relative_attention_bias.load_state_dict(positions.relative_attention_bias.state_dict())
        return t5.compute_bias(length, length)
    if scheme == "kerple":
        return kerple_as_its_authors_compute_it(model.config.kerple_kernel, positions.r1, positions.r2, length)
    return fire_as_its_authors_compute_it(positions, length)


@pytest.mark.parametrize("scheme_name", ["alibi", "t5", "kerple", "fire"])
def test_a_bias_schemes_attention_equals_softmax_of_scores_plus_its_reference_bias(scheme_name):
    """One eager layer by hand: softmax(q·kᵀ/√d + the reference's bias, causal) · v, for every bias scheme."""
    model = tiny_model(scheme_name, n_layer=1, initializer_range=0.3)
    model.set_attn_implementation("eager")
    ids = torch.randint(0, VOCAB, (1, 11))
    with torch.no_grad():
        attentions = model(ids, output_attentions=True).attentions[0]
        x = model.transformer.h[0].ln_1(model.transformer.wte(ids))
        q, k, _ = model.transformer.h[0].attn.c_attn(x).split(32, dim=-1)
        q, k = (t.view(1, 11, 4, 8).transpose(1, 2) for t in (q, k))
        scores = q @ k.transpose(-1, -2) / math.sqrt(8) + bias_by_its_reference(model, 11)
        scores = scores.masked_fill(~causal_part(11), float("-inf"))
    assert (attentions - scores.softmax(-1)).abs().max() <= 1e-5


def test_sdpa_and_eager_agree(scheme):
    eager, sdpa = tiny_model(scheme), tiny_model(scheme)
    eager.set_attn_implementation("eager")
    sdpa.set_attn_implementation("sdpa")
    ids = torch.randint(0, VOCAB, (2, 19))
    mask = torch.ones_like(ids)
    mask[1, :6] = 0
    with torch.no_grad():
        a = eager(ids, attention_mask=mask).logits
        b = sdpa(ids, attention_mask=mask).logits
    assert (a[mask.bool()] - b[mask.bool()]).abs().max() <= 1e-5


@pytest.fixture
def kernel_without_bias():
    """An attention kernel registered under its own name, as engines register theirs (vLLM's "vllm"): transformers
    then builds no 4D float mask for it, so it cannot take ALiBi's bias."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    AttentionInterface.register("engine_kernel", sdpa_attention_forward)
    yield "engine_kernel"
    AttentionInterface._global_mapping.pop("engine_kernel")


@pytest.mark.parametrize("scheme_name", ["alibi", "t5", "kerple", "fire", "cope"])
def test_a_scheme_acting_on_the_scores_is_refused_at_load_under_a_kernel_that_cannot_take_it(
    tmp_path, kernel_without_bias, scheme_name
):
    tiny_model(scheme_name).save_pretrained(tmp_path / scheme_name)
    acts = (
        "adds position logits computed from the attention scores" if scheme_name == "cope" else "adds a per-head bias"
    )
    refusal = f"position_embedding_type={scheme_name!r} {acts}.* attn_implementation='engine_kernel'"
    with pytest.raises(ValueError, match=refusal + " cannot take"):
        TinyGPTForCausalLM.from_pretrained(tmp_path / scheme_name, attn_implementation=kernel_without_bias)
    tiny_model("rope").save_pretrained(tmp_path / "rope")  # the other schemes run on any kernel
    model = TinyGPTForCausalLM.from_pretrained(tmp_path / "rope", attn_implementation=kernel_without_bias)
    assert torch.isfinite(model(torch.randint(0, VOCAB, (1, 5))).logits).all()


# FIRE reads a query's position only past its L (`fire_init_L`, 512 by default): these tests' 12 tokens pass L = 4.
PAST_FIRES_L = {"fire": {"fire_init_L": 4.0}}


def test_a_left_padded_forward_is_exact_with_position_ids_from_the_mask():
    """The README's Limits: `generate` counts each row's positions from its first real token; a forward of one's own
    does so with `position_ids` from the mask. Without them the absolute rows (learned, sinusoidal) move, as GPT-2's
    do, and FIRE's query positions past its L: every other scheme sees distances, which left padding leaves as they
    were."""
    ids = torch.randint(1, 50, (1, 12), generator=torch.Generator().manual_seed(0))
    padded, mask = torch.cat([torch.zeros(1, 5, dtype=torch.long), ids], 1), torch.tensor([[0] * 5 + [1] * 12])
    moved = set()
    for name in POSITION_SCHEME_CLASSES:
        model = tiny_model(name, vocab_size=50, **PAST_FIRES_L.get(name, {})).eval()
        with torch.no_grad():
            alone = model(ids).logits
            counted = model(padded, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
            assert (counted[:, 5:] - alone).abs().max() <= 1e-5, name
            if (model(padded, attention_mask=mask).logits[:, 5:] - alone).abs().max() > 1e-5:
                moved.add(name)
    assert moved == {"learned", "sinusoidal", "fire"}


def test_only_the_schemes_that_read_positions_take_position_ids():
    """`reads_position_ids` on a scheme's class says whether positions with gaps move it (the README's Limits name
    them: learned, sinusoidal, RoPE, xPos and FIRE); every other scheme counts a key's distance in tokens of the
    sequence."""
    ids = torch.randint(0, 50, (1, 12), generator=torch.Generator().manual_seed(0))
    moved = set()
    for name in POSITION_SCHEME_CLASSES:
        model = tiny_model(name, vocab_size=50, **PAST_FIRES_L.get(name, {})).eval()
        with torch.no_grad():
            gapped = model(ids, position_ids=2 * torch.arange(12)[None]).logits
            if (gapped - model(ids).logits).abs().max() > 1e-6:
                moved.add(name)
    assert moved == {name for name, scheme in POSITION_SCHEME_CLASSES.items() if scheme.reads_position_ids}
    assert moved == {"learned", "sinusoidal", "rope", "xpos", "fire"}
