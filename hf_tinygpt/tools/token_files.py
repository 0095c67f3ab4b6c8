"""Training data as token files: text tokenized once, streaming, into a folder that training memory-maps.

    FOLDER/tokens.bin   every token id, in order, as a raw little-endian array: uint16 where the tokenizer's ids fit
                        (up to 65,536 tokens: GPT-2's 50,257 do), else uint32
    FOLDER/tokens.json  what it holds: the tokenizer (its name and a sha256 of its full definition), the dtype, the
                        token count, and its sources (each file's resolved path, size and mtime, or a dataset's
                        fingerprint), each source followed by the end-of-text token

The folder is an output of this tool (`checkpoints/outputs.py`): written beside its place and renamed in whole, with
a manifest that proves it ours. Token files made for a run are kept in a cache (`$HF_TINYGPT_CACHE/tokens`, default
`~/.cache/hf_tinygpt/tokens`) under a key of the tokenizer and the sources as they are now, so a later run on the same
data reuses them, a changed source gets a new one, and every process of a data-parallel run maps the same file.
"""

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..checkpoints.outputs import output_folder, read_manifest, unproven
from . import needs_extra

TOKENS, INFO, KIND = "tokens.bin", "tokens.json", "tokens"
FORMAT = 1  # of tokens.json: a change of layout gets new cache keys
_DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}
# How much text one tokenizer call gets: a file is read and tokenized this much at a time. Small, because after
# each call on 1 MiB glibc's malloc kept ~40 MB that the tokenizer had freed (a 500 MB file peaked at 4 GB); at
# 64 KiB it reuses them, and the calls cost no more in all.
PIECE_BYTES = 1 << 16


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 where every id fits (vocab_size <= 65,536), else uint32: half the bytes for GPT-2-sized vocabularies."""
    return _DTYPES["uint16" if vocab_size <= 2**16 else "uint32"]


def tokenizer_identity(tokenizer, name) -> dict:
    """What makes two tokenizers give the same ids: a sha256 of the fast tokenizer's whole definition (vocabulary,
    merges, pre-tokenizer, added tokens), its size and end-of-text id. `name` is for people only: the same tokenizer
    saved in two folders is one identity."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    definition = backend.to_str() if backend is not None else json.dumps(tokenizer.get_vocab(), sort_keys=True)
    return {
        "name": str(name),
        "sha256": hashlib.sha256(definition.encode()).hexdigest(),
        "vocab_size": len(tokenizer),
        "eos_token_id": tokenizer.eos_token_id,
    }


def cache_folder(setting: str | None = None) -> Path:
    """Where token files are kept: `setting` (`TrainingSettings.data_cache`), else $HF_TINYGPT_CACHE/tokens, else
    ~/.cache/hf_tinygpt/tokens."""
    if setting is not None:
        return Path(setting)
    return Path(os.environ.get("HF_TINYGPT_CACHE") or Path.home() / ".cache" / "hf_tinygpt") / "tokens"


@dataclass
class TokenFile:
    folder: Path
    info: dict  # tokens.json
    tokens: np.ndarray  # memory-mapped, read-only


# ---- writing ---------------------------------------------------------------------------------------------------


