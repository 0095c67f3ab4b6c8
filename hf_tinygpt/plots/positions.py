"""Pictures of what a model's position scheme computes, drawn from the model's own methods.

Every number plotted comes from the model's position scheme (`transformer.positions`): learned rows are its
`weight`, sinusoidal rows its `rows()`, what is added to the token embeddings its `add_to_embeddings()`, RoPE angles
its `inv_freq` and cos/sin from `rotary_cos_sin()` + `apply_rotary()` (xPos's scales too), the biases of ALiBi, T5,
KERPLE and FIRE its `bias()`, PoPE's phases its `inv_freq` and `phase_bias`; what a scheme computes on a prompt is
recorded in a forward pass (`recorded_on_prompt`): CoPE's positions from its `contextual_positions()`, FoX's and
CABLE's summed gates from `decay()`, PaTH's transformed scores from `through_transforms()`, stick-breaking's
weights as the attention returns them. Nothing is re-derived here.

    model, label = load_for_plots("out/tinygpt")              # or a GPT-2 folder / Hub id, a config.json, "rope"
    arrays = plot_positions(model, "plots/", label=label)     # {picture name: {array name: numpy array}}

Which pictures apply (`PICTURES`):
    learned, sinusoidal  position_matrix, dimension_traces, cosine_similarity, token_vs_position
    rope                 rope_frequencies, rope_similarity, token_vs_position
    xpos                 xpos_decay, rope_similarity, token_vs_position
    alibi                alibi_bias, token_vs_position
    t5, kerple, fire     t5_bias / kerple_bias / fire_bias, token_vs_position
    pope                 pope_phases, token_vs_position
    cope                 cope_positions (on the prompt), token_vs_position
    fox, cable           gate_bias (on the prompt), token_vs_position
    path                 path_transforms (on the prompt), token_vs_position
    stick_breaking       stick_breaking_weights (on the prompt), token_vs_position
    none                 token_vs_position   (its title says that no position information enters at all)

Figures are `matplotlib.figure.Figure` objects saved straight to files: no pyplot, no global state, no window, so
this works headless and nothing leaks between calls (the same as the Agg backend, without switching backends).
"""

import functools
import math
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import decoders
from transformers.convert_slow_tokenizer import bytes_to_unicode

from ..folders.bundled import gpt2_tokenizer, own_tokenizer
from ..folders.errors import needs_extra
from ..folders.outputs import output_folder
from ..folders.reading import load_strictly, read_config_dict, read_tinygpt_config, reading_checkpoint
from ..model.configuration_tinygpt import TinyGPTConfig
from ..model.modeling_tinygpt import TinyGPTForCausalLM
from ..model.positions import POSITION_SCHEME_CLASSES, PositionScheme, apply_rotary, positions_reach
from ..settings import hub_kwargs
from .settings import DEFAULT_PROMPT, PlotSettings, is_scheme_name

try:
    from matplotlib.figure import Figure
except ImportError as error:
    raise needs_extra("plots", error) from error

