"""Output folders: what every verb that writes a folder may replace, how it writes, and what it cleans up.

Every verb that writes a folder goes through `hf_tinygpt.folders.outputs`: OUT is refused before any work if
writing it could destroy an input or something of the user's, it is built beside OUT and swapped in with one rename,
two writers cannot both win, and the result gets the umask's permissions. Every folder a verb writes carries a
manifest (`MANIFEST`) listing each file it wrote with its size and sha256: a folder is ours only when we can prove we
wrote it. `--force` replaces a folder only when that manifest is there and the folder holds nothing it does not list;
the clean-up after a killed run touches only temporary names that carry the manifest (and an unsealed staging folder
only when it holds nothing but what its kind of writer makes); and no path a verb reads (every option the parser
marks as one) can be, contain or lie inside its output. The CLI cases run in-process through `main([...])`;
`--resume`'s side of the same rules is in test_resume.py, a writer killed at every step (each a fresh interpreter)
in test_kills.py.
"""

import json
import os
import resource
import signal
import threading
from pathlib import Path

import pytest
import torch
from conftest import GPT2_VOCAB, TINY_RUN, copied_manifest_folder, last_line, random_gpt2, run_cli, tiny_model
from safetensors.torch import load_file

from hf_tinygpt import gpt2_tokenizer
from hf_tinygpt.folders.outputs import MANIFEST, _new_staging

# A manifest as hf-tinygpt writes one, listing nothing.
EMPTY_MANIFEST = {
    "written_by": "hf-tinygpt",
    "version": "0",
    "kind": "model",
    "files": {},
    "folders": [],
    "outputs": [],
}
# A run of two steps with a checkpoint after each.
TWO_STEPS = [*TINY_RUN, "--steps", "2", "--save-every", "1"]


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` and its bytes, manifests included."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` and its bytes (manifests left out: what the tool wrote, not what it holds)."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def convert_to(out, gpt2_folder):
    return ["convert", gpt2_folder, "--out", out, "--tokenizer", "gpt2", "--force"]


# ---- --force: only a folder proven ours, never an input or the folder the command runs in ----------------------------


def users_docs(out: Path):
    out.mkdir()
    (out / "README.md").write_text("my documentation")  # a name convert writes


def users_gpt2_folder(out: Path):
    random_gpt2(seed=3).save_pretrained(out)  # config.json + model.safetensors: names convert writes


def users_pictures(out: Path):
    out.mkdir()
    (out / "holiday.png").write_bytes(b"\x89PNG my photo")


def users_summary(out: Path):
    out.mkdir()
    (out / "summary.json").write_text('{"my": "results"}')


def users_file_in_a_folder_named_like_ours(out: Path):
    (out / "merges.txt").mkdir(parents=True)
    (out / "merges.txt" / "mine.txt").write_text("mine")


@pytest.mark.parametrize(
    "make, verb",
    [
        (users_docs, "convert"),
        (users_gpt2_folder, "convert"),
        (users_pictures, "plot-positions"),
        (users_summary, "train"),
        (users_file_in_a_folder_named_like_ours, "convert"),
    ],
)
def test_force_never_replaces_a_folder_it_cannot_prove_it_wrote(make, verb, gpt2_folder, corpus, tmp_path, capsys):
    out = tmp_path / "out"
    make(out)
    before = tree(out)
    args = {
        "convert": convert_to(out, gpt2_folder),
        "plot-positions": ["plot-positions", "rope", "--out", out, "--force"],
        "train": ["train", "--train", corpus, *TWO_STEPS, "--out", out, "--force"],
    }[verb]
    code, err = run_cli(capsys, *args)
    assert code == 2 and "not proven to be an earlier output of hf-tinygpt" in err, err
    assert tree(out) == before


def test_force_names_the_users_files_inside_an_earlier_run(corpus, tmp_path, capsys):
    exp = tmp_path / "exp"
    assert run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", exp)[0] == 0
    (exp / "model" / "my_notes.txt").write_text("notes")
    (exp / "checkpoints" / "keep.bin").write_bytes(b"mine")
    code, err = run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", exp, "--force")
    assert code == 2 and "model/my_notes.txt" in err and "checkpoints/keep.bin" in err
    assert (exp / "model" / "my_notes.txt").read_text() == "notes" and (exp / "checkpoints" / "keep.bin").exists()


