"""Model cards (`README.md`) for tinygpt folders, rendered from the templates in `model_cards/` with huggingface_hub.

How a model was made (`provenance`) is kept in the card's YAML under `tinygpt:`, so a card can be re-rendered
later (for the repo id it is pushed to) from the card alone.
"""

import copy
import importlib.metadata
import json
import re
import shlex
import warnings
from importlib import resources
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData, hf_hub_download
from huggingface_hub.utils import HFValidationError, validate_repo_id

from ..model.configuration_tinygpt import TinyGPTConfig
from ..model.params import parameter_breakdown
from .errors import first_line
from .reading import cannot_be_a_hub_id, describe, hub_options
from .training_history import LOSS_CURVE, TRAINING_HISTORY

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
    """Python that loads `model_id`, which is quoted as a string literal whatever it holds (a folder's name may hold
    quotes, `+` and code)."""
    return (
        "from transformers import pipeline\n\n"
        f'generator = pipeline("text-generation", model={json.dumps(model_id)}, trust_remote_code=True)\n'
        f'print(generator("{SAMPLE_PROMPT}", max_new_tokens=30, do_sample=False)[0]["generated_text"])'
    )


def render_model_card(
    config: TinyGPTConfig,
    *,
    model_id: str,
    provenance: dict,
    license: str = "mit",
    base_model: str | None = None,
    usage: str | None = None,
    usage_note: str = REMOTE_CODE_NOTE,
    loss_curve: str | None = None,
    paths_cut: bool = False,
) -> ModelCard:
    """A card for the model `config` describes, published as `model_id` (a Hub repo id or a local path).

    `provenance["made_by"]` is "conversion" (with `source_description`, optional `max_abs_logit_delta`) or
    "training" (with a `training` dict: data, steps, validation perplexity, command), and picks the template; an
    optional `data_note` (Markdown) becomes the card's "Data and licences" section.
    `usage` replaces the default snippet (a pipeline on `model_id`), `usage_note` the sentence before it.
    `loss_curve`: the card shows this image (the training history drawn), a path relative to the card.
    `paths_cut`: the training command's paths were cut to their file names (`command_without_folders`): the card
    does not call it the exact command."""
    made_by = provenance.get("made_by", "training")
    if made_by not in TEMPLATES:
        raise ValueError(f"provenance made_by={made_by!r} is not one of {sorted(TEMPLATES)}")
    training = provenance.get("training")
    eval_results = None
    if training and training.get("validation_perplexity") is not None:
        eval_results = [
            EvalResult(
                task_type="text-generation",
                dataset_type="text",
                dataset_name=training["validation_description"],
                metric_type="perplexity",
                metric_value=round(training["validation_perplexity"], 2),
            )
        ]
    scheme = config.position_embedding_type
    tags = ["tinygpt", "gpt2" if scheme == "learned" else "gpt", f"{scheme}-positions", "text-generation"]
    card_data = ModelCardData(
        library_name="transformers",
        pipeline_tag="text-generation",
        license=license,
        tags=tags,
        base_model=base_model,
        model_name=model_id.rstrip("/").split("/")[-1],
        eval_results=eval_results,
        tinygpt=provenance,
    )
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
        data_note=provenance.get("data_note"),
        loss_curve=loss_curve,
        paths_cut=paths_cut,
        hf_tinygpt_version=importlib.metadata.version("hf-tinygpt"),
        transformers_version=importlib.metadata.version("transformers"),
    )


def read_card(folder: str | Path) -> ModelCard | None:
    """The folder's `README.md` as huggingface_hub reads it (None without one); a ValueError names a card it cannot."""
    path = Path(folder) / "README.md"
    if not path.is_file():
        return None
    try:
        return ModelCard.load(path)
    except Exception as error:
        raise ValueError(
            f"{path}: cannot read the model card's metadata ({describe(error)}); fix its YAML header "
            "or remove the file (a new card is written)"
        ) from None


