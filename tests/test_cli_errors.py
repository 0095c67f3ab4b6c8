"""Every mistake on the command line ends in one line that names the file or flag and the fix, with exit code 2,
never a traceback, a hang or a wrong output; Ctrl-C anywhere ends with one line and exit 130, leaving nothing
half-written.

Grouped by verb: tokenizers (convert, push, train), generate, train, config files and verify-gpt2, then a malformed
model folder as every verb meets it. What a verb may write over is in test_outputs_and_ownership.py, a bad checkpoint
given to convert in test_conversion.py, `--resume` in test_resume.py, a folder whose code would run in
test_no_foreign_code.py, push's own checks in test_publishing.py.
"""

import array
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from conftest import (
    GPT2_VOCAB,
    REPOSITORY,
    TINY_RUN,
    last_line,
    random_gpt2,
    run_cli,
    save_with_tokenizer,
    text_model,
    tiny_model,
)
from safetensors.torch import load_file, save_file

from hf_tinygpt import gpt2_tokenizer

SAVING_RUN = [*TINY_RUN, "--save-every", "2"]  # the tiny run with a checkpoint every two steps


@pytest.fixture
def gpt2_50257(tmp_path):
    """A GPT-2 checkpoint over GPT-2's vocabulary (the bundled tokenizer fits it), saved in tmp_path/gpt2."""
    folder = tmp_path / "gpt2"
    random_gpt2(vocab_size=50257).save_pretrained(folder)
    return folder


# ---- tokenizers: a folder that is not one, or one transformers cannot read -------------------------------------------


@pytest.mark.parametrize("verb", ["convert", "push"])
def test_a_model_folder_given_as_tokenizer_is_not_taken_for_an_empty_one(verb, gpt2_50257, tmp_path, capsys):
    """transformers builds a BPE tokenizer with an empty vocabulary from a folder without tokenizer files."""
    other = tmp_path / "other_gpt2"
    random_gpt2(seed=1).save_pretrained(other)
    args = {"convert": ["convert", gpt2_50257], "push": ["push", gpt2_50257, "me/tiny", "--dry-run"]}[verb]
    code, err = run_cli(capsys, *args, "--tokenizer", other, "--out", tmp_path / "out")
    assert code == 2 and f"{other}: no tokenizer files" in err
    assert not (tmp_path / "out").exists()


def broken_merges(folder: Path) -> Path:
    gpt2_tokenizer().save_pretrained(folder)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["model"]["merges"][0] = ["zzqq_not_in_vocab", "qqzz_not_either"]
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    return folder


def json_list(folder: Path) -> Path:
    folder.mkdir()
    (folder / "tokenizer.json").write_text("[1, 2, 3]")
    return folder


def empty(folder: Path) -> Path:
    folder.mkdir()
    return folder


def missing(folder: Path) -> Path:
    return folder  # a path, not there: not sent to the Hub as a repo id


def mistyped(folder: Path) -> Path:
    return Path("no-such-tokenizer")  # a Hub id's shape: asked of the Hub (offline here), and said so in one line


def a_file(folder: Path) -> Path:
    gpt2_tokenizer().save_pretrained(folder)
    return folder / "tokenizer.json"  # the folder's file, not the folder


def no_eos(folder: Path) -> Path:
    gpt2_tokenizer().save_pretrained(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["eos_token"] = None
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    "make, message",
    [
        (broken_merges, "transformers cannot read this tokenizer"),
        (json_list, "transformers cannot read this tokenizer"),
        (empty, "no tokenizer files (tokenizer.json, or vocab.json + merges.txt)"),
        (no_eos, "has no end-of-text (eos) token"),
        (missing, "no such tokenizer folder (nor a Hub id)"),
        (mistyped, "no such tokenizer folder here, nor a Hub repo that could be read (We couldn't connect"),
        (a_file, "tokenizer.json is a file: give the tokenizer folder that holds it"),
    ],
)
def test_train_names_a_tokenizer_it_cannot_use(make, message, corpus, tmp_path, capsys):
    tokenizer = make(tmp_path / "tok")
    code, err = run_cli(
        capsys,
        "train",
        "--train",
        corpus,
        *SAVING_RUN,
        "--steps",
        1,
        "--tokenizer",
        tokenizer,
        "--out",
        tmp_path / "run",
    )
    assert code == 2 and str(tokenizer) in last_line(err) and message in last_line(err), err
    assert not (tmp_path / "run").exists()


# ---- generate --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--temperature", "-1"], "--temperature must be 0 .greedy decoding. or a finite number >= 0.001"),
        (["--temperature", "nan"], "--temperature must be 0 .greedy decoding. or a finite number >= 0.001"),
        (["--temperature", "1e-300"], "--temperature must be 0 .greedy decoding. or a finite number >= 0.001"),
        (["--top-p", "1.5"], r"--top-p must be in \(0, 1\]"),
        (["--top-k", "-3"], "--top-k must be an integer >= 0"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be an integer >= 1"),
    ],
)
def test_generate_refuses_sampling_options_it_would_ignore_or_misread(capsys, flags, message):
    code, err = run_cli(capsys, "generate", "ROMEO:", *flags)
    assert code == 2 and re.search(message, err), err


def test_generate_refuses_to_run_learned_positions_past_their_last_row(capsys, tmp_path):
    """Learned positions have n_positions rows: a prompt plus new tokens past them is refused before decoding. (The
    shipped model is RoPE, which has no last row.)"""
    folder = save_with_tokenizer(text_model("learned"), tmp_path / "learned")  # n_positions 64
    code, err = run_cli(capsys, "generate", "ROMEO:", "--model", folder, "--max-new-tokens", "63")
    assert code == 2 and "past this model's context of 64" in err, err


@pytest.mark.parametrize("prompt, message", [("", "the prompt is empty"), ("caf\udce9", "not valid UTF-8")])
def test_generate_names_an_empty_or_undecodable_prompt(capsys, prompt, message):
    """A Latin-1 byte on a UTF-8 command line reaches Python as a lone surrogate (\\udce9)."""
    code, err = run_cli(capsys, "generate", prompt)
    assert code == 2 and message in err


