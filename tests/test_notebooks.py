"""The learner's notebooks (scripts/notebooks): committed with the outputs of their own code, and that code runs
top to bottom with a real kernel."""

import pytest
from conftest import REPOSITORY

nbformat = pytest.importorskip("nbformat", reason="the [dev] extra's nbformat")
from scripts.notebooks.execute import code_digest, execute  # noqa: E402

NOTEBOOKS = sorted((REPOSITORY / "scripts" / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert [path.name for path in NOTEBOOKS] == ["three_schemes_past_their_length.ipynb", "where_a_token_stands.ipynb"]


def test_the_explorers_page_names_each_notebook_by_its_title(tmp_path):
    """The explorer's header points a learner to the notebooks: each by its file and its own first heading."""
    pytest.importorskip("gradio", reason="the [explore] extra")
    from conftest import text_model

    from hf_tinygpt.explore.app import NOTEBOOKS as NAMED
    from hf_tinygpt.explore.app import build_app

    assert sorted(NAMED) == [path.name for path in NOTEBOOKS]
    for path in NOTEBOOKS:
        first = nbformat.read(path, as_version=4).cells[0]
        assert first.cell_type == "markdown" and first.source.splitlines()[0] == f"# {NAMED[path.name]}"
    demo = build_app([("tiny", text_model("rope", seed=0))])
    header = next(block.value for block in demo.blocks.values() if type(block).__name__ == "Markdown")
    for name, title in NAMED.items():
        assert f"*{title}* (`{name}`)" in header


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_each_committed_notebook_holds_the_outputs_of_its_own_code(path):
    """Its code is what was executed (a cell edited without running the notebook again fails here: `python -m
    scripts.notebooks.execute`), every code cell ran, in order, and none failed."""
    notebook = nbformat.read(path, as_version=4)
    assert notebook.metadata["hf_tinygpt"]["executed_code"] == code_digest(notebook), "run the notebook again"
    cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in cells] == list(range(1, len(cells) + 1))
    assert not [output for cell in cells for output in cell.outputs if output.output_type == "error"]
    assert any(output.output_type == "display_data" for cell in cells for output in cell.outputs)  # its pictures


# What a run of the test may shorten: the same code, fewer steps and fewer tokens scored (the committed outputs are of
# the full run, above).
SHORTER = {
    "three_schemes_past_their_length.ipynb": [
        ("STEPS = 200", "STEPS = 20"),
        ("tokens = hamlet[:16384]", "tokens = hamlet[:4096]"),
        (
            "hamlet = tokenize_files([HAMLET], gpt2_tokenizer())",
            "hamlet = tokenize_files([HAMLET], gpt2_tokenizer())[:8192]",
        ),
    ]
}


@pytest.mark.slow  # a kernel
@pytest.mark.long
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_each_notebook_runs_top_to_bottom(path, tmp_path):
    """With a real kernel, as `python -m scripts.notebooks.execute` runs it (fewer steps, fewer tokens scored); the
    pictures it shows are those committed (one per display, in the same cells)."""
    notebook = nbformat.read(path, as_version=4)
    for full, short in SHORTER.get(path.name, []):
        cells = [cell for cell in notebook.cells if cell.cell_type == "code" and full in cell.source]
        assert len(cells) == 1, f"{path.name} no longer has one cell with {full!r}: update SHORTER"
        cells[0].source = cells[0].source.replace(full, short)
    execute(path, tmp_path / path.name, notebook)
    ran, committed = (nbformat.read(p, as_version=4) for p in (tmp_path / path.name, path))

    def pictures(notebook):
        return [
            sum(output.output_type == "display_data" for output in cell.outputs)
            for cell in notebook.cells
            if cell.cell_type == "code"
        ]

    assert pictures(ran) == pictures(committed)
    assert not [o for cell in ran.cells if cell.cell_type == "code" for o in cell.outputs if o.output_type == "error"]
