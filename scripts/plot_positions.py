#!/usr/bin/env python
"""Pictures of a model's position scheme: position matrix, single dimensions, cosine similarities, RoPE frequencies
and offset similarity, ALiBi biases, and token vs position for a prompt. Same as `hf-tinygpt plot-positions`.

    python scripts/plot_positions.py openai-community/gpt2 --out plots/gpt2          # any GPT-2 or tinygpt model
    python scripts/plot_positions.py rope --out plots/rope --svg                      # an untrained bare config
"""

import sys

from hf_tinygpt.cli import main

if __name__ == "__main__":
    sys.exit(main(["plot-positions", *sys.argv[1:]]))