def _pieces_are_exact(tokenizer) -> bool:
    """Whether text cut before a newline or space that a letter or digit follows tokenizes, piece by piece, exactly
    as it does whole. True of GPT-2-style byte-level BPE: its pre-tokenizer always splits there (a whitespace run
    before a word ends a pre-token one character early; a leading space joins the word; no pattern looks back), and
    a call adds no token of its own. Other tokenizers get each file whole, as one call."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    definition = json.loads(backend.to_str())
    pre = definition.get("pre_tokenizer") or {}
    return (
        definition.get("normalizer") is None
        and pre.get("type") == "ByteLevel"
        and pre.get("use_regex", True)
        and not pre.get("add_prefix_space")
        and tokenizer("a").input_ids == tokenizer("a", add_special_tokens=False).input_ids
    )


def _last_cut(data: bytes) -> int:
    """The last place in `data` just before a newline or space that an ASCII letter or digit follows; 0 if none.
    (An ASCII byte never sits inside a UTF-8 sequence, so both sides decode on their own.)"""
    at = len(data) - 1
    while (at := max(data.rfind(b"\n", 0, at), data.rfind(b" ", 0, at))) > 0:
        if data[at + 1 : at + 2].isalnum():
            return at
    return 0


def text_pieces(file: Path, piece_bytes: int | None = PIECE_BYTES) -> Iterator[str]:
    """The text of `file`, in pieces of about `piece_bytes` cut where `_last_cut` says (None: whole)."""
    offset, rest = 0, b""
    with open(file, "rb") as f:
        while True:
            data = f.read(piece_bytes or -1)
            buffer = rest + data
            cut = _last_cut(buffer) if data and piece_bytes else len(buffer)
            piece, rest = buffer[:cut], buffer[cut:]
            try:
                yield piece.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"{file} is not UTF-8 text (byte {offset + error.start}: {error.reason}); convert it, e.g. with "
                    f"`iconv -f latin1 -t utf-8`, or leave it out"
                ) from None
            offset += cut
            if not data or not piece_bytes:
                return


def file_token_ids(files: Iterable[Path], tokenizer, progress: bool = False) -> Iterator[list[int]]:
    """The token ids of each file, a piece at a time, each file followed by the end-of-text token."""
    files = list(files)
    piece_bytes = PIECE_BYTES if _pieces_are_exact(tokenizer) else None
    total = sum(file.stat().st_size for file in files)
    with tqdm(total=total, unit="B", unit_scale=True, desc="tokenizing", disable=not progress) as bar:
        for file in files:
            for text in text_pieces(file, piece_bytes):
                yield tokenizer(text, verbose=False).input_ids  # verbose: no warning that it exceeds the context
                bar.update(len(text.encode()))
            yield [tokenizer.eos_token_id]


def write_token_folder(out, ids: Iterable, info: dict, *, force: bool = False, wait: bool = False) -> TokenFile:
    """Write OUT (a token folder) from `ids` (lists or arrays of token ids, in order), streaming, atomically.
    `info` (tokens.json) names the tokenizer, the sources and how many `documents` (each followed by the end-of-text
    token) they hold; the dtype and the token count are added here. `wait`: see `output_folder`."""
    dtype = token_dtype(info["tokenizer"]["vocab_size"])
    tokens = 0
    with output_folder(out, force=force, kind=KIND, wait=wait) as staging:
        with open(staging / TOKENS, "wb") as f:
            for chunk in ids:
                array = np.asarray(chunk, dtype=dtype)  # an id that does not fit raises (numpy >= 2)
                f.write(array.tobytes())
                tokens += len(array)
        info = {**info, "dtype": dtype.name, "tokens": tokens}
        (staging / INFO).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return read_token_folder(out)


# ---- reading ---------------------------------------------------------------------------------------------------


def is_token_folder(path) -> bool:
    manifest = read_manifest(Path(path)) if Path(path).is_dir() else None
    return manifest is not None and manifest.get("kind") == KIND


def read_token_folder(folder, tokenizer: dict | None = None, what: str = "`TrainingSettings.train`") -> TokenFile:
    """A token folder, its tokens memory-mapped, once proven ours and whole: nothing in it the manifest does not
    list, every file the size it was written at, tokens.json unchanged. (tokens.bin is not hashed: that would read
    every byte at each start; a file cut short, grown or swapped for another shows in its size.)
    With `tokenizer` (a `tokenizer_identity`), it must have been made with that tokenizer."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    problems = unproven(folder, contents=False)
    if manifest is not None and manifest.get("kind") != KIND:
        problems.append(f"a {manifest.get('kind')} folder, not tokens")
    for name, versions in (manifest or {}).get("files", {}).items():
        path, recorded = folder / name, versions[-1]
        if not path.is_file() or path.stat().st_size != recorded.get("size"):
            problems.append(f"{name} (changed since hf-tinygpt wrote it)")
        elif name == INFO and hashlib.sha256(path.read_bytes()).hexdigest() != recorded.get("sha256"):
            problems.append(f"{name} (changed since hf-tinygpt wrote it)")
    if problems:
        raise ValueError(
            f"{folder} is not a token folder as hf-tinygpt wrote it: {', '.join(problems[:5])}; delete it (a token "
            f"cache is made again) or give another"
        )
    info = json.loads((folder / INFO).read_text(encoding="utf-8"))
    if tokenizer is not None:
        made_with = info["tokenizer"]
        if (made_with["sha256"], made_with["eos_token_id"]) != (tokenizer["sha256"], tokenizer["eos_token_id"]):
            raise ValueError(
                f"{folder} ({what}) was tokenized with {made_with['name']}, not with the run's tokenizer "
                f"{tokenizer['name']} (`TrainingSettings.tokenizer`): train with that tokenizer or tokenize again"
            )
    dtype = _DTYPES[info["dtype"]]
    if (folder / TOKENS).stat().st_size != info["tokens"] * dtype.itemsize:
        raise ValueError(f"{folder}: {TOKENS} does not hold the {info['tokens']} tokens {INFO} says")
    tokens = np.memmap(folder / TOKENS, dtype=dtype, mode="r") if info["tokens"] else np.zeros(0, dtype)
    return TokenFile(folder, info, tokens)


