"""Token files (hf_tinygpt/train/token_files.py): training data tokenized once, streaming, into `tokens.bin` (uint16
where the ids fit, else uint32) beside `tokens.json`, kept in a cache that later runs reuse while the sources and the
tokenizer stay the same, and memory-mapped by training, which reads only the blocks of each step. Text files, a token
folder, or a 🤗 dataset go in; the batches, losses and perplexities are those of the old in-memory packing."""

import fcntl
import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import HAMLET, TINY_RUN, run_module, tiny_model

from hf_tinygpt import gpt2_tokenizer
from hf_tinygpt.folders.outputs import MANIFEST, seal, unproven
from hf_tinygpt.train import token_files
from hf_tinygpt.train.data import tokenize_files
from hf_tinygpt.train.evaluate import perplexity
from hf_tinygpt.train.loop import batch_indices, read_blocks
from hf_tinygpt.train.token_files import (
    INFO,
    TOKENS,
    dataset_tokens,
    file_token_ids,
    pack,
    read_token_folder,
    text_tokens,
    token_dtype,
    tokenizer_identity,
    write_token_folder,
)

EOS = 50256


@pytest.fixture(scope="module")
def tokenizer():
    return gpt2_tokenizer()


@pytest.fixture
def texts(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("\n".join(f"Line {i}: to be, or not to be, that is the question." for i in range(80)))
    (folder / "b.txt").write_text("Whether 'tis nobler in the mind to suffer\n" * 50)
    return folder


def files_of(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.txt"))


# ---- what a token folder holds -------------------------------------------------------------------------------------


def test_ids_are_stored_as_uint16_while_every_id_fits_else_uint32(tmp_path):
    assert token_dtype(50257) == np.dtype("<u2") and token_dtype(2**16) == np.dtype("<u2")
    assert token_dtype(2**16 + 1) == np.dtype("<u4")
    big = {"name": "big", "sha256": "0" * 64, "vocab_size": 70_000, "eos_token_id": 0}
    made = write_token_folder(tmp_path / "big", [[69_999, 0]], {"tokenizer": big, "documents": 1})
    assert made.info["dtype"] == "uint32" and made.tokens.tolist() == [69_999, 0]
    assert (tmp_path / "big" / TOKENS).read_bytes() == np.array([69_999, 0], "<u4").tobytes()  # raw little-endian


def test_a_token_folder_holds_the_tokens_and_says_where_they_came_from(texts, tokenizer, tmp_path):
    files = files_of(texts)
    made = text_tokens(files, tokenizer, "gpt2", tmp_path / "cache")
    expected = tokenize_files(files, tokenizer)  # each file, then the end-of-text token
    assert isinstance(made.tokens, np.memmap) and made.tokens.dtype == np.uint16
    assert made.tokens.tolist() == expected.tolist()
    assert (made.folder / TOKENS).stat().st_size == 2 * len(expected)
    info = json.loads((made.folder / INFO).read_text())
    assert info["tokenizer"] == {
        "name": "gpt2",
        "sha256": tokenizer_identity(tokenizer, "gpt2")["sha256"],
        "vocab_size": 50257,
        "eos_token_id": EOS,
    }
    assert info["dtype"] == "uint16" and info["tokens"] == len(expected) and info["documents"] == 2
    assert info["eos"] == "after each source"
    assert info["sources"] == [
        {"path": str(f.resolve()), "size": f.stat().st_size, "sha256": hashlib.sha256(f.read_bytes()).hexdigest()}
        for f in files
    ]
    assert made.folder.parent == tmp_path / "cache" and not unproven(made.folder)  # an output of ours, proven


# ---- the cache: reused while nothing changed -----------------------------------------------------------------------


def test_a_second_run_on_the_same_files_reuses_their_token_file(texts, tokenizer, tmp_path, monkeypatch):
    first = text_tokens(files_of(texts), tokenizer, "gpt2", tmp_path / "cache")
    inode = (first.folder / TOKENS).stat().st_ino

    def no_tokenizing(*args, **kwargs):
        raise AssertionError("tokenized again")

    monkeypatch.setattr(token_files, "file_token_ids", no_tokenizing)
    again = text_tokens(files_of(texts), tokenizer, "the same tokenizer, elsewhere", tmp_path / "cache")
    assert again.folder == first.folder and (again.folder / TOKENS).stat().st_ino == inode
    assert again.tokens.tolist() == first.tokens.tolist()


def test_runs_started_at_once_on_the_same_files_tokenize_them_once(texts, tokenizer, tmp_path, monkeypatch):
    """A second run reaching the cache while the first still writes its token folder waits for it and reads it (it
    used to fail on the folder's lock), tokenizing nothing itself."""
    tokenizing, first_writing, second_at_lock, go_on = [], threading.Event(), threading.Event(), threading.Event()
    file_token_ids, flock = token_files.file_token_ids, fcntl.flock

    def first_run_held_mid_write(*args):
        tokenizing.append(threading.current_thread().name)
        first_writing.set()
        go_on.wait(timeout=120)  # holding the folder's lock, as a long tokenization does
        yield from file_token_ids(*args)

    def watched_flock(fd, operation):
        if threading.current_thread().name == "second":
            second_at_lock.set()
        return flock(fd, operation)

    monkeypatch.setattr(token_files, "file_token_ids", first_run_held_mid_write)
    monkeypatch.setattr(fcntl, "flock", watched_flock)
    made, failed = {}, {}

    def run():
        name = threading.current_thread().name
        try:
            made[name] = text_tokens(files_of(texts), tokenizer, "gpt2", tmp_path / "cache", progress=False)
        except Exception as error:
            failed[name] = error
        finally:
            if name == "second":
                second_at_lock.set()  # had it failed before reaching the lock, nothing would wait for it

    first = threading.Thread(target=run, name="first")
    first.start()
    first_writing.wait(timeout=120)
    second = threading.Thread(target=run, name="second")
    second.start()
    second_at_lock.wait(timeout=120)
    go_on.set()
    first.join()
    second.join()
    assert failed == {} and tokenizing == ["first"]
    assert made["second"].folder == made["first"].folder
    assert made["second"].tokens.tolist() == made["first"].tokens.tolist()


def test_a_changed_source_is_tokenized_again_into_a_new_token_file(texts, tokenizer, tmp_path):
    first = text_tokens(files_of(texts), tokenizer, "gpt2", tmp_path / "cache")
    with open(texts / "b.txt", "a") as f:
        f.write("Or to take arms against a sea of troubles\n")
    second = text_tokens(files_of(texts), tokenizer, "gpt2", tmp_path / "cache")
    assert second.folder != first.folder
    assert second.tokens.tolist() == tokenize_files(files_of(texts), tokenizer).tolist()
    assert len(second.tokens) > len(first.tokens)


def grown(folder: Path):
    with open(folder / TOKENS, "ab") as f:
        f.write(b"\0\0")


def stray_file(folder: Path):
    (folder / "notes.txt").write_text("mine")


def edited_info(folder: Path):
    info = json.loads((folder / INFO).read_text())
    (folder / INFO).write_text(json.dumps({**info, "tokens": info["tokens"] - 1}, indent=1) + "\n")


def no_manifest(folder: Path):
    (folder / MANIFEST).unlink()


@pytest.mark.parametrize("tamper", [grown, stray_file, edited_info, no_manifest])
def test_a_token_file_changed_since_it_was_written_is_not_trusted(tamper, texts, tokenizer, tmp_path):
    folder = text_tokens(files_of(texts), tokenizer, "gpt2", tmp_path / "cache").folder
    tamper(folder)
    with pytest.raises(ValueError, match=f"{folder} is not a token folder as hf-tinygpt wrote it"):
        text_tokens(files_of(texts), tokenizer, "gpt2", tmp_path / "cache")


# ---- the cache proves what it holds: contents, not names, sizes or times --------------------------------------------


@pytest.fixture
def corpora(tmp_path):
    """Two corpora of one size each, and their token folders in one cache."""
    first, second = tmp_path / "first", tmp_path / "second"
    for folder, line in ((first, "To be, or not to be"), (second, "Now is the winter")):
        folder.mkdir()
        (folder / "play.txt").write_text(f"{line}, that is the question.\n" * 40)
    made = [text_tokens(files_of(folder), gpt2_tokenizer(), "gpt2", tmp_path / "cache") for folder in (first, second)]
    return first, second, made[0].folder, made[1].folder


def test_token_folders_swapped_in_the_cache_are_refused_by_name(corpora, tokenizer, tmp_path):
    first, _, first_folder, second_folder = corpora
    first_folder.rename(tmp_path / "swap")
    second_folder.rename(first_folder)
    (tmp_path / "swap").rename(second_folder)
    with pytest.raises(ValueError, match=f"{first_folder}, the token cache of this data, holds other tokens"):
        text_tokens(files_of(first), tokenizer, "gpt2", tmp_path / "cache")


def test_a_cache_key_linked_to_another_corpus_folder_is_refused(corpora, tokenizer, tmp_path):
    first, _, first_folder, second_folder = corpora
    shutil.rmtree(first_folder)
    first_folder.symlink_to(second_folder)
    with pytest.raises(ValueError, match="is a symbolic link"):
        text_tokens(files_of(first), tokenizer, "gpt2", tmp_path / "cache")


def test_tokens_edited_in_place_at_their_size_are_refused(corpora, tokenizer, tmp_path):
    first, _, first_folder, _ = corpora
    with open(first_folder / TOKENS, "r+b") as f:
        f.seek(6)
        f.write(b"\x01\x00")
    with pytest.raises(ValueError, match=r"tokens\.bin \(changed since hf-tinygpt wrote it\)"):
        text_tokens(files_of(first), tokenizer, "gpt2", tmp_path / "cache")


def test_a_planted_folder_with_a_resealed_manifest_is_refused(corpora, tokenizer, tmp_path):
    """A folder that names the first corpus's sources and hashes, holding the second's tokens, manifest made anew."""
    first, _, first_folder, second_folder = corpora
    shutil.copyfile(second_folder / TOKENS, first_folder / TOKENS)
    info = json.loads((first_folder / INFO).read_text())
    info["tokens"] = (first_folder / TOKENS).stat().st_size // 2
    (first_folder / INFO).write_text(json.dumps(info, indent=1) + "\n")
    seal(first_folder, "tokens")
    with pytest.raises(ValueError, match="but its ids are not those of the text"):
        text_tokens(files_of(first), tokenizer, "gpt2", tmp_path / "cache")


def test_a_source_rewritten_with_its_size_and_time_put_back_is_tokenized_again(corpora, tokenizer, tmp_path):
    first, _, first_folder, _ = corpora
    play = first / "play.txt"
    before = play.stat()
    play.write_text(play.read_text().replace("question", "quaestio"[:8]))
    os.utime(play, ns=(before.st_atime_ns, before.st_mtime_ns))  # what `cp -p` and `rsync -t` do
    assert play.stat().st_size == before.st_size and play.stat().st_mtime_ns == before.st_mtime_ns
    again = text_tokens(files_of(first), tokenizer, "gpt2", tmp_path / "cache")
    assert again.folder != first_folder
    assert again.tokens.tolist() == tokenize_files(files_of(first), tokenizer).tolist()


def test_a_source_changed_while_it_is_tokenized_leaves_no_token_folder(texts, tokenizer, tmp_path, monkeypatch):
    hashed = token_files._source

    def then_changed(file):  # between the hash that keys the cache and the reading that tokenizes
        source = hashed(file)
        if file.name == "a.txt":
            file.write_text("something else entirely")
        return source

    monkeypatch.setattr(token_files, "_source", then_changed)
    with pytest.raises(ValueError, match="a.txt changed while it was being tokenized"):
        text_tokens(files_of(texts), tokenizer, "gpt2", tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*"))


@pytest.mark.parametrize("home", ["", "relative/home"])
def test_a_home_that_is_not_an_absolute_path_is_named_not_written_under(home, monkeypatch):
    monkeypatch.delenv("HF_TINYGPT_CACHE", raising=False)
    monkeypatch.setenv("HOME", home)
    with pytest.raises(ValueError, match=f"HOME is {home!r}, not an absolute path"):
        token_files.cache_folder()


# ---- streaming: a large file is tokenized in pieces, exactly as whole ----------------------------------------------


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_file_tokenized_in_pieces_gives_the_ids_of_the_whole_text(newline, tokenizer, tmp_path, monkeypatch):
    text = HAMLET.read_text().replace("\n", newline) + "  double  spaces,\ttabs\t\tand café ünïcödé 123 end"
    (tmp_path / "hamlet.txt").write_bytes(text.encode())
    monkeypatch.setattr(token_files, "PIECE_BYTES", 4096)  # about 50 pieces
    pieces = list(file_token_ids([tmp_path / "hamlet.txt"], tokenizer))
    assert len(pieces) > 40
    assert [i for ids in pieces for i in ids] == tokenizer(text).input_ids + [EOS]
    # Cut at the start of a line after a blank one instead, the text would tokenize differently ("\n\n" would end
    # the first piece as one token, where the whole text has "\n", "\n"): what the cuts avoid is real.
    plain = HAMLET.read_text()
    line_start = plain.index("\n\nby") + 2
    assert (
        tokenizer(plain[:line_start]).input_ids + tokenizer(plain[line_start:]).input_ids != tokenizer(plain).input_ids
    )


def test_only_byte_level_bpe_without_a_normalizer_is_cut_into_pieces():
    """GPT-2's tokenizer is; with a prefix space added, a pre-tokenizer of another kind or a normalizer, a file goes
    to the tokenizer whole."""
    from tokenizers import normalizers, pre_tokenizers

    def changed(**parts):
        changed = gpt2_tokenizer()
        for name, part in parts.items():
            setattr(changed.backend_tokenizer, name, part)
        return changed

    assert token_files._pieces_are_exact(gpt2_tokenizer())
    assert not token_files._pieces_are_exact(changed(pre_tokenizer=pre_tokenizers.ByteLevel(add_prefix_space=True)))
    assert not token_files._pieces_are_exact(changed(pre_tokenizer=pre_tokenizers.Whitespace()))
    assert not token_files._pieces_are_exact(changed(normalizer=normalizers.NFKC()))


def test_text_that_is_not_utf8_is_named_with_the_byte_where_it_fails(tmp_path, tokenizer, monkeypatch):
    (tmp_path / "latin1.txt").write_bytes(("to be or not to be\n" * 1000).encode() + "Ophélie".encode("latin-1"))
    monkeypatch.setattr(token_files, "PIECE_BYTES", 4096)  # the byte is counted from the start of the file
    with pytest.raises(ValueError, match=r"latin1.txt is not UTF-8 text \(byte 19003: invalid continuation byte\)"):
        text_tokens([tmp_path / "latin1.txt"], tokenizer, "gpt2", tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*"))  # nothing half-written is left


# ---- training reads the token file: the same batches as the old in-memory packing ---------------------------------


def test_batches_read_from_the_token_file_equal_the_in_memory_packing(texts, tokenizer, tmp_path):
    files = files_of(texts)
    in_memory = pack(tokenize_files(files, tokenizer), 16)  # what training held before token files
    mapped = pack(text_tokens(files, tokenizer, "gpt2", tmp_path / "cache").tokens, 16)
    assert len(mapped) == len(in_memory)
    for step in range(2 * len(in_memory) // 8):  # two epochs of 8-block batches
        indices = batch_indices(step, 8, len(mapped), seed=3)
        batch = read_blocks(mapped, indices)
        assert batch.dtype == torch.long and torch.equal(batch, in_memory[indices])


def test_perplexity_of_a_token_file_equals_that_of_its_tensor(texts, tokenizer, tmp_path):
    mapped = text_tokens(files_of(texts), tokenizer, "gpt2", tmp_path / "cache").tokens
    model = tiny_model(vocab_size=50257)
    assert perplexity(model, mapped, 32, batch_size=3) == perplexity(model, torch.from_numpy(mapped.astype(int)), 32, 3)


def losses(out: Path) -> list[float]:
    return [row["train_loss"] for row in json.loads((out / "summary.json").read_text())["history"]]


def test_a_token_folder_given_as_training_data_trains_like_its_text_files(texts, tmp_path, cli, monkeypatch):
    cache = tmp_path / "cache"
    first = cli("train", "--train", texts, "--data-cache", cache, *TINY_RUN, "--steps", 3, "--out", tmp_path / "a")
    assert first.returncode == 0, first.stderr[-2000:]
    [folder] = list(cache.iterdir())  # the run tokenized its text into the cache given
    again = cli("train", "--train", folder, *TINY_RUN, "--steps", 3, "--out", tmp_path / "b")
    assert again.returncode == 0, again.stderr[-2000:]
    assert losses(tmp_path / "b") == losses(tmp_path / "a")
    globbed = cli("train", "--train", folder, "--glob", "*.md", *TINY_RUN, "--out", tmp_path / "c")
    assert (
        globbed.returncode == 2
        and "error: --glob picks the files of --train and --validation folders" in globbed.stderr
    )


def test_a_token_folder_made_with_another_tokenizer_is_refused_by_name(texts, tokenizer, tmp_path, cli):
    folder = text_tokens(files_of(texts), tokenizer, "gpt2", tmp_path / "cache").folder
    other = gpt2_tokenizer()
    other.add_tokens(["<|scene|>"])
    other.save_pretrained(tmp_path / "other")
    run = cli("train", "--train", folder, "--tokenizer", tmp_path / "other", *TINY_RUN, "--out", tmp_path / "run")
    assert run.returncode == 2
    assert f"{folder} (--train) was tokenized with gpt2, not with the run's tokenizer" in run.stderr
    assert "(--tokenizer)" in run.stderr and not (tmp_path / "run").exists()


# ---- 🤗 datasets ---------------------------------------------------------------------------------------------------

ROWS = ["To be, or not to be: that is the question.", "", "Whether 'tis nobler in the mind to suffer"] * 30


@pytest.fixture
def datasets(tmp_path, monkeypatch):
    """datasets, offline, its cache in tmp_path."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_datasets"))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    return datasets


def expected_ids(tokenizer, rows) -> list[int]:
    return [i for row in rows for i in tokenizer(row).input_ids + [EOS]]


def split_tokens(dataset, split, tokenizer, tmp_path):
    """`dataset_tokens` of the dataset's `split`, its text column "text", cached in tmp_path/cache."""
    return dataset_tokens(
        str(dataset),
        config=None,
        split=split,
        text_column="text",
        tokenizer=tokenizer,
        tokenizer_name="gpt2",
        cache=tmp_path / "cache",
    )


def test_a_saved_dataset_is_tokenized_through_map_row_by_row(datasets, tokenizer, tmp_path):
    saved = tmp_path / "saved"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"text": ROWS, "n": list(range(len(ROWS)))}),
            "test": datasets.Dataset.from_dict({"text": ["held out"], "n": [0]}),
        }
    ).save_to_disk(saved)
    written = sorted(p.relative_to(saved) for p in saved.rglob("*"))
    made = split_tokens(saved, "train", tokenizer, tmp_path)
    assert made.tokens.tolist() == expected_ids(tokenizer, ROWS)
    assert made.info["eos"] == "after each row" and made.info["documents"] == len(ROWS)
    assert made.info["dataset"]["fingerprint"] and made.info["dataset"]["split"] == "train"
    assert sorted(p.relative_to(saved) for p in saved.rglob("*")) == written  # nothing written beside the data
    test = split_tokens(saved, "test", tokenizer, tmp_path)
    assert test.tokens.tolist() == expected_ids(tokenizer, ["held out"])
    again = split_tokens(saved, "train", tokenizer, tmp_path)
    assert again.folder == made.folder  # reused
    with pytest.raises(ValueError, match=r"no split 'validation' \(`TrainingSettings.dataset_split`\); its splits"):
        split_tokens(saved, "validation", tokenizer, tmp_path)


@pytest.mark.parametrize("file, content", [("rows.jsonl", "json"), ("rows.txt", "text")])
def test_load_dataset_sources_are_tokenized_like_saved_ones(file, content, datasets, tokenizer, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    rows = [row for row in ROWS if row]  # the text builder makes a row of each line
    if content == "json":
        (folder / file).write_text("".join(json.dumps({"text": row, "id": i}) + "\n" for i, row in enumerate(rows)))
    else:
        (folder / file).write_text("\n".join(rows) + "\n")
    made = split_tokens(folder, "train", tokenizer, tmp_path)
    assert made.tokens.tolist() == expected_ids(tokenizer, rows)


def test_a_dataset_split_trained_on_is_never_held_out_and_another_slice_of_it_may_be(datasets, tokenizer, tmp_path):
    """(Held out as a token folder made from the split it trained on, a dataset passed every check; and two slices of
    one split share that split's cache files, which must not make them one text.)"""
    from hf_tinygpt.train.settings import TrainingSettings

    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "rows.jsonl").write_text("".join(json.dumps({"text": row}) + "\n" for row in ROWS if row))

    def settings(split, held):
        cache = str(tmp_path / "cache")
        return TrainingSettings(
            out="run", dataset=str(folder), dataset_split=split, validation=[held], data_cache=cache
        )

    whole = split_tokens(folder, "train", tokenizer, tmp_path)
    with pytest.raises(ValueError, match="the train split of .* holds the same text as the train split of"):
        token_files.run_tokens(settings("train", str(whole.folder)), tokenizer, "gpt2")
    tail = split_tokens(folder, "train[90%:]", tokenizer, tmp_path)
    trained, _, held = token_files.run_tokens(settings("train[:90%]", str(tail.folder)), tokenizer, "gpt2")
    assert held.folder == tail.folder and trained.info["dataset"]["split"] == "train[:90%]"
    assert len(trained.tokens) + len(held.tokens) == len(whole.tokens)


def test_a_missing_text_column_is_named_with_the_columns_there_are(datasets, tmp_path, cli):
    datasets.Dataset.from_dict({"body": ROWS, "n": list(range(len(ROWS)))}).save_to_disk(tmp_path / "saved")
    run = cli("train", "--dataset", tmp_path / "saved", *TINY_RUN, "--out", tmp_path / "run")
    assert run.returncode == 2
    assert "has no column 'text' (--text-column); its columns: body, n" in run.stderr
    assert not (tmp_path / "run").exists()


def test_a_text_column_without_text_is_named(datasets, tokenizer, tmp_path):
    """(A column of numbers, or rows without text, failed inside the tokenizer: "text input must be of type str".)"""
    rows = {"text": ["To be", None, "or not", None], "n": [1, 2, 3, 4]}
    datasets.Dataset.from_dict(rows).save_to_disk(tmp_path / "saved")
    with pytest.raises(
        ValueError, match=r"column 'n' \(`TrainingSettings.text_column`\) holds Value\('int64'\), not t"
    ):
        dataset_tokens(
            str(tmp_path / "saved"),
            config=None,
            split="train",
            text_column="n",
            tokenizer=tokenizer,
            tokenizer_name="gpt2",
            cache=tmp_path / "cache",
        )
    with pytest.raises(
        ValueError, match=r"column 'text' \(`TrainingSettings.text_column`\) has no text in row 1 \(and 1"
    ):
        split_tokens(tmp_path / "saved", "train", tokenizer, tmp_path)


def test_train_from_a_dataset(datasets, tmp_path, cli):
    datasets.Dataset.from_dict({"body": ROWS}).save_to_disk(tmp_path / "saved")
    args = ["--dataset", tmp_path / "saved", "--text-column", "body", *TINY_RUN, "--steps", 3]
    run = cli("train", *args, "--out", tmp_path / "run")
    assert run.returncode == 0, run.stderr[-2000:]
    card = (tmp_path / "run" / "model" / "README.md").read_text()
    assert f"the train split of {tmp_path / 'saved'} (column `body`)" in card
    both = cli("train", *args, "--train", tmp_path / "saved", "--out", tmp_path / "both")
    assert both.returncode == 2 and "--train and --dataset are both set" in both.stderr


def test_a_dataset_folder_with_a_loading_script_is_refused_and_never_run(datasets, tmp_path, cli):
    (tmp_path / "scripted").mkdir()
    (tmp_path / "scripted" / "scripted.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w')\n")
    (tmp_path / "scripted" / "train.txt").write_text("to be\n")
    run = cli("train", "--dataset", tmp_path / "scripted", *TINY_RUN, "--out", tmp_path / "run")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "holds a loading script (scripted.py): hf-tinygpt never runs a dataset's code" in run.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--dataset", ""], "--dataset must be None or a non-empty string, got ''"),
        (["--dataset-config", "plain"], "--dataset-config is a configuration of `load_dataset`, and "),
    ],
)
def test_a_dataset_option_that_cannot_apply_is_named(option, message, datasets, tmp_path, cli):
    datasets.Dataset.from_dict({"text": ROWS}).save_to_disk(tmp_path / "saved")
    dataset = [] if option[0] == "--dataset" else ["--dataset", tmp_path / "saved"]
    run = cli("train", *dataset, *option, *TINY_RUN, "--out", tmp_path / "run")
    assert run.returncode == 2 and message in run.stderr and "wrong type" not in run.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "option",
    [
        ["--dataset-config", "plain"],
        ["--dataset-split", "test"],
        ["--text-column", "body"],
        ["--glob", "*.md"],
        ["--eval-every", "3"],
        ["--eval-batch-size", "7"],
        ["--validation-tokens", "50"],
    ],
)
def test_an_option_for_data_other_than_those_given_is_refused(option, texts, tmp_path, cli):
    """The dataset's options without `--dataset`, the held-out text's without `--validation` (they were ignored), a
    glob without a folder: an error, not ignored."""
    run = cli("train", "--train", texts / "a.txt", *option, *TINY_RUN, "--out", tmp_path / "run")
    assert run.returncode == 2 and f"error: {option[0]} " in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("option", "said"),
    [(["--dataset-split", "test"], 'Unknown split "test"'), (["--dataset-config", "plain"], "'plain' not found")],
)
def test_a_dataset_that_does_not_load_with_the_options_given_names_them(option, said, datasets, tmp_path, cli):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "rows.jsonl").write_text("".join(json.dumps({"text": row}) + "\n" for row in ROWS if row))
    run = cli("train", "--dataset", tmp_path / "data", *option, *TINY_RUN, "--out", tmp_path / "run")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    line = run.stderr.strip().splitlines()[-1]
    assert f"does not load with {option[0]} '{option[1]}': " in line and said in line  # only the option given
    assert not (tmp_path / "run").exists()


