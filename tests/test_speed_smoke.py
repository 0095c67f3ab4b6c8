"""The measuring tools in scripts/bench/measure.py behave: memory really is measured, ratios are paired, and both
benchmarks (scripts/bench/speed_benchmark.py, scripts/bench/conversion_benchmark.py) run end to end on tiny models. No
test asserts a speed or a memory figure: the scripts report them."""

import json
import math
import statistics
from functools import partial

import pytest
import torch
from conftest import random_gpt2, run_module

from hf_tinygpt import POSITION_SCHEME_CLASSES
from scripts.bench.measure import llama_cpp_build_check, measure_in_subprocess, paired_timings
from scripts.bench.speed_benchmark import (
    EAGER_BF16_LEFT_OUT,
    across_runs,
    eager_bf16_is_slow_here,
    format_across_runs,
    load_peers,
)

MiB = 2**20


@pytest.mark.slow
def test_measure_in_subprocess_sees_the_operations_own_allocation():
    setup = "ballast = bytearray(600 * 2**20); del ballast"  # a peak *before* the statement must not count
    measured = measure_in_subprocess(setup, "block = bytearray(200 * 2**20)")
    assert 100 * MiB < measured["peak_added"] < 600 * MiB  # the block is counted, the ballast's 600 MiB are not
    assert measured["peak_rss"] >= measured["rss_before"] and measured["wall_s"] > 0


@pytest.mark.bench
def test_conversion_benchmark_script_smoke(tmp_path):
    out = run_module(
        "bench.conversion_benchmark",
        "--n-layer",
        1,
        "--n-embd",
        32,
        "--n-head",
        2,
        "--json",
        tmp_path / "result.json",
    )  # GPT-2's vocabulary, the default: the conversion bundles GPT-2's tokenizer, which a smaller one cannot hold
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert [row["operation"] for row in result["rows"]][:2] == [
        "convert model.safetensors → tinygpt",
        "convert pytorch_model.bin → tinygpt",
    ]
    assert len(result["rows"]) == 5 and all(row["wall_s"] > 0 for row in result["rows"])
    assert "added / checkpoint" in out.stdout


def test_paired_timings_alternate_who_goes_first_and_pair_each_repeats_ratio():
    calls = []
    runs = {name: partial(calls.append, name) for name in ("hf", "tinygpt")}
    timed = paired_timings(runs, repeats=4, probe=lambda: calls.append("probe") or 1.0)
    assert calls == ["probe", "hf", "tinygpt", "probe", "tinygpt", "hf"] * 2
    assert timed["probes"] == [1.0] * 4 and [len(t) for t in timed["times"].values()] == [4, 4]
    assert timed["paired_ratios"] == [
        hf / tiny for hf, tiny in zip(timed["times"]["hf"], timed["times"]["tinygpt"], strict=True)
    ]
    assert timed["ratio"] == statistics.median(timed["paired_ratios"])


def test_a_peer_joins_the_rounds_in_turn_with_its_own_paired_ratios():
    calls = []
    names = ("hf", "tinygpt", "llama.cpp f16")
    timed = paired_timings({name: partial(calls.append, name) for name in names}, repeats=3, probe=lambda: 1.0)
    assert calls == [
        "hf",
        "tinygpt",
        "llama.cpp f16",
        "tinygpt",
        "llama.cpp f16",
        "hf",
        "llama.cpp f16",
        "hf",
        "tinygpt",
    ]
    peer = timed["peers"]["llama.cpp f16"]
    assert peer["paired_ratios"] == [
        theirs / ours for theirs, ours in zip(timed["times"]["llama.cpp f16"], timed["times"]["tinygpt"], strict=True)
    ]
    assert peer["ratio"] == statistics.median(peer["paired_ratios"]) and set(timed["peers"]) == {"llama.cpp f16"}


def _run(machine: str, ratios: dict[str, float]) -> dict:
    """A speed benchmark result of one decode row: TinyGPT at 100 tok/s, each peer at 100 / its ratio."""
    peers = {name: {"tok_s": 100 / r, "ratio": r, "of_ceiling": 0.5 / r} for name, r in ratios.items() if name != "hf"}
    row = {
        "dtype": "bfloat16",
        "measure": "decode batch 1, static cache + torch.compile",
        "tinygpt_tok_s": 100.0,
        "hf_tok_s": 100 / ratios["hf"],
        "ratio": ratios["hf"],
        "tinygpt_of_ceiling": 0.5,
        "hf_of_ceiling": 0.5 / ratios["hf"],
        "memory_bandwidth_GBps": 40.0,
        "peers": peers,
    }
    return {"machine": {"cpu": machine}, "rows": [row]}


