"""bf16 and int8 products of 1 to 4 rows for CPUs without AVX-512 BF16 (AVX2 and FMA), for compiled decoding at
batch 1 to 4.

On such a CPU inductor's bf16 GEMM widens each weight to fp32 inside its multiply loop and is bound by that
arithmetic, not by memory: a bf16 decoding step ran at a quarter of llama.cpp's f16 one on the same weights, and an
int8 one at 0.8 of its q8_0 (scripts/measurement_log.md, "bf16 and int8 on AVX2"). avx2_products.cpp (torch ops built on
first use, cpu_ops.py) widens 16 weights at a time (bf16: one shift and one mask; int8: sign extension) and sums with
fused multiply-adds. `Bf16ProductsLinear` sends bf16 products there, 4 rows at a time up to a short prompt, and
longer prompts to an fp32 product of the same numbers, since eager bf16 products on such a CPU are slower still;
`Avx2Int8Linear` sends int8 products of up to 4 rows there. CPUs with AVX-512 BF16 keep torch's own kernels; so does
a CPU on which ATen runs its AVX-512 kernels unless `ATEN_CPU_CAPABILITY` lowers it (how the AVX2 path is measured
on an AVX-512 machine).
"""

import functools
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .cpu_ops import built
from .int8 import Int8Linear

SOURCE = Path(__file__).with_suffix(".cpp")
MAX_ROWS = 4  # the kernels'; more int8 rows go where Int8Linear sends them
# bf16 products of up to this many rows (a short prompt) go to the kernel 4 rows at a time, more to an fp32 product:
# measured crossing between 32 and 128 rows (scripts/measurement_log.md, "bf16 and int8 on AVX2").
CHUNKED_UP_TO = 64


@functools.cache
def avx2_products_available() -> bool:
    """Whether the ops of avx2_products.cpp can run here: built (cpu_ops.py), and the CPU has AVX2 and FMA."""
    if not built("hf_tinygpt_avx2_products", SOURCE, "bf16 and int8 products keep torch's kernels"):
        return False
    return torch.ops.hf_tinygpt_avx2.supported()


def avx2_products_wanted() -> bool:
    """Whether products of few rows should go to avx2_products.cpp on this CPU: it can run them, and the CPU lacks
    AVX-512 BF16 or ATen does not use its AVX-512 kernels (`torch.backends.cpu.get_cpu_capability()`)."""
    if not avx2_products_available():
        return False
    return not (_has_avx512_bf16() and torch.backends.cpu.get_cpu_capability() == "AVX512")


def _has_avx512_bf16() -> bool:
    return torch.ops.hf_tinygpt_avx2.has_avx512_bf16()


class Bf16ProductsLinear(nn.Linear):
    """`nn.Linear` whose bf16 products of up to `CHUNKED_UP_TO` rows go to `bf16_products` (`MAX_ROWS` at a time) and
    of more rows to an fp32 product of the same bf16 numbers, rounded to bf16 once; other dtypes as `nn.Linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.bfloat16 or self.weight.dtype != torch.bfloat16:
            return super().forward(x)
        rows = x.reshape(-1, x.shape[-1])
        if len(rows) <= MAX_ROWS:
            y = torch.ops.hf_tinygpt_avx2.bf16_products(rows, self.weight, self.bias)
        elif len(rows) <= CHUNKED_UP_TO:
            y = torch.cat(
                [torch.ops.hf_tinygpt_avx2.bf16_products(part, self.weight, self.bias) for part in rows.split(MAX_ROWS)]
            )
        else:
            bias = None if self.bias is None else self.bias.float()
            y = F.linear(rows.float(), self.weight.float(), bias).bfloat16()
        return y.view(*x.shape[:-1], self.out_features)


class Avx2Int8Linear(Int8Linear):
    """`Int8Linear` whose products of up to `MAX_ROWS` bf16 rows go to `int8_products`; others where `Int8Linear`
    sends them."""

    def multiply_rows(self, rows: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        if len(rows) > MAX_ROWS or rows.dtype != torch.bfloat16:
            return super().multiply_rows(rows, weight, scale)
        return torch.ops.hf_tinygpt_avx2.int8_products(rows, weight, scale)


def use_avx2_products(model: nn.Module) -> bool:
    """Switches `model`'s bf16 `nn.Linear` modules to `Bf16ProductsLinear` (their weights made contiguous) and its
    `Int8Linear` ones to `Avx2Int8Linear` where `avx2_products_wanted()`; whether it did. For a model of one's own
    (CompiledDecoder's private copy): it changes the modules in place."""
    switches = {nn.Linear: Bf16ProductsLinear, Int8Linear: Avx2Int8Linear}
    modules = [
        m
        for m in model.modules()
        if type(m) is Int8Linear or (type(m) is nn.Linear and m.weight.dtype == torch.bfloat16)
    ]
    if not modules or not avx2_products_wanted():
        return False
    for module in modules:
        module.__class__ = switches[type(module)]
        if type(module) is Bf16ProductsLinear and not module.weight.is_contiguous():
            # GPT-2's Conv1D weights load as transposed views; the kernel reads rows, and would copy them every call.
            module.weight = nn.Parameter(module.weight.detach().contiguous(), requires_grad=module.weight.requires_grad)
    return True
