"""A writer killed (SIGKILL) at any step leaves OUT as the complete old folder or the complete new one, and the
next writer cleans up after it. Each case runs `hf-tinygpt` in a fresh interpreter that kills itself at one step."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import GPT2_VOCAB, random_gpt2
from safetensors.torch import load_file

from hf_tinygpt.cli.commands import main

pytestmark = pytest.mark.slow

# Runs `hf-tinygpt ARGS` with a SIGKILL planted at step POINT (the patches stand in for the moment of a kill).
DRIVER = textwrap.dedent("""
    import os, signal, sys
    from hf_tinygpt.folders import model_folder, outputs
    from hf_tinygpt.train import run_folder

    point, args = sys.argv[1], sys.argv[2:]

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    def on_call(number, original):
        calls = []
        def patched(*args, **kwargs):
            calls.append(1)
            if len(calls) == number:
                die()
            return original(*args, **kwargs)
        return patched

    if point.startswith("fallback-"):  # a kernel or file system without renameat2: two plain renames
        outputs._renameat2 = None
    if point == "while-building":
        model_folder.load_tokenizer = die  # the weights are written, the tokenizer not yet
    elif point == "before-the-swap":
        outputs.move_into_place = die
    elif point in ("after-the-swap", "fallback-after-both-renames"):
        outputs.shutil.rmtree = die  # the new folder is in place, the old one not yet deleted
    elif point == "fallback-between-the-renames":
        outputs.os.rename = on_call(2, outputs.os.rename)
    elif point == "while-deleting-the-old":
        original = outputs.shutil.rmtree
        def partly(path, *args, **kwargs):
            os.unlink(next(p for p in os.scandir(path) if p.name == "model.safetensors"))
            die()
        outputs.shutil.rmtree = partly
    elif point == "while-saving-a-checkpoint":
        run_folder.save_model = on_call(2, run_folder.save_model)  # the second checkpoint, midway
    from hf_tinygpt.cli.commands import main
    sys.exit(main(args))
""")


def killed(tmp_path, point, *args):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    run = subprocess.run(
        [sys.executable, str(driver), point, *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert run.returncode == -9, run.stderr[-3000:]


def wte(folder):
    return load_file(folder / "model.safetensors")["transformer.wte.weight"]


POINTS = [
    "while-building",
    "before-the-swap",
    "after-the-swap",
    "while-deleting-the-old",
    "fallback-between-the-renames",
    "fallback-after-both-renames",
]


@pytest.mark.parametrize("point", POINTS)
def test_a_killed_force_convert_leaves_the_old_or_the_new_folder_whole(tmp_path, capsys, point):
    old, new = random_gpt2(seed=1, **GPT2_VOCAB), random_gpt2(seed=2, **GPT2_VOCAB)
    old.save_pretrained(tmp_path / "old")
    new.save_pretrained(tmp_path / "new")
    out = tmp_path / "models" / "out"
    assert main(["convert", str(tmp_path / "old"), "--out", str(out), "--tokenizer", "gpt2"]) == 0
    files = sorted(p.name for p in out.iterdir())

    killed(tmp_path, point, "convert", tmp_path / "new", "--out", out, "--tokenizer", "gpt2", "--force")
    if point.startswith("fallback-between"):  # OUT is briefly missing here: the next writer puts the old one back
        assert not out.exists()
        assert (
            main(["convert", str(tmp_path / "new"), "--out", str(out), "--tokenizer", "gpt2"]) == 2
        )  # no --force: refused
        assert "exists; pass --force" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == files
    held = wte(out)
    assert torch.equal(held, old.transformer.wte.weight) or torch.equal(held, new.transformer.wte.weight)

    assert main(["convert", str(tmp_path / "new"), "--out", str(out), "--tokenizer", "gpt2", "--force"]) == 0
    assert torch.equal(wte(out), new.transformer.wte.weight)
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"]  # no partial, old or lock files left


def test_two_concurrent_converts_into_one_output_cannot_both_succeed(tmp_path):
    random_gpt2(**GPT2_VOCAB).save_pretrained(tmp_path / "gpt2")
    command = [
        sys.executable,
        "-m",
        "hf_tinygpt.cli",
        "convert",
        str(tmp_path / "gpt2"),
        "--out",
        str(tmp_path / "out"),
        "--tokenizer",
        "gpt2",
    ]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(run.wait(), run.stderr.read()) for run in runs]
    assert sorted(code for code, _ in results) == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert "being written by another hf-tinygpt process" in loser or "exists; pass --force" in loser


def test_a_kill_while_saving_a_checkpoint_resumes_from_the_last_complete_one(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("\n".join(f"Line {i}: to be, or not to be." for i in range(60)))
    args = [
        "train",
        "--train",
        data,
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
        "--steps",
        "3",
        "--save-every",
        "1",
        "--out",
        tmp_path / "run",
    ]
    killed(tmp_path, "while-saving-a-checkpoint", *args)
    assert main([str(a) for a in args]) == 2  # the run folder exists: continue it or start afresh
    assert main([str(a) for a in args] + ["--resume"]) == 0
    printed = capsys.readouterr().out
    assert f"resumed from {tmp_path / 'run' / 'checkpoints' / 'step-000001'} (step 1)" in printed
