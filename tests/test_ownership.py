"""A folder is ours only when we can prove we wrote it.

Every folder a verb writes carries a manifest (`hf_tinygpt.checkpoints.outputs.MANIFEST`) listing each file it wrote
with its size and sha256. `--force` replaces a folder only when that manifest is there and the folder holds nothing
it does not list; the clean-up after a killed run touches only temporary names that carry the manifest; `--resume`
deletes nothing it cannot prove it wrote; and no input of a verb (SRC, --tokenizer, --train, --validation, --model)
can be its output. Each case below once lost a user's files.
"""

import json
import shutil
from pathlib import Path

import pytest
from conftest import random_gpt2, run_cli, tiny_model

from hf_tinygpt import gpt2_tokenizer
from hf_tinygpt.checkpoints.outputs import MANIFEST

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
    "--steps",
    "2",
    "--save-every",
    "1",
]


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def gpt2_folder(tmp_path):
    folder = tmp_path / "models" / "gpt2"
    random_gpt2().save_pretrained(folder)
    return folder


def convert_to(out, gpt2_folder):
    return ["convert", gpt2_folder, "--out", out, "--tokenizer", "gpt2", "--force"]


# ---- --force: only a folder proven ours ---------------------------------------------------------------------------


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
        "train": ["train", "--train", corpus, *TINY_RUN, "--out", out, "--force"],
    }[verb]
    code, err = run_cli(capsys, *args)
    assert code == 2 and "not proven to be an earlier output of hf-tinygpt" in err, err
    assert tree(out) == before


def test_force_names_the_users_files_inside_an_earlier_run(corpus, tmp_path, capsys):
    exp = tmp_path / "exp"
    assert run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--out", exp)[0] == 0
    (exp / "model" / "my_notes.txt").write_text("notes")
    (exp / "checkpoints" / "keep.bin").write_bytes(b"mine")
    code, err = run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--out", exp, "--force")
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


def test_a_symlink_inside_an_earlier_output_is_not_followed_nor_taken_for_ours(gpt2_folder, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(capsys, *convert_to(out, gpt2_folder))[0] == 0
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "thesis.tex").write_text("years")
    (out / "link").symlink_to(tmp_path / "precious")
    code, err = run_cli(capsys, *convert_to(out, gpt2_folder))
    assert code == 2 and "link (a symbolic link)" in err
    assert (tmp_path / "precious" / "thesis.tex").read_text() == "years"


# ---- clean-up touches only temporary names that carry our manifest -------------------------------------------------


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


# ---- --resume deletes nothing it cannot prove it wrote ----------------------------------------------------------


def test_resume_deletes_no_user_file_in_checkpoints(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--out", run)[0] == 0
    (run / "checkpoints" / "my-step-by-step-guide.txt").write_text("how I did it")
    code, err = run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--out", run, "--resume")
    assert code == 2 and "checkpoints/my-step-by-step-guide.txt" in err
    assert (run / "checkpoints" / "my-step-by-step-guide.txt").read_text() == "how I did it"


def test_resume_refuses_a_symlinked_checkpoints_folder(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--out", run)[0] == 0
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "step-000009").mkdir(parents=True)  # no progress.json: what resume once deleted as cut short
    (elsewhere / "step-000009" / "mine.txt").write_text("mine")
    for checkpoint in (run / "checkpoints").iterdir():
        checkpoint.rename(elsewhere / checkpoint.name)
    (run / "checkpoints").rmdir()
    (run / "checkpoints").symlink_to(elsewhere)
    code, err = run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--out", run, "--resume")
    assert code == 2 and "checkpoints (a symbolic link)" in err
    assert (elsewhere / "step-000009" / "mine.txt").read_text() == "mine"


# ---- every input is protected, not only SRC ----------------------------------------------------------------------


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


def test_resume_cleans_up_nothing_a_forged_manifest_points_outside_the_run(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--out", run)[0] == 0
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years")  # no progress.json: what resume removes from a checkpoint of ours
    manifest = json.loads((run / MANIFEST).read_text())
    manifest["outputs"].append("checkpoints/../../victim")
    (run / MANIFEST).write_text(json.dumps(manifest))
    assert run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--out", run, "--resume")[0] == 0
    assert (victim / "thesis.tex").read_text() == "years"


# ---- found by a hostile pass: names alone, or a copied manifest, prove nothing --------------------------------------


def copied_manifest_folder(folder: Path, earlier: Path):
    folder.mkdir()
    (folder / MANIFEST).write_text((earlier / MANIFEST).read_text())
    (folder / "precious.txt").write_text("mine")


@pytest.mark.parametrize("name", [".data.partial-1-deadbeef", ".x.old-3-deadbeef"])
def test_force_keeps_a_folder_named_like_a_leftover_that_holds_a_copied_manifest(name, gpt2_folder, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(capsys, *convert_to(out, gpt2_folder))[0] == 0
    copied_manifest_folder(out / name, out)
    (out / f".{MANIFEST}.partial-mine").write_text("my notes")
    code, err = run_cli(capsys, *convert_to(out, gpt2_folder))
    assert code == 2 and f"{name}/" in err and f".{MANIFEST}.partial-mine" in err
    assert (out / name / "precious.txt").read_text() == "mine"


def test_resume_keeps_a_folder_in_checkpoints_named_like_a_leftover(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--out", run)[0] == 0
    backup = run / "checkpoints" / ".mybackup.partial-1-deadbeef"
    copied_manifest_folder(backup, run / "model")
    code, err = run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--out", run, "--resume")
    assert code == 2 and "checkpoints/.mybackup.partial-1-deadbeef/" in err
    assert (backup / "precious.txt").read_text() == "mine"


@pytest.mark.parametrize("edited", ["summary.json", "checkpoints/step-000002/training_state.pt"])
def test_resume_neither_overwrites_nor_deletes_a_file_edited_since(edited, corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--out", run)[0] == 0
    shutil.rmtree(run / "model")  # as if killed before the final model: resume would write summary.json again
    (run / "checkpoints" / "step-000002" / "progress.json").unlink()  # as if cut short: resume removes such a step
    with open(run / edited, "ab") as f:
        f.write(b"my edit")
    before = (run / edited).read_bytes()
    code, err = run_cli(capsys, "train", "--train", corpus, *TINY_RUN, "--out", run, "--resume")
    assert code == 2 and f"{edited} (changed since hf-tinygpt wrote it)" in err
    assert (run / edited).read_bytes() == before
