"""TinyGPT where people run models: ONNX Runtime, vLLM (its CPU build), llama.cpp and trl, each installed from PyPI
into a venv of its own (engines pin their own transformers and torch); all judged against transformers on the same
model, and the README's blocks for them run as they stand. The engines' tier: `pytest -m engines` (torch.export, in
this venv, is in test_torch_export.py's slow tier).
scripts/bench/engines.py builds the venvs (once; they are kept under $HF_TINYGPT_ENGINE_VENVS, default
~/.cache/hf_tinygpt/engines) and scripts/bench/engine_worker.py runs inside them. An engine that cannot be installed
here is skipped with pip's reason, never silently."""

import ast
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPOSITORY, SCHEME_VARIANTS, readme_blocks, run_module, tiny_config
from transformers import AutoTokenizer

from hf_tinygpt import DEFAULT_MODEL_DIR, POSITION_SCHEME_CLASSES, TinyGPTConfig, TinyGPTForCausalLM, gpt2_tokenizer
from hf_tinygpt.convert.conversions import export_tinygpt
from hf_tinygpt.folders.reading import load_strictly
from scripts.bench import engines
from scripts.bench.engines import (
    HANG,
    LLAMA_CPP,
    WORKER_ENV,
    EngineUnavailable,
    convert_to_gguf,
    llama_cpp_engine,
    onnx_engine,
    run_worker,
    trl_engine,
    vllm_engine,
    worker_result,
    write_inputs,
)
from scripts.bench.speed_benchmark import EAGER_BF16_LEFT_OUT, eager_bf16_is_slow_here

pytestmark = pytest.mark.engines  # `pytest -m engines`: a tier of its own, for the venvs it builds


def installed(engine):
    """The engine's venv, built on first use; a test that needs an engine pip cannot install here is skipped."""
    try:
        return engine()
    except EngineUnavailable as unavailable:
        pytest.skip(str(unavailable))


