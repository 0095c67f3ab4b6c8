"""hf_tinygpt: a small, exact GPT with a choice of position scheme, as a first-class transformers model.

Importing the package registers `model_type="tinygpt"` with AutoConfig, AutoModel and AutoModelForCausalLM.
"""

from pathlib import Path

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, GPT2TokenizerFast

from .configuration_tinygpt import POSITION_SCHEMES, TinyGPTConfig
from .modeling_tinygpt import TinyGPTForCausalLM, TinyGPTModel, TinyGPTPreTrainedModel
from .params import parameter_breakdown

# OpenAI's GPT-2 BPE files (vocab.json + merges.txt), bundled so that nothing needs the network.
GPT2_TOKENIZER_DIR = Path(__file__).parent / "tokenizer"
# The shipped model: a small learned-position TinyGPT trained on Shakespeare (card: model_cards/shakespeare.md).
# It uses the bundled GPT-2 tokenizer, so its folder holds only config, generation config and weights.
DEFAULT_MODEL_DIR = Path(__file__).parent / "default_model"


def gpt2_tokenizer() -> GPT2TokenizerFast:
    """The real GPT-2 tokenizer (50,257 tokens, eos `<|endoftext|>` = 50256) from the bundled files."""
    return GPT2TokenizerFast.from_pretrained(GPT2_TOKENIZER_DIR)

AutoConfig.register(TinyGPTConfig.model_type, TinyGPTConfig, exist_ok=True)
AutoModel.register(TinyGPTConfig, TinyGPTModel, exist_ok=True)
AutoModelForCausalLM.register(TinyGPTConfig, TinyGPTForCausalLM, exist_ok=True)

# `save_pretrained` then copies the config/modeling files next to the weights and writes `auto_map`, so a saved
# folder also loads with `trust_remote_code=True` where hf_tinygpt is not installed.
TinyGPTConfig.register_for_auto_class()
TinyGPTModel.register_for_auto_class("AutoModel")
TinyGPTForCausalLM.register_for_auto_class("AutoModelForCausalLM")

__all__ = [
    "DEFAULT_MODEL_DIR",
    "GPT2_TOKENIZER_DIR",
    "POSITION_SCHEMES",
    "TinyGPTConfig",
    "TinyGPTForCausalLM",
    "TinyGPTModel",
    "TinyGPTPreTrainedModel",
    "gpt2_tokenizer",
    "parameter_breakdown",
]
