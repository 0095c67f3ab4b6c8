"""hf_tinygpt: a small, exact GPT with a choice of position scheme, as a first-class transformers model.

Importing the package registers `model_type="tinygpt"` with AutoConfig, AutoModel and AutoModelForCausalLM.
"""

from .cli.start_up import start_the_command

start_the_command()  # first: the rest imports torch and transformers

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM  # noqa: E402

from .folders.bundled import DEFAULT_MODEL_DIR, GPT2_TOKENIZER_DIR, gpt2_tokenizer  # noqa: E402
from .model.configuration_tinygpt import TinyGPTConfig  # noqa: E402
from .model.modeling_tinygpt import TinyGPTForCausalLM, TinyGPTModel, TinyGPTPreTrainedModel  # noqa: E402
from .model.params import parameter_breakdown  # noqa: E402
from .model.positions import POSITION_SCHEME_CLASSES, PositionScheme, register_position_scheme  # noqa: E402

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
    "POSITION_SCHEME_CLASSES",
    "PositionScheme",
    "TinyGPTConfig",
    "TinyGPTForCausalLM",
    "TinyGPTModel",
    "TinyGPTPreTrainedModel",
    "gpt2_tokenizer",
    "parameter_breakdown",
    "register_position_scheme",
]
