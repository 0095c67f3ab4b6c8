"""The `rope` scheme: rotations of q and k (RoPE), and `apply_rotary`, which the model applies for every rotary scheme.
One file of the positions chapter (positions.py); part of the model bundle."""

import torch
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update

from .checks import is_int, is_positive_number, require
from .positions_interface import PositionScheme


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension: a 90° turn of each (x1[i], x2[i]) pair."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope_frequencies(theta: float, dim: int) -> torch.Tensor:
    """RoPE's default θ_i = theta^(-2i/dim), one for each of the dim / 2 pairs that turn."""
    return 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)


def rotation_angles(position_ids: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """(B, T, 2 × pairs) float32: p·θ_i of each pair, written twice, as rotate_half pairs feature i with i + R / 2."""
    freqs = position_ids[..., None].float() * inv_freq
    return torch.cat((freqs, freqs), dim=-1)


def apply_rotary(q: torch.Tensor, k: torch.Tensor, rotary: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate the first `cos.shape[-1]` dims of each head of q and k (B, H, T, head_dim) by `rotary`, as a scheme's
    `rotary_cos_sin` gives it: (cos, sin), or (cos, sin, key_cos, key_sin) where keys turn by their own (xPos scales
    queries and keys oppositely). The rest of each head passes through."""
    cos, sin, key_cos, key_sin = rotary if len(rotary) == 4 else (*rotary, *rotary)
    rotary_dim = cos.shape[-1]

    def rotate(x, cos, sin):
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, T, rotary_dim) -> broadcast over heads
        x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
        return torch.cat((x_rot * cos + rotate_half(x_rot) * sin, x_pass), dim=-1)

    return rotate(q, cos, sin), rotate(k, key_cos, key_sin)


class RotaryPositions(PositionScheme):
    """`rope` (Su et al. 2021): q and k at position p are rotated by p·θ_i, so q·k depends only on the offset.

    Frequencies come from transformers' RoPE utilities: default, or any scaling in `rope_parameters`
    (linear, dynamic NTK, YaRN, ...), exactly as LLaMA-family models compute them. `rope_type="proportional"` (Gemma
    4's) is p-RoPE (Barbero et al. 2024, "Round and Round We Go"): the `partial_rotary_factor` share of the pairs
    with the highest frequencies keeps them, and the rest turn by 0, which frees them for content.

    Its fields: `rope_parameters`, transformers' standard RoPE dictionary (`rope_type`: "default", "linear",
    "dynamic", "yarn", ...; `rope_theta`, `partial_rotary_factor`, `factor`, ...), with the shortcuts `rope_theta`,
    `partial_rotary_factor` and `rope_scaling` accepted too; and `no_rope_layer_interval` (Llama 4's name): every n-th
    layer (layers n-1, 2n-1, ...) does not rotate; unset, every layer rotates.
    """

    name = "rope"
    known_as = "RoPE"
    reads_position_ids = True
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
        # Stated, even when whole heads rotate; the dict's own value wins (transformers 5.16 let the attribute win).
        stated = (config.rope_parameters or values["rope_scaling"] or {}).get("partial_rotary_factor", 1.0)
        if values["partial_rotary_factor"] is None:  # 0.0 is a value, refused by check_config, never the default
            values["partial_rotary_factor"] = stated
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
        if (turning := cls.turning_dims(config)) < 2 or turning % 2:
            raise ValueError(
                f"RoPE rotates pairs of dimensions: head_dim ({config.head_size}) × partial_rotary_factor "
                f"({fraction}) = {turning} must be even and at least 2 (see n_embd, n_head, partial_rotary_factor)"
            )
        if rope_type != "default":
            if rope_type == "longrope":  # its factors scale the turning pairs' frequencies, one each
                for name in ("short_factor", "long_factor"):
                    given = parameters.get(name)
                    if isinstance(given, list) and len(given) != turning // 2:
                        raise ValueError(
                            f"rope_parameters['{name}'] must hold one factor per rotating pair of dimensions, "
                            f"{turning // 2} here (head_dim {config.head_size} × partial_rotary_factor {fraction} / 2), "
                            f"got {len(given)}"
                        )
            try:  # transformers' own frequency function reads exactly the keys this rope_type needs
                ROPE_INIT_FUNCTIONS[rope_type](config)
            except (KeyError, TypeError) as error:
                raise ValueError(f"rope_parameters for rope_type={rope_type!r} lack {error}") from error

    @staticmethod
    def turning_dims(config) -> int:
        """How many dimensions of each head the rotation takes (the rest pass through): the `partial_rotary_factor`
        share of them, or all of them for p-RoPE ("proportional"), whose factor says how many keep a frequency."""
        parameters = config.rope_parameters
        proportional = parameters.get("rope_type") == "proportional"
        return int(config.head_size * (1.0 if proportional else parameters.get("partial_rotary_factor", 1.0)))

    def __init__(self, config):
        super().__init__()
        self.rotary_dim = self.turning_dims(config)
        # The attribute names below are the ones transformers' `dynamic_rope_update` reads and updates.
        self.config = config
        self.rope_type = config.rope_parameters["rope_type"]
        self.max_seq_len_cached = self.original_max_seq_len = config.n_positions
        self.register_fixed_buffers()

    def frequencies(self) -> tuple[torch.Tensor, float]:
        """(θ_i for each rotated pair, attention scaling). Default: θ_i = theta^(-2i/rotary_dim)."""
        if self.rope_type != "default":
            return ROPE_INIT_FUNCTIONS[self.rope_type](self.config)
        return rope_frequencies(self.config.rope_parameters["rope_theta"], self.rotary_dim), 1.0

    def fixed_buffers(self):
        inv_freq, self.attention_scaling = self.frequencies()
        return {"inv_freq": inv_freq, "original_inv_freq": inv_freq.clone()}

    @torch.no_grad()
    @dynamic_rope_update
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor):
        angles = rotation_angles(position_ids, self.inv_freq.to(x.device))
        return (angles.cos() * self.attention_scaling).to(x.dtype), (angles.sin() * self.attention_scaling).to(x.dtype)

    def rotary_cos_sin(self, hidden_states, position_ids):
        return self(hidden_states, position_ids)

    def rotary_in_layer(self, rotary, layer_idx):
        interval = self.config.no_rope_layer_interval  # Llama 4's rule: layers n-1, 2n-1, ... do not rotate
        return None if interval and (layer_idx + 1) % interval == 0 else rotary
