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

from hf_tinygpt import POSITION_SCHEME_CLASSES, TinyGPTForCausalLM

pytestmark = pytest.mark.slow
WORKER = Path(__file__).with_name("distributed_worker.py")


def torchrun(mode: str, out: Path, *folders: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(WORKER)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([*command, mode, str(out), *map(str, folders)], capture_output=True, text=True, env=env)


def saved_model(tmp_path: Path, scheme: str, name: str | None = None, vocab_size: int = 100, **overrides) -> Path:
    torch.manual_seed(0)
    folder = tmp_path / (name or scheme)
    TinyGPTForCausalLM(tiny_config(scheme, vocab_size=vocab_size, **overrides)).save_pretrained(folder)
    return folder


def test_tensor_parallel_equals_one_process_or_is_refused_by_name(tmp_path):
    """Every rank holds half the heads: logits, greedy tokens, loss and gradients equal the unsharded model, for
    every registered scheme (one torchrun for all of them), or the scheme refuses by name, as ALiBi does (each head
    has its own bias, which head-sharded attention would misapply) and CoPE (its position vectors serve every head:
    replicated on each rank, their gradient there covers its own heads only; its gradients were 1.6e-4 off before its
    refusal). A scheme transformers' architectures carry (`exact_twin`) is carried here too. GPT-2's 50257 tokens are
    odd, so a vocabulary that does not divide among the ranks runs as well (transformers >= 5.21 takes it), and heads
    that do not divide are refused."""
    folders = [saved_model(tmp_path, scheme) for scheme in POSITION_SCHEME_CLASSES]
    uneven_vocabulary = Version(transformers.__version__) >= Version("5.21")
    if uneven_vocabulary:
        folders.append(saved_model(tmp_path, "learned", "odd-vocabulary", vocab_size=99))
    folders.append(saved_model(tmp_path, "learned", "one-head", n_head=1))
    run = torchrun("tp", tmp_path, *folders)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((tmp_path / "tp.json").read_text())

    assert "n_head (1) must be divisible by the tensor-parallel size" in result.pop("one-head")["refused"]
    for name, outcome in result.items():
        if "refused" in outcome:  # only a scheme refuses: the other folders are learned ones
            assert POSITION_SCHEME_CLASSES[name].exact_twin is None, outcome
            assert f"position_embedding_type={name!r}" in outcome["refused"], outcome
            assert "Load this model without tensor parallelism" in outcome["refused"], outcome
            continue
        assert outcome["local_heads"] == [2], name  # 4 heads over 2 ranks
        assert outcome["logits_max_abs_diff"] <= 1e-5 and outcome["tp_plan_auto_logits_max_abs_diff"] <= 1e-5, name
        assert outcome["greedy_tokens_equal"] and outcome["grad_max_abs_diff"] <= 1e-5, name
    assert ("odd-vocabulary" in result) == uneven_vocabulary
    refused = {name for name, outcome in result.items() if "refused" in outcome}
    assert refused == {"alibi", "t5", "kerple", "fire", "cope", "pope", "fox", "cable", "path"}  # README says which


def test_fsdp_shards_per_block_trains_like_one_process_and_saves_a_plain_checkpoint(tmp_path):
    run = torchrun("fsdp", tmp_path, saved_model(tmp_path, "learned"))
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((tmp_path / "fsdp.json").read_text())
    assert {"transformer.h.0", "transformer.h.1"} <= set(result["fsdp_wrapped"])
    assert result["loss_diff"] <= 1e-5 and result["weight_max_abs_diff"] <= 1e-5
    assert result["reload_max_abs_diff"] <= 1e-5
