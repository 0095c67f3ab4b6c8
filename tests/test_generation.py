"""The main job, `hf-tinygpt generate`: any tinygpt, GPT-2 or GPT-NeoX-exported model through AutoModelForCausalLM,
streamed. (Its one-line errors are in test_cli_errors.py, `--int8` in test_int8.py.)"""

import io

import pytest
from conftest import random_gpt2, run_cli, save_with_tokenizer, text_model, tiny_model
from transformers import pipeline

import hf_tinygpt
from hf_tinygpt.cli import main
from hf_tinygpt.tools.generate import generate_text, load_for_generation

PROMPT = "Friends, Romans, countrymen"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_with_tokenizer(text_model("alibi"), tmp_path_factory.mktemp("model") / "alibi")


def test_greedy_cli_output_is_the_pipelines_text(folder, capsys):
    assert main(["generate", PROMPT, "--model", str(folder), "--temperature", "0", "--max-new-tokens", "12"]) == 0
    printed = capsys.readouterr().out
    expected = pipeline("text-generation", model=str(folder))(PROMPT, max_new_tokens=12, do_sample=False)
    assert printed == expected[0]["generated_text"] + "\n"  # the streamer ends the line


class Recorder(io.StringIO):
    def __init__(self):
        super().__init__()
        self.pieces = []

    def write(self, text):
        self.pieces.append(text)
        return super().write(text)


def test_tokens_are_streamed_as_they_are_produced(folder):
    model, tokenizer = load_for_generation(str(folder))
    stream = Recorder()
    text = generate_text(PROMPT, model, tokenizer, max_new_tokens=16, temperature=0, stream=stream)
    assert len([p for p in stream.pieces if p]) > 2  # many pieces, not one write at the end
    assert stream.getvalue() == text + "\n"


def test_sampling_is_reproducible_with_a_seed(folder):
    model, tokenizer = load_for_generation(str(folder))

    def sample(seed, **options):
        return generate_text(PROMPT, model, tokenizer, max_new_tokens=12, seed=seed, quiet=True, **options)

    assert sample(1) == sample(1)
    assert sample(1) != sample(2)
    assert sample(3, top_k=None, top_p=0.9, temperature=1.3) == sample(3, top_k=None, top_p=0.9, temperature=1.3)


def test_a_gpt2_folder_works_through_the_auto_classes(tmp_path, capsys):
    gpt2 = random_gpt2(vocab_size=50257, eos_token_id=50256, bos_token_id=50256)
    gpt2.save_pretrained(tmp_path)
    hf_tinygpt.gpt2_tokenizer().save_pretrained(tmp_path)
    assert main(["generate", PROMPT, "--model", str(tmp_path), "--temperature", "0", "--max-new-tokens", "5"]) == 0
    ids = hf_tinygpt.gpt2_tokenizer()(PROMPT, return_tensors="pt").input_ids
    expected = gpt2.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=50256)
    assert capsys.readouterr().out == hf_tinygpt.gpt2_tokenizer().decode(expected[0]) + "\n"


def test_generate_runs_a_gpt_neox_export_of_a_rope_model(tmp_path, capsys):
    rope = tmp_path / "rope"
    tiny_model("rope", vocab_size=50257).save_pretrained(rope)
    assert run_cli(capsys, "convert", rope, "--to", "gpt_neox", "--out", tmp_path / "neox")[0] == 0
    code, out = run_cli(capsys, "generate", "hello", "--model", tmp_path / "neox", "--max-new-tokens", 3)
    assert code == 0, out


def test_a_missing_model_is_a_clear_error(tmp_path, capsys):
    assert main(["generate", PROMPT, "--model", str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err