def test_generate_says_which_architectures_it_runs(tmp_path, capsys):
    folder = tmp_path / "custom"
    tiny_model().save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "my_custom_gpt", "auto_map": None}))
    code, err = run_cli(capsys, "generate", "hello", "--model", folder)
    assert code == 2 and "model_type 'my_custom_gpt' is not an architecture transformers knows" in err


def test_generate_names_a_gpt2_folder_whose_vocabulary_the_bundled_tokenizer_overflows(tmp_path, capsys):
    random_gpt2().save_pretrained(tmp_path / "gpt2")  # 211 tokens, no tokenizer files
    code, err = run_cli(capsys, "generate", "hello", "--model", tmp_path / "gpt2")
    assert code == 2 and "it needs its own tokenizer" in err


def test_weights_whose_sum_overflows_are_finite_and_one_inf_or_nan_is_not():
    """check_finite sums each tensor first (one pass; inf and NaN carry into the sum) and looks value by value only
    where the sum is not finite: large finite weights are not refused for their sum's overflow."""
    from hf_tinygpt.folders.reading import check_finite

    large = {"w": torch.full((4, 3), 3e38), "h": torch.full((8,), 6e4, dtype=torch.float16)}
    check_finite(large)
    for bad in (float("inf"), -float("inf"), float("nan")):
        with pytest.raises(ValueError, match="tensors with inf or NaN values: w$"):
            check_finite({"w": torch.tensor([1.0, bad, 2.0]), "ok": torch.ones(3)})
    with pytest.raises(ValueError, match="inf or NaN values: w$"):  # +inf and -inf: the sum is NaN
        check_finite({"w": torch.tensor([float("inf"), -float("inf")])})


@pytest.mark.parametrize(
    "verb",
    [
        ["generate", "hello", "--model", "{model}"],
        ["push", "{model}", "me/tiny", "--dry-run", "--out", "{tmp}/staged"],  # a traceback
        ["train", "--train", "{corpus}", "--init-from", "{model}", *"--steps 1 --batch-size 2 --block-size 16".split()]
        + ["--warmup-steps", "0", "--out", "{tmp}/run"],  # said it diverged, and left OUT
        ["plot-positions", "{model}", "--out", "{tmp}/plots"],  # drew them
    ],
    ids=lambda verb: verb[0],
)
def test_every_verb_refuses_non_finite_weights_by_name(verb, corpus, tmp_path, capsys):
    tiny_folder = tmp_path / "tiny"  # a folder each verb takes as it is (GPT-2's tokenizer beside it), but for a NaN
    save_with_tokenizer(tiny_model(**GPT2_VOCAB), tiny_folder)
    tensors = load_file(tiny_folder / "model.safetensors")
    tensors["transformer.wte.weight"][0, 0] = float("nan")
    save_file(tensors, tiny_folder / "model.safetensors", metadata={"format": "pt"})
    args = [word.format(model=tiny_folder, tmp=tmp_path, corpus=corpus) for word in verb]
    code, err = run_cli(capsys, *args)
    assert code == 2 and f"{tiny_folder}: tensors with inf or NaN values: lm_head.weight, transformer.wte.weight" in err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data", "tiny"]  # nothing written


@pytest.mark.parametrize(
    "verb", [["generate", "hello", "--model"], ["plot-positions", "--out", "plots"]], ids=lambda v: v[0]
)
def test_a_tokenizer_length_that_is_no_number_is_named_by_every_verb(verb, tmp_path, capsys, monkeypatch):
    """transformers reads `model_max_length` as given and compares lengths to it later: a TypeError naming no file."""
    monkeypatch.chdir(tmp_path)
    folder = save_with_tokenizer(tiny_model(**GPT2_VOCAB), tmp_path / "tiny")
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**settings, "model_max_length": "abc"}))
    code, err = run_cli(capsys, *verb, folder)
    assert code == 2 and f"{folder}: the tokenizer's model_max_length is 'abc', not a number of tokens" in err, err


@pytest.mark.parametrize(
    "content, message",
    [  # the first was told as the user's own --max-new-tokens (which was 2); the second was dropped unsaid
        ('{"max_new_tokens": -3}', "generation_config.json: max_new_tokens must be an integer >= 1, got -3: fix it"),
        ("nope", "generation_config.json is not valid JSON"),
        ('{"max_new_tokens": 0.5}', "generation_config.json: max_new_tokens must be an integer >= 1, got 0.5: fix it"),
    ],
)
@pytest.mark.parametrize("verb", [["generate", "hi", "--max-new-tokens", "2", "--model"], ["convert", "--to", "gpt2"]])
def test_a_folders_generation_config_is_named_when_generate_would_misread_it(verb, content, message, tmp_path, capsys):
    folder = save_with_tokenizer(tiny_model(**GPT2_VOCAB), tmp_path / "tiny")
    (folder / "generation_config.json").write_text(content)
    code, err = run_cli(capsys, *verb, folder, *(["--out", tmp_path / "out"] if verb[0] == "convert" else []))
    assert code == 2 and f"{folder}/{message}" in err, err


@pytest.mark.parametrize("model_type, safe", [("tinygpt", True), ("gpt2", True), ("tinygpt", False)])
def test_a_config_far_larger_than_its_weights_is_refused_before_it_is_built(model_type, safe, tmp_path, capsys):
    """transformers builds each tensor the checkpoint holds at another size at the config's size (at random) before it
    compares them: a config.json saying n_positions 2**23 allocated 1 GiB before the refusal, 2**30 ran out of memory
    naming no field. The safetensors header says what the checkpoint holds."""
    folder = tmp_path / model_type
    model = tiny_model(n_embd=32) if model_type == "tinygpt" else random_gpt2(n_embd=32)
    model.save_pretrained(folder)
    if not safe:  # a pickle (pytorch_model.bin, torch's zip format) is mapped, as safetensors' header is read
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "n_positions": 2**23}))
    code, err = run_cli(capsys, "generate", "hi", "--model", folder)
    assert code == 2 and f"{folder / 'config.json'} describes a model of 26" in err, err
    assert "are not these weights': fix config.json" in err
    assert ("transformer.wpe.weight is (" in err) == (model_type == "tinygpt")


