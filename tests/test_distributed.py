"""Distributed loading like an in-tree model, on 2 CPU processes (torchrun, gloo): tensor parallelism shards attention
by head and the MLP by column/row, FSDP2 shards per block. transformers does the distributing, from the plans in
TinyGPTConfig (`base_model_tp_plan`, `base_model_fsdp_plan`); tests/distributed_worker.py is each rank."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from conftest import tiny_config
from packaging.version import Version

from hf_tinygpt import TinyGPTForCausalLM

pytestmark = pytest.mark.slow
WORKER = Path(__file__).with_name("distributed_worker.py")


def torchrun(mode: str, folder: Path, out: Path) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(WORKER),
        mode,
        str(folder),
        str(out),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(command, capture_output=True, text=True, env=env)


def saved_model(tmp_path: Path, scheme: str, vocab_size: int = 100, **overrides) -> Path:
    torch.manual_seed(0)
    folder = tmp_path / scheme
    TinyGPTForCausalLM(tiny_config(scheme, vocab_size=vocab_size, **overrides)).save_pretrained(folder)
    return folder


def assert_tensor_parallel_equals_one_process(tmp_path: Path, folder: Path):
    run = torchrun("tp", folder, tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((tmp_path / "tp.json").read_text())
    assert result["local_heads"] == [2]  # 4 heads over 2 ranks
    assert result["logits_max_abs_diff"] <= 1e-5 and result["tp_plan_auto_logits_max_abs_diff"] <= 1e-5
    assert result["greedy_tokens_equal"] and result["grad_max_abs_diff"] <= 1e-5


@pytest.mark.parametrize("scheme", ["learned", "sinusoidal", "rope", "xpos", "none"])
def test_tensor_parallel_logits_generation_and_gradients_equal_one_process(tmp_path, scheme):
    """Every rank holds half the heads; logits, greedy tokens, loss and gradients equal the unsharded model."""
    assert_tensor_parallel_equals_one_process(tmp_path, saved_model(tmp_path, scheme))


@pytest.mark.skipif(
    Version(transformers.__version__) < Version("5.21"),
    reason="transformers < 5.21 refuses a gathered column-wise output (lm_head) that does not divide among the ranks",
)
def test_tensor_parallel_with_a_vocabulary_that_does_not_divide_among_the_ranks(tmp_path):
    """GPT-2's 50257 tokens are odd: on 2 ranks the last one holds the shorter slice of wte / lm_head."""
    assert_tensor_parallel_equals_one_process(tmp_path, saved_model(tmp_path, "learned", vocab_size=99))


@pytest.mark.parametrize("scheme", ["alibi", "kerple"])
def test_tensor_parallel_of_a_bias_scheme_is_refused_by_name(tmp_path, scheme):
    """ALiBi, T5, KERPLE and FIRE give each head its own bias, which head-sharded attention would misapply: a clear
    error, not noise."""
    run = torchrun("tp", saved_model(tmp_path, scheme), tmp_path)
    assert run.returncode != 0
    assert f"position_embedding_type={scheme!r} biases every head differently" in run.stderr


def test_tensor_parallel_of_cope_is_refused_by_name(tmp_path):
    """CoPE's position vectors serve every head: replicated on each rank, their gradient there covers its own heads
    only (its logits and tokens were equal, its gradients 1.6e-4 off, before this refusal)."""
    run = torchrun("tp", saved_model(tmp_path, "cope"), tmp_path)
    assert run.returncode != 0
    assert "position_embedding_type='cope' learns position vectors shared by all 4 heads" in run.stderr


def test_tensor_parallel_needs_heads_that_divide_among_the_ranks(tmp_path):
    run = torchrun("tp", saved_model(tmp_path, "learned", n_head=1), tmp_path)
    assert run.returncode != 0 and "n_head (1) must be divisible by the tensor-parallel size" in run.stderr


def test_fsdp_shards_per_block_trains_like_one_process_and_saves_a_plain_checkpoint(tmp_path):
    run = torchrun("fsdp", saved_model(tmp_path, "learned"), tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((tmp_path / "fsdp.json").read_text())
    assert {"transformer.h.0", "transformer.h.1"} <= set(result["fsdp_wrapped"])
    assert result["loss_diff"] <= 1e-5 and result["weight_max_abs_diff"] <= 1e-5
    assert result["reload_max_abs_diff"] <= 1e-5
