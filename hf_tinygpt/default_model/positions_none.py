"""The `none` scheme: no positions at all (NoPE).
One file of the positions chapter (positions.py); part of the model bundle."""

from .positions_interface import PositionScheme


class NoPositions(PositionScheme):
    """`none` (NoPE; Kazemnejad et al. 2023): no position signal; the causal mask is the only source of order."""

    name = "none"
    known_as = "no positions (NoPE)"
    where_it_acts = "no position information at all: only the causal mask orders the tokens"
    pictures = ("token_vs_position",)