def test_a_tinygpt_config_without_its_model_type_is_told_so(tiny_folder, capsys):
    """Its auto_map is the package's own: the fix is the model_type (the message said to remove the auto_map, and
    then that model_type None is no architecture)."""
    config = json.loads((tiny_folder / "config.json").read_text())
    del config["model_type"]
    (tiny_folder / "config.json").write_text(json.dumps(config))
    code, err = run_cli(capsys, "generate", "hi", "--model", tiny_folder)
    assert code == 2 and "model_type is None, but its auto_map names a tinygpt's classes: set model_type to" in err


@pytest.mark.parametrize("longest", [1e30, 1024.0])
def test_a_tokenizer_length_written_as_a_float_is_a_length(longest, tmp_path, capsys):
    """Many tokenizer_config.json files say 1e+30 for "no limit": generate read them before the check above, and does."""
    folder = save_with_tokenizer(tiny_model(**GPT2_VOCAB), tmp_path / "tiny")
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**settings, "model_max_length": longest}))
    code, err = run_cli(capsys, "generate", "hi", "--model", folder, "--max-new-tokens", 2, "--temperature", 0)
    assert code == 0, err


def test_generate_never_reads_a_shard_outside_the_folder(tmp_path, capsys):
    folder = tmp_path / "tiny"
    tiny_model(vocab_size=50257).save_pretrained(folder)
    (folder / "model.safetensors").rename(tmp_path / "outside.safetensors")
    index = {"weight_map": {"transformer.wte.weight": "../outside.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    code, err = run_cli(capsys, "generate", "hello", "--model", folder)
    assert code == 2 and "shard names must be files in the folder itself" in err


def test_a_fifo_in_a_tokenizer_folder_is_named_not_read(tmp_path, capsys):
    """Reading a FIFO blocks until someone writes to it: generate would hang for ever."""
    folder = tmp_path / "tiny"
    tiny_model(vocab_size=50257).save_pretrained(folder)
    gpt2_tokenizer().save_pretrained(folder)
    os.mkfifo(folder / "special_tokens_map.json")
    code, err = run_cli(capsys, "generate", "hello", "--model", folder, "--max-new-tokens", 2)
    assert code == 2 and "special_tokens_map.json is not a regular file" in err


def test_a_bad_config_field_names_the_folder_it_came_from(tmp_path, capsys):
    folder = tmp_path / "tiny"
    tiny_model().save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "n_head": [4]}))
    code, err = run_cli(capsys, "generate", "hello", "--model", folder)
    assert code == 2 and last_line(err).startswith(f"hf-tinygpt generate: error: {folder}: n_head must be")


def test_a_value_of_the_wrong_type_deep_in_transformers_ends_in_one_line(tmp_path, capsys):
    folder = tmp_path / "tiny"
    tiny_model(vocab_size=50257).save_pretrained(folder)
    gpt2_tokenizer().save_pretrained(folder)
    generation = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**generation, "eos_token_id": "x"}))
    code, err = run_cli(capsys, "generate", "hello", "--model", folder, "--max-new-tokens", 2, "--temperature", 0)
    assert code == 2 and last_line(err).startswith("hf-tinygpt generate: error: TypeError") and "Traceback" not in err


# ---- train: every number, file and setting is checked before anything is written -------------------------------------


@pytest.mark.parametrize("flag", ["--block-size", "--batch-size", "--save-every", "--eval-every", "--steps"])
def test_train_numbers_are_checked_before_anything_is_written(corpus, tmp_path, capsys, flag):
    code, err = run_cli(capsys, "train", "--train", corpus, "--out", tmp_path / "run", flag, 0)
    assert code == 2 and f"{flag} must be an integer >=" in err
    assert not (tmp_path / "run").exists()


def test_train_glob_cannot_reach_outside_the_train_folder(corpus, tmp_path, capsys):
    (tmp_path / "outside.txt").write_text("not for training " * 100)
    code, err = run_cli(
        capsys, "train", "--train", corpus, "--glob", "../*.txt", *SAVING_RUN, "--steps", 1, "--out", tmp_path / "run"
    )
    assert code == 2 and "--glob must be a pattern inside each --train folder" in err


def test_training_data_that_is_not_utf8_is_named(corpus, tmp_path, capsys):
    (corpus / "latin1.txt").write_bytes("Ophélie".encode("latin-1"))
    code, err = run_cli(capsys, "train", "--train", corpus, "--out", tmp_path / "run", *TINY_RUN, "--steps", 1)
    assert code == 2 and f"{corpus / 'latin1.txt'} is not UTF-8 text" in err
    assert not (tmp_path / "run").exists()


def test_a_binary_or_utf16_file_and_empty_training_text_are_named_as_what_they_are(tmp_path, capsys):
    """(A binary file was told to convert itself from latin-1, and empty training text "1 tokens do not fill one
    block".)"""
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)))
    (tmp_path / "notepad.txt").write_text("To be, or not to be", encoding="utf-16")
    (tmp_path / "empty.txt").write_text("")
    said = {}
    for name in ("binary.bin", "notepad.txt", "empty.txt"):
        args = ["train", "--train", tmp_path / name, *TINY_RUN, "--steps", 1, "--data-cache", tmp_path / "cache"]
        code, said[name] = run_cli(capsys, *args, "--out", tmp_path / "run")
        assert code == 2 and not (tmp_path / "run").exists()
    binary = "binary.bin is not UTF-8 text (byte 128: invalid start byte; a NUL byte at 0): a binary file, to leave out"
    assert binary in said["binary.bin"]
    assert "notepad.txt is not UTF-8 text (byte 0: invalid start byte; a NUL byte at 3)" in said["notepad.txt"]
    assert "iconv -f utf-16 -t utf-8" in said["notepad.txt"]
    assert f"the training data {tmp_path / 'empty.txt'} is empty: nothing to train on" in said["empty.txt"]
    # nanoGPT's prepare.py writes GPT-2 ids as uint16: such a file is named for what it is
    (tmp_path / "train.bin").write_bytes(array.array("H", [464, 13, 11, 262, 50256]).tobytes())
    args = ["train", "--train", tmp_path / "train.bin", *TINY_RUN, "--data-cache", tmp_path / "cache"]
    code, err = run_cli(capsys, *args, "--out", tmp_path / "run")
    assert code == 2 and "nanoGPT's train.bin and val.bin hold token ids: give the text prepare.py read" in err, err


