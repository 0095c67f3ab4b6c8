"""One rank of the distributed checks in test_distributed.py, started by torchrun (2 CPU processes, gloo).

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/distributed_worker.py tp OUT FOLDER...
    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/distributed_worker.py fsdp OUT FOLDER

Every rank compares transformers' distributed model with the same folder loaded whole in this process; rank 0
writes what it measured to OUT/<mode>.json, by folder name. Any mismatch raises, so torchrun exits non-zero; a
ValueError, the way a model refuses tensor parallelism, is recorded as that folder's refusal, and the next folder
follows (every rank raises it at the same point, before any collective of that forward).
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import DistributedConfig

import hf_tinygpt  # noqa: F401  (registers the Auto classes)
from hf_tinygpt import TinyGPTForCausalLM

TOLERANCE = 1e-5


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor behind a DTensor shard (every rank must call this together)."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def tensor_parallel(folder: str) -> dict:
    torch.manual_seed(0)
    ids = torch.randint(0, 99, (2, 24))
    labels = torch.randint(0, 99, (2, 24))
    reference = TinyGPTForCausalLM.from_pretrained(folder)
    sharded = TinyGPTForCausalLM.from_pretrained(folder, distributed_config=DistributedConfig(tp_size=2))
    world = dist.get_world_size()
    local_heads = {
        module.c_attn.weight.to_local().shape[0] // 3 // reference.config.head_size
        for module in (block.attn for block in sharded.transformer.h)
    }
    assert local_heads == {reference.config.n_head // world}, local_heads

    reference.eval(), sharded.eval()
    with torch.no_grad():
        logits_delta = (reference(ids).logits - sharded(ids).logits).abs().max().item()
        greedy = dict(max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
        tokens_equal = torch.equal(reference.generate(ids[:1], **greedy), sharded.generate(ids[:1], **greedy))
    assert logits_delta <= TOLERANCE, logits_delta
    assert tokens_equal

    reference.train(), sharded.train()
    reference_loss = reference(ids, labels=labels).loss
    sharded_loss = sharded(ids, labels=labels).loss
    reference_loss.backward()
    sharded_loss.backward()
    grads = dict(reference.named_parameters())
    grad_delta = max(
        (full(param.grad) - grads[name].grad).abs().max().item() for name, param in sharded.named_parameters()
    )
    assert abs(reference_loss.item() - sharded_loss.item()) <= TOLERANCE
    assert grad_delta <= TOLERANCE, grad_delta

    # The deprecated spelling users still find in guides: from_pretrained(..., tp_plan="auto").
    auto = TinyGPTForCausalLM.from_pretrained(folder, tp_plan="auto").eval()
    with torch.no_grad():
        auto_delta = (reference.eval()(ids).logits - auto(ids).logits).abs().max().item()
    assert auto_delta <= TOLERANCE, auto_delta
    return {
        "logits_max_abs_diff": logits_delta,
        "greedy_tokens_equal": tokens_equal,
        "loss_diff": abs(reference_loss.item() - sharded_loss.item()),
        "grad_max_abs_diff": grad_delta,
        "tp_plan_auto_logits_max_abs_diff": auto_delta,
        "local_heads": sorted(local_heads),
    }


def fully_sharded(folder: str, out: Path) -> dict:
    from torch.distributed.fsdp import FSDPModule

    torch.manual_seed(0)
    ids = torch.randint(0, 99, (2, 24))
    reference = TinyGPTForCausalLM.from_pretrained(folder)
    sharded = TinyGPTForCausalLM.from_pretrained(folder, distributed_config=DistributedConfig(fsdp_size=2))
    wrapped = [name for name, module in sharded.named_modules() if isinstance(module, FSDPModule)]
    blocks = [f"transformer.h.{i}" for i in range(reference.config.n_layer)]
    assert all(block in wrapped for block in blocks), wrapped
    local = sharded.transformer.h[0].mlp.c_fc.weight.to_local()
    assert local.shape[0] == reference.transformer.h[0].mlp.c_fc.weight.shape[0] // dist.get_world_size()

    # One training step, the same in both: each rank feeds the same batch, so FSDP's averaged gradients equal the
    # single-process ones.
    losses = []
    for model in (reference, sharded):
        model.train()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = model(ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert abs(losses[0] - losses[1]) <= TOLERANCE, losses
    trained = {name: full(param.detach()) for name, param in sharded.named_parameters()}
    before = TinyGPTForCausalLM.from_pretrained(folder)
    step_size = max((trained[name] - param).abs().max().item() for name, param in before.named_parameters())
    assert step_size > 1e-3, step_size  # the step really moved the weights
    weight_delta = max((trained[name] - param).abs().max().item() for name, param in reference.named_parameters())
    assert weight_delta <= TOLERANCE, weight_delta

    saved = out / "fsdp-trained"
    sharded.save_pretrained(saved)
    dist.barrier()
    reloaded = TinyGPTForCausalLM.from_pretrained(saved)  # one process, no distribution: a plain checkpoint
    reload_delta = max((trained[name] - param).abs().max().item() for name, param in reloaded.named_parameters())
    assert reload_delta <= TOLERANCE, reload_delta
    return {
        "fsdp_wrapped": wrapped,
        "loss_diff": abs(losses[0] - losses[1]),
        "largest_weight_step": step_size,
        "weight_max_abs_diff": weight_delta,
        "reload_max_abs_diff": reload_delta,
    }


def refused_or(check, folder: str) -> dict:
    try:
        return check(folder)
    except ValueError as error:
        return {"refused": str(error)}


def main(mode: str, out: str, *folders: str) -> None:
    out = Path(out)
    if mode == "tp":
        result = {Path(folder).name: refused_or(tensor_parallel, folder) for folder in folders}
    else:
        result = fully_sharded(*folders, out)
    dist.barrier()
    if dist.get_rank() == 0:
        (out / f"{mode}.json").write_text(json.dumps(result, indent=2))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
