#!/usr/bin/env python
"""Publish a tinygpt folder (or any GPT-2 source, converted and verified first) to the Hub with its model card.
Same as `hf-tinygpt push SRC REPO_ID`.

    python scripts/push_to_hub.py out/tinygpt me/tinygpt-shakespeare --dry-run --out staged/   # look first
    python scripts/push_to_hub.py out/tinygpt me/tinygpt-shakespeare --private
"""

import sys

from hf_tinygpt.cli import main

if __name__ == "__main__":
    sys.exit(main(["push", *sys.argv[1:]]))
