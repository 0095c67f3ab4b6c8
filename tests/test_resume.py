"""`hf-tinygpt train --resume`: it goes on from the newest complete checkpoint of its own and ends as an uninterrupted
run would; it reads no pickle that can run code, neither reads nor replaces a file changed since it was written,
deletes nothing it cannot prove it wrote, and names what stops it (a folder that is not a run, changed settings,
a finished run) in one line. (A run killed while saving a checkpoint, resumed, is in test_kills.py.)"""

import json
import os
import pickle
import shutil
import signal
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import TINY_RUN, TINY_TRAINING, RunsCode, copied_manifest_folder, last_line, run_cli
from huggingface_hub import ModelCard
from safetensors.torch import load_file

from hf_tinygpt.folders.outputs import MANIFEST, _new_staging, seal
from hf_tinygpt.train.loop import batch_indices

# A run of two steps with a checkpoint after each.
TWO_STEPS = [*TINY_RUN, "--steps", "2", "--save-every", "1"]
# A checkpoint every two steps.
EVERY_TWO = [*TINY_RUN, "--save-every", "2"]


def train_run(capsys, corpus, out, *extra):
    return run_cli(capsys, "train", "--train", corpus, *EVERY_TWO, "--steps", 4, "--out", out, *extra)


def unfinished(out: Path):
    """A finished run made one that stopped before its end (a finished one is not trained again: it says so)."""
    shutil.rmtree(out / "model")
    (out / "summary.json").unlink()


# ---- going on where a run stopped ------------------------------------------------------------------------------------


