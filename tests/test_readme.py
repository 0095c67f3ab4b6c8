"""The README is a specification: every block in it runs as written, with the stand-ins below for what a reader has
and a test machine does not. Its info string says where a block runs: "python" here in the fast tier, "python slow"
and the command-line "bash" block here in the slow tier, "python vllm" and the like in that engine's venv
(tests/test_engines.py). The two "bash" blocks that set up a venv are the ones .ci/run runs, word for word."""

import contextlib
import importlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import README, REPOSITORY, random_gpt2, readme_blocks

import hf_tinygpt
from scripts.bench import engines

# Names the README uses for what the reader brings, and what the test puts in their place.
STAND_INS = {
    "path/to/gpt2-folder": "a small GPT-2 with random weights and GPT-2's tokenizer, saved by transformers",
}


def two_commands() -> list[str]:
    return [block for block in readme_blocks("bash") if block.startswith("python3 -m venv")]


def command_line_block() -> str:
    (block,) = [block for block in readme_blocks("bash") if block.startswith("hf-tinygpt ")]
    return block


def with_stand_ins(text: str, folder: Path) -> str:
    gpt2 = folder / "gpt2-folder"
    random_gpt2(vocab_size=50257, eos_token_id=50256, bos_token_id=50256).save_pretrained(gpt2)
    hf_tinygpt.gpt2_tokenizer().save_pretrained(gpt2)
    return text.replace("path/to/gpt2-folder", str(gpt2))


def run_python(code: str, folder: Path):
    run = subprocess.run(
        [sys.executable, "-c", with_stand_ins(code, folder)], cwd=folder, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]


def test_the_readme_has_the_blocks_these_tests_run():
    assert readme_blocks("python") and readme_blocks("python slow") and command_line_block()
    assert len(two_commands()) == 2 and len(readme_blocks("bash")) == 3
    assert all(name in README.read_text() for name in STAND_INS)  # a stand-in for nothing would hide a drift


@pytest.mark.slow  # each block in a fresh interpreter, as a reader runs it
@pytest.mark.parametrize("index", range(len(readme_blocks("python"))))
def test_every_python_block_of_the_readme_runs(index, tmp_path):
    run_python(readme_blocks("python")[index], tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(readme_blocks("python slow"))))
def test_every_slow_python_block_of_the_readme_runs(index, tmp_path):
    run_python(readme_blocks("python slow")[index], tmp_path)


@pytest.mark.slow
@pytest.mark.long
def test_the_readme_command_line_block_runs_line_by_line(tmp_path):
    """From a folder that has the repository's scripts/ (its corpus) as the repository root has, with this venv's
    `hf-tinygpt` first on PATH. Each line must succeed, and the folders it names must be there afterwards."""
    (tmp_path / "scripts").symlink_to(REPOSITORY / "scripts")
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    for line in with_stand_ins(command_line_block(), tmp_path).splitlines():
        run = subprocess.run(
            line, shell=True, cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PATH": path}
        )
        assert run.returncode == 0, f"{line}\n{run.stderr[-3000:]}"
        if "--out" in shlex.split(line):
            words = shlex.split(line)
            assert (tmp_path / words[words.index("--out") + 1]).is_dir(), line


def test_the_engines_the_readme_installs_are_the_ones_the_tests_run():
    """The slow tier builds each engine's venv from scripts/bench/engines.py's pins: the README's `pip install` must
    name the same versions, or its blocks are tested against engines the reader does not get."""
    for pin in (engines.VLLM, engines.LLAMA_CPP, engines.TRL):
        assert f"pip install {pin}" in README.read_text(), pin


def test_the_readme_shell_commands_are_what_ci_runs():
    ci = Path(REPOSITORY / ".ci" / "run").read_text().splitlines()
    for command in two_commands():
        assert command.strip() in ci, command


def markdown_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=REPOSITORY, capture_output=True, text=True, check=True)
    return [REPOSITORY / name for name in listed.stdout.split()]


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces as hyphens, a repeated
    one numbered."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", path.read_text(), flags=re.S), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        found.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
    return found


def test_every_link_and_name_in_the_docs_is_there():
    """A reader follows the docs' relative links and imports the modules they name: each file, anchor and
    `hf_tinygpt.NAME` exists (a card's template named `hf_tinygpt.checkpoints.model_card`, a package that had moved).
    scripts/measurement_log.md is history: its names are those of the day."""
    missing = []
    for path in markdown_files():
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):  # a web address
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in anchors(linked)):
                missing.append(f"{path.relative_to(REPOSITORY)}: {target}")
        if path.name == "measurement_log.md":
            continue
        for name in re.findall(r"\bhf_tinygpt(?:\.\w+)+", text):
            parts, found = name.split("."), None
            for cut in range(len(parts), 0, -1):
                with contextlib.suppress(ImportError):
                    found, rest = importlib.import_module(".".join(parts[:cut])), parts[cut:]
                    break
            if found is None or not all((found := getattr(found, part, None)) is not None for part in rest):
                missing.append(f"{path.relative_to(REPOSITORY)}: {name}")
    assert not missing, missing


def test_the_scheme_table_has_a_row_for_every_built_in_scheme():
    """The README's table of position schemes is written by hand: a scheme added to the package needs its row."""
    from hf_tinygpt.model.positions import READING_ORDER

    table = README.read_text().split("## Position schemes", 1)[1].split("\n\n")[1]
    rows = {line.split("`")[1] for line in table.splitlines()[2:]}  # below the header and its rule
    assert rows == {scheme.name for scheme in READING_ORDER}
