"""int8 weights through transformers' TorchAoConfig: what `hf-tinygpt generate --int8` loads.

torchao's Int8WeightOnlyConfig stores each weight as int8 rows with one scale per row. TinyGPT multiplies them in
int8 (torch's `_weight_int8pack_mm`) and looks up only the rows it needs, so a decoding step reads half of bf16's
bytes. The reference for every product is torchao's own (the same tensors, through torchao's code), and for the
whole model a float twin holding exactly the dequantized weights.
"""

import sys
import warnings

import pytest
import torch
from conftest import HAMLET, VOCAB, int8_kernel_rows, random_gpt2, save_with_tokenizer, text_model, tiny_model
from safetensors import safe_open
from torch import nn
from transformers import AutoModelForCausalLM, pipeline

import hf_tinygpt
from hf_tinygpt import DEFAULT_MODEL_DIR, TinyGPTForCausalLM
from hf_tinygpt.cli.commands import main
from hf_tinygpt.generate.int8 import (
    INT8_KERNEL_MAX_ROWS,
    INT8_KERNEL_ROWS_PER_CALL,
    Int8Embedding,
    Int8Linear,
    int8_rows,
    use_int8_kernels,
)
from hf_tinygpt.generate.text import int8_weight_only, load_for_generation
from hf_tinygpt.model import BUNDLE

torchao = pytest.importorskip("torchao", reason="the [int8] extra (torchao) is not installed")
from torchao.quantization import Int8WeightOnlyConfig, quantize_  # noqa: E402

IDS = torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(1))