def test_ctrl_c_saves_a_checkpoint_and_resume_matches_an_uninterrupted_run(plays, tmp_path, cli, monkeypatch):
    """A real SIGINT, sent while step 7 is being prepared: the step finishes, a checkpoint is saved, exit 130. Dropout
    is on, so resuming must restore the RNG state too, not only weights, optimizer and schedule."""
    from hf_tinygpt.train import loop as training

    args = [
        "--train",
        plays,
        "--validation",
        plays / "held_out.txt",
        *TINY_TRAINING,
        "--dropout",
        "0.1",
        "--steps",
        20,
        "--save-every",
        1000,
        "--eval-every",
        1000,
    ]
    straight = cli("train", *args, "--out", tmp_path / "straight")
    assert straight.returncode == 0, straight.stderr[-3000:]

    def interrupted_at_step_7(step, *rest):
        if step == 7:
            os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends; training's own handler receives it
        return batch_indices(step, *rest)

    monkeypatch.setattr(training, "batch_indices", interrupted_at_step_7)
    cut = cli("train", *args, "--out", tmp_path / "cut")
    monkeypatch.undo()
    assert cut.returncode == 130 and "checkpoint saved at step 8" in cut.stderr, cut.stderr[-3000:]
    assert [p.name for p in (tmp_path / "cut" / "checkpoints").iterdir()] == ["step-000008"]
    assert not (tmp_path / "cut" / "model").exists()

    changed = cli("train", *args, "--out", tmp_path / "cut", "--resume", "--lr", "0.5")
    assert changed.returncode == 2 and "changed: --lr 0.001 → 0.5 (it started as: hf-tinygpt train" in changed.stderr
    assert "Give them as they were, or start a new run" in changed.stderr  # a run cut short has no model to go on from
    resumed = cli("train", *args, "--out", tmp_path / "cut", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout
    ours = load_file(tmp_path / "cut" / "model" / "model.safetensors")
    reference = load_file(tmp_path / "straight" / "model" / "model.safetensors")
    assert ours.keys() == reference.keys()
    assert all(torch.equal(ours[key], reference[key]) for key in ours)

    def losses(run):  # the summary's history, from which the curve and the model folder's history are drawn
        history = json.loads((tmp_path / run / "summary.json").read_text())["history"]
        return [(row["step"], row["train_loss"]) for row in history]

    assert losses("cut") == losses("straight")  # the whole run's, not only what came after resuming

    def command(run):  # the recipe a card publishes: the command that started the run, not the one that resumed it
        return ModelCard.load(tmp_path / run / "model" / "README.md").data.tinygpt["training"]["command"]

    assert "--resume" not in command("cut") and command("cut").replace("cut", "straight") == command("straight")


def test_resume_falls_back_past_a_checkpoint_cut_short_by_a_kill(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["--train", corpus, *TINY_RUN, "--steps", 4, "--save-every", 1, "--out", out]
    assert run_cli(capsys, "train", *args)[0] == 0
    checkpoints = out / "checkpoints"
    (checkpoints / "step-000004" / "progress.json").unlink()  # as a kill during an older save left it
    _new_staging(checkpoints / "step-000005", "checkpoint")  # a save killed midway: never renamed into place
    unfinished(out)
    code, err = run_cli(capsys, "train", *args, "--resume")
    assert code == 0, err
    assert f"resumed from {checkpoints / 'step-000003'} (step 3)" in err
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-000003", "step-000004"]
    assert (checkpoints / "step-000004" / "progress.json").is_file()


def test_resume_skips_a_checkpoint_of_ours_that_does_not_read(corpus, tmp_path, capsys):
    """One that reads back as written and still does not load (another version of the tool wrote it, say)."""
    run = tmp_path / "run"
    assert train_run(capsys, corpus, run)[0] == 0
    newest = run / "checkpoints" / "step-000004"
    (newest / "progress.json").write_text("[]")
    seal(newest, "checkpoint")  # as if written so
    unfinished(run)
    code, err = train_run(capsys, corpus, run, "--resume")
    assert code == 0, err
    assert f"skipping {newest}" in err and "(step 2)" in err


@pytest.mark.parametrize("state", ["not a pickle", "another model's optimizer"])
def test_a_checkpoint_that_does_not_load_leaves_nothing_of_itself_in_the_run(state, corpus, tmp_path, capsys):
    """Its weights were loaded before its training state failed to read: a run that then found no checkpoint to
    resume from trained from step 0 with those weights, not the ones it starts with."""
    run, fresh = tmp_path / "run", tmp_path / "fresh"
    assert train_run(capsys, corpus, run)[0] == 0
    for step in ("step-000002", "step-000004"):
        if state == "not a pickle":
            (run / "checkpoints" / step / "training_state.pt").write_bytes(b"not a pickle")
        else:  # it reads, and its parameter groups are not this model's
            saved = torch.load(run / "checkpoints" / step / "training_state.pt", weights_only=True)
            saved["optimizer"]["param_groups"][0]["params"] = [0]
            torch.save(saved, run / "checkpoints" / step / "training_state.pt")
        seal(run / "checkpoints" / step, "checkpoint")  # as if written so
    unfinished(run)
    code, err = train_run(capsys, corpus, run, "--resume")
    assert code == 0 and err.count("skipping") == 2 and "resumed from" not in err
    assert train_run(capsys, corpus, fresh)[0] == 0
    resumed, started = (load_file(folder / "model" / "model.safetensors") for folder in (run, fresh))
    assert all(torch.equal(resumed[key], started[key]) for key in started)


def test_a_checkpoint_without_an_untied_head_is_skipped(corpus, tmp_path, capsys):
    """Only a tied head may be missing from a checkpoint's weights (one tensor, saved under one of its two names):
    an untied one would be left where the run started it."""
    from safetensors.torch import save_file

    from hf_tinygpt.train.loop import train
    from hf_tinygpt.train.settings import TrainingSettings

    config = {"n_layer": 1, "n_embd": 16, "n_head": 2, "tie_word_embeddings": False}
    run = tmp_path / "run"
    settings = TrainingSettings(out=str(run), train=[str(corpus)], config=config, block_size=16, batch_size=2)
    settings = replace(settings, steps=2, save_every=1, warmup_steps=1)
    train(settings)
    for step in ("step-000001", "step-000002"):
        weights = load_file(run / "checkpoints" / step / "model.safetensors")
        save_file(
            {key: value for key, value in weights.items() if key != "lm_head.weight"},
            run / "checkpoints" / step / "model.safetensors",
        )
        seal(run / "checkpoints" / step, "checkpoint")  # as if written so
    unfinished(run)
    capsys.readouterr()
    train(replace(settings, resume=True))
    err = capsys.readouterr().err
    assert err.count("its weights are not this model's") == 2 and "resumed from" not in err


def test_resuming_a_finished_run_says_so(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert train_run(capsys, corpus, run)[0] == 0
    code, out = train_run(capsys, corpus, run, "--resume")
    assert code == 0 and "already finished at step 4" in out


def test_resuming_a_finished_run_removes_none_of_its_checkpoints(corpus, tmp_path, capsys):
    """One without its progress.json is taken for a save a kill cut short and removed, when a run is to go on; a
    finished run's was removed while resuming it said "nothing to do"."""
    run = tmp_path / "run"
    assert train_run(capsys, corpus, run)[0] == 0
    (run / "checkpoints" / "step-000004" / "progress.json").unlink()
    code, out = train_run(capsys, corpus, run, "--resume")
    assert code == 0 and "already finished at step 4" in out
    assert (run / "checkpoints" / "step-000004" / "model.safetensors").is_file()


def test_resuming_a_finished_run_whose_last_checkpoint_is_older_trains_nothing_again(corpus, tmp_path, capsys):
    """A checkpoint every three steps, four steps: the finished run's newest checkpoint is step 3. Resuming it says it
    finished and leaves its model as it was, instead of training step 4 again and writing the model anew."""
    run = tmp_path / "run"
    args = ["train", "--train", corpus, *TINY_RUN, "--save-every", 3, "--steps", 4, "--out", run]
    assert run_cli(capsys, *args)[0] == 0
    weights = run / "model" / "model.safetensors"
    before = weights.stat().st_mtime_ns, weights.read_bytes()
    code, err = run_cli(capsys, *args, "--resume")
    assert code == 0 and "already finished at step 4" in err and "resumed from" not in err
    assert (weights.stat().st_mtime_ns, weights.read_bytes()) == before


def test_resuming_a_finished_run_without_a_checkpoint_is_refused_and_keeps_its_model(corpus, tmp_path, capsys):
    """Four steps, no checkpoint (one every 100): nothing records the settings the run had, so `--resume` with others
    (another scheme here) must not start over and replace the finished model; `--force` is what trains again."""
    run = tmp_path / "run"
    args = ["train", "--train", corpus, *TINY_RUN, "--save-every", 100, "--steps", 4, "--out", run]
    assert run_cli(capsys, *args)[0] == 0
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    code, err = run_cli(capsys, *args, "--position", "rope", "--resume")
    assert code == 2 and "finished at step 4 and kept no checkpoint" in last_line(err) and "--force" in err
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert run_cli(capsys, *args, "--position", "rope", "--force")[0] == 0


def test_resuming_a_folder_that_does_not_exist_is_refused_by_name(corpus, tmp_path, capsys):
    """(A mistyped `--out` with `--resume` started a run from step 0 there without a word.)"""
    code, err = train_run(capsys, corpus, tmp_path / "mistyped", "--resume")
    assert code == 2 and "mistyped (--out): no such run folder, so nothing to resume; leave --resume out" in err
    assert not (tmp_path / "mistyped").exists()


def test_resume_and_force_at_once_are_refused(corpus, tmp_path, capsys):
    """(`--force` was dropped without a word: the run resumed.)"""
    run = tmp_path / "run"
    assert train_run(capsys, corpus, run)[0] == 0
    code, err = train_run(capsys, corpus, run, "--resume", "--force")
    assert code == 2 and "--resume and --force are both set" in err, err


def test_a_run_without_held_out_text_resumes_whatever_its_held_out_settings_were():
    """(A run saved with --eval-batch-size or --validation-tokens and no --validation, which were ignored then and are
    refused now, could not be resumed: given again they are refused, left out they differ from the checkpoint's.)"""
    from hf_tinygpt.train.run_folder import changed_settings

    saved = {"validation": [], "eval_batch_size": 7, "validation_tokens": 50, "steps": 4}
    now = {"validation": [], "eval_batch_size": 4, "validation_tokens": None, "steps": 4}
    assert changed_settings(saved, now) == []
    held = {"validation": ["held_out.txt"]}
    assert [name for name, *_ in changed_settings(saved | held, now | held)] == ["eval_batch_size", "validation_tokens"]


def test_resume_takes_the_same_folder_spelled_differently(corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_cli(capsys, "train", "--train", "data", *EVERY_TWO, "--steps", 2, "--out", "run")[0] == 0
    code, err = run_cli(capsys, "train", "--train", "./data/", *EVERY_TWO, "--steps", 4, "--out", "./run", "--resume")
    assert code == 2 and "changed: --steps 2 → 4 (" in err  # only what changed is named
    assert "Give them as they were, or train on from its model in a new run (--init-from)" in err  # it has one
    code, err = run_cli(capsys, "train", "--train", "./data/", *EVERY_TWO, "--steps", 2, "--out", "./run", "--resume")
    assert code == 0 and "already finished" in err


def test_resume_refuses_training_text_that_changed_since_the_checkpoint(corpus, tmp_path, capsys):
    """Even at the same size and time (`cp -p`, `rsync -t`): the run would go on with other data than it began on."""
    run = tmp_path / "run"
    assert train_run(capsys, corpus, run)[0] == 0
    text = corpus / "a.txt"
    before = text.stat()
    text.write_text(text.read_text().replace("question", "qvestion"))
    os.utime(text, ns=(before.st_atime_ns, before.st_mtime_ns))
    code, err = train_run(capsys, corpus, run, "--resume")
    assert code == 2, err
    assert f"--resume: the data changed since {run / 'checkpoints' / 'step-000004'} was saved: {text} (train)" in err


# ---- what stops it, named in one line --------------------------------------------------------------------------------


def test_resume_refuses_a_folder_that_is_not_a_run(corpus, tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "myfile.txt").write_text("mine")
    code, err = run_cli(
        capsys, "train", "--train", corpus, *TINY_RUN, "--steps", 1, "--out", tmp_path / "mine", "--resume"
    )
    assert code == 2 and "myfile.txt" in err and "is not a training run of hf-tinygpt" in err
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["myfile.txt"]


def test_resume_names_a_checkpoint_past_steps(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert train_run(capsys, corpus, run)[0] == 0
    progress = json.loads((run / "checkpoints" / "step-000004" / "progress.json").read_text())
    (run / "checkpoints" / "step-000004" / "progress.json").write_text(json.dumps({**progress, "step": 9}))
    seal(run / "checkpoints" / "step-000004", "checkpoint")  # as a run with more steps would have written it
    code, err = train_run(capsys, corpus, run, "--resume")
    assert code == 2 and "is at step 9, past --steps 4" in last_line(err)


# ---- nothing run: it reads no pickle that can run code ---------------------------------------------------------------


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
    unfinished(out)
    code, err = run_cli(capsys, "train", *args, "--resume")
    assert not ran.exists()
    assert code == 0, err
    assert "resumed from" in err and "step-000002 (step 2)" in err


# ---- nothing lost: it neither reads, replaces nor deletes what it cannot prove it wrote ------------------------------


@pytest.mark.parametrize("progress", ["[]", '{"step": 4}', "{not json"])
def test_resume_names_a_checkpoint_changed_since_it_was_written(progress, corpus, tmp_path, capsys):
    """An edited progress.json (or any file) is neither read nor replaced: the run stops, naming it."""
    run = tmp_path / "run"
    assert train_run(capsys, corpus, run)[0] == 0
    (run / "checkpoints" / "step-000004" / "progress.json").write_text(progress)
    code, err = train_run(capsys, corpus, run, "--resume")
    assert code == 2 and "checkpoints/step-000004/progress.json (changed since hf-tinygpt wrote it)" in err
    assert (run / "checkpoints" / "step-000004" / "progress.json").read_text() == progress


@pytest.mark.parametrize("edited", ["summary.json", "checkpoints/step-000002/training_state.pt"])
def test_resume_neither_overwrites_nor_deletes_a_file_edited_since(edited, corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run)[0] == 0
    shutil.rmtree(run / "model")  # as if killed before the final model: resume would write summary.json again
    (run / "checkpoints" / "step-000002" / "progress.json").unlink()  # as if cut short: resume removes such a step
    with open(run / edited, "ab") as f:
        f.write(b"my edit")
    before = (run / edited).read_bytes()
    code, err = run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run, "--resume")
    assert code == 2 and f"{edited} (changed since hf-tinygpt wrote it)" in err
    assert (run / edited).read_bytes() == before


def test_resume_deletes_no_user_file_in_checkpoints(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run)[0] == 0
    (run / "checkpoints" / "my-step-by-step-guide.txt").write_text("how I did it")
    code, err = run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run, "--resume")
    assert code == 2 and "checkpoints/my-step-by-step-guide.txt" in err
    assert (run / "checkpoints" / "my-step-by-step-guide.txt").read_text() == "how I did it"


def test_resume_refuses_a_symlinked_checkpoints_folder(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run)[0] == 0
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "step-000009").mkdir(parents=True)  # no progress.json: what resume once deleted as cut short
    (elsewhere / "step-000009" / "mine.txt").write_text("mine")
    for checkpoint in (run / "checkpoints").iterdir():
        checkpoint.rename(elsewhere / checkpoint.name)
    (run / "checkpoints").rmdir()
    (run / "checkpoints").symlink_to(elsewhere)
    code, err = run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run, "--resume")
    assert code == 2 and "checkpoints (a symbolic link)" in err
    assert (elsewhere / "step-000009" / "mine.txt").read_text() == "mine"


def test_resume_cleans_up_nothing_a_forged_manifest_points_outside_the_run(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run)[0] == 0
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years")  # no progress.json: what resume removes from a checkpoint of ours
    manifest = json.loads((run / MANIFEST).read_text())
    manifest["outputs"].append("checkpoints/../../victim")
    (run / MANIFEST).write_text(json.dumps(manifest))
    assert run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run, "--resume")[0] == 0
    assert (victim / "thesis.tex").read_text() == "years"


