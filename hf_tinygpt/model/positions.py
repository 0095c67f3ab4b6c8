"""Positions: how TinyGPT tells the model where each token stands, one small class per scheme.

Every scheme is a `PositionScheme` and acts in exactly one of three places, the one its class overrides:
    add_to_embeddings – rows added to the token embeddings            (learned, sinusoidal)
    rotary_cos_sin    – cos/sin that rotate q and k inside attention  (rope)
    bias_attention    – an additive bias on the attention scores      (alibi)

Read in the order a reader meets them: learned rows (GPT-2), sinusoids (the Transformer), rotations (RoPE),
biases (ALiBi) and nothing at all (NoPE). `POSITION_SCHEME_CLASSES` maps `config.position_embedding_type` to its
class. This file travels with saved weights (the model bundle), so it imports torch and transformers only.
"""

import math
from collections.abc import Callable

import torch
from torch import nn
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update

from .configuration_tinygpt import TinyGPTConfig


class PositionScheme(nn.Module):
    """The interface: each hook below leaves its input as it is, so a scheme overrides only the one place where it
    acts (and a scheme that overrides none adds no position information at all)."""

    needs_attention_bias = False  # True: the causal mask must be materialised so that a bias can be added to it
    # The module's name in the model: GPT-2's `wpe` (its weights are `transformer.wpe.weight` for learned rows),
    # LLaMA's `rotary_emb` for rope, where transformers' own RoPE tests look for it.
    module_name = "wpe"

    def __init__(self, config: TinyGPTConfig | None = None):
        super().__init__()

    def add_to_embeddings(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return inputs_embeds

    def rotary_cos_sin(self, hidden_states: torch.Tensor, position_ids: torch.Tensor):
        return None

    def bias_attention(self, attention_mask, query_length: int, past_length: int, dtype: torch.dtype):
        return attention_mask

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


class LearnedPositions(nn.Embedding, PositionScheme):
    """`learned` (GPT-2): one trained row per position, `n_positions` of them and no more."""

    def __init__(self, config: TinyGPTConfig):
        nn.Embedding.__init__(self, config.n_positions, config.n_embd)

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


class SinusoidalPositions(PositionScheme):
    """`sinusoidal` (Vaswani et al. 2017): PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(same angle), times
    `config.sinusoidal_scale` (by default the size of freshly initialised token embeddings; see the config).

    Computed from the position ids on every call, so any position works: nothing is learned or stored.
    """

    def __init__(self, config: TinyGPTConfig, base: float = 10000.0):
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


def apply_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """Rotate the first `cos.shape[-1]` dims of each head of q and k (B, H, T, head_dim); the rest pass through."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, T, rotary_dim) -> broadcast over heads
    rotary_dim = cos.shape[-1]

    def rotate(x):
        x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
        return torch.cat((x_rot * cos + rotate_half(x_rot) * sin, x_pass), dim=-1)

    return rotate(q), rotate(k)


class RotaryPositions(PositionScheme):
    """`rope` (Su et al. 2021): q and k at position p are rotated by p·θ_i, so q·k depends only on the offset.

    Frequencies come from transformers' RoPE utilities: default, or any scaling in `rope_parameters`
    (linear, dynamic NTK, YaRN, ...), exactly as LLaMA-family models compute them.
    """

    module_name = "rotary_emb"

    def __init__(self, config: TinyGPTConfig):
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


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """Per-head slopes from the ALiBi paper: a geometric sequence starting at 2^(-8/n) for n a power of two;
    otherwise the closest smaller power of two, plus every other slope of the next power of two."""

    def power_of_2_slopes(n):
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = power_of_2_slopes(closest) + power_of_2_slopes(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float)


class AlibiPositions(PositionScheme):
    """`alibi` (Press et al. 2021): score(i, j) -= slope_h · (i - j). Nothing is added to the embeddings.

    Distances are counted in cache slots. With left padding the real tokens are contiguous, so slot distances
    equal token distances, and padding slots are masked anyway.
    """

    needs_attention_bias = True
    KERNELS_WITH_BIAS = ("eager", "sdpa")  # the attention kernels that add a 4D float mask to the scores

    def __init__(self, config: TinyGPTConfig):
        super().__init__()
        kernel = config._attn_implementation
        if kernel is not None and kernel not in self.KERNELS_WITH_BIAS:  # refuse at load, not at the first request
            raise ValueError(self.needs_a_kernel_with_bias(f"attn_implementation={kernel!r}"))
        self.num_heads = config.n_head
        self.register_fixed_buffers()

    @classmethod
    def needs_a_kernel_with_bias(cls, kernel: str) -> str:
        return (
            f"position_embedding_type='alibi' adds a per-head bias to the attention scores, which {kernel} "
            f"cannot take: use attn_implementation in {cls.KERNELS_WITH_BIAS} (an engine that brings its own "
            "attention kernel, such as vLLM's, cannot run ALiBi TinyGPTs)"
        )

    def fixed_buffers(self):
        return {"slopes": alibi_slopes(self.num_heads)}

    def bias(self, query_length: int, key_length: int, past_length: int, device=None) -> torch.Tensor:
        """(1, n_head, query_length, key_length) float32 bias; queries sit at slots past_length, past_length+1, ..."""
        query_slots = torch.arange(query_length, device=device) + past_length
        key_slots = torch.arange(key_length, device=device)
        distance = (query_slots[:, None] - key_slots[None, :]).float()
        return (-self.slopes.to(device)[:, None, None] * distance)[None]

    def bias_attention(self, attention_mask, query_length, past_length, dtype):
        # `attention_mask` is 4D (B, 1, q, kv): boolean (sdpa: True = attend) or additive float (eager: 0 = attend).
        if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 4:  # a kernel switched after load
            raise ValueError(self.needs_a_kernel_with_bias("a kernel that takes no additive mask"))
        allowed = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
        bias = self.bias(query_length, attention_mask.shape[-1], past_length, attention_mask.device)
        return torch.where(allowed, bias.to(dtype), torch.finfo(dtype).min)


class NoPositions(PositionScheme):
    """`none` (NoPE; Kazemnejad et al. 2023): no position signal; the causal mask is the only source of order."""


POSITION_SCHEME_CLASSES: dict[str, type[PositionScheme]] = {
    "learned": LearnedPositions,
    "sinusoidal": SinusoidalPositions,
    "rope": RotaryPositions,
    "alibi": AlibiPositions,
    "none": NoPositions,
}
