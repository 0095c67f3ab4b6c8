"""hf_tinygpt: a small, exact GPT with a choice of position scheme, as a first-class transformers model.

Importing the package registers `model_type="tinygpt"` with AutoConfig, AutoModel and AutoModelForCausalLM.
"""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from .model.configuration_tinygpt import POSITION_SCHEMES, TinyGPTConfig
from .model.modeling_tinygpt import TinyGPTForCausalLM, TinyGPTModel, TinyGPTPreTrainedModel
from .model.params import parameter_breakdown
from .checkpoints.bundled import DEFAULT_MODEL_DIR, GPT2_TOKENIZER_DIR, gpt2_tokenizer

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
