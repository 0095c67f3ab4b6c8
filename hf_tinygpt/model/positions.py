"""Positions: how TinyGPT tells the model where each token stands, one small class per scheme.

Every scheme is a `PositionScheme` and acts in exactly one of four places, the one its class overrides:
    add_to_embeddings – rows added to the token embeddings              (learned, sinusoidal)
    rotary_cos_sin    – cos/sin that rotate (and scale) q and k         (rope, xpos)
    bias_attention    – an additive bias on the attention scores        (alibi, t5, kerple, fire)
    attention         – the attention itself, reading its own scores    (cope)
and `rotary_in_layer` says which layers take the rotation (RoPE without it in every n-th layer, as Llama 4).

Read in the order a reader meets them: learned rows (GPT-2), sinusoids (the Transformer), rotations (RoPE, and
xPos's decaying ones), biases by distance (ALiBi's fixed lines, T5's learned buckets, KERPLE's kernels, FIRE's
learned function), positions counted by the content (CoPE) and nothing at all (NoPE).

Everything the package knows about a scheme is on its class: its name, its config fields (`config_fields`,
`check_config`), how far it reaches (`reach`), where it acts and which pictures draw it, and whether an export can
carry it. `register_position_scheme` puts a class in `POSITION_SCHEME_CLASSES` under its name (the config's
`position_embedding_type`), and the config, the model, training, the plots and the exports ask the registry. This
file travels with saved weights (the model bundle), so it imports torch, transformers and its bundle siblings only.
"""

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn
from transformers import initialization as init
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update

from .checks import is_int, is_positive_number, require

if TYPE_CHECKING:  # the config asks the schemes for their fields, so this module cannot import it
    from .configuration_tinygpt import TinyGPTConfig


