"""Shared fixtures: tiny random models. Everything here runs offline on a CPU in seconds."""

import ast
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the tests never touch the network; fail fast if anything tries

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from hf_tinygpt import POSITION_SCHEMES, TinyGPTConfig, TinyGPTForCausalLM

# The development tools (benchmarks, the extrapolation study) live beside the scripts that run them, not in the package.
SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))

# transformers' own model test suite, used by test_transformers_suite.py (never copied into this repository).
TRANSFORMERS_SUITE = Path(
    os.environ.get(
        "HF_TINYGPT_TRANSFORMERS_TESTS", Path(__file__).resolve().parents[2] / "shared" / "transformers-tests"
    )
)


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


def random_gpt2(seed=0, **overrides) -> GPT2LMHeadModel:
    """transformers' own GPT-2 with random weights: the reference every parity test compares against."""
    fields = dict(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(**{**fields, **overrides})).eval()


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
    """The environment of a fresh interpreter that sees only the loopback Hub (no HF_* settings of ours leak in)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "TRANSFORMERS_"))}
    return env | {
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(tmp_path / "hf_home"),
        "HF_HUB_CACHE": str(tmp_path / "hf_cache"),
        **extra,
    }


def run_cli(capsys, *args) -> tuple[int, str]:
    """`hf-tinygpt ARGS` in this process (the same `main` the console script runs): (exit code, what it printed:
    stdout, then stderr)."""
    from hf_tinygpt.cli import main

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

    from hf_tinygpt.cli import main

    def run(*args):
        code = main([str(arg) for arg in args])
        printed = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=printed.out, stderr=printed.err)

    return run


@pytest.fixture(params=POSITION_SCHEMES)
def scheme(request):
    return request.param


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(1234)