def test_empty_validation_data_is_refused_before_training(corpus, tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    code, err = run_cli(
        capsys,
        "train",
        "--train",
        corpus,
        "--validation",
        tmp_path / "empty.txt",
        "--out",
        tmp_path / "run",
        *TINY_RUN,
        "--steps",
        1,
    )
    assert code == 2 and "empty.txt is empty" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--batch-size", "100000"], "--batch-size 100000 is more than the"),
        (["--glob", "/etc/*"], "--glob must be a pattern inside each --train folder"),
        (["--lr", "1e30"], "training diverged"),
        (["--report-to", "tensorbord"], "--report-to: tensorbord is not a tracker accelerate supports"),
        (["--revision", "v2"], "--revision is the revision of --init-from: set both"),
    ],
)
def test_train_names_what_would_exhaust_memory_crash_or_save_garbage(corpus, tmp_path, capsys, flags, message):
    code, err = run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--steps", 3, *flags, "--out", tmp_path / "run")
    assert code == 2 and message in err, err
    assert not (tmp_path / "run" / "model").exists()


def test_train_config_typos_are_named(corpus, tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"n_postions": 64}))
    code, err = run_cli(
        capsys, "train", "--train", corpus, "--config", tmp_path / "config.json", "--out", tmp_path / "run"
    )
    assert code == 2 and "n_postions is not a TinyGPTConfig field" in err
    # A vocabulary smaller than the tokenizer's failed at the first step, as a token id with no row.
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 10}))
    config = ("--config", tmp_path / "config.json", "--out", tmp_path / "run")
    code, err = run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--steps", 1, *config)
    assert code == 2 and "--config sets vocab_size 10, fewer than the tokenizer's 50257 tokens" in last_line(err)
    # A scheme's own fields are the config's too (the study's RoPE with NoPE layers, in the slow tier, needs them).
    from hf_tinygpt.train.settings import TrainingSettings

    rope, xpos = {"position_embedding_type": "rope"}, {"position_embedding_type": "xpos"}
    for fields in (rope | {"no_rope_layer_interval": 2}, xpos | {"xpos_scale_base": 64.0}):
        TrainingSettings(out=str(tmp_path / "run"), train=[str(corpus)], config=fields)
    # ... and checked with the settings, before any text is tokenized (a scheme's field without its scheme).
    with pytest.raises(ValueError, match="xpos_scale_base only applies to position_embedding_type='xpos'"):
        TrainingSettings(out=str(tmp_path / "run"), train=[str(corpus)], config={"xpos_scale_base": 64.0})


# ---- config files and verify-gpt2 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, message", [("{not json", "is not valid JSON"), ("[1, 2]", "holds a JSON list")])
def test_a_config_json_that_is_not_an_object_is_named(tmp_path, capsys, text, message):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(text)
    code, err = run_cli(capsys, "convert", tmp_path / "m", "--out", tmp_path / "out", "--tokenizer", "gpt2")
    assert code == 2 and "config.json" in err and message in err
    code, err = run_cli(capsys, "params", tmp_path / "m" / "config.json")
    assert code == 2 and str(tmp_path / "m" / "config.json") in err and message in err


def test_a_training_config_file_that_does_not_exist_names_its_flag(tmp_path, capsys):
    """(It was Python's own "[Errno 2] No such file or directory", naming neither the flag nor what was missing.)"""
    (tmp_path / "a.txt").write_text("to be, or not to be " * 40)
    args = ["train", "--train", tmp_path / "a.txt", *TINY_RUN, "--out", tmp_path / "run"]
    code, err = run_cli(capsys, *args, "--config", tmp_path / "nowhere.json")
    assert code == 2 and "nowhere.json (--config): no such file" in err and "Errno" not in err
    (tmp_path / "configs").mkdir()
    code, err = run_cli(capsys, *args, "--config", tmp_path / "configs")
    assert code == 2 and "configs (--config) is a folder, not a JSON file" in err
    code, err = run_cli(capsys, *args, "--lr", -1)
    assert code == 2 and "--lr must be a finite number > 0, got -1.0" in err


def test_a_run_folder_or_a_file_given_as_a_model_is_told_where_the_model_is(tiny_folder, tmp_path, capsys):
    """(A training run's folder was "no config.json (expected a model folder)", and a file "no such model folder",
    though it exists.)"""
    run = tmp_path / "run"
    shutil.copytree(tiny_folder, run / "model")
    code, err = run_cli(capsys, "params", run)
    assert code == 2 and f"no config.json (expected a model folder; a training run's is {run / 'model'})" in err
    (tmp_path / "notes.txt").write_text("a text")
    code, err = run_cli(capsys, "generate", "--model", tmp_path / "notes.txt", "Hello")
    assert code == 2 and "notes.txt is a file: give the model folder that holds config.json" in err


def test_a_config_nested_too_deep_to_parse_is_named(tmp_path, capsys):
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    code, err = run_cli(capsys, "params", tmp_path / "deep.json")
    assert code == 2 and "deep.json is not valid JSON" in err


def test_verify_gpt2_names_a_tinygpt_folder_and_an_empty_text(tiny_folder, gpt2_folder, capsys):
    code, err = run_cli(capsys, "verify-gpt2", tiny_folder)
    assert code == 2 and "verify-gpt2 compares GPT-2 checkpoints" in err
    assert "Loading" not in err  # it loads nothing it refuses
    code, err = run_cli(capsys, "verify-gpt2", gpt2_folder, "--text", "")
    assert code == 2 and "--text is empty" in err and "Loading" not in err


