"""What the explorer shows, from the models' own outputs and the plot-positions pictures; no Gradio here.

    models = load_models(["hf_tinygpt/default_model", "runs/alibi/model"])    # [ExploredModel], eager attention
    pattern = attention_pattern(model, "The cat sat on the mat", layer=0, head=1)
    curve = per_position_loss(model, token_ids, context=256)

The position pictures are `plot_positions`' own files (one implementation for the CLI and the browser); the
attention pattern is the weights the model returns with `output_attentions=True`, and the per-position loss is the
model's cross-entropy at each position of windows of the evaluated length.
"""

import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from transformers import StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

from ..folders.bundled import DEFAULT_MODEL_DIR
from ..folders.model_card import recorded_training
from ..model.positions import positions_reach
from ..plots.positions import (
    ON_A_PROMPT,
    load_for_plots,
    plot_positions,
    prompt_tokenizer,
    prompt_tokens,
    written_files,
)

try:
    from matplotlib.figure import Figure
except ImportError as error:
    from ..folders.errors import needs_extra

    raise needs_extra("explore", error) from error


class ExploredModel(NamedTuple):
    """One model the explorer shows, with what it needs beside the model."""

    label: str  # unique among the models shown
    model: object
    tokenizer: object  # reads its prompts: the model's own where its folder or Hub repo has one, else GPT-2's
    trained_at: int | None  # the context its card says it was trained at; None when unknown


def load_models(sources=(), *, hub_kwargs: dict | None = None) -> list[ExploredModel]:
    """An `ExploredModel` for each source `load_for_plots` takes (tinygpt or GPT-2 folder, Hub id, config.json, scheme
    name); the shipped model when `sources` is empty. Each model runs eager attention, the one attention
    implementation whose weights (bias and all) `output_attentions` returns; labels are made unique."""
    loaded = []
    for source in sources or [str(DEFAULT_MODEL_DIR)]:
        model, label = load_for_plots(source, hub_kwargs=hub_kwargs)
        model.set_attn_implementation("eager")
        taken, unique, count = {shown.label for shown in loaded}, label, 1
        while unique in taken:  # a label names one curve, one pane: "model (2)" may be a folder's own name
            count += 1
            unique = f"{label} ({count})"
        label = unique
        tokenizer = prompt_tokenizer(source, model, hub_kwargs=hub_kwargs)
        loaded.append(ExploredModel(label, model, tokenizer, training_context(model, hub_kwargs)))
    return loaded


def training_context(model, hub_kwargs: dict | None = None) -> int | None:
    """The context the model was trained at, from the card (`tinygpt.training.block_size`) in the folder or Hub repo
    it was loaded from (`name_or_path`; `hub_kwargs` as it was loaded); None when unknown."""
    return recorded_training(model.config.name_or_path, **(hub_kwargs or {})).get("block_size")


def picture_names(model, token_vs_position: bool = False) -> tuple[str, ...]:
    """The pictures of the model's scheme that `plot-positions` draws, but token_vs_position, or that one alone."""
    everything = model.config.position_scheme().pictures
    return tuple(name for name in everything if (name == "token_vs_position") == token_vs_position) or everything


def reads_the_prompt(name: str) -> bool:
    """Whether the picture `name` is drawn from the prompt: token_vs_position, and the pictures of what a scheme
    computes on it (CoPE's, FoX's, CABLE's, PaTH's, stick-breaking's)."""
    return name == "token_vs_position" or name in ON_A_PROMPT


def position_pictures(
    model, label: str, out_dir, prompt: str, *, token_vs_position: bool = False, names=None, **options
) -> list[Path]:
    """The PNGs `plot-positions` draws of the model's scheme, written into `out_dir`: `names`, by default
    `picture_names(model, token_vs_position)`. `options` go to `plot_positions` (n_dims, seed, max_positions,
    tokenizer)."""
    names = picture_names(model, token_vs_position) if names is None else names
    plot_positions(model, out_dir, prompt=prompt, label=label, names=names, **options)
    return written_files(out_dir, names)


@torch.no_grad()
def attention_pattern(model, prompt: str, layer: int, head: int, tokenizer=None) -> dict:
    """{"tokens", "weights", "remapped"}: the attention weights of `layer`'s `head` on the prompt (queries × keys),
    as the model returns them with `output_attentions=True`, and whether the prompt's ids were mapped into a smaller
    vocabulary (`prompt_tokens`): then the tokens are the tokenizer's, not what the model read."""
    if not 0 <= layer < model.config.n_layer:
        raise ValueError(f"`layer` must be in [0, {model.config.n_layer}), got {layer}")
    if not 0 <= head < model.config.n_head:
        raise ValueError(f"`head` must be in [0, {model.config.n_head}), got {head}")
    ids, tokens, remapped = prompt_tokens(model, prompt, tokenizer)
    attentions = model(torch.tensor([ids]), output_attentions=True).attentions
    return {"tokens": tokens, "weights": attentions[layer][0, head].float().numpy(), "remapped": remapped}


TITLE_CHARACTERS = 60  # a line of a plot's title, in the narrowest pane (three models side by side)


def wrapped(text: str) -> str:
    """`text` broken into lines that fit the narrowest pane, each of its own lines wrapped apart (a figure's text
    does not wrap itself: a model's long label ran past both edges)."""
    return "\n".join(textwrap.fill(line, TITLE_CHARACTERS) for line in text.split("\n"))