def test_resume_keeps_a_folder_in_checkpoints_named_like_a_leftover(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run)[0] == 0
    backup = run / "checkpoints" / ".mybackup.partial-1-deadbeef"
    copied_manifest_folder(backup, run / "model")
    code, err = run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run, "--resume")
    assert code == 2 and "checkpoints/.mybackup.partial-1-deadbeef/" in err
    assert (backup / "precious.txt").read_text() == "mine"


def test_resume_goes_on_past_a_file_killed_before_its_rename_and_removes_it(corpus, tmp_path, capsys):
    """A recorded file (summary.json, loss.png) is written beside its place, then renamed: a kill between the two
    leaves the whole new file under its temporary name, which the manifest proves ours by its contents."""
    run = tmp_path / "run"
    assert run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run)[0] == 0
    leftover = run / ".summary.json.partial-1-deadbeef"
    os.rename(run / "summary.json", leftover)
    code, err = run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run, "--resume")
    assert code == 0, err
    assert (run / "summary.json").is_file() and not leftover.exists()


def test_resume_goes_on_past_a_file_cut_short_by_a_kill_while_it_was_written(corpus, tmp_path, capsys, monkeypatch):
    """A kill in the middle of writing summary.json's temporary file leaves part of it: the manifest listed that
    file's name before it was written, so it is ours whatever it holds, and the next write removes it."""
    from hf_tinygpt.folders.outputs import read_manifest

    run = tmp_path / "run"
    assert run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run)[0] == 0
    os.remove(run / "summary.json")

    def killed(self, data):
        if not self.name.startswith(".summary.json.partial-"):
            return self.write_bytes_as_it_was(data)
        self.write_bytes_as_it_was(data[:7])
        raise KeyboardInterrupt

    monkeypatch.setattr("pathlib.Path.write_bytes_as_it_was", Path.write_bytes, raising=False)
    monkeypatch.setattr("pathlib.Path.write_bytes", killed)
    assert run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run, "--resume")[0] == 130
    monkeypatch.undo()
    [leftover] = run.glob(".summary.json.partial-*")
    assert leftover.stat().st_size == 7
    code, err = run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run, "--resume")
    assert code == 0, err
    assert (run / "summary.json").is_file() and not leftover.exists()
    assert not [name for name in read_manifest(run)["files"] if ".partial-" in name]


