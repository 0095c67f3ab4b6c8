"""The length-extrapolation study runs end to end (--quick) and reports what it measured, learned marked n/a."""

import csv
import json

import pytest
from conftest import run_module
from huggingface_hub import ModelCard

from hf_tinygpt import POSITION_SCHEMES


@pytest.mark.slow
def test_quick_study_writes_csv_json_plot_and_marks_learned_beyond_its_rows(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    line = "Line {}: to be, or not to be, that is the question; whether 'tis nobler in the mind.\n"
    (data / "one_gut.txt").write_text("".join(line.format(i) for i in range(120)))
    (data / "hamlet_gut.txt").write_text("".join(line.format(i) for i in range(40)))
    run = run_module("extrapolation_study", "--quick", "--data", data, "--out", tmp_path / "out")
    assert run.returncode == 0, run.stderr[-3000:]
    with open(tmp_path / "out" / "results.csv") as f:
        rows = list(csv.DictReader(f))
    schemes = [*POSITION_SCHEMES, "rope+dynamic-ntk"]  # every scheme, then RoPE scaled at evaluation
    assert list(dict.fromkeys(row["scheme"] for row in rows)) == schemes
    assert sorted({int(row["context"]) for row in rows}) == [8, 16, 32, 64, 128]  # L/2 .. 8L for L = 16
    for row in rows:
        beyond = int(row["context"]) > 16
        if row["scheme"] == "learned" and beyond:
            assert row["perplexity"] == "n/a"
        else:
            assert 1 < float(row["perplexity"]) < 1e6
    # Each run's own final validation scored what the study scores at the training context: four windows of the
    # longest context (fewer tokens than the held-out text holds).
    measured = json.loads((tmp_path / "out" / "results.json").read_text())["rows"]
    at_training_context = {row["scheme"]: row["perplexity"] for row in measured if row["context"] == 16}
    for scheme in schemes[:-1]:
        summary = json.loads((tmp_path / "out" / scheme / "summary.json").read_text())
        assert summary["validation_perplexity"] == pytest.approx(at_training_context[scheme], rel=1e-5)
        card = ModelCard.load(tmp_path / "out" / scheme / "model" / "README.md")
        assert card.data.tinygpt["training"]["validation_tokens"] == 4 * 128
    assert (tmp_path / "out" / "perplexity_vs_context.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| learned |" in run.stdout and "n/a" in run.stdout
