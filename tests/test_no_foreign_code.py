"""No verb ever runs code that came with a folder: it has its own model code, and reads pickles as data only.

A folder (say, one downloaded from someone else) whose config.json or tokenizer_config.json has an `auto_map` makes
transformers ask "run the custom code? [y/N]"; with `y` on stdin, the folder's `.py` would run. Every load passes
`trust_remote_code=False`, and such an `auto_map` is refused by name before transformers is asked. A tinygpt
folder's own `auto_map` (this package's classes, which run from the installed package) loads as always. A pickle
(`pytorch_model.bin`, nanoGPT's `ckpt.pt`) is read with `weights_only=True`: one that would run code is refused by
name. (A crafted `--resume` checkpoint is in test_resume.py.)
"""

import io
import json
from pathlib import Path

import pytest
import torch
from conftest import RunsCode, random_gpt2, tiny_model
from conftest import run_cli as run_in_process

from hf_tinygpt import TinyGPTForCausalLM, gpt2_tokenizer

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
def text_folder(tmp_path):
    """A tinygpt over GPT-2's vocabulary (the bundled tokenizer fits it), saved in tmp_path/tiny."""
    folder = tmp_path / "tiny"
    tiny_model(vocab_size=50257).save_pretrained(folder)
    return folder


# ---- an auto_map that names code of the folder's own -----------------------------------------------------------------


@pytest.mark.parametrize("verb", ["generate", "push", "convert --to gpt2"])
def test_a_tokenizer_config_that_names_code_is_refused(verb, text_folder, tmp_path, capsys, monkeypatch):
    tokenizer_with_code(text_folder)
    args = {
        "generate": ["generate", "hello", "--model", text_folder, "--max-new-tokens", 2],
        "push": ["push", text_folder, "me/tiny", "--dry-run", "--out", tmp_path / "staged"],
        "convert --to gpt2": ["convert", text_folder, "--to", "gpt2", "--out", tmp_path / "out"],
    }[verb]
    code, err = run_cli(capsys, monkeypatch, *args)
    assert not (text_folder / "CODE_RAN").exists()
    assert code == 2 and "tokenizer_config.json: its auto_map" in err and "never runs a folder's code" in err


@pytest.mark.parametrize("model_type", [None, "my_custom_gpt", "tinygpt"])
@pytest.mark.parametrize("verb", ["generate", "params", "plot-positions", "push"])
def test_a_config_whose_auto_map_names_code_of_its_own_is_refused(
    model_type, verb, text_folder, tmp_path, capsys, monkeypatch
):
    config_with_code(text_folder, model_type)
    args = {
        "generate": ["generate", "hello", "--model", text_folder, "--max-new-tokens", 2],
        "params": ["params", text_folder],
        "plot-positions": ["plot-positions", text_folder, "--out", tmp_path / "plots"],
        "push": ["push", text_folder, "me/tiny", "--dry-run", "--out", tmp_path / "staged"],
    }[verb]
    code, err = run_cli(capsys, monkeypatch, *args)
    assert not (text_folder / "CODE_RAN").exists()
    assert code == 2 and "config.json: its auto_map" in err, err


def test_a_tokenizer_with_code_given_as_tokenizer_is_refused(tmp_path, capsys, monkeypatch):
    gpt2 = tmp_path / "gpt2"
    random_gpt2(vocab_size=50257).save_pretrained(gpt2)
    tokenizer = tokenizer_with_code(tmp_path / "tok")
    code, err = run_cli(capsys, monkeypatch, "convert", gpt2, "--tokenizer", tokenizer, "--out", tmp_path / "out")
    assert not (tokenizer / "CODE_RAN").exists()
    assert code == 2 and "tokenizer_config.json: its auto_map" in err


def test_a_tinygpt_folder_with_its_own_auto_map_loads_with_the_installed_code(text_folder, capsys, monkeypatch):
    (text_folder / "modeling_tinygpt.py").write_text(CODE)  # the copy beside the weights is never imported
    gpt2_tokenizer().save_pretrained(text_folder)
    code, err = run_cli(capsys, monkeypatch, "generate", "hello", "--model", text_folder, "--max-new-tokens", 2)
    assert code == 0, err
    assert not (text_folder / "CODE_RAN").exists()


# ---- pickles are read as data ----------------------------------------------------------------------------------------


def test_bin_files_are_read_with_weights_only(tmp_path):
    """A pickle that would run code on load is refused (torch.load(weights_only=True))."""
    gpt2 = random_gpt2()
    gpt2.config.to_json_file(tmp_path / "config.json")
    torch.save({"transformer.wte.weight": torch.zeros(2), "payload": Path("x")}, tmp_path / "pytorch_model.bin")
    with pytest.raises(Exception, match="(?i)weights.only|unsupported|global"):
        TinyGPTForCausalLM.from_pretrained(tmp_path)


def test_a_nanogpt_checkpoint_that_refuses_to_unpickle_is_named(tmp_path, capsys):
    checkpoint = tmp_path / "ckpt.pt"
    ran = tmp_path / "code_ran"
    torch.save({"model": {}, "model_args": {}, "trap": RunsCode(ran)}, checkpoint)
    code, err = run_in_process(capsys, "convert", checkpoint, "--out", tmp_path / "out", "--tokenizer", "gpt2")
    assert code == 2 and f"{checkpoint}: cannot read it as a checkpoint" in err and not ran.exists()
