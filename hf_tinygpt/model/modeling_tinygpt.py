"""TinyGPT: GPT-2 with a choice of position scheme, as a transformers model.

    ids ─► wte (·√d if scale_embeddings) ─► + position rows (learned | sinusoidal) ─► dropout
        ─► n_layer × [ x + attn(ln_1 x) ; x + mlp(ln_2 x) ]   (rope rotates q, k; alibi biases the scores)
        ─► ln_f ─► lm_head (tied to wte)

Module names mirror GPT-2 (`transformer.wte`, `.wpe`, `.h.N.{ln_1, attn, ln_2, mlp}`, `.ln_f`, `lm_head`), so a
GPT-2 checkpoint maps onto it by transposing GPT-2's Conv1D weights into `nn.Linear` ones (see `gpt2_layout.py`).
Shapes: B batch, T tokens, C = n_embd, H heads of D = C / H dimensions.

This file is the model only; its siblings, copied with it next to saved weights, hold the rest: the config, the
GPT-2 mapping, loading and saving (`pretrained`), int8 kernels, tensor parallelism, transformers versions (`compat`).
"""

import math
from collections.abc import Callable

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.gpt2.modeling_gpt2 import eager_attention_forward
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .compat import CACHE_FIELD, renamed_cache_argument
from .configuration_tinygpt import TinyGPTConfig
from .int8 import settle_quantized_weights
from .pretrained import from_gpt2_checkpoint, read_config, saving_as_tinygpt
from .tensor_parallel import check_sharded_heads

# ---- Embeddings -----------------------------------------------------------------------------------------------


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


# ---- Positions ------------------------------------------------------------------------------------------------
# Every scheme answers the same three questions; each one acts in exactly one place:
#   add_to_embeddings  – rows added to the token embeddings            (learned, sinusoidal)
#   rotary_cos_sin     – cos/sin that rotate q and k inside attention  (rope)
#   bias_attention     – an additive bias on the attention scores      (alibi)


class PositionScheme(nn.Module):
    """No position information (NoPE). The other schemes override the one place where they act."""

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


class NoPositions(PositionScheme):
    """`none`: the causal mask is the only source of order."""


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


POSITION_SCHEME_CLASSES: dict[str, type[PositionScheme]] = {
    "learned": LearnedPositions,
    "sinusoidal": SinusoidalPositions,
    "rope": RotaryPositions,
    "alibi": AlibiPositions,
    "none": NoPositions,
}


# ---- Blocks: attention, MLP, pre-LN block ---------------------------------------------------------------------


class TinyGPTAttention(nn.Module):
    """Causal multi-head self-attention; the kernel (eager, sdpa, ...) is chosen by transformers."""

    def __init__(self, config: TinyGPTConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads = config.n_head
        self.head_dim = config.head_size
        self.scaling = self.head_dim**-0.5
        self.is_causal = True
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # q, k, v in one matmul, as in GPT-2
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, hidden_states, attention_mask=None, cache: Cache | None = None, rotary=None, **kwargs):
        batch, length, _ = hidden_states.shape
        qkv = self.c_attn(hidden_states)  # (B, T, 3C): [q | k | v]; under tensor parallelism, this rank's heads only
        check_sharded_heads(qkv, attention_mask, self.head_dim, self.num_heads)
        heads = (batch, length, -1, self.head_dim)
        query, key, value = (t.view(heads).transpose(1, 2) for t in qkv.chunk(3, dim=-1))  # (B, H, T, D) each
        if rotary is not None:
            query, key = apply_rotary(query, key, *rotary)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)  # (B, H, past + T, D)

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        attn_output, attn_weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attn_dropout.p if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )  # attn_output: (B, T, H, D)
        attn_output = self.c_proj(attn_output.reshape(batch, length, -1).contiguous())
        return self.resid_dropout(attn_output), attn_weights


_FUSED_ACTIVATIONS = {"gelu_new": "gelu_pytorch_tanh"}


