"""Evaluation: perplexity over held-out tokens, shared out over the run's processes."""

import math

import numpy as np
import torch
import torch.nn.functional as F


@torch.no_grad()
def perplexity(model, tokens, block_size: int, batch_size: int = 16, accelerator=None) -> float:
    """exp(mean next-token loss) over `tokens` (a tensor or a memory-mapped array, read a batch at a time) cut into
    non-overlapping windows of `block_size` (each window's first token has no context and is not scored). With an
    accelerator, windows are shared out and summed."""
    windows = [(start, min(start + block_size, len(tokens))) for start in range(0, len(tokens), block_size)]
    if windows and windows[-1][1] - windows[-1][0] < 2:  # a 1-token tail has nothing to score
        windows.pop()
    rank, world = (accelerator.process_index, accelerator.num_processes) if accelerator else (0, 1)
    device = accelerator.device if accelerator else next(model.parameters()).device
    total, count = torch.zeros((), dtype=torch.float64, device=device), torch.zeros((), device=device)
    mine = windows[rank::world]
    was_training = model.training
    model.eval()
    for start in range(0, len(mine), batch_size):
        chunk = [np.asarray(tokens[a:b], dtype=np.int64) for a, b in mine[start : start + batch_size]]
        for same_length in _by_length(chunk):
            ids = torch.from_numpy(np.stack(same_length)).to(device)
            logits = model(ids, use_cache=False).logits.float()
            nll = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten(), reduction="sum")
            total += nll.double()
            count += ids[:, 1:].numel()
    model.train(was_training)
    if accelerator is not None:
        total, count = accelerator.reduce(total, "sum"), accelerator.reduce(count, "sum")
    return math.exp(total.item() / count.item())


def _by_length(blocks):
    lengths = sorted({len(b) for b in blocks})
    return [[b for b in blocks if len(b) == n] for n in lengths]
