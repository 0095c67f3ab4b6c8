"""Nothing lost, nothing run, every bad input named.

Every verb that writes a folder goes through `hf_tinygpt.checkpoints.outputs`: OUT is refused before any work if
writing it could destroy an input or something of the user's, it is built beside OUT and swapped in with one rename,
and two writers cannot both win. The CLI cases run in-process through `main([...])`; the kill-at-every-step cases (each a
fresh interpreter) are in `test_kills.py`.
"""

import json
import os
import pickle
import re
import resource
import shutil
import signal
import socket
import threading
from pathlib import Path

import pytest
import torch
from conftest import random_gpt2, run_cli, tiny_model
from safetensors.torch import load_file, save_file

from hf_tinygpt import TinyGPTConfig
from hf_tinygpt.checkpoints.outputs import MANIFEST, _new_staging
from hf_tinygpt.checkpoints.reading import load_strictly
from hf_tinygpt.model import BUNDLE


@pytest.fixture
def gpt2_folder(tmp_path):
    folder = tmp_path / "models" / "gpt2"
    random_gpt2().save_pretrained(folder)
    return folder


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` and its bytes (manifests left out: what the tool wrote, not what it holds)."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


# ---- --force never deletes what it should not ------------------------------------------------------------------


def test_force_refuses_the_working_folder_which_holds_the_source(gpt2_folder, capsys, monkeypatch):
    project = gpt2_folder.parent
    (project / "notes.txt").write_text("mine")
    before = tree(project)
    monkeypatch.chdir(project)
    code, err = run_cli(capsys, "convert", "gpt2", "--out", ".", "--force", "--tokenizer", "gpt2")
    assert code == 2 and "is the working folder" in err
    assert tree(project) == before


def test_force_refuses_an_output_that_contains_the_source(gpt2_folder, capsys):
    models = gpt2_folder.parent
    random_gpt2(seed=1).save_pretrained(models / "other_model")
    before = tree(models)
    code, err = run_cli(capsys, "convert", gpt2_folder, "--out", models, "--force", "--tokenizer", "gpt2")
    assert code == 2 and f"contains the input {gpt2_folder}" in err
    assert tree(models) == before


def test_force_refuses_a_folder_with_files_hf_tinygpt_does_not_write(gpt2_folder, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "my_thesis.tex").write_text("years of work")
    code, err = run_cli(capsys, "convert", gpt2_folder, "--out", out, "--force", "--tokenizer", "gpt2")
    assert code == 2 and "my_thesis.tex" in err and "not proven to be an earlier output" in err
    assert (out / "my_thesis.tex").read_text() == "years of work"


def test_force_replaces_an_earlier_output_and_keeps_no_leftovers(gpt2_folder, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(capsys, "convert", gpt2_folder, "--out", out, "--tokenizer", "gpt2")[0] == 0
    code, err = run_cli(capsys, "convert", gpt2_folder, "--out", out, "--tokenizer", "gpt2")
    assert code == 2 and "pass --force" in err
    random_gpt2(seed=7).save_pretrained(gpt2_folder)
    assert run_cli(capsys, "convert", gpt2_folder, "--out", out, "--tokenizer", "gpt2", "--force")[0] == 0
    written = load_file(out / "model.safetensors")["transformer.wte.weight"]
    assert torch.equal(written, random_gpt2(seed=7).transformer.wte.weight)
    assert leftovers(tmp_path) == []


def test_train_refuses_to_write_its_run_into_its_training_data(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / "play.txt").write_text("to be or not to be " * 200)
    code, err = run_cli(capsys, "train", "--train", data, "--out", data, "--force", "--steps", 1)
    assert code == 2 and "is the input" in err
    assert (data / "play.txt").exists()


def test_push_dry_run_force_refuses_a_run_folder(tmp_path, capsys):
    run = tmp_path / "run"
    tiny_model().save_pretrained(run / "model")
    (run / "checkpoints" / "step-000100").mkdir(parents=True)
    before = tree(run)
    code, err = run_cli(
        capsys, "push", run / "model", "me/tiny", "--dry-run", "--out", run, "--force", "--tokenizer", "gpt2"
    )
    assert code == 2 and f"contains the input {run / 'model'}" in err
    other = tmp_path / "other"
    (other / "checkpoints").mkdir(parents=True)
    code, err = run_cli(
        capsys, "push", run / "model", "me/tiny", "--dry-run", "--out", other, "--force", "--tokenizer", "gpt2"
    )
    assert code == 2 and "checkpoints" in err and "not proven to be an earlier output" in err
    assert tree(run) == before and (other / "checkpoints").is_dir()


# ---- atomic replacement, locking, leftovers, permissions ---------------------------------------------------------


def test_an_error_while_writing_leaves_the_old_output_whole(tmp_path):
    from hf_tinygpt.checkpoints.outputs import output_folder

    out = tmp_path / "out"
    with output_folder(out) as staging:
        (staging / "config.json").write_text('{"model_type": "tinygpt"}')
    before = tree(out)
    with pytest.raises(RuntimeError, match="boom"), output_folder(out, force=True) as staging:
        (staging / "config.json").write_text("half")
        raise RuntimeError("boom")
    assert tree(out) == before and leftovers(tmp_path) == []


def test_an_output_that_appears_meanwhile_is_not_replaced_without_force(tmp_path):
    from hf_tinygpt.checkpoints.outputs import output_folder

    out = tmp_path / "out"
    with pytest.raises(FileExistsError, match="appeared while this command ran"), output_folder(out) as staging:
        (staging / "config.json").write_text("{}")
        out.mkdir()
        (out / "theirs.txt").write_text("someone else's")
    assert tree(out) == {"theirs.txt": b"someone else's"} and leftovers(tmp_path) == []


def test_two_writers_of_one_output_cannot_both_win(tmp_path):
    from hf_tinygpt.checkpoints.outputs import output_folder

    out = tmp_path / "out"
    with output_folder(out) as staging:
        (staging / "config.json").write_text('{"model_type": "tinygpt"}')
        with pytest.raises(FileExistsError, match="being written by another hf-tinygpt process"):
            with output_folder(out, force=True):
                pass
    assert tree(out) == {"config.json": b'{"model_type": "tinygpt"}'}
    with output_folder(out, force=True) as staging:  # the lock was released
        (staging / "config.json").write_text('{"model_type": "gpt2"}')
    assert leftovers(tmp_path) == []


def test_leftovers_of_a_killed_writer_are_cleaned_and_an_old_folder_put_back(tmp_path):
    from hf_tinygpt.checkpoints.outputs import clean_leftovers, output_folder

    out = tmp_path / "out"
    _new_staging(out, "model")  # killed while building: `.out.partial-PID-HEX`, its manifest already inside
    with output_folder(tmp_path / "earlier") as staging:
        (staging / "config.json").write_text("old")
    (tmp_path / "earlier").rename(tmp_path / ".out.old-123-0123abcd")  # killed between the two fallback renames
    clean_leftovers(out)
    assert tree(out) == {"config.json": b"old"} and leftovers(tmp_path) == []


def test_output_folders_get_the_umasks_permissions(tmp_path, gpt2_folder, capsys):
    previous = os.umask(0o022)
    try:
        assert run_cli(capsys, "convert", gpt2_folder, "--out", tmp_path / "out", "--tokenizer", "gpt2")[0] == 0
    finally:
        os.umask(previous)
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o755
    assert {path.stat().st_mode & 0o777 for path in (tmp_path / "out").iterdir()} == {0o644}  # weights too


def test_a_full_disk_names_the_output_and_leaves_nothing(gpt2_folder, tmp_path, capsys):
    """RLIMIT_FSIZE makes every write past 64 KB fail with EFBIG, as a full disk fails with ENOSPC."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))
    try:
        code, err = run_cli(capsys, "convert", gpt2_folder, "--out", tmp_path / "out", "--tokenizer", "gpt2")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert code == 2 and f"writing {tmp_path / 'out'} failed (File too large)" in err
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_a_symlink_or_file_as_output_is_never_replaced(tmp_path):
    from hf_tinygpt.checkpoints.outputs import check_output

    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    for name in ("file", "link"):
        with pytest.raises(FileExistsError, match="not a folder"):
            check_output(tmp_path / name, force=True)


# ---- nothing run: resuming reads no pickle that can run code ----------------------------------------------------

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
]


class RunsCode:
    """A pickle that runs code when unpickled with weights_only=False: it creates `path`."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def test_resume_runs_no_code_from_a_crafted_run_folder(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["--train", corpus, *TINY_RUN, "--steps", 3, "--save-every", 1, "--out", out]
    assert run_cli(capsys, "train", *args)[0] == 0
    newest = out / "checkpoints" / "step-000003"
    ran = tmp_path / "code_ran"
    for name in ["training_state.pt", "rng_state_0.pt"]:
        with open(newest / name, "wb") as f:
            pickle.dump({"optimizer": RunsCode(ran)}, f)
    with open(newest / "custom_checkpoint_0.pkl", "wb") as f:  # what accelerate's load_state would unpickle
        pickle.dump(RunsCode(ran), f)
    code, err = run_cli(capsys, "train", *args, "--resume")
    assert not ran.exists()
    assert code == 2 and "step-000003/custom_checkpoint_0.pkl" in err  # before any training
    assert "step-000003/training_state.pt (changed since hf-tinygpt wrote it)" in err
    shutil.rmtree(newest)  # the user moves the crafted checkpoint away
    code, err = run_cli(capsys, "train", *args, "--resume")
    assert not ran.exists()
    assert code == 0, err
    assert "resumed from" in err and "step-000002 (step 2)" in err


def test_resume_falls_back_past_a_checkpoint_cut_short_by_a_kill(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["--train", corpus, *TINY_RUN, "--steps", 4, "--save-every", 1, "--out", out]
    assert run_cli(capsys, "train", *args)[0] == 0
    checkpoints = out / "checkpoints"
    (checkpoints / "step-000004" / "progress.json").unlink()  # as a kill during an older save left it
    _new_staging(checkpoints / "step-000005", "checkpoint")  # a save killed midway: never renamed into place
    code, err = run_cli(capsys, "train", *args, "--resume")
    assert code == 0, err
    assert f"resumed from {checkpoints / 'step-000003'} (step 3)" in err
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-000003", "step-000004"]
    assert (checkpoints / "step-000004" / "progress.json").is_file()


# ---- push stages exactly what the model needs; a bad connection ends with a clear error --------------------------


def test_push_stages_the_installed_code_and_nothing_else(tmp_path):
    import hf_tinygpt
    from hf_tinygpt.checkpoints.hub import stage_for_hub

    folder = tmp_path / "model"
    tiny_model(vocab_size=50257).save_pretrained(folder)  # the bundled GPT-2 tokenizer's ids fit
    (folder / "my_private_notes.py").write_text("HF_TOKEN = 'hf_secret'")
    (folder / "modeling_tinygpt.py").write_text("# an old or edited copy of the model code\n")
    files = stage_for_hub(str(folder), tmp_path / "staged", "me/tiny", tokenizer="gpt2")
    assert "my_private_notes.py" not in files
    package = Path(hf_tinygpt.__file__).parent / "model"
    code_files = sorted(name for name in files if name.endswith(".py"))
    assert code_files == sorted(BUNDLE)
    for name in code_files:
        assert (tmp_path / "staged" / name).read_bytes() == (package / name).read_bytes()
    config = json.loads((tmp_path / "staged" / "config.json").read_text())
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_tinygpt.TinyGPTForCausalLM"


class BrokenServer:
    """A loopback TCP server that accepts connections and then never answers (`hang`) or hangs up (`drop`)."""

    def __init__(self, mode: str):
        self.mode, self.connections = mode, 0
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.held = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.connections += 1
            if self.mode == "drop":
                connection.recv(65536)
                connection.close()
            else:
                self.held.append(connection)

    def close(self):
        self.socket.close()
        for connection in self.held:
            connection.close()


@pytest.mark.parametrize("mode", ["hang", "drop"])
def test_a_hung_or_dropped_connection_ends_the_push_with_a_clear_error(mode, tmp_path, online):
    from hf_tinygpt.checkpoints.hub import push_to_hub

    folder = tmp_path / "model"
    tiny_model(vocab_size=50257).save_pretrained(folder)
    server = BrokenServer(mode)
    outcome = {}

    def push():
        try:
            push_to_hub(str(folder), "me/tiny", token="hf_test", endpoint=server.url, tokenizer="gpt2", timeout=0.5)
        except Exception as error:
            outcome["error"] = error

    thread = threading.Thread(target=push, daemon=True)
    thread.start()
    thread.join(timeout=300)  # a guard against hanging forever, not a measure of speed
    server.close()
    assert not thread.is_alive(), "push never gave up"
    error = outcome["error"]
    assert isinstance(error, ConnectionError) and f"pushing to {server.url} failed" in str(error)
    assert server.connections >= 1


# ---- silent acceptance: every bad value is refused by name -------------------------------------------------------


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(layer_norm_epsilon=0.0), "layer_norm_epsilon must be a finite number > 0"),
        (dict(layer_norm_epsilon=float("nan")), "layer_norm_epsilon must be a finite number > 0"),
        (dict(position_embedding_type="rope", rope_theta=float("inf")), "rope_theta must be a finite number"),
        (
            dict(position_embedding_type="rope", rope_parameters={"rope_type": "linear", "factor": float("inf")}),
            r"rope_parameters\['factor'\] must be a finite number",
        ),
        (dict(n_layer=2.5), "n_layer must be a positive integer below 2.31, got 2.5"),
        (dict(n_head="4"), "n_head must be a positive integer below 2.31, got .4."),
        (dict(resid_pdrop="0.1"), r"resid_pdrop must be in \[0, 1\)"),
        (dict(initializer_range=float("inf")), "initializer_range must be a finite number"),
    ],
)
def test_config_values_that_would_give_nan_or_crash_are_named(fields, message):
    with pytest.raises(ValueError, match=message):
        TinyGPTConfig(**fields)


def test_a_tinygpt_folder_with_unexpected_tensors_is_refused(tmp_path):
    """A learned model whose config was edited to rope would silently drop its trained `wpe`."""
    tiny_model("learned").save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["position_embedding_type"] = "rope"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"Unexpected: \['transformer.wpe.weight'\]"):
        load_strictly(tmp_path)


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_convert_refuses_non_finite_weights(gpt2_folder, tmp_path, capsys, value):
    tensors = load_file(gpt2_folder / "model.safetensors")
    tensors["transformer.h.1.mlp.c_fc.weight"][3, 4] = value
    save_file(tensors, gpt2_folder / "model.safetensors", metadata={"format": "pt"})
    code, err = run_cli(capsys, "convert", gpt2_folder, "--out", tmp_path / "out", "--tokenizer", "gpt2")
    assert code == 2 and "inf or NaN values: transformer.h.1.mlp.c_fc.weight" in err
    assert not (tmp_path / "out").exists()


def test_convert_refuses_integer_tensors_in_a_weights_file_by_name(gpt2_folder, tmp_path, capsys):
    """(A GPT-2 folder is read by transformers' GPT2LMHeadModel, which casts tensors to the model's dtype.)"""
    tensors = load_file(gpt2_folder / "model.safetensors")
    tensors["transformer.h.0.ln_1.bias"] = torch.zeros(32, dtype=torch.int64)
    save_file(tensors, gpt2_folder / "model.safetensors", metadata={"format": "pt"})
    code, err = run_cli(
        capsys, "convert", gpt2_folder / "model.safetensors", "--out", tmp_path / "out", "--tokenizer", "gpt2"
    )
    assert code == 2 and "not floating-point weights: transformer.h.0.ln_1.bias (torch.int64)" in err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--temperature", "-1"], "--temperature must be 0 .greedy decoding. or a finite number >= 0.001"),
        (["--temperature", "nan"], "--temperature must be 0 .greedy decoding. or a finite number >= 0.001"),
        (["--temperature", "1e-300"], "--temperature must be 0 .greedy decoding. or a finite number >= 0.001"),
        (["--top-p", "1.5"], r"--top-p must be in \(0, 1\]"),
        (["--top-k", "-3"], "--top-k must be an integer >= 0"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be an integer >= 1"),
        (["--max-new-tokens", "500"], "past this model's context of 128"),
    ],
)
def test_generate_refuses_sampling_options_it_would_ignore_or_misread(capsys, flags, message):
    code, err = run_cli(capsys, "generate", "ROMEO:", *flags)
    assert code == 2 and re.search(message, err), err


@pytest.mark.parametrize("prompt, message", [("", "the prompt is empty"), ("caf\udce9", "not valid UTF-8")])
def test_generate_names_an_empty_or_undecodable_prompt(capsys, prompt, message):
    """A Latin-1 byte on a UTF-8 command line reaches Python as a lone surrogate (\\udce9)."""
    code, err = run_cli(capsys, "generate", prompt)
    assert code == 2 and message in err


# ---- raw tracebacks become named problems ------------------------------------------------------------------------


def test_a_nanogpt_checkpoint_that_refuses_to_unpickle_is_named(tmp_path, capsys):
    checkpoint = tmp_path / "ckpt.pt"
    ran = tmp_path / "code_ran"
    torch.save({"model": {}, "model_args": {}, "trap": RunsCode(ran)}, checkpoint)
    code, err = run_cli(capsys, "convert", checkpoint, "--out", tmp_path / "out", "--tokenizer", "gpt2")
    assert code == 2 and f"{checkpoint}: cannot read it as a checkpoint" in err and not ran.exists()


@pytest.mark.parametrize("text, message", [("{not json", "is not valid JSON"), ("[1, 2]", "holds a JSON list")])
def test_a_config_json_that_is_not_an_object_is_named(tmp_path, capsys, text, message):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(text)
    code, err = run_cli(capsys, "convert", tmp_path / "m", "--out", tmp_path / "out", "--tokenizer", "gpt2")
    assert code == 2 and "config.json" in err and message in err
    code, err = run_cli(capsys, "params", tmp_path / "m" / "config.json")
    assert code == 2 and str(tmp_path / "m" / "config.json") in err and message in err


@pytest.mark.parametrize("flag", ["--block-size", "--batch-size", "--save-every", "--eval-every", "--steps"])
def test_train_numbers_are_checked_before_anything_is_written(corpus, tmp_path, capsys, flag):
    code, err = run_cli(capsys, "train", "--train", corpus, "--out", tmp_path / "run", flag, 0)
    assert code == 2 and f"{flag} must be an integer >=" in err
    assert not (tmp_path / "run").exists()


def test_training_data_that_is_not_utf8_is_named(corpus, tmp_path, capsys):
    (corpus / "latin1.txt").write_bytes("Ophélie".encode("latin-1"))
    code, err = run_cli(capsys, "train", "--train", corpus, "--out", tmp_path / "run", *TINY_RUN, "--steps", 1)
    assert code == 2 and f"{corpus / 'latin1.txt'} is not UTF-8 text" in err
    assert not (tmp_path / "run").exists()


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


# ---- what a hostile-input probe of every verb found (220 inputs): each now a named error -------------------------


@pytest.fixture
def tiny_folder(tmp_path):
    folder = tmp_path / "tiny"
    tiny_model().save_pretrained(folder)
    return folder


def test_push_never_copies_a_file_an_index_names_outside_the_folder(tiny_folder, tmp_path, capsys):
    (tmp_path / "victim.txt").write_text("someone's file")
    (tiny_folder / "model.safetensors").unlink()
    (tiny_folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "../victim.txt"}}))
    code, err = run_cli(
        capsys, "push", tiny_folder, "me/tiny", "--dry-run", "--out", tmp_path / "staged", "--tokenizer", "gpt2"
    )
    assert code == 2 and "shard names must be files in the folder itself" in err
    assert not (tmp_path / "staged").exists() and (tmp_path / "victim.txt").read_text() == "someone's file"


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(activation_function=["gelu"]), "activation_function=.'gelu'. is not one of"),
        (dict(position_embedding_type="rope", rope_parameters=[1, 2]), "rope_parameters must be a dict"),
        (dict(dtype="float99"), "dtype must name a floating-point torch dtype"),
        (dict(dtype="int8"), "dtype must name a floating-point torch dtype"),
        (dict(vocab_size=10**400), "vocab_size must be a positive integer below 2.31"),
        (dict(vocab_size=2**30, n_embd=2**20, n_head=1), "more than any machine holds"),
        (dict(bos_token_id="x"), "bos_token_id must be a token id"),
        (dict(tie_word_embeddings="no"), "tie_word_embeddings must be true or false"),
    ],
)
def test_config_values_of_the_wrong_type_are_named(fields, message):
    with pytest.raises(ValueError, match=message):
        TinyGPTConfig(**fields)


def test_a_config_nested_too_deep_to_parse_is_named(tmp_path, capsys):
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    code, err = run_cli(capsys, "params", tmp_path / "deep.json")
    assert code == 2 and "deep.json is not valid JSON" in err


def malformed(folder: Path, how: str) -> Path:
    """A model folder broken in one of the ways the probe found to end in a raw traceback."""
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


def weights_file(tmp_path, tensors) -> Path:
    path = tmp_path / "weights.bin"
    torch.save(tensors, path)
    return path


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: weights_file(p, [torch.zeros(2)]), "holds list, not a state dict"),
        (lambda p: weights_file(p, {3: torch.zeros(2)}), "holds dict, not a state dict"),
        (lambda p: weights_file(p, {"wte.weight": torch.zeros(5)}), "not a GPT-2 checkpoint"),
        (lambda p: nanogpt_file(p, model={7: torch.zeros(2)}), "'model' must map tensor names to tensors"),
        (lambda p: nanogpt_file(p, vocab_size=None), "model_args\\['vocab_size'\\] is None, not an integer"),
    ],
)
def test_malformed_weights_files_are_named(tmp_path, capsys, make, message):
    code, err = run_cli(capsys, "convert", make(tmp_path), "--out", tmp_path / "out", "--tokenizer", "gpt2")
    assert code == 2 and re.search(message, err), err


def nanogpt_file(tmp_path, model=None, **args) -> Path:
    model_args = {"vocab_size": 64, "block_size": 16, "n_embd": 8, "n_layer": 1, "n_head": 2, **args}
    torch.save(
        {"model": model or {"transformer.wte.weight": torch.zeros(64, 8)}, "model_args": model_args},
        tmp_path / "ckpt.pt",
    )
    return tmp_path / "ckpt.pt"


def test_export_to_gpt2_verifies_a_folder_without_a_tokenizer(tiny_folder, tmp_path, capsys):
    code, err = run_cli(capsys, "convert", tiny_folder, "--to", "gpt2", "--out", tmp_path / "gpt2", "--verify")
    assert code == 0, err
    assert "verify: max |Δlogits|" in err


def test_generate_names_a_gpt2_folder_whose_vocabulary_the_bundled_tokenizer_overflows(gpt2_folder, capsys):
    code, err = run_cli(capsys, "generate", "hello", "--model", gpt2_folder)
    assert code == 2 and "it needs its own tokenizer" in err


def test_generate_refuses_non_finite_weights(tiny_folder, capsys):
    tensors = load_file(tiny_folder / "model.safetensors")
    tensors["transformer.wte.weight"][0, 0] = float("nan")
    save_file(tensors, tiny_folder / "model.safetensors", metadata={"format": "pt"})
    code, err = run_cli(capsys, "generate", "hello", "--model", tiny_folder)
    assert code == 2 and "inf or NaN values: lm_head.weight, transformer.wte.weight" in err  # tied: one tensor


def test_verify_gpt2_names_a_tinygpt_folder_and_an_empty_text(tiny_folder, gpt2_folder, capsys):
    code, err = run_cli(capsys, "verify-gpt2", tiny_folder)
    assert code == 2 and "verify-gpt2 compares GPT-2 checkpoints" in err
    code, err = run_cli(capsys, "verify-gpt2", gpt2_folder, "--text", "")
    assert code == 2 and "--text is empty" in err


def test_plots_refuse_more_positions_than_a_picture_holds(tmp_path, capsys):
    code, err = run_cli(capsys, "plot-positions", "alibi", "--out", tmp_path / "plots", "--max-positions", 10**9)
    assert code == 2 and "cannot plot 1000000000 positions" in err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--batch-size", "100000"], "--batch-size 100000 is more than the"),
        (["--glob", "/etc/*"], "--glob must be a pattern inside each --train folder"),
        (["--lr", "1e30"], "training diverged"),
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


def test_resume_refuses_a_folder_that_is_not_a_run(corpus, tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "myfile.txt").write_text("mine")
    code, err = run_cli(
        capsys, "train", "--train", corpus, *TINY_RUN, "--steps", 1, "--out", tmp_path / "mine", "--resume"
    )
    assert code == 2 and "myfile.txt" in err and "is not a training run of hf-tinygpt" in err
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["myfile.txt"]