def plot_message(text: str) -> Figure:
    """A small figure that says `text`: what a pane shows where a model has nothing to draw."""
    figure = Figure(figsize=(6, 1.5), layout="constrained")
    axes = figure.subplots()
    axes.set_axis_off()
    axes.text(0.5, 0.5, wrapped(text), ha="center", va="center", transform=axes.transAxes)
    return figure


def plot_attention_pattern(pattern: dict, title: str) -> Figure:
    """The pattern as a heatmap, queries down, keys across, each labelled with its token."""
    names = [f"{i}: {text!r}" for i, text in enumerate(pattern["tokens"])]
    figure = Figure(figsize=(6, 5), layout="constrained")
    axes = figure.subplots()
    image = axes.imshow(pattern["weights"], cmap="viridis", vmin=0, vmax=1)
    figure.colorbar(image, ax=axes, label="attention weight")
    axes.set_title(wrapped(title), fontsize=10)  # centred on the heatmap, which the token names push right
    axes.set(
        xlabel="key (attended to)",
        ylabel="query",
        xticks=range(len(names)),
        yticks=range(len(names)),
    )
    axes.set_xticklabels(names, rotation=90, fontsize=7)
    axes.set_yticklabels(names, fontsize=7)
    return figure


# Positions whose logits are made at once when scoring a long text: the logits of a whole window of GPT-2's vocabulary
# (2,048 × 50,257 floats, 412 MB) are never held, only this many rows of them.
LOGIT_ROWS = 256


@torch.no_grad()
def per_position_loss(model, ids: torch.Tensor, context: int) -> np.ndarray:
    """Mean cross-entropy (nats) at each position 1 … context−1 of non-overlapping windows of `context` tokens of
    `ids`: entry i is the loss of predicting window token i + 1 from the i + 1 tokens before it. Positions a learned
    table has no row for are NaN. One window at a time, its logits `LOGIT_ROWS` positions at a time: the memory
    taken is that of one window's forward, however long the text."""
    usable = min(context, positions_reach(model.config) or context)
    windows = ids[: len(ids) // context * context].view(-1, context)[:, :usable]
    if len(windows) == 0:
        raise ValueError(f"the text has {len(ids)} tokens, fewer than one window of `context` = {context}")
    total = torch.zeros(usable - 1)
    for window in windows:
        hidden = model.transformer(window[None]).last_hidden_state[0, :-1]
        for start in range(0, usable - 1, LOGIT_ROWS):
            rows = slice(start, start + LOGIT_ROWS)
            logits = model.lm_head(hidden[rows]).float()
            total[rows] += F.cross_entropy(logits, window[1:][rows], reduction="none")
    return np.concatenate([(total / len(windows)).numpy(), np.full(context - usable, np.nan)])


class _Stopped(StoppingCriteria):
    """Ends a generation once `event` is set: its reader is gone."""

    def __init__(self, event: threading.Event):
        self.event = event

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool)


def greedy_continuation(model, ids: list[int], new_tokens: int, tokenizer, lock: threading.Lock) -> Iterator[str]:
    """The greedy continuation of `ids` as `generate` streams it: the text so far, after each new piece. A worker
    thread generates while holding `lock` (the models are shared); an error there is raised here once the stream
    has ended, and closing this iterator early (a reader gone) stops the worker at its next token."""
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True)
    stop, failed = threading.Event(), []
    inputs = torch.tensor([ids])

    def run():
        try:
            with lock:
                if not stop.is_set():
                    model.generate(
                        input_ids=inputs,
                        attention_mask=torch.ones_like(inputs),
                        max_new_tokens=new_tokens,
                        do_sample=False,
                        pad_token_id=tokenizer.eos_token_id,
                        streamer=streamer,
                        stopping_criteria=StoppingCriteriaList([_Stopped(stop)]),
                    )
        except Exception as error:  # raised to the reader below: a thread's own exception would end it unseen
            failed.append(error)
        finally:
            streamer.end()  # the reader waits for this; after an error generate never sends it

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    text = ""
    try:
        for piece in streamer:
            text += piece
            yield text
    finally:
        stop.set()
    worker.join()
    if failed:
        raise failed[0]


def plot_per_position_loss(curves: list[tuple[str, np.ndarray, int | None]], title: str) -> Figure:
    """One line per model (label, per-position loss, training context or None), each training context marked: the
    loss faint, its running mean over 1/32 of the window bold (a position's loss over a few windows is noisy)."""
    figure = Figure(figsize=(9, 4.5), layout="constrained")
    axes = figure.subplots()
    for index, (label, losses, trained_at) in enumerate(curves):
        colour, positions = f"C{index % 10}", np.arange(1, len(losses) + 1)
        width = max(1, len(losses) // 32)
        known, window = ~np.isnan(losses), np.ones(width)
        # The mean of the known losses within the window; at the ends and next to NaN, of fewer of them.
        with np.errstate(invalid="ignore"):  # 0 / 0 past a learned table's last row: NaN, as it should be
            smooth = np.convolve(np.nan_to_num(losses), window, "same") / np.convolve(known, window, "same")
        smooth[~known] = np.nan
        axes.plot(positions, losses, color=colour, linewidth=0.5, alpha=0.3)
        axes.plot(positions, smooth, color=colour, linewidth=1.5, label=f"{label} (running mean of {width})")
        if trained_at:
            axes.axvline(
                trained_at, color=colour, linestyle="--", linewidth=0.8, label=f"{label}: trained at {trained_at}"
            )
    axes.set(title=title, xlabel="position in the window", ylabel="mean loss (nats)")
    axes.legend(fontsize=7)
    return figure