class PositionScheme(nn.Module):
    """The interface: each hook below leaves its input as it is, so a scheme overrides only the one place where it
    acts (and a scheme that overrides none adds no position information at all)."""

    name: str  # its `config.position_embedding_type`
    known_as: str | None = None  # how the literature writes it ("RoPE"), for the pictures' titles; None: `name`
    # The config fields only this scheme reads, with the value each takes when left unset; `check_config` says what
    # each may be. The config refuses them under any other scheme, naming this one.
    config_fields: dict[str, object] = {}
    needs_full_mask = False  # True: the causal mask is materialised (4D), to add a bias to or to mask scores with
    # What the rest of the package is told about a scheme, each set on its class: where it acts (None: it adds a row
    # per position to the token embeddings), which pictures `plot-positions` draws of it, and why an export cannot
    # carry it exactly, to GPT-2 (`no_gpt2_twin`; None: GPT-2's `wpe` rows reproduce it) or to any of transformers'
    # architectures (`no_exact_twin`, read off transformers 5.24's modeling files; None: `exact_twin` does).
    where_it_acts: str | None = None
    pictures: tuple[str, ...] = ("token_vs_position",)
    no_gpt2_twin: str | None = None
    no_exact_twin: str | None = None
    exact_twin: str | None = "gpt2"  # transformers' model_type an export reproduces it in (rope: "gpt_neox")
    # The module's name in the model: GPT-2's `wpe` (its weights are `transformer.wpe.weight` for learned rows),
    # LLaMA's `rotary_emb` for rope, where transformers' own RoPE tests look for it.
    module_name = "wpe"

    def __init__(self, config: "TinyGPTConfig | None" = None):
        super().__init__()

    @classmethod
    def config_values(cls, config: "TinyGPTConfig", given: dict) -> dict:
        """This scheme's fields, as the config will hold them: the non-None values in `given` (what the caller or
        config.json set) over the defaults. Runs before transformers' own `__post_init__`, which sets them."""
        return {**cls.config_fields, **{name: value for name, value in given.items() if value is not None}}

    @classmethod
    def check_config(cls, config: "TinyGPTConfig"):
        """A ValueError naming the field and what it must be, for a config this scheme cannot be built from."""

    @classmethod
    def read_saved(cls, config_dict: dict) -> dict:
        """A config.json of this scheme as read today, given what older versions of this package wrote."""
        return config_dict

    @classmethod
    def reach(cls, config) -> int | None:
        """The most positions a model of `config` with this scheme can read, prompt and new tokens together; None:
        no end (the scheme computes any position)."""
        return None

    def add_to_embeddings(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return inputs_embeds

    def rotary_cos_sin(self, hidden_states: torch.Tensor, position_ids: torch.Tensor):
        return None

    def bias_attention(self, attention_mask, position_ids: torch.Tensor, past_length: int, dtype: torch.dtype):
        return attention_mask

    def rotary_in_layer(self, rotary, layer_idx: int):
        """What `rotary_cos_sin` gave, for the layer `layer_idx` to rotate with (None: that layer does not rotate)."""
        return rotary

    def attention(self, layer_idx: int) -> Callable | None:
        """An attention function (transformers' attention-interface signature) for the layer `layer_idx` to use
        instead of the kernel the config names; None keeps that kernel."""
        return None

    def added_rows(self, n: int, n_embd: int) -> torch.Tensor:
        """(n, n_embd) float32: what `add_to_embeddings` adds at positions 0..n-1 (zeros for the schemes that act
        inside attention). The plots draw these; a GPT-2 export stores them as its `wpe`."""
        zeros = torch.zeros(1, n, n_embd)
        return self.add_to_embeddings(zeros, torch.arange(n)[None])[0].detach().float()

    def fixed_buffers(self) -> dict[str, torch.Tensor]:
        """Values of the scheme's computed (never learned, never saved) buffers. transformers builds models on the
        meta device when loading, so `_init_weights` fills these in again from here."""
        return {}

    def register_fixed_buffers(self):
        for name, value in self.fixed_buffers().items():
            self.register_buffer(name, value, persistent=False)

    def init_parameters(self):
        """Initialise the scheme's own parameters (its nn.Linear and nn.Embedding layers start as GPT-2's do), with
        `transformers.initialization`, which leaves alone what a checkpoint has loaded."""


POSITION_SCHEME_CLASSES: dict[str, type[PositionScheme]] = {}


def register_position_scheme(scheme: type[PositionScheme]) -> type[PositionScheme]:
    """Make `scheme` a `position_embedding_type` under its `name`: the config takes its fields, the model builds it,
    and the plots, training, exports and the tests' generic checks ask it what they need. Usable as a decorator."""
    if not (isinstance(scheme, type) and issubclass(scheme, PositionScheme)):
        raise TypeError(f"a position scheme is a subclass of PositionScheme, got {scheme!r}")
    name = getattr(scheme, "name", None)
    if not (isinstance(name, str) and name.isidentifier()):
        raise ValueError(f"{scheme.__name__}.name must be an identifier (its position_embedding_type), got {name!r}")
    if POSITION_SCHEME_CLASSES.get(name, scheme) is not scheme:
        raise ValueError(f"position_embedding_type={name!r} is already {POSITION_SCHEME_CLASSES[name].__name__}")
    POSITION_SCHEME_CLASSES[name] = scheme
    return scheme


def checked_lookup(embedding: nn.Embedding, ids: torch.Tensor, explain: Callable[[torch.Tensor], str | None]):
    """`embedding(ids)`, where an id outside the table is a ValueError saying `explain(ids)`. A CPU lookup checks
    its ids anyway; on an accelerator a bad id kills the process, so prompts and batches are checked first (not
    one-token decoding steps: a check there would wait for the device at every step)."""
    if ids.device.type != "cpu" and ids.shape[-1] > 1 and ids.numel() and not torch.compiler.is_compiling():
        if (message := explain(ids)) is not None:
            raise ValueError(message)
    try:
        return embedding(ids)
    except IndexError:
        if (message := explain(ids)) is not None:
            raise ValueError(message) from None
        raise


@register_position_scheme
class LearnedPositions(nn.Embedding, PositionScheme):
    """`learned` (GPT-2): one trained row per position, `n_positions` of them and no more."""

    name = "learned"
    known_as = "learned positions"

    pictures = ("position_matrix", "dimension_traces", "cosine_similarity", "token_vs_position")

    def __init__(self, config: "TinyGPTConfig"):
        nn.Embedding.__init__(self, config.n_positions, config.n_embd)

    @classmethod
    def reach(cls, config) -> int:
        return config.n_positions  # a row per position, and no more rows

    def add_to_embeddings(self, inputs_embeds, position_ids):
        return inputs_embeds + checked_lookup(self, position_ids, self.beyond_the_table).to(inputs_embeds.dtype)

    def beyond_the_table(self, position_ids: torch.Tensor) -> str | None:
        last = int(position_ids.max())
        if last >= self.num_embeddings:
            return (
                f"Learned position embeddings cover positions 0..{self.num_embeddings - 1} (n_positions="
                f"{self.num_embeddings}), but position {last} was requested. Shorten the input (prompt + new "
                "tokens) or use a scheme that extrapolates (sinusoidal, rope, alibi, none)."
            )
        return None


@register_position_scheme
class SinusoidalPositions(PositionScheme):
    """`sinusoidal` (Vaswani et al. 2017): PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(same angle), times
    `config.sinusoidal_scale` (by default the size of freshly initialised token embeddings; see below).

    Computed from the position ids on every call, so any position works: nothing is learned or stored.

    `sinusoidal_scale` defaults to `initializer_range · √2` (× √n_embd with `scale_embeddings`), the per-dimension
    size of freshly initialised token embeddings: unit-amplitude rows (1.0, Vaswani et al.'s) drown GPT-2-initialised
    tokens and train far slower (scripts/README.md, "Length extrapolation"). Configs saved (by `save_pretrained`,
    which records the transformers version) before this option existed read as 1.0.
    """

    name = "sinusoidal"
    known_as = "sinusoidal positions"
    config_fields = {"sinusoidal_scale": None}

    pictures = ("position_matrix", "dimension_traces", "cosine_similarity", "token_vs_position")

    @classmethod
    def config_values(cls, config, given):
        values = super().config_values(config, given)
        if values["sinusoidal_scale"] is None:  # the rms of an initial token embedding (sin/cos pairs have rms 1/√2)
            scaled = config.scale_embeddings is True and is_int(config.n_embd) and config.n_embd > 0
            token_size = config.initializer_range * (math.sqrt(config.n_embd) if scaled else 1)
            values["sinusoidal_scale"] = token_size * math.sqrt(2) if is_positive_number(token_size) else 1.0
        return values

    @classmethod
    def check_config(cls, config):
        require(config, "sinusoidal_scale", is_positive_number(config.sinusoidal_scale), "a finite number > 0")
        if config.n_embd % 2:
            raise ValueError(f"position_embedding_type='sinusoidal' needs an even n_embd, got {config.n_embd}")

    @classmethod
    def read_saved(cls, config_dict):
        saved_before_the_option = "transformers_version" in config_dict and "sinusoidal_scale" not in config_dict
        return {**config_dict, "sinusoidal_scale": 1.0} if saved_before_the_option else config_dict  # unit rows

    def __init__(self, config: "TinyGPTConfig", base: float = 10000.0):
        super().__init__()
        self.dim, self.base, self.scale = config.n_embd, base, config.sinusoidal_scale
        self.register_fixed_buffers()

    def fixed_buffers(self):
        return {"inv_freq": 1.0 / self.base ** (torch.arange(0, self.dim, 2, dtype=torch.float) / self.dim)}

    def rows(self, position_ids: torch.Tensor) -> torch.Tensor:
        """The position rows for `position_ids`, shape (*position_ids.shape, n_embd), float32."""
        angles = position_ids[..., None].float() * self.inv_freq
        rows = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # interleave: sin, cos, sin, cos, ...
        return rows * self.scale

    def add_to_embeddings(self, inputs_embeds, position_ids):
        return inputs_embeds + self.rows(position_ids).to(inputs_embeds.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension: a 90° turn of each (x1[i], x2[i]) pair."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, key_cos=None, key_sin=None):
    """Rotate the first `cos.shape[-1]` dims of each head of q and k (B, H, T, head_dim); the rest pass through.
    Keys take `key_cos`/`key_sin` where given (xPos scales queries and keys oppositely), else `cos`/`sin`."""
    rotary_dim = cos.shape[-1]

    def rotate(x, cos, sin):
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, T, rotary_dim) -> broadcast over heads
        x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
        return torch.cat((x_rot * cos + rotate_half(x_rot) * sin, x_pass), dim=-1)

    return rotate(q, cos, sin), rotate(k, cos if key_cos is None else key_cos, sin if key_sin is None else key_sin)


@register_position_scheme
class RotaryPositions(PositionScheme):
    """`rope` (Su et al. 2021): q and k at position p are rotated by p·θ_i, so q·k depends only on the offset.

    Frequencies come from transformers' RoPE utilities: default, or any scaling in `rope_parameters`
    (linear, dynamic NTK, YaRN, ...), exactly as LLaMA-family models compute them.

    Its fields: `rope_parameters`, transformers' standard RoPE dictionary (`rope_type`: "default", "linear",
    "dynamic", "yarn", ...; `rope_theta`, `partial_rotary_factor`, `factor`, ...), with the shortcuts `rope_theta`,
    `partial_rotary_factor` and `rope_scaling` accepted too; and `no_rope_layer_interval` (Llama 4's name): every n-th
    layer (layers n-1, 2n-1, ...) does not rotate; unset, every layer rotates.
    """

    name = "rope"
    known_as = "RoPE"
    config_fields = dict.fromkeys(
        ("rope_parameters", "rope_theta", "partial_rotary_factor", "rope_scaling", "no_rope_layer_interval")
    )
    ROPE_TYPES = ("default", *ROPE_INIT_FUNCTIONS)

    where_it_acts = "rope adds nothing to the embeddings: it rotates q and k inside attention"
    pictures = ("rope_frequencies", "rope_similarity", "token_vs_position")
    no_gpt2_twin = "RoPE rotates q and k inside attention, which GPT-2's attention does not"
    exact_twin = "gpt_neox"

    module_name = "rotary_emb"

    @classmethod
    def config_values(cls, config, given):
        values = super().config_values(config, given)
        for name in ("rope_parameters", "rope_scaling"):  # transformers reads them first, and fails unhelpfully
            if values[name] is not None and not isinstance(values[name], dict):
                raise ValueError(f"{name} must be a dict (rope_type, rope_theta, ...), got {values[name]!r}")
        # With the attribute present (only a rope config has it: transformers reads it as "this model uses RoPE"),
        # transformers moves rope_theta, partial_rotary_factor and rope_scaling into it and fills in the defaults.
        config.rope_parameters = values.pop("rope_parameters") or (
            None if values["rope_scaling"] else {"rope_type": "default"}
        )
        values["partial_rotary_factor"] = values["partial_rotary_factor"] or 1.0  # stated, even when whole heads rotate
        return {name: value for name, value in values.items() if value is not None or name == "no_rope_layer_interval"}

    @classmethod
    def check_config(cls, config):
        interval = config.no_rope_layer_interval
        require(
            config,
            "no_rope_layer_interval",
            interval is None or (is_int(interval) and interval >= 1),
            "a positive integer (every n-th layer does not rotate) or null (every layer rotates)",
        )
        parameters = config.rope_parameters
        require(config, "rope_parameters", isinstance(parameters, dict), "a dict (rope_type, rope_theta, ...)")
        rope_type = parameters.get("rope_type", "default")
        if rope_type not in cls.ROPE_TYPES:
            raise ValueError(f"rope_parameters['rope_type']={rope_type!r} is not one of {cls.ROPE_TYPES}")
        theta, factor = parameters.get("rope_theta", 1.0), parameters.get("factor")
        if not is_positive_number(theta):
            raise ValueError(f"rope_theta must be a finite number > 0, got {theta!r}")
        if factor is not None and not (is_positive_number(factor) and factor >= 1):
            raise ValueError(
                f"rope_parameters['factor'] must be a finite number >= 1 (it stretches the context), got {factor!r}"
            )
        fraction = parameters.get("partial_rotary_factor", 1.0)
        if not (is_positive_number(fraction) and fraction <= 1):
            raise ValueError(f"partial_rotary_factor must be in (0, 1], got {fraction}")
        if config.rotary_dim < 2 or config.rotary_dim % 2:
            raise ValueError(
                f"RoPE rotates pairs of dimensions: head_dim ({config.head_size}) × partial_rotary_factor "
                f"({fraction}) = {config.rotary_dim} must be even and at least 2 (see n_embd, n_head, "
                "partial_rotary_factor)"
            )
        if rope_type != "default":
            try:  # transformers' own frequency function reads exactly the keys this rope_type needs
                ROPE_INIT_FUNCTIONS[rope_type](config)
            except (KeyError, TypeError) as error:
                raise ValueError(f"rope_parameters for rope_type={rope_type!r} lack {error}") from error

    def __init__(self, config: "TinyGPTConfig"):
        super().__init__()
        # The attribute names below are the ones transformers' `dynamic_rope_update` reads and updates.
        self.config = config
        self.rope_type = config.rope_parameters["rope_type"]
        self.max_seq_len_cached = self.original_max_seq_len = config.n_positions
        self.register_fixed_buffers()

    def frequencies(self) -> tuple[torch.Tensor, float]:
        """(θ_i for each rotated pair, attention scaling). Default: θ_i = theta^(-2i/rotary_dim)."""
        if self.rope_type != "default":
            return ROPE_INIT_FUNCTIONS[self.rope_type](self.config)
        dim = self.config.rotary_dim
        theta = self.config.rope_parameters["rope_theta"]
        return 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim), 1.0

    def fixed_buffers(self):
        inv_freq, self.attention_scaling = self.frequencies()
        return {"inv_freq": inv_freq, "original_inv_freq": inv_freq.clone()}

    @torch.no_grad()
    @dynamic_rope_update
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor):
        freqs = position_ids[..., None].float() * self.inv_freq.to(x.device)  # (B, T, rotary_dim / 2)
        angles = torch.cat((freqs, freqs), dim=-1)  # rotate_half pairs dim i with dim i + rotary_dim / 2
        return (angles.cos() * self.attention_scaling).to(x.dtype), (angles.sin() * self.attention_scaling).to(x.dtype)

    def rotary_cos_sin(self, hidden_states, position_ids):
        return self(hidden_states, position_ids)

    def rotary_in_layer(self, rotary, layer_idx):
        interval = self.config.no_rope_layer_interval  # Llama 4's rule: layers n-1, 2n-1, ... do not rotate
        return None if interval and (layer_idx + 1) % interval == 0 else rotary


