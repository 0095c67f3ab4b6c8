"""`int8_dot_products`: int8 weight rows times a few bf16 rows with AVX-512 BF16 dot products, what a compiled int8
step multiplies with at batch 8. The references are the exact product (in float64) and torch's own int8 kernel,
`_weight_int8pack_mm`, which computes the same thing; the op has to round like it, once, to bf16.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import warnings
from pathlib import Path

import pytest
import torch
from conftest import int8_kernel_rows
from torch import nn

import hf_tinygpt.generate.cpu_ops as cpu_ops
import hf_tinygpt.generate.int8_dot_products as dot_products
from hf_tinygpt.generate.int8 import INT8_KERNEL_MAX_ROWS, Int8Linear
from hf_tinygpt.generate.int8_dot_products import Int8DotProductsLinear, int8_dot_products_available

if not int8_dot_products_available():
    pytest.skip("int8_dot_products: this CPU lacks AVX-512 BF16, or the op could not be built", allow_module_level=True)


def int8_product(x, weight, scale):
    return torch.ops.hf_tinygpt.int8_dot_products(x, weight, scale)


def within_bf16_rounding(product, x, weight, scale) -> bool:
    """Whether each element of `product` is the exact one rounded to bf16 (2**-8 of it), give or take fp32 sums
    (2**-20 of the sum of |terms|: far above fp32's rounding over a few thousand terms)."""
    exact = x.double() @ weight.double().t() * scale.double()
    terms = x.double().abs() @ weight.double().abs().t() * scale.double()
    return bool(((product.double() - exact).abs() <= exact.abs() * 2**-8 + terms * 2**-20).all())


# Shapes past the kernel's blocks: 97 weight rows leave 1 after blocks of 2, 4 and 8; 40 columns, 8 after 32.
@pytest.mark.parametrize("out_features, in_features", [(96, 64), (97, 64), (97, 40), (768, 3072)])
def test_every_row_count_up_to_sixteen_is_the_exact_product_rounded_once_to_bf16(out_features, in_features):
    generator = torch.Generator().manual_seed(out_features + in_features)
    weight = torch.randint(-128, 128, (out_features, in_features), dtype=torch.int8, generator=generator)
    scale = (torch.rand(out_features, generator=generator) / 64).to(torch.bfloat16)
    for rows in range(1, INT8_KERNEL_MAX_ROWS + 1):
        x = torch.randn(rows, in_features, generator=generator).to(torch.bfloat16)
        ours = int8_product(x, weight, scale)
        assert ours.dtype == torch.bfloat16 and ours.shape == (rows, out_features)
        assert within_bf16_rounding(ours, x, weight, scale), rows
        if in_features % 16 == 0:  # torch's kernel takes only rows that start on 16 bytes
            torchs = torch.ops.aten._weight_int8pack_mm(x, weight, scale)
            assert within_bf16_rounding(torchs, x, weight, scale), rows  # the bound holds for torch's own kernel
            assert (ours != torchs).float().mean() < 0.02, rows  # and both mostly round to the same bf16


def test_what_does_not_fit_is_named():
    weight = torch.zeros(8, 32, dtype=torch.int8)
    scale = torch.ones(8, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="x and scale in bfloat16"):
        int8_product(torch.zeros(2, 32), weight, scale)
    with pytest.raises(RuntimeError, match=r"x \[2, 16\], weight \[8, 32\] and scale \[8\] do not fit"):
        int8_product(torch.zeros(2, 16, dtype=torch.bfloat16), weight, scale)
    with pytest.raises(RuntimeError, match=r"x \[M, K\], weight \[N, K\], scale \[N\] expected"):
        int8_product(torch.zeros(2, 1, 32, dtype=torch.bfloat16), weight, scale)


def test_a_linear_layer_sends_five_to_sixteen_rows_to_the_op_and_others_where_int8linear_does():
    """Inductor's int8 kernel is faster for up to 4 rows (scripts/measurement_log.md, "int8 at batch 8"); past 16 rows,
    a prompt, torchao's product on the converted weight is."""
    torchao = pytest.importorskip("torchao.quantization", reason="the [int8] extra (torchao) is not installed")
    torch.manual_seed(0)
    linear = Int8Linear(64, 96).to(torch.bfloat16)
    torchao.quantize_(linear, torchao.Int8WeightOnlyConfig())
    linear.__class__ = Int8DotProductsLinear
    for rows in (1, 4, 5, 8, 16, 17):
        x = torch.randn(rows, 1, 64, dtype=torch.bfloat16)
        with torch.profiler.profile() as profile:
            y = linear(x)
        ops = {event.name for event in profile.events()}
        assert ("hf_tinygpt::int8_dot_products" in ops) == (4 < rows <= 16), rows
        assert int8_kernel_rows(lambda x=x: linear(x)) == ([rows] if rows <= 4 else []), rows
        exact = x.float() @ linear.weight.dequantize().float().t() + linear.bias.float()
        assert y.shape == (rows, 1, 96) and (y.float() - exact).abs().max() <= 2**-7 * exact.abs().max()
    x = torch.randn(8, 64)
    assert torch.equal(linear(x), Int8Linear.forward(linear, x))  # fp32 rows: Int8Linear's path


def test_when_the_op_cannot_be_built_decoders_keep_inductors_kernel(monkeypatch):
    """A machine without a compiler or ninja: a warning that says why, and the int8 layers stay as they were."""

    def no_compiler(**kwargs):
        raise RuntimeError("Error building extension 'x':\nsrc.cpp:1:1: error: no compiler here\nninja: stopped")

    monkeypatch.setattr(cpu_ops, "load", no_compiler)
    dot_products.int8_dot_products_available.cache_clear()
    try:
        model = nn.Sequential(Int8Linear(32, 8))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert not dot_products.use_int8_dot_products(model)
        assert "src.cpp:1:1: error: no compiler here" in str(caught[0].message)
        assert type(model[0]) is Int8Linear
    finally:
        dot_products.int8_dot_products_available.cache_clear()


@pytest.mark.slow
def test_a_venv_that_was_not_activated_builds_the_op_with_its_own_ninja(tmp_path):
    """`.venv/bin/python` run by its path: the [int8] extra's ninja sits beside the interpreter, not on PATH, where
    torch's extension builder looks for it. The build finds it there, fresh (its own extensions folder), and leaves
    PATH as it was."""
    scripts = Path(sysconfig.get_path("scripts"))
    if not (scripts / "ninja").exists():
        pytest.skip("no ninja installed beside this interpreter (the [int8] extra's)")
    path = []  # PATH as it is, each folder holding a ninja replaced by links to everything else in it
    for index, folder in enumerate(os.environ["PATH"].split(os.pathsep)):
        if not (Path(folder) / "ninja").exists():
            path.append(folder)
            continue
        links = tmp_path / f"path{index}"
        links.mkdir()
        for program in Path(folder).iterdir():
            if program.name != "ninja":
                (links / program.name).symlink_to(program)
        path.append(str(links))
    path = os.pathsep.join(path)
    assert shutil.which("ninja", path=path) is None
    check = (
        "import os; from hf_tinygpt.generate.int8_dot_products import int8_dot_products_available as available; "
        "print(available(), os.environ['PATH'] == os.environ['EXPECTED_PATH'])"
    )
    environment = os.environ | {"PATH": path, "EXPECTED_PATH": path, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    run = subprocess.run([sys.executable, "-c", check], env=environment, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["True", "True"]
