"""int8 weights on a CPU, multiplied in int8: what the code that decodes applies to a model, not the model itself.

transformers' `TorchAoConfig(Int8WeightOnlyConfig())` stores each projection (and, with
`include_input_output_embeddings`, the tied token table) as a torchao Int8Tensor: int8 rows, one scale per row.
torchao's own product converts the whole weight to the activations' dtype on every call, so a decoding step would
read more bytes than in bf16. `use_int8_kernels` switches those modules to the classes below, which multiply in int8
(torch's `_weight_int8pack_mm`, the kernel inductor picks for the same pattern) and look up only the token rows they
need; `hf-tinygpt generate --int8` (`load_for_generation`) and `CompiledDecoder` apply it. scripts/README.md
("Speed") has the measurements.
"""

import sys

import torch
from torch import nn

from ..model.pretrained import cpu_has_bf16_instructions

# A private ATen op: should it go, int8 weights go back to torchao's own product.
HAS_INT8_KERNEL = hasattr(torch.ops.aten, "_weight_int8pack_mm")
# The kernel needs every int8 row to start on this many bytes (it crashes on other rows in torch 2.13).
INT8_ROW_ALIGNMENT = 16
# The kernel's time grows with each row of activations; past this many (a prompt) the converted weight's GEMM wins.
INT8_KERNEL_MAX_ROWS = 16
# Rows of activations per call of the kernel: compiled, inductor's int8 GEMM for few rows slows down sharply past 5
# rows in one call, so 8 rows go as two calls of 4 (the times: scripts/measurement_log.md, "int8 at batch 8").
INT8_KERNEL_ROWS_PER_CALL = 4


def int8_rows(weight: torch.Tensor) -> bool:
    """Whether `weight` is a torchao int8 weight-only tensor with one scale per row, stored as the kernel takes it:
    row-major, every row starting on `INT8_ROW_ALIGNMENT` bytes."""
    int8_tensor = getattr(sys.modules.get("torchao.quantization"), "Int8Tensor", None)  # none unless torchao is in use
    if int8_tensor is None or not isinstance(weight, int8_tensor) or weight.dim() != 2 or not HAS_INT8_KERNEL:
        return False
    per_row = list(weight.block_size) == [1, weight.shape[1]]  # torchao's own int8 product ignores zero_point too
    weight_only = weight.act_quant_kwargs is None and weight.act_pre_scale is None
    # A traced step cannot read pointers: it compiles from weights `use_int8_kernels` aligned.
    aligned = torch.compiler.is_compiling() or weight.qdata.data_ptr() % INT8_ROW_ALIGNMENT == 0
    rows_fit = weight.qdata.is_contiguous() and weight.shape[1] % INT8_ROW_ALIGNMENT == 0
    return per_row and weight_only and rows_fit and aligned


class Int8Linear(nn.Linear):
    """`nn.Linear` whose int8 weight is multiplied in int8, with the scales applied once per output, when a few rows
    of activations on a CPU meet it (decoding); more rows (a prompt) as `many_rows` says; anything else takes
    torchao's own product."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or not int8_rows(self.weight):
            return super().forward(x)
        if x.numel() > INT8_KERNEL_MAX_ROWS * x.shape[-1]:  # a prompt
            return self.many_rows(x)
        scale = self.weight.scale.reshape(-1).to(x.dtype)
        y = self.multiply_rows(x.reshape(-1, x.shape[-1]).contiguous(), self.weight.qdata, scale)
        y = y.reshape(*x.shape[:-1], y.shape[-1])
        return y if self.bias is None else y + self.bias

    def many_rows(self, x: torch.Tensor) -> torch.Tensor:
        """torchao's product (the weight converted to bf16, then one GEMM) where the CPU multiplies bf16 in hardware;
        elsewhere, where eager bf16 GEMMs are several times slower, the same numbers multiplied in fp32 and rounded
        once (a prompt's prefill took 3 to 4 times as long: scripts/measurement_log.md, "bf16 and int8 on AVX2"). A
        compiled step keeps torchao's product, which inductor lowers its own way."""
        if torch.compiler.is_compiling() or cpu_has_bf16_instructions():
            return super().forward(x)
        y = nn.functional.linear(x.float(), self.weight.qdata.float()) * self.weight.scale.reshape(-1).float()
        return (y if self.bias is None else y + self.bias.float()).to(x.dtype)

    def multiply_rows(self, rows: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """`(rows @ weight.T) * scale` for at most `INT8_KERNEL_MAX_ROWS` rows, with torch's int8 kernel."""
        products = [
            torch.ops.aten._weight_int8pack_mm(part, weight, scale) for part in rows.split(INT8_KERNEL_ROWS_PER_CALL)
        ]
        return products[0] if len(products) == 1 else torch.cat(products)


class Int8Embedding(nn.Embedding):
    """`nn.Embedding` whose int8 table converts only the rows asked for (ids out of range raise torch's IndexError)."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if not int8_rows(weight):
            return super().forward(ids)
        rows = nn.functional.embedding(ids, weight.qdata) * nn.functional.embedding(ids, weight.scale)
        return rows.to(weight.dtype)


INT8_CLASSES = {nn.Linear: Int8Linear, nn.Embedding: Int8Embedding}


def use_int8_kernels(model: nn.Module) -> nn.Module:
    """`model` with every module holding int8 rows (torchao's per-row int8 weight-only tensors) switched, in place, to
    `Int8Linear` / `Int8Embedding`: the same parameters, another forward. Rows that do not start on
    `INT8_ROW_ALIGNMENT` bytes (as a checkpoint may load them) are copied first. A model without int8 weights is left
    as it was."""
    for module in model.modules():
        rows = getattr(getattr(module, "weight", None), "qdata", None)
        if isinstance(rows, torch.Tensor) and rows.data_ptr() % INT8_ROW_ALIGNMENT:
            module.weight.qdata = rows.clone()  # torch's allocator aligns to 64 bytes
        if type(module) in INT8_CLASSES and int8_rows(module.weight):
            module.__class__ = INT8_CLASSES[type(module)]
    return model