@register_position_scheme
class XposPositions(PositionScheme):
    """`xpos` (Sun et al. 2022, "A Length-Extrapolatable Transformer"): RoPE whose pairs also shrink with distance.
    Pair k of every head (θ_k = 10000^(-2k/head_dim), as in RoPE) is rotated as in RoPE and scaled by ζ_k^(p/γ) in
    a query at position p and by ζ_k^(-p/γ) in a key, ζ_k = (2k/head_dim + 0.4) / 1.4 < 1, γ = `xpos_scale_base`;
    so pair k's share of q_i·k_j is multiplied by ζ_k^((i−j)/γ), which decays with distance, fastest in the fast
    pairs. Nothing is learned.

    The exponent is the paper's, p/γ, counted from position 0. x-transformers and the authors' torchscale centre it
    within each sequence, a factor that cancels in q·k but that a cache cannot follow. Counted from 0 the key's
    scale grows as ζ_0^(-p/γ), so positions stop where it would overflow the dtype (`last_position`); past it the
    model refuses the input, naming the limit.
    """

    name = "xpos"
    known_as = "xPos"
    config_fields = {"xpos_scale_base": 512.0}  # γ, the authors' default
    where_it_acts = "xpos adds nothing to the embeddings: it rotates and scales q and k inside attention"
    pictures = ("xpos_decay", "rope_similarity", "token_vs_position")
    no_gpt2_twin = "xPos rotates and scales q and k inside attention, which GPT-2's attention does not"
    exact_twin = None
    no_exact_twin = "none scales q and k as xPos does. xPos TinyGPTs run as they are: transformers or ONNX Runtime"

    @classmethod
    def check_config(cls, config):
        require(config, "xpos_scale_base", is_positive_number(config.xpos_scale_base), "a finite number > 0")
        if config.head_size % 2:
            raise ValueError(f"xPos rotates pairs of dimensions: head_dim ({config.head_size}) must be even")

    def __init__(self, config: "TinyGPTConfig", base: float = 10000.0):
        super().__init__()
        self.dim, self.base, self.scale_base = config.head_size, base, config.xpos_scale_base
        self.register_fixed_buffers()

    def fixed_buffers(self):
        pairs = torch.arange(0, self.dim, 2, dtype=torch.float) / self.dim
        return {"inv_freq": 1.0 / self.base**pairs, "zeta": (pairs + 0.4) / 1.4}

    def last_position(self, dtype: torch.dtype) -> int:
        """The last position whose key scale ζ_0^(-p/γ) stays 2^8 below `dtype`'s largest value (room for the key)."""
        room = math.log(torch.finfo(dtype).max) - 8 * math.log(2)
        return int(self.scale_base * room / -math.log(0.4 / 1.4))

    def rotary_cos_sin(self, hidden_states, position_ids):
        if position_ids.device.type == "cpu" or position_ids.shape[-1] > 1:  # on an accelerator: prompts only
            if not torch.compiler.is_compiling() and int(position_ids.max()) > self.last_position(hidden_states.dtype):
                raise ValueError(
                    f"xPos scales keys by ζ^(-position/{self.scale_base:g}), which past position "
                    f"{self.last_position(hidden_states.dtype)} overflows {hidden_states.dtype}; position "
                    f"{int(position_ids.max())} was requested. Shorten the input, or raise xpos_scale_base (a slower "
                    "decay) when training"
                )
        positions = position_ids[..., None].float()
        angles = torch.cat((positions * self.inv_freq,) * 2, dim=-1)  # (B, T, head_dim), rotate_half's pairing
        scale = torch.cat((self.zeta ** (positions / self.scale_base),) * 2, dim=-1)
        cos, sin = angles.cos(), angles.sin()
        return tuple(t.to(hidden_states.dtype) for t in (cos * scale, sin * scale, cos / scale, sin / scale))