def load_int8(folder, **kwargs):
    """As `hf-tinygpt generate --int8` loads a model: quantized by `from_pretrained`, multiplied in int8."""
    return use_int8_kernels(
        TinyGPTForCausalLM.from_pretrained(
            folder, dtype=torch.bfloat16, quantization_config=int8_weight_only(), **kwargs
        ).eval()
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("int8") / "tiny"
    tiny_model("rope").save_pretrained(path)
    return path


def int8_linear(out_features, in_features, seed=0) -> Int8Linear:
    torch.manual_seed(seed)
    linear = Int8Linear(in_features, out_features).to(torch.bfloat16)
    quantize_(linear, Int8WeightOnlyConfig())
    return linear


@pytest.mark.parametrize("out_features", [96, 97])  # 97 rows: a last block of one row, handled apart by the kernel
def test_an_int8_projection_is_torchaos_product_computed_in_int8(out_features):
    linear = int8_linear(out_features, 64)
    assert int8_rows(linear.weight)
    x = torch.randn(2, 5, 64, dtype=torch.bfloat16)
    ours = linear(x)
    torchaos = nn.Linear.forward(linear, x)  # torchao's own: the weight converted to bf16, then multiplied
    exact = x.float() @ linear.weight.dequantize().float().t() + linear.bias.float()
    assert ours.dtype == torch.bfloat16 and ours.shape == (2, 5, out_features)
    # Both round to bf16; ours once, at the end, so it is at least as close to the exact product as torchao's.
    scale = exact.abs().max().item()
    assert (ours.float() - exact).abs().max() <= 2**-7 * scale
    assert (ours.float() - exact).abs().max() <= (torchaos.float() - exact).abs().max()


@pytest.mark.parametrize("has_bf16", [True, False])
def test_many_rows_of_activations_take_a_gemm_in_bf16_only_where_the_cpu_has_bf16_instructions(monkeypatch, has_bf16):
    # A prompt: the int8 kernel's time grows with each row, a GEMM on the converted weight's hardly does. Without bf16
    # instructions torchao's bf16 GEMM is the eager bf16 trap, so the same numbers are multiplied in fp32.
    monkeypatch.setattr("hf_tinygpt.generate.int8.cpu_has_bf16_instructions", lambda: has_bf16)
    linear = int8_linear(96, 64)
    few = torch.randn(1, INT8_KERNEL_MAX_ROWS, 64, dtype=torch.bfloat16)
    many = torch.randn(1, INT8_KERNEL_MAX_ROWS + 1, 64, dtype=torch.bfloat16)
    assert not torch.equal(linear(few), nn.Linear.forward(linear, few))  # the int8 kernel rounds once
    weight = linear.weight
    in_fp32 = (
        many.float() @ weight.qdata.float().t() * weight.scale.reshape(-1).float() + linear.bias.float()
    ).bfloat16()
    assert torch.equal(linear(many), nn.Linear.forward(linear, many) if has_bf16 else in_fp32)
    assert not torch.equal(in_fp32, nn.Linear.forward(linear, many))  # the two routes are told apart


def test_a_batch_of_eight_goes_to_the_int8_kernel_four_rows_at_a_time():
    # Compiled, inductor's int8 GEMM for few rows takes twice as long for 6 rows in one call as for 5: two calls of 4
    # took int8 at batch 8 from 0.63x our bf16 to level with it (scripts/measurement_log.md, "int8 at batch 8").
    linear = int8_linear(96, 64)
    x = torch.randn(8, 1, 64, dtype=torch.bfloat16)
    assert INT8_KERNEL_ROWS_PER_CALL == 4 and int8_kernel_rows(lambda: linear(x)) == [4, 4]
    scale = linear.weight.scale.reshape(-1).to(x.dtype)
    one_call = torch.ops.aten._weight_int8pack_mm(x.reshape(8, 64), linear.weight.qdata, scale)
    assert torch.equal(linear(x), (one_call + linear.bias).reshape(8, 1, 96))  # each row's sums are the same


def test_int8_rows_are_looked_up_without_converting_the_table():
    table = Int8Embedding(VOCAB, 32).to(torch.bfloat16)
    quantize_(table, Int8WeightOnlyConfig(), filter_fn=lambda module, name: True)
    ids = torch.tensor([[0, 5, VOCAB - 1]])
    assert torch.equal(table(ids), table.weight.dequantize()[ids])
    with pytest.raises(IndexError):
        table(torch.tensor([[VOCAB]]))
    with pytest.raises(IndexError):  # plain indexing would wrap -1 around to the last row
        table(torch.tensor([[-1]]))


def test_an_int8_weight_the_kernel_cannot_take_falls_back_to_torchaos_product():
    # torch 2.13's int8 kernel crashes the process on rows that do not start on 16 bytes when the row count is not a
    # multiple of 4 (a checkpoint read from a file can place them anywhere): such a weight is left to torchao.
    linear = int8_linear(97, 64)
    shifted = torch.empty(linear.weight.qdata.numel() + 1, dtype=torch.int8)[1:].view_as(linear.weight.qdata)
    shifted.copy_(linear.weight.qdata)
    linear.weight.qdata = shifted
    assert not int8_rows(linear.weight)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    assert torch.equal(linear(x), nn.Linear.forward(linear, x))


def test_from_pretrained_quantizes_and_the_decoding_code_chooses_the_kernels(folder):
    """The model bundle holds no decoding speed: `from_pretrained` quantizes every projection and the tied table once
    and leaves torch's modules; `use_int8_kernels` (what `generate --int8` and `CompiledDecoder` apply) switches
    them to int8 products, within bf16 rounding of torchao's own."""
    assert "int8.py" not in BUNDLE
    model = TinyGPTForCausalLM.from_pretrained(
        folder, dtype=torch.bfloat16, quantization_config=int8_weight_only()
    ).eval()
    projections = [module for module in model.modules() if isinstance(module, nn.Linear)]
    assert len(projections) == 2 * 4 + 1 and all(int8_rows(module.weight) for module in projections)
    assert all(type(module) is nn.Linear for module in projections) and type(model.transformer.wte) is nn.Embedding
    assert model.lm_head.weight is model.transformer.wte.weight
    with torch.no_grad():
        torchaos = model(IDS).logits.float()
        assert use_int8_kernels(model) is model
        assert (
            all(type(module) is Int8Linear for module in projections) and type(model.transformer.wte) is Int8Embedding
        )
        ours = model(IDS).logits.float()
    assert (ours - torchaos).abs().max() <= 2**-6 * torchaos.abs().max()


def test_loading_with_int8_quantizes_every_projection_and_the_tied_table_once(folder):
    model = load_int8(folder)
    projections = [module for module in model.modules() if isinstance(module, nn.Linear)]
    assert len(projections) == 2 * 4 + 1 and all(int8_rows(module.weight) for module in projections)
    assert all(type(module) is Int8Linear for module in projections)  # multiplied in int8 when decoding
    assert type(model.transformer.wte) is Int8Embedding  # looks up int8 rows
    assert model.lm_head.weight is model.transformer.wte.weight  # one int8 table: the lookup and the head
    # The reference: the float model holding exactly the weights the int8 ones stand for.
    twin = tiny_model("rope")
    twin.load_state_dict({key: value.dequantize().float() for key, value in model.state_dict().items()})
    with torch.no_grad():
        exact = twin(IDS).logits
        logits = model(IDS).logits.float()
    assert (logits - exact).abs().max() <= 2**-6 * exact.abs().max()  # bf16 activations


def test_a_gpt2_checkpoint_quantizes_as_its_tinygpt_folder_does(tmp_path):
    random_gpt2().save_pretrained(tmp_path / "gpt2")
    TinyGPTForCausalLM.from_pretrained(tmp_path / "gpt2").save_pretrained(tmp_path / "tinygpt")
    from_gpt2, from_tinygpt = load_int8(tmp_path / "gpt2"), load_int8(tmp_path / "tinygpt")
    assert all(int8_rows(m.weight) for m in from_gpt2.modules() if isinstance(m, nn.Linear))
    with torch.no_grad():
        assert torch.equal(from_gpt2(IDS).logits, from_tinygpt(IDS).logits)


def test_an_int8_model_saves_and_loads_back_exactly(folder, tmp_path):
    model = load_int8(folder)
    model.save_pretrained(tmp_path / "int8")
    with safe_open(tmp_path / "int8" / "model.safetensors", "pt") as saved:
        assert not [key for key in saved.keys() if key.startswith("lm_head")]  # the tied table is written once
        assert saved.get_tensor("transformer.wte._weight_qdata").dtype == torch.int8
    assert not (tmp_path / "int8" / "int8.py").exists()  # the bundle: the model, not its decoding speed
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "int8").eval()  # no quantization_config: it is saved
    use_int8_kernels(reloaded)
    assert reloaded.lm_head.weight is reloaded.transformer.wte.weight
    assert all(int8_rows(m.weight) for m in reloaded.modules() if isinstance(m, nn.Linear))
    with torch.no_grad():
        assert torch.equal(reloaded(IDS).logits, model(IDS).logits)