# ---- a malformed model folder, named by every verb that reads it -----------------------------------------------------


def malformed(folder: Path, how: str) -> Path:
    """A model folder broken in one of three ways: weights cut short, text as weights, an index without a weight map."""
    if how == "truncated weights":
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif how == "text as weights":
        (folder / "model.safetensors").write_text("not a safetensors file")
    elif how == "index without weight_map":
        (folder / "model.safetensors").unlink()
        (folder / "model.safetensors.index.json").write_text("{}")
    return folder


MALFORMED = ["truncated weights", "text as weights", "index without weight_map"]


@pytest.mark.parametrize("how", MALFORMED)
@pytest.mark.parametrize("verb", ["generate", "plot-positions", "convert --to gpt2", "push"])
def test_a_malformed_tinygpt_folder_is_named_by_every_verb(tiny_folder, tmp_path, capsys, how, verb):
    folder = malformed(tiny_folder, how)
    args = {
        "generate": ["generate", "hello", "--model", folder],
        "plot-positions": ["plot-positions", folder, "--out", tmp_path / "plots"],
        "convert --to gpt2": ["convert", folder, "--to", "gpt2", "--out", tmp_path / "out"],
        "push": ["push", folder, "me/tiny", "--dry-run", "--out", tmp_path / "out", "--tokenizer", "gpt2"],
    }[verb]
    code, err = run_cli(capsys, *args)
    assert code == 2 and err.strip().splitlines()[-1].startswith(f"hf-tinygpt {verb.split()[0]}: error: ")
    assert str(folder) in err


@pytest.mark.parametrize("how", MALFORMED)
def test_a_malformed_gpt2_folder_is_named_by_convert_and_verify(gpt2_folder, tmp_path, capsys, how):
    folder = malformed(gpt2_folder, how)
    for args in (["convert", folder, "--out", tmp_path / "out", "--tokenizer", "gpt2"], ["verify-gpt2", folder]):
        code, err = run_cli(capsys, *args)
        assert code == 2 and str(folder) in err.strip().splitlines()[-1], err


# ---- one line, whatever the name -------------------------------------------------------------------------------------


def test_an_error_names_a_file_with_a_newline_in_its_name_on_one_line(tmp_path, capsys):
    gpt2 = tmp_path / "gpt2"
    random_gpt2(**GPT2_VOCAB).save_pretrained(gpt2)
    out = tmp_path / "out"
    assert run_cli(capsys, "convert", gpt2, "--out", out, "--tokenizer", "gpt2")[0] == 0
    (out / "evil\nname").write_text("mine")
    code, err = run_cli(capsys, "convert", gpt2, "--out", out, "--tokenizer", "gpt2", "--force")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "'evil\\nname'" in err


# ---- Ctrl-C: one line, exit 130, nothing half-written ----------------------------------------------------------------


def interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_during_generate_ends_with_one_line(capsys, monkeypatch):
    monkeypatch.setattr("transformers.GenerationMixin.generate", interrupt)
    code, err = run_cli(capsys, "generate", "ROMEO:")
    assert code == 130 and last_line(err) == "hf-tinygpt generate: interrupted; nothing was left half-written"


