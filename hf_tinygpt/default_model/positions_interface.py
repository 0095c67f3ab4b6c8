"""The interface of the positions chapter: what every scheme is (`PositionScheme`), what every attention bias is
(`AttentionBias`), and the registry the config, the model and the rest of the package ask
(`POSITION_SCHEME_CLASSES`, filled by `register_position_scheme`). The schemes themselves are positions_NAME.py, one
file each; positions.py reads them in order. Part of the model bundle: torch, transformers and its siblings only."""

from collections.abc import Callable

import torch
from torch import nn
from transformers import PreTrainedConfig  # a TinyGPTConfig, whose module asks the schemes for their fields


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
    no_onnx: str | None = None  # why torch.onnx.export stops on it (ending with the operator it names); None: it can
    # True: its attention rewrites the keys a cache holds as tokens arrive (PaTH), so the cache cannot be cropped
    # back (assisted decoding) and a cache that hands attention a copy cannot run it.
    rewrites_cache = False
    # True: explicit `position_ids` move its numbers (gaps, restarts, a left-padded forward without them); the other
    # schemes count a key's distance in tokens of the sequence, whatever `position_ids` says.
    reads_position_ids = False
    # The module's name in the model: GPT-2's `wpe` (its weights are `transformer.wpe.weight` for learned rows),
    # LLaMA's `rotary_emb` for rope, where transformers' own RoPE tests look for it.
    module_name = "wpe"

    def __init__(self, config: PreTrainedConfig | None = None):
        super().__init__()

    @classmethod
    def config_values(cls, config: PreTrainedConfig, given: dict) -> dict:
        """This scheme's fields, as the config will hold them: the non-None values in `given` (what the caller or
        config.json set) over the defaults. Runs before transformers' own `__post_init__`, which sets them."""
        return {**cls.config_fields, **{name: value for name, value in given.items() if value is not None}}

    @classmethod
    def check_config(cls, config: PreTrainedConfig):
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

    def bias_attention(self, attention_mask, position_ids: torch.Tensor, dtype: torch.dtype):
        return attention_mask

    def rotary_in_layer(self, rotary, layer_idx: int):
        """What `rotary_cos_sin` gave, for the layer `layer_idx` to rotate with (None: that layer does not rotate)."""
        return rotary

    def attention(self, layer_idx: int) -> Callable | None:
        """An attention function (transformers' attention-interface signature) for the layer `layer_idx` to use
        instead of the kernel the config names; None keeps that kernel. Besides the kernels' arguments it is given
        the layer's input (`hidden_states`) and the `cache` (None without one)."""
        return None

    def keys_carry(self, layer_idx: int) -> Callable | None:
        """For a scheme with its own attention that needs more of each token than its key and value (FoX's forget
        gate): a function (the layer's input (B, T, C), the keys (B, H, T, D)) → the keys, with what they carry
        into the cache written into their own features, so that the cache keeps transformers' shape; `attention`
        reads it back. None: keys carry their features only."""
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

    fixed_buffer_names: tuple[str, ...] = ()  # what `register_fixed_buffers` registered

    def register_fixed_buffers(self):
        buffers = self.fixed_buffers()
        self.fixed_buffer_names = tuple(buffers)
        for name, value in buffers.items():
            self.register_buffer(name, value, persistent=False)

    def _apply(self, fn, recurse=True):
        """`model.to(dtype)` and `.half()` cast the weights and move these buffers, but keep their dtype, as
        `from_pretrained(dtype=...)` does: computed in float32, bf16 would round them (and RoPE's angles with them)."""
        before = {name: self._buffers[name] for name in self.fixed_buffer_names if self._buffers.get(name) is not None}
        super()._apply(fn, recurse)
        for name, kept in before.items():
            if (moved := self._buffers[name]).dtype != kept.dtype:
                self._buffers[name] = kept.to(moved.device)
        return self

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


KERNELS_WITH_FULL_MASK = ("eager", "sdpa")  # the kernels that take a 4D float mask; the rest bring their own


def check_kernel(config: PreTrainedConfig, acts: str):
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


def keys_each_query_sees(attention_mask, scheme: str, acts: str) -> torch.Tensor:
    """The 4D mask as booleans (B, 1, q, k), True where a query may see a key, for the schemes that bring their own
    attention; a ValueError naming the kernel when the mask is not a full one."""
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 4:  # a kernel switched after load
        raise ValueError(needs_a_full_mask(scheme, acts, "a kernel that takes no additive mask"))
    return attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0


def all_heads_here(query: torch.Tensor, num_heads: int, scheme: str, learns: str):
    """A ValueError when this attention layer computes fewer heads than the scheme's parameters serve: under
    head-sharded tensor parallelism a rank's gradient of them would cover its own heads only."""
    if query.shape[1] != num_heads:
        raise ValueError(
            f"position_embedding_type={scheme!r} {learns} all {num_heads} heads, but this attention layer "
            f"computes {query.shape[1]}: under head-sharded tensor parallelism each rank's gradient of them would "
            "cover its own heads only. Load this model without tensor parallelism"
        )


