"""The main job, `hf-tinygpt generate`: any tinygpt, GPT-2 or GPT-NeoX-exported model through AutoModelForCausalLM,
streamed. (Its one-line errors are in test_cli_errors.py, `--int8` in test_int8.py.)"""

import io

import pytest
from conftest import random_gpt2, run_cli, save_with_tokenizer, text_model, tiny_model
from transformers import pipeline

import hf_tinygpt
from hf_tinygpt.cli.commands import main
from hf_tinygpt.generate.compiled_decoding import CompiledDecoder
from hf_tinygpt.generate.text import generate_text, load_for_generation

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


@pytest.mark.parametrize(
    "option, value",
    [
        ("max_new_tokens", True),
        ("temperature", True),
        ("temperature", False),
        ("top_k", True),
        ("top_p", True),
        ("seed", True),
        ("seed", False),
        ("seed", 1.5),
        ("seed", -1),
        ("seed", 2**32),
    ],
)
def test_generation_options_must_be_numbers_not_booleans(option, value):
    """bool is a subclass of int: `top_k=True` would sample from one token, `seed=False` seed with 0."""
    model, tokenizer = text_model("alibi"), hf_tinygpt.gpt2_tokenizer()
    with pytest.raises(ValueError, match=f"`{option}`"):
        generate_text(PROMPT, model, tokenizer, quiet=True, **{"max_new_tokens": 2, option: value})


def test_a_tokenizer_is_given_with_a_loaded_model_and_only_then(folder):
    """A path or the default model brings its own tokenizer, which a tokenizer passed alongside would silently lose
    to; a loaded model has none to fall back on."""
    tokenizer = hf_tinygpt.gpt2_tokenizer()
    for model in (str(folder), folder, None):
        with pytest.raises(ValueError, match="`tokenizer`"):
            generate_text(PROMPT, model, tokenizer, max_new_tokens=2, quiet=True)
    with pytest.raises(ValueError, match="`tokenizer`"):
        generate_text(PROMPT, text_model("alibi"), None, max_new_tokens=2, quiet=True)
    assert generate_text(PROMPT, folder, max_new_tokens=2, temperature=0, quiet=True).startswith(PROMPT)


@pytest.mark.parametrize(
    "argument, value",
    [
        ("max_length", 0),
        ("max_length", 3),  # the build decodes 3 tokens after a 1-token prompt
        ("max_length", True),
        ("max_length", 16.0),
        ("batch_size", 0),
        ("batch_size", True),
        ("batch_size", 2.0),
        ("autotune", 1),
        ("autotune", None),
    ],
)
def test_compiled_decoder_arguments_are_checked_before_it_compiles(argument, value):
    """`max_length=0` built a decoder of n_positions tokens, `batch_size=True` one of batch 1: each is an error."""
    with pytest.raises(ValueError, match=f"`{argument}`"):
        CompiledDecoder(tiny_model("rope"), **{"max_length": 16, "autotune": False, argument: value})


def test_a_card_whose_tokenizer_record_cannot_be_checked_is_refused_by_name(tmp_path):
    """A tokenizer_sha256 that is no sha256 turned the check off (a number, a list) or compared it with nothing (an
    empty or cut value); the card's field is named, with the fix. The right value in capitals is the same hash."""
    from hf_tinygpt.folders.bundled import tokenizer_sha256

    folder = save_with_tokenizer(text_model(), tmp_path / "model")
    right = tokenizer_sha256(hf_tinygpt.gpt2_tokenizer())
    for value, refused in [
        ("12345", True),
        ("[a, b]", True),
        ("''", True),
        (right[:12], True),
        (right.upper(), False),
        ("null", False),  # no record: nothing to check, as in a card of an older version
    ]:
        (folder / "README.md").write_text(f"---\ntinygpt:\n  training:\n    tokenizer_sha256: {value}\n---\n")
        if refused:
            with pytest.raises(ValueError, match=r"tinygpt.training.tokenizer_sha256 is .*, not the sha256 \(64 hex"):
                load_for_generation(str(folder))
        else:
            load_for_generation(str(folder))
    # A card that does not read (perhaps not ours: generate runs any causal LM) loads, unchecked, and says so.
    (folder / "README.md").write_text("---\ntinygpt: [\n---\n")
    with pytest.warns(UserWarning, match=r"README.md: cannot read .*: what it records of the model's training is not"):
        load_for_generation(str(folder))