def source_card(source: str | Path, **hub_kwargs) -> ModelCard | None:
    """The card of a model folder or Hub repo; None where there is none (no source, none in the repo, none cached
    offline, no answer from the Hub). A ValueError names one that does not read."""
    if not str(source):  # a model built here
        return None
    folder = Path(source)
    if not folder.is_dir():
        if cannot_be_a_hub_id(str(source)):  # a folder gone since its model loaded
            return None
        try:
            folder = Path(hf_hub_download(str(source), "README.md", **hub_options(hub_kwargs))).parent
        except OSError:
            return None
    return read_card(folder)


def recorded_training(source: str | Path, **hub_kwargs) -> dict:
    """What the card of a model folder or Hub repo says of how it was trained (`tinygpt.training`); {} where nothing
    is recorded: no card (`source_card`), a card of no training, or one that does not read (said in a warning)."""
    try:
        card = source_card(source, **hub_kwargs)
    except ValueError as error:  # a loader's card, perhaps not ours: it loads, unchecked, and says so
        said = f"{first_line(error).split(';')[0]}: what it records of the model's training is not checked"
        warnings.warn(said, stacklevel=2)
        return {}
    provenance = card.data.to_dict().get("tinygpt") if card is not None else None
    training = provenance.get("training") if isinstance(provenance, dict) else None
    return training if isinstance(training, dict) else {}


# What a card's `tinygpt:` provenance may hold, and of which type: it is rendered again (and published) from the card.
_TEXT, _COUNT, _NUMBER = (str,), (int,), (int, float)
PROVENANCE_FIELDS = {
    "made_by": _TEXT,
    "source_description": _TEXT,
    "max_abs_logit_delta": _NUMBER,
    "training": (dict,),
    "data_note": _TEXT,  # the card's "Data and licences" section (Markdown): where the data came from, its licence
}
TRAINING_FIELDS = {
    "train_description": _TEXT,
    "train_tokens": _COUNT,
    "tokenizer": _TEXT,  # what made the tokens: "GPT-2's BPE", "a WordLevel tokenizer of 300 tokens"
    "tokenizer_sha256": _TEXT,  # which tokenizer exactly (`tokenizer_sha256`): loading checks the folder's against it
    "steps": _COUNT,
    "tokens_per_step": _COUNT,
    "hardware": _TEXT,
    "wall_time": _TEXT,
    "validation_perplexity": _NUMBER,
    "validation_description": _TEXT,
    "validation_tokens": _COUNT,
    "block_size": _COUNT,
    "command": _TEXT,
    "fine_tuned_from": _TEXT,
    "hub_ids": (list,),
    "seed": _COUNT,
    "learning_rate": _NUMBER,
    "train_paths": (list,),
}
# What the training template says of every run, and of one with a validation perplexity.
TRAINING_NAMES = ("train_description", "train_tokens", "steps", "tokens_per_step", "hardware", "wall_time", "command")
VALIDATION_NAMES = ("validation_description", "validation_tokens", "block_size")


def checked_provenance(provenance, where: str) -> dict:
    """A card's provenance with every field of the type the templates format, or a ValueError naming the field."""
    if provenance is None:
        return {"made_by": "training"}
    if not isinstance(provenance, dict):
        raise ValueError(f"{where}: tinygpt: must be a mapping of how the model was made, got {provenance!r:.60}")
    training = provenance.get("training") or {}
    for fields, values, prefix in (
        (PROVENANCE_FIELDS, provenance, "tinygpt."),
        (TRAINING_FIELDS, training, "tinygpt.training."),
    ):
        for name, value in values.items():
            types = fields.get(name)
            if types is None:
                raise ValueError(f"{where}: {prefix}{name} is not a field hf-tinygpt writes")
            if value is not None and (isinstance(value, bool) or not isinstance(value, types)):
                kind = {_TEXT: "text", _COUNT: "an integer", _NUMBER: "a number"}.get(types, "a mapping")
                raise ValueError(f"{where}: {prefix}{name} must be {kind}, got {value!r:.60}")
    if training:
        named = TRAINING_NAMES + (VALIDATION_NAMES if training.get("validation_perplexity") is not None else ())
        if missing := [name for name in named if training.get(name) is None]:
            raise ValueError(
                f"{where}: tinygpt.training has no {', '.join(missing)}, which the card says of a run: add "
                "them, or remove tinygpt.training (the card then says how the model was trained was not recorded)"
            )
    if provenance.get("made_by", "training") not in TEMPLATES:
        raise ValueError(f"{where}: tinygpt.made_by must be one of {sorted(TEMPLATES)}, got {provenance['made_by']!r}")
    return provenance


