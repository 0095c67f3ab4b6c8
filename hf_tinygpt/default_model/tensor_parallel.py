"""Tensor parallelism for `c_attn`, which packs [q | k | v] along its output.

The config's `base_model_tp_plan` names the style "packed_qkv_colwise": each rank takes its heads' slice of each of
q, k and v, in the weight and in the bias. It is transformers' packed column-wise style (built for gate/up pairs)
with three blocks instead of two, and the bias split the same way. Importing this module registers it, and
`check_sharded_heads` names the models it cannot split.

Guarded: without torch.distributed, or on a transformers whose parallel styles live elsewhere, the model loads and
runs as usual; only tensor parallelism is unavailable. The registry is imported from where every supported
transformers has it (5.22 moved its definition). Part of the model bundle saved beside the weights.
"""

import torch
from torch import nn

try:
    from torch.distributed.tensor import distribute_tensor
    from torch.distributed.tensor.placement_types import _StridedShard  # the placement transformers' packed style uses
    from transformers.distributed.tensor_parallel import ALL_PARALLEL_STYLES, PackedColwiseParallel
except ImportError:
    PackedColwiseParallel = None

if PackedColwiseParallel is not None:

    class PackedQKVColwise(PackedColwiseParallel):
        def __init__(self):
            super().__init__(split_factor=3)

        def shard_param(self, module, param, mesh, **kwargs):  # 5.25 adds keyword-only config and mesh_manager
            meta = module._parameters.get(param)
            if meta is not None:
                placement = _StridedShard(dim=0, split_factor=self.split_factor)
                sharded = distribute_tensor(meta, mesh, [placement], src_data_rank=None)
                module._parameters[param] = nn.Parameter(sharded, requires_grad=meta.requires_grad)

    ALL_PARALLEL_STYLES.register("packed_qkv_colwise", PackedQKVColwise())


def check_sharded_heads(qkv: torch.Tensor, attention_mask, head_dim: int, n_head: int, scheme: str):
    """A ValueError naming the reason when `c_attn`'s output (this rank's [q | k | v]) does not split into whole
    heads, or when an attention bias holds another number of heads than this rank computes (ALiBi's, T5's, ...)."""
    if qkv.shape[-1] % (3 * head_dim):
        raise ValueError(
            f"tensor parallelism splits attention by head: n_head ({n_head}) must be divisible by the "
            "tensor-parallel size"
        )
    heads = qkv.shape[-1] // (3 * head_dim)
    if isinstance(attention_mask, torch.Tensor) and attention_mask.shape[1] not in (1, heads):
        raise ValueError(
            f"the attention bias has {attention_mask.shape[1]} heads but this attention layer computes {heads}: "
            f"position_embedding_type={scheme!r} biases every head differently, which head-sharded tensor parallelism "
            "does not support. Load this model without tensor parallelism"
        )
