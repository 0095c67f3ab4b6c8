"""Position pictures (hf_tinygpt.plots.positions): the numbers each picture plots are the model's own, and the files are real."""

import json
import math

import numpy as np
import pytest
import torch
from conftest import P_ROPE, every_scheme, random_gpt2, run_cli, tiny_config, tiny_model, word_tokenizer
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from hf_tinygpt import POSITION_SCHEME_CLASSES, TinyGPTForCausalLM
from hf_tinygpt.cli.commands import main
from hf_tinygpt.folders.outputs import MANIFEST
from hf_tinygpt.plots.positions import (
    load_for_plots,
    plot_attention_bias,
    plot_cope_positions,
    plot_cosine_similarity,
    plot_dimension_traces,
    plot_gate_bias,
    plot_path_transforms,
    plot_pope_phases,
    plot_position_matrix,
    plot_positions,
    plot_rope_frequencies,
    plot_rope_similarity,
    plot_stick_breaking_weights,
    plot_token_vs_position,
    plot_xpos_decay,
    prompt_tokens,
    token_vs_position,
    trace_dimensions,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SMALL = dict(n_embd=32, n_positions=32, n_head=4)  # shrinks the bare-scheme model, to keep the tests fast
SHORT_PROMPT = " one to one"  # three tokens (fast to draw), ' one' twice


def is_png(path) -> bool:
    return path.read_bytes()[:8] == PNG_MAGIC


# ---- learned and sinusoidal ------------------------------------------------------------------------------------


def test_sinusoidal_cosine_similarity_is_symmetric_with_unit_diagonal_and_decays(tmp_path):
    model = tiny_model("sinusoidal")
    matrix = plot_position_matrix(model, tmp_path)["matrix"]
    assert torch.equal(torch.from_numpy(matrix), model.transformer.wpe.rows(torch.arange(64)))
    sims = plot_cosine_similarity(model, tmp_path)
    for key, size in (("positions", 64), ("dimensions", 32)):
        sim = sims[key]
        assert sim.shape == (size, size)
        np.testing.assert_allclose(sim, sim.T, atol=1e-6)
        np.testing.assert_allclose(np.diag(sim), 1.0, atol=1e-5)
    by_offset = np.array([np.diag(sims["positions"], k).mean() for k in range(64)])
    assert by_offset[1:8].mean() > by_offset[8:24].mean() > by_offset[24:].mean()  # decays with distance on average
    assert np.corrcoef(np.arange(64), by_offset)[0, 1] < -0.5
    assert is_png(tmp_path / "position_matrix.png") and is_png(tmp_path / "cosine_similarity.png")


@pytest.mark.parametrize("kind", ["gpt2", "tinygpt"])
def test_learned_heatmap_rows_are_the_checkpoints_wpe(tmp_path, kind):
    source = random_gpt2(seed=3) if kind == "gpt2" else tiny_model("learned", seed=3)
    source.save_pretrained(tmp_path / "model")
    model, label = load_for_plots(str(tmp_path / "model"))
    assert isinstance(model, TinyGPTForCausalLM) and model.config.position_embedding_type == "learned"
    assert label.startswith("model") and ("GPT-2 checkpoint" in label) == (kind == "gpt2")
    matrix = plot_position_matrix(model, tmp_path / "out", label=label)["matrix"]
    assert torch.equal(torch.from_numpy(matrix), source.transformer.wpe.weight.detach())
    part = plot_position_matrix(model, tmp_path / "out", max_positions=10)["matrix"]
    assert torch.equal(torch.from_numpy(part), source.transformer.wpe.weight[:10].detach())
    with pytest.raises(ValueError, match="n_positions=64"):
        plot_position_matrix(model, tmp_path / "out", max_positions=65)


def test_dimension_traces_are_seeded_columns_of_the_position_rows(tmp_path):
    model = tiny_model("sinusoidal")
    dims = trace_dimensions(32, 6, seed=0)
    assert len(dims) == 6 and len(set(dims)) == 6 and list(dims) == sorted(dims)
    assert np.array_equal(dims, trace_dimensions(32, 6, seed=0))  # same seed, same dimensions
    assert not np.array_equal(dims, trace_dimensions(32, 6, seed=1))
    assert len(trace_dimensions(32, 100)) == 32  # at most every dimension
    plotted = plot_dimension_traces(model, tmp_path, seed=0, n_dims=6)
    assert np.array_equal(plotted["dims"], dims)
    rows = model.transformer.wpe.rows(torch.arange(64)).numpy()
    assert np.array_equal(plotted["traces"], rows[:, dims])
    assert is_png(tmp_path / "dimension_traces.png")


# ---- rope --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rope",
    [
        {},
        {"partial_rotary_factor": 0.5, "rope_theta": 500.0},
        {"rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0}},
        pytest.param(
            {"rope_parameters": P_ROPE},
            marks=pytest.mark.skipif(
                "proportional" not in ROPE_INIT_FUNCTIONS, reason="no p-RoPE in this transformers"
            ),
        ),
    ],
    ids=["default", "partial", "yarn", "p-rope"],
)
def test_rope_frequencies_and_offset_similarity_are_the_models(tmp_path, rope):
    model = tiny_model("rope", n_embd=64, **rope)
    rotary = model.transformer.rotary_emb  # LLaMA's name, where transformers looks for it
    theta = plot_rope_frequencies(model, tmp_path)["theta"]
    assert torch.equal(torch.from_numpy(theta), rotary.inv_freq)
    assert torch.equal(torch.from_numpy(theta), rotary.frequencies()[0])
    assert len(theta) == rotary.rotary_dim // 2
    curve = plot_rope_similarity(model, tmp_path)
    offsets, similarity = curve["offsets"], curve["similarity"]
    assert offsets[0] == 0 and len(offsets) == 64
    assert similarity[0] == pytest.approx(1.0, abs=1e-6)
    assert np.all(similarity <= 1 + 1e-5) and similarity[1:].max() < 1
    expected = np.cos(offsets[:, None] * theta[None, :]).mean(axis=1)  # mean over pairs of cos(m·θ_i)
    np.testing.assert_allclose(similarity, expected, atol=1e-5)
    assert is_png(tmp_path / "rope_frequencies.png") and is_png(tmp_path / "rope_similarity.png")


def test_xpos_decay_is_zeta_to_the_offset_over_gamma_and_its_similarity_the_models(tmp_path):
    model = tiny_model("xpos", xpos_scale_base=16.0)
    result = plot_xpos_decay(model, tmp_path, max_positions=40)
    zeta = model.transformer.positions.zeta.numpy()
    np.testing.assert_allclose(result["decay"], zeta[:, None] ** (np.arange(40)[None] / 16.0), rtol=1e-5)
    curve = plot_rope_similarity(model, tmp_path, max_positions=40)
    theta = model.transformer.positions.inv_freq.numpy()
    expected = (zeta[None] ** (curve["offsets"][:, None] / 16.0) * np.cos(curve["offsets"][:, None] * theta)).mean(1)
    np.testing.assert_allclose(curve["similarity"], expected, atol=1e-5)
    assert is_png(tmp_path / "xpos_decay.png") and is_png(tmp_path / "rope_similarity.png")


def test_cope_positions_are_those_its_attention_counted_on_the_prompt(tmp_path):
    """The picture's positions are recorded in the model's own forward pass: for layer 0 they are the gates of its
    scores summed from each key up to the query, and the model's attention is unchanged by the recording."""
    model = tiny_model("cope", initializer_range=0.5)
    model.set_attn_implementation("eager")
    result = plot_cope_positions(model, tmp_path)
    positions = result["positions"]
    assert positions.shape == (2, 4, len(result["tokens"]), len(result["tokens"])) and is_png(
        tmp_path / "cope_positions.png"
    )
    ids = torch.from_numpy(token_vs_position(model)["ids"])[None]
    with torch.no_grad():
        x = model.transformer.h[0].ln_1(model.transformer.wte(ids))
        q, k, _ = model.transformer.h[0].attn.c_attn(x).split(32, dim=-1)
        q, k = (t.view(1, -1, 4, 8).transpose(1, 2) for t in (q, k))
        gates = (q @ k.transpose(-1, -2) / math.sqrt(8)).sigmoid()[0] * torch.ones(ids.shape[1], ids.shape[1]).tril()
    np.testing.assert_allclose(positions[0], gates.flip(-1).cumsum(-1).flip(-1).numpy(), atol=1e-5)
    assert "contextual_positions" not in vars(model.transformer.positions)  # the recording is undone


# ---- pope, fox and cable, path, stick-breaking -----------------------------------------------------------------


def test_pope_phases_are_its_frequencies_and_learned_phases(tmp_path):
    model = tiny_model("pope")
    model.transformer.wpe.phase_bias.data[0, 0] = torch.linspace(-1.0, 0.0, 8)
    result = plot_pope_phases(model, tmp_path, max_positions=20)
    np.testing.assert_allclose(result["theta"], 10000.0 ** -(np.arange(8) / 8), rtol=1e-6)
    offsets = np.arange(20)[:, None]
    np.testing.assert_allclose(
        result["factor"], np.cos(offsets * result["theta"] + np.linspace(1.0, 0.0, 8)), atol=1e-5
    )
    assert is_png(tmp_path / "pope_phases.png")


@pytest.mark.parametrize("scheme", ["fox", "cable"])
def test_gate_bias_on_the_prompt_is_the_gates_summed_between_query_and_key(tmp_path, scheme):
    """Gates that ignore the content (weights 0, bias b_h) give every token the same log gate g_h, so the picture's
    bias is (i − j)·g_h: ALiBi's line, recorded from the model's own forward pass."""
    model = tiny_model(scheme)
    gate, bias = model.transformer.wpe.gates[0], torch.tensor([-1.0, 0.0, 2.0, 5.0])
    gate.weight.data.zero_(), gate.bias.data.copy_(bias)
    result = plot_gate_bias(model, tmp_path)
    length = len(result["tokens"])
    per_token = model.transformer.wpe.log_gate(bias).numpy()[:, None, None]
    distance = np.arange(length)[:, None] - np.arange(length)[None, :]
    causal = distance >= 0
    np.testing.assert_allclose(result["bias"][0][:, causal], (distance * per_token)[:, causal], atol=1e-5)
    assert result["bias"].shape == (2, 4, length, length) and is_png(tmp_path / "gate_bias.png")
    assert "decay" not in vars(model.transformer.wpe)  # the recording is undone


def test_stick_breaking_weights_on_the_prompt_break_the_stick_nearest_first(tmp_path):
    """Every score equal (q and k from the projection's bias alone): key j, d = i − j ≥ 1 tokens back, takes
    σ(s)·(1 − σ(s))^(d − 1) of query i's stick."""
    model = tiny_model("stick_breaking")
    attn = model.transformer.h[0].attn.c_attn
    attn.weight.data.zero_(), attn.bias.data.zero_()
    attn.bias.data[:64] = 0.5  # q = k = 0.5 in every feature: s = 8 · 0.25 / √8
    result = plot_stick_breaking_weights(model, tmp_path)
    share = 1 / (1 + math.exp(-2 / math.sqrt(8)))
    last = result["weights"][0, :, -1]  # (heads, keys) of the last query
    distances = np.arange(len(result["tokens"]) - 1, 0, -1)  # keys 0 .. T−2
    np.testing.assert_allclose(
        last[:, :-1], np.broadcast_to(share * (1 - share) ** (distances - 1), (4, len(distances))), atol=1e-5
    )
    assert is_png(tmp_path / "stick_breaking_weights.png")


def test_path_transforms_are_each_score_read_through_the_tokens_between(tmp_path):
    """Layer 0's change in the score of query i on key j is q_i·(H_i ⋯ H_{j+1} − I)k_j / √head_dim, the transforms
    applied one by one here; β_t → 0 (strength biases of −30) makes every H_t the identity, so nothing changes."""
    model = tiny_model("path", initializer_range=0.3)
    result = plot_path_transforms(model, tmp_path)
    ids = torch.from_numpy(token_vs_position(model)["ids"])[None]
    with torch.no_grad():
        x = model.transformer.h[0].ln_1(model.transformer.wte(ids))
        q, k, _ = model.transformer.h[0].attn.c_attn(x).split(32, dim=-1)
        q, k = (t.view(1, -1, 4, 8).transpose(1, 2)[0] for t in (q, k))
        w, beta = (t[0] for t in model.transformer.wpe.transforms(x, 0))
    length = ids.shape[1]
    expected = np.zeros((4, length, length))
    for j in range(length):
        read = k[:, j]
        for i in range(j, length):
            if i > j:  # token i's transform acts on what the tokens before it left
                read = read - beta[:, i, None] * (read * w[:, i]).sum(-1, keepdim=True) * w[:, i]
            expected[:, i, j] = ((q[:, i] * (read - k[:, j])).sum(-1) / math.sqrt(8)).numpy()
    causal = np.tril(np.ones((length, length), dtype=bool))
    np.testing.assert_allclose(result["change"][0][:, causal], expected[:, causal], atol=1e-5)
    assert np.abs(expected).max() > 1e-2
    for strength in model.transformer.wpe.strengths:
        strength.weight.data.zero_(), strength.bias.data.fill_(-30.0)
    result = plot_path_transforms(model, tmp_path)
    assert np.nanmax(np.abs(np.tril(result["change"]))) <= 1e-5 and is_png(tmp_path / "path_transforms.png")
    assert "through_transforms" not in vars(model.transformer.wpe)


# ---- alibi -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_head", [4, 6])
def test_alibi_bias_is_minus_slope_times_distance_as_the_model_adds_it(tmp_path, n_head):
    model = tiny_model("alibi", n_embd=48, n_head=n_head)
    wpe = model.transformer.wpe
    result = plot_attention_bias(model, tmp_path, max_positions=20)
    distances, bias = result["distances"], result["bias"]
    assert bias.shape == (n_head, 20) and list(distances) == list(range(20))
    assert torch.equal(torch.from_numpy(result["slopes"]), wpe.slopes)
    np.testing.assert_allclose(bias, -wpe.slopes.numpy()[:, None] * distances[None, :], rtol=0, atol=1e-6)


@pytest.mark.parametrize("scheme", ["alibi", "t5", "kerple", "fire"])
def test_a_bias_pictures_curves_are_what_attention_adds_for_the_last_query(tmp_path, scheme):
    model = tiny_model(scheme, initializer_range=0.5)
    result = plot_attention_bias(model, tmp_path, max_positions=20)
    assert result["bias"].shape == (4, 20) and is_png(tmp_path / f"{scheme}_bias.png")
    causal = torch.ones(20, 20, dtype=torch.bool).tril()[None, None]
    added = model.transformer.wpe.bias_attention(causal, torch.arange(20)[None], torch.float32)[0, :, -1]
    assert torch.equal(torch.from_numpy(result["bias"]), added.flip(-1))
    assert np.ptp(result["bias"], axis=1).min() > 0  # every head's curve changes with distance


# ---- token vs position -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", [{}, {"scale_embeddings": True}], ids=["plain", "scaled"])
def test_token_plus_position_is_what_the_first_block_sees(scheme, variant):
    model = tiny_model(scheme, **variant)
    result = token_vs_position(model)
    np.testing.assert_allclose(result["sum"], result["token"] + result["position"], atol=1e-6)
    with torch.no_grad():
        hidden = model.transformer(torch.from_numpy(result["ids"])[None], output_hidden_states=True).hidden_states[0]
    np.testing.assert_allclose(result["sum"], hidden[0].numpy(), rtol=0, atol=1e-6)
    first, second = result["pair"]
    assert result["tokens"][first] == result["tokens"][second] == " the"
    assert np.array_equal(result["token"][first], result["token"][second])  # same token, same row
    assert result["before"] == pytest.approx(1.0, abs=1e-6)
    if scheme in ("learned", "sinusoidal"):
        assert not np.allclose(result["sum"][first], result["sum"][second])
        assert result["after"] < 0.999
    else:  # rope, alibi and none add nothing to the embeddings: the first block sees one row twice
        assert not result["position"].any()
        assert np.array_equal(result["sum"][first], result["sum"][second])
        assert result["after"] == pytest.approx(1.0, abs=1e-6)
    assert result["remapped"]  # GPT-2 ids do not fit the 211-token test vocabulary: distinct ids stay distinct
    assert len(set(result["ids"].tolist())) == len(set(result["tokens"]))


def test_token_vs_position_picture_finds_the_repeated_token_or_says_there_is_none(tmp_path):
    model = tiny_model("learned")
    plotted = plot_token_vs_position(model, tmp_path)  # its numbers are checked against the model just above
    assert plotted["pair"] == (4, 7) and plotted["tokens"][4] == plotted["tokens"][7]
    assert is_png(tmp_path / "token_vs_position.png")
    none = token_vs_position(model, prompt="the cat sat on the mat")  # 'the' ≠ ' the': no repeated token
    assert none["pair"] is None and np.isnan(none["before"]) and np.isnan(none["after"])


# ---- every scheme, files -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", every_scheme(fast=("learned", "rope", "alibi", "none")))
def test_every_bare_scheme_writes_only_its_pictures(tmp_path, scheme):
    model, label = load_for_plots(scheme, **SMALL)
    assert model.config.position_embedding_type == scheme and "untrained" in label
    arrays = plot_positions(model, tmp_path, label=label, max_positions=24, prompt=SHORT_PROMPT)
    assert tuple(arrays) == POSITION_SCHEME_CLASSES[scheme].pictures
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{name}.png" for name in POSITION_SCHEME_CLASSES[scheme].pictures
    )
    assert all(is_png(path) for path in tmp_path.iterdir())  # and no SVG without svg=True
    assert arrays["token_vs_position"]["remapped"] is False  # a bare model has GPT-2's vocabulary
    tokens = arrays["token_vs_position"]
    assert tokens["pair"] == (0, 2) and tokens["before"] == pytest.approx(1.0, abs=1e-6)
    assert (tokens["after"] < 0.999) == (scheme in ("learned", "sinusoidal"))
    for name in ("position_matrix", "dimension_traces", "cosine_similarity"):
        assert (name in arrays) == (scheme in ("learned", "sinusoidal"))
    if scheme in ("learned", "sinusoidal"):
        assert arrays["position_matrix"]["matrix"].shape == (24, 32)


