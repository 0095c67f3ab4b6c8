"""Training data as token files: text tokenized once, streaming, into a folder that training memory-maps.

    FOLDER/tokens.bin   every token id, in order, as a raw little-endian array: uint16 where the tokenizer's ids fit
                        (up to 65,536 tokens: GPT-2's 50,257 do), else uint32
    FOLDER/tokens.json  what it holds: the tokenizer (its name and a sha256 of its full definition), the dtype, the
                        token count, and its sources (each file's resolved path, size and sha256, or a dataset's
                        fingerprint and the sha256 of its files), each source followed by the end-of-text token

The folder is an output of this tool (`folders/outputs.py`): written beside its place and renamed in whole, with
a manifest that proves it ours (the sha256 of tokens.bin among them). Token files made for a run are kept in a cache
(`$HF_TINYGPT_CACHE/tokens`, default `~/.cache/hf_tinygpt/tokens`) under a key of the tokenizer and the sources'
contents, so a later run on the same data reuses them, a changed source gets a new one, and every process of a
data-parallel run maps the same file. Names, sizes and times prove nothing (`cp -p` puts a time back): a run reads a
cached folder only after hashing its sources and its tokens.bin, checking that the folder was made from exactly those
sources, and tokenizing the start of the first one again to see the same ids (scripts/README.md measures the cost).
"""

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import pre_tokenizers
from tqdm.auto import tqdm

from ..folders.errors import needs_extra
from ..folders.outputs import output_folder, read_manifest, sha256_file, unproven
from ..folders.reading import refuse_what_is_not_a_file

TOKENS, INFO, KIND = "tokens.bin", "tokens.json", "tokens"
FORMAT = 2  # of tokens.json: a change of layout gets new cache keys (2: sources by sha256, not size and mtime)
_DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}
# How much text one tokenizer call gets: a file is read and tokenized this much at a time. Small, because after
# each call on 1 MiB glibc's malloc kept what the tokenizer had freed, so a large file's peak memory grew with its
# size; at 64 KiB it reuses them, and the calls cost no more in all (scripts/README.md, "Training data: memory and
# start-up").
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
        return _a_folder(Path(setting), "`TrainingSettings.data_cache`")
    if root := os.environ.get("HF_TINYGPT_CACHE"):
        return _a_folder(Path(root), "HF_TINYGPT_CACHE") / "tokens"
    home = os.environ.get("HOME", str(Path.home()))
    if not os.path.isabs(home):  # an empty HOME would put the cache under the working folder or `/`
        raise ValueError(
            f"HOME is {home!r}, not an absolute path, so there is no ~/.cache for tokenized data: set HOME, or "
            "HF_TINYGPT_CACHE, or `TrainingSettings.data_cache`"
        )
    return Path(home) / ".cache" / "hf_tinygpt" / "tokens"


def _a_folder(path: Path, what: str) -> Path:
    """`path`, where it is a folder or nothing yet; a file there is named (it would fail as "Not a directory")."""
    if os.path.lexists(path) and not path.is_dir():
        raise ValueError(f"{what} is {path}, which is a file, not a folder: give a folder for the token cache")
    return path


@dataclass
class TokenFile:
    folder: Path
    info: dict  # tokens.json
    tokens: np.ndarray  # memory-mapped, read-only
    sha256: str  # of tokens.bin, as its manifest records and a read checked

    def identity(self) -> dict:
        """What the tokens are made of, as a checkpoint records it: their sources (or dataset) and their sha256."""
        made_of = {key: self.info[key] for key in ("sources", "dataset") if key in self.info}
        return {**made_of, "tokens_sha256": self.sha256}


def pack(tokens, block_size: int, what: str = "the training data"):
    """(n_blocks, block_size) non-overlapping blocks, a view of `tokens` (a tensor or a memory-mapped array): block i
    is tokens[i * block_size : (i + 1) * block_size]. The ragged tail is dropped."""
    n_blocks = len(tokens) // block_size
    if n_blocks == 0:
        raise ValueError(
            f"{what}: {len(tokens)} token{'s' * (len(tokens) != 1)} do{'es' * (len(tokens) == 1)} not fill one block of "
            f"{block_size} (`block_size`)"
        )
    return tokens[: n_blocks * block_size].reshape(n_blocks, block_size)


