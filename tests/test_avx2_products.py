"""avx2_products.cpp: a few bf16 rows times bf16 weight rows (`bf16_products`) or int8 ones (`int8_products`) with
AVX2 and FMA, what a compiled bf16 or int8 step multiplies with on CPUs without AVX-512 BF16. The reference is the
exact product (float64) rounded once to bf16, and torch's own kernels beside it; the dispatch (which CPUs take the
ops) is checked for both kinds of CPU on whichever this machine is, by setting what ATen reports.
"""

import pytest
import torch
import torch.nn.functional as F
from conftest import VOCAB, tiny_model
from torch import nn

import hf_tinygpt.generate.avx2_products as avx2
from hf_tinygpt.generate.avx2_products import (
    CHUNKED_UP_TO,
    MAX_ROWS,
    Avx2Int8Linear,
    Bf16ProductsLinear,
    avx2_products_available,
)
from hf_tinygpt.generate.int8 import Int8Linear, use_int8_kernels

if not avx2_products_available():
    pytest.skip("avx2_products: this CPU lacks AVX2 and FMA, or the op could not be built", allow_module_level=True)

GREEDY = dict(do_sample=False, eos_token_id=None, pad_token_id=0, return_dict_in_generate=True, output_logits=True)


def product(x, weight, bias=None):
    return torch.ops.hf_tinygpt_avx2.bf16_products(x, weight, bias)


def within_bf16_rounding(ours, x, weight, bias=None, scale=None) -> bool:
    """Whether each element is the exact one rounded to bf16 (2**-8 of it), give or take fp32 sums (2**-20 of the
    sum of |terms|)."""
    scale = 1 if scale is None else scale.double()
    exact = x.double() @ weight.double().t() * scale + (0 if bias is None else bias.double())
    terms = x.double().abs() @ weight.double().abs().t() * scale + (0 if bias is None else bias.double().abs())
    return bool(((ours.double() - exact).abs() <= exact.abs() * 2**-8 + terms * 2**-20).all())


# Past the kernel's blocks: 97 weight rows leave 1 after blocks of 2 and 4; 40 columns leave 8 after 16, 37 an odd 5.
@pytest.mark.parametrize("out_features, in_features", [(96, 64), (97, 64), (97, 40), (33, 37), (768, 3072)])
def test_every_row_count_is_the_exact_product_rounded_once_to_bf16(out_features, in_features):
    generator = torch.Generator().manual_seed(out_features + in_features)
    weight = torch.randn(out_features, in_features, generator=generator).to(torch.bfloat16)
    bias = torch.randn(out_features, generator=generator).to(torch.bfloat16)
    for rows in range(1, MAX_ROWS + 1):
        x = torch.randn(rows, in_features, generator=generator).to(torch.bfloat16)
        for b in (None, bias):
            ours = product(x, weight, b)
            assert ours.dtype == torch.bfloat16 and ours.shape == (rows, out_features)
            assert within_bf16_rounding(ours, x, weight, b), rows
            torchs = F.linear(x, weight, b)
            assert (ours != torchs).float().mean() < 0.02, rows  # mostly the same bf16 as torch's own product


@pytest.mark.parametrize("out_features, in_features", [(96, 64), (97, 64), (97, 40), (33, 37), (768, 3072)])
def test_int8_rows_are_the_exact_scaled_product_rounded_once_to_bf16(out_features, in_features):
    generator = torch.Generator().manual_seed(out_features * in_features)
    weight = torch.randint(-128, 128, (out_features, in_features), dtype=torch.int8, generator=generator)
    scale = (torch.rand(out_features, generator=generator) / 64).to(torch.bfloat16)
    for rows in range(1, MAX_ROWS + 1):
        x = torch.randn(rows, in_features, generator=generator).to(torch.bfloat16)
        ours = torch.ops.hf_tinygpt_avx2.int8_products(x, weight, scale)
        assert ours.dtype == torch.bfloat16 and ours.shape == (rows, out_features)
        assert within_bf16_rounding(ours, x, weight, scale=scale), rows
        if in_features % 16 == 0:  # torch's kernel takes only rows that start on 16 bytes
            torchs = torch.ops.aten._weight_int8pack_mm(x, weight, scale)
            assert (ours != torchs).float().mean() < 0.02, rows  # mostly the same bf16 as torch's own kernel


