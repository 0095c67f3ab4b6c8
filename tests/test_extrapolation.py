"""The length-extrapolation study runs end to end (--quick) and reports what it measured, learned marked n/a."""

import csv
import json
import math

import pytest
import torch
from conftest import run_module, tiny_model
from huggingface_hub import ModelCard

from hf_tinygpt import POSITION_SCHEME_CLASSES, TinyGPTForCausalLM
from hf_tinygpt.folders.outputs import MANIFEST
from hf_tinygpt.train.evaluate import sliding_perplexity


@pytest.mark.slow
@pytest.mark.long
def test_quick_study_scores_every_scheme_both_ways_and_continues_where_it_stopped(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    line = "Line {}: to be, or not to be, that is the question; whether 'tis nobler in the mind.\n"
    (data / "one_gut.txt").write_text("".join(line.format(i) for i in range(120)))
    (data / "hamlet_gut.txt").write_text("".join(line.format(i) for i in range(40)))
    out = tmp_path / "out"
    run = run_module("extrapolation_study", "--quick", "--data", data, "--out", out)
    assert run.returncode == 0, run.stderr[-3000:]
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    rope_scaled = ["rope+linear", "rope+dynamic-ntk", "rope+yarn"]  # the RoPE model, scaled at evaluation
    # RoPE with NoPE layers is trained beside it (every fourth layer does not rotate: none of the quick run's one),
    # and FoX with RoPE beside FoX.
    schemes = list(POSITION_SCHEME_CLASSES)
    fox = schemes.index("fox") + 1
    variants = [*schemes[:3], *rope_scaled, "rope-nope-layers", *schemes[3:fox], "fox-rope", *schemes[fox:]]
    assert list(dict.fromkeys(row["scheme"] for row in rows)) == variants
    nope_layers = json.loads((out / "runs" / "rope-nope-layers-seed0" / "model" / "config.json").read_text())
    assert (nope_layers["position_embedding_type"], nope_layers["no_rope_layer_interval"]) == ("rope", 4)
    fox_rope = json.loads((out / "runs" / "fox-rope-seed0" / "model" / "config.json").read_text())
    assert (fox_rope["position_embedding_type"], fox_rope["fox_rope_theta"]) == ("fox", 10000.0)
    assert {row["protocol"] for row in rows} == {"chunks", "sliding"} and {row["seed"] for row in rows} == {"0"}
    assert sorted({int(row["context"]) for row in rows}) == [8, 16, 32, 64, 128, 256]  # L/2 .. 16L for L = 16
    for row in rows:
        if row["scheme"] == "learned" and int(row["context"]) > 16:
            assert row["perplexity"] == "n/a"
        else:
            assert 1 < float(row["perplexity"]) < 1e6
        assert row["stride"] == ("n/a" if row["protocol"] == "chunks" else str(min(8, int(row["context"]) // 2)))
    # Each run's own final validation scored what the study scores at the training context without overlap: the
    # held-out tokens the quick run keeps (fewer than the held-out text holds).
    measured = json.loads((out / "results.json").read_text())
    at_l = {r["scheme"]: r["perplexity"] for r in measured["rows"] if r["context"] == 16 and r["protocol"] == "chunks"}
    for scheme in POSITION_SCHEME_CLASSES:
        summary = json.loads((out / "runs" / f"{scheme}-seed0" / "summary.json").read_text())
        assert summary["validation_perplexity"] == pytest.approx(at_l[scheme], rel=1e-5)
        card = ModelCard.load(out / "runs" / f"{scheme}-seed0" / "model" / "README.md")
        assert card.data.tinygpt["training"]["validation_tokens"] == 4 * 256 == measured["validation_tokens"]
    # At C ≤ L, linear and YaRN do not scale and dynamic NTK does not rescale: plain RoPE's numbers.
    for scaled in rope_scaled:
        for protocol in ("chunks", "sliding"):
            for context in (8, 16):
                cell = {(r["scheme"], r["protocol"], r["context"]): r["perplexity"] for r in measured["rows"]}
                assert cell[(scaled, protocol, context)] == cell[("rope", protocol, context)]
    assert (out / "perplexity_vs_context.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "sliding:" in run.stdout and "| learned |" in run.stdout and "n/a" in run.stdout
    with open(out / "summary.csv") as f:
        summary_rows = list(csv.DictReader(f))
    assert {row["seeds"] for row in summary_rows if row["mean"] != "n/a"} == {"1"}
    # The zoo: each scheme's best seed as an ordinary tinygpt folder of ours, its card showing its curve.
    for scheme in ("rope", "cope"):
        zoo = out / "zoo" / scheme
        assert (zoo / MANIFEST).is_file() and (zoo / "extrapolation.png").read_bytes()[:4] == b"\x89PNG"
        card = (zoo / "README.md").read_text()
        assert "## Length extrapolation" in card and "![perplexity against context](extrapolation.png)" in card
        ids = torch.randint(0, 100, (1, 12))
        with torch.no_grad():
            logits = TinyGPTForCausalLM.from_pretrained(zoo)(ids).logits
            trained = TinyGPTForCausalLM.from_pretrained(out / "runs" / f"{scheme}-seed0" / "model")(ids).logits
        assert torch.equal(logits, trained)

    # Stopped part way: one run's scores never written and its summary gone (its checkpoints kept). Run again, the
    # study trains that run on from its last checkpoint, scores it, and reuses every other run as it stands.
    (out / "scores" / "alibi-seed0.json").unlink()
    (out / "runs" / "alibi-seed0" / "summary.json").unlink()
    before = {path.name: path.stat().st_mtime_ns for path in (out / "scores").iterdir()}
    again = run_module("extrapolation_study", "--quick", "--data", data, "--out", out)
    assert again.returncode == 0, again.stderr[-3000:]
    after = {path.name: path.stat().st_mtime_ns for path in (out / "scores").iterdir()}
    assert {name for name in after if before.get(name) != after[name]} == {"alibi-seed0.json"}
    with open(out / "results.csv") as f:
        assert list(csv.DictReader(f)) == rows  # the run resumed from its checkpoint scores as it did uninterrupted

    # One scheme studied beside an earlier study's rows: those of the other schemes join its tables as they were, in
    # the same order, and its own are its new run's.
    beside = tmp_path / "beside"
    alone = run_module(
        "extrapolation_study",
        "--quick",
        "--data",
        data,
        "--out",
        beside,
        "--schemes",
        "alibi",
        "--with-rows",
        out / "results.csv",
    )
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert sorted(path.name for path in (beside / "runs").iterdir()) == ["alibi-seed0"]
    with open(beside / "results.csv") as f:
        joined = list(csv.DictReader(f))
    assert [row for row in joined if row["scheme"] != "alibi"] == [row for row in rows if row["scheme"] != "alibi"]
    assert [row["scheme"] for row in joined] == [row["scheme"] for row in rows]


def perplexity_as_transformers_guide_computes_it(model, tokens: torch.Tensor, context: int, stride: int) -> float:
    """transformers' guide "Perplexity of fixed-length models" (docs/source/en/perplexity.md), its loop re-derived:
    windows begin every `stride` tokens, the targets before the previous window's end are -100, the model's own loss
    (transformers' `loss_function`, which shifts the labels) is weighted by the tokens it scored."""
    nll_sum, n_tokens, prev_end_loc = 0.0, 0, 0
    for begin_loc in range(0, len(tokens), stride):
        end_loc = min(begin_loc + context, len(tokens))
        trg_len = end_loc - prev_end_loc
        input_ids = tokens[begin_loc:end_loc][None]
        target_ids = input_ids.clone()
        target_ids[:, :-trg_len] = -100
        with torch.no_grad():
            loss = model(input_ids, labels=target_ids).loss
        valid = (target_ids[:, 1:] != -100).sum().item()  # the loss shifts the labels: the first is never a target
        nll_sum, n_tokens = nll_sum + loss.item() * valid, n_tokens + valid
        prev_end_loc = end_loc
        if end_loc == len(tokens):
            break
    return math.exp(nll_sum / n_tokens)


@pytest.mark.parametrize("scheme", ["rope", "learned", "cope"])
@pytest.mark.parametrize(("length", "context", "stride"), [(100, 16, 4), (101, 32, 31), (40, 64, 8), (57, 10, 3)])
def test_sliding_perplexity_is_transformers_guides(scheme, length, context, stride):
    model = tiny_model(scheme, initializer_range=0.3)
    tokens = torch.randint(0, model.config.vocab_size, (length,), generator=torch.Generator().manual_seed(1))
    if scheme == "learned" and context > model.config.n_positions:
        return
    expected = perplexity_as_transformers_guide_computes_it(model, tokens, context, stride)
    assert sliding_perplexity(model, tokens, context, stride, batch_size=3) == pytest.approx(expected, rel=1e-5)


def test_sliding_perplexity_needs_a_stride_shorter_than_the_window():
    for stride in (0, 16, 20):
        with pytest.raises(ValueError, match=r"`stride` must be in \[1, context\) = \[1, 16\)"):
            sliding_perplexity(tiny_model(), torch.arange(40), 16, stride)