def test_an_empty_folder_named_like_a_recorded_files_leftover_does_not_stop_its_next_write(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run)[0] == 0
    os.remove(run / "summary.json")
    (run / ".summary.json.partial-1-deadbeef").mkdir()  # an empty staging folder of ours, by its name
    code, err = run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run, "--resume")
    assert code == 0, err
    assert (run / "summary.json").is_file()


def test_resume_keeps_a_file_named_like_a_leftover_that_is_not_a_recorded_version(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run)[0] == 0
    mine = run / ".summary.json.partial-1-deadbeef"
    mine.write_text("my notes")
    code, err = run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run, "--resume")
    assert code == 2 and ".summary.json.partial-1-deadbeef" in err
    assert mine.read_text() == "my notes"


def test_a_checkpoint_from_before_a_setting_existed_resumes_with_that_settings_default():
    """A checkpoint records the settings of its day; one added since (`grad_accum`) had its default then, so only
    a run that changes it from the default is a changed run."""
    from dataclasses import asdict

    from hf_tinygpt.train.run_folder import changed_settings
    from hf_tinygpt.train.settings import TrainingSettings

    saved = asdict(TrainingSettings(out="run", train=["data"]))
    del saved["grad_accum"]
    assert changed_settings(saved, asdict(TrainingSettings(out="run", train=["data"]))) == []
    changed = changed_settings(saved, asdict(TrainingSettings(out="run", train=["data"], grad_accum=2)))
    assert changed == [("grad_accum", 1, 2)]