def test_what_does_not_fit_is_named():
    weight = torch.zeros(8, 32, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="x in bfloat16 and weight in bfloat16 expected"):
        product(torch.zeros(2, 32), weight)
    with pytest.raises(RuntimeError, match=r"x \[2, 16\] and weight \[8, 32\] do not fit"):
        product(torch.zeros(2, 16, dtype=torch.bfloat16), weight)
    with pytest.raises(RuntimeError, match="at most 4 rows, got 5"):
        product(torch.zeros(5, 32, dtype=torch.bfloat16), weight)
    with pytest.raises(RuntimeError, match="a bfloat16 bias of 8 expected"):
        product(torch.zeros(1, 32, dtype=torch.bfloat16), weight, torch.zeros(7, dtype=torch.bfloat16))
    int8 = torch.ops.hf_tinygpt_avx2.int8_products
    with pytest.raises(RuntimeError, match="x in bfloat16 and weight in int8 expected"):
        int8(torch.zeros(1, 32, dtype=torch.bfloat16), weight, torch.ones(8, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="a bfloat16 scale of 8 expected"):
        int8(torch.zeros(1, 32, dtype=torch.bfloat16), weight.to(torch.int8), torch.ones(8))


def test_a_linear_layer_sends_a_short_prompts_bf16_rows_to_the_op_four_at_a_time_and_more_to_an_fp32_product():
    torch.manual_seed(0)
    linear = nn.Linear(64, 96).to(torch.bfloat16)
    linear.__class__ = Bf16ProductsLinear
    for rows in (1, 4, 5, 16, CHUNKED_UP_TO, CHUNKED_UP_TO + 1):
        x = torch.randn(rows, 1, 64, dtype=torch.bfloat16)
        with torch.profiler.profile() as profile:
            y = linear(x)
        calls = sum(event.name == "hf_tinygpt_avx2::bf16_products" for event in profile.events())
        assert calls == (-(-rows // MAX_ROWS) if rows <= CHUNKED_UP_TO else 0), rows
        assert y.shape == (rows, 1, 96) and y.dtype == torch.bfloat16
        assert within_bf16_rounding(y.view(rows, 96), x.view(rows, 64), linear.weight, linear.bias), rows
    x = torch.randn(3, 64)
    assert torch.equal(linear.float()(x), F.linear(x, linear.weight, linear.bias))  # fp32: nn.Linear's own


@pytest.mark.parametrize("capability, native", [("AVX2", False), ("AVX2", True), ("AVX512", False), ("AVX512", True)])
def test_the_op_is_wanted_unless_the_cpu_multiplies_bf16_itself(monkeypatch, capability, native):
    """AVX-512 BF16 with ATen's AVX-512 kernels: torch's own bf16 kernels are fast there. Anything else (AVX2, or
    `ATEN_CPU_CAPABILITY=avx2` on an AVX-512 machine, or AVX-512 without BF16): the op."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(avx2, "_has_avx512_bf16", lambda: native)
    assert avx2.avx2_products_wanted() == (not (native and capability == "AVX512"))
    model = nn.Sequential(nn.Linear(32, 8).to(torch.bfloat16), nn.Linear(8, 8), Int8Linear(8, 8))
    wanted = avx2.avx2_products_wanted()
    assert avx2.use_avx2_products(model) == wanted
    expected = [Bf16ProductsLinear, nn.Linear, Avx2Int8Linear] if wanted else [nn.Linear, nn.Linear, Int8Linear]
    assert [type(m) for m in model] == expected  # fp32 weights keep nn.Linear


def assert_every_step_product_takes(decoder, model, products: int, op: str):
    """Each of five compiled steps calls `op` once per weight product, and the decoded logits are the eager
    model's, within 2**-6 of their scale (the op and torch's kernels round their bf16 outputs each their own way)."""
    prompt = torch.randint(1, VOCAB, (1, 3), generator=torch.Generator().manual_seed(0))

    def op_calls(new_tokens):
        with torch.profiler.profile() as profile:
            out = decoder.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **GREEDY)
        return out, sum(event.name == op for event in profile.events())

    compiled, calls = op_calls(6)
    assert calls - op_calls(1)[1] == 5 * products  # five compiled steps
    with torch.no_grad():
        full = model(compiled.sequences).logits[:, 2:-1].float()
    assert (torch.stack(compiled.logits, dim=1).float() - full).abs().max() <= 2**-6 * full.abs().max()


@pytest.mark.slow
@pytest.mark.parametrize("autotune", [False, True])  # autotuned, the step calls its kernels from C++ (cpp_wrapper)
def test_a_compiled_bf16_step_multiplies_with_the_op_where_it_is_wanted(monkeypatch, autotune):
    """With the op wanted (as ATen reports on an AVX2 CPU), a batch-1 decoder's compiled step takes every product
    there, once per weight and step, in its private copy, and decodes as the eager bf16 model does."""
    from hf_tinygpt.generate.compiled_decoding import CompiledDecoder

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    model = tiny_model("rope", n_embd=64).to(torch.bfloat16)
    linears = [module for module in model.modules() if isinstance(module, nn.Linear)]
    decoder = CompiledDecoder(model, max_length=16, autotune=autotune)
    assert decoder.inductor_settings.get("cpp_wrapper", False) == autotune
    assert decoder.avx2_products and all(type(module) is nn.Linear for module in linears)  # the model's own
    assert_every_step_product_takes(decoder, model, len(linears), "hf_tinygpt_avx2::bf16_products")
    assert not CompiledDecoder(model, batch_size=5, max_length=16, autotune=False).avx2_products


@pytest.mark.slow
@pytest.mark.parametrize("autotune", [False, True])
def test_a_compiled_int8_step_multiplies_with_the_op_where_it_is_wanted(monkeypatch, tmp_path, autotune):
    """The same for int8 weights (transformers' TorchAoConfig): a batch-1 decoder's step multiplies every int8
    weight with `int8_products`, and decodes as the eager int8 model (torch's int8 kernel) does."""
    pytest.importorskip("torchao", reason="the [int8] extra (torchao) is not installed")
    from hf_tinygpt import TinyGPTForCausalLM
    from hf_tinygpt.generate.compiled_decoding import CompiledDecoder
    from hf_tinygpt.generate.text import int8_weight_only

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    tiny_model("rope", n_embd=64).save_pretrained(tmp_path)
    int8 = TinyGPTForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16, quantization_config=int8_weight_only())
    use_int8_kernels(int8)  # as `generate --int8` loads it: the eager model multiplies in int8 too
    linears = [module for module in int8.modules() if isinstance(module, nn.Linear)]
    decoder = CompiledDecoder(int8.eval(), max_length=16, autotune=autotune)
    assert decoder.inductor_settings.get("cpp_wrapper", False) == autotune
    assert decoder.avx2_products and all(type(module) is Int8Linear for module in linears)  # the model's own
    assert_every_step_product_takes(decoder, int8, len(linears), "hf_tinygpt_avx2::int8_products")


def test_transposed_weights_are_made_contiguous_for_the_kernel(monkeypatch):
    """GPT-2's Conv1D weights load as transposed views: the kernel reads rows, so the switch copies them once
    (without it, every product copied its weight first: a bf16 step at a seventh of its speed)."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    linear = nn.Linear(64, 96, bias=False).to(torch.bfloat16)
    linear.weight = nn.Parameter(linear.weight.detach().t().contiguous().t())  # the same values, transposed storage
    values = linear.weight.detach().clone()
    assert not linear.weight.is_contiguous() and avx2.use_avx2_products(nn.Sequential(linear))
    assert linear.weight.is_contiguous() and torch.equal(linear.weight, values)