def without_folders(text: str, keep=()) -> str:
    """`text` with every path in it cut to its last part (`/home/me/data/plays.txt` → `plays.txt`): what a card
    published from this machine says about where its data lay. The Hub ids in `keep` stay whole."""
    return re.sub(
        r"[^\s,()`'\"=]*/[^\s,()`'\"=]*",
        lambda m: m.group() if m.group() in keep else Path(m.group()).name or m.group(),
        text,
    )


# The flags whose value is never a path, though it may hold a "/": a revision (refs/pr/3), a glob (sub/*.txt).
NOT_PATH_FLAGS = ("--revision", "--glob", "--dataset-config", "--dataset-split", "--text-column")


def command_without_folders(command: str, keep=()) -> str:
    """A command line with each argument that is a path (or a `--flag=path`) cut to its last part, but for the Hub
    ids in `keep` (the run recorded which it read: cut to `name`, `owner/name` would name another repo) and the
    values of `NOT_PATH_FLAGS`; split as the shell splits it, so a path with spaces, commas or quotes goes whole."""
    try:
        words = shlex.split(command)
    except ValueError:  # not a command line this tool wrote
        return without_folders(command, keep)

    def cut(word: str, after: str) -> str:
        flag, equals, value = word.partition("=") if word.startswith("--") else ("", "", word)
        whole = "/" not in value or value in keep or (flag or after) in NOT_PATH_FLAGS
        return flag + equals + (value if whole else Path(value).name or value)

    return shlex.join(cut(word, after) for after, word in zip(["", *words], words, strict=False))


def rerender_for(
    folder: str | Path,
    config: TinyGPTConfig,
    model_id: str,
    *,
    keep_local_paths: bool = False,
    license: str | None = None,
    base_model: str | None = None,
) -> ModelCard:
    """The folder's card rendered again for `model_id`, keeping its provenance, licence and base model (`license`
    and `base_model` replace them where given); the local paths in how it was trained (its data, its command line)
    are cut to file names unless `keep_local_paths`.
    A folder without a card (a bare `save_pretrained`) gets a training card that says nothing was recorded."""
    card = read_card(folder)
    data = card.data.to_dict() if card is not None else {}
    where = f"{Path(folder) / 'README.md'}"
    provenance = copy.deepcopy(checked_provenance(data.get("tinygpt"), where))
    training, paths_cut = provenance.get("training"), False
    if training and not keep_local_paths:
        hub_ids = [name for name in training.get("hub_ids") or [] if isinstance(name, str)]
        if isinstance(training.get("command"), str):
            command = training["command"]
            training["command"] = command_without_folders(command, keep=hub_ids)
            paths_cut = training["command"] != command
        paths = training.pop("train_paths", None)
        if paths is not None and isinstance(training.get("train_description"), str):  # its paths, named as given
            for path in sorted((path for path in paths if isinstance(path, str)), key=len, reverse=True):
                training["train_description"] = training["train_description"].replace(path, Path(path).name or path)
        for name in ("train_description", "validation_description"):
            if isinstance(training.get(name), str):
                training[name] = without_folders(training[name], keep=hub_ids)
    for name in ("license", "base_model"):
        if data.get(name) is not None and not isinstance(data[name], str):
            raise ValueError(f"{where}: {name} must be text, got {data[name]!r:.60}")
    if base_model is None and data.get("base_model") is not None:  # a local path would be published, or refused
        try:
            validate_repo_id(data["base_model"])
        except HFValidationError:
            raise ValueError(
                f"{where}: base_model {data['base_model']!r:.60} is no Hub id, which the Hub refuses in a card: set "
                "`base_model` to the Hub id of the model it came from, or take it out of the card"
            ) from None
    return render_model_card(
        config,
        model_id=model_id,
        provenance=provenance,
        license=license or data.get("license") or "mit",
        base_model=base_model or data.get("base_model"),
        # staging draws it again from the checked numbers
        loss_curve=LOSS_CURVE if (Path(folder) / TRAINING_HISTORY).is_file() else None,
        paths_cut=paths_cut,
    )
