"""The files that ship inside the package: OpenAI's GPT-2 tokenizer and the default (Shakespeare) model."""

from pathlib import Path

from transformers import AutoTokenizer, GPT2TokenizerFast

# OpenAI's GPT-2 BPE files (vocab.json + merges.txt), bundled so that nothing needs the network.
GPT2_TOKENIZER_DIR = Path(__file__).resolve().parent.parent / "tokenizer"
# The shipped model: a small learned-position TinyGPT trained on Shakespeare (card: model_cards/shakespeare.md).
# It uses the bundled GPT-2 tokenizer, so its folder holds only config, generation config and weights.
DEFAULT_MODEL_DIR = Path(__file__).resolve().parent.parent / "default_model"


def gpt2_tokenizer() -> GPT2TokenizerFast:
    """The real GPT-2 tokenizer (50,257 tokens, eos `<|endoftext|>` = 50256) from the bundled files."""
    return GPT2TokenizerFast.from_pretrained(GPT2_TOKENIZER_DIR)


def load_tokenizer(tokenizer: str | Path, **hub_kwargs):
    """`"gpt2"` (or the bundled folder): the bundled GPT-2 tokenizer; otherwise a tokenizer folder or Hub id."""
    if str(tokenizer) in ("gpt2", str(GPT2_TOKENIZER_DIR)):
        return gpt2_tokenizer()
    return AutoTokenizer.from_pretrained(tokenizer, **hub_kwargs)
