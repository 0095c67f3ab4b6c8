"""The files that ship inside the package: OpenAI's GPT-2 tokenizer and the default (Shakespeare) model; and the
one way every verb loads a tokenizer."""

import gc
import hashlib
import json
import re
from pathlib import Path

from transformers import AutoTokenizer, GPT2TokenizerFast, TokenizersBackend

# The shipped model: a small RoPE TinyGPT trained on Shakespeare, a complete Hub model folder (its card is its
# README.md). Its tokenizer is OpenAI's GPT-2 BPE (vocab.json + merges.txt, TOKENIZER_SOURCE.md says whence), the
# one bundled tokenizer: nothing needs the network for it.
DEFAULT_MODEL_DIR = Path(__file__).resolve().parent.parent / "default_model"
GPT2_TOKENIZER_DIR = DEFAULT_MODEL_DIR
# What a tokenizer folder must hold for transformers to read a vocabulary from it: without these, AutoTokenizer
# builds a tokenizer with an empty vocabulary and says nothing.
VOCABULARY_FILES = (("tokenizer.json",), ("vocab.json", "merges.txt"), ("tokenizer.model",), ("vocab.txt",))
# Every file transformers may read from a tokenizer folder.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "tokenizer.model",
    "vocab.txt",
)


def gpt2_tokenizer() -> GPT2TokenizerFast:
    """The real GPT-2 tokenizer (50,257 tokens, eos `<|endoftext|>` = 50256) from the bundled files."""
    return GPT2TokenizerFast.from_pretrained(GPT2_TOKENIZER_DIR)


def load_tokenizer(tokenizer: str | Path, *, vocab_size: int | None = None, **hub_kwargs):
    """`"gpt2"` (or the bundled folder): the bundled GPT-2 tokenizer; otherwise a tokenizer folder or Hub id, read by
    transformers without running any code that came with it. A ValueError names what is wrong: no vocabulary files,
    files transformers cannot read, an empty vocabulary, a `model_max_length` that is no number of tokens, or (with
    `vocab_size`, the model's) token ids the model has no row for."""
    from .errors import first_line, hub_answer
    from .reading import cannot_be_a_hub_id, describe, read_json_object, refuse_foreign_code

    if str(tokenizer) in ("gpt2", str(GPT2_TOKENIZER_DIR)):
        loaded = gpt2_tokenizer()
    else:
        folder = Path(tokenizer)
        if folder.is_dir():
            if odd := [name for name in TOKENIZER_FILES if (folder / name).exists() and not (folder / name).is_file()]:
                raise ValueError(
                    f"{folder}: {', '.join(odd)} is not a regular file (a FIFO or device would hang or "
                    "feed the reader anything)"
                )
            if not any(all((folder / name).is_file() for name in names) for names in VOCABULARY_FILES):
                raise ValueError(
                    f"{folder}: no tokenizer files (tokenizer.json, or vocab.json + merges.txt): it is "
                    "not a tokenizer folder; pass `tokenizer='gpt2'` for the bundled GPT-2 tokenizer"
                )
            if (folder / "tokenizer_config.json").is_file():
                config = read_json_object(folder / "tokenizer_config.json")
                refuse_foreign_code(config, f"{folder}/tokenizer_config.json", tokenizer=True)
        elif folder.is_file():
            raise ValueError(f"{tokenizer} is a file: give the tokenizer folder that holds it")
        elif cannot_be_a_hub_id(str(tokenizer)):
            raise FileNotFoundError(f"{tokenizer}: no such tokenizer folder (nor a Hub id)")
        try:
            loaded = AutoTokenizer.from_pretrained(tokenizer, trust_remote_code=False, **hub_kwargs)
        except ImportError:
            raise
        except OSError as error:
            if folder.exists() or hub_answer(error) is not None:  # the Hub's answer is told as it stands
                raise
            raise OSError(
                f"{tokenizer}: no such tokenizer folder here, nor a Hub repo that could be read ({first_line(error)})"
            ) from error
        except Exception as error:
            raise ValueError(f"{tokenizer}: transformers cannot read this tokenizer ({describe(error)})") from error
        if holds_no_tokens(loaded):
            raise ValueError(f"{tokenizer}: the tokenizer's vocabulary is empty (no tokens but special ones)")
        longest = loaded.model_max_length  # compared to lengths; 1e30 (a float) stands for "no limit" in many files
        if isinstance(longest, bool) or not (isinstance(longest, (int, float)) and longest > 0):
            raise ValueError(
                f"{tokenizer}: the tokenizer's model_max_length is {loaded.model_max_length!r:.60}, not a number of "
                "tokens (tokenizer_config.json): fix it, or remove the field"
            )
    if vocab_size is not None and len(loaded) > vocab_size:
        raise ValueError(
            f"{tokenizer}: the tokenizer has {len(loaded):,} tokens, more than the model's vocabulary "
            f"({vocab_size:,} rows): some token ids would have no embedding"
        )
    return loaded


def holds_no_tokens(tokenizer) -> bool:
    """Whether `tokenizer`'s vocabulary holds no tokens but special ones: every text reads as no ids (transformers
    makes such a tokenizer of a GPT-2 folder without tokenizer files)."""
    return len(tokenizer.get_vocab()) - len(tokenizer.all_special_tokens) <= 0