KERNELS_WITH_FULL_MASK = ("eager", "sdpa")  # the kernels that take a 4D float mask; the rest bring their own


def check_kernel(config: "TinyGPTConfig", acts: str):
    """At load, not at the first request: a ValueError when the config's attention kernel cannot run a scheme that
    `acts` on the scores."""
    kernel = config._attn_implementation
    if kernel is not None and kernel not in KERNELS_WITH_FULL_MASK:
        raise ValueError(needs_a_full_mask(config.position_embedding_type, acts, f"attn_implementation={kernel!r}"))


def needs_a_full_mask(scheme: str, acts: str, kernel: str) -> str:
    return (
        f"position_embedding_type={scheme!r} {acts}, which {kernel} cannot take: use attn_implementation in "
        f"{KERNELS_WITH_FULL_MASK} (an engine that brings its own attention kernel, such as vLLM's, cannot run "
        f"{scheme} TinyGPTs)"
    )


class AttentionBias(PositionScheme):
    """The schemes that add a per-head bias b_h(i, j) to the score of query i on key j: a function of the distance
    i − j (for FIRE, of the query's position i too). One module serves every layer, as T5 shares its bias.

    Distances are counted in cache slots: with left padding the real tokens are contiguous, so slot distances equal
    token distances, and padding slots are masked anyway. A query's own position comes from `position_ids`, counted
    from its row's first real token. Keys after the query, which the causal mask hides, get distance 0, so no bias
    function sees a negative distance (and no gradient turns NaN through a masked score).
    """

    needs_full_mask = True
    ACTS = "adds a per-head bias to the attention scores"
    # The bias picture's title; it may name the query's position ({query}) or the module's own settings ({kernel}).
    bias_title: str
    # What holds for every bias (each scheme below says it in its own words).
    where_it_acts = "it adds nothing to the embeddings: it biases the attention scores"
    no_gpt2_twin = "it biases the attention scores, which GPT-2's attention does not"
    exact_twin = None
    no_exact_twin = "none of transformers' architectures adds this bias"

    def __init__(self, config: "TinyGPTConfig"):
        super().__init__()
        self.scheme, self.num_heads = config.position_embedding_type, config.n_head
        check_kernel(config, self.ACTS)

    def bias_of_distance(self, distance: torch.Tensor, query_positions: torch.Tensor) -> torch.Tensor:
        """The scheme: (1 or B, n_head, q, k) from `distance` (q, k) float32 ≥ 0 and `query_positions` (B, q)."""
        raise NotImplementedError

    def bias(self, query_length: int, key_length: int, past_length: int, position_ids=None, device=None):
        """(1 or B, n_head, query_length, key_length) float32: queries sit at slots past_length, past_length+1, ...
        and, unless `position_ids` says otherwise, at those positions."""
        query_slots = torch.arange(query_length, device=device) + past_length
        key_slots = torch.arange(key_length, device=device)
        distance = (query_slots[:, None] - key_slots[None, :]).clamp(min=0).float()
        return self.bias_of_distance(distance, query_slots[None] if position_ids is None else position_ids).float()

    def bias_attention(self, attention_mask, position_ids, past_length, dtype):
        # `attention_mask` is 4D (B, 1, q, kv): boolean (sdpa: True = attend) or additive float (eager: 0 = attend).
        if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 4:  # a kernel switched after load
            raise ValueError(needs_a_full_mask(self.scheme, self.ACTS, "a kernel that takes no additive mask"))
        allowed = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
        query_length, key_length = position_ids.shape[-1], attention_mask.shape[-1]
        bias = self.bias(query_length, key_length, past_length, position_ids, attention_mask.device)
        return torch.where(allowed, bias.to(dtype), torch.finfo(dtype).min)


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """Per-head slopes from the ALiBi paper: a geometric sequence starting at 2^(-8/n) for n a power of two;
    otherwise the closest smaller power of two, plus every other slope of the next power of two."""

    def power_of_2_slopes(n):
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = power_of_2_slopes(closest) + power_of_2_slopes(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float)