def test_a_figure_from_separate_runs_is_their_median_with_their_range_and_says_when_it_crosses_parity():
    runs = [_run("EPYC", {"hf": hf, "llama.cpp f16": f16}) for hf, f16 in [(1.02, 0.9), (0.97, 1.2), (1.05, 1.1)]]
    combined = {c["against"]: c for c in across_runs(runs)}
    assert set(combined) == {"HF GPT-2", "llama.cpp f16"}
    f16 = combined["llama.cpp f16"]
    assert f16["ratio"] == {"median": 1.1, "min": 0.9, "max": 1.2, "runs": [0.9, 1.2, 1.1]}
    assert f16["tok_s"]["median"] == pytest.approx(100 / 1.1) and f16["of_ceiling"]["max"] == pytest.approx(0.5 / 0.9)
    assert f16["crosses_parity"] and combined["HF GPT-2"]["crosses_parity"]
    table = format_across_runs(runs, list(combined.values()))
    assert "| 1.10× (0.90–1.20) | 50 % (50–50) | 45 % (42–56) |" in table
    assert table.count("the runs' range crosses 1.0×") == 2
    # Above parity in every run: said without the warning.
    ahead = across_runs([_run("EPYC", {"hf": r, "llama.cpp f16": r}) for r in (1.1, 1.2, 1.3)])
    assert not any(c["crosses_parity"] for c in ahead)
    assert "crosses" not in format_across_runs(runs, ahead)


def test_runs_from_different_machines_are_not_combined():
    with pytest.raises(ValueError, match="different machines"):
        across_runs([_run("EPYC with AVX-512 BF16", {"hf": 1.0}), _run("EPYC with AVX2", {"hf": 1.0})])


def test_a_llama_cpp_build_is_checked_against_the_cpu_it_runs_on():
    info = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | AVX512 = 1 | AVX512_BF16 = 1 | OPENMP = 1 | "
    avx2_cpu = {"avx", "avx2", "f16c", "fma"}
    checked = llama_cpp_build_check(info, avx2_cpu)
    assert checked["built_with"] == ["AVX", "AVX2", "AVX512", "AVX512_BF16", "F16C", "FMA"]
    assert checked["missing_here"] == ["AVX512", "AVX512_BF16"] and checked["unused_here"] == []
    # Built on an AVX2 machine, run on one with AVX-512 BF16: runs, slower than a build made here.
    built_elsewhere = llama_cpp_build_check("CPU : AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | ", avx2_cpu | {"avx512f"})
    assert built_elsewhere["missing_here"] == [] and built_elsewhere["unused_here"] == ["AVX512"]


