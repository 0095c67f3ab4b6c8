"""No verb ever runs code that came with a folder: it has its own model code.

A folder (say, one downloaded from someone else) whose config.json or tokenizer_config.json has an `auto_map` makes
transformers ask "run the custom code? [y/N]"; with `y` on stdin, the folder's `.py` would run. Every load passes
`trust_remote_code=False`, and such an `auto_map` is refused by name before transformers is asked. A tinygpt
folder's own `auto_map` (this package's classes, which run from the installed package) loads as always.
"""

import io
import json
from pathlib import Path

import pytest
from conftest import random_gpt2, tiny_model
from conftest import run_cli as run_in_process

from hf_tinygpt import gpt2_tokenizer

CODE = "from pathlib import Path\nPath(__file__).with_name('CODE_RAN').touch()\n"


def run_cli(capsys, monkeypatch, *args) -> tuple[int, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n" * 10))  # anyone asking may run the code
    return run_in_process(capsys, *args)


def with_code(folder: Path, file: str, **fields) -> Path:
    """`folder` with `evil.py` beside its files and `fields` merged into its `file` (a JSON object)."""
    (folder / "evil.py").write_text(CODE + "class Evil:\n    pass\n")
    path = folder / file
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))
    return folder


def tokenizer_with_code(folder: Path) -> Path:
    gpt2_tokenizer().save_pretrained(folder)
    return with_code(folder, "tokenizer_config.json", auto_map={"AutoTokenizer": ["evil.Evil", "evil.Evil"]})


def config_with_code(folder: Path, model_type) -> Path:
    config = json.loads((folder / "config.json").read_text())
    if model_type is None:
        config.pop("model_type")
    else:
        config["model_type"] = model_type
    config["auto_map"] = {"AutoConfig": "evil.Evil", "AutoModelForCausalLM": "evil.Evil"}
    (folder / "config.json").write_text(json.dumps(config))
    return with_code(folder, "config.json")


@pytest.fixture
def tiny_folder(tmp_path):
    folder = tmp_path / "tiny"
    tiny_model(vocab_size=50257).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("verb", ["generate", "push", "convert --to gpt2"])
def test_a_tokenizer_config_that_names_code_is_refused(verb, tiny_folder, tmp_path, capsys, monkeypatch):
    tokenizer_with_code(tiny_folder)
    args = {
        "generate": ["generate", "hello", "--model", tiny_folder, "--max-new-tokens", 2],
        "push": ["push", tiny_folder, "me/tiny", "--dry-run", "--out", tmp_path / "staged"],
        "convert --to gpt2": ["convert", tiny_folder, "--to", "gpt2", "--out", tmp_path / "out"],
    }[verb]
    code, err = run_cli(capsys, monkeypatch, *args)
    assert not (tiny_folder / "CODE_RAN").exists()
    assert code == 2 and "tokenizer_config.json: its auto_map" in err and "never runs a folder's code" in err


@pytest.mark.parametrize("model_type", [None, "my_custom_gpt", "tinygpt"])
@pytest.mark.parametrize("verb", ["generate", "params", "plot-positions", "push"])
def test_a_config_whose_auto_map_names_code_of_its_own_is_refused(
    model_type, verb, tiny_folder, tmp_path, capsys, monkeypatch
):
    config_with_code(tiny_folder, model_type)
    args = {
        "generate": ["generate", "hello", "--model", tiny_folder, "--max-new-tokens", 2],
        "params": ["params", tiny_folder],
        "plot-positions": ["plot-positions", tiny_folder, "--out", tmp_path / "plots"],
        "push": ["push", tiny_folder, "me/tiny", "--dry-run", "--out", tmp_path / "staged"],
    }[verb]
    code, err = run_cli(capsys, monkeypatch, *args)
    assert not (tiny_folder / "CODE_RAN").exists()
    assert code == 2 and "config.json: its auto_map" in err, err


def test_a_tokenizer_with_code_given_as_tokenizer_is_refused(tmp_path, capsys, monkeypatch):
    gpt2 = tmp_path / "gpt2"
    random_gpt2(vocab_size=50257).save_pretrained(gpt2)
    tokenizer = tokenizer_with_code(tmp_path / "tok")
    code, err = run_cli(capsys, monkeypatch, "convert", gpt2, "--tokenizer", tokenizer, "--out", tmp_path / "out")
    assert not (tokenizer / "CODE_RAN").exists()
    assert code == 2 and "tokenizer_config.json: its auto_map" in err


def test_a_tinygpt_folder_with_its_own_auto_map_loads_with_the_installed_code(tiny_folder, capsys, monkeypatch):
    (tiny_folder / "modeling_tinygpt.py").write_text(CODE)  # the copy beside the weights is never imported
    gpt2_tokenizer().save_pretrained(tiny_folder)
    code, err = run_cli(capsys, monkeypatch, "generate", "hello", "--model", tiny_folder, "--max-new-tokens", 2)
    assert code == 0, err
    assert not (tiny_folder / "CODE_RAN").exists()
