"""The `sinusoidal` scheme: fixed sinusoids, the Transformer's positions.
One file of the positions chapter (positions.py); part of the model bundle."""

import math

import torch

from .checks import is_int, is_positive_number, require
from .positions_interface import PositionScheme


class SinusoidalPositions(PositionScheme):
    """`sinusoidal` (Vaswani et al. 2017): PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(same angle), times
    `config.sinusoidal_scale` (by default the size of freshly initialised token embeddings; see below).

    Computed from the position ids on every call, so any position works: nothing is learned or stored.

    `sinusoidal_scale` defaults to `initializer_range · √2` (× √n_embd with `scale_embeddings`), the per-dimension
    size of freshly initialised token embeddings: unit-amplitude rows (1.0, Vaswani et al.'s) drown GPT-2-initialised
    tokens and train far slower (scripts/measurement_log.md, "Length extrapolation"). Configs saved (by
    `save_pretrained`, which records the transformers version) before this option existed read as 1.0.
    """

    name = "sinusoidal"
    known_as = "sinusoidal positions"
    reads_position_ids = True
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

    def __init__(self, config, base: float = 10000.0):
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
