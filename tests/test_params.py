"""Where the parameters are: GPT-2 small must come to exactly 124,439,808 with its tied head."""

import pytest
from conftest import random_gpt2, tiny_model

from hf_tinygpt import TinyGPTConfig, parameter_breakdown


def test_gpt2_small_has_124_439_808_parameters():
    parts = parameter_breakdown(TinyGPTConfig())  # the defaults are GPT-2 small
    V, P, N, C = 50257, 1024, 12, 768
    assert parts == {
        "token_embedding": V * C,
        "position_embedding": P * C,
        "blocks": N * (12 * C * C + 13 * C),
        "final_norm": 2 * C,
        "lm_head": 0,
        "total": 124_439_808,
    }


def test_breakdown_matches_transformers_gpt2_and_the_model_itself():
    gpt2 = random_gpt2(n_embd=48, n_layer=3, n_head=6, n_inner=100)
    ours = tiny_model(n_embd=48, n_layer=3, n_head=6, n_inner=100)
    parts = parameter_breakdown(ours)
    assert parts["total"] == gpt2.num_parameters() == ours.num_parameters()


def test_schemes_without_weights_have_no_position_parameters():
    for scheme in ("sinusoidal", "rope", "xpos", "alibi", "none"):
        assert parameter_breakdown(TinyGPTConfig(position_embedding_type=scheme))["position_embedding"] == 0
    untied = parameter_breakdown(TinyGPTConfig(tie_word_embeddings=False))
    assert untied["lm_head"] == 50257 * 768 and untied["total"] == 124_439_808 + 50257 * 768


@pytest.mark.parametrize(
    ("scheme", "expected"),
    [
        ("t5", 32 * 12),  # a bias per bucket and head
        ("kerple", 2 * 12),  # r1 and r2 per head
        ("fire", (32 + 32) + (32 * 12 + 12) + 2),  # MLP 1 → 32 → 12 heads, c and L's multiplier
        ("cope", 12 * 64 * 64),  # per layer, 64 position vectors of head_dim 64
    ],
)
def test_schemes_that_learn_a_bias_count_its_parameters(scheme, expected):
    assert parameter_breakdown(TinyGPTConfig(position_embedding_type=scheme))["position_embedding"] == expected


def test_params_command_on_a_gpt2_folder_and_a_config_file(tmp_path, cli):
    random_gpt2().save_pretrained(tmp_path / "gpt2")
    out = cli("params", str(tmp_path / "gpt2"))
    assert out.returncode == 0, out.stderr
    assert "learned positions, 2 layers, n_embd 32" in out.stdout
    total = parameter_breakdown(tiny_model())["total"]
    assert "total" in out.stdout and f"{total:,}" in out.stdout

    TinyGPTConfig().to_json_file(tmp_path / "small.json")
    out = cli("params", str(tmp_path / "small.json"))
    assert out.returncode == 0 and "124,439,808" in out.stdout


def test_params_command_reports_a_missing_path(cli):
    out = cli("params", "./no/such/folder")
    assert out.returncode == 2 and "./no/such/folder: no such model folder" in out.stderr


def test_params_of_a_scheme_name_says_what_it_counts(cli, tmp_path, monkeypatch):
    """(`params rope`, as `plot-positions rope` is given, asked the Hub for a repo "rope": 23 s of retries offline.)"""
    monkeypatch.chdir(tmp_path)
    out = cli("params", "rope")
    assert out.returncode == 2 and "rope is a position scheme's name, not a model: params counts a" in out.stderr
    tiny_model(n_layer=1, n_head=1).save_pretrained(tmp_path / "one")
    out = cli("params", tmp_path / "one")
    assert out.returncode == 0 and "learned positions, 1 layer, n_embd 32, 1 head, vocab" in out.stdout


def test_verify_gpt2_command_on_the_4_36_checkpoint(cli):
    from pathlib import Path

    folder = Path(__file__).parent / "fixtures" / "fake-gpt2-transformers-4.36"
    out = cli("verify-gpt2", str(folder), "--tolerance", "1e-5")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "parameters: 102,640" in out.stdout and "OK: identical" in out.stdout


def test_params_counts_every_scheme(scheme, tmp_path, cli):
    """`params` on any scheme's config: the parts, its positions' share among them, add up to the model's own count,
    whether the model is built or only its shapes."""
    model = tiny_model(scheme)
    parts = parameter_breakdown(model.config)
    assert parts == parameter_breakdown(model) and parts["total"] == model.num_parameters()
    assert parts["position_embedding"] == sum(p.numel() for p in model.transformer.positions.parameters())
    model.config.to_json_file(tmp_path / "config.json")
    out = cli("params", tmp_path / "config.json")
    assert out.returncode == 0 and f"{parts['total']:,}" in out.stdout, out.stderr