@pytest.mark.parametrize("kind", ["checkpoint", "model"])
def test_resume_deletes_no_user_file_in_a_folder_that_carries_a_staging_marker(kind, corpus, tmp_path, capsys):
    """A staging folder as a killed save leaves it (its marker, nothing sealed) holding a file no writer of that kind
    makes: the clean-up removed it, file and all. Only what writers of its kind write may go."""
    run = tmp_path / "run"
    assert run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run)[0] == 0
    marked = _new_staging(run / "checkpoints" / "step-000009", kind)
    (marked / "thesis.tex").write_text("years")
    code, err = run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run, "--resume")
    assert code == 2 and f"checkpoints/{marked.name}/" in err
    assert (marked / "thesis.tex").read_text() == "years"


def test_a_save_killed_midway_is_still_cleaned_up_before_resuming(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run)[0] == 0
    marked = _new_staging(run / "checkpoints" / "step-000009", "checkpoint")
    shutil.copyfile(run / "checkpoints" / "step-000002" / "model.safetensors", marked / "model.safetensors")
    code, err = run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run, "--resume")
    assert code == 0, err
    assert not marked.exists()


def test_a_run_whose_folder_vanishes_saves_its_model_elsewhere_and_says_where_it_stopped(
    corpus, tmp_path, capsys, monkeypatch
):
    """The run folder deleted while step 3 is prepared: the run lost everything with only "[Errno 2]"."""
    from hf_tinygpt import TinyGPTForCausalLM
    from hf_tinygpt.train import loop as training

    run = tmp_path / "runs" / "run"

    def deleted_at_step_3(step, *rest):
        if step == 3:
            shutil.rmtree(run)
        return batch_indices(step, *rest)

    monkeypatch.setattr(training, "batch_indices", deleted_at_step_3)
    code, err = run_cli(capsys, "train", "--train", corpus, *EVERY_TWO, "--steps", 6, "--out", run)
    [rescued] = list((tmp_path / "runs").iterdir())
    assert code == 2 and rescued.name.startswith("run-rescued-step-4-")
    assert last_line(err) == (
        f"hf-tinygpt train: error: the run folder {run} vanished during the run, at step 4: the model as trained so "
        f"far is saved in {rescued} (go on with --init-from set to it)"
    )
    assert TinyGPTForCausalLM.from_pretrained(rescued).config.n_layer == 1


