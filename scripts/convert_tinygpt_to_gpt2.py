#!/usr/bin/env python
"""A GPT-2-compatible tinygpt folder → a folder `GPT2LMHeadModel.from_pretrained` loads with identical logits.
Same as `hf-tinygpt convert --to gpt2 SRC --out OUT`.

    python scripts/convert_tinygpt_to_gpt2.py out/tinygpt --out out/gpt2 --verify
"""

import sys

from hf_tinygpt.cli import main

if __name__ == "__main__":
    sys.exit(main(["convert", "--to", "gpt2", *sys.argv[1:]]))
