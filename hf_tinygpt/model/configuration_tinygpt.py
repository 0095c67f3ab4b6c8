"""TinyGPT configuration: GPT-2's hyper-parameters plus a choice of position scheme.

This file is copied next to the weights by `save_pretrained`, so it imports only transformers' public API and its
siblings (never `hf_tinygpt`): a saved folder loads with `trust_remote_code=True` anywhere.
"""

import math
import numbers

import torch
from transformers import PreTrainedConfig
from transformers.activations import ACT2FN
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from .gpt2_layout import tinygpt_fields_of_gpt2


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isnan(value)


POSITION_SCHEMES = ("learned", "sinusoidal", "rope", "xpos", "alibi", "t5", "kerple", "fire", "cope", "none")
# The fields only one scheme reads, with the value each takes when left unset: RoPE's layers without rotation (Llama
# 4's name; unset, every layer rotates), xPos's decay length (its authors'), T5's names for its buckets, KERPLE's
# kernel, FIRE's MLP width and the starting values of its c and L (the authors' listing), CoPE's largest position.
SCHEME_FIELDS = {
    "rope": {"no_rope_layer_interval": None},
    "xpos": {"xpos_scale_base": 512.0},
    "t5": {"relative_attention_num_buckets": 32, "relative_attention_max_distance": 128},
    "kerple": {"kerple_kernel": "log"},
    "fire": {"fire_mlp_width": 32, "fire_init_c": 0.1, "fire_init_L": 512.0},
    "cope": {"cope_max_positions": 64},
}
KERPLE_KERNELS = ("log", "power")
ROPE_TYPES = ("default", *ROPE_INIT_FUNCTIONS)
_ROPE_KWARGS = ("rope_theta", "partial_rotary_factor", "rope_scaling")


