"""The `learned` scheme: learned rows, GPT-2's positions.
One file of the positions chapter (positions.py); part of the model bundle."""

import torch
from torch import nn

from .positions_interface import PositionScheme, checked_lookup


class LearnedPositions(nn.Embedding, PositionScheme):
    """`learned` (GPT-2): one trained row per position, `n_positions` of them and no more."""

    name = "learned"
    known_as = "learned positions"
    reads_position_ids = True

    pictures = ("position_matrix", "dimension_traces", "cosine_similarity", "token_vs_position")

    def __init__(self, config):
        nn.Embedding.__init__(self, config.n_positions, config.n_embd)

    @classmethod
    def reach(cls, config) -> int:
        return config.n_positions  # a row per position, and no more rows

    def add_to_embeddings(self, inputs_embeds, position_ids):
        return inputs_embeds + checked_lookup(self, position_ids, self.beyond_the_table).to(inputs_embeds.dtype)

    def beyond_the_table(self, position_ids: torch.Tensor) -> str | None:
        if (first := int(position_ids.min())) < 0:  # as `mask.cumsum(-1) - 1` leaves a left pad, unclamped
            return (
                f"position_ids must be >= 0, and {first} was given (learned position embeddings start at row 0): "
                "for padded inputs, clamp them (`position_ids.clamp(min=0)`) or leave them out"
            )
        last = int(position_ids.max())
        if last >= self.num_embeddings:
            return (
                f"Learned position embeddings cover positions 0..{self.num_embeddings - 1} (n_positions="
                f"{self.num_embeddings}), but position {last} was requested. Shorten the input (prompt + new "
                "tokens) or use a scheme that extrapolates (sinusoidal, rope, alibi, none)."
            )
        return None