def test_a_run_folder_that_vanishes_while_the_final_model_is_written_saves_it_elsewhere(
    corpus, tmp_path, capsys, monkeypatch
):
    """The same rescue where OUT goes away after the last step, while the final model is written. (Writing OUT/model
    made OUT again, without its manifest, and the run ended with "it is not a folder hf-tinygpt is writing".)"""
    from hf_tinygpt import TinyGPTForCausalLM
    from hf_tinygpt.train import run_folder

    run = tmp_path / "runs" / "run"
    card_training = run_folder.card_training

    def deleted_before_the_final_model(*args):
        shutil.rmtree(run)
        return card_training(*args)

    monkeypatch.setattr(run_folder, "card_training", deleted_before_the_final_model)
    code, err = run_cli(capsys, "train", "--train", corpus, *EVERY_TWO, "--steps", 3, "--out", run)
    [rescued] = list((tmp_path / "runs").iterdir())
    assert code == 2 and rescued.name.startswith("run-rescued-step-3-"), err[-3000:]
    assert last_line(err).startswith(
        f"hf-tinygpt train: error: the run folder {run} vanished during the run, at step 3"
    )
    assert TinyGPTForCausalLM.from_pretrained(rescued).config.n_layer == 1


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_saves_a_checkpoint_as_ctrl_c_does(number, corpus, tmp_path, capsys, monkeypatch):
    """`kill PID` (or a batch system's preemption, or a closed terminal) ended the run with nothing saved since the
    last --save-every."""
    from hf_tinygpt.train import loop as training

    def signalled_at_step_3(step, *rest):
        if step == 3:
            os.kill(os.getpid(), number)
        return batch_indices(step, *rest)

    monkeypatch.setattr(training, "batch_indices", signalled_at_step_3)
    run = tmp_path / "run"
    code, err = run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--steps", 10, "--save-every", 100, "--out", run)
    assert code == 128 + number, err  # as a shell reports the signal (it was 130, Ctrl-C's, for every one)
    assert "checkpoint saved at step 4; continue with --resume" in last_line(err)
    assert (run / "checkpoints" / "step-000004" / "progress.json").is_file()
