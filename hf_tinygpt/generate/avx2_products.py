"""bf16 and int8 products of 1 to 4 rows with AVX2 and FMA, for compiled decoding at batch 1 to 4.

Inductor's bf16 GEMM widens each weight to fp32 inside its multiply loop and is bound by that arithmetic, not by
memory: on an AVX2 CPU a bf16 decoding step ran at a quarter of llama.cpp's f16 one on the same weights, and an int8
one at 0.8 of its q8_0; on an AVX-512 BF16 CPU with twice the bandwidth of an earlier one, its bf16 step stayed at
half of llama.cpp's (scripts/README.md, "bf16 and int8 on AVX2"). avx2_products.cpp (torch ops built on first use,
cpu_ops.py) widens 16 weights at a time (bf16: one shift and one mask; int8: sign extension) and sums with fused
multiply-adds. `Bf16ProductsLinear` sends bf16 products of up to 4 rows there on any CPU with AVX2 and FMA. More rows
go to torch's own kernel where it multiplies bf16 natively (`native_bf16_products()`), elsewhere 4 at a time to the
op up to a short prompt and to an fp32 product of the same numbers beyond, since eager bf16 products there are slower
still. `Avx2Int8Linear` sends int8 products of up to 4 rows there where torch's are not native: on AVX-512 BF16,
inductor's int8 step is ahead of llama.cpp's q8_0 already. `ATEN_CPU_CAPABILITY=avx2` makes an AVX-512 machine
dispatch as an AVX2 one (how the AVX2 path is measured there).
"""

import functools
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..model.int8 import Int8Linear
from .cpu_ops import built

SOURCE = Path(__file__).with_suffix(".cpp")
MAX_ROWS = 4  # the kernels'; more int8 rows go where Int8Linear sends them
# bf16 products of up to this many rows (a short prompt) go to the kernel 4 rows at a time, more to an fp32 product:
# measured crossing between 32 and 128 rows (scripts/README.md, "bf16 and int8 on AVX2").
CHUNKED_UP_TO = 64


@functools.cache
def avx2_products_available() -> bool:
    """Whether the ops of avx2_products.cpp can run here: built (cpu_ops.py), and the CPU has AVX2 and FMA."""
    if not built("hf_tinygpt_avx2_products", SOURCE, "bf16 and int8 products keep torch's kernels"):
        return False
    return torch.ops.hf_tinygpt_avx2.supported()


def native_bf16_products() -> bool:
    """Whether torch's own kernels multiply bf16 natively here: the CPU has AVX-512 BF16 and ATen runs its AVX-512
    kernels (`torch.backends.cpu.get_cpu_capability()`; `ATEN_CPU_CAPABILITY=avx2` lowers it)."""
    return _has_avx512_bf16() and torch.backends.cpu.get_cpu_capability() == "AVX512"


def _has_avx512_bf16() -> bool:
    return torch.ops.hf_tinygpt_avx2.has_avx512_bf16()


class Bf16ProductsLinear(nn.Linear):
    """`nn.Linear` whose bf16 products of up to `MAX_ROWS` rows go to `bf16_products`. More rows: `nn.Linear`'s own
    where `native` (set by `use_avx2_products`), else up to `CHUNKED_UP_TO` rows `MAX_ROWS` at a time to the op and
    beyond that to an fp32 product of the same bf16 numbers, rounded to bf16 once. Other dtypes as `nn.Linear`."""

    native = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if x.dtype != torch.bfloat16 or self.weight.dtype != torch.bfloat16 or (self.native and len(rows) > MAX_ROWS):
            return super().forward(x)
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
    """Switches `model`'s bf16 `nn.Linear` modules to `Bf16ProductsLinear` (their weights made contiguous), and its
    `Int8Linear` ones to `Avx2Int8Linear` unless `native_bf16_products()`, where `avx2_products_available()`;
    whether it switched any. For a model of one's own (CompiledDecoder's private copy): it changes the modules in
    place."""
    if not avx2_products_available():
        return False
    native = native_bf16_products()
    switches = {nn.Linear: Bf16ProductsLinear} | ({} if native else {Int8Linear: Avx2Int8Linear})
    modules = [
        m
        for m in model.modules()
        if (type(m) is Int8Linear and Int8Linear in switches)
        or (type(m) is nn.Linear and m.weight.dtype == torch.bfloat16)
    ]
    for module in modules:
        module.__class__ = switches[type(module)]
        if type(module) is Bf16ProductsLinear:
            module.native = native
            if not module.weight.is_contiguous():
                # GPT-2's Conv1D weights load as transposed views; the kernel reads rows, and would copy them each call.
                weight = module.weight
                module.weight = nn.Parameter(weight.detach().contiguous(), requires_grad=weight.requires_grad)
    return bool(modules)