class TinyGPTConfig(PreTrainedConfig):
    r"""
    GPT-2's configuration (same names, same defaults: GPT-2 small) with a configurable position scheme.

    position_embedding_type (`str`, defaults to `"learned"`):
        Where token order enters the model. `"learned"`: a trained row per position added to the input, as in
        GPT-2 (inputs longer than `n_positions` are refused). `"sinusoidal"`: fixed sin/cos rows added to the
        input (Vaswani et al. 2017). `"rope"`: q and k are rotated by an angle proportional to the position
        (Su et al. 2021, as in LLaMA). `"xpos"`: RoPE whose rotated pairs also shrink with distance (Sun et al.
        2022). `"alibi"`: a per-head linear penalty on attention scores by distance (Press et al. 2021). `"t5"`: a
        learned per-head bias for each bucket of distances (Raffel et al. 2020). `"kerple"`: a learned per-head
        kernel of the distance (Chi et al. 2022). `"fire"`: a learned function of the distance relative to the
        query's position (Li et al. 2023). `"cope"`: positions counted by gates over the keys, from the attention
        scores themselves (Golovneva et al. 2024). `"none"`: no position information at all (NoPE); the causal mask
        alone orders tokens.
    no_rope_layer_interval (`int`, *optional*):
        Only with `"rope"`: every n-th layer (layers n-1, 2n-1, ...) does not rotate q and k, as in Llama 4 (whose
        config field this is); unset, every layer rotates.
    xpos_scale_base (`float`, *optional*):
        Only with `"xpos"` (default 512, the authors'): γ, the distance over which q·k shrinks by ζ (see `positions`).
    relative_attention_num_buckets, relative_attention_max_distance (`int`, *optional*):
        Only with `"t5"` (defaults 32 and 128, T5's): how many buckets of distances get a bias each, and the
        distance from which on all share the last one.
    kerple_kernel (`str`, *optional*):
        Only with `"kerple"`: `"log"` (the default), −r1·log(1 + r2·d), or `"power"`, −r1·d^r2.
    fire_mlp_width, fire_init_c, fire_init_L (*optional*):
        Only with `"fire"` (defaults 32, 0.1 and 512.0): the width of its MLP, and where its c and L start.
    cope_max_positions (`int`, *optional*):
        Only with `"cope"` (default 64): how many position vectors each layer learns; contextual positions beyond
        the last share it.
    rope_parameters (`dict`, *optional*):
        transformers' standard RoPE dictionary, only with `"rope"`: `rope_type` (`"default"`, `"linear"`,
        `"dynamic"`, `"yarn"`, ...), `rope_theta`, `partial_rotary_factor`, `factor`, ... The shortcuts
        `rope_theta=`, `partial_rotary_factor=` and `rope_scaling=` are accepted as keyword arguments too.
        Only a rope config has the attribute at all: transformers reads its presence as "this model uses RoPE".
    scale_embeddings (`bool`, defaults to `False`):
        Multiply token embeddings by sqrt(n_embd) before adding positions, as in the original transformer.
    sinusoidal_scale (`float`, *optional*):
        Only with `"sinusoidal"`: the rows are multiplied by this. By default `initializer_range · √2`
        (× √n_embd with `scale_embeddings`), which gives them the per-dimension size of freshly initialised token
        embeddings: unit-amplitude rows (1.0, Vaswani et al.'s) drown GPT-2-initialised tokens and train far slower
        (scripts/README.md, "Length extrapolation"). Configs saved (by `save_pretrained`, which records the
        transformers version) before this option existed read as 1.0.
    """

    model_type = "tinygpt"
    # Distributed loading (`from_pretrained(..., distributed_config=DistributedConfig(tp_size=N | fsdp_size=N))`).
    # Tensor parallelism shards attention by head: c_attn packs [q | k | v], so each rank takes its heads' slice of
    # all three ("packed_qkv_colwise", registered in tensor_parallel.py); c_proj sums the ranks' partial outputs.
    base_model_tp_plan = {
        "wte": "embedding_rowwise",
        "h.*.attn.c_attn": "packed_qkv_colwise",
        "h.*.attn.c_proj": "rowwise",
        "h.*.mlp.c_fc": "colwise",
        "h.*.mlp.c_proj": "rowwise",
    }
    # FSDP2: one shard group per block, like transformers' own models (its default plan uses LLaMA's names).
    base_model_fsdp_plan = {"wte": "free_full_weight", "h.*": "free_full_weight", "ln_f": "keep_full_weight"}
    attribute_map = {
        "hidden_size": "n_embd",
        "max_position_embeddings": "n_positions",
        "num_attention_heads": "n_head",
        "num_hidden_layers": "n_layer",
    }

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None
    activation_function: str = "gelu_new"
    resid_pdrop: float | int = 0.1
    embd_pdrop: float | int = 0.1
    attn_pdrop: float | int = 0.1
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    position_embedding_type: str = "learned"
    scale_embeddings: bool = False
    sinusoidal_scale: float | None = None
    no_rope_layer_interval: int | None = None
    xpos_scale_base: float | None = None
    relative_attention_num_buckets: int | None = None
    relative_attention_max_distance: int | None = None
    kerple_kernel: str | None = None
    fire_mlp_width: int | None = None
    fire_init_c: float | None = None
    fire_init_L: float | None = None
    cope_max_positions: int | None = None
    use_cache: bool = True
    bos_token_id: int | None = 50256
    eos_token_id: int | list[int] | None = 50256
    pad_token_id: int | None = None
    tie_word_embeddings: bool = True

    def __post_init__(self, **kwargs):
        # What transformers' own __post_init__ reads first must have the right type, or it fails unhelpfully.
        for name in ("rope_parameters", "rope_scaling"):
            value = kwargs.get(name)
            if value is not None and not isinstance(value, dict):
                raise ValueError(f"{name} must be a dict (rope_type, rope_theta, ...), got {value!r}")
        dtype = kwargs.get("dtype", kwargs.get("torch_dtype", getattr(self, "dtype", None)))
        resolved = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
        if dtype is not None and not (isinstance(resolved, torch.dtype) and resolved.is_floating_point):
            raise ValueError(
                f"dtype must name a floating-point torch dtype such as 'float32' or 'bfloat16', got {dtype!r}"
            )
        if self.position_embedding_type not in POSITION_SCHEMES:
            raise ValueError(
                f"position_embedding_type={self.position_embedding_type!r} is not one of {POSITION_SCHEMES}"
            )
        rope_parameters = kwargs.pop("rope_parameters", None)  # null in configs saved before it became rope-only
        if any(kwargs.get(k) is not None for k in _ROPE_KWARGS) or rope_parameters is not None:
            if self.position_embedding_type != "rope":
                raise ValueError(
                    f"rope_parameters/rope_theta/partial_rotary_factor/rope_scaling only apply to "
                    f"position_embedding_type='rope', not {self.position_embedding_type!r}"
                )
        if self.position_embedding_type == "rope":
            # With the attribute present, transformers moves rope_theta / partial_rotary_factor / rope_scaling into
            # `rope_parameters` and fills in the defaults.
            self.rope_parameters = rope_parameters or (None if kwargs.get("rope_scaling") else {"rope_type": "default"})
            kwargs.setdefault("partial_rotary_factor", 1.0)  # stated, even when whole heads rotate
        for scheme, fields in SCHEME_FIELDS.items():
            for name, default in fields.items():
                if scheme != self.position_embedding_type and getattr(self, name) is not None:
                    raise ValueError(
                        f"{name} only applies to position_embedding_type={scheme!r}, not "
                        f"{self.position_embedding_type!r}"
                    )
                if scheme == self.position_embedding_type and getattr(self, name) is None:
                    setattr(self, name, default)
        if self.sinusoidal_scale is not None and self.position_embedding_type != "sinusoidal":
            raise ValueError(
                f"sinusoidal_scale only applies to position_embedding_type='sinusoidal', not "
                f"{self.position_embedding_type!r}"
            )
        if self.position_embedding_type == "sinusoidal" and self.sinusoidal_scale is None:
            # The per-dimension rms of an initial token embedding (sin/cos pairs have rms 1/√2); unit rows without one.
            scaled = self.scale_embeddings is True and _is_int(self.n_embd) and self.n_embd > 0
            token_size = self.initializer_range * (math.sqrt(self.n_embd) if scaled else 1)
            self.sinusoidal_scale = token_size * math.sqrt(2) if _is_number(token_size) and token_size > 0 else 1.0
        super().__post_init__(**kwargs)
        self._check()

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path, **kwargs) -> tuple[dict, dict]:
        """transformers' `get_config_dict`; a GPT-2 config.json reads as the TinyGPT with the same math."""
        config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        return cls._tinygpt_fields(config_dict), kwargs

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """transformers' `from_dict`; a GPT-2 config dict (`model_type: gpt2`) reads as the learned-position TinyGPT
        with the same math (a ValueError names any GPT-2 option that changes the math)."""
        return super().from_dict(cls._tinygpt_fields(config_dict), **kwargs)

    @staticmethod
    def _tinygpt_fields(config_dict: dict) -> dict:
        if config_dict.get("model_type") == "gpt2":
            return tinygpt_fields_of_gpt2(config_dict)
        saved_before_the_option = "transformers_version" in config_dict and "sinusoidal_scale" not in config_dict
        if config_dict.get("position_embedding_type") == "sinusoidal" and saved_before_the_option:
            return {**config_dict, "sinusoidal_scale": 1.0}  # unit rows, as they were then
        return config_dict

    def _check(self):
        """Every field checked for type and range, naming the field: a bad value fails here, not as NaN logits."""
        for name in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner"):
            value = getattr(self, name)
            if (name != "n_inner" or value is not None) and not (_is_int(value) and 1 <= value < 2**31):
                raise ValueError(
                    f"{name} must be a positive integer{' or None' * (name == 'n_inner')} below 2^31, got {value!r}"
                )
        inner = self.n_inner or 4 * self.n_embd
        weights = (self.vocab_size + self.n_positions + self.n_layer * (4 * self.n_embd + 2 * inner)) * self.n_embd
        if weights >= 2**40:
            raise ValueError(
                f"this shape has about {weights:.3g} weights, more than any machine holds (vocab_size "
                f"{self.vocab_size}, n_positions {self.n_positions}, n_embd {self.n_embd}, n_layer "
                f"{self.n_layer})"
            )
        if not isinstance(self.activation_function, str) or self.activation_function not in ACT2FN:
            raise ValueError(f"activation_function={self.activation_function!r} is not one of {sorted(ACT2FN)}")
        for name in ("bos_token_id", "pad_token_id", "eos_token_id"):
            value = getattr(self, name)
            ids = value if name == "eos_token_id" and isinstance(value, list) else [value]
            if value is not None and not all(_is_int(i) and i >= 0 for i in ids):
                raise ValueError(f"{name} must be a token id (an integer >= 0) or null, got {value!r}")
        for name in ("scale_embeddings", "tie_word_embeddings", "use_cache"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
            if not (_is_number(getattr(self, name)) and 0 <= getattr(self, name) < 1):
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)!r}")
        if not (_is_number(self.layer_norm_epsilon) and 0 < self.layer_norm_epsilon < math.inf):
            raise ValueError(f"layer_norm_epsilon must be a finite number > 0, got {self.layer_norm_epsilon!r}")
        if not (_is_number(self.initializer_range) and 0 <= self.initializer_range < math.inf):
            raise ValueError(f"initializer_range must be a finite number >= 0, got {self.initializer_range!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        scale = self.sinusoidal_scale
        if scale is not None and not (_is_number(scale) and 0 < scale < math.inf):
            raise ValueError(f"sinusoidal_scale must be a finite number > 0, got {self.sinusoidal_scale!r}")
        if self.position_embedding_type == "t5":
            buckets, distance = self.relative_attention_num_buckets, self.relative_attention_max_distance
            if not (_is_int(buckets) and 2 <= buckets < 2**20):
                raise ValueError(f"relative_attention_num_buckets must be an integer in [2, 2^20), got {buckets!r}")
            if not (_is_int(distance) and buckets // 2 < distance < 2**31):
                raise ValueError(
                    f"relative_attention_max_distance must be an integer above relative_attention_num_buckets / 2 "
                    f"({buckets // 2}: the buckets below it are one distance each), got {distance!r}"
                )
        if self.position_embedding_type == "kerple" and self.kerple_kernel not in KERPLE_KERNELS:
            raise ValueError(f"kerple_kernel={self.kerple_kernel!r} is not one of {KERPLE_KERNELS}")
        if self.position_embedding_type == "fire":
            if not (_is_int(self.fire_mlp_width) and 1 <= self.fire_mlp_width < 2**16):
                raise ValueError(f"fire_mlp_width must be an integer in [1, 2^16), got {self.fire_mlp_width!r}")
            for name in ("fire_init_c", "fire_init_L"):
                if not (_is_number(getattr(self, name)) and 0 < getattr(self, name) < math.inf):
                    raise ValueError(f"{name} must be a finite number > 0, got {getattr(self, name)!r}")
        interval = self.no_rope_layer_interval
        if interval is not None and not (_is_int(interval) and interval >= 1):
            raise ValueError(
                f"no_rope_layer_interval must be a positive integer (every n-th layer does not rotate) or null (every "
                f"layer rotates), got {interval!r}"
            )
        if self.position_embedding_type == "xpos":
            if not (_is_number(self.xpos_scale_base) and 0 < self.xpos_scale_base < math.inf):
                raise ValueError(f"xpos_scale_base must be a finite number > 0, got {self.xpos_scale_base!r}")
            if self.head_size % 2:
                raise ValueError(f"xPos rotates pairs of dimensions: head_dim ({self.head_size}) must be even")
        most = self.cope_max_positions
        if self.position_embedding_type == "cope" and not (_is_int(most) and 1 <= most < 2**20):
            raise ValueError(f"cope_max_positions must be an integer in [1, 2^20), got {most!r}")
        if self.position_embedding_type == "sinusoidal" and self.n_embd % 2:
            raise ValueError(f"position_embedding_type='sinusoidal' needs an even n_embd, got {self.n_embd}")
        if self.position_embedding_type == "rope":
            if not isinstance(self.rope_parameters, dict):
                raise ValueError(
                    f"rope_parameters must be a dict (rope_type, rope_theta, ...), got {self.rope_parameters!r}"
                )
            rope_type = self.rope_parameters.get("rope_type", "default")
            if rope_type not in ROPE_TYPES:
                raise ValueError(f"rope_parameters['rope_type']={rope_type!r} is not one of {ROPE_TYPES}")
            theta = self.rope_parameters.get("rope_theta", 1.0)
            if not (_is_number(theta) and 0 < theta < math.inf):
                raise ValueError(f"rope_theta must be a finite number > 0, got {theta!r}")
            factor = self.rope_parameters.get("factor")
            if factor is not None and not (_is_number(factor) and 1 <= factor < math.inf):
                raise ValueError(
                    f"rope_parameters['factor'] must be a finite number >= 1 (it stretches the context), got {factor!r}"
                )
            fraction = self.rope_parameters.get("partial_rotary_factor", 1.0)
            if not (_is_number(fraction) and 0 < fraction <= 1):
                raise ValueError(f"partial_rotary_factor must be in (0, 1], got {fraction}")
            rotary_dim = self.rotary_dim
            if rotary_dim < 2 or rotary_dim % 2:
                raise ValueError(
                    f"RoPE rotates pairs of dimensions: head_dim ({self.head_size}) × partial_rotary_factor "
                    f"({fraction}) = {rotary_dim} must be even and at least 2 (see n_embd, n_head, partial_rotary_factor)"
                )
            if rope_type != "default":
                try:  # transformers' own frequency function reads exactly the keys this rope_type needs
                    ROPE_INIT_FUNCTIONS[rope_type](self)
                except (KeyError, TypeError) as error:
                    raise ValueError(f"rope_parameters for rope_type={rope_type!r} lack {error}") from error

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    @property
    def rotary_dim(self) -> int:
        """How many dimensions of each head RoPE rotates (the rest pass through unchanged)."""
        fraction = getattr(self, "rope_parameters", {}).get("partial_rotary_factor", 1.0)
        return int(self.head_size * fraction)


__all__ = ["TinyGPTConfig", "POSITION_SCHEMES"]
