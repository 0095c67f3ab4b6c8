"""Positions: how TinyGPT tells the model where each token stands, one small class per scheme, each in a file of
its own (positions_NAME.py), read here in order.

Every scheme is a `PositionScheme` and acts in exactly one of four places, the one its class overrides:
    add_to_embeddings – rows added to the token embeddings              (learned, sinusoidal)
    rotary_cos_sin    – cos/sin that rotate (and scale) q and k         (rope, xpos)
    bias_attention    – an additive bias on the attention scores        (alibi, t5, kerple, fire)
    attention         – the attention itself                            (pope, cope, fox, cable, path,
                                                                         stick_breaking)
and `rotary_in_layer` says which layers take the rotation (RoPE without it in every n-th layer, as Llama 4),
`keys_carry` what a scheme's keys carry into the cache in a feature of their own (FoX's gates, CABLE's biases).

Read in the order a reader meets them: learned rows (GPT-2), sinusoids (the Transformer), rotations (RoPE, xPos's
decaying ones, PoPE's phases on magnitudes of the content), biases by distance (ALiBi's fixed lines, T5's learned
buckets, KERPLE's kernels, FIRE's learned function), positions counted by the content (CoPE), biases the content
sets (FoX's forget gates, CABLE's learned ones), keys transformed by every token after them (PaTH), attention that
takes from the nearest keys first (stick-breaking) and nothing at all (NoPE).

Everything the package knows about a scheme is on its class: its name, its config fields (`config_fields`,
`check_config`), how far it reaches (`reach`), where it acts and which pictures draw it, and whether an export can
carry it. `register_position_scheme` puts a class in `POSITION_SCHEME_CLASSES` under its name (the config's
`position_embedding_type`), and the config, the model, training, the plots and the exports ask the registry. These
files travel with saved weights (the model bundle), so they import torch, transformers and their bundle siblings only.
"""

# The interface and the registry, then each scheme's file, registered in the order a reader meets them.
from .positions_alibi import AlibiPositions, alibi_slopes
from .positions_cable import ContextAwareBias
from .positions_cope import CopePositions
from .positions_fire import FireBias
from .positions_fox import ForgetGate
from .positions_interface import (
    POSITION_SCHEME_CLASSES,
    AttentionBias,
    PositionScheme,
    checked_lookup,
    positions_reach,
    register_position_scheme,
)
from .positions_kerple import KerpleBias
from .positions_learned import LearnedPositions
from .positions_none import NoPositions
from .positions_path import HouseholderPath
from .positions_pope import PolarPositions
from .positions_rope import RotaryPositions, apply_rotary, rotate_half
from .positions_sinusoidal import SinusoidalPositions
from .positions_stick_breaking import StickBreakingAttention
from .positions_t5 import T5Bias, t5_buckets
from .positions_xpos import XposPositions

READING_ORDER = (
    LearnedPositions,
    SinusoidalPositions,
    RotaryPositions,
    XposPositions,
    PolarPositions,
    AlibiPositions,
    T5Bias,
    KerpleBias,
    FireBias,
    CopePositions,
    ForgetGate,
    ContextAwareBias,
    HouseholderPath,
    StickBreakingAttention,
    NoPositions,
)
for scheme in READING_ORDER:
    register_position_scheme(scheme)

__all__ = [
    "POSITION_SCHEME_CLASSES",
    "AttentionBias",
    "PositionScheme",
    "alibi_slopes",
    "apply_rotary",
    "checked_lookup",
    "positions_reach",
    "register_position_scheme",
    "rotate_half",
    "t5_buckets",
    *(scheme.__name__ for scheme in READING_ORDER),
]