def test_load_for_plots_config_file_and_scheme_checks(tmp_path):
    tiny_config("learned").save_pretrained(tmp_path / "config")
    config_file = tmp_path / "config" / "config.json"
    model, label = load_for_plots(str(config_file), scheme="rope", seed=1)
    assert model.config.position_embedding_type == "rope" and model.config.n_embd == 32
    assert "untrained" in label and "seed 1" in label
    again, _ = load_for_plots(str(config_file), scheme="rope", seed=1)
    assert torch.equal(model.transformer.wte.weight, again.transformer.wte.weight)  # seeded
    gpt2_folder = tmp_path / "gpt2"
    random_gpt2().save_pretrained(gpt2_folder)
    assert json.loads((gpt2_folder / "config.json").read_text())["model_type"] == "gpt2"
    with pytest.raises(ValueError, match="learned positions"):
        load_for_plots(str(gpt2_folder), scheme="rope")
    with pytest.raises(ValueError, match="scheme name"):
        load_for_plots("rope", scheme="alibi")
    with pytest.raises(FileNotFoundError):
        load_for_plots(str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="applies to rope"):
        plot_rope_frequencies(tiny_model("learned"), tmp_path)


# ---- command line ------------------------------------------------------------------------------------------------


def test_cli_writes_every_picture_into_out(tmp_path, capsys):
    random_gpt2().save_pretrained(tmp_path / "gpt2")
    out = tmp_path / "plots"
    code = main(
        [
            "plot-positions",
            str(tmp_path / "gpt2"),
            "--out",
            str(out),
            "--svg",
            "--dims",
            "4",
            "--max-positions",
            "16",
            "--prompt",
            "I saw a dog and a cat",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    expected = sorted(f"{name}.{ext}" for name in POSITION_SCHEME_CLASSES["learned"].pictures for ext in ("png", "svg"))
    assert sorted(p.name for p in out.iterdir() if p.name != MANIFEST) == expected
    for name in expected:
        assert str(out / name) in printed
    assert "GPT-2 checkpoint" in printed and "repeated token ' a' at positions 2 and 5" in printed
    assert all(is_png(path) for path in out.glob("*.png"))
    svg = (out / "position_matrix.svg").read_text()
    assert svg.startswith("<?xml") and "<svg" in svg


@pytest.mark.parametrize(
    "args, message",
    [
        (["/nonexistent/model"], "/nonexistent/model: not a scheme name"),
        (["learned", "--max-positions", "999"], "n_positions=256"),
        (["sinusoidal", "--dims", "0"], "--dims must be at least 1"),
        (["rope", "--max-positions", "0"], "--max-positions must be at least 2"),
        (["rope", "--dims", "0"], "--dims must be at least 1"),  # (accepted where no picture traces dimensions)
        (["rope", "--max-positions", "1"], "--max-positions must be at least 2"),  # (one solid cell was drawn)
    ],
    ids=["bad-path", "learned-too-long", "no-dims", "no-positions", "no-dims-where-none-is-traced", "one-position"],
)
def test_cli_refuses_with_exit_code_2_and_a_message(tmp_path, capsys, args, message):
    assert main(["plot-positions", *args, "--out", str(tmp_path / "plots")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("hf-tinygpt plot-positions: error:") and message in error


def test_a_training_runs_folder_is_told_where_its_model_is(tmp_path, capsys):
    """(It was "not a scheme name, a config.json file, a model folder or a reachable Hub id", of a run's folder.)"""
    tiny_model().save_pretrained(tmp_path / "run" / "model")
    assert main(["plot-positions", str(tmp_path / "run"), "--out", str(tmp_path / "plots")]) == 2
    assert f"(expected a model folder; a training run's is {tmp_path / 'run' / 'model'})" in capsys.readouterr().err


def test_plots_refuse_more_positions_than_a_picture_holds(tmp_path, capsys):
    code, err = run_cli(capsys, "plot-positions", "alibi", "--out", tmp_path / "plots", "--max-positions", 10**9)
    assert code == 2 and "cannot plot 1000000000 positions" in err
    prompt = ("one " * 300).strip()  # (the model's own refusal told of "prompt + new tokens", which this has none of)
    code, err = run_cli(capsys, "plot-positions", "learned", "--out", tmp_path / "plots", "--prompt", prompt)
    assert code == 2 and "--prompt is 300 tokens long, past the 256 positions the model reaches" in err


def test_a_model_folder_with_its_own_tokenizer_is_drawn_on_its_tokens(tmp_path, capsys):
    """The prompt is read with the tokenizer the folder holds: GPT-2's would give other tokens (' cat', not 'cat'),
    whose ids it maps into the model's vocabulary, and the picture would show rows the model never reads for them."""
    from hf_tinygpt.plots.positions import prompt_tokenizer

    folder = tmp_path / "words"
    model = tiny_model("none", seed=4)  # one picture to draw: token vs position
    model.save_pretrained(folder)
    word_tokenizer(["the", "cat", "saw", "dog"]).save_pretrained(folder)
    prompt = "the cat saw the dog"
    assert main(["plot-positions", str(folder), "--out", str(tmp_path / "plots"), "--prompt", prompt]) == 0
    assert "repeated token 'the' at positions 0 and 3" in capsys.readouterr().out
    tokens = token_vs_position(model, prompt, prompt_tokenizer(str(folder), model))
    assert tokens["tokens"] == ["the", "cat", "saw", "the", "dog"] and not tokens["remapped"]
    assert np.array_equal(tokens["token"], model.transformer.wte.weight[[1, 2, 3, 1, 4]].detach().numpy())
    unknown = token_vs_position(model, "xyzzy plugh the", prompt_tokenizer(str(folder), model))  # two [UNK]s
    assert unknown["tokens"] == ["[UNK]", "[UNK]", "the"] and unknown["pair"] is None


@pytest.mark.parametrize("scheme", ["rope", "alibi", "none"])
def test_cli_says_why_a_repeated_token_is_unchanged_by_a_scheme_that_adds_nothing(scheme, tmp_path, capsys):
    """RoPE, ALiBi and no positions add nothing to the embeddings: a similarity of 1.0000 "after positions" would
    read like a bug, so the line says where the scheme acts instead."""
    assert main(["plot-positions", scheme, "--out", str(tmp_path / "plots"), "--max-positions", "16"]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("repeated token")]
    assert "the same row before and after positions" in line and POSITION_SCHEME_CLASSES[scheme].where_it_acts in line
    assert "cosine similarity" not in line


def test_a_token_that_holds_part_of_a_character_is_shown_as_its_bytes():
    """GPT-2's tokens split an emoji's four bytes; each piece alone decoded to '\ufffd' in every label and header."""
    model = tiny_model("rope", vocab_size=50257)
    _, texts, _ = prompt_tokens(model, "I \U0001f600 you")
    assert texts == ["I", " \\xf0\\x9f\\x98", "\\x80", " you"]
    _, words, _ = prompt_tokens(tiny_model("rope"), "the cat", word_tokenizer(["the", "cat"]))
    assert words == ["the", "cat"]
