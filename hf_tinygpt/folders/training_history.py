"""A trained model's loss history, as it travels with the model: `training_history.json` (the numbers) and
`loss.png` (the curve drawn from them), shown by its card. Publishing checks the numbers and draws the curve again:
an image is never copied from a folder."""

import functools
import io
import json
import math
from pathlib import Path

TRAINING_HISTORY = "training_history.json"
LOSS_CURVE = "loss.png"

# What a history row may hold: the step (from 1, rising) and its training loss always, the rest where measured.
_ROW_FIELDS = {"step", "train_loss", "lr", "tokens_per_s", "validation_perplexity"}


def checked_history(rows, where: str) -> list[dict]:
    """`rows` if they are a history hf-tinygpt writes, or a ValueError naming the row and field that is not."""
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{where}: a training history is a non-empty list of rows, got {type(rows).__name__}")
    previous = 0
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or not {"step", "train_loss"} <= row.keys() or row.keys() - _ROW_FIELDS:
            raise ValueError(
                f"{where}: row {index} must hold step and train_loss (and only {', '.join(sorted(_ROW_FIELDS))})"
            )
        step = row["step"]
        if isinstance(step, bool) or not isinstance(step, int) or step <= previous:
            raise ValueError(f"{where}: row {index}: step must be an integer above the row before's, got {step!r}")
        previous = step
        for name, value in row.items():
            if name != "step" and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            ):
                raise ValueError(f"{where}: row {index}: {name} must be a finite number, got {value!r:.40}")
    return rows


def read_history(folder: Path) -> list[dict] | None:
    """The checked history of a model folder, or None if it has none."""
    path = Path(folder) / TRAINING_HISTORY
    if not path.is_file():
        return None
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    return checked_history(rows, str(path))


def write_history(folder: Path, history: list[dict]):
    """The history and its curve into `folder` (a staging folder: written whole or not at all)."""
    rows = checked_history(history, f"{folder / TRAINING_HISTORY}")
    (Path(folder) / TRAINING_HISTORY).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    (Path(folder) / LOSS_CURVE).write_bytes(loss_curve_png(rows))


def loss_curve_png(history: list[dict]) -> bytes:
    """The curves as a PNG: the training loss at every step and, where it was measured, the validation loss (the
    log of its perplexity: both in nats per token, on one axis)."""
    return _drawn(json.dumps(history))


@functools.lru_cache(maxsize=1)  # a run's last curve and its model folder's are one drawing, the same bytes
def _drawn(rows: str) -> bytes:
    history = json.loads(rows)
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("a loss curve needs matplotlib (not installed): pip install 'hf-tinygpt[plots]'") from None

    figure = Figure(figsize=(7, 4), dpi=100, layout="constrained")
    axes = figure.subplots()
    axes.plot([row["step"] for row in history], [row["train_loss"] for row in history], lw=1, label="training")
    measured = [row for row in history if "validation_perplexity" in row]
    if measured:
        steps, losses = [row["step"] for row in measured], [math.log(row["validation_perplexity"]) for row in measured]
        axes.plot(steps, losses, "o-", label="validation")
    axes.set(xlabel="step", ylabel="cross-entropy (nats per token)", title="loss")
    axes.grid(alpha=0.3)
    axes.legend()
    png = io.BytesIO()
    figure.savefig(png, format="png", metadata={"Software": None})  # no matplotlib version: the same bytes anywhere
    return png.getvalue()