def softmax_attention(module: nn.Module, scores: torch.Tensor, seen: torch.Tensor, value: torch.Tensor, dropout):
    """What every scheme with its own softmax attention ends with: the `scores` (B, H, q, k) masked where no key is
    `seen`, softmax in float32, dropout, then the values mixed: (B, T, H, D) as the kernels return it, and the
    weights."""
    scores = scores.masked_fill(~seen, torch.finfo(scores.dtype).min)
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    return (weights @ value).transpose(1, 2).contiguous(), weights


def own_slots(seen: torch.Tensor) -> torch.Tensor:
    """(B, 1, q): the cache slot of each query's own key, the last key it sees (in any cache, static ones too)."""
    keys = torch.arange(seen.shape[-1], device=seen.device)
    return torch.where(seen, keys, -1).amax(-1)


class AttentionBias(PositionScheme):
    """The schemes that add a per-head bias b_h(i, j) to the score of query i on key j: a function of the distance
    i − j (for FIRE, of the query's position i too). One module serves every layer, as T5 shares its bias.

    Distances are counted in cache slots, from the query's own slot, the last key the mask lets it see: with left
    padding the real tokens are contiguous, so slot distances equal token distances, and padding slots are masked
    anyway; in a static cache, and in continuous batching's paged cache, whose batches lay each sequence's keys side
    by side, the mask says where each query stands too. A query's own position comes from `position_ids`, counted
    from its row's first real token. Keys after the query, which the causal mask hides, get distance 0, so no bias
    function sees a negative distance (and no gradient turns NaN through a masked score).
    """

    needs_full_mask = True
    ACTS = "adds a per-head bias to the attention scores"
    # The bias picture's title; it may name the query's position ({query}) or the module's own settings ({kernel}).
    bias_title: str
    # What holds for every bias (the built-in schemes say it in their own words).
    where_it_acts = "it adds nothing to the embeddings: it biases the attention scores"
    no_gpt2_twin = "it biases the attention scores, which GPT-2's attention does not"
    exact_twin = None
    no_exact_twin = "none of transformers' architectures adds this bias"

    def __init__(self, config: PreTrainedConfig):
        super().__init__()
        self.scheme, self.num_heads = config.position_embedding_type, config.n_head
        check_kernel(config, self.ACTS)

    def bias_of_distance(self, distance: torch.Tensor, query_positions: torch.Tensor) -> torch.Tensor:
        """The scheme: (B, n_head, q, k) from `distance` (B, 1, q, k) float32 ≥ 0 and `query_positions` (B, q)."""
        raise NotImplementedError

    def bias_at(self, query_slots: torch.Tensor, key_length: int, query_positions: torch.Tensor) -> torch.Tensor:
        """(B, n_head, q, key_length) float32 for queries at cache slots `query_slots` (B, 1, q) and positions
        `query_positions` (B, q), against the keys at slots 0 .. key_length − 1."""
        key_slots = torch.arange(key_length, device=query_slots.device)
        distance = (query_slots[..., None] - key_slots).clamp(min=0).float()
        bias = self.bias_of_distance(distance, query_positions)
        if bias.dim() != 4:
            raise ValueError(
                f"{type(self).__name__}.bias_of_distance returned shape {tuple(bias.shape)}: it takes distances "
                "(B, 1, q, k) and returns (B, n_head, q, k)"
            )
        return bias.float()

    def bias(self, query_length: int, key_length: int, past_length: int, position_ids=None, device=None):
        """(1 or B, n_head, query_length, key_length) float32: queries sit at slots past_length, past_length+1, ...
        and, unless `position_ids` says otherwise, at those positions."""
        query_slots = (torch.arange(query_length, device=device) + past_length)[None, None]
        return self.bias_at(query_slots, key_length, query_slots[0] if position_ids is None else position_ids)

    def bias_attention(self, attention_mask, position_ids, dtype):
        # `attention_mask` is 4D (B, 1, q, kv): boolean (sdpa: True = attend) or additive float (eager: 0 = attend).
        allowed = keys_each_query_sees(attention_mask, self.scheme, self.ACTS)
        bias = self.bias_at(own_slots(allowed), attention_mask.shape[-1], position_ids)
        return torch.where(allowed, bias.to(dtype), torch.finfo(dtype).min)


def positions_reach(config) -> int | None:
    """How far a model of `config` reaches, decided by its scheme (`PositionScheme.reach`): the most positions it
    can read, or None for no end. Training, generation, `CompiledDecoder`, the plots and the explorer all ask here.
    Of other architectures, GPT-2's positions are learned rows; the others (GPT-NeoX's rotations, our export of
    RoPE) are not ours to bound."""
    if config.model_type == "tinygpt":
        return POSITION_SCHEME_CLASSES[config.position_embedding_type].reach(config)
    return config.n_positions if config.model_type == "gpt2" else None