# A bare scheme name builds this (untrained) model: GPT-2's vocabulary, so the bundled tokenizer's ids fit.
BARE_CONFIG = dict(n_embd=128, n_positions=256, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


# ---- loading ---------------------------------------------------------------------------------------------------


def load_for_plots(
    model_or_config: str,
    scheme: str | None = None,
    *,
    seed: int = 0,
    hub_kwargs: dict | None = None,
    **config_overrides,
):
    """(model in eval mode and float32, label for titles) from any of:

    - a bare scheme name ("learned", "sinusoidal", "rope", "alibi", "t5", ..., "none"): an untrained TinyGPT of `BARE_CONFIG`
      (GPT-2 vocabulary, n_embd 128, 256 positions), randomly initialised with `seed`; `config_overrides` change it;
    - a `config.json` file (tinygpt or GPT-2): that shape, untrained, seeded; `scheme` and `config_overrides`
      change it;
    - a model folder or Hub id, tinygpt or GPT-2 (GPT-2 converts on the fly): the trained weights. Its scheme is
      fixed by the weights, so `scheme` may only repeat it.

    The label names the source and says when the weights are untrained; titles add the scheme."""
    source = str(model_or_config)
    if is_scheme_name(source):
        if scheme not in (None, source):
            raise ValueError(f"{source!r} is a scheme name; scheme={scheme!r} contradicts it")
        config = TinyGPTConfig(**{**BARE_CONFIG, **config_overrides, "position_embedding_type": source})
        return _untrained(config, seed, f"untrained {source} TinyGPT")  # two bare schemes: two names
    if os.path.isfile(source):
        config = read_tinygpt_config(source)  # tinygpt and GPT-2 config.json files alike
        if scheme is not None or config_overrides:
            fields = {**config.to_dict(), **config_overrides}
            if scheme not in (None, config.position_embedding_type):  # the old scheme's own fields go with it
                own = config.position_scheme().config_fields
                fields = {name: value for name, value in fields.items() if name not in own}
                fields["position_embedding_type"] = scheme
            config = TinyGPTConfig.from_dict(fields)
        return _untrained(config, seed, f"{Path(source).name} (untrained)")
    if config_overrides:
        raise ValueError(f"{source}: a checkpoint's shape is fixed by its weights; cannot apply {config_overrides}")

    try:
        config_dict = read_config_dict(source, **(hub_kwargs or {}))
    except FileNotFoundError:
        if os.path.exists(source):  # a folder or file here: what is wrong with it (a run's folder: where its model is)
            raise
        raise FileNotFoundError(
            f"{source}: not a scheme name ({', '.join(POSITION_SCHEME_CLASSES)}), a config.json file, a model folder or a "
            "reachable Hub id"
        ) from None
    with reading_checkpoint(source):
        model = load_strictly(source, **(hub_kwargs or {})).float().eval()
    found = model.config.position_embedding_type
    if scheme not in (None, found):
        raise ValueError(f"{source} has {found} positions (fixed by its weights), not {scheme}")
    name = Path(source).resolve().name if os.path.isdir(source) else source
    return model, name + (" (GPT-2 checkpoint)" if config_dict.get("model_type") == "gpt2" else "")


def prompt_tokenizer(source: str, model, *, hub_kwargs: dict | None = None):
    """What reads prompts for the model `load_for_plots(source)` gave: the folder's or Hub repo's own tokenizer where
    it carries one, else the bundled GPT-2 tokenizer (whose ids `prompt_tokens` fits into a smaller vocabulary)."""
    source = str(source)
    if os.path.isfile(source) or is_scheme_name(source):
        return gpt2_tokenizer()  # an untrained model has no tokenizer of its own
    return own_tokenizer(source, vocab_size=model.config.vocab_size, **(hub_kwargs or {})) or gpt2_tokenizer()


def _untrained(config: TinyGPTConfig, seed: int, name: str):
    torch.manual_seed(seed)
    model = TinyGPTForCausalLM(config).float().eval()
    shape = f"n_embd {config.n_embd}, {config.n_positions} positions, {config.n_head} heads"
    return model, f"{name}, random init seed {seed} ({shape})"


# ---- shared helpers --------------------------------------------------------------------------------------------


def _body(model):
    body = getattr(model, "transformer", model)
    if not isinstance(getattr(body, "positions", None), PositionScheme):
        raise TypeError(f"{type(model).__name__} is not a TinyGPT model: load GPT-2 ones with load_for_plots()")
    return body


def _scheme(model) -> str:
    return model.config.position_embedding_type


def _label(model, label: str | None) -> str:
    if label:
        return label
    name = model.config.name_or_path
    return Path(name).name if name else f"TinyGPT (n_embd {model.config.n_embd}, {model.config.n_positions} positions)"


def _title(fig: Figure, what: str, model, label):
    scheme = POSITION_SCHEME_CLASSES[_scheme(model)]
    fig.suptitle(f"{what}\n{_label(model, label)} — {scheme.known_as or scheme.name}", fontsize=11)


def _requires(model, picture: str):
    if picture not in POSITION_SCHEME_CLASSES[_scheme(model)].pictures:
        applies = [name for name, scheme in POSITION_SCHEME_CLASSES.items() if picture in scheme.pictures]
        raise ValueError(f"{picture} applies to {', '.join(applies)} positions, not {_scheme(model)}")


MAX_PLOTTED_POSITIONS = 8192


def _positions(model, max_positions: int | None) -> int:
    """How many positions to plot: `max_positions`, default n_positions; learned has no rows past n_positions."""
    n = model.config.n_positions if max_positions is None else int(max_positions)
    if n < 2:  # one position has nothing to be compared with
        raise ValueError(f"`max_positions` must be at least 2, got {n}")
    if (reach := positions_reach(model.config)) is not None and n > reach:
        raise ValueError(f"{_scheme(model)} positions stop at n_positions={reach}; cannot plot {n}")
    if n > MAX_PLOTTED_POSITIONS:  # the similarity pictures are positions × positions
        raise ValueError(f"cannot plot {n} positions: at most {MAX_PLOTTED_POSITIONS} (pass a smaller `max_positions`)")
    return n


def _save(fig: Figure, out_dir, name: str, svg: bool):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / f"{name}.png", dpi=110)
    if svg:
        fig.savefig(out / f"{name}.svg", metadata={"Date": None})  # no timestamp: same model, same file


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().float().cpu().numpy()


def _heatmap(fig, ax, matrix, *, cmap="RdBu_r", limit=None, label="value"):
    """A colour-mapped matrix, symmetric around 0, with its colour bar."""
    if limit is None:
        limit = float(np.abs(matrix).max()) or 1.0
    # "auto": nearest when magnified (crisp cells), antialiased when shrunk, so interleaved sin/cos columns do not
    # alias into false bands; smoothing the data (not the colours) keeps every pixel on the colour map
    image = ax.imshow(
        matrix, aspect="auto", cmap=cmap, vmin=-limit, vmax=limit, interpolation="auto", interpolation_stage="data"
    )
    fig.colorbar(image, ax=ax, label=label, shrink=0.9)
    return image


def _position_rows(model, n: int) -> torch.Tensor:
    """(n, n_embd) float32: what the position scheme adds at positions 0..n-1 (learned: the rows of
    `positions.weight`, sinusoidal: `positions.rows()`)."""
    return _body(model).positions.added_rows(n, model.config.n_embd)


# ---- learned and sinusoidal ------------------------------------------------------------------------------------


@torch.no_grad()
def plot_position_matrix(model, out_dir, *, label=None, svg=False, max_positions=None) -> dict[str, np.ndarray]:
    """`position_matrix`: heatmap of the rows added to the token embeddings, positions × dimensions.
    Returns {"matrix": (positions, n_embd)}."""
    _requires(model, "position_matrix")
    matrix = _numpy(_position_rows(model, _positions(model, max_positions)))
    fig = Figure(figsize=(10, 6), layout="constrained")
    ax = fig.add_subplot()
    _heatmap(fig, ax, matrix, label="value added to the token embedding")
    ax.set(xlabel="embedding dimension", ylabel="position")
    shape = f"{matrix.shape[0]} positions × {matrix.shape[1]} dimensions"
    _title(fig, f"Position matrix: the row added at each position ({shape})", model, label)
    _save(fig, out_dir, "position_matrix", svg)
    return {"matrix": matrix}


