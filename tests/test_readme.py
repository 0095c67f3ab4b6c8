"""The README is a specification: every Python block in it runs as written, with the stand-ins below for what a
reader has and a test machine does not, and its two shell commands are the ones .ci/run runs, word for word."""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import README, REPOSITORY, random_gpt2, readme_blocks

# Names the README uses for what the reader brings, and what the test puts in their place.
STAND_INS = {
    "path/to/gpt2-folder": "a small GPT-2 with random weights, saved by transformers' GPT2LMHeadModel",
}

blocks = readme_blocks


def test_the_readme_has_the_blocks_these_tests_run():
    assert blocks("python") and len(blocks("bash")) == 2
    assert all(name in README.read_text() for name in STAND_INS)  # a stand-in for nothing would hide a drift


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_every_python_block_of_the_readme_runs(index, tmp_path):
    code = blocks("python")[index]
    gpt2 = tmp_path / "gpt2"
    random_gpt2(vocab_size=50257, eos_token_id=50256, bos_token_id=50256).save_pretrained(gpt2)
    code = code.replace("path/to/gpt2-folder", str(gpt2))
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]


def test_the_readme_shell_commands_are_what_ci_runs():
    ci = Path(REPOSITORY / ".ci" / "run").read_text().splitlines()
    for command in blocks("bash"):
        assert command.strip() in ci, command