def test_cached_int8_decoding_equals_a_full_forward(folder):
    model = load_int8(folder)
    prompt = IDS[:1, :5]
    out = model.generate(
        prompt,
        max_new_tokens=8,
        min_new_tokens=8,
        do_sample=False,
        pad_token_id=0,
        output_logits=True,
        return_dict_in_generate=True,
    )
    with torch.no_grad():
        full = model(out.sequences).logits[:, 4:-1].float()
    assert (torch.stack(out.logits, dim=1).float() - full).abs().max() <= 2**-6 * full.abs().max()


def test_generate_int8_prints_what_the_int8_pipeline_generates(tmp_path, capsys):
    folder = save_with_tokenizer(text_model("learned"), tmp_path / "model")
    prompt = "Friends, Romans, countrymen"
    command = ["generate", prompt, "--model", str(folder), "--int8", "--temperature", "0", "--max-new-tokens", "9"]
    assert main(command) == 0
    printed = capsys.readouterr().out
    model, tokenizer = load_for_generation(str(folder), int8=True)
    assert int8_rows(model.lm_head.weight)
    expected = pipeline("text-generation", model=model, tokenizer=tokenizer)(prompt, max_new_tokens=9, do_sample=False)
    assert printed == expected[0]["generated_text"] + "\n"