# ---- writing ---------------------------------------------------------------------------------------------------


def _pieces_are_exact(tokenizer) -> bool:
    """Whether text cut before a newline or space that a letter or digit follows tokenizes, piece by piece, exactly
    as it does whole. True of GPT-2-style byte-level BPE: its pre-tokenizer always splits there (a whitespace run
    before a word ends a pre-token one character early; a leading space joins the word; no pattern looks back), and
    a call adds no token of its own. Other tokenizers get each file whole, as one call."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    pre = backend.pre_tokenizer  # its own settings, not the whole definition (megabytes of vocabulary) parsed again
    return (
        backend.normalizer is None
        and isinstance(pre, pre_tokenizers.ByteLevel)
        and pre.use_regex
        and not pre.add_prefix_space
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


def text_pieces(file: Path, piece_bytes: int | None = PIECE_BYTES, digest=None) -> Iterator[str]:
    """The text of `file`, in pieces of about `piece_bytes` cut where `_last_cut` says (None: whole). `digest` (a
    hashlib object) is fed every byte read, so that what was tokenized is what was hashed."""
    offset, rest = 0, b""
    with open(file, "rb") as f:
        while True:
            data = f.read(piece_bytes or -1)
            if digest is not None:
                digest.update(data)
            buffer = rest + data
            cut = _last_cut(buffer) if data and piece_bytes else len(buffer)
            piece, rest = buffer[:cut], buffer[cut:]
            try:
                yield piece.decode("utf-8")
            except UnicodeDecodeError as error:
                if (nul := piece.find(b"\0")) >= 0:  # rare in text of any 8-bit encoding; binary and UTF-16 hold many
                    nanogpt = " (nanoGPT's train.bin and val.bin hold token ids: give the text prepare.py read)"
                    raise ValueError(
                        f"{file} is not UTF-8 text (byte {offset + error.start}: {error.reason}; a NUL byte at "
                        f"{offset + nul}): a binary file, to leave out{nanogpt if file.suffix == '.bin' else ''}, or "
                        "UTF-16 text, to convert, e.g. with `iconv -f utf-16 -t utf-8`"
                    ) from None
                raise ValueError(
                    f"{file} is not UTF-8 text (byte {offset + error.start}: {error.reason}); convert it, e.g. with "
                    f"`iconv -f latin1 -t utf-8`, or leave it out"
                ) from None
            offset += cut
            if not data or not piece_bytes:
                return


def file_token_ids(
    files: Iterable[Path], tokenizer, progress: bool = False, sha256: list[str] | None = None
) -> Iterator[list[int]]:
    """The token ids of each file, a piece at a time, each file followed by the end-of-text token. With `sha256`
    (one per file), a file whose bytes as read differ from it (changed since it was hashed) is an error."""
    files = list(files)
    piece_bytes = PIECE_BYTES if _pieces_are_exact(tokenizer) else None
    total = sum(file.stat().st_size for file in files)
    off = {} if progress else {"disable": True}  # not `disable=False`, which would win over TQDM_DISABLE=1
    with tqdm(total=total, unit="B", unit_scale=True, desc="tokenizing", **off) as bar:
        for index, file in enumerate(files):
            digest = hashlib.sha256()
            for text in text_pieces(file, piece_bytes, digest):
                yield tokenizer(text, verbose=False).input_ids  # verbose: no warning that it exceeds the context
                bar.update(len(text.encode()))
            if sha256 is not None and digest.hexdigest() != sha256[index]:
                raise ValueError(f"{file} changed while it was being tokenized; nothing was kept: run again")
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
    list, every file (tokens.bin too: one read, a small part of a cached start: scripts/README.md, "Token cache:
    what proving its contents costs") the sha256 it was written with.
    With `tokenizer` (a `tokenizer_identity`), it must have been made with that tokenizer."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    problems = [f"{folder.name} is a symbolic link ({os.readlink(folder)})"] if folder.is_symlink() else []
    problems += unproven(folder)
    if manifest is not None and manifest.get("kind") != KIND:
        problems.append(f"a {manifest.get('kind')} folder, not tokens")
    if manifest is not None and (INFO not in manifest["files"] or TOKENS not in manifest["files"]):
        problems.append(f"no {INFO} and {TOKENS}")
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
    return TokenFile(folder, info, tokens, manifest["files"][TOKENS][-1]["sha256"])


# ---- the cache -------------------------------------------------------------------------------------------------


def _source(path: Path) -> dict:
    refuse_what_is_not_a_file(path)  # a FIFO would be read forever (the settings refuse one; it may come after)
    return {"path": str(path.resolve()), "size": path.stat().st_size, "sha256": sha256_file(path)}


def cached(cache: Path, info: dict, ids, first_ids=None) -> TokenFile:
    """The token folder for `info` (tokenizer and sources) in `cache`, written from `ids()` the first time. Runs
    that start on the same sources at once tokenize them once: the others wait for the first one's folder.

    A folder found there is used only when it is ours and whole (`read_token_folder`), was made from exactly these
    sources, and, with `first_ids()` (the ids the first source starts with, made again), starts with those ids:
    anything else (a folder swapped, linked or planted there) is refused by name."""
    key = {name: value for name, value in info.items() if name != "tokenizer"} | {
        "format": FORMAT,
        "tokenizer": {name: value for name, value in info["tokenizer"].items() if name != "name"},
    }
    folder = cache / hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    if not (folder.exists() or folder.is_symlink()):
        try:
            return write_token_folder(folder, ids(), info, wait=True)  # `ids()` is lazy: nothing runs while waiting
        except FileExistsError:
            if not folder.is_dir():
                raise
    found = read_token_folder(folder, info["tokenizer"])  # or why it cannot be used
    made_of = {name: found.info.get(name) for name in key if name not in ("format", "tokenizer")}
    asked = {name: info[name] for name in made_of}
    start = None if first_ids is None or made_of != asked else np.asarray(first_ids(), dtype=np.int64)
    if made_of != asked or (start is not None and not np.array_equal(found.tokens[: len(start)], start)):
        named = [source["path"] for source in found.info.get("sources", [])] or [str(found.info.get("dataset"))]
        raise ValueError(
            f"{folder}, the token cache of this data, holds other tokens (its {INFO} names {', '.join(named[:3])}"
            f"{'' if made_of != asked else ', but its ids are not those of the text'}): it was swapped, linked or "
            "planted there; delete it (it is made again)"
        )
    return found


def text_tokens(files: list[Path], tokenizer, tokenizer_name, cache: Path, progress: bool = True) -> TokenFile:
    """`files` as a token file: tokenized once, then reused until a file's contents or the tokenizer change."""
    sources = [_source(file) for file in files]
    info = {
        "tokenizer": tokenizer_identity(tokenizer, tokenizer_name),
        "eos": "after each source",
        "sources": sources,
        "documents": len(files),
    }
    sha256 = [source["sha256"] for source in sources]

    def first_ids():  # the first piece of the first file, which tokenizes as it does inside the whole text
        piece_bytes = PIECE_BYTES if _pieces_are_exact(tokenizer) else None
        if not files or (piece_bytes is None and files[0].stat().st_size > 16 * PIECE_BYTES):
            return []  # a tokenizer that takes files whole: only a small first file is tokenized again
        with contextlib.closing(text_pieces(files[0], piece_bytes)) as pieces:
            return tokenizer(next(pieces), verbose=False).input_ids

    return cached(cache, info, lambda: file_token_ids(files, tokenizer, progress, sha256), first_ids)


