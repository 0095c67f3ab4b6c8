"""The shipped default model: small, RoPE with an exact GPT-NeoX twin (what engines load), loads through the Auto
classes, and its card's perplexity, recipe and curve are what the shipped weights and their run really are."""

import json
import re

import pytest
import torch
from conftest import HAMLET, REPOSITORY
from huggingface_hub import ModelCard
from transformers import AutoModelForCausalLM, pipeline

import hf_tinygpt
from hf_tinygpt import DEFAULT_MODEL_DIR, TinyGPTForCausalLM
from hf_tinygpt.checkpoints.gpt_neox_layout import gpt_neox_fields_of_tinygpt
from hf_tinygpt.checkpoints.model_card import template_path
from hf_tinygpt.cli import main
from hf_tinygpt.tools.training import perplexity, tokenize_files

CARD = REPOSITORY / "model_cards" / "shakespeare.md"


def test_shipped_folder_is_small_and_complete():
    files = {p.name: p.stat().st_size for p in DEFAULT_MODEL_DIR.iterdir()}
    assert set(files) == {"config.json", "generation_config.json", "model.safetensors"}
    assert sum(files.values()) <= 8 * 10**6
    auto_map = json.loads((DEFAULT_MODEL_DIR / "config.json").read_text())["auto_map"]
    assert set(auto_map) == {"AutoConfig", "AutoModel", "AutoModelForCausalLM"}  # vLLM builds the body: AutoModel


def test_loads_through_auto_classes_and_is_gpt_neox_compatible():
    model = AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL_DIR)
    assert type(model) is TinyGPTForCausalLM
    assert model.config.position_embedding_type == "rope"  # ahead of learned positions at this scale (the study)
    gpt_neox_fields_of_tinygpt(model.config)  # raises if GPT-NeoX could not express it
    assert model.num_parameters() == hf_tinygpt.parameter_breakdown(model.config)["total"]


def test_runs_on_engines_through_its_exact_gpt_neox_twin(tmp_path, cli):
    """What llama.cpp and vLLM's native GPT-NeoX are given: `convert --to gpt_neox`, verified against
    GPTNeoXForCausalLM with the default tolerance. Trained logits reach ~14, where fp32 rounding alone exceeds 1e-5
    (it is a few ulps of the largest logit), so the tolerance is per unit of the logits' scale. Heads of 32 suit
    vLLM's CPU attention."""
    assert hf_tinygpt.TinyGPTConfig.from_pretrained(DEFAULT_MODEL_DIR).head_size >= 32
    out = cli("convert", "--to", "gpt_neox", DEFAULT_MODEL_DIR, "--out", tmp_path / "neox")
    assert out.returncode == 0, out.stderr
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in (tmp_path / "neox").iterdir()}


@pytest.mark.slow
def test_card_states_the_shipped_weights_measured_perplexity():
    card = ModelCard.load(CARD)
    training = card.data.tinygpt["training"]
    assert training["validation_description"] == "hamlet_gut.txt"
    # The recipe runs from a clone: the corpus it names is the repository's own.
    assert "--train scripts/data/shakespeare " in training["command"]
    assert "--validation scripts/data/shakespeare/hamlet_gut.txt" in training["command"]
    config = hf_tinygpt.TinyGPTConfig.from_pretrained(DEFAULT_MODEL_DIR)
    assert f"| parameters | {hf_tinygpt.parameter_breakdown(config)['total']:,} " in card.text
    model = TinyGPTForCausalLM.from_pretrained(DEFAULT_MODEL_DIR, dtype=torch.float32)
    tokens = tokenize_files([HAMLET], hf_tinygpt.gpt2_tokenizer())
    assert len(tokens) == training["validation_tokens"]
    measured = perplexity(model, tokens, training["block_size"])
    assert measured == pytest.approx(training["validation_perplexity"], rel=1e-4)


def test_card_shows_the_runs_loss_curve():
    image = re.search(r"!\[training and validation loss\]\((.+?)\)", ModelCard.load(CARD).text).group(1)
    assert (CARD.parent / image).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_card_usage_snippet_runs_as_written(capsys):
    snippet = re.search(r"```python\n(.*?)```", ModelCard.load(CARD).text, re.S).group(1)
    exec(snippet, {})
    assert capsys.readouterr().out.startswith("To be, or not to be")


def test_generate_uses_the_default_model(capsys):
    assert main(["generate", "ROMEO:", "--temperature", "0", "--max-new-tokens", "15"]) == 0
    printed = capsys.readouterr().out
    model = AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL_DIR)
    expected = pipeline("text-generation", model=model, tokenizer=hf_tinygpt.gpt2_tokenizer())(
        "ROMEO:", max_new_tokens=15, do_sample=False
    )
    assert printed == expected[0]["generated_text"] + "\n"  # the streamer ends the line


def test_card_templates_ship_with_the_package():
    assert template_path("trained.md").is_file() and template_path("converted_gpt2.md").is_file()
