"""The `path` scheme: every token transforms the keys before it, so a key is read through all that came after it
(PaTH attention). One file of the positions chapter (positions.py); part of the model bundle."""

import types

import torch
from torch import nn

from .positions_interface import (
    PositionScheme,
    all_heads_here,
    check_kernel,
    keys_each_query_sees,
    own_slots,
    softmax_attention,
)


class HouseholderPath(PositionScheme):
    """`path` (Yang et al. 2025, "PaTH Attention: Position Encoding via Accumulating Householder Transformations",
    arXiv 2505.16381): each token t sets, per head, a unit direction w_t and a strength β_t ∈ (0, 2) from what it
    holds, H_t = I − β_t w_t w_tᵀ, and query i reads key j through the transforms of the tokens between them:
        s_ij = q_iᵀ H_i H_{i−1} ⋯ H_{j+1} k_j / √head_dim.
    Where RoPE's rotation depends on the distance only, this product depends on what the tokens on the path hold.
    (H_t is a reflection at β_t = 2 and the identity at 0.) w_t = normalise(W₂W₁x_t) through a rank-32 bottleneck
    and β_t = 2σ(w_β·x_t + b), x_t the attention layer's input, as flash-linear-attention's `PaTHAttention` makes
    them; each layer has its own.

    The products are never formed: with the compact WY form of a product of such transforms (`through_transforms`),
    a chunk of T tokens costs two (T, T) products and one triangular solve per head.

    The cache holds each key as the next token will read it, H_last ⋯ H_{j+1} k_j: every chunk of new tokens
    transforms the keys already cached, in place, as the authors' decoding does, so cached keys need no directions of
    their own and keep transformers' shape. Hence three limits, each named where it is met: the cache must hand this
    attention its own tensors (DynamicCache and StaticCache do; others are refused), a cache once read cannot be
    cropped back (its layers say `is_croppable = False`, so transformers refuses assisted decoding, and refuse a crop
    that removes tokens), and in bf16 the cached keys are rounded to bf16 after every chunk's transforms.

    Where this differs from flash-linear-attention's layer: no short convolution over the directions (it would need
    the last two tokens' inputs in the cache; here w_t depends on token t alone, a test pins it), and no forget gate
    (PaTH-FoX is the `fox` scheme's gate on top).
    """

    name = "path"
    known_as = "PaTH"
    where_it_acts = "path adds nothing to the embeddings: each token transforms the keys before it, in attention"
    no_gpt2_twin = "its keys are transformed by the tokens after them, which GPT-2's attention does not do"
    exact_twin = None
    no_exact_twin = (
        "none transforms its cached keys token by token. PaTH TinyGPTs run as they are: transformers (eager or sdpa "
        "attention, DynamicCache or StaticCache) or torch.export"
    )
    pictures = ("path_transforms", "token_vs_position")
    no_onnx = "its attention solves a triangular system, which ONNX has no operator for: aten.linalg_solve_triangular"
    needs_full_mask = True
    rewrites_cache = True
    ACTS = "transforms each key by the tokens after it, in its own attention"
    RANK = 32  # the directions' bottleneck, as the authors' layer has it when every head has its own keys

    def __init__(self, config):
        super().__init__()
        self.scheme, self.num_heads = config.position_embedding_type, config.n_head
        check_kernel(config, self.ACTS)
        n_embd, layers = config.n_embd, range(config.n_layer)
        self.directions = nn.ModuleList(
            nn.Sequential(nn.Linear(n_embd, self.RANK, bias=False), nn.Linear(self.RANK, n_embd, bias=False))
            for _ in layers
        )
        self.strengths = nn.ModuleList(nn.Linear(n_embd, config.n_head) for _ in layers)

    def transforms(self, hidden_states: torch.Tensor, layer_idx: int):
        """Each token's w_t (B, H, T, head_dim), of unit length, and β_t (B, H, T), float32, from the layer's input."""
        batch, length, _ = hidden_states.shape
        w = self.directions[layer_idx](hidden_states).float().view(batch, length, self.num_heads, -1)
        beta = 2 * torch.sigmoid(self.strengths[layer_idx](hidden_states).float())
        return nn.functional.normalize(w, dim=-1).transpose(1, 2), beta.transpose(1, 2)

    @staticmethod
    def through_transforms(query, key, w, beta, acts_on):
        """The scores q_iᵀ H_i ⋯ H_{j+1} k_j (B, H, T, K) of a chunk's T queries on K keys, and each key as the
        chunk's last token leaves it, H_T ⋯ H_{j+1} k_j (B, H, K, D). The chunk's tokens bring w, β (B, H, T, ·);
        `acts_on` (B, 1, T, K) says which keys each one's transform acts on (those before it; a key the cache already
        holds has met every earlier token's). All float32.

        With (I + L) T = I, L the strictly lower part of (β_a w_a·w_b), the product of the transforms of tokens
        j < a ≤ i is I − Σ_{a,b} w_a T_ab β_b w_bᵀ over that range, and T's block for a range of tokens is the inverse
        of its block of I + L (both triangular), so one solve serves every pair (i, j)."""
        weighted = w * beta[..., None]
        eye = torch.eye(w.shape[-2], dtype=w.dtype, device=w.device)
        lower = (weighted @ w.transpose(-1, -2)).tril(-1)
        compact = torch.linalg.solve_triangular(eye + lower, eye.expand_as(lower), upper=False)
        reach = compact @ (weighted @ key.transpose(-1, -2)).masked_fill(~acts_on, 0)  # (B, H, T, K)
        scores = query @ key.transpose(-1, -2) - (query @ w.transpose(-1, -2)).tril() @ reach
        return scores, key - reach.transpose(-1, -2) @ w

    def attention(self, layer_idx):
        return self.attend

    def attend(self, module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        """Eager attention (transformers' attention-interface signature) through the tokens' transforms. It reads
        the layer's input (`hidden_states`) and, to transform what it holds, the `cache`, which the model passes to
        a scheme's own attention."""
        seen = keys_each_query_sees(attention_mask, self.scheme, self.ACTS)
        all_heads_here(query, self.num_heads, self.scheme, "learns transforms for")
        w, beta = self.transforms(kwargs["hidden_states"], module.layer_idx)
        cache = kwargs.get("cache")
        length = key.shape[-2] if cache is None else cache.get_seq_length(module.layer_idx)  # a static cache's: filled
        beta = beta * shown(seen, length - query.shape[-2])  # a masked token's transform is the identity
        slots = torch.arange(key.shape[-2], device=key.device)
        acts_on = own_slots(seen)[..., None] > slots  # token a's transform acts on the keys in slots before its own
        read = key.float()
        if read.requires_grad:  # the cache's own tensor is rewritten below, after autograd has kept it
            read = read.clone()
        scores, keys_now = self.through_transforms(query.float(), read, w, beta, acts_on)
        if kwargs.get("cache") is not None:
            self.rewrite(kwargs["cache"], module.layer_idx, key, keys_now)
        return softmax_attention(module, scores * scaling, seen, value, dropout)

    def rewrite(self, cache, layer_idx: int, key: torch.Tensor, keys_now: torch.Tensor):
        """Store in `cache` each key as the next token will read it, in place of what it holds."""
        layer = cache.layers[layer_idx]
        if getattr(layer, "keys", None) is not key:
            raise ValueError(
                f"position_embedding_type={self.scheme!r} transforms the keys it has cached as each token arrives, "
                f"which {type(cache).__name__} ({type(layer).__name__}) does not let it do: it hands attention a copy "
                "of them. Use a DynamicCache (generate's default) or a StaticCache"
            )
        if not torch.compiler.is_compiling():  # compiled and exported decoders never crop (nor can trace this)
            layer.is_croppable = False  # a crop cannot undo what the later tokens did to the keys it keeps
            layer.crop = types.MethodType(crop_refused, layer)  # for transformers before 5.25: it crops unasked
        key.copy_(keys_now)


def shown(seen: torch.Tensor, start) -> torch.Tensor:
    """(B, 1, q): whether each of a chunk's q tokens is one the mask shows, not one it hides (padding, or a token masked
    inside a sequence), from the keys each query sees (B, 1, q, k) and the cache slot of the chunk's first token
    (`start`): a chunk's tokens fill consecutive slots, and a shown token sees its own. flash-linear-attention's
    PaTHAttention drops hidden tokens before their transforms are applied (`unpad_input`,
    fla/layers/path_attn.py@27289fcb)."""
    own = start + torch.arange(seen.shape[-2], device=seen.device)  # (q,)
    return seen.gather(-1, own.view(1, 1, -1, 1).expand(seen.shape[0], 1, -1, 1)).squeeze(-1)


def crop_refused(layer, tokens: int):
    """A rewritten cache layer's `crop`: a ValueError for any crop that would remove tokens (`tokens` < 0 to remove,
    as transformers ≥ 5.24 asks; before, > 0 the length to keep)."""
    length = layer.get_seq_length()
    if (length + tokens if tokens <= 0 else min(tokens, length)) < length:
        raise ValueError(
            "position_embedding_type='path' keeps each cached key as the tokens after it transformed it, so its cache "
            "cannot be cropped back (assisted or speculative decoding, `Cache.crop`): generate without an assistant"
        )