def test_ctrl_c_during_convert_leaves_no_output_and_no_leftovers(gpt2_50257, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("hf_tinygpt.folders.model_folder.GenerationConfig.save_pretrained", interrupt)
    code, err = run_cli(capsys, "convert", gpt2_50257, "--out", tmp_path / "out", "--tokenizer", "gpt2")
    assert code == 130 and last_line(err) == "hf-tinygpt convert: interrupted; nothing was left half-written"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpt2"]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["hf-tinygpt", "python -m hf_tinygpt", "python -m hf_tinygpt.cli"])
def test_ctrl_c_while_the_command_starts_ends_with_one_line(tmp_path, command):
    """A fresh `hf-tinygpt` interrupted while it still imports torch and transformers, however it was started."""
    start = [str(Path(sys.executable).with_name("hf-tinygpt"))] if command == "hf-tinygpt" else [sys.executable, "-m"]
    process = subprocess.Popen(
        [*start, *command.split()[2:], "params", "hf_tinygpt/default_model"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPOSITORY,
    )
    maps = Path(f"/proc/{process.pid}/maps")
    while process.poll() is None and "libtorch" not in maps.read_text():  # hf_tinygpt imports torch after its handler
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGINT)
    _, err = process.communicate()
    assert process.returncode == 130 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
def test_ctrl_c_while_the_command_exits_ends_with_one_line(tmp_path):
    """`plot-positions` has written its pictures and Python is running its exit handlers (one made slow here):
    Ctrl-C then is one line and exit 130, not Python's "Exception ignored ... KeyboardInterrupt"."""
    script = textwrap.dedent("""
        import atexit, sys, time
        sys.argv = ["hf-tinygpt", "plot-positions", "alibi", "--out", sys.argv[1]]
        atexit.register(time.sleep, 30)  # registered first, so it runs last: Python still exiting
        from hf_tinygpt.cli.commands import main
        sys.exit(main())
    """)
    out = tmp_path / "pictures"
    process = subprocess.Popen([sys.executable, "-c", script, out], stderr=subprocess.PIPE, text=True, cwd=REPOSITORY)
    deadline = time.monotonic() + 240
    while process.poll() is None and not out.is_dir() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(2)  # past main's return, into the exit handlers
    os.kill(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130 and "Traceback" not in err and "Exception ignored" not in err, err
    assert last_line(err) == "hf-tinygpt: interrupted while exiting; the command had finished"
    assert (out / "alibi_bias.png").is_file()


# ---- the Hub's answers: one line, never the token -------------------------------------------------------------------


@pytest.mark.slow  # the command in a fresh interpreter: its stderr is all a user sees
def test_a_hub_error_while_loading_by_hub_id_ends_in_one_line_without_the_token(hub, tmp_path):
    """transformers wraps the Hub's answer in an OSError that quotes all of it, token and all, when the server puts
    the token in its answer: the command says status, endpoint and reason in one line, and the token nowhere."""
    from conftest import HUB_TOKEN, hub_subprocess_env
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.url, token=HUB_TOKEN)
    api.create_repo("tester/tiny")
    api.upload_folder(repo_id="tester/tiny", folder_path=save_with_tokenizer(text_model(), tmp_path / "tiny"))
    hub.failures["resolve:tokenizer.json"] = (403, "no: {token}\nBearer {token}", {"X-Request-Id": "{token}"})
    run = subprocess.run(
        [sys.executable, "-m", "hf_tinygpt.cli", "generate", "hi", "--model", "tester/tiny", "--token", HUB_TOKEN],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=hub_subprocess_env(hub, tmp_path),  # the token comes from --token only: huggingface_hub knows none
    )
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert re.search(r"HTTP 403 on (GET|HEAD) /tester/tiny/resolve/\w+/tokenizer.json: no: <redacted>", run.stderr)
    assert HUB_TOKEN not in run.stdout + run.stderr


# ---- options that do not apply to the input given are errors, not ignored -------------------------------------------

# A run's settings without a model shape (a run from --init-from takes the model's).
RUN_ONLY = "--block-size 16 --batch-size 2 --warmup-steps 1 --steps 1".split()


@pytest.mark.parametrize("verb", ["generate", "params", "plot-positions", "convert", "train"])
def test_a_hub_revision_given_with_a_local_folder_is_refused(verb, tiny_folder, corpus, tmp_path, capsys):
    argv = {
        "generate": ["generate", "hi", "--model", tiny_folder],
        "params": ["params", tiny_folder],
        "plot-positions": ["plot-positions", tiny_folder, "--out", tmp_path / "out"],
        "convert": ["convert", tiny_folder, "--to", "gpt2", "--out", tmp_path / "out"],
        "train": ["train", "--train", corpus, "--init-from", tiny_folder, *RUN_ONLY, "--out", tmp_path / "out"],
    }[verb]
    code, err = run_cli(capsys, *argv, "--revision", "v2")
    assert code == 2 and "--revision is a revision of a Hub repo, and " in last_line(err), err
    assert f"{tiny_folder} is a local folder" in last_line(err) or f"({tiny_folder}) is a local folder" in err
    assert not (tmp_path / "out").exists()


def test_a_shape_flag_given_with_init_from_is_named_as_the_flag(tiny_folder, corpus, tmp_path, capsys):
    """The model of --init-from fixes its shape: the fields set are named, not a --config the user never gave (nor a
    flag that did not set a config file's field)."""
    argv = ["train", "--train", corpus, "--init-from", tiny_folder, *RUN_ONLY, "--out", tmp_path / "out"]
    code, err = run_cli(capsys, *argv, "--n-layer", 3, "--position", "rope")
    said = (
        f"the model of --init-from ({tiny_folder}) fixes its shape, and the run's config sets n_layer, "
        "position_embedding_type: leave them out"
    )
    assert code == 2 and said in last_line(err) and "--config" not in err, err
    (tmp_path / "shape.json").write_text('{"n_positions": 32}')
    code, err = run_cli(capsys, *argv, "--config", tmp_path / "shape.json")
    assert code == 2 and "the run's config sets n_positions: leave it out" in last_line(err), err
    assert "--n-positions" not in err and not (tmp_path / "out").exists()


def test_training_from_an_int8_folder_is_refused_before_it_trains(corpus, tmp_path, capsys):
    """torchao's int8 weights cannot be trained: the run stopped after training with a NotImplementedError and no
    model written. Now it says so before anything runs."""
    import torch

    from hf_tinygpt import TinyGPTForCausalLM
    from hf_tinygpt.generate.text import int8_weight_only

    tiny_model(vocab_size=50257).save_pretrained(tmp_path / "float")
    int8 = TinyGPTForCausalLM.from_pretrained(
        tmp_path / "float", dtype=torch.bfloat16, quantization_config=int8_weight_only()
    )
    int8.save_pretrained(tmp_path / "int8")
    code, err = run_cli(
        capsys, "train", "--train", corpus, "--init-from", tmp_path / "int8", *RUN_ONLY, "--out", tmp_path / "run"
    )
    assert code == 2 and "Traceback" not in err
    assert f"{tmp_path / 'int8'} (--init-from) holds torchao weights" in last_line(err)
    assert not (tmp_path / "run").exists()


# ---- resources: running out says what was asked for and what to lower, in one line ----------------------------------


def test_a_model_bigger_than_the_memory_free_is_refused_before_it_is_made(corpus, tmp_path, capsys):
    """A billion learned positions (64 GB of weights, 1 TB with gradients and AdamW's moments): refused with the
    sizes before any of it is allocated, where the system would end the process without a word, OUT left behind."""
    code, err = run_cli(
        capsys, "train", "--train", corpus, *TINY_RUN, "--n-positions", 10**9, "--out", tmp_path / "run"
    )
    assert code == 2 and "parameters: they, their gradients and AdamW's moments need " in last_line(err), err
    assert "GiB free on " in last_line(err) and "; train a smaller model (--n-positions, --n-embd, --n-layer)" in err
    assert not (tmp_path / "run").exists()


def test_a_model_too_big_for_memory_says_what_it_needed_and_what_to_lower(corpus, tmp_path, capsys, monkeypatch):
    """A token table of 50,257 × 2^17 floats (24.5 GiB) with the address space held to 8 GiB more than this process
    maps: torch's allocator raised a 30-line traceback. (The check before the model is made is left out: the memory
    free, which it reads, is not what an address-space limit changes.)"""
    import resource

    monkeypatch.setattr("hf_tinygpt.train.state.check_it_fits", lambda config, device: None)

    shape = ["--n-embd", 2**17, "--n-head", 1, "--n-layer", 1, "--block-size", 16, "--batch-size", 2]
    argv = ["train", "--train", corpus, *shape, "--out", tmp_path / "run"]
    mapped = int(next(line for line in open("/proc/self/status") if line.startswith("VmSize:")).split()[1]) * 1024
    limits = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (mapped + 8 * 2**30, limits[1]))
    try:
        code, err = run_cli(capsys, *argv)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, limits)
    assert code == 2 and "Traceback" not in err and "alloc_cpu" not in err
    assert last_line(err) == (
        "hf-tinygpt train: error: out of memory: an allocation of 24.5 GiB failed; lower --batch-size or "
        "--block-size (raise --grad-accum to keep the batch), or train a smaller model"
    )
    assert not (tmp_path / "run" / "model").exists()


