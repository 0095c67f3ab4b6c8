"""TinyGPT: GPT-2 with a choice of position scheme, as a transformers model.

    ids ─► wte (·√d if scale_embeddings) ─► + position rows (learned | sinusoidal) ─► dropout
        ─► n_layer × [ x + attn(ln_1 x) ; x + mlp(ln_2 x) ]   (rope, xpos rotate q, k; alibi, t5, kerple, fire
                                                              bias the scores; cope, pope, fox, cable,
                                                              path, stick_breaking attend in their own way)
        ─► ln_f ─► lm_head (tied to wte)

Module names mirror GPT-2 (`transformer.wte`, `.wpe`, `.h.N.{ln_1, attn, ln_2, mlp}`, `.ln_f`, `lm_head`), so a
GPT-2 checkpoint maps onto it by transposing GPT-2's Conv1D weights into `nn.Linear` ones (see `gpt2_layout.py`).
Shapes: B batch, T tokens, C = n_embd, H heads of D = C / H dimensions.

This file is the model only; its siblings, copied with it next to saved weights, hold the rest: the position schemes
(`positions`, a chapter of their own), the config, the GPT-2 mapping, loading and saving (`pretrained`), tensor
parallelism, transformers versions (`compat`). Decoding speed (int8 kernels, compiled steps) lives in `generate/`.
"""

import dataclasses
import math
from collections.abc import Callable

