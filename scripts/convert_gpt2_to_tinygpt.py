"""GPT-2 folder / Hub id / weights file / nanoGPT ckpt.pt → tinygpt folder. Same as `hf-tinygpt convert SRC --out OUT`.

python -m scripts.convert_gpt2_to_tinygpt path/to/gpt2 --out out/tinygpt --verify
python -m scripts.convert_gpt2_to_tinygpt out/ckpt.pt --out out/tinygpt --tokenizer gpt2 --trim-vocab 50257 --verify
"""

import sys

from hf_tinygpt.cli.commands import main

if __name__ == "__main__":
    sys.exit(main(["convert", *sys.argv[1:]]))