# ---- before the command can start: one line, not an import traceback -------------------------------------------------


def test_a_working_folder_deleted_before_the_start_is_named_in_one_line(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    command = Path(sys.executable).parent / "hf-tinygpt"  # the console script, as a user runs it
    script = f"import os, subprocess, sys; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r}); "
    script += f"sys.exit(subprocess.run([{str(command)!r}, 'generate', 'hi']).returncode)"
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 2 and run.stderr == (
        "hf-tinygpt: error: the working folder no longer exists (deleted or moved away): cd to a folder that does\n"
    )


def test_no_usable_temporary_folder_is_named_in_one_line(tmp_path):
    """As root every folder is writable, so Python's own search for one is told to find none."""
    script = "import runpy, sys, tempfile; tempfile._candidate_tempdir_list = lambda: ['/nonexistent']; "
    script += "sys.argv = ['hf-tinygpt', 'generate', 'hi']; runpy.run_module('hf_tinygpt', run_name='__main__')"
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 2 and run.stderr == (
        "hf-tinygpt: error: [Errno 2] No usable temporary directory found in ['/nonexistent']: set TMPDIR to a "
        "folder you can write\n"
    )


# ---- a second hostile pass: what waits forever, loops, or fails only after the work ------------------------------


def finishes(function, seconds=120):
    """`function()`'s result, or a failure if it is still running after `seconds` (a read that waits forever)."""
    import threading

    result = []
    worker = threading.Thread(target=lambda: result.append(function()), daemon=True)
    worker.start()
    worker.join(timeout=seconds)
    assert not worker.is_alive(), "still waiting"
    return result[0]


@pytest.mark.parametrize("option", ["--config", "--validation", "--train"])
def test_a_fifo_given_as_a_file_is_refused_instead_of_read_forever(option, corpus, tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    train = [] if option == "--train" else ["--train", corpus]
    argv = ["train", *train, option, fifo, *TINY_RUN, "--out", tmp_path / "run"]
    code, err = finishes(lambda: run_cli(capsys, *argv))
    assert code == 2 and "is not a regular file (a FIFO, device or socket?)" in last_line(err), err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("field", ["train", "validation"])
def test_a_text_file_that_became_a_fifo_after_the_settings_were_checked_is_refused_when_read(field, corpus, tmp_path):
    from hf_tinygpt.train.loop import train
    from hf_tinygpt.train.settings import TrainingSettings

    text = tmp_path / "text.txt"
    text.write_text("To be, or not to be, that is the question. " * 40)
    paths = {"train": [str(text)]} if field == "train" else {"train": [str(corpus)], "validation": [str(text)]}
    shape = {"n_layer": 1, "n_embd": 16, "n_head": 2}
    settings = TrainingSettings(out=str(tmp_path / "run"), **paths, config=shape, block_size=16, batch_size=2, steps=1)
    text.unlink()
    os.mkfifo(text)

    def refused():
        try:
            train(settings)
        except ValueError as error:
            return str(error)

    assert "is not a regular file" in finishes(refused, seconds=60)
    assert not (tmp_path / "run").exists()


def test_a_tokenizer_file_that_is_a_fifo_is_named_not_skipped_for_the_bundled_one(tmp_path, capsys):
    folder = save_with_tokenizer(text_model(), tmp_path / "model")
    (folder / "tokenizer.json").unlink()
    os.mkfifo(folder / "tokenizer.json")
    code, err = finishes(lambda: run_cli(capsys, "generate", "hi", "--model", folder, "--max-new-tokens", 2))
    assert code == 2 and f"{folder / 'tokenizer.json'} is not a regular file" in last_line(err), err


@pytest.mark.parametrize("where", ["--train", "--out"])
def test_a_loop_of_symbolic_links_is_named_in_one_line(where, corpus, tmp_path, capsys):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    argv = {"--train": ["--train", loop, "--out", tmp_path / "run"], "--out": ["--train", corpus, "--out", loop]}
    code, err = run_cli(capsys, "train", *argv[where], *TINY_RUN)
    assert code == 2 and "Traceback" not in err
    assert f"{loop} (" in last_line(err) and "is a loop of symbolic links" in last_line(err)


def test_a_path_that_is_not_utf8_is_refused_before_training_not_after(corpus, tmp_path, capsys):
    """The card records the paths as UTF-8 text: the run trained, then failed writing it, and lost the model."""
    out = os.fsdecode(os.fsencode(str(tmp_path)) + b"/out\xff")
    code, err = run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--out", out)
    assert code == 2 and "--out: " in last_line(err) and "is not valid UTF-8" in last_line(err)
    assert not os.path.lexists(out)


def test_converting_a_model_of_a_short_context_to_gpt2_verifies_it_within_that_context(tmp_path, capsys):
    """The sample the export is verified on has 22 tokens: a model of 16 positions failed with an IndexError."""
    tiny_model(n_positions=16).save_pretrained(tmp_path / "short")
    code, err = run_cli(capsys, "convert", tmp_path / "short", "--to", "gpt2", "--out", tmp_path / "gpt2")
    assert code == 0, err
    assert "verify: max |Δlogits|" in err


def test_a_card_quotes_a_folder_name_that_holds_code_as_a_string_literal(corpus, tmp_path, capsys):
    import ast

    out = tmp_path / 'q"+__import__("os").getlogin()+"'
    assert run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--steps", 1, "--out", out)[0] == 0
    card = (out / "model" / "README.md").read_text()
    line = next(line for line in card.splitlines() if line.startswith("generator = pipeline("))
    call = ast.parse(line).body[0].value
    [model] = [keyword.value for keyword in call.keywords if keyword.arg == "model"]
    assert isinstance(model, ast.Constant) and model.value == str(out / "model")


def test_a_config_with_the_rope_parameters_the_readme_documents_trains(corpus, tmp_path, capsys):
    config = tmp_path / "rope.json"
    config.write_text(
        json.dumps(
            {"position_embedding_type": "rope", "rope_parameters": {"rope_type": "default", "rope_theta": 500.0}}
        )
    )
    code, err = run_cli(
        capsys, "train", "--train", corpus, "--config", config, *TINY_RUN, "--steps", 1, "--out", tmp_path / "run"
    )
    assert code == 0, err
    saved = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
    assert saved["rope_parameters"]["rope_theta"] == 500.0


@pytest.mark.parametrize("verb", ["plot-positions", "generate"])
@pytest.mark.parametrize("seed", ["-1", str(10**26)])
def test_a_seed_numpy_cannot_take_is_refused_naming_the_flag(verb, seed, tmp_path, capsys):
    """(generate said "`seed` must be None (a fresh seed) or ...": a None the command line cannot type.)"""
    with pytest.raises(SystemExit) as exit:
        run_cli(
            capsys, verb, *(["rope", "--out", tmp_path / "plots"] if verb == "plot-positions" else []), "--seed", seed
        )
    assert exit.value.code == 2
    assert f"--seed: must be an integer from 0 to 4,294,967,295, got {seed}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"out": None}, "`TrainingSettings.out` must be a path, got None"),
        ({"out": "run", "config": [1]}, "`TrainingSettings.config` must be a dict of TinyGPTConfig fields, got [1]"),
    ],
)
def test_training_settings_of_the_wrong_type_are_named(settings, message, corpus):
    from hf_tinygpt.train.settings import TrainingSettings

    with pytest.raises(ValueError, match=re.escape(message)):
        TrainingSettings(train=[str(corpus)], **settings)