def trace_dimensions(n_embd: int, n_dims: int = 8, seed: int = 0) -> np.ndarray:
    """The dimensions `plot_dimension_traces` shows: `n_dims` of `n_embd` drawn by a seeded permutation, sorted."""
    if n_dims < 1:
        raise ValueError(f"`n_dims` must be at least 1, got {n_dims}")
    generator = torch.Generator().manual_seed(seed)
    return np.sort(torch.randperm(n_embd, generator=generator)[: min(n_dims, n_embd)].numpy())


@torch.no_grad()
def plot_dimension_traces(
    model, out_dir, *, label=None, svg=False, n_dims=8, seed=0, max_positions=None
) -> dict[str, np.ndarray]:
    """`dimension_traces`: one small plot per chosen dimension (see `trace_dimensions`), its value across positions.
    Returns {"dims": (n_dims,), "traces": (positions, n_dims)}."""
    _requires(model, "dimension_traces")
    rows = _numpy(_position_rows(model, _positions(model, max_positions)))
    dims = trace_dimensions(rows.shape[1], n_dims, seed)
    traces = rows[:, dims]
    cols = min(4, len(dims))
    grid_rows = math.ceil(len(dims) / cols)
    fig = Figure(figsize=(3.2 * cols, 2.3 * grid_rows + 0.8), layout="constrained")
    axes = fig.subplots(grid_rows, cols, sharex=True, squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= len(dims):
            ax.set_visible(False)
            continue
        ax.plot(np.arange(len(traces)), traces[:, i], lw=1.2)
        ax.axhline(0, color="0.7", lw=0.6)
        ax.set_title(f"dimension {dims[i]}", fontsize=9)
        if i % cols == 0:
            ax.set_ylabel("value")
        if i // cols == grid_rows - 1 or i + cols >= len(dims):
            ax.set_xlabel("position")
    _title(
        fig,
        f"Single dimensions of the position rows across positions ({len(dims)} chosen with seed {seed})",
        model,
        label,
    )
    _save(fig, out_dir, "dimension_traces", svg)
    return {"dims": dims, "traces": traces}


@torch.no_grad()
def plot_cosine_similarity(model, out_dir, *, label=None, svg=False, max_positions=None) -> dict[str, np.ndarray]:
    """`cosine_similarity`: cosine similarity between position rows (positions × positions) and between embedding
    dimensions, each a column over the plotted positions (n_embd × n_embd).
    Returns {"positions": (P, P), "dimensions": (n_embd, n_embd)}."""
    _requires(model, "cosine_similarity")
    rows = _position_rows(model, _positions(model, max_positions))
    by_position = F.normalize(rows, dim=1)
    by_dimension = F.normalize(rows, dim=0)
    positions, dimensions = _numpy(by_position @ by_position.T), _numpy(by_dimension.T @ by_dimension)
    fig = Figure(figsize=(13, 6), layout="constrained")
    left, right = fig.subplots(1, 2)
    _heatmap(fig, left, positions, limit=1.0, label="cosine similarity")
    left.set(xlabel="position", ylabel="position", title="between positions (rows)")
    _heatmap(fig, right, dimensions, limit=1.0, label="cosine similarity")
    right.set(
        xlabel="embedding dimension",
        ylabel="embedding dimension",
        title=f"between dimensions (columns over {len(rows)} positions)",
    )
    _title(fig, "Cosine similarity of the position rows", model, label)
    _save(fig, out_dir, "cosine_similarity", svg)
    return {"positions": positions, "dimensions": dimensions}


# ---- rope ------------------------------------------------------------------------------------------------------


@torch.no_grad()
def plot_rope_frequencies(model, out_dir, *, label=None, svg=False) -> dict[str, np.ndarray]:
    """`rope_frequencies`: θ_i, the angle (radians per position) by which rotated pair i of each head turns, from the
    model's `positions.inv_freq`, and its wavelength 2π/θ_i in positions (infinite for the pairs p-RoPE leaves
    unturned, which the log axes leave out). Returns {"theta": (rotary_dim/2,), "wavelength": (rotary_dim/2,)}."""
    _requires(model, "rope_frequencies")
    positions = _body(model).positions
    theta = _numpy(positions.inv_freq)
    with np.errstate(divide="ignore"):
        wavelength = 2 * np.pi / theta
    pairs, turning = np.arange(len(theta)), theta > 0
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.semilogy(pairs[turning], theta[turning], "o-", ms=3)
    if not turning.all():
        left.text(0.98, 0.95, f"pairs {pairs[~turning][0]}–{pairs[-1]} turn by 0", transform=left.transAxes, ha="right")
    left.set(
        xlabel="rotated pair i (dims i and i + rotary_dim/2 of each head)",
        ylabel="θ_i (radians per position)",
        title="rotation frequency",
    )
    right.semilogy(pairs[turning], wavelength[turning], "o-", ms=3, color="C1")
    right.axhline(
        model.config.n_positions, color="0.4", ls="--", lw=1, label=f"n_positions = {model.config.n_positions}"
    )
    right.set(xlabel="rotated pair i", ylabel="2π / θ_i (positions per full turn)", title="wavelength")
    right.legend(loc="upper left")
    rope_type = model.config.rope_parameters.get("rope_type", "default")
    _title(fig, f"RoPE frequencies (rope_type {rope_type}, rotary_dim {positions.rotary_dim} per head)", model, label)
    _save(fig, out_dir, "rope_frequencies", svg)
    return {"theta": theta, "wavelength": wavelength}


@torch.no_grad()
def rope_similarity(model, max_offset: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(offsets 0..n-1, similarity): q_m·k_0 / q_0·k_0 for q = k = the all-ones vector over one head's rotated dims,
    q rotated to position m and k to position 0 by the model's own `rotary_cos_sin` and `apply_rotary`.

    That is mean_i cos(m·θ_i) over the rotated pairs, which is also the expected q·k (normalised) for q = k with
    i.i.d. zero-mean entries: how much RoPE alone lowers the score of a key that matches the query exactly, as it
    moves m positions back. 1 at offset 0 (xPos: mean_i ζ_i^(m/γ)·cos(m·θ_i)). Any attention scaling (YaRN) cancels
    in the ratio. With rope_type "dynamic" and more than n_positions offsets, the model rescales its frequencies as
    a forward pass that long would (and leaves them so until a shorter one), so the curve is what such a pass
    computes."""
    body = _body(model)
    n = _positions(model, max_offset)
    ones = torch.ones(1, 1, n, body.positions.rotary_dim)  # (batch, heads, positions, rotary_dim)
    query, key = apply_rotary(ones, ones, body.positions.rotary_cos_sin(ones, torch.arange(n)[None]))  # xPos: 4
    scores = query[0, 0] @ key[0, 0, 0]  # query at every position m · key at position 0
    return np.arange(n), _numpy(scores / scores[0])


@torch.no_grad()
def plot_rope_similarity(model, out_dir, *, label=None, svg=False, max_positions=None) -> dict[str, np.ndarray]:
    """`rope_similarity`: `rope_similarity()` against the offset. Returns {"offsets": (n,), "similarity": (n,)}."""
    _requires(model, "rope_similarity")
    offsets, similarity = rope_similarity(model, max_positions)
    fig = Figure(figsize=(10, 5), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(offsets, similarity, lw=1.3)
    ax.axhline(0, color="0.7", lw=0.6)
    if offsets[-1] >= model.config.n_positions:
        ax.axvline(model.config.n_positions, color="0.4", ls="--", lw=1, label="n_positions")
        ax.legend()
    ax.set(
        xlabel="relative offset m = query position − key position",
        ylim=(min(-0.2, similarity.min() - 0.05), 1.05),
        ylabel="q·k at offset m / q·k at offset 0",
    )
    ax.text(
        0.98,
        0.95,
        "q = k = all-ones over the rotated dims\n= mean over pairs i of cos(m·θ_i)",
        transform=ax.transAxes,
        ha="right",
        va="top",
        fontsize=9,
        bbox=dict(fc="white", ec="0.8"),
    )
    what = _body(model).positions.known_as
    _title(fig, f"{what}: similarity of identical q and k as their offset grows", model, label)
    _save(fig, out_dir, "rope_similarity", svg)
    return {"offsets": offsets, "similarity": similarity}


@torch.no_grad()
def plot_xpos_decay(model, out_dir, *, label=None, svg=False, max_positions=None) -> dict[str, np.ndarray]:
    """`xpos_decay`: how much xPos shrinks each rotated pair's share of q·k as the offset m grows, ζ_i^(m/γ): the
    length of pair i's (cos, sin) for a query at position m times that of a key at position 0, both from the model's
    `rotary_cos_sin`. Returns {"offsets": (n,), "decay": (head_dim/2, n)}."""
    _requires(model, "xpos_decay")
    n = _positions(model, max_positions)
    cos, sin, key_cos, key_sin = _body(model).positions.rotary_cos_sin(torch.zeros(1, n, 1), torch.arange(n)[None])
    pairs = cos.shape[-1] // 2
    decay = _numpy((torch.hypot(cos, sin) * torch.hypot(key_cos, key_sin)[:, :1])[0, :, :pairs].T)
    fig = Figure(figsize=(10, 5.5), layout="constrained")
    ax = fig.add_subplot()
    colours = _colour_cycle(pairs)
    shown = sorted(set(np.linspace(0, pairs - 1, min(pairs, 8)).round().astype(int)))
    for pair in shown:
        ax.plot(np.arange(n), decay[pair], color=colours[pair], lw=1.2, label=f"pair {pair}")
    ax.set(xlabel="offset m = query position − key position", ylabel="factor on pair i's share of q·k")
    ax.legend(fontsize=8)
    _title(fig, f"xPos: ζ_i^(m/γ), γ = xpos_scale_base = {model.config.xpos_scale_base:g}", model, label)
    _save(fig, out_dir, "xpos_decay", svg)
    return {"offsets": np.arange(n), "decay": decay}


# ---- attention biases: alibi, t5, kerple, fire -------------------------------------------------------------------


@torch.no_grad()
def plot_attention_bias(model, out_dir, *, label=None, svg=False, max_positions=None) -> dict[str, np.ndarray]:
    """`SCHEME_bias` (alibi, t5, kerple, fire): the bias each head adds to the attention score of a key d positions
    before the query, from the model's `positions.bias()` (the last of n queries against all keys; FIRE's depends on
    where that query is). Returns {"distances": (n,), "bias": (n_head, n)}, and ALiBi's "slopes" (n_head,)."""
    scheme = _scheme(model)
    _requires(model, f"{scheme}_bias")
    positions = _body(model).positions
    n = _positions(model, max_positions)
    bias = _numpy(positions.bias(1, n, n - 1)[0, :, 0].flip(-1))  # key slot n-1-d is d positions before the query
    distances = np.arange(n)
    result = {"distances": distances, "bias": bias}
    heads = [f"head {head}" for head in range(len(bias))]
    if (slopes := getattr(positions, "slopes", None)) is not None:  # ALiBi's fixed slope per head
        result["slopes"] = _numpy(slopes)
        heads = [f"{name}: slope {slope:.3g}" for name, slope in zip(heads, result["slopes"], strict=True)]
    fig = Figure(figsize=(10, 5.5), layout="constrained")
    ax = fig.add_subplot()
    colours = _colour_cycle(len(bias))
    for head, row in enumerate(bias):
        ax.plot(distances, row, color=colours[head], lw=1.2, label=heads[head])
    ax.set(xlabel="distance i − j (query position − key position)", ylabel="bias added to the attention score")
    ax.legend(fontsize=8, ncol=2 if len(bias) > 8 else 1, loc="best")
    _title(fig, positions.bias_title.format(query=n - 1, **vars(positions)), model, label)
    _save(fig, out_dir, f"{scheme}_bias", svg)
    return result


def _colour_cycle(n: int):
    from matplotlib import colormaps

    return colormaps["viridis"](np.linspace(0, 0.9, n))


# ---- on a prompt: what a scheme computed in the model's own forward pass ----------------------------------------


@torch.no_grad()
def recorded_on_prompt(model, method: str, prompt: str = DEFAULT_PROMPT, tokenizer=None) -> tuple[list, list[str]]:
    """Each call of the position scheme's `method` in a forward pass over `prompt`, in layer order, as
    (arguments, result), and the prompt's tokens. The method is the model's own; the recording is undone after."""
    body = _body(model)
    ids, tokens, _ = prompt_tokens(model, prompt, tokenizer)
    scheme, recorded = body.positions, []
    compute = getattr(scheme, method)
    setattr(scheme, method, lambda *args: recorded.append((args, compute(*args))) or recorded[-1][1])
    try:
        model(torch.tensor([ids]), use_cache=False)  # a cache would be rewritten in place by PaTH, its keys too
    finally:
        delattr(scheme, method)  # the class's method again
    return recorded, tokens


def _plot_on_prompt(model, out_dir, name, values, tokens, *, what, title, label, svg, cmap="viridis"):
    """`values` (n_layer, n_head, T, T) on the prompt's tokens: head 0 of the first and last layers (query × key),
    and every head's value on each key seen from the last query, first layer. Keys after a query are left blank."""
    hidden = ~np.tril(np.ones(values.shape[-2:], dtype=bool))
    values = np.where(hidden, np.nan, values)
    names = [f"{i}: {text!r}" for i, text in enumerate(tokens)]
    layers = sorted({0, len(values) - 1})
    fig = Figure(figsize=(6 * (len(layers) + 1), 6), layout="constrained")
    axes = fig.subplots(1, len(layers) + 1, squeeze=False)[0]
    for ax, layer in zip(axes, layers, strict=False):
        image = ax.imshow(values[layer, 0], cmap=cmap)
        fig.colorbar(image, ax=ax, label=what, shrink=0.8)
        ax.set(title=f"layer {layer}, head 0", xlabel="key", ylabel="query", xticks=range(len(names)))
        ax.set_xticklabels(names, fontsize=7, rotation=90)
        ax.set_yticks(range(len(names)), names, fontsize=7)
    last = axes[-1]
    colours = _colour_cycle(values.shape[1])
    for head, row in enumerate(values[0, :, -1]):
        last.plot(np.arange(len(names)), row, "o-", ms=3, color=colours[head], label=f"head {head}")
    last.set(xlabel="key", ylabel=what, title="seen from the last query, layer 0")
    last.set_xticks(range(len(names)), names, fontsize=7, rotation=90)
    last.legend(fontsize=8)
    _title(fig, title, model, label)
    _save(fig, out_dir, name, svg)


def cope_positions(model, prompt: str = DEFAULT_PROMPT, tokenizer=None) -> dict:
    """CoPE's contextual positions on `prompt`, as the model's forward pass computes them (its
    `contextual_positions`, recorded in each layer): {"tokens", "positions": (n_layer, n_head, T, T)}, entry
    [layer, head, i, j] the position of key j seen from query i (0 where the causal mask hides j)."""
    recorded, tokens = recorded_on_prompt(model, "contextual_positions", prompt, tokenizer)
    # a hidden key's gate is σ(masked score) = 0
    return {"tokens": tokens, "positions": _numpy(torch.stack([result[0] for _, result in recorded]))}


def plot_cope_positions(model, out_dir, *, label=None, svg=False, prompt=DEFAULT_PROMPT, tokenizer=None) -> dict:
    """`cope_positions`: `cope_positions()` on the prompt. Returns its dict."""
    _requires(model, "cope_positions")
    result = cope_positions(model, prompt, tokenizer)
    most = model.config.cope_max_positions
    title = f"CoPE: positions counted by gates σ(q·k) over {prompt!r} (at most {most - 1})"
    what = "contextual position"
    _plot_on_prompt(
        model,
        out_dir,
        "cope_positions",
        result["positions"],
        result["tokens"],
        what=what,
        title=title,
        label=label,
        svg=svg,
    )
    return result


def plot_gate_bias(model, out_dir, *, label=None, svg=False, prompt=DEFAULT_PROMPT, tokenizer=None) -> dict:
    """`gate_bias` (fox, cable): what the gates of the tokens between query i and key j add to their score on the
    prompt, Σ_{j<l≤i} log f_l (CABLE's β_l), recorded from the scheme's `decay`. Returns {"tokens", "bias":
    (n_layer, n_head, T, T)}."""
    _requires(model, "gate_bias")
    recorded, tokens = recorded_on_prompt(model, "decay", prompt, tokenizer)
    bias = _numpy(torch.stack([result[0] for _, result in recorded]))
    title = f"the gates' sum over the tokens between query and key, on {prompt!r}"
    _plot_on_prompt(
        model, out_dir, "gate_bias", bias, tokens, what="bias added to the score", title=title, label=label, svg=svg
    )
    return {"tokens": tokens, "bias": bias}


@torch.no_grad()
def plot_stick_breaking_weights(
    model, out_dir, *, label=None, svg=False, prompt=DEFAULT_PROMPT, tokenizer=None
) -> dict:
    """`stick_breaking_weights`: the share of the stick each key takes on the prompt, nearest first, as the model's
    attention returns them (`output_attentions`); what a query leaves goes to its own value. Returns {"tokens",
    "weights": (n_layer, n_head, T, T)}."""
    _requires(model, "stick_breaking_weights")
    ids, tokens, _ = prompt_tokens(model, prompt, tokenizer)
    weights = _numpy(torch.cat(model(torch.tensor([ids]), output_attentions=True).attentions))
    title = f"stick-breaking: each key's share, taken nearest first, on {prompt!r}"
    _plot_on_prompt(
        model,
        out_dir,
        "stick_breaking_weights",
        weights,
        tokens,
        what="attention weight",
        title=title,
        label=label,
        svg=svg,
    )
    return {"tokens": tokens, "weights": weights}


def plot_path_transforms(model, out_dir, *, label=None, svg=False, prompt=DEFAULT_PROMPT, tokenizer=None) -> dict:
    """`path_transforms`: what the tokens between query i and key j change in their score on the prompt,
    q_iᵀ(H_i ⋯ H_{j+1} − I)k_j / √head_dim, from the scheme's `through_transforms`. Returns {"tokens", "change":
    (n_layer, n_head, T, T)}."""
    _requires(model, "path_transforms")
    recorded, tokens = recorded_on_prompt(model, "through_transforms", prompt, tokenizer)
    scaling = model.config.head_size**-0.5
    change = [(scores - query @ key.transpose(-1, -2))[0] * scaling for (query, key, *_), (scores, _) in recorded]
    change = _numpy(torch.stack(change))
    title = f"PaTH: what the transforms between query and key change in their score, on {prompt!r}"
    _plot_on_prompt(
        model,
        out_dir,
        "path_transforms",
        change,
        tokens,
        what="change in the score",
        title=title,
        label=label,
        svg=svg,
        cmap="RdBu_r",
    )
    return {"tokens": tokens, "change": change}


@torch.no_grad()
def plot_pope_phases(model, out_dir, *, label=None, svg=False, max_positions=None) -> dict[str, np.ndarray]:
    """`pope_phases`: θ_d, the phase each feature of q and k turns by per position (one frequency per feature), from
    the model's `positions.inv_freq`, and cos(o·θ_d − δ_0d), the factor by which feature d's product of magnitudes
    enters head 0's score at offset o (δ its learned phase). Returns {"theta": (head_dim,), "factor": (n, head_dim)}."""
    _requires(model, "pope_phases")
    positions = _body(model).positions
    n = _positions(model, max_positions)
    theta = positions.inv_freq.float()
    factor = _numpy(torch.cos(torch.arange(n).float()[:, None] * theta - positions.phase_bias[0, 0].float()))
    theta = _numpy(theta)
    fig = Figure(figsize=(12, 5), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.semilogy(np.arange(len(theta)), theta, "o-", ms=3)
    left.set(xlabel="feature d of each head", ylabel="θ_d (radians per position)", title="phase frequency")
    _heatmap(fig, right, factor, limit=1.0, label="cos(o·θ_d − δ_0d)")
    right.set(xlabel="feature d", ylabel="offset o = i − j", title="head 0: each feature's factor by offset")
    _title(fig, "PoPE: phases by position, magnitudes by content", model, label)
    _save(fig, out_dir, "pope_phases", svg)
    return {"theta": theta, "factor": factor}


ON_A_PROMPT = {  # the pictures of what a scheme computed on the prompt
    "cope_positions": plot_cope_positions,
    "gate_bias": plot_gate_bias,
    "stick_breaking_weights": plot_stick_breaking_weights,
    "path_transforms": plot_path_transforms,
}


# ---- every scheme: token vs position ---------------------------------------------------------------------------


def _fit_vocabulary(ids: list[int], vocab_size: int) -> tuple[list[int], bool]:
    """`ids`, or (when some do not fit a small model's vocabulary) distinct tokens mapped to distinct ids < vocab_size
    (id mod vocab_size, next free one on a clash): equal tokens stay equal, different ones stay different."""
    if max(ids) < vocab_size:
        return ids, False
    distinct = list(dict.fromkeys(ids))
    if len(distinct) > vocab_size:
        raise ValueError(f"the prompt has {len(distinct)} distinct tokens; the model's vocabulary only {vocab_size}")
    mapping, taken = {}, set()
    for token in distinct:
        new = token % vocab_size
        while new in taken:
            new = (new + 1) % vocab_size
        mapping[token] = new
        taken.add(new)
    return [mapping[token] for token in ids], True


def prompt_tokens(model, prompt: str, tokenizer=None) -> tuple[list[int], list[str], bool]:
    """The prompt's token ids fitted to the model's vocabulary (`_fit_vocabulary`), each token's text, and whether
    the ids had to be remapped; a ValueError for a prompt with no tokens, or past where the model's positions reach."""
    tokenizer = tokenizer or gpt2_tokenizer()
    raw_ids = tokenizer(prompt)["input_ids"]
    if not raw_ids:
        raise ValueError(f"the prompt {prompt!r} gives no tokens")
    if (reach := positions_reach(model.config)) is not None and len(raw_ids) > reach:
        raise ValueError(f"`prompt` is {len(raw_ids)} tokens long, past the {reach} positions the model reaches")
    ids, remapped = _fit_vocabulary(raw_ids, model.config.vocab_size)
    return ids, [token_text(tokenizer, token_id) for token_id in raw_ids], remapped


def token_text(tokenizer, token_id: int) -> str:
    """A token's text; where a byte-level tokenizer's token holds part of a character (GPT-2 splits an emoji's four
    bytes), which decodes to '\ufffd' alone, its bytes (`\\xf0\\x9f`) instead."""
    text = tokenizer.decode([token_id])
    backend = getattr(tokenizer, "backend_tokenizer", None)  # a fast tokenizer's
    if "\ufffd" not in text or not isinstance(getattr(backend, "decoder", None), decoders.ByteLevel):
        return text
    byte_of = {char: byte for byte, char in bytes_to_unicode().items()}
    return bytes(byte_of[char] for char in tokenizer.convert_ids_to_tokens(token_id)).decode(
        "utf-8", errors="backslashreplace"
    )


@torch.no_grad()
def token_vs_position(model, prompt: str = DEFAULT_PROMPT, tokenizer=None) -> dict:
    """The prompt's token embeddings, the position contribution, and their sum: what the first block sees (the model's
    `hidden_states[0]` in eval mode). Token embeddings are `wte` rows (× √n_embd when scale_embeddings); the sum is
    `add_to_embeddings(token, positions)` of the position scheme; the position part is
    `add_to_embeddings(0, positions)`, zero for rope, alibi and none. `pair` is the first repeated token's two
    positions, and `before`/`after` the cosine similarity of its two rows in `token`/`sum` (NaN when the prompt repeats
    no token)."""
    body = _body(model)
    tokenizer = tokenizer or gpt2_tokenizer()
    ids, tokens, remapped = prompt_tokens(model, prompt, tokenizer)
    input_ids, positions = torch.tensor([ids]), torch.arange(len(ids))[None]
    token = body.wte(input_ids).float()
    if model.config.scale_embeddings:
        token = token * math.sqrt(model.config.n_embd)
    summed = body.positions.add_to_embeddings(token, positions)[0].float()
    position = body.positions.add_to_embeddings(torch.zeros_like(token), positions)[0].float()
    token = token[0]
    seen, pair = {}, None
    unknown = tokenizer.unk_token if tokenizer.unk_token and tokenizer.unk_token not in prompt else None
    for index, token_id in enumerate(ids):
        if tokens[index] == unknown:  # whatever word the tokenizer could not read: two are not one word repeated
            continue
        if token_id in seen:
            pair = (seen[token_id], index)
            break
        seen[token_id] = index

    def cosines(rows):
        unit = F.normalize(rows, dim=1)
        return unit @ unit.T

    before, after = cosines(token), cosines(summed)
    return {
        "ids": np.array(ids),
        "tokens": tokens,
        "remapped": remapped,
        "token": _numpy(token),
        "position": _numpy(position),
        "sum": _numpy(summed),
        "token_similarity": _numpy(before),
        "sum_similarity": _numpy(after),
        "pair": pair,
        "before": float(before[pair]) if pair else float("nan"),
        "after": float(after[pair]) if pair else float("nan"),
    }


@torch.no_grad()
def plot_token_vs_position(model, out_dir, *, label=None, svg=False, prompt=DEFAULT_PROMPT, tokenizer=None) -> dict:
    """`token_vs_position`: token embedding, position contribution and their sum for `prompt` (tokens × dimensions),
    the cosine similarity between the prompt's tokens before and after adding positions, and the repeated token's two
    occurrences. Returns `token_vs_position()`'s dict."""
    result = token_vs_position(model, prompt, tokenizer)
    scheme = _scheme(model)
    names = [f"{i}: {text!r}" for i, text in enumerate(result["tokens"])]
    fig = Figure(figsize=(16, 9.5), layout="constrained")
    axes = fig.subplots(2, 3)
    panels = [
        ("token", "token embedding" + (" × √n_embd" if model.config.scale_embeddings else "")),
        ("position", "position contribution"),
        ("sum", "sum: what the first block sees"),
    ]
    for ax, (key, title) in zip(axes[0], panels, strict=True):
        _heatmap(fig, ax, result[key], label="value")
        ax.set(title=title, xlabel="embedding dimension", yticks=range(len(names)))
        ax.set_yticklabels(names, fontsize=8)
    where = POSITION_SCHEME_CLASSES[scheme].where_it_acts  # None: it adds a row per position to the embeddings
    if where:
        axes[0, 1].text(
            0.5,
            0.5,
            where.replace(": ", ":\n"),
            transform=axes[0, 1].transAxes,
            ha="center",
            va="center",
            fontsize=9,
            bbox=dict(fc="white", ec="0.6"),
        )
    axes[0, 0].set_ylabel("prompt token (position: text)")
    pair = result["pair"]
    for ax, key, title in (
        (axes[1, 0], "token_similarity", "before positions (token embeddings)"),
        (axes[1, 1], "sum_similarity", "after positions (the sum)"),
    ):
        matrix = result[key]
        _heatmap(fig, ax, matrix, limit=1.0, label="cosine similarity")
        ax.set(title=f"token–token cosine similarity\n{title}", xticks=range(len(names)), yticks=range(len(names)))
        ax.set_xticklabels(names, fontsize=7, rotation=90)
        ax.set_yticklabels(names, fontsize=7)
        if len(names) <= 16:
            for i in range(len(names)):
                for j in range(len(names)):
                    ax.text(
                        j,
                        i,
                        f"{matrix[i, j]:.2f}",
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="white" if abs(matrix[i, j]) > 0.6 else "black",
                    )
        if pair:
            for i, j in (pair, pair[::-1]):
                ax.add_patch(_box(j, i))
    bars = axes[1, 2]
    if pair:
        values = [result["before"], result["after"]]
        bars.bar(["before positions\n(token embeddings)", "after positions\n(the sum)"], values, color=["C0", "C3"])
        for x, value in enumerate(values):
            bars.text(x, value, f"{value:.4f}", ha="center", va="bottom" if value >= 0 else "top", fontsize=10)
        repeated = f"the repeated token {result['tokens'][pair[0]]!r} at positions {pair[0]} and {pair[1]}"
        bars.set(ylim=(min(0.0, *values) - 0.1, 1.15), ylabel="cosine similarity", title=repeated)
        bars.axhline(0, color="0.5", lw=0.6)
    else:
        bars.set_axis_off()
        bars.text(0.5, 0.5, "the prompt repeats no token", ha="center", va="center", transform=bars.transAxes)
    note = where or f"{scheme} positions add a row per position to the token embedding"
    if result["remapped"]:
        note += f"; the prompt's token ids mapped into this model's {model.config.vocab_size}-token vocabulary"
    _title(fig, f"Same token, two positions: token vs position vs sum for {prompt!r}\n({note})", model, label)
    _save(fig, out_dir, "token_vs_position", svg)
    return result


def _box(x, y):
    from matplotlib.patches import Rectangle

    return Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, ec="gold", lw=2)


# ---- everything ------------------------------------------------------------------------------------------------


def plot_positions(
    model,
    out_dir,
    *,
    svg=False,
    seed=0,
    n_dims=8,
    max_positions=None,
    prompt=DEFAULT_PROMPT,
    label=None,
    tokenizer=None,
    names=None,
) -> dict[str, dict]:
    """Write every picture that applies to the model's scheme (its class's `pictures`), or those of them in `names`, into
    `out_dir` as NAME.png (and NAME.svg with `svg`); return {NAME: the arrays that picture plotted}. `seed` picks the
    traced dimensions, `max_positions` (default n_positions) how many positions/offsets/distances to plot."""
    _body(model)
    _positions(model, max_positions)  # refuse bad arguments before writing anything
    applies = POSITION_SCHEME_CLASSES[_scheme(model)].pictures
    if names is not None and (foreign := [name for name in names if name not in applies]):
        raise ValueError(f"`names` {foreign} are not pictures of {_scheme(model)} positions: choose from {applies}")
    names = applies if names is None else tuple(names)
    if n_dims < 1:  # refused where no picture traces dimensions too: it is a mistake either way
        raise ValueError(f"`n_dims` must be at least 1, got {n_dims}")
    if any(name in ON_A_PROMPT or name == "token_vs_position" for name in names):
        prompt_tokens(model, prompt, tokenizer)  # an empty or too long prompt, refused before any picture is drawn
    common = dict(label=label, svg=svg)
    pictures = {
        "position_matrix": lambda: plot_position_matrix(model, out_dir, max_positions=max_positions, **common),
        "dimension_traces": lambda: plot_dimension_traces(
            model, out_dir, n_dims=n_dims, seed=seed, max_positions=max_positions, **common
        ),
        "cosine_similarity": lambda: plot_cosine_similarity(model, out_dir, max_positions=max_positions, **common),
        "rope_frequencies": lambda: plot_rope_frequencies(model, out_dir, **common),
        "rope_similarity": lambda: plot_rope_similarity(model, out_dir, max_positions=max_positions, **common),
        "xpos_decay": lambda: plot_xpos_decay(model, out_dir, max_positions=max_positions, **common),
        f"{_scheme(model)}_bias": lambda: plot_attention_bias(model, out_dir, max_positions=max_positions, **common),
        "pope_phases": lambda: plot_pope_phases(model, out_dir, max_positions=max_positions, **common),
        **{
            name: functools.partial(plot, model, out_dir, prompt=prompt, tokenizer=tokenizer, **common)
            for name, plot in ON_A_PROMPT.items()
        },
        "token_vs_position": lambda: plot_token_vs_position(
            model, out_dir, prompt=prompt, tokenizer=tokenizer, **common
        ),
    }
    return {name: pictures[name]() for name in names}


def written_files(out_dir, names, svg: bool = False) -> list[Path]:
    """The files `plot_positions` writes for picture `names`."""
    return [Path(out_dir) / f"{name}.{ext}" for name in names for ext in (("png", "svg") if svg else ("png",))]


def draw_positions(settings: PlotSettings) -> tuple:
    """Every picture of the model's scheme into `settings.out`, atomically: (model, label, what each picture holds
    (`plot_positions`), the files written)."""
    s = settings
    hub = hub_kwargs(s)
    model, label = load_for_plots(s.model, seed=s.seed, hub_kwargs=hub)
    tokenizer = prompt_tokenizer(s.model, model, hub_kwargs=hub)
    prompt = {} if s.prompt is None else {"prompt": s.prompt}
    with output_folder(s.out, force=s.force, protect={"`model`": s.model}, kind="pictures") as staging:
        options = dict(svg=s.svg, seed=s.seed, n_dims=s.n_dims, max_positions=s.max_positions, label=label)
        arrays = plot_positions(model, staging, tokenizer=tokenizer, **options, **prompt)
    return model, label, arrays, written_files(s.out, arrays, svg=s.svg)


__all__ = [
    "DEFAULT_PROMPT",
    "cope_positions",
    "load_for_plots",
    "plot_attention_bias",
    "plot_cope_positions",
    "plot_cosine_similarity",
    "plot_gate_bias",
    "plot_path_transforms",
    "plot_pope_phases",
    "plot_stick_breaking_weights",
    "plot_dimension_traces",
    "plot_position_matrix",
    "plot_positions",
    "plot_rope_frequencies",
    "plot_rope_similarity",
    "plot_token_vs_position",
    "plot_xpos_decay",
    "prompt_tokenizer",
    "prompt_tokens",
    "recorded_on_prompt",
    "rope_similarity",
    "token_vs_position",
    "trace_dimensions",
    "written_files",
]
