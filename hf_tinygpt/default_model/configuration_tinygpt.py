"""TinyGPT configuration: GPT-2's hyper-parameters plus a choice of position scheme.

This file is copied next to the weights by `save_pretrained`, so it imports only transformers' public API and its
siblings (never `hf_tinygpt`): a saved folder loads with `trust_remote_code=True` anywhere.
"""

import math

import torch
from transformers import PreTrainedConfig
from transformers.activations import ACT2FN

from .checks import is_int, is_number
from .gpt2_layout import refuse_gpt2_only_options, tinygpt_fields_of_gpt2
from .positions import POSITION_SCHEME_CLASSES, PositionScheme


class TinyGPTConfig(PreTrainedConfig):
    r"""
    GPT-2's configuration (same names, same defaults: GPT-2 small) with a configurable position scheme.

    position_embedding_type (`str`, defaults to `"learned"`):
        Where token order enters the model: the name of a position scheme in `POSITION_SCHEME_CLASSES`, the
        positions chapter's schemes ("learned" rows as in GPT-2, "rope", "alibi", ...: positions.py lists them in
        order) and any registered with `register_position_scheme`.
    **scheme fields:
        The fields only one scheme reads (`no_rope_layer_interval`, `xpos_scale_base`, T5's buckets, ...) are
        declared on its class, with their defaults (`config_fields`) and what each may be (`check_config`); under
        any other scheme they are refused. `rope_parameters` (transformers' standard RoPE dictionary) exists only on
        a rope config: transformers reads its presence as "this model uses RoPE".
    scale_embeddings (`bool`, defaults to `False`):
        Multiply token embeddings by sqrt(n_embd) before adding positions, as in the original transformer.
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
    use_cache: bool = True
    bos_token_id: int | None = 50256
    eos_token_id: int | list[int] | None = 50256
    pad_token_id: int | None = None
    tie_word_embeddings: bool = True

    def __post_init__(self, **kwargs):
        dtype = kwargs.get("dtype", kwargs.get("torch_dtype", getattr(self, "dtype", None)))
        resolved = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
        if dtype is not None and not (isinstance(resolved, torch.dtype) and resolved.is_floating_point):
            raise ValueError(
                f"dtype must name a floating-point torch dtype such as 'float32' or 'bfloat16', got {dtype!r}"
            )
        refuse_gpt2_only_options(kwargs, "the config")  # transformers would keep them, and nothing would read them
        scheme = self.position_scheme()  # its fields settled before transformers' own __post_init__ reads kwargs
        kwargs = {**kwargs, **scheme.config_values(self, self._scheme_fields(scheme, kwargs))}
        super().__post_init__(**kwargs)
        self._check()
        scheme.check_config(self)

    @classmethod
    def field_names(cls) -> set[str]:
        """Every name a TinyGPTConfig takes as a field: GPT-2's, their standard aliases, each registered scheme's."""
        schemes = POSITION_SCHEME_CLASSES.values()
        return {*cls.__dataclass_fields__, *cls.attribute_map, *(name for s in schemes for name in s.config_fields)}

    def position_scheme(self) -> type[PositionScheme]:
        """The class of `position_embedding_type` (`positions.POSITION_SCHEME_CLASSES`)."""
        if self.position_embedding_type not in POSITION_SCHEME_CLASSES:
            raise ValueError(
                f"position_embedding_type={self.position_embedding_type!r} is not one of "
                f"{tuple(POSITION_SCHEME_CLASSES)}"
            )
        return POSITION_SCHEME_CLASSES[self.position_embedding_type]

    def _scheme_fields(self, scheme: type[PositionScheme], kwargs: dict) -> dict:
        """Take the schemes' own fields out of `kwargs` (which transformers would set as they are): `scheme`'s, to be
        settled by it, and another scheme's, refused by name unless null (older configs saved every field)."""
        given = {}
        for other in POSITION_SCHEME_CLASSES.values():
            for name in other.config_fields:
                value = kwargs.pop(name, None)
                if name in scheme.config_fields:
                    given[name] = value if value is not None else given.get(name)
                elif value is not None:
                    raise ValueError(
                        f"{name} only applies to position_embedding_type={other.name!r}, not "
                        f"{self.position_embedding_type!r}"
                    )
        return given

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
        scheme = POSITION_SCHEME_CLASSES.get(config_dict.get("position_embedding_type", "learned"))
        return config_dict if scheme is None else scheme.read_saved(config_dict)  # an unknown name: refused by name

    def _check(self):
        """Every field checked for type and range, naming the field: a bad value fails here, not as NaN logits."""
        for name in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner"):
            value = getattr(self, name)
            if (name != "n_inner" or value is not None) and not (is_int(value) and 1 <= value < 2**31):
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
            if value is not None and not all(is_int(i) and i >= 0 for i in ids):
                raise ValueError(f"{name} must be a token id (an integer >= 0) or null, got {value!r}")
        for name in ("scale_embeddings", "tie_word_embeddings", "use_cache"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
            if not (is_number(getattr(self, name)) and 0 <= getattr(self, name) < 1):
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)!r}")
        if not (is_number(self.layer_norm_epsilon) and 0 < self.layer_norm_epsilon < math.inf):
            raise ValueError(f"layer_norm_epsilon must be a finite number > 0, got {self.layer_norm_epsilon!r}")
        if not (is_number(self.initializer_range) and 0 <= self.initializer_range < math.inf):
            raise ValueError(f"initializer_range must be a finite number >= 0, got {self.initializer_range!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head


__all__ = ["TinyGPTConfig"]
