"""Shared fixtures: tiny random models. Everything here runs offline on a CPU in seconds."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the tests never touch the network; fail fast if anything tries

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from hf_tinygpt import POSITION_SCHEMES, TinyGPTConfig, TinyGPTForCausalLM

VOCAB = 211  # small vocabularies keep the tests fast; token ids 0..210, eos = 0


def tiny_config(scheme="learned", **overrides) -> TinyGPTConfig:
    fields = dict(
        vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, position_embedding_type=scheme,
    )  # fmt: skip
    return TinyGPTConfig(**{**fields, **overrides})


def tiny_model(scheme="learned", seed=0, **overrides) -> TinyGPTForCausalLM:
    torch.manual_seed(seed)
    return TinyGPTForCausalLM(tiny_config(scheme, **overrides)).eval()


def random_gpt2(seed=0, **overrides) -> GPT2LMHeadModel:
    """transformers' own GPT-2 with random weights: the reference every parity test compares against."""
    fields = dict(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(**{**fields, **overrides})).eval()


@pytest.fixture(params=POSITION_SCHEMES)
def scheme(request):
    return request.param


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(1234)
