"""What the CompiledDecoder's own greedy loop (`greedy_decoding`, hf_tinygpt/generate/compiled_decoding.py) saves
against transformers' loop over the same compiled step: one decoder, batch 1, greedy, its `generate` called plainly
(our loop) and with `streamer=None` (which hands the call to transformers' loop), in the same rounds between memory
probes. Prints each one's tok/s and the paired ratio.

    python -m scripts.bench.greedy_loop [--model GPT2_FOLDER] [--dtypes bfloat16 int8] [--rounds 5]
    python -m scripts.bench.greedy_loop --tiny                  # a smoke run on a tiny model, no autotuning
"""

import argparse
import json
import tempfile
from pathlib import Path

import torch

from hf_tinygpt import TinyGPTForCausalLM
from hf_tinygpt.convert.verify import random_gpt2_folder
from hf_tinygpt.generate.compiled_decoding import CompiledDecoder
from scripts.bench.measure import cpu_line, machine, memory_bandwidth, paired_decodes
from scripts.bench.speed_benchmark import TINY_GPT2, load_options

GREEDY = dict(do_sample=False, eos_token_id=None, pad_token_id=0)


def compare(folder: str, dtype: str, *, rounds: int, prompt_length: int, new_tokens: int, autotune: bool, probe):
    """One dtype's row: tok/s of our loop and of transformers' loop, and their paired ratio (ours over theirs)."""
    model = TinyGPTForCausalLM.from_pretrained(folder, **load_options(dtype)).eval()
    decoder = CompiledDecoder(model, max_length=prompt_length + new_tokens, autotune=autotune)
    ids = torch.randint(0, model.config.vocab_size, (1, prompt_length), generator=torch.Generator().manual_seed(1))
    options = dict(attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, **GREEDY)
    row = paired_decodes(
        lambda: decoder.generate(ids, **options),
        lambda: decoder.generate(ids, streamer=None, **options),  # transformers' loop over the same step
        new_tokens,
        rounds,
        probe,
    )
    return {"dtype": dtype, "ours_tok_s": row.pop("ours_tok_s"), "transformers_tok_s": row.pop("theirs_tok_s")} | row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a GPT-2 folder (default: GPT-2 small's shape, random weights, made here)")
    parser.add_argument("--dtypes", nargs="+", choices=["float32", "bfloat16", "int8"], default=["bfloat16", "int8"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="also write the measurements here")
    parser.add_argument("--tiny", action="store_true", help="tiny model, few tokens, no autotuning: checks the script")
    args = parser.parse_args(argv)
    sizes = dict(prompt_length=8, new_tokens=8, autotune=False) if args.tiny else {}
    sizes = dict(prompt_length=32, new_tokens=128, autotune=True) | sizes
    probe = (lambda: memory_bandwidth(32 * 2**20, 1)) if args.tiny else memory_bandwidth
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.model or random_gpt2_folder(
            str(Path(scratch) / "gpt2"), seed=0, **(TINY_GPT2 if args.tiny else {})
        )
        rows = [compare(folder, dtype, rounds=args.rounds, probe=probe, **sizes) for dtype in args.dtypes]
    result = {"rows": rows, "machine": machine()}
    print(
        "| dtype | the decoder's greedy loop, tok/s | transformers' loop, tok/s | ours/theirs (pairs) | same tokens |"
    )
    print("|---|---:|---:|---:|---|")
    for row in rows:
        pairs = f"{min(row['paired_ratios']):.2f}–{max(row['paired_ratios']):.2f}"
        print(
            f"| {row['dtype']} | {row['ours_tok_s']:,.1f} | {row['transformers_tok_s']:,.1f} | {row['ratio']:.2f}× "
            f"({pairs}) | {row['same_tokens']} |"
        )
    probes = [p for row in rows for p in row["probes_GBps"]]
    print(f"{cpu_line(result['machine'])}; probes {min(probes):.0f}–{max(probes):.0f} GB/s")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