def test_int8_without_torchao_names_the_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao.quantization", None)
    with pytest.raises(ImportError, match=r"torchao \(not installed\): pip install 'hf-tinygpt\[int8\]'"):
        int8_weight_only()


@pytest.mark.slow
def test_int8_keeps_the_shipped_models_hamlet_perplexity_within_one_percent():
    from hf_tinygpt.train.data import tokenize_files
    from hf_tinygpt.train.evaluate import perplexity

    tokens = tokenize_files([HAMLET], hf_tinygpt.gpt2_tokenizer())
    # One window at a time: a batch's 50,257-way logits, in bf16 and again in float32, cost more than batching saves.
    bf16_model = TinyGPTForCausalLM.from_pretrained(DEFAULT_MODEL_DIR, dtype=torch.bfloat16)
    context = bf16_model.config.n_positions
    bf16 = perplexity(bf16_model, tokens, context, batch_size=1)
    int8 = perplexity(load_int8(DEFAULT_MODEL_DIR), tokens, context, batch_size=1)
    assert int8 == pytest.approx(bf16, rel=0.01)


@pytest.mark.slow
def test_compiled_int8_decoding_gives_the_eager_int8_tokens():
    from hf_tinygpt.generate.compiled_decoding import CompiledDecoder

    model = load_int8(DEFAULT_MODEL_DIR)
    tokenizer = hf_tinygpt.gpt2_tokenizer()
    prompt = tokenizer("ROMEO: What light through yonder window breaks?", return_tensors="pt").input_ids
    eager = model.generate(prompt, max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0)
    compiled = CompiledDecoder(model, max_length=48, autotune=False)
    tokens = compiled.generate(prompt, max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert_same_greedy_tokens_up_to_a_bf16_tie(model, tokens, eager)


def assert_same_greedy_tokens_up_to_a_bf16_tie(model, tokens, expected):
    """The same greedy tokens, or the same up to a step where the model's logits for the two tokens chosen lie within
    two bf16 steps of the best: the compiled and the eager step add in another order, so a tie in bf16 may go
    either way, and the two continuations part there (the shipped model meets one at its 19th new token here). The
    logits are a full forward's, which adds in a third order (a prompt's rows are multiplied apart from a step's), so
    either token may be its best."""
    assert tokens.shape == expected.shape
    if torch.equal(tokens, expected):
        return
    step = int((tokens != expected)[0].nonzero()[0])
    assert torch.equal(tokens[:, :step], expected[:, :step])
    with torch.no_grad():
        logits = model(expected[:, :step]).logits[0, -1].float()
    best, ours, theirs = logits.max(), logits[tokens[0, step]], logits[expected[0, step]]
    for chosen in (ours, theirs):
        assert best - chosen <= 2 * torch.finfo(torch.bfloat16).eps * best.abs(), (step, best, ours, theirs)


@pytest.mark.parametrize("has_bf16", [False, True])
def test_a_bf16_load_on_a_cpu_without_bf16_instructions_warns_with_the_ways_out(tiny_folder, monkeypatch, has_bf16):
    monkeypatch.setattr("hf_tinygpt.model.pretrained.cpu_has_bf16_instructions", lambda: has_bf16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        AutoModelForCausalLM.from_pretrained(tiny_folder, dtype=torch.bfloat16)
        AutoModelForCausalLM.from_pretrained(tiny_folder)  # float32
        AutoModelForCausalLM.from_pretrained(  # int8 weights: int8 products
            tiny_folder, dtype=torch.bfloat16, quantization_config=int8_weight_only()
        )
    slow = [str(w.message) for w in caught if "without bf16 instructions" in str(w.message)]
    assert len(slow) == (0 if has_bf16 else 1)
    if slow:
        assert "dtype=torch.float32" in slow[0] and "int8_weight_only()" in slow[0] and "CompiledDecoder" in slow[0]
