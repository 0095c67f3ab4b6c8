"""int8 products of 5 to 16 rows of activations with AVX-512 BF16 dot products, for compiled decoding at batch 8.

Inductor's int8 GEMM for few rows is slower for 8 rows in one call than for two calls of 4 (its 8-row micro-kernel
keeps its sums on the stack with GCC 12), so `Int8Linear` splits 8 rows into two calls of 4; each call reads the
weights and converts them to fp32 again, and the `cat` that joins them keeps bias, GELU and residual out of the
GEMM's own epilogue. `int8_dot_products` (int8_dot_products.cpp, a torch op built on first use with torch's C++
extension builder) converts each weight to bf16 once for all rows and multiplies with VDPBF16PS, two products per
lane and instruction. At 4 rows and fewer inductor's own kernel is faster: it stays in use there (the measurements:
scripts/measurement_log.md, "int8 at batch 8" and "int8 at batch 8 since 2026-11-29: `int8_dot_products`").
"""

import functools
from pathlib import Path

import torch

from .cpu_ops import built
from .int8 import INT8_KERNEL_ROWS_PER_CALL, Int8Linear

SOURCE = Path(__file__).with_suffix(".cpp")


@functools.cache
def int8_dot_products_available() -> bool:
    """Whether `torch.ops.hf_tinygpt.int8_dot_products` can run here: built (cpu_ops.py) and the CPU has AVX-512
    BF16."""
    if not built("hf_tinygpt_int8_dot_products", SOURCE, "int8 products keep inductor's kernel"):
        return False
    return torch.ops.hf_tinygpt.int8_dot_products_supported()


class Int8DotProductsLinear(Int8Linear):
    """`Int8Linear` whose products of more bf16 rows than one call of inductor's int8 kernel takes well (5 to
    `INT8_KERNEL_MAX_ROWS`) go to `int8_dot_products`; any other goes where `Int8Linear` sends it."""

    def multiply_rows(self, rows: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        if len(rows) <= INT8_KERNEL_ROWS_PER_CALL or rows.dtype != torch.bfloat16:
            return super().multiply_rows(rows, weight, scale)
        return torch.ops.hf_tinygpt.int8_dot_products(rows, weight, scale)


def use_int8_dot_products(model: torch.nn.Module) -> bool:
    """Switches `model`'s `Int8Linear` modules to `Int8DotProductsLinear` where the kernel is available; whether it
    did."""
    linears = [module for module in model.modules() if type(module) is Int8Linear]
    if not linears or not int8_dot_products_available():
        return False
    for module in linears:
        module.__class__ = Int8DotProductsLinear
    return True