def test_force_refuses_an_output_whose_files_were_edited_since(gpt2_folder, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(capsys, *convert_to(out, gpt2_folder))[0] == 0
    (out / "README.md").write_text("my own card, hours of writing")
    code, err = run_cli(capsys, *convert_to(out, gpt2_folder))
    assert code == 2 and "README.md (changed since hf-tinygpt wrote it)" in err
    assert (out / "README.md").read_text() == "my own card, hours of writing"


def test_force_replaces_an_earlier_output_of_any_verb_and_its_manifest_lists_every_file(gpt2_folder, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(capsys, "plot-positions", "rope", "--out", out)[0] == 0
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["written_by"] == "hf-tinygpt" and manifest["kind"] == "pictures"
    assert set(manifest["files"]) == {p.name for p in out.iterdir()} - {MANIFEST}
    assert run_cli(capsys, *convert_to(out, gpt2_folder))[0] == 0
    assert (out / "model.safetensors").is_file() and not list(out.glob("*.png"))


def test_force_replaces_a_training_run_only_with_another(gpt2_folder, corpus, tmp_path, capsys):
    """A run's checkpoints and model may be hours of work: another verb's --force (a typo in --out) leaves it."""
    run = tmp_path / "run"
    assert run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run)[0] == 0
    before = contents(run)
    for argv in (["plot-positions", "rope", "--out", run, "--force"], convert_to(run, gpt2_folder)):
        code, err = run_cli(capsys, *argv)
        assert code == 2 and f"{run} is a training run of hf-tinygpt: --force replaces it only with another" in err
        assert contents(run) == before
    assert run_cli(capsys, "train", "--train", corpus, *TWO_STEPS, "--out", run, "--force")[0] == 0


def test_a_symlink_inside_an_earlier_output_is_not_followed_nor_taken_for_ours(gpt2_folder, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(capsys, *convert_to(out, gpt2_folder))[0] == 0
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "thesis.tex").write_text("years")
    (out / "link").symlink_to(tmp_path / "precious")
    code, err = run_cli(capsys, *convert_to(out, gpt2_folder))
    assert code == 2 and "link (a symbolic link)" in err
    assert (tmp_path / "precious" / "thesis.tex").read_text() == "years"


def test_force_refuses_the_working_folder_which_holds_the_source(gpt2_folder, capsys, monkeypatch):
    project = gpt2_folder.parent
    (project / "notes.txt").write_text("mine")
    before = contents(project)
    monkeypatch.chdir(project)
    code, err = run_cli(capsys, "convert", "gpt2", "--out", ".", "--force", "--tokenizer", "gpt2")
    assert code == 2 and "is the working folder" in err
    assert contents(project) == before


def test_force_refuses_an_output_that_contains_the_source(gpt2_folder, capsys):
    models = gpt2_folder.parent
    random_gpt2(seed=1).save_pretrained(models / "other_model")
    before = contents(models)
    code, err = run_cli(capsys, "convert", gpt2_folder, "--out", models, "--force", "--tokenizer", "gpt2")
    assert code == 2 and f"contains the input {gpt2_folder}" in err
    assert contents(models) == before


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
    random_gpt2(seed=7, **GPT2_VOCAB).save_pretrained(gpt2_folder)
    assert run_cli(capsys, "convert", gpt2_folder, "--out", out, "--tokenizer", "gpt2", "--force")[0] == 0
    written = load_file(out / "model.safetensors")["transformer.wte.weight"]
    assert torch.equal(written, random_gpt2(seed=7, **GPT2_VOCAB).transformer.wte.weight)
    assert leftovers(tmp_path) == []


def test_push_dry_run_force_refuses_a_run_folder(tmp_path, capsys):
    run = tmp_path / "run"
    tiny_model().save_pretrained(run / "model")
    (run / "checkpoints" / "step-000100").mkdir(parents=True)
    before = contents(run)
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
    assert contents(run) == before and (other / "checkpoints").is_dir()


# ---- names alone, or a copied manifest, prove nothing ----------------------------------------------------------------


@pytest.mark.parametrize("name", [".data.partial-1-deadbeef", ".x.old-3-deadbeef"])
def test_force_keeps_a_folder_named_like_a_leftover_that_holds_a_copied_manifest(name, gpt2_folder, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(capsys, *convert_to(out, gpt2_folder))[0] == 0
    copied_manifest_folder(out / name, out)
    (out / f".{MANIFEST}.partial-mine").write_text("my notes")
    code, err = run_cli(capsys, *convert_to(out, gpt2_folder))
    assert code == 2 and f"{name}/" in err and f".{MANIFEST}.partial-mine" in err
    assert (out / name / "precious.txt").read_text() == "mine"


# ---- every input is protected, not only SRC --------------------------------------------------------------------------


@pytest.fixture
def tokenizer_folder(tmp_path):
    folder = tmp_path / "tok"
    gpt2_tokenizer().save_pretrained(folder)
    return folder


@pytest.mark.parametrize("verb", ["convert", "push"])
def test_the_tokenizer_input_is_never_the_output(verb, gpt2_folder, tokenizer_folder, capsys):
    before = tree(tokenizer_folder)
    args = {"convert": ["convert", gpt2_folder], "push": ["push", gpt2_folder, "me/tiny", "--dry-run"]}[verb]
    code, err = run_cli(capsys, *args, "--tokenizer", tokenizer_folder, "--out", tokenizer_folder, "--force")
    assert code == 2 and f"is the input {tokenizer_folder}" in err
    assert tree(tokenizer_folder) == before


def test_the_model_plotted_is_never_the_output(tmp_path, capsys):
    folder = tmp_path / "tiny"
    tiny_model().save_pretrained(folder)
    before = tree(folder)
    code, err = run_cli(capsys, "plot-positions", folder, "--out", folder, "--force")
    assert code == 2 and f"is the input {folder}" in err
    assert tree(folder) == before


def test_train_refuses_to_write_its_run_into_its_training_data(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / "play.txt").write_text("to be or not to be " * 200)
    code, err = run_cli(capsys, "train", "--train", data, "--out", data, "--force", "--steps", 1)
    assert code == 2 and "is the input" in err
    assert (data / "play.txt").exists()


# ---- atomic replacement, locking, permissions, a full disk -----------------------------------------------------------


def test_an_error_while_writing_leaves_the_old_output_whole(tmp_path):
    from hf_tinygpt.folders.outputs import output_folder

    out = tmp_path / "out"
    with output_folder(out) as staging:
        (staging / "config.json").write_text('{"model_type": "tinygpt"}')
    before = contents(out)
    with pytest.raises(RuntimeError, match="boom"), output_folder(out, force=True) as staging:
        (staging / "config.json").write_text("half")
        raise RuntimeError("boom")
    assert contents(out) == before and leftovers(tmp_path) == []


def test_an_output_that_appears_meanwhile_is_not_replaced_without_force(tmp_path):
    from hf_tinygpt.folders.outputs import output_folder

    out = tmp_path / "out"
    with pytest.raises(FileExistsError, match="appeared while this command ran"), output_folder(out) as staging:
        (staging / "config.json").write_text("{}")
        out.mkdir()
        (out / "theirs.txt").write_text("someone else's")
    assert contents(out) == {"theirs.txt": b"someone else's"} and leftovers(tmp_path) == []


def test_two_writers_of_one_output_cannot_both_win(tmp_path):
    from hf_tinygpt.folders.outputs import output_folder

    out = tmp_path / "out"
    with output_folder(out) as staging:
        (staging / "config.json").write_text('{"model_type": "tinygpt"}')
        with pytest.raises(FileExistsError, match="is already being written by this process"):
            with output_folder(out, force=True):
                pass
    assert contents(out) == {"config.json": b'{"model_type": "tinygpt"}'}
    with output_folder(out, force=True) as staging:  # the lock was released
        (staging / "config.json").write_text('{"model_type": "gpt2"}')
    assert leftovers(tmp_path) == []


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
    from hf_tinygpt.folders.outputs import check_output

    (tmp_path / "file").write_text("x")
    (tmp_path / "folder").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "file")
    (tmp_path / "folder-link").symlink_to(tmp_path / "folder")  # named for what it is, not "not a folder"
    for name, said in [("file", "not a folder"), ("link", "a symbolic link"), ("folder-link", "a symbolic link")]:
        with pytest.raises(FileExistsError, match=f"{name} exists and is {said}"):
            check_output(tmp_path / name, force=True)


# ---- clean-up after a killed writer touches only temporary names that carry our manifest -----------------------------


def test_leftovers_of_a_killed_writer_are_cleaned_and_an_old_folder_put_back(tmp_path):
    from hf_tinygpt.folders.outputs import clean_leftovers, output_folder

    out = tmp_path / "out"
    _new_staging(out, "model")  # killed while building: `.out.partial-PID-HEX`, its manifest already inside
    with output_folder(tmp_path / "earlier") as staging:
        (staging / "config.json").write_text("old")
    (tmp_path / "earlier").rename(tmp_path / ".out.old-123-0123abcd")  # killed between the two fallback renames
    clean_leftovers(out)
    assert contents(out) == {"config.json": b"old"} and leftovers(tmp_path) == []


def test_cleanup_leaves_user_folders_that_merely_look_like_leftovers(gpt2_folder, tmp_path, capsys):
    for name in (".out.partial-keep", ".out.old-2024", ".out.partial-123-0123abcd", ".out.old-99-89abcdef"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "mine.txt").write_text(name)
    before = tree(tmp_path)
    assert run_cli(capsys, "convert", gpt2_folder, "--out", tmp_path / "out", "--tokenizer", "gpt2")[0] == 0
    assert {k: v for k, v in tree(tmp_path).items() if not k.startswith("out/")} == before


def test_a_lone_folder_named_like_a_replaced_output_is_not_put_back(gpt2_folder, tmp_path, capsys):
    (tmp_path / ".out.old-backup").mkdir()
    (tmp_path / ".out.old-backup" / "config.json").write_text("{}")
    assert run_cli(capsys, "convert", gpt2_folder, "--out", tmp_path / "out", "--tokenizer", "gpt2")[0] == 0
    assert (tmp_path / ".out.old-backup" / "config.json").read_text() == "{}"
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_a_users_file_named_like_the_lock_survives(gpt2_folder, tmp_path, capsys):
    (tmp_path / ".out.lock").write_text("my notes about out")
    assert run_cli(capsys, "convert", gpt2_folder, "--out", tmp_path / "out", "--tokenizer", "gpt2")[0] == 0
    assert (tmp_path / ".out.lock").read_text() == "my notes about out"


# ---- every input of every verb, from the parser: OUT may neither be, contain nor lie inside one ---------------------

# The string options that name no path (a new one must be added here or be an `input_path`: none is forgotten).
NOT_PATHS = {
    "prompt",
    "text",
    "revision",
    "token",
    "out",
    "base_model",
    "license",
    "glob",
    "dataset_config",
    "dataset_split",
    "text_column",
    "report_to",
    "serve_options",
    "repo_id",
    "commit_message",
    "collection",
}


def verbs_and_actions():
    from hf_tinygpt.cli.commands import build_parser

    [subparsers] = [action for action in build_parser()._actions if action.dest == "verb"]
    return {name: parser._actions for name, parser in subparsers.choices.items()}


def test_every_string_option_of_every_verb_is_either_an_input_path_or_named_as_none():
    from hf_tinygpt.cli.commands import input_path

    for verb, actions in verbs_and_actions().items():
        for action in actions:
            takes_text = action.nargs != 0 and action.type in (None, input_path) and action.choices is None
            if takes_text and action.dest != "help":
                assert (action.type is input_path) != (action.dest in NOT_PATHS), (verb, action.dest)


def input_cases():
    from hf_tinygpt.cli.commands import input_path

    for verb, actions in verbs_and_actions().items():
        if any(action.dest == "out" for action in actions):
            for action in actions:
                if action.type is input_path:
                    for relation in ("is", "is inside", "contains"):
                        yield pytest.param(verb, action.dest, relation, id=f"{verb}-{action.dest}-{relation}")


@pytest.mark.parametrize(("verb", "dest", "relation"), list(input_cases()))
def test_no_input_of_any_verb_can_be_its_output(verb, dest, relation, tmp_path, capsys):
    """OUT an earlier output of ours, so that `--force` would replace it: an input is OUT, lies in it (OUT contains
    it), or holds it (OUT is inside it)."""
    from hf_tinygpt.folders.outputs import output_folder

    earlier = tmp_path / "earlier"
    with output_folder(earlier) as staging:
        (staging / "inner").mkdir()
        (staging / "inner" / "config.json").write_text("{}")
    (tmp_path / "input").mkdir()
    (tmp_path / "input" / "corpus.txt").write_text("to be")
    (tmp_path / "other.txt").write_text("not this one")
    out, value = {
        "is": (earlier, earlier),
        "contains": (earlier, earlier / "inner" / "config.json"),
        "is inside": (tmp_path / "input" / "out", tmp_path / "input"),
    }[relation]
    before = tree(tmp_path)
    argv = [verb]
    for action in verbs_and_actions()[verb]:
        if not action.option_strings:  # the positionals, in order
            argv.append(value if action.dest == dest else "me/model" if action.dest == "repo_id" else "other.txt")
        elif action.dest == dest:
            argv += [max(action.option_strings, key=len), value]
    out_flag = max(next(a for a in verbs_and_actions()[verb] if a.dest == "out").option_strings, key=len)
    argv += [out_flag, out, "--force", *(["--dry-run"] if verb == "push" else [])]  # explore's is --space-out
    code, err = run_cli(capsys, *argv)
    named = next(a for a in verbs_and_actions()[verb] if a.dest == dest).option_strings
    assert code == 2, err
    assert f"output {out} {relation} the input {Path(value).resolve()} " in err
    assert (max(named, key=len) if named else f"`{dest}`") in err
    assert tree(tmp_path) == before


def test_protect_takes_named_paths_not_a_string_to_spell_out(tmp_path):
    from hf_tinygpt.folders.outputs import check_output

    with pytest.raises(TypeError, match="`protect` must map each input's name to its path"):
        check_output(tmp_path / "out", protect=str(tmp_path / "out"))


def test_training_refuses_to_replace_the_model_it_starts_from(tmp_path, corpus, capsys):
    """In Python too: `train --init-from X --out X --force` exited 0 having replaced X."""
    from hf_tinygpt.train.loop import train
    from hf_tinygpt.train.settings import TrainingSettings

    assert run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--steps", 1, "--out", tmp_path / "run")[0] == 0
    start = tmp_path / "run" / "model"
    before = tree(start)
    for out in (start, tmp_path / "run"):
        with pytest.raises(ValueError, match=r"the input .* \(`TrainingSettings.init_from`\)"):
            train(TrainingSettings(out=str(out), train=[str(corpus)], init_from=str(start), force=True, steps=1))
    assert tree(start) == before


# ---- what a hostile folder cannot do: nest past the parser's depth, or make a writer wait on itself ----------------


def test_a_manifest_nested_too_deep_for_the_json_parser_is_no_manifest_of_ours(tmp_path, capsys, gpt2_folder):
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    code, err = run_cli(capsys, "convert", gpt2_folder, "--out", out, "--force", "--tokenizer", "gpt2")
    assert code == 2 and "not proven to be an earlier output" in last_line(err)
    assert (out / MANIFEST).stat().st_size == 200_000


def test_outputs_nested_deeper_than_any_of_ours_are_refused_not_walked(tmp_path, capsys, gpt2_folder):
    """Each folder an output of the one above (each with a manifest naming the next), 500 deep: past Python's
    recursion limit for a walk that follows them."""
    out = tmp_path / "out"
    folders = [out / "/".join(["d"] * depth) for depth in range(500)]
    for folder in folders:
        folder.mkdir()
        (folder / MANIFEST).write_text(json.dumps({**EMPTY_MANIFEST, "outputs": ["d"]}))
    code, err = run_cli(capsys, "convert", gpt2_folder, "--out", out, "--force", "--tokenizer", "gpt2")
    assert code == 2, err
    assert "(folders nested more than 32 deep)" in last_line(err) and "Traceback" not in err
    assert folders[-1].is_dir()
    for folder in reversed(folders):  # deepest first: a recursive delete would meet the same limit
        (folder / MANIFEST).unlink()
        folder.rmdir()


def test_a_writer_nested_inside_a_writer_of_the_same_output_fails_at_once_instead_of_waiting(tmp_path):
    from hf_tinygpt.folders.outputs import output_folder

    outcome = []

    def nested():
        with output_folder(tmp_path / "out"):
            try:
                with output_folder(tmp_path / "out", wait=True):
                    outcome.append("entered")
            except FileExistsError as error:
                outcome.append(str(error))

    worker = threading.Thread(target=nested, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "the inner writer waits on the outer one's lock"
    assert outcome == [
        f"{tmp_path / 'out'} is already being written by this process; it cannot be written twice at once"
    ]