def own_tokenizer(source: str | Path, *, vocab_size: int, **hub_kwargs):
    """The tokenizer a model folder or Hub repo carries (`load_tokenizer`, checked against the model's `vocab_size`
    and against the tokenizer its card says it was trained with), or None when it carries no tokenizer files (then
    GPT-2's reads its prompts: refused where its card records another)."""
    from .reading import has_tokenizer

    if not has_tokenizer(source, **hub_kwargs):
        check_trained_with(None, source, what="it has no tokenizer files, and GPT-2's", **hub_kwargs)
        return None
    tokenizer = load_tokenizer(source, vocab_size=vocab_size, **hub_kwargs)
    check_trained_with(tokenizer, source, **hub_kwargs)
    return tokenizer


# Texts whose ids tell tokenizers apart where their vocabularies agree: case, runs of spaces, tabs and new lines,
# digits, punctuation and characters beyond ASCII (a normalizer, pre-tokenizer, unknown-token or special-token rule).
PROBE_TEXTS = ("Hello, World!", " to be, or NOT to be:", "\n  1234 5.67 --", " naïve café", " 日本語 🙂", "\tend")


_HASHED: dict[tuple[bytes, str], str] = {}  # (sha256 of a backend's serialization, its probes' ids) → its hash


def tokenizer_sha256(tokenizer) -> str:
    """Which tokenizer this is, as a sha256 of what decides its ids: every token with its id, its BPE merges, and the
    ids it gives each of `PROBE_TEXTS` (special tokens and all; None for a text it cannot read, as a tokenizer
    without an unknown token cannot read characters it has no token for). It hashes that data, not a file or
    serialization, so the same tokenizer in another file layout, or read by another tokenizers version, hashes the
    same. A process hashes a tokenizer whose vocabulary is its backend's once, keyed by the backend's serialization and
    the probes' ids: the same key is the same data."""
    probes = []
    for text in PROBE_TEXTS:
        try:
            probes.append(tokenizer(text)["input_ids"])
        except Exception:  # tokenizers raises a bare Exception ("Missing [UNK] token")
            probes.append(None)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    definition = backend.to_str() if backend is not None else None
    if not _vocabulary_is_its_backends(tokenizer):
        return _sha256_of(tokenizer, definition, probes)
    # The backend's serialization holds every token and merge, so one seen before is hashed once per process (a run
    # from a model folder checks its tokenizer, then records it: 0.15 s each time for GPT-2's 50,000 merges).
    seen = (hashlib.sha256(definition.encode()).digest(), json.dumps(probes))
    if seen not in _HASHED:
        _HASHED[seen] = _sha256_of(tokenizer, definition, probes)
    return _HASHED[seen]


def _vocabulary_is_its_backends(tokenizer) -> bool:
    """Whether `get_vocab()` is transformers' own read of the tokenizers backend that `backend_tokenizer` returns."""
    return (
        isinstance(tokenizer, TokenizersBackend)
        and getattr(tokenizer.get_vocab, "__func__", None) is TokenizersBackend.get_vocab  # nor replaced on the object
        and type(tokenizer).backend_tokenizer is TokenizersBackend.backend_tokenizer
    )


def _sha256_of(tokenizer, definition: str | None, probes: list) -> str:
    """The hash of `tokenizer`'s vocabulary, the merges in its backend's serialization `definition`, and `probes`."""
    collecting = gc.isenabled()
    gc.disable()  # ~200,000 objects without cycles come and go here: a collection meanwhile walks the whole heap
    try:
        vocabulary = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
        merges = (json.loads(definition)["model"].get("merges") or []) if definition is not None else []
        merges = [merge.split(" ", 1) if isinstance(merge, str) else merge for merge in merges]  # "a b" or [a, b]
        return hashlib.sha256(json.dumps([vocabulary, merges, probes], ensure_ascii=False).encode()).hexdigest()
    finally:
        if collecting:
            gc.enable()


def check_trained_with(
    tokenizer,
    source: str | Path,
    *,
    what: str = "the tokenizer its files hold",
    fix: str = "put back the tokenizer files its training run wrote beside the weights",
    **hub_kwargs,
):
    """Refuse `tokenizer` (`what` names it, `fix` says what to do; None: GPT-2's) for the model at `source` when its
    card records another (`tinygpt.training.tokenizer_sha256`): its ids would be read as other tokens, with nothing
    to show for it."""
    from .model_card import recorded_training

    recorded = recorded_training(source, **hub_kwargs).get("tokenizer_sha256")
    if recorded is None:
        return
    if not (isinstance(recorded, str) and re.fullmatch(r"[0-9a-fA-F]{64}", recorded)):
        raise ValueError(
            f"{source}: its card's tinygpt.training.tokenizer_sha256 is {recorded!r:.80}, not the sha256 (64 hex "
            "digits) hf-tinygpt writes there: put back the value its training run wrote, or remove the field "
            "(its tokenizer is then not checked)"
        )
    if recorded.lower() != (actual := tokenizer_sha256(tokenizer or gpt2_tokenizer())):
        raise ValueError(
            f"{source}: {what} is not the tokenizer its weights were trained with (its card's "
            f"tinygpt.training.tokenizer_sha256 is {recorded[:12]}…, this one's {actual[:12]}…): {fix}"
        )