# ---- the cache -------------------------------------------------------------------------------------------------


def _source(path: Path) -> dict:
    status = path.stat()
    return {"path": str(path.resolve()), "size": status.st_size, "mtime_ns": status.st_mtime_ns}


def cached(cache: Path, info: dict, ids) -> TokenFile:
    """The token folder for `info` (tokenizer and sources) in `cache`, written from `ids()` the first time. Runs
    that start on the same sources at once tokenize them once: the others wait for the first one's folder."""
    key = {name: value for name, value in info.items() if name != "tokenizer"} | {
        "format": FORMAT,
        "tokenizer": {name: value for name, value in info["tokenizer"].items() if name != "name"},
    }
    folder = cache / hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    if not folder.exists():
        try:
            return write_token_folder(folder, ids(), info, wait=True)  # `ids()` is lazy: nothing runs while waiting
        except FileExistsError:
            if not folder.is_dir():
                raise
    return read_token_folder(folder, info["tokenizer"])  # or why it cannot be used


def text_tokens(files: list[Path], tokenizer, tokenizer_name, cache: Path, progress: bool = True) -> TokenFile:
    """`files` as a token file: tokenized once, then reused until a file or the tokenizer changes."""
    info = {
        "tokenizer": tokenizer_identity(tokenizer, tokenizer_name),
        "eos": "after each source",
        "sources": [_source(file) for file in files],
        "documents": len(files),
    }
    return cached(cache, info, lambda: file_token_ids(files, tokenizer, progress))


# ---- 🤗 datasets ------------------------------------------------------------------------------------------------


def load_text_dataset(dataset: str, config: str | None, split: str, text_column: str):
    """A `save_to_disk` folder (`datasets.load_from_disk`), or anything `datasets.load_dataset` takes (a Hub id, a
    folder of text/JSON/CSV/Parquet files), at `split`, checked to hold `text_column`."""
    try:
        import datasets
    except ImportError as error:
        raise needs_extra("datasets", error) from error
    saved = Path(dataset).is_dir() and any((Path(dataset) / n).is_file() for n in ("state.json", "dataset_dict.json"))
    loaded = datasets.load_from_disk(dataset) if saved else datasets.load_dataset(dataset, config, split=split)
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise ValueError(
                f"the dataset {dataset} has no split {split!r} (`TrainingSettings.dataset_split`); its splits: "
                f"{', '.join(loaded)}"
            )
        loaded = loaded[split]
    if text_column not in loaded.column_names:
        raise ValueError(
            f"the dataset {dataset} has no column {text_column!r} (`TrainingSettings.text_column`); its columns: "
            f"{', '.join(loaded.column_names)}"
        )
    return loaded


def dataset_tokens(
    dataset: str, config: str | None, split: str, text_column: str, tokenizer, tokenizer_name, cache: Path
) -> TokenFile:
    """A dataset's text column as a token file, each row followed by the end-of-text token: tokenized through
    `Dataset.map` (batched), then written out; reused while the dataset's fingerprint and files stay the same."""
    loaded = load_text_dataset(dataset, config, split, text_column)
    info = {
        "tokenizer": tokenizer_identity(tokenizer, tokenizer_name),
        "eos": "after each row",
        "dataset": {
            "path": dataset,
            "config": config,
            "split": split,
            "text_column": text_column,
            "fingerprint": loaded._fingerprint,  # datasets' own hash of the data and its transforms
            "files": [_source(Path(f["filename"])) for f in loaded.cache_files],
        },
        "documents": loaded.num_rows,
    }

    def ids():
        import datasets

        eos, dtype = tokenizer.eos_token_id, token_dtype(len(tokenizer))

        def tokenize(batch):
            return {"ids": [row + [eos] for row in tokenizer(batch[text_column], verbose=False).input_ids]}

        features = datasets.Features({"ids": datasets.List(datasets.Value(dtype.name))})
        with tempfile.TemporaryDirectory(prefix="hf-tinygpt-tokens-") as scratch:  # never beside the user's data
            mapped = loaded.map(
                tokenize,
                batched=True,
                remove_columns=loaded.column_names,
                features=features,
                cache_file_name=str(Path(scratch) / "ids.arrow"),
                desc="tokenizing",
            )
            for batch in mapped.with_format("arrow").iter(batch_size=4096):  # the ids as one flat array, no copy
                yield batch.column("ids").combine_chunks().flatten().to_numpy()

    return cached(cache, info, ids)
