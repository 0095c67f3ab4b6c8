"""Evaluation: perplexity over held-out tokens, in non-overlapping windows (what training reports, shared out over the
run's processes) or through a sliding window (what a length study scores)."""

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


@torch.no_grad()
def sliding_perplexity(model, tokens, context: int, stride: int, batch_size: int = 16) -> float:
    """exp(mean next-token loss) over `tokens` read through a window of `context` tokens that moves `stride` tokens at
    a time (windows start at 0, stride, 2·stride, ...; the last one ends at the last token). The first window scores
    its tokens 1..context−1, each later one only the tokens past the previous window's end, so every token but the
    first is scored once, with at least context − stride tokens before it (all there are, near the start). This is
    the sliding-window protocol of Press et al. 2022 and of transformers' "Perplexity of fixed-length models" guide;
    `perplexity` is the non-overlapping one."""
    if not (0 < stride < context):
        raise ValueError(f"`stride` must be in [1, context) = [1, {context}), got {stride}")
    windows, previous_end = [], 0
    for begin in range(0, len(tokens), stride):
        end = min(begin + context, len(tokens))
        scored = end - max(previous_end, begin + 1)  # the window's first token has no context
        if scored > 0:
            windows.append((begin, end, scored))
        previous_end = end
        if end == len(tokens):
            break
    device = next(model.parameters()).device
    total, count = torch.zeros((), dtype=torch.float64, device=device), 0
    was_training = model.training
    model.eval()
    shapes = sorted({(end - begin, scored) for begin, end, scored in windows})
    for shape in shapes:  # windows of one length and one scored tail go through the model together
        same = [(begin, end) for begin, end, scored in windows if (end - begin, scored) == shape]
        for start in range(0, len(same), batch_size):
            rows = [np.asarray(tokens[a:b], dtype=np.int64) for a, b in same[start : start + batch_size]]
            ids = torch.from_numpy(np.stack(rows)).to(device)
            scored = shape[1]
            logits = model(ids, use_cache=False, logits_to_keep=scored + 1).logits[:, :-1].float()  # predict the tail
            total += F.cross_entropy(logits.flatten(0, 1), ids[:, -scored:].flatten(), reduction="sum").double()
            count += ids.shape[0] * scored
    model.train(was_training)
    return math.exp(total.item() / count)


def _by_length(blocks):
    lengths = sorted({len(b) for b in blocks})
    return [[b for b in blocks if len(b) == n] for n in lengths]
