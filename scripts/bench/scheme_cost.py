"""What each position scheme costs: training-step tokens/s and batch-1 greedy decoding tokens/s of every scheme
against learned positions, on one model shape, in one process. Each round measures every scheme once, in turn (the
order rotates from round to round), so a slow spell of the machine falls on all of them; a scheme's figure is the
median over rounds (after one round that warms every path up), its ratio the median of its per-round ratios to
learned in the same round. The numbers it
measured are in scripts/README.md ("What each position scheme costs").

    python -m scripts.bench.scheme_cost [--rounds 3] [--block-size 256] [--schemes ...] [--json OUT.json]
    python -m scripts.bench.scheme_cost --tiny           # a smoke run: a tiny model, one round

A training step is forward, backward and AdamW on a (batch, block) batch of random tokens, fp32 and eager, as
`hf-tinygpt train` runs it on a CPU; decoding is `generate` (greedy, sdpa, the dynamic cache) of `--new-tokens`
after a 16-token prompt. The bias schemes build an (n_head, T, T) bias per forward where sdpa's causal path needs
none: that is what their rows cost.
"""

import argparse
import json
import statistics

import torch

from hf_tinygpt import POSITION_SCHEME_CLASSES, TinyGPTConfig, TinyGPTForCausalLM
from scripts.bench.measure import cpu_line, machine, timed

SHAPE = dict(vocab_size=50257, n_layer=6, n_embd=384, n_head=6, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
TINY = dict(vocab_size=211, n_layer=1, n_embd=32, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def model_for(scheme: str, shape: dict, block_size: int) -> TinyGPTForCausalLM:
    torch.manual_seed(0)
    config = TinyGPTConfig(position_embedding_type=scheme, n_positions=block_size, **shape)
    return TinyGPTForCausalLM(config)


def training_step(model, batch: torch.Tensor, optimizer) -> None:
    loss = model(batch, labels=batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def training_tokens_per_s(model, batch_size: int, block_size: int, steps: int) -> float:
    """Median tokens/s of `steps` training steps after two warm-up steps."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = torch.randint(0, model.config.vocab_size, (batch_size, block_size))
    for _ in range(2):
        training_step(model, batch, optimizer)
    seconds = [timed(lambda: training_step(model, batch, optimizer)) for _ in range(steps)]
    return batch.numel() / statistics.median(seconds)


@torch.no_grad()
def decoding_tokens_per_s(model, new_tokens: int) -> float:
    """New tokens/s of one greedy `generate` of `new_tokens` after a 16-token prompt, batch 1."""
    model.eval()
    prompt = torch.randint(0, model.config.vocab_size, (1, 16))
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    model.generate(prompt, **{**kwargs, "max_new_tokens": 2, "min_new_tokens": 2})  # warm-up
    return new_tokens / timed(lambda: model.generate(prompt, attention_mask=torch.ones_like(prompt), **kwargs))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--schemes", nargs="+", choices=list(POSITION_SCHEME_CLASSES), default=list(POSITION_SCHEME_CLASSES)
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds over every scheme (default 3)")
    parser.add_argument("--block-size", type=int, default=256, help="training context (default 256)")
    parser.add_argument("--batch-size", type=int, default=8, help="training batch (default 8)")
    parser.add_argument("--steps", type=int, default=5, help="timed training steps per round (default 5)")
    parser.add_argument("--new-tokens", type=int, default=64, help="decoded tokens per round (default 64)")
    parser.add_argument("--tiny", action="store_true", help="a smoke run: a tiny model, one round, a few tokens")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    schemes = ["learned"] + [s for s in args.schemes if s != "learned"]  # the peer every ratio is taken against
    shape, rounds, block, steps, new = SHAPE, args.rounds, args.block_size, args.steps, args.new_tokens
    if args.tiny:
        shape, rounds, block, steps, new = TINY, 1, 32, 2, 4

    models = {scheme: model_for(scheme, shape, block) for scheme in schemes}
    measured = {scheme: {"train": [], "decode": []} for scheme in schemes}
    for round_ in range(-1, rounds):  # round -1 warms every path up and is not kept
        for scheme in schemes[round_ % len(schemes) :] + schemes[: round_ % len(schemes)]:
            train = training_tokens_per_s(models[scheme], args.batch_size, block, steps)
            decode = decoding_tokens_per_s(models[scheme], new)
            if round_ >= 0:
                measured[scheme]["train"].append(train)
                measured[scheme]["decode"].append(decode)

    def ratio(scheme, kind):
        return statistics.median(a / b for a, b in zip(measured[scheme][kind], measured["learned"][kind], strict=True))

    where = machine()
    print(f"{cpu_line(where)}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(
        f"shape {shape} · training: batch {args.batch_size} × block {block}, fp32 eager · decoding: batch 1, "
        f"16-token prompt, {new} new tokens, greedy · {rounds} rounds"
    )
    print(f"{'scheme':<11} {'params':>8} {'train tok/s':>12} {'× learned':>10} {'decode tok/s':>13} {'× learned':>10}")
    rows = []
    for scheme in schemes:
        row = {
            "scheme": scheme,
            "position_parameters": sum(p.numel() for p in models[scheme].transformer.positions.parameters()),
            "train_tokens_per_s": statistics.median(measured[scheme]["train"]),
            "train_ratio": ratio(scheme, "train"),
            "decode_tokens_per_s": statistics.median(measured[scheme]["decode"]),
            "decode_ratio": ratio(scheme, "decode"),
            "rounds": measured[scheme],
        }
        rows.append(row)
        print(
            f"{scheme:<11} {row['position_parameters']:>8,} {row['train_tokens_per_s']:>12,.0f} "
            f"{row['train_ratio']:>9.2f}× {row['decode_tokens_per_s']:>13,.1f} {row['decode_ratio']:>9.2f}×"
        )
    result = {"machine": where, "shape": shape, "block_size": block, "batch_size": args.batch_size, "rows": rows}
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1)
    return result


if __name__ == "__main__":
    main()