import torch
import transformers
from torch import nn
from transformers import ContinuousBatchingConfig, GenerationMixin, PreTrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.gpt2.modeling_gpt2 import eager_attention_forward
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .compat import CACHE_FIELD, MODELS_UPDATE_THE_PAGED_CACHE, PromptsCheckedManager, renamed_cache_argument
from .configuration_tinygpt import TinyGPTConfig
from .positions import POSITION_SCHEME_CLASSES, PositionScheme, apply_rotary, checked_lookup
from .pretrained import (
    from_gpt2_checkpoint,
    quantize_tied_table,
    read_config,
    saving_as_tinygpt,
    warn_if_eager_bf16_is_slow_here,
)
from .tensor_parallel import check_sharded_heads

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

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        cache: Cache | None = None,
        rotary=None,
        attend: Callable | None = None,
        keys_carry: Callable | None = None,
        **kwargs,
    ):
        """`rotary`: the cos/sin that rotate q and k; `attend`: the scheme's own attention (CoPE's), else the config's
        kernel runs; `keys_carry`: what the scheme's keys take into the cache (FoX's forget gates)."""
        batch, length, _ = hidden_states.shape
        qkv = self.c_attn(hidden_states)  # (B, T, 3C): [q | k | v]; under tensor parallelism, this rank's heads only
        check_sharded_heads(qkv, attention_mask, self.head_dim, self.num_heads, self.config.position_embedding_type)
        heads = (batch, length, -1, self.head_dim)
        query, key, value = (t.view(heads).transpose(1, 2) for t in qkv.chunk(3, dim=-1))  # (B, H, T, D) each
        if rotary is not None:
            query, key = apply_rotary(query, key, rotary)
        if keys_carry is not None:
            key = keys_carry(hidden_states, key)  # some of k's features carry the scheme's own
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx, kwargs=kwargs)  # (B, H, past + T, D)

        # vLLM finds a layer's attention by reading this one assignment in the source: it stays a plain lookup.
        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        if attend is not None:  # the scheme's own attention, which may read the layer's input and cache
            attention_interface = attend
            kwargs = {**kwargs, "hidden_states": hidden_states, "cache": cache}
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
        # over the activations instead of several (scripts/measurement_log.md "Speed").
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
            module.init_parameters()
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
        return self.get_submodule(POSITION_SCHEME_CLASSES[self.config.position_embedding_type].module_name)

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
        given = input_ids if input_ids is not None else inputs_embeds
        if given.dim() != (2 if input_ids is not None else 3):  # GPT-2 fails deep inside on one unbatched sequence
            raise ValueError(
                "input_ids (batch, length) or inputs_embeds (batch, length, n_embd) expected, got shape "
                f"{tuple(given.shape)} (one sequence is a batch of one: add the batch dimension with [None])"
            )
        if inputs_embeds is None:
            inputs_embeds = checked_lookup(self.wte, input_ids, self.outside_the_vocabulary)
        if inputs_embeds.shape[1] == 0:  # GPT-2 fails inside its attention on it
            raise ValueError("The input has no tokens (input_ids or inputs_embeds of length 0): nothing to go on from")
        if self.config.scale_embeddings:
            inputs_embeds = inputs_embeds * math.sqrt(self.config.n_embd)
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)

        if position_ids is None:  # continuous batching's paged cache gives them: it has no one length
            past_length = cache.get_seq_length() if cache is not None else 0
            position_ids = (torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_length)[None]

        positions = self.positions  # looked up at each call: a module put in its place (peft's copy) is the one used
        hidden_states = positions.add_to_embeddings(inputs_embeds, position_ids)  # (B, T, C)
        if token_type_ids is not None:  # GPT-2 embeds segment ids with the token embedding matrix
            hidden_states = hidden_states + self.wte(token_type_ids)
        hidden_states = self.drop(hidden_states)

        # The cache is passed positionally: its keyword is `cache` on transformers >= 5.24, `past_key_values` before.
        full_mask = positions.needs_full_mask
        attention_mask = create_causal_mask(
            self.config, inputs_embeds, attention_mask, cache, position_ids, allow_is_causal_skip=not full_mask
        )
        attention_mask = positions.bias_attention(attention_mask, position_ids, inputs_embeds.dtype)
        rotary = positions.rotary_cos_sin(hidden_states, position_ids)

        for i, block in enumerate(self.h):
            hidden_states = block(
                hidden_states,
                attention_mask,
                cache=cache,
                rotary=positions.rotary_in_layer(rotary, i),
                attend=positions.attention(i),
                keys_carry=positions.keys_carry(i),
                position_ids=position_ids,
                **kwargs,
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
        as by any transformers model; `hf_tinygpt.folders.reading.load_model` is the strict form."""
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
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        quantize_tied_table(model)
        warn_if_eager_bf16_is_slow_here(model)
        return loaded

    def check_continuous_batching(self):
        """Continuous batching is refused before transformers 5.24, and for a scheme whose attention rewrites the
        keys its cache holds: the paged cache hands attention a copy of them."""
        if not MODELS_UPDATE_THE_PAGED_CACHE:
            raise ValueError(
                f"continuous batching of a TinyGPT needs transformers >= 5.24, where a model updates the paged cache "
                f"itself; this is transformers {transformers.__version__}: upgrade it, or generate with generate()"
            )
        if self.transformer.positions.rewrites_cache:
            raise ValueError(
                f"position_embedding_type={self.config.position_embedding_type!r} rewrites the keys its cache holds "
                "as tokens arrive, and continuous batching's paged cache hands attention a copy of them: generate "
                "with generate() and a DynamicCache or StaticCache instead"
            )

    def init_continuous_batching(self, generation_config=None, continuous_batching_config=None, workload_hints=None):
        """transformers' continuous batching (`generate_batch`, `generate(cache_implementation="paged")`, its server),
        where it can run (`check_continuous_batching`). A scheme that needs the full mask is kept off the flash
        kernels continuous batching would switch a half-precision model to: they take no mask. A request of no tokens
        is refused (`PromptsCheckedManager`)."""
        self.check_continuous_batching()
        if self.transformer.positions.needs_full_mask:
            given = continuous_batching_config or getattr(generation_config, "continuous_batching_config", None)
            settings = given if isinstance(given, ContinuousBatchingConfig) else ContinuousBatchingConfig()
            continuous_batching_config = dataclasses.replace(settings, auto_switch_to_flash=False)
        manager = super().init_continuous_batching(generation_config, continuous_batching_config, workload_hints)
        manager.__class__ = PromptsCheckedManager
        return manager

    def generate_batch(self, inputs, *args, **kwargs):
        """transformers' `generate_batch`, with an empty prompt refused before any runs (transformers would log the
        manager's refusal and return no results)."""
        if empty := [index for index, input_ids in enumerate(inputs) if len(input_ids) == 0]:
            raise ValueError(f"`inputs[{empty[0]}]` is empty: each prompt needs at least one token to go on from")
        return super().generate_batch(inputs, *args, **kwargs)

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
        token_type_ids: torch.LongTensor | None = None,
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
            token_type_ids=token_type_ids,
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