@pytest.mark.bench
def test_speed_benchmark_separate_runs_each_in_a_fresh_process(tmp_path):
    out = run_module(
        "bench.speed_benchmark",
        "--tiny",
        "--dtypes",
        "float32",
        "--caches",
        "dynamic",
        "--runs",
        "2",
        "--json",
        tmp_path / "r.json",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads((tmp_path / "r.json").read_text())
    runs, combined = result["runs"], result["across_runs"]
    assert len(runs) == 2 and out.stdout.count("# run ") == 2 and "Across 2 separate runs" in out.stdout
    assert [c["measure"] for c in combined] == ["prefill 1×32", "prefill 2×16", "decode batch 1, dynamic cache"]
    for c, *rows in zip(combined, *(run["rows"] for run in runs), strict=True):
        assert c["ratio"]["runs"] == [row["ratio"] for row in rows]
        assert c["ratio"]["min"] <= c["ratio"]["median"] <= c["ratio"]["max"]
    # Every run records the machine it ran on.
    assert all(run["machine"]["cpu_capability"] and "transformers" in run["machine"] for run in runs)


@pytest.mark.bench
def test_speed_benchmark_emulates_an_avx2_cpu(tmp_path):
    """`--emulate-avx2` starts the run again with ATen and oneDNN capped at AVX2 (inductor and llama.cpp follow),
    and every figure says so. There, as on a CPU without bf16 instructions, the eager bf16 rows are left out with the
    reason; the compiled row runs (TinyGPT's decoder on its AVX2 kernels)."""
    args = ["--tiny", "--emulate-avx2", "--dtypes", "bfloat16", "--caches", "dynamic", "compiled"]
    out = run_module("bench.speed_benchmark", *args, "--json", tmp_path / "avx2.json")
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads((tmp_path / "avx2.json").read_text())
    assert result["machine"]["cpu_capability"] == "AVX2" and result["machine"]["emulated"] == "AVX2"
    assert "EMULATED AVX2" in out.stdout and "ONEDNN_MAX_CPU_ISA" in out.stdout
    assert [row["measure"] for row in result["rows"]] == ["decode batch 1, static cache + torch.compile"]
    assert result["rows"][0]["tinygpt_tok_s"] > 0 and "eager bf16 products are many times slower" in out.stdout


@pytest.mark.bench
def test_avx2_kernels_script_smoke(tmp_path):
    """scripts/bench/avx2_kernels.py on a tiny model, emulated: a decoder with the AVX2 kernels against one without,
    in the same rounds, for bf16 and int8; then with the kernels taken as this CPU is (AVX-512 BF16 or not). No speed
    is asserted."""
    pytest.importorskip("torchao", reason="the [int8] extra (torchao) is not installed")
    from hf_tinygpt.generate.avx2_products import avx2_products_wanted

    args = ["--tiny", "--emulate-avx2", "--rounds", "1", "--json", tmp_path / "avx2.json"]
    out = run_module("bench.avx2_kernels", *args)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads((tmp_path / "avx2.json").read_text())
    assert [row["dtype"] for row in result["rows"]] == ["bfloat16", "int8"]
    assert all(row["with_tok_s"] > 0 and row["without_tok_s"] > 0 for row in result["rows"])
    assert result["machine"]["cpu_capability"] == "AVX2" and "EMULATED AVX2" in out.stdout

    out = run_module("bench.avx2_kernels", "--tiny", "--on-avx512-bf16", "--dtypes", "bfloat16", "--rounds", "1")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| bfloat16 |" in out.stdout
    assert ("TAKEN ON AN AVX-512 BF16 CPU" in out.stdout) == (not avx2_products_wanted())


@pytest.mark.bench
def test_greedy_loop_script_smoke(tmp_path):
    """scripts/bench/greedy_loop.py on a tiny model: the decoder's greedy loop against transformers' loop over the
    same compiled step, in the same rounds, for fp32 and bf16; the same tokens, no speed asserted."""
    args = ["--tiny", "--dtypes", "float32", "bfloat16", "--rounds", "1", "--json", tmp_path / "loop.json"]
    out = run_module("bench.greedy_loop", *args)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads((tmp_path / "loop.json").read_text())["rows"]
    assert [row["dtype"] for row in rows] == ["float32", "bfloat16"]
    assert all(row["same_tokens"] and row["ours_tok_s"] > 0 and row["transformers_tok_s"] > 0 for row in rows)


@pytest.mark.bench
def test_scheme_cost_script_smoke(tmp_path):
    """scripts/bench/scheme_cost.py on a tiny model: a row per scheme, learned first, each ratio against it."""
    out = run_module("bench.scheme_cost", "--tiny", "--json", tmp_path / "cost.json")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads((tmp_path / "cost.json").read_text())["rows"]
    assert [row["scheme"] for row in rows] == ["learned"] + [s for s in POSITION_SCHEME_CLASSES if s != "learned"]
    assert rows[0]["train_ratio"] == rows[0]["decode_ratio"] == 1.0
    for row in rows:
        assert row["train_tokens_per_s"] > 0 and row["decode_tokens_per_s"] > 0 and row["scheme"] in out.stdout


@pytest.mark.bench
def test_explorer_memory_script_smoke(tmp_path):
    """scripts/bench/explorer_memory.py on a tiny model: each endpoint's largest request answered, in its own
    process, its memory reported."""
    pytest.importorskip("gradio")
    out = run_module("bench.explorer_memory", "--tiny", "--schemes", "alibi", "--json", tmp_path / "memory.json")
    assert out.returncode == 0, out.stderr[-3000:]
    figures = json.loads((tmp_path / "memory.json").read_text())["figures"]["alibi"]
    assert sorted(figures) == ["/attention", "/generate", "/past_length", "/position_scheme", "/token_position"]
    assert all(row["peak_rss_mib"] >= row["peak_added_mib"] >= 0 for row in figures.values())
    assert "largest: alibi " in out.stdout


@pytest.mark.bench
def test_speed_benchmark_script_smoke(tmp_path):
    """Runs every measurement on a tiny model (one dtype, int8, the one with a peer; one decode batch: compiling is
    the slow part); no speed is asserted (that is what the script is for)."""
    pytest.importorskip("torchao", reason="the [int8] extra (torchao) is not installed")
    out = run_module("bench.speed_benchmark", "--tiny", "--dtypes", "int8", "--json", tmp_path / "speed.json")
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads((tmp_path / "speed.json").read_text())
    measures = [row["measure"] for row in result["rows"]]
    prefill = ["prefill 1×32", "prefill 2×16"]
    if eager_bf16_is_slow_here():  # no int8 prefill rows on this CPU (HF GPT-2's int8 is its bf16): the run says why
        assert result["left_out"] == [EAGER_BF16_LEFT_OUT]
        prefill = []
    caches = ["dynamic cache", "static cache", "static cache + torch.compile"]
    assert measures == prefill + [f"decode batch 1, {cache}" for cache in caches]
    for row in result["rows"]:
        assert row["dtype"] == "int8" and row["memory_bandwidth_GBps"] > 0
        assert row["hf_tok_s"] > 0 and row["tinygpt_tok_s"] > 0
        # One repeat, so the median paired ratio is that pair's ratio, the ratio of the two throughputs.
        assert len(row["paired_ratios"]) == 1 and row["ratio"] == row["paired_ratios"][0]
        assert row["ratio"] == pytest.approx(row["tinygpt_tok_s"] / row["hf_tok_s"], rel=1e-9)
        if row["measure"].startswith("decode"):
            assert 0 < row["tinygpt_of_ceiling"] and row["ceiling_tok_s"] > 0
            # One round: its fraction of the ceiling, against its own probe, is the row's.
            assert row["tinygpt_of_ceiling_by_round"] == [pytest.approx(row["tinygpt_of_ceiling"], rel=1e-9)]
            # TinyGPT in bf16 ran in the same rounds; its step reads more bytes (every weight in 2 bytes, not ~1).
            bf16 = row["peers"]["tinygpt bfloat16"]
            assert bf16["tok_s"] > 0 and len(bf16["paired_ratios"]) == 1
            assert 1.5 < row["ceiling_tok_s"] / bf16["ceiling_tok_s"] < 2
    # How fast the compiled int8 products read from memory, beside the probe (each checked against eager first).
    gemv = result["int8_gemv"]
    assert gemv["products"] == 4 and gemv["one_product_rows"] == 2**20 // 64
    assert gemv["products_GBps"] > 0 and gemv["one_product_GBps"] > 0 and gemv["probe_GBps"] > 0
    assert "int8 products compiled as in the int8 step" in out.stdout
    fastest = {best["decode"]: best for best in result["fastest_decode"]}
    assert set(fastest) == {"decode batch 1"}
    for best in fastest.values():
        same_batch = [row for row in result["rows"] if row["measure"].startswith(best["decode"] + ",")]
        assert best["tinygpt_tok_s"] == max(row["tinygpt_tok_s"] for row in same_batch)
    assert set(result["from_pretrained"]) == {"hf", "tinygpt"}
    assert "TinyGPT/HF" in out.stdout and "HF GPT-2's default generate" in out.stdout


def test_step_breakdown_counts_inductors_gemm_templates_as_products_with_or_without_a_fused_epilogue():
    """The names inductor gives its kernels in a profiled step (AMD EPYC with AVX-512 BF16, torch 2.13): a GEMM
    template with bias and GELU fused into it is still a product, and so is a kernel with an int8 product fused into
    it, not one of the "other compiled kernels"."""
    from scripts.bench.step_breakdown import event_part

    names = {
        "graph_0_gemm_m1n768k768_kernel": "products",
        "graph_1_kernel": "products",
        "graph_0_gemm_m1n3072k768_cpp_fused_add_embedding_gelu_native": "products",
        "graph_0_gemm_m1n50257k768_cpp_fused__unsafe_view_add_embeddi": "products",
        "graph_1_cpp_fused__weight_int8pack_mm_add_gelu_native_layer_": "products",
        "hf_tinygpt_avx2::bf16_products": "products",
        "graph_0_cpp_fused__softmax_add_arange_bmm_index_copy_mul_spl": "attention kernels",
        "graph_0_cpp_fused_add_embedding_native_layer_norm_transpose_": "other compiled kernels",
        "TorchDynamo Cache Lookup": "compiled step's call",
        "aten::argmax": "eager ops",
    }
    assert {name: event_part(name) for name in names} == names


@pytest.mark.bench
def test_step_breakdown_finds_every_weight_products_calls_in_a_compiled_step(tmp_path):
    """scripts/bench/step_breakdown.py on a tiny model: in each decoding step it finds one product call per weight, in
    the order the model multiplies them (at int8 batch 8, our `int8_dot_products` where the CPU has AVX-512 BF16, else
    two calls of inductor's kernel: four rows a call), and gives each kind of weight its time; with `--rounds`, each
    row's unprofiled rounds time a generate step, the compiled forward alone and the products alone. No time is
    asserted."""
    pytest.importorskip("torchao", reason="the [int8] extra (torchao) is not installed")
    from hf_tinygpt.generate.int8_dot_products import int8_dot_products_available

    rows_and_rounds = ["--dtypes", "bfloat16", "int8", "--batches", "1", "8", "--rounds", "1"]
    out = run_module("bench.step_breakdown", "--tiny", *rows_and_rounds, "--json", tmp_path / "steps.json")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads((tmp_path / "steps.json").read_text())["rows"]
    assert [(row["dtype"], row["batch"]) for row in rows] == [
        ("bfloat16", 1),
        ("bfloat16", 8),
        ("int8", 1),
        ("int8", 8),
    ]
    dot_products = int8_dot_products_available()
    assert [row["product_calls_per_weight"] for row in rows] == [1, 1, 1, 1 if dot_products else 2]
    assert [row["int8_dot_products"] for row in rows] == [False, False, False, dot_products]
    for row in rows:
        kinds = {kind: entry["weights"] for kind, entry in row["products"].items()}
        assert kinds == {"attn.c_attn": 2, "attn.c_proj": 2, "mlp.c_fc": 2, "mlp.c_proj": 2, "lm_head": 1}
        assert all(entry["s"] > 0 for entry in row["products"].values())
        [timings] = row["rounds"]
        # A generate step is the difference of two timed runs, which a busy machine can make come out at or below
        # zero: it is reported, not asserted; the two timed directly are.
        assert math.isfinite(timings["generate_step_s"])
        assert timings["forward_alone_s"] > 0 and timings["products_alone_s"] > 0
    for heading in ("| lm_head |", "| compiled step's call |", "| forward alone |"):
        assert heading in out.stdout


@pytest.mark.bench
def test_training_benchmark_script_smoke(tmp_path):
    """Both training loops for real (nanoGPT's train.py from ../shared/nanogpt, `hf-tinygpt train`) on a tiny model,
    eager and compiled, fp32 and bf16, with accumulation; no speed is asserted (that is what the script is for)."""
    from scripts.bench.training_benchmark import NANOGPT, TINY

    if not (NANOGPT / "train.py").is_file():
        pytest.skip(f"nanoGPT's train.py is not in {NANOGPT}")
    out = run_module("bench.training_benchmark", "--tiny", "--json", tmp_path / "training.json")
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads((tmp_path / "training.json").read_text())
    assert [row["row"] for row in result["rows"]] == list(TINY.rows)
    kinds = {(row["compile"], row["bf16"], row["grad_accum"] > 1) for row in result["rows"]}
    assert {compiled for compiled, _, _ in kinds} == {False, True} and {bf16 for _, bf16, _ in kinds} == {False, True}
    assert any(accumulates for _, _, accumulates in kinds)
    assert result["data"]["vocab_size"] == 50257 and result["data"]["files"] == TINY.limit_files
    for row in result["rows"]:
        for loop in ("nanoGPT", "TinyGPT"):
            (run,) = row["rounds"][loop]  # one round: every step of both runs logged
            assert len(run["tokens_per_s"]) == TINY.steps and min(run["tokens_per_s"]) > 0 and run["wall_s"] > 0
        assert row["nanogpt_tok_s"] > 0 and row["tinygpt_tok_s"] > 0
        # One round, so the median paired ratio is that pair's ratio, the ratio of the two speeds.
        assert len(row["paired_ratios"]) == 1 and row["ratio"] == row["paired_ratios"][0]
        assert row["ratio"] == pytest.approx(row["tinygpt_tok_s"] / row["nanogpt_tok_s"], rel=1e-9)
    assert "TinyGPT/nanoGPT" in out.stdout
    # Whether the CPU multiplies bf16 itself decides what the bf16 rows mean: the machine is recorded with them.
    assert result["environment"]["cpu_capability"] and isinstance(result["environment"]["cpu_bf16"], list)
    assert "bf16 instructions:" in out.stdout


def test_int8_rows_set_tinygpt_beside_gpt2_in_bf16_not_through_a_config_that_quantizes_none_of_it(tmp_path):
    """transformers' int8 config quantizes none of GPT-2's Conv1D projections, and loaded through it the same bf16
    model ran at a third of its speed: the int8 rows' ratios against HF GPT-2 read 3.02× for that, not for int8."""
    pytest.importorskip("torchao")
    random_gpt2().save_pretrained(tmp_path)
    peers = {peer.name: peer.model for peer in load_peers(str(tmp_path), "int8", autotune=False)}
    assert getattr(peers["hf"].config, "quantization_config", None) is None
    assert {p.dtype for p in peers["hf"].parameters()} == {torch.bfloat16}
    assert peers["tinygpt"].config.quantization_config is not None
