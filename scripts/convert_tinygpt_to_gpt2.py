"""A tinygpt with a GPT-2 twin (learned, sinusoidal or no positions) → a folder `GPT2LMHeadModel.from_pretrained`
loads with identical logits (up to n_positions).
Same as `hf-tinygpt convert --to gpt2 SRC --out OUT`.

    python -m scripts.convert_tinygpt_to_gpt2 out/tinygpt --out out/gpt2 --verify
"""

import sys

from hf_tinygpt.cli.commands import main

if __name__ == "__main__":
    sys.exit(main(["convert", "--to", "gpt2", *sys.argv[1:]]))