def test_processes_that_ask_for_one_venv_at_once_build_it_once(tmp_path):
    """The tier runs a worker per core, and two of them may need an engine that is not built yet: one builds it while
    the other waits for it, instead of both building (and removing) the same venv."""
    script = (
        "import sys, time\n"
        "from scripts.bench.engines import engine_python\n"
        "def then(venv):\n"
        "    with open(sys.argv[1], 'a') as log:\n"
        "        log.write(f'built {venv.name}\\n')\n"
        "    time.sleep(2)\n"
        "print(engine_python('lock-test', then=then))\n"
    )
    env = {**os.environ, "HF_TINYGPT_ENGINE_VENVS": str(tmp_path / "venvs")}
    command = [sys.executable, "-c", script, str(tmp_path / "log")]
    both = [subprocess.Popen(command, cwd=REPOSITORY, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    pythons = [process.communicate(timeout=600)[0] for process in both]
    assert [process.returncode for process in both] == [0, 0] and pythons[0] == pythons[1]
    assert len((tmp_path / "log").read_text().splitlines()) == 1


def test_an_engine_pip_cannot_install_is_tried_once_in_a_test_run(tmp_path, monkeypatch):
    """Each worker of the tier asks for the engines it needs: where pip fails (which may take minutes), the run's
    other workers are given pip's reason instead of trying again; the next run, or the benchmark, tries again."""
    pips = []

    def run(command, **kwargs):
        if "pip" not in command:
            return subprocess.CompletedProcess(command, 0)  # `python -m venv`
        pips.append(command)
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found for no-such-engine")

    monkeypatch.setattr(engines, "VENVS", tmp_path)
    monkeypatch.setattr(engines.subprocess, "run", run)
    for test_run, tries in [("run-1", 1), ("run-1", 1), ("run-2", 2), (None, 3)]:
        if test_run:
            monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", test_run)
        else:
            monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID")
        with pytest.raises(EngineUnavailable, match="`pip install no-such-engine` fails here:\n.*No matching"):
            engines.engine_python("missing", "install no-such-engine")
        assert len(pips) == tries


# ---- ONNX Runtime ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def onnx_python():
    return installed(onnx_engine)


@pytest.mark.parametrize("variant", SCHEME_VARIANTS)
def test_onnx_runtime_gives_transformers_logits(tmp_path, onnx_python, variant):
    """torch.onnx.export (dynamo) of the saved folder, loaded through its own code, positions counted from each row's
    first real token (the README's recipe); ONNX Runtime's logits on a left-padded batch of another length than the
    export's example equal transformers' within 1e-4, on the padded row too, as if it came alone."""
    scheme, fields = SCHEME_VARIANTS[variant]
    torch.manual_seed(0)
    model = TinyGPTForCausalLM(tiny_config(scheme, initializer_range=0.2, **fields)).eval()
    model.save_pretrained(tmp_path / scheme)
    input_ids = torch.randint(0, model.config.vocab_size, (2, 11))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :4] = 0  # left padding
    inputs = write_inputs(tmp_path / "inputs.json", input_ids, attention_mask=attention_mask)
    if reason := POSITION_SCHEME_CLASSES[scheme].no_onnx:  # the exporter stops, naming the operator the reason names
        with pytest.raises(RuntimeError, match=f"No ONNX function found for .*{re.escape(reason.split()[-1])}"):
            worker_result(onnx_python, "onnx", tmp_path / scheme, tmp_path / "model.onnx", inputs)
        return
    result = worker_result(onnx_python, "onnx", tmp_path / scheme, tmp_path / "model.onnx", inputs)
    with torch.no_grad():
        expected = torch.cat([model(input_ids[:1]).logits[0], model(input_ids[1:, 4:]).logits[0]])
    real = attention_mask.bool()
    assert (torch.tensor(result["logits"])[real] - expected).abs().max() <= 1e-4


# ---- models the engines are given: head_dim 32 (vLLM's CPU attention takes 32..512), GPT-2's vocabulary -----------


def engine_model(scheme: str, seed: int = 0, **fields) -> TinyGPTForCausalLM:
    """Random weights, large enough (initializer_range 0.2) that greedy choices are clear: for rope, ≥ 0.044 between
    the two best logits at every step of the PROMPTS' continuations, far above the engines' differences (≤ 1e-3)."""
    torch.manual_seed(seed)
    config = TinyGPTConfig(
        position_embedding_type=scheme, n_embd=64, n_head=2, n_layer=2, n_positions=128, initializer_range=0.2, **fields
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
    """name → (folder, transformers' greedy tokens): the shipped model (rope) and small models of other schemes as saved TinyGPT
    folders (weights, their code, the tokenizer), and their exact twins exported by `hf-tinygpt convert --to`."""
    root = tmp_path_factory.mktemp("engines")
    models = {
        "shipped": load_strictly(DEFAULT_MODEL_DIR).float().eval(),
        "learned": engine_model("learned"),
        "xpos": engine_model("xpos"),  # rotations in our own attention module, which vLLM's backend calls
        "rope-nope-layers": engine_model("rope", no_rope_layer_interval=2),
        "sinusoidal": engine_model("sinusoidal", seed=1),  # seed 0's closest call, 0.0017, is near ggml's rounding
        "none": engine_model("none"),
    }
    made = {}
    for name, model in models.items():
        model.save_pretrained(root / name)
        gpt2_tokenizer().save_pretrained(root / name)
        made[name] = (root / name, greedy_tokens(model))
    for name, to in (("shipped", "gpt_neox"), ("learned", "gpt2"), ("sinusoidal", "gpt2"), ("none", "gpt2")):
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
        ("learned", "TransformersForCausalLM"),  # the folder's own code
        ("xpos", "TransformersForCausalLM"),
        ("rope-nope-layers", "TransformersForCausalLM"),
        ("shipped-gpt_neox", "GPTNeoXForCausalLM"),
        ("learned-gpt2", "GPT2LMHeadModel"),  # vLLM's native classes
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
    """vLLM's attention kernel takes no additive bias: an ALiBi TinyGPT fails when it is loaded, saying so. (T5,
    KERPLE, FIRE and CoPE refuse in the same place, `check_kernel`: tests/test_positions.py.)"""
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


@pytest.mark.parametrize("name", ["shipped-gpt_neox", "learned-gpt2", "sinusoidal-gpt2", "none-gpt2"])
def test_llama_cpp_generates_transformers_greedy_tokens(tmp_path, llama_cpp, folders, name):
    """export → llama.cpp's convert_hf_to_gguf.py (f32) → llama-cpp-python: transformers' greedy tokens, and logits
    within 1e-3 of their scale, max(1, max |logit|) (ggml's CPU GELU reads a 16-bit table, whose error grows with
    the activations: ~6e-4 of a scale of 7 for learned, 5.0e-3 for sinusoidal)."""
    folder, expected = folders[name]
    gguf = convert_to_gguf(llama_cpp, folder, tmp_path / "model.gguf", "f32")
    result = worker_result(llama_cpp[0], "llama_cpp", gguf, write_inputs(tmp_path / "inputs.json", PROMPTS, NEW_TOKENS))
    assert result["tokens"] == expected
    model = TinyGPTForCausalLM.from_pretrained(folders[name.split("-")[0]][0]).eval()
    for ids, logits in zip(PROMPTS, result["logits"], strict=True):
        with torch.no_grad():
            reference = model(torch.tensor([ids])).logits[0, -1]
        assert (torch.tensor(logits) - reference).abs().max() <= 1e-3 * max(1.0, reference.abs().max().item())


def test_speed_benchmark_times_llama_cpp_in_the_same_rounds(tmp_path, llama_cpp):
    """scripts/bench/speed_benchmark.py --llama-cpp on a tiny model: llama.cpp's batch-1 decode (f32 beside fp32, f16
    and q8_0 beside bf16 and int8) joins TinyGPT's rounds, with its own paired ratios and ceiling. No speed is
    asserted.

    Each timed llama.cpp run does what `generate` does, by llama.cpp's own count, or the script fails: the whole
    prompt, then one decoding step per further token. It did not always: llama-cpp-python reused the prompt it still
    had cached from the last run, and a step was spent on one token too many."""
    out = run_module(
        "bench.speed_benchmark", "--tiny", "--caches", "dynamic", "--llama-cpp", "--json", tmp_path / "speed.json"
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
    if eager_bf16_is_slow_here():  # no eager bf16 rows on this CPU, so no peers beside them: the run says why
        assert result["left_out"] == [EAGER_BF16_LEFT_OUT]
        available = {peer for peer in available if peer[0] != "bfloat16"}
    assert peers == available | {("int8", "tinygpt bfloat16")}  # int8 rows also set our bf16 beside
    assert "llama.cpp f16" in {name for _, name in peers}, result["llama_cpp_unavailable"]
    for row in result["rows"]:
        for peer in row.get("peers", {}).values():
            assert peer["tok_s"] > 0 and 0 < peer["of_ceiling"] and len(peer["paired_ratios"]) == 1
    assert "Decode beside peers in the same rounds" in out.stdout
    # Which llama.cpp, built for which instructions, is recorded and checked against this CPU: it ran here, so it
    # uses nothing this CPU lacks.
    build = result["llama_cpp_build"]
    assert build["version"] == LLAMA_CPP.split("==")[1] and build["system_info"].startswith("CPU")
    assert build["missing_here"] == [] and f"llama.cpp {build['version']}, built with" in out.stdout


# ---- the README's blocks for the engines, run as a user runs them ----------------------------------------------------


def readme_block(info: str) -> str:
    """The one README block fenced ```INFO: a block that disappears, or a second one that no test runs, fails."""
    blocks = readme_blocks(info)
    assert len(blocks) == 1, f"README.md should hold one ```{info} block, not {len(blocks)}"
    return blocks[0]


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory) -> Path:
    """The stand-in for the README's `my-tinygpt`: the shipped model in float32 with its tokenizer, saved as the
    README says (real text to continue, and 2 heads of 32, which vLLM's CPU attention takes)."""
    folder = tmp_path_factory.mktemp("readme") / "my-tinygpt"
    TinyGPTForCausalLM.from_pretrained(DEFAULT_MODEL_DIR, dtype=torch.float32).save_pretrained(folder)
    gpt2_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture
def user_folder(tmp_path, stand_in) -> Path:
    """A fresh folder holding a copy of the stand-in `my-tinygpt`, where a block runs."""
    shutil.copytree(stand_in, tmp_path / "my-tinygpt")
    return tmp_path


def run_block(command: list, block: str, folder: Path, **env) -> str:
    """`command` (an interpreter) on the block saved as a script in `folder`, from `folder`; what it printed."""
    script = folder / "readme_block.py"
    script.write_text(block)
    run = subprocess.run(
        [*map(str, command), script.name],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=HANG,
        stdin=subprocess.DEVNULL,  # a prompt (transformers asks before running remote code) fails rather than waits
        env={**os.environ, **WORKER_ENV, **env},
    )
    assert run.returncode == 0, f"the README block failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run.stdout


def printed_dicts(stdout: str) -> list[dict]:
    """The dicts a block printed, one a line (engines log to stdout too)."""
    return [ast.literal_eval(line) for line in stdout.splitlines() if line.startswith("{'prompt'")]


def transformers_greedy(folder: Path, prompt: str) -> tuple[list[int], str]:
    """transformers' greedy continuation of `prompt` (NEW_TOKENS tokens, as many as the README blocks ask for)."""
    model, tokenizer = TinyGPTForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    tokens = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)[0, ids.shape[1] :].tolist()
    return tokens, tokenizer.decode(tokens)


def test_readme_vllm_block_generates_transformers_greedy_text(user_folder, vllm_python):
    """The README's ```python vllm block, in vLLM's venv: for each prompt, transformers' greedy tokens and text."""
    printed = printed_dicts(run_block([vllm_python], readme_block("python vllm"), user_folder))
    assert printed
    for output in printed:
        assert (output["tokens"], output["text"]) == transformers_greedy(user_folder / "my-tinygpt", output["prompt"])


def test_readme_llama_cpp_blocks_generate_transformers_greedy_text(user_folder, llama_cpp):
    """The README's ```bash llama.cpp block (hf-tinygpt from this venv, `python` the llama.cpp venv's, and the
    llama-cpp-python source distribution unpacked beside, as the README says), then its ```python llama.cpp block:
    for each prompt, transformers' greedy text."""
    python, converter = llama_cpp
    sdist = converter.parents[2]  # llama_cpp_python-VERSION/vendor/llama.cpp/convert_hf_to_gguf.py
    (user_folder / sdist.name).symlink_to(sdist)
    path = os.pathsep.join([str(python.parent), str(Path(sys.executable).parent), os.environ["PATH"]])
    run_block(["bash", "-e"], readme_block("bash llama.cpp"), user_folder, PATH=path)
    printed = printed_dicts(run_block([python], readme_block("python llama.cpp"), user_folder))
    assert printed
    for output in printed:
        assert output["text"] == transformers_greedy(user_folder / "my-tinygpt", output["prompt"])[1]


def test_readme_onnx_block_gives_transformers_logits(user_folder, onnx_python):
    """The README's ```python onnx block, in a venv of torch, transformers and ONNX Runtime (no hf_tinygpt): ONNX
    Runtime's logits within 1e-4 of transformers', as the block prints, and each prompt's next token, from a
    left-padded batch, is the first greedy token of transformers here on the prompt alone."""
    stdout = run_block([onnx_python], readme_block("python onnx"), user_folder)
    (difference,) = [line for line in stdout.splitlines() if line.startswith("largest difference from transformers:")]
    assert float(difference.split(":")[1]) <= 1e-4
    printed = printed_dicts(stdout)
    assert printed
    for output in printed:
        assert output["next token"] == transformers_greedy(user_folder / "my-tinygpt", output["prompt"])[0][0]


@pytest.fixture(scope="module")
def trl_python():
    return installed(trl_engine)


def test_readme_trl_block_trains_a_lora_adapter(user_folder, trl_python):
    """The README's ```python trl block, in a venv of trl, peft, datasets and accelerate (no hf_tinygpt): SFTTrainer
    trains with a finite loss, and the adapter it saves loads onto the model here, with peft, trained (LoRA's B
    matrices start at zero and are not zero now)."""
    from peft import PeftModel

    stdout = run_block([trl_python], readme_block("python trl"), user_folder)
    (loss,) = [line for line in stdout.splitlines() if line.startswith("training loss:")]
    assert math.isfinite(float(loss.split(":")[1]))
    base = TinyGPTForCausalLM.from_pretrained(user_folder / "my-tinygpt")
    adapted = PeftModel.from_pretrained(base, user_folder / "my-lora")
    lora_b = {name: weight for name, weight in adapted.named_parameters() if "lora_B" in name}
    assert {name.split(".")[-4] for name in lora_b} == {"c_attn", "c_proj", "c_fc"}
    assert all(weight.abs().max() > 0 for weight in lora_b.values())
