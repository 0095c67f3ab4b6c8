"""OUT/model, the run's final model: a complete tinygpt folder (weights in `save_dtype`, tokenizer, generation
config, the loss history and its curve) with a card that says how it was trained and its validation perplexity,
measured on the weights exactly as written."""

import copy
import os
from pathlib import Path

import torch

from ..folders.model_card import render_model_card
from ..folders.model_folder import DTYPES, save_model_folder
from ..folders.outputs import output_folder
from ..folders.reading import load_strictly
from ..folders.training_history import LOSS_CURVE
from .data import RunData
from .evaluate import perplexity
from .settings import TrainingSettings


def hardware(settings: TrainingSettings, accelerator) -> str:
    """What the run trained on, as the card says it: `2 processes × CPU (4 threads), bf16 autocast`."""
    device = accelerator.device.type
    if device == "cpu":
        device = f"CPU ({torch.get_num_threads()} threads)"
    processes = accelerator.num_processes
    return f"{processes} process{'es' if processes > 1 else ''} × {device}{', bf16 autocast' if settings.bf16 else ''}"


def _started_from(settings: TrainingSettings) -> str | None:
    """What the card says a run from `init_from` started from: its Hub id, or a local model (never its path)."""
    if not settings.init_from:
        return None
    return "a local model" if os.path.lexists(settings.init_from) else settings.init_from


def _hub_ids(settings: TrainingSettings) -> list[str]:
    """The Hub ids the run read (`init_from`, `tokenizer`, `dataset` that name no path here): a published card keeps
    them whole, where it cuts a path to its last part."""
    return [
        value
        for value in (settings.init_from, settings.tokenizer, settings.dataset)
        if value and "/" in value and not os.path.lexists(value)
    ]


def card_training(settings: TrainingSettings, data: RunData, summary: dict, accelerator) -> dict:
    """What the model card says of the run (its YAML's `tinygpt.training`); the perplexity is filled in later."""
    started, hub_ids = _started_from(settings), _hub_ids(settings)
    return {
        **({"fine_tuned_from": started} if started else {}),
        **({"hub_ids": hub_ids} if hub_ids else {}),
        "train_description": data.description,  # what the run trained on, as `run_tokens` describes it
        "train_paths": settings.train or [settings.dataset],  # a published card names them without folders
        "train_tokens": int(data.blocks.size),
        "tokenizer": tokenizer_description(data.tokenizer, data.tokenizer_from),
        "tokenizer_sha256": data.tokenizer_sha256,
        "steps": settings.steps,
        "tokens_per_step": settings.batch_size * settings.block_size,
        "hardware": hardware(settings, accelerator),
        "wall_time": f"{summary['wall_s'] / 60:.1f} min",
        "validation_perplexity": None,
        "validation_description": ", ".join(Path(p).name for p in settings.validation) or None,
        "validation_tokens": int(len(data.validation)) if data.validation is not None else 0,
        "block_size": settings.block_size,
        "command": settings.command,
        "seed": settings.seed,
        "learning_rate": settings.learning_rate,
    }


def tokenizer_description(tokenizer, tokenizer_from: str) -> str:
    """How a card names the tokenizer a run's tokens came from (its folder may be local: never named)."""
    if tokenizer_from == "gpt2":
        return "GPT-2's BPE"
    backend = getattr(tokenizer, "backend_tokenizer", None)
    kind = type(backend.model).__name__ if backend is not None else type(tokenizer).__name__
    return f"a {kind} tokenizer of {len(tokenizer):,} tokens"


def write_final_model(
    model, folder: Path, settings: TrainingSettings, data: RunData, *, training: dict, history: list[dict]
) -> float | None:
    """OUT/model, atomically: weights (in `save_dtype`), tokenizer, generation config, the loss history and its
    curve, and a card (showing the curve) whose validation perplexity is measured on the weights exactly as written."""
    if bad := [key for key, t in model.state_dict().items() if t.is_floating_point() and not torch.isfinite(t).all()]:
        raise ValueError(
            f"training diverged: {len(bad)} tensors hold inf or NaN ({', '.join(bad[:3])}, ...); nothing "
            f"written to {folder}; lower `TrainingSettings.learning_rate`"
        )
    dtype = DTYPES.get(settings.save_dtype) if settings.save_dtype else None
    to_save = model if dtype is None else copy.deepcopy(model).to(dtype)
    with output_folder(folder, force=True, inside=folder.parent) as staging:  # ours: the run folder is locked
        save_model_folder(to_save, staging, tokenizer=data.tokenizer, history=history)
        if data.validation is not None:
            written = load_strictly(staging, dtype=torch.float32)
            training["validation_perplexity"] = perplexity(
                written, data.validation, settings.block_size, settings.eval_batch_size
            )
        hub_id = settings.init_from if _started_from(settings) == settings.init_from else None
        card = render_model_card(  # a local starting folder is not named: a published card would show its path
            model.config,
            model_id=str(folder),
            provenance={"made_by": "training", "training": training},
            base_model=hub_id,
            loss_curve=LOSS_CURVE if history else None,
        )
        card.save(staging / "README.md")
    return training["validation_perplexity"]
