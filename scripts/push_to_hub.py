"""A tinygpt folder (or any GPT-2 source, converted and verified first) → a Hub repo, with its card, in one commit.
Same as `hf-tinygpt push SRC OWNER/NAME`; log in first (`hf auth login`, or HF_TOKEN in the environment).

    python -m scripts.push_to_hub hf_tinygpt/default_model me/tinygpt-shakespeare --dry-run --out staged
    python -m scripts.push_to_hub hf_tinygpt/default_model me/tinygpt-shakespeare
"""

import sys

from hf_tinygpt.cli.commands import main

if __name__ == "__main__":
    sys.exit(main(["push", *sys.argv[1:]]))