@register_position_scheme
class AlibiPositions(AttentionBias):
    """`alibi` (Press et al. 2021): b_h(i, j) = −m_h · (i − j), a fixed slope m_h per head. Nothing is learned."""

    name = "alibi"
    known_as = "ALiBi"
    bias_title = "ALiBi: per-head bias against distance (−slope × distance)"
    where_it_acts = "alibi adds nothing to the embeddings: it biases the attention scores by distance"
    pictures = ("alibi_bias", "token_vs_position")
    no_gpt2_twin = "ALiBi biases the attention scores by distance, which GPT-2's attention does not"
    exact_twin = None
    no_exact_twin = (
        "BLOOM normalises the token embeddings with an extra LayerNorm; Falcon divides the bias by √head_dim and builds"
        " it in bfloat16; MPT has no biases and uses the exact (erf) GELU. ALiBi TinyGPTs run as they are: transformers"
        " (eager or sdpa attention) or ONNX Runtime"
    )

    def __init__(self, config: "TinyGPTConfig"):
        super().__init__(config)
        self.register_fixed_buffers()

    def fixed_buffers(self):
        return {"slopes": alibi_slopes(self.num_heads)}

    def bias_of_distance(self, distance, query_positions):
        return (-self.slopes.to(distance.device)[:, None, None] * distance)[None]


