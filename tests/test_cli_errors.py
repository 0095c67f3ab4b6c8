"""Every mistake ends in one line that names the file or flag and the fix, never a traceback or a wrong output.

Each case below once ended in a raw traceback, an unclear error, or exit 0 with something silently wrong written.
Ctrl-C anywhere ends with one line and exit 130, leaving nothing half-written.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import random_gpt2, run_cli, tiny_model

from hf_tinygpt import gpt2_tokenizer
from hf_tinygpt.checkpoints.outputs import seal

TINY_RUN = [
    "--n-layer",
    "1",
    "--n-embd",
    "16",
    "--n-head",
    "2",
    "--block-size",
    "16",
    "--batch-size",
    "2",
    "--warmup-steps",
    "1",
    "--eval-every",
    "100",
    "--save-every",
    "2",
]


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


@pytest.fixture
def gpt2_folder(tmp_path):
    folder = tmp_path / "gpt2"
    random_gpt2(vocab_size=50257).save_pretrained(folder)
    return folder


# ---- tokenizers: a folder that is not one, or one transformers cannot read -------------------------------------


@pytest.mark.parametrize("verb", ["convert", "push"])
def test_a_model_folder_given_as_tokenizer_is_not_taken_for_an_empty_one(verb, gpt2_folder, tmp_path, capsys):
    """transformers builds a BPE tokenizer with an empty vocabulary from a folder without tokenizer files."""
    other = tmp_path / "other_gpt2"
    random_gpt2(seed=1).save_pretrained(other)
    args = {"convert": ["convert", gpt2_folder], "push": ["push", gpt2_folder, "me/tiny", "--dry-run"]}[verb]
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
    ],
)
def test_train_names_a_tokenizer_it_cannot_use(make, message, corpus, tmp_path, capsys):
    tokenizer = make(tmp_path / "tok")
    code, err = run_cli(
        capsys, "train", "--train", corpus, *TINY_RUN, "--steps", 1, "--tokenizer", tokenizer, "--out", tmp_path / "run"
    )
    assert code == 2 and str(tokenizer) in last_line(err) and message in last_line(err), err
    assert not (tmp_path / "run").exists()


# ---- generate: other architectures, and files outside the folder --------------------------------------------------


def test_generate_runs_a_gpt_neox_export_of_a_rope_model(tmp_path, capsys):
    rope = tmp_path / "rope"
    tiny_model("rope", vocab_size=50257).save_pretrained(rope)
    assert run_cli(capsys, "convert", rope, "--to", "gpt_neox", "--out", tmp_path / "neox")[0] == 0
    code, out = run_cli(capsys, "generate", "hello", "--model", tmp_path / "neox", "--max-new-tokens", 3)
    assert code == 0, out


def test_generate_says_which_architectures_it_runs(tmp_path, capsys):
    folder = tmp_path / "custom"
    tiny_model().save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "my_custom_gpt", "auto_map": None}))
    code, err = run_cli(capsys, "generate", "hello", "--model", folder)
    assert code == 2 and "model_type 'my_custom_gpt' is not an architecture transformers knows" in err


def test_generate_never_reads_a_shard_outside_the_folder(tmp_path, capsys):
    folder = tmp_path / "tiny"
    tiny_model(vocab_size=50257).save_pretrained(folder)
    (folder / "model.safetensors").rename(tmp_path / "outside.safetensors")
    index = {"weight_map": {"transformer.wte.weight": "../outside.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    code, err = run_cli(capsys, "generate", "hello", "--model", folder)
    assert code == 2 and "shard names must be files in the folder itself" in err


def test_train_glob_cannot_reach_outside_the_train_folder(corpus, tmp_path, capsys):
    (tmp_path / "outside.txt").write_text("not for training " * 100)
    code, err = run_cli(
        capsys, "train", "--train", corpus, "--glob", "../*.txt", *TINY_RUN, "--steps", 1, "--out", tmp_path / "run"
    )
    assert code == 2 and "--glob must be a pattern inside each --train folder" in err


# ---- resuming: unreadable progress, a finished run, another spelling of --out --------------------------------------


def train_run(capsys, corpus, out, *extra):
    return run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--steps", 4, "--out", out, *extra)


@pytest.mark.parametrize("progress", ["[]", '{"step": 4}', "{not json"])
def test_resume_names_a_checkpoint_changed_since_it_was_written(progress, corpus, tmp_path, capsys):
    """An edited progress.json (or any file) is neither read nor replaced: the run stops, naming it."""
    run = tmp_path / "run"
    assert train_run(capsys, corpus, run)[0] == 0
    (run / "checkpoints" / "step-000004" / "progress.json").write_text(progress)
    code, err = train_run(capsys, corpus, run, "--resume")
    assert code == 2 and "checkpoints/step-000004/progress.json (changed since hf-tinygpt wrote it)" in err
    assert (run / "checkpoints" / "step-000004" / "progress.json").read_text() == progress


def test_resume_skips_a_checkpoint_of_ours_that_does_not_read(corpus, tmp_path, capsys):
    """One that reads back as written and still does not load (another version of the tool wrote it, say)."""
    run = tmp_path / "run"
    assert train_run(capsys, corpus, run)[0] == 0
    newest = run / "checkpoints" / "step-000004"
    (newest / "progress.json").write_text("[]")
    seal(newest, "checkpoint")  # as if written so
    code, err = train_run(capsys, corpus, run, "--resume")
    assert code == 0, err
    assert f"skipping {newest}" in err and "(step 2)" in err


def test_resuming_a_finished_run_says_so(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert train_run(capsys, corpus, run)[0] == 0
    code, out = train_run(capsys, corpus, run, "--resume")
    assert code == 0 and "already finished at step 4" in out


def test_resume_names_a_checkpoint_past_steps(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert train_run(capsys, corpus, run)[0] == 0
    progress = json.loads((run / "checkpoints" / "step-000004" / "progress.json").read_text())
    (run / "checkpoints" / "step-000004" / "progress.json").write_text(json.dumps({**progress, "step": 9}))
    seal(run / "checkpoints" / "step-000004", "checkpoint")  # as a run with more steps would have written it
    code, err = train_run(capsys, corpus, run, "--resume")
    assert code == 2 and "is at step 9, past --steps 4" in last_line(err)


def test_resume_takes_the_same_folder_spelled_differently(corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_cli(capsys, "train", "--train", "data", *TINY_RUN, "--steps", 2, "--out", "run")[0] == 0
    code, err = run_cli(capsys, "train", "--train", "./data/", *TINY_RUN, "--steps", 4, "--out", "./run", "--resume")
    assert code == 2 and "changed: steps" in err  # only what changed is named
    code, err = run_cli(capsys, "train", "--train", "./data/", *TINY_RUN, "--steps", 2, "--out", "./run", "--resume")
    assert code == 0 and "already finished" in err


# ---- Ctrl-C: one line, exit 130, nothing half-written -------------------------------------------------------------


def interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_during_generate_ends_with_one_line(capsys, monkeypatch):
    monkeypatch.setattr("transformers.GenerationMixin.generate", interrupt)
    code, err = run_cli(capsys, "generate", "ROMEO:")
    assert code == 130 and last_line(err) == "hf-tinygpt generate: interrupted; nothing was left half-written"


def test_ctrl_c_during_convert_leaves_no_output_and_no_leftovers(gpt2_folder, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("hf_tinygpt.checkpoints.convert.GenerationConfig.save_pretrained", interrupt)
    code, err = run_cli(capsys, "convert", gpt2_folder, "--out", tmp_path / "out", "--tokenizer", "gpt2")
    assert code == 130 and last_line(err) == "hf-tinygpt convert: interrupted; nothing was left half-written"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpt2"]


@pytest.mark.slow
def test_ctrl_c_while_the_command_starts_ends_with_one_line(tmp_path):
    """A fresh `hf-tinygpt` interrupted while it still imports torch and transformers."""
    script = Path(sys.executable).with_name("hf-tinygpt")
    process = subprocess.Popen(
        [script, "params", "hf_tinygpt/default_model"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    for _ in range(6000):  # until torch is being loaded (hf_tinygpt imports it after installing its handler)
        time.sleep(0.01)
        if "libtorch" in Path(f"/proc/{process.pid}/maps").read_text():
            break
    os.kill(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


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


def test_an_error_names_a_file_with_a_newline_in_its_name_on_one_line(tmp_path, capsys):
    gpt2 = tmp_path / "gpt2"
    random_gpt2().save_pretrained(gpt2)
    out = tmp_path / "out"
    assert run_cli(capsys, "convert", gpt2, "--out", out, "--tokenizer", "gpt2")[0] == 0
    (out / "evil\nname").write_text("mine")
    code, err = run_cli(capsys, "convert", gpt2, "--out", out, "--tokenizer", "gpt2", "--force")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "'evil\\nname'" in err


def test_a_value_of_the_wrong_type_deep_in_transformers_ends_in_one_line(tmp_path, capsys):
    folder = tmp_path / "tiny"
    tiny_model(vocab_size=50257).save_pretrained(folder)
    gpt2_tokenizer().save_pretrained(folder)
    generation = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**generation, "eos_token_id": "x"}))
    code, err = run_cli(capsys, "generate", "hello", "--model", folder, "--max-new-tokens", 2, "--temperature", 0)
    assert code == 2 and last_line(err).startswith("hf-tinygpt generate: error: TypeError") and "Traceback" not in err