def test_a_prompt_that_is_not_text_is_named_as_such():
    from hf_tinygpt.generate.text import generate_text

    with pytest.raises(ValueError, match="`prompt` must be the text to continue, a str, got int"):
        generate_text(5, text_model(), gpt2_tokenizer())


def test_a_failed_verb_leaves_no_folder_it_made_to_hold_its_output(tmp_path, capsys):
    code, err = run_cli(capsys, "convert", tmp_path / "nowhere", "--out", tmp_path / "new" / "a" / "out")
    assert code == 2 and "nowhere" in last_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"src": 5}, "`src` must be a path or Hub id, got 5"),
        ({"staging": None}, "`staging` must be a path or Hub id, got None"),
        ({"verify_tolerance": "x"}, "`verify_tolerance` must be a number >= 0, got 'x'"),
        ({"license": ""}, "`license` must be a licence id such as 'mit', got ''"),
    ],
)
def test_staging_for_the_hub_names_an_argument_of_the_wrong_type(arguments, message, tiny_folder, tmp_path):
    from hf_tinygpt.hub.publish import stage_for_hub

    given = {"src": str(tiny_folder), "staging": str(tmp_path / "staged"), "repo_id": "me/tiny", **arguments}
    with pytest.raises(ValueError, match=re.escape(message)):
        stage_for_hub(given.pop("src"), given.pop("staging"), given.pop("repo_id"), tokenizer="gpt2", **given)
    assert not (tmp_path / "staged").exists()


def test_generate_text_names_a_model_that_is_neither_loaded_nor_a_path():
    from hf_tinygpt.generate.text import generate_text

    with pytest.raises(ValueError, match="`model` must be a loaded model, a folder or Hub id, or None"):
        generate_text("hi", 123, gpt2_tokenizer())


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--dropout", "1.5"], "--dropout must be a number in [0, 1), got 1.5"),
        (["--n-layer", "0"], "n_layer must be a positive integer below 2^31, got 0"),
        (["--n-head", "3"], "n_embd (64) must be divisible by n_head (3)"),
    ],
)
def test_train_checks_the_models_shape_before_it_reads_the_data(flags, message, tmp_path, capsys):
    """A shape the model cannot take was found after the training text was tokenized (minutes for a large one), and
    `--dropout 1.5` was named resid_pdrop, a field the user never gave. Here the text cannot be read at all, so the
    shape's error must come first."""
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00\x01" * 64)
    code, err = run_cli(capsys, "train", "--train", tmp_path / "binary.txt", *flags, "--out", tmp_path / "out")
    assert code == 2 and last_line(err) == f"hf-tinygpt train: error: {message}", err
    assert not (tmp_path / "out").exists()


def test_a_warmup_as_long_as_the_run_is_said(corpus, tmp_path, capsys):
    """(`--steps 50` kept the default 100 warmup steps without a word: the rate never reached --lr, nor decayed.)"""
    argv = ["train", "--train", corpus, *TINY_RUN, "--data-cache", tmp_path / "cache"]
    long = ["--steps", 3, "--warmup-steps", 100, "--save-every", 1, "--out", tmp_path / "long"]
    code, err = run_cli(capsys, *argv, *long)
    said = "hf-tinygpt train: warning: --warmup-steps (100) >= --steps (3): the learning rate never reaches --lr"
    assert code == 0 and said in err, err
    code, err = run_cli(capsys, *argv, "--steps", 3, "--warmup-steps", 2, "--out", tmp_path / "short")
    assert code == 0 and "--warmup-steps (2)" not in err and "never reaches" not in err, err
    # A resumed run keeps its warmup (a changed one is refused), so it is not told to lower it again.
    code, err = run_cli(capsys, *argv, *long, "--resume")
    assert code == 0 and "never reaches" not in err, err
    # One step at the start of a warmup is taken at a rate of 0: it trains nothing.
    code, err = run_cli(capsys, *argv, "--steps", 1, "--warmup-steps", 1, "--out", tmp_path / "one")
    assert code == 0 and "--warmup-steps (1) >= --steps (1)" in err, err