def t5_buckets(distance: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's causal buckets of a distance d ≥ 0: one bucket each for d < num_buckets / 2, then buckets that widen
    logarithmically up to `max_distance`; every longer distance shares the last one."""
    exact = num_buckets // 2
    widening = torch.log(distance.clamp(min=exact) / exact) / math.log(max_distance / exact) * (num_buckets - exact)
    return torch.where(distance < exact, distance, (exact + widening.long()).clamp(max=num_buckets - 1)).long()


@register_position_scheme
class T5Bias(AttentionBias):
    """`t5` (Raffel et al. 2020): b_h(i, j) = w[bucket(i − j), h], a learned table of `relative_attention_num_buckets`
    rows of n_head biases, read through T5's causal buckets (`t5_buckets`) and shared by all layers, as in T5.

    Every distance past `relative_attention_max_distance` shares the last bucket, so any length runs. The table
    starts as GPT-2's embeddings do, N(0, initializer_range), where T5 draws it with std factor · d_model^-0.5.
    """

    name = "t5"
    known_as = "T5 bias"
    config_fields = {"relative_attention_num_buckets": 32, "relative_attention_max_distance": 128}  # T5's names, values

    bias_title = "T5: per-head learned bias of each bucket of distances"
    where_it_acts = "t5 adds nothing to the embeddings: it biases the attention scores by bucket of distance"
    pictures = ("t5_bias", "token_vs_position")
    no_gpt2_twin = (
        "T5's bias adds a learned value per bucket of distances to the attention scores, which GPT-2's does not"
    )
    exact_twin = None
    no_exact_twin = (
        "the T5 family (T5, MT5, UMT5) are encoder-decoders with RMSNorm, no linear biases and no 1/√head_dim scaling. "
        "T5-bias TinyGPTs run as they are: transformers (eager or sdpa attention) or ONNX Runtime"
    )

    @classmethod
    def check_config(cls, config):
        buckets, distance = config.relative_attention_num_buckets, config.relative_attention_max_distance
        require(
            config,
            "relative_attention_num_buckets",
            is_int(buckets) and 2 <= buckets < 2**20,
            "an integer in [2, 2^20)",
        )
        require(
            config,
            "relative_attention_max_distance",
            is_int(distance) and buckets // 2 < distance < 2**31,
            f"an integer above relative_attention_num_buckets / 2 ({buckets // 2}: the buckets below it are one "
            "distance each)",
        )

    def __init__(self, config: "TinyGPTConfig"):
        super().__init__(config)
        self.num_buckets = config.relative_attention_num_buckets
        self.max_distance = config.relative_attention_max_distance
        self.relative_attention_bias = nn.Embedding(self.num_buckets, config.n_head)  # T5's name and layout

    def bias_of_distance(self, distance, query_positions):
        buckets = t5_buckets(distance, self.num_buckets, self.max_distance)
        return self.relative_attention_bias(buckets).permute(2, 0, 1)[None]  # (q, k, H) -> (1, H, q, k)


def at_least(value: torch.Tensor, floor: float, ceiling: float | None = None) -> torch.Tensor:
    """`value` clamped to [floor, ceiling], with the gradient of `value` itself (a straight-through clamp)."""
    return value + (value.clamp(min=floor, max=ceiling) - value).detach()


@register_position_scheme
class KerpleBias(AttentionBias):
    """`kerple` (Chi et al. 2022): a conditionally positive definite kernel of the distance, per head h,
        log   (`kerple_kernel="log"`):   b_h(i, j) = −r1_h · log(1 + r2_h · (i − j))
        power (`kerple_kernel="power"`): b_h(i, j) = −r1_h · (i − j)^r2_h,  r2_h ≤ 2
    with r1, r2 learned and kept ≥ 0.01, as the authors' code keeps them; drawn at the start as theirs are (log:
    r1 ~ U(0, 2), r2 ~ U(0, 1); power: r1 ~ U(0, 1), r2 ~ U(0, 2)).

    The authors clamp the stored parameters in place at every forward; here the clamp is applied to the value used,
    with the gradient passed straight through, so the forward is theirs and no forward writes to a parameter
    (which torch.compile, torch.export and FSDP need). A parameter pushed past a bound stays there, bounded.
    """

    name = "kerple"
    known_as = "KERPLE"
    config_fields = {"kerple_kernel": "log"}
    KERNELS = ("log", "power")
    bias_title = "KERPLE ({kernel}): per-head kernel of distance"
    where_it_acts = "kerple adds nothing to the embeddings: it biases the attention scores by a kernel of distance"
    pictures = ("kerple_bias", "token_vs_position")
    no_gpt2_twin = (
        "KERPLE biases the attention scores by a learned kernel of distance, which GPT-2's attention does not"
    )
    exact_twin = None
    no_exact_twin = (
        "none has KERPLE's kernel bias. KERPLE TinyGPTs run as they are: transformers (eager or sdpa attention) or ONNX"
        " Runtime"
    )

    @classmethod
    def check_config(cls, config):
        if config.kerple_kernel not in cls.KERNELS:
            raise ValueError(f"kerple_kernel={config.kerple_kernel!r} is not one of {cls.KERNELS}")

    def __init__(self, config: "TinyGPTConfig"):
        super().__init__(config)
        self.kernel = config.kerple_kernel
        self.r1 = nn.Parameter(torch.empty(config.n_head))
        self.r2 = nn.Parameter(torch.empty(config.n_head))

    def init_parameters(self):
        init.uniform_(self.r1, 0.0, 2.0 if self.kernel == "log" else 1.0)
        init.uniform_(self.r2, 0.0, 1.0 if self.kernel == "log" else 2.0)

    def bias_of_distance(self, distance, query_positions):
        r1 = at_least(self.r1, 0.01)[:, None, None]
        if self.kernel == "log":
            return (-r1 * torch.log1p(at_least(self.r2, 0.01)[:, None, None] * distance))[None]
        return (-r1 * distance.pow(at_least(self.r2, 0.01, 2.0)[:, None, None]))[None]


@register_position_scheme
class FireBias(AttentionBias):
    """`fire` (Li et al. 2023): b_h(i, j) = f_θ(ψ(i − j) / ψ(max(L, i)))_h with ψ(x) = log(c·x + 1) and f_θ a small
    MLP (1 → `fire_mlp_width` → n_head, ReLU). Dividing by ψ(max(L, i)) maps every distance of a query into [0, 1]
    ("progressive interpolation"), so a longer input asks f_θ nothing new; L keeps short prefixes from being
    stretched. c starts at `fire_init_c` and L at `fire_init_L` (L = |multiplier · fire_init_L|, the multiplier
    learned from 1), as in the authors' listing; f_θ's layers start as GPT-2's linear layers do (N(0,
    initializer_range), zero biases), so the bias starts near zero.
    """

    name = "fire"
    known_as = "FIRE"
    config_fields = {"fire_mlp_width": 32, "fire_init_c": 0.1, "fire_init_L": 512.0}
    bias_title = "FIRE: per-head learned function of distance, for a query at position {query}"
    where_it_acts = (
        "fire adds nothing to the embeddings: it biases the attention scores by a learned function of distance"
    )
    pictures = ("fire_bias", "token_vs_position")
    no_gpt2_twin = (
        "FIRE biases the attention scores by a learned function of distance, which GPT-2's attention does not"
    )
    exact_twin = None
    no_exact_twin = (
        "none has FIRE's learned bias. FIRE TinyGPTs run as they are: transformers (eager or sdpa attention) or ONNX "
        "Runtime"
    )

    @classmethod
    def check_config(cls, config):
        width = config.fire_mlp_width
        require(config, "fire_mlp_width", is_int(width) and 1 <= width < 2**16, "an integer in [1, 2^16)")
        for name in ("fire_init_c", "fire_init_L"):
            require(config, name, is_positive_number(getattr(config, name)), "a finite number > 0")

    def __init__(self, config: "TinyGPTConfig"):
        super().__init__(config)
        width = config.fire_mlp_width
        self.mlp = nn.Sequential(nn.Linear(1, width), nn.ReLU(), nn.Linear(width, config.n_head))
        self.c = nn.Parameter(torch.empty(()))
        self.L_multiplier = nn.Parameter(torch.empty(()))
        self.init_c, self.init_L, self.eps = config.fire_init_c, config.fire_init_L, 1e-6

    def init_parameters(self):
        init.constant_(self.c, self.init_c)
        init.constant_(self.L_multiplier, 1.0)

    def bias_of_distance(self, distance, query_positions):
        def psi(x):
            return torch.log(torch.abs(self.c * x) + 1)

        threshold = torch.abs(self.L_multiplier * self.init_L)
        normalizer = psi(torch.maximum(query_positions.float(), threshold))[:, :, None]  # (B, q, 1)
        interpolated = psi(distance)[None] / (normalizer + self.eps)  # (B, q, k), in [0, 1]
        return self.mlp(interpolated[..., None].to(self.mlp[0].weight.dtype)).permute(0, 3, 1, 2)


@register_position_scheme
class CopePositions(PositionScheme):
    """`cope` (Golovneva et al. 2024, "Contextual Position Encoding"): positions counted by the content. In each
    layer, query i gates every key j it may see with g_ij = σ(s_ij), s_ij its attention score (q·k/√head_dim), and
    puts key j at the contextual position p_ij = Σ_{j ≤ k ≤ i} g_ik: the sum of the gates from j up to the query
    itself, a fractional count of what lies between. The score gains q_i·e[p_ij], interpolated between the learned
    vectors e[⌊p⌋] and e[⌈p⌉] of that layer (`cope_max_positions` of them, shared by the heads, as the authors'
    layer has; positions past the last one share it). Masked keys (later, or padding) get gate 0, so a row's count
    starts at its own real tokens and a cached step counts what the full forward would.

    This scheme reads the scores, so it brings its own attention (`attention`): eager attention with that one
    addition. The vectors start at zero, as in the authors' listing and x-transformers.
    """

    name = "cope"
    known_as = "CoPE"
    config_fields = {"cope_max_positions": 64}
    where_it_acts = "cope adds nothing to the embeddings: it counts positions from the attention scores in every layer"
    pictures = ("cope_positions", "token_vs_position")
    no_gpt2_twin = "CoPE adds position logits counted from the attention scores, which GPT-2's attention does not"
    exact_twin = None
    no_exact_twin = (
        "none counts positions from the attention scores. CoPE TinyGPTs run as they are: transformers (eager or sdpa "
        "attention) or ONNX Runtime"
    )

    needs_full_mask = True
    ACTS = "adds position logits computed from the attention scores themselves"

    @classmethod
    def check_config(cls, config):
        most = config.cope_max_positions
        require(config, "cope_max_positions", is_int(most) and 1 <= most < 2**20, "an integer in [1, 2^20)")

    def __init__(self, config: "TinyGPTConfig"):
        super().__init__()
        self.scheme, self.num_heads = config.position_embedding_type, config.n_head
        check_kernel(config, self.ACTS)
        self.pos_emb = nn.Parameter(torch.empty(config.n_layer, config.cope_max_positions, config.head_size))

    def init_parameters(self):
        init.zeros_(self.pos_emb)

    def contextual_positions(self, scores: torch.Tensor) -> torch.Tensor:
        """p_ij = Σ_{j ≤ k ≤ i} σ(s_ik) for the masked `scores` (B, H, q, k), clamped at the last position vector."""
        return scores.sigmoid().flip(-1).cumsum(-1).flip(-1).clamp(max=self.pos_emb.shape[1] - 1)

    def position_logits(self, query: torch.Tensor, scores: torch.Tensor, layer_idx: int) -> torch.Tensor:
        """(B, H, q, k): q_i·e[p_ij] for the masked `scores` (B, H, q, k) of `query` (B, H, q, head_dim)."""
        positions = self.contextual_positions(scores)
        logits = query @ self.pos_emb[layer_idx].to(query.dtype).T  # (B, H, q, cope_max_positions): q_i·e[p]
        below, fraction = positions.floor(), positions - positions.floor()
        at_floor, at_ceiling = logits.gather(-1, below.long()), logits.gather(-1, positions.ceil().long())
        return at_ceiling * fraction + at_floor * (1 - fraction)

    def attention(self, layer_idx):
        return functools.partial(self.attend, layer_idx=layer_idx)

    def attend(self, module, query, key, value, attention_mask, dropout=0.0, scaling=None, layer_idx=0, **kwargs):
        """Eager attention (transformers' attention-interface signature) with CoPE's logits added to the scores."""
        if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 4:
            raise ValueError(needs_a_full_mask(self.scheme, self.ACTS, "a kernel that takes no additive mask"))
        if query.shape[1] != self.num_heads:  # head-sharded tensor parallelism: this rank computes some heads
            raise ValueError(
                f"position_embedding_type='cope' learns position vectors shared by all {self.num_heads} heads, but "
                f"this attention layer computes {query.shape[1]}: under head-sharded tensor parallelism each rank's "
                "gradient of them would cover its own heads only. Load this model without tensor parallelism"
            )
        allowed = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
        scores = (query @ key.transpose(-1, -2)) * scaling
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        scores = scores + self.position_logits(query, scores, layer_idx)
        weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        weights = nn.functional.dropout(weights, p=dropout, training=module.training)
        return (weights @ value).transpose(1, 2).contiguous(), weights  # (B, T, H, D), as the kernels return it


@register_position_scheme
class NoPositions(PositionScheme):
    """`none` (NoPE; Kazemnejad et al. 2023): no position signal; the causal mask is the only source of order."""

    name = "none"
    known_as = "no positions (NoPE)"
    where_it_acts = "no position information at all: only the causal mask orders the tokens"
    pictures = ("token_vs_position",)


def positions_reach(config) -> int | None:
    """How far a model of `config` reaches, decided by its scheme (`PositionScheme.reach`): the most positions it
    can read, or None for no end. Training, generation, `CompiledDecoder`, the plots and the explorer all ask here.
    Of other architectures, GPT-2's positions are learned rows; the others (GPT-NeoX's rotations, our export of
    RoPE) are not ours to bound."""
    if config.model_type == "tinygpt":
        return POSITION_SCHEME_CLASSES[config.position_embedding_type].reach(config)
    return config.n_positions if config.model_type == "gpt2" else None
