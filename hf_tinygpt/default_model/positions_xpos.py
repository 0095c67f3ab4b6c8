"""The `xpos` scheme: rotations that shrink with distance (xPos).
One file of the positions chapter (positions.py); part of the model bundle."""

import math

import torch

from .checks import is_positive_number, require
from .positions_interface import PositionScheme
from .positions_rope import rope_frequencies, rotation_angles


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
    reads_position_ids = True
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

    def __init__(self, config, base: float = 10000.0):
        super().__init__()
        self.dim, self.base, self.scale_base = config.head_size, base, config.xpos_scale_base
        self.rotary_dim = config.head_size  # every pair of every head turns
        self.register_fixed_buffers()

    def fixed_buffers(self):
        pairs = torch.arange(0, self.dim, 2, dtype=torch.float) / self.dim
        return {"inv_freq": rope_frequencies(self.base, self.dim), "zeta": (pairs + 0.4) / 1.4}

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
        angles = rotation_angles(position_ids, self.inv_freq)  # (B, T, head_dim)
        scale = torch.cat((self.zeta ** (positions / self.scale_base),) * 2, dim=-1)
        cos, sin = angles.cos(), angles.sin()
        return tuple(t.to(hidden_states.dtype) for t in (cos * scale, sin * scale, cos / scale, sin / scale))
