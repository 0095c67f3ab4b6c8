"""Model cards (`README.md`) for tinygpt folders, rendered from the templates in `model_cards/` with huggingface_hub.

How a model was made (`provenance`) is kept in the card's YAML under `tinygpt:`, so a card can be re-rendered
later (for the repo id it is pushed to) from the card alone.
"""

import importlib.metadata
from importlib import resources
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..model.configuration_tinygpt import TinyGPTConfig
from ..model.params import parameter_breakdown

TEMPLATES = {"conversion": "converted_gpt2.md", "training": "trained.md"}
SAMPLE_PROMPT = "To be, or not to be"
REMOTE_CODE_NOTE = "The model's code travels with it, so `hf_tinygpt` need not be installed:"


def template_path(name: str) -> Path:
    """A template from the installed wheel (`hf_tinygpt/model_cards/`) or, in a source checkout, `model_cards/`."""
    try:
        return Path(str(resources.files("hf_tinygpt.model_cards") / name))
    except ModuleNotFoundError:  # editable install: the folder sits beside the package
        return Path(__file__).resolve().parents[2] / "model_cards" / name


def architecture_table(config: TinyGPTConfig) -> str:
    head = "tied to the token embeddings" if config.tie_word_embeddings else "untied (its own matrix)"
    rows = [
        ("layers", config.n_layer),
        ("width (n_embd)", config.n_embd),
        ("attention heads", f"{config.n_head} (head size {config.head_size})"),
        ("MLP width", config.n_inner or 4 * config.n_embd),
        ("context (n_positions)", config.n_positions),
        ("position scheme", f"`{config.position_embedding_type}`"),
        ("vocabulary", f"{config.vocab_size:,}"),
        ("LM head", head),
        ("parameters", f"{parameter_breakdown(config)['total']:,} (exact; the tied head counted once)"),
    ]
    return "\n".join(["| | |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)])


def usage_snippet(model_id: str) -> str:
    return (
        "from transformers import pipeline\n\n"
        f'generator = pipeline("text-generation", model="{model_id}", trust_remote_code=True)\n'
        f'print(generator("{SAMPLE_PROMPT}", max_new_tokens=30, do_sample=False)[0]["generated_text"])'
    )


def render_model_card(config: TinyGPTConfig, *, model_id: str, provenance: dict, license: str = "mit",
                      base_model: str | None = None, usage: str | None = None,
                      usage_note: str = REMOTE_CODE_NOTE) -> ModelCard:  # fmt: skip
    """A card for the model `config` describes, published as `model_id` (a Hub repo id or a local path).

    `provenance["made_by"]` is "conversion" (with `source_description`, optional `max_abs_logit_delta`) or
    "training" (with a `training` dict: data, steps, validation perplexity, command), and picks the template.
    `usage` replaces the default snippet (a pipeline on `model_id`), `usage_note` the sentence before it."""
    made_by = provenance.get("made_by", "training")
    if made_by not in TEMPLATES:
        raise ValueError(f"provenance made_by={made_by!r} is not one of {sorted(TEMPLATES)}")
    training = provenance.get("training")
    eval_results = None
    if training and training.get("validation_perplexity") is not None:
        eval_results = [EvalResult(
            task_type="text-generation", dataset_type="text", dataset_name=training["validation_description"],
            metric_type="perplexity", metric_value=round(training["validation_perplexity"], 2),
        )]  # fmt: skip
    scheme = config.position_embedding_type
    tags = ["tinygpt", "gpt2" if scheme == "learned" else "gpt", f"{scheme}-positions", "text-generation"]
    card_data = ModelCardData(
        library_name="transformers", pipeline_tag="text-generation", license=license, tags=tags,
        base_model=base_model, model_name=model_id.rstrip("/").split("/")[-1], eval_results=eval_results,
        tinygpt=provenance,
    )  # fmt: skip
    return ModelCard.from_template(
        card_data,
        template_path=str(template_path(TEMPLATES[made_by])),
        title=model_id.rstrip("/").split("/")[-1],
        architecture_table=architecture_table(config),
        position_scheme=scheme,
        usage=usage or usage_snippet(model_id),
        usage_note=usage_note,
        source_description=provenance.get("source_description", "a GPT-2 checkpoint"),
        max_abs_logit_delta=provenance.get("max_abs_logit_delta"),
        training=training,
        hf_tinygpt_version=importlib.metadata.version("hf-tinygpt"),
        transformers_version=importlib.metadata.version("transformers"),
    )


def read_card(folder: str | Path) -> ModelCard | None:
    path = Path(folder) / "README.md"
    return ModelCard.load(path) if path.is_file() else None


def rerender_for(folder: str | Path, config: TinyGPTConfig, model_id: str) -> ModelCard:
    """The folder's card rendered again for `model_id`, keeping its provenance, licence and base model.
    A folder without a card (a bare `save_pretrained`) gets a training card that says nothing was recorded."""
    card = read_card(folder)
    data = card.data.to_dict() if card is not None else {}
    return render_model_card(
        config, model_id=model_id, provenance=data.get("tinygpt") or {"made_by": "training"},
        license=data.get("license") or "mit", base_model=data.get("base_model"),
    )  # fmt: skip