def test_the_cache_is_kept_where_hf_tinygpt_cache_says(texts, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("HF_TINYGPT_CACHE", str(tmp_path / "elsewhere"))
    run = cli("train", "--train", texts, *TINY_RUN, "--steps", 1, "--out", tmp_path / "run")
    assert run.returncode == 0, run.stderr[-2000:]
    [folder] = (tmp_path / "elsewhere" / "tokens").iterdir()
    assert read_token_folder(folder).info["documents"] == 2
    assert not (Path.home() / ".cache" / "hf_tinygpt" / "tokens" / folder.name).exists()
    assert os.environ["HF_TINYGPT_CACHE"] == str(tmp_path / "elsewhere")


# ---- the measurement -----------------------------------------------------------------------------------------------


@pytest.mark.bench
def test_data_benchmark_script_smoke(tmp_path):
    """scripts/bench/data_benchmark.py on one text repeated twice: first and cached runs, each in a fresh process."""
    out = run_module("bench.data_benchmark", "--repeat", 2, "--limit", 1, "--json", tmp_path / "result.json")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads((tmp_path / "result.json").read_text())["rows"]
    assert [(row["corpus"], row["run"]) for row in rows] == [
        ("as it is", "first (tokenizes)"),
        ("as it is", "second (cached)"),
        ("2×", "first (tokenizes)"),
        ("2×", "second (cached)"),
    ]
    assert rows[2]["files"] == 2 and all(row["wall_s"] > 0 and row["peak_rss"] > 0 for row in rows)


@pytest.mark.parametrize("where", ["--data-cache", "HF_TINYGPT_CACHE"])
def test_a_token_cache_that_is_a_file_is_named(where, texts, tmp_path, cli, monkeypatch):
    (tmp_path / "a-file").write_text("mine")
    option = ["--data-cache", tmp_path / "a-file"] if where == "--data-cache" else []
    if where == "HF_TINYGPT_CACHE":
        monkeypatch.setenv("HF_TINYGPT_CACHE", str(tmp_path / "a-file"))
    run = cli("train", "--train", texts, *option, *TINY_RUN, "--out", tmp_path / "run")
    assert run.returncode == 2
    assert f"{where} is {tmp_path / 'a-file'}, which is a file, not a folder" in run.stderr
    assert (tmp_path / "a-file").read_text() == "mine"