class TinyGPTMLP(nn.Module):
    def __init__(self, config: TinyGPTConfig):
        super().__init__()
        inner = config.n_inner if config.n_inner is not None else 4 * config.n_embd
        self.c_fc = nn.Linear(config.n_embd, inner)
        # GPT-2's "gelu_new" runs as torch's fused tanh GELU: the same formula (equal up to rounding) in one pass
        # over the activations instead of several (scripts/README.md "Speed").
        self.act = ACT2FN[_FUSED_ACTIVATIONS.get(config.activation_function, config.activation_function)]
        self.c_proj = nn.Linear(inner, config.n_embd)
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, hidden_states):
        return self.dropout(self.c_proj(self.act(self.c_fc(hidden_states))))


class TinyGPTBlock(GradientCheckpointingLayer):
    """Pre-LN transformer block: x + attn(ln_1 x), then x + mlp(ln_2 x)."""

    def __init__(self, config: TinyGPTConfig, layer_idx: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = TinyGPTAttention(config, layer_idx)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = TinyGPTMLP(config)

    def forward(self, hidden_states, attention_mask=None, cache=None, rotary=None, **kwargs):
        attn_output, _ = self.attn(self.ln_1(hidden_states), attention_mask, cache=cache, rotary=rotary, **kwargs)
        hidden_states = hidden_states + attn_output
        return hidden_states + self.mlp(self.ln_2(hidden_states))


# ---- Models: the body, then the body with the LM head ---------------------------------------------------------


class TinyGPTPreTrainedModel(PreTrainedModel):
    config_class = TinyGPTConfig
    config: TinyGPTConfig
    base_model_prefix = "transformer"
    supports_gradient_checkpointing = True
    _no_split_modules = ["TinyGPTBlock"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True
    _can_record_outputs = {
        "hidden_states": TinyGPTBlock,
        "attentions": OutputRecorder(TinyGPTAttention, index=1),
    }

    def save_pretrained(self, save_directory, *args, **kwargs):
        """transformers' `save_pretrained`, with what `saving_as_tinygpt` adds: an `auto_map` naming both model
        classes, and a tied head written once."""
        with saving_as_tinygpt(self):
            return super().save_pretrained(save_directory, *args, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module):
        """GPT-2's initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2·n_layer)."""
        super()._init_weights(module)
        if isinstance(module, (TinyGPTAttention, TinyGPTMLP)):
            std = self.config.initializer_range / math.sqrt(2 * self.config.n_layer)
            init.normal_(module.c_proj.weight, mean=0.0, std=std)
        if isinstance(module, PositionScheme):
            for name, value in module.fixed_buffers().items():
                init.copy_(getattr(module, name), value)


class TinyGPTModel(TinyGPTPreTrainedModel):
    """The transformer body: embeddings, positions, blocks, final LayerNorm. Returns hidden states."""

    _input_embed_layer = "wte"  # what transformers' get_input_embeddings / set_input_embeddings use

    def __init__(self, config: TinyGPTConfig):
        super().__init__(config)
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        positions = POSITION_SCHEME_CLASSES[config.position_embedding_type](config)
        self.add_module(positions.module_name, positions)  # `wpe`, or `rotary_emb` for rope
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList(TinyGPTBlock(config, layer_idx=i) for i in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.gradient_checkpointing = False
        self.post_init()

    @property
    def positions(self) -> PositionScheme:
        """The position scheme (`self.wpe`, or `self.rotary_emb` for rope)."""
        return self.rotary_emb if self.config.position_embedding_type == "rope" else self.wpe

    def outside_the_vocabulary(self, input_ids: torch.Tensor) -> str | None:
        low, high = int(input_ids.min()), int(input_ids.max())
        if low < 0 or high >= self.config.vocab_size:
            bad = high if high >= self.config.vocab_size else low
            return (
                f"Token id {bad} is outside the vocabulary (vocab_size={self.config.vocab_size}): ids must be in "
                f"[0, {self.config.vocab_size - 1}]. Was the input made by this model's tokenizer?"
            )
        return None

    @renamed_cache_argument
    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        cache: Cache | None = None,
        token_type_ids: torch.LongTensor | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        cache = cache if cache is not None else past_key_values
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds")
        if inputs_embeds is None:
            inputs_embeds = checked_lookup(self.wte, input_ids, self.outside_the_vocabulary)
        if self.config.scale_embeddings:
            inputs_embeds = inputs_embeds * math.sqrt(self.config.n_embd)
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)

        past_length = cache.get_seq_length() if cache is not None else 0
        query_length = inputs_embeds.shape[1]
        if position_ids is None:
            position_ids = (torch.arange(query_length, device=inputs_embeds.device) + past_length).unsqueeze(0)

        hidden_states = self.positions.add_to_embeddings(inputs_embeds, position_ids)  # (B, T, C)
        if token_type_ids is not None:  # GPT-2 embeds segment ids with the token embedding matrix
            hidden_states = hidden_states + self.wte(token_type_ids)
        hidden_states = self.drop(hidden_states)

        needs_bias = self.positions.needs_attention_bias
        # The cache is passed positionally: its keyword is `cache` on transformers >= 5.24, `past_key_values` before.
        attention_mask = create_causal_mask(
            self.config, inputs_embeds, attention_mask, cache, position_ids, allow_is_causal_skip=not needs_bias
        )
        if needs_bias:
            attention_mask = self.positions.bias_attention(
                attention_mask, query_length, past_length, inputs_embeds.dtype
            )
        rotary = self.positions.rotary_cos_sin(hidden_states, position_ids)

        for block in self.h:
            hidden_states = block(
                hidden_states, attention_mask, cache=cache, rotary=rotary, position_ids=position_ids, **kwargs
            )
        hidden_states = self.ln_f(hidden_states)
        return BaseModelOutputWithPast(last_hidden_state=hidden_states, **{CACHE_FIELD: cache if use_cache else None})


class TinyGPTForCausalLM(TinyGPTPreTrainedModel, GenerationMixin):
    """TinyGPT with a language-model head tied to the token embeddings (`lm_head.weight is transformer.wte.weight`)."""

    _tied_weights_keys = {"lm_head.weight": "transformer.wte.weight"}
    # The head's logits are computed per vocabulary shard and gathered (TP); its weight is not resharded (FSDP).
    _tp_plan = {"lm_head": "colwise_gather_output"}
    _fsdp_plan = {"lm_head": "keep_full_weight"}

    def __init__(self, config: TinyGPTConfig):
        super().__init__(config)
        self.transformer = TinyGPTModel(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.post_init()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, config=None, **kwargs):
        """transformers' `from_pretrained` for a tinygpt folder or Hub repo, and for a GPT-2 one (`model_type: gpt2`),
        which transformers' GPT2LMHeadModel reads and `gpt2_layout` maps onto TinyGPT. Missing tensors are reported,
        as by any transformers model; `hf_tinygpt.checkpoints.reading.load_model` is the strict form."""
        gpt2_config = None
        if not isinstance(config, PreTrainedConfig):  # config.json is read here, once, as transformers would
            config, gpt2_config, kwargs = read_config(config or pretrained_model_name_or_path, kwargs)
        load = super().from_pretrained
        if gpt2_config is None:
            loaded = load(pretrained_model_name_or_path, *model_args, config=config, **kwargs)
        else:
            loaded = from_gpt2_checkpoint(
                load, pretrained_model_name_or_path, gpt2_config, *model_args, config=config, **kwargs
            )
        settle_quantized_weights(loaded[0] if isinstance(loaded, tuple) else loaded)
        return loaded

    @renamed_cache_argument
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        cache: Cache | None = None,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        """labels: the ids to predict, shifted inside (pass `labels=input_ids`; -100 is ignored). logits_to_keep: an
        int n > 0 computes logits for the last n positions only (generation needs one); a 1D tensor selects them."""
        outputs = self.transformer(
            input_ids,
            cache=cache if cache is not None else past_key_values,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(hidden_states[:, keep, :])

        loss = None if labels is None else self.loss_function(logits, labels, self.config.vocab_size, **kwargs)

        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            **{CACHE_FIELD: getattr(outputs, CACHE_FIELD)},
        )


__all__ = ["TinyGPTPreTrainedModel", "TinyGPTModel", "TinyGPTForCausalLM"]