# ---- 🤗 datasets ------------------------------------------------------------------------------------------------


def load_text_dataset(dataset: str, config: str | None, split: str, text_column: str):
    """A `save_to_disk` folder (`datasets.load_from_disk`), or anything `datasets.load_dataset` takes (a Hub id, a
    folder of text/JSON/CSV/Parquet files), at `split`, checked to hold `text_column`."""
    try:
        import datasets
    except ImportError as error:
        raise needs_extra("datasets", error) from error
    saved = Path(dataset).is_dir() and any((Path(dataset) / n).is_file() for n in ("state.json", "dataset_dict.json"))
    if saved and config is not None:
        raise ValueError(
            f"`TrainingSettings.dataset_config` is a configuration of `load_dataset`, and {dataset} is a "
            "`save_to_disk` folder, which has none: leave `TrainingSettings.dataset_config` out"
        )
    if scripts := sorted(p.name for p in Path(dataset).glob("*.py")) if Path(dataset).is_dir() else []:
        raise ValueError(
            f"{dataset} (`TrainingSettings.dataset`) holds a loading script ({', '.join(scripts)}): hf-tinygpt never "
            "runs a dataset's code; give a `save_to_disk` folder or a folder of text/JSON/CSV/Parquet files"
        )
    try:
        loaded = datasets.load_from_disk(dataset) if saved else datasets.load_dataset(dataset, config, split=split)
    except RuntimeError as error:  # a Hub dataset that is a loading script
        if "scripts are no longer supported" not in str(error):
            raise
        raise ValueError(
            f"{dataset} (`TrainingSettings.dataset`) is a loading script ({error}): hf-tinygpt never runs a "
            "dataset's code; give a dataset of data files"
        ) from None
    except ValueError as error:  # load_dataset's: no such configuration or split
        if saved or (config is None and split == "train"):
            raise
        given = [f"`TrainingSettings.dataset_config` {config!r}"] * (config is not None)
        given += [f"`TrainingSettings.dataset_split` {split!r}"] * (split != "train")
        raise ValueError(f"the dataset {dataset} does not load with {' and '.join(given)}: {error}") from None
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
    feature = loaded.features[text_column]
    if not (isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string", "string_view")):
        raise ValueError(
            f"the dataset {dataset}'s column {text_column!r} (`TrainingSettings.text_column`) holds {feature}, not "
            f"text; its columns: {', '.join(loaded.column_names)}"
        )
    return loaded


def dataset_tokens(
    dataset: str, *, config: str | None, split: str, text_column: str, tokenizer, tokenizer_name, cache: Path
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
    text_column_of = loaded.select_columns([text_column])

    def first_ids():  # the first row and its end-of-text token
        if not loaded.num_rows:
            return []
        return [*tokenizer(text_column_of[0][text_column], verbose=False).input_ids, tokenizer.eos_token_id]

    def ids():
        import datasets

        eos, dtype = tokenizer.eos_token_id, token_dtype(len(tokenizer))

        def tokenize(batch, indices):
            if missing := [index for index, text in zip(indices, batch[text_column], strict=True) if text is None]:
                raise ValueError(
                    f"the dataset {dataset}'s column {text_column!r} (`TrainingSettings.text_column`) has no text "
                    f"in row {missing[0]}{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}"
                )
            return {"ids": [row + [eos] for row in tokenizer(batch[text_column], verbose=False).input_ids]}

        features = datasets.Features({"ids": datasets.List(datasets.Value(dtype.name))})
        with tempfile.TemporaryDirectory(prefix="hf-tinygpt-tokens-") as scratch:  # never beside the user's data
            mapped = loaded.map(
                tokenize,
                batched=True,
                with_indices=True,
                remove_columns=loaded.column_names,
                features=features,
                cache_file_name=str(Path(scratch) / "ids.arrow"),
                desc="tokenizing",
            )
            for batch in mapped.with_format("arrow").iter(batch_size=4096):  # the ids as one flat array, no copy
                yield batch.column("ids").combine_chunks().flatten().to_numpy()

    return cached(cache, info, ids, first_ids)


# ---- a run's data ------------------------------------------------------------------------------------------------


def stays_inside(glob) -> bool:
    """Whether `glob` is a pattern that matches only inside the folder it is applied to."""
    return isinstance(glob, str) and bool(glob) and not Path(glob).is_absolute() and ".." not in Path(glob).parts


def _file_identity(path) -> tuple:
    """The file itself, however it is named: a link, symbolic or hard, is the file it names (where the filesystem
    numbers its files: some network mounts give every file inode 0, and then its resolved path says)."""
    found = os.stat(path)
    return (found.st_dev, found.st_ino) if found.st_ino else (found.st_dev, str(Path(path).resolve()))


def text_files(paths: list[str], glob: str = "*.txt", exclude: list[Path] = (), what: str = "train") -> list[Path]:
    """Files named directly, plus those matching `glob` in named folders (sorted), less the held-out files of a
    folder (`exclude`); each file once. `what`: the setting that names `paths`, for the errors."""
    held_out = {_file_identity(p) for p in exclude}
    if not stays_inside(glob):
        raise ValueError(f"`glob` must be a pattern inside each folder of `paths`, such as '*.txt', got {glob!r}")
    files, named, all_held = [], {}, []
    for path in map(Path, paths):
        refuse_what_is_not_a_file(path)  # a FIFO would be read forever
        if path.is_dir():  # each file by its identity, taken once
            matching = {f: _file_identity(f) for f in sorted(path.glob(glob)) if f.is_file()}
            found = {f: identity for f, identity in matching.items() if identity not in held_out}
            if matching and not found:
                all_held.append(str(path))
        elif path.is_file():
            found = {path: _file_identity(path)}
            if found[path] in held_out:
                raise ValueError(
                    f"{path} is named by both `TrainingSettings.{what}` and `TrainingSettings.validation`: a file is "
                    "trained on or held out, not both"
                )
        else:
            raise FileNotFoundError(f"{path} (`TrainingSettings.{what}`): no such file or folder")
        for file, identity in found.items():
            if (twice := named.get(identity)) is not None:
                raise ValueError(
                    f"`TrainingSettings.{what}` names {file} twice (also as {twice}): its text would be read twice"
                )
            named[identity] = file
        files += found
    if not files and all_held:
        raise ValueError(
            f"every file of {', '.join(all_held)} (`TrainingSettings.{what}`) matching {glob!r} is held out by "
            "`TrainingSettings.validation`: none is left to train on; hold out files apart from these"
        )
    if not files:
        raise ValueError(f"no text files in {', '.join(paths)} (matching {glob!r})")
    return files


def _token_folder(paths: list[str], what: str, tokenizer, tokenizer_from) -> TokenFile | None:
    """The token folder that `paths` (`TrainingSettings.what`) names, made with the run's tokenizer; None: they are
    text files."""
    folders = [path for path in paths if is_token_folder(path)]
    if not folders:
        return None
    if len(paths) > 1:
        raise ValueError(f"`TrainingSettings.{what}`: a token folder ({folders[0]}) must be its only source")
    return read_token_folder(paths[0], tokenizer_identity(tokenizer, tokenizer_from), f"`TrainingSettings.{what}`")


def run_tokens(settings, tokenizer, tokenizer_from) -> tuple[TokenFile, str, TokenFile | None]:
    """A run's data as token files, from whichever source its settings name (`TrainingSettings.dataset`, a token
    folder, or text files, tokenized into the data cache the first time): the training tokens, how the card
    describes them, and the held-out tokens (None without `TrainingSettings.validation`). Held-out text is never
    trained on, under whatever name or form: a file, a copy of it, or a token folder made from it."""
    cache = cache_folder(settings.data_cache)
    validation = _validation_tokens(settings, tokenizer, tokenizer_from, cache)  # what the training data must not hold
    held = _texts_of(validation, settings.validation, "validation") if validation is not None else {}
    train, description = _training_tokens(settings, tokenizer, tokenizer_from, cache, held)
    if validation is not None and train.sha256 == validation.sha256:
        raise ValueError(
            f"{', '.join(settings.validation)} (`TrainingSettings.validation`) holds the same tokens as the training "
            f"data: {HELD_OUT_FIX}"
        )
    if holds_no_text(train):
        raise ValueError(
            f"the training data {', '.join(settings.train) or settings.dataset} is empty: nothing to train on"
        )
    return train, description, validation


# How every refusal of held-out text that would be trained on ends.
HELD_OUT_FIX = "held-out text must not be trained on; hold out other text"


def _texts_of(tokens: TokenFile, named: list[str], what: str) -> dict[str, tuple[int | None, str]]:
    """{what identifies a text: (bytes, name)} of the sources `tokens` were made from: each text file's sha256 (not
    an empty one's, which every empty file shares), or a dataset's fingerprint (the slices of a split share its
    files), each named as `TrainingSettings.what` (`named`) reads it: a token folder's with the folder."""
    folder = f"in the token folder {named[0]}, " if is_token_folder(named[0]) else ""
    texts = {
        source["sha256"]: (source["size"], f"{source['path']} ({folder}`TrainingSettings.{what}`)")
        for source in tokens.info.get("sources", [])
        if source["size"]
    }
    if dataset := tokens.info.get("dataset"):
        split = f"the {dataset['split']} split of {dataset['path']}"
        texts[f"dataset {dataset['fingerprint']}"] = (None, f"{split} ({folder}`TrainingSettings.{what}`)")
    return texts


def _training_tokens(settings, tokenizer, tokenizer_from, cache: Path, held: dict) -> tuple[TokenFile, str]:
    if settings.dataset:
        data = dataset_tokens(
            settings.dataset,
            config=settings.dataset_config,
            split=settings.dataset_split,
            text_column=settings.text_column,
            tokenizer=tokenizer,
            tokenizer_name=tokenizer_from,
            cache=cache,
        )
        _refuse_held_text(held, _texts_of(data, [settings.dataset], "dataset"))
        return data, f"the {settings.dataset_split} split of {settings.dataset} (column `{settings.text_column}`)"
    if data := _token_folder(settings.train, "train", tokenizer, tokenizer_from):
        _refuse_held_text(held, _texts_of(data, settings.train, "train"))
        return data, f"the token folder {settings.train[0]} ({data.info['tokens']:,} tokens)"
    files = text_files(settings.train, settings.glob, exclude=_held_out_files(settings))
    _refuse_copies_of(held, files)
    data = text_tokens(files, tokenizer, tokenizer_from, cache)
    glob = f", `{settings.glob}`" if any(Path(path).is_dir() for path in settings.train) else ""  # folders only
    return data, f"{len(files)} text file{'s' * (len(files) != 1)} ({', '.join(settings.train)}{glob})"


def _refuse_copies_of(held: dict[str, tuple[int | None, str]], files: list[Path]):
    """Refuse a training file with held-out text (its sha256, for the files of a held-out text's size: no more is
    read before the tokenizer runs)."""
    sizes = {size for size, _ in held.values() if size}
    alike = [file for file in files if file.stat().st_size in sizes]
    _refuse_held_text(held, {sha256_file(file): (0, f"{file} (`TrainingSettings.train`)") for file in alike})


def _refuse_held_text(held: dict[str, tuple[int | None, str]], trained: dict[str, tuple[int | None, str]]):
    """A ValueError naming a held-out text among the `trained` ones, each as `_texts_of` gives them."""
    for text, (_, name) in trained.items():
        if text in held:
            raise ValueError(f"{held[text][1]} holds the same text as {name}: {HELD_OUT_FIX}")


def _held_out_files(settings) -> list[Path]:
    """The text files of `TrainingSettings.validation` (none where it is empty or a token folder)."""
    if not settings.validation or any(is_token_folder(path) for path in settings.validation):
        return []
    return text_files(settings.validation, settings.glob, what="validation")


def _validation_tokens(settings, tokenizer, tokenizer_from, cache: Path) -> TokenFile | None:
    if not settings.validation:
        return None
    data = _token_folder(settings.validation, "validation", tokenizer, tokenizer_from) or text_tokens(
        _held_out_files(settings), tokenizer, tokenizer_from, cache
    )
    if holds_no_text(data):
        raise ValueError(f"validation data {', '.join(settings.validation)} is empty: nothing to measure perplexity on")
    return data


def holds_no_text(tokens: TokenFile) -> bool:
    """Whether `tokens` are nothing but the end-of-text token after each document: their text was empty."""
    return tokens.info["tokens"] <= tokens.info["documents"]
