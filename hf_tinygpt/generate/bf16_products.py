"""bf16 products of 1 to 4 rows for CPUs without AVX-512 BF16 (AVX2 and FMA), for compiled decoding at batch 1.

On such a CPU inductor's bf16 GEMM widens each weight to fp32 inside its multiply loop and is bound by that
arithmetic, not by memory: a bf16 decoding step ran at a quarter of llama.cpp's f16 one on the same weights
(scripts/README.md, "bf16 on AVX2"). `bf16_products` (bf16_products.cpp, a torch op built on first use, cpu_ops.py)
widens 16 weights with one shift and one mask and sums with fused multiply-adds. `Bf16ProductsLinear` sends products
of up to 4 bf16 rows there, and more rows (a prompt) to an fp32 product of the same numbers, since eager bf16
products on such a CPU are many times slower than fp32 ones. CPUs with AVX-512 BF16 keep torch's own kernels; so
does a CPU on which ATen runs its AVX-512 kernels unless `ATEN_CPU_CAPABILITY` lowers it (how the AVX2 path is
measured on an AVX-512 machine).
"""

import functools
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .cpu_ops import built

SOURCE = Path(__file__).with_suffix(".cpp")
MAX_ROWS = 4  # the kernel's; more rows take the fp32 product


@functools.cache
def bf16_products_available() -> bool:
    """Whether `torch.ops.hf_tinygpt_bf16.bf16_products` can run here: built (cpu_ops.py), and the CPU has AVX2 and
    FMA."""
    if not built("hf_tinygpt_bf16_products", SOURCE, "bf16 products keep torch's kernels"):
        return False
    return torch.ops.hf_tinygpt_bf16.bf16_products_supported()


def bf16_products_wanted() -> bool:
    """Whether bf16 products should go to `bf16_products` on this CPU: it can run, and the CPU lacks AVX-512 BF16 or
    ATen does not use its AVX-512 kernels (`torch.backends.cpu.get_cpu_capability()`)."""
    if not bf16_products_available():
        return False
    return not (_has_avx512_bf16() and torch.backends.cpu.get_cpu_capability() == "AVX512")


def _has_avx512_bf16() -> bool:
    return torch.ops.hf_tinygpt_bf16.has_avx512_bf16()


class Bf16ProductsLinear(nn.Linear):
    """`nn.Linear` whose bf16 products of up to `MAX_ROWS` rows go to `bf16_products` and of more rows to an fp32
    product of the same bf16 numbers, rounded to bf16 once; other dtypes as `nn.Linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.bfloat16 or self.weight.dtype != torch.bfloat16:
            return super().forward(x)
        rows = x.reshape(-1, x.shape[-1])
        if len(rows) <= MAX_ROWS:
            y = torch.ops.hf_tinygpt_bf16.bf16_products(rows, self.weight, self.bias)
        else:
            bias = None if self.bias is None else self.bias.float()
            y = F.linear(rows.float(), self.weight.float(), bias).bfloat16()
        return y.view(*x.shape[:-1], self.out_features)


def use_bf16_products(model: nn.Module) -> bool:
    """Switches `model`'s bf16 `nn.Linear` modules to `Bf16ProductsLinear` where `bf16_products_wanted()`; whether it
    did."""
    linears = [m for m in model.modules() if type(m) is nn.Linear and m.weight.dtype == torch.bfloat16]
    if not linears or not bf16_products_wanted():
        return False
    for module in linears:
        module.__class__ = Bf16ProductsLinear
    return True
