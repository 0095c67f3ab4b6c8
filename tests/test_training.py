"""Training from scratch: the data (text files, a held-out file, reproducible block order), and runs, one process or
data-parallel (which equals one process), whose result is a complete model folder with a card that states the
measured validation perplexity. Ctrl-C and `--resume` are in test_resume.py; a bad flag or input, named in one line,
in test_cli_errors.py."""

import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import textwrap
import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch
from conftest import EVALUATED_EVERY_5, TINY_RUN, TINY_TRAINING, every_scheme, random_gpt2, tiny_model, word_tokenizer
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from tokenizers import normalizers

from hf_tinygpt import TinyGPTForCausalLM, gpt2_tokenizer
from hf_tinygpt.folders.bundled import load_tokenizer, tokenizer_sha256
from hf_tinygpt.folders.outputs import unproven
from hf_tinygpt.folders.training_history import LOSS_CURVE, TRAINING_HISTORY, loss_curve_png
from hf_tinygpt.train.data import tokenize_files, warn_of_what_is_not_learned
from hf_tinygpt.train.evaluate import perplexity
from hf_tinygpt.train.loop import batch_indices, train
from hf_tinygpt.train.settings import TrainingSettings
from hf_tinygpt.train.token_files import pack, run_tokens, text_files, text_tokens


def train_cli(*args, cwd=None, **popen):
    command = [sys.executable, "-m", "hf_tinygpt.cli", "train", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, **popen)


# ---- data ----------------------------------------------------------------------------------------------------


def test_text_files_hold_out_validation_and_follow_the_glob(plays):
    files = text_files([str(plays)], "*.txt", exclude=[str(plays / "held_out.txt")])
    assert [f.name for f in files] == ["a_play.txt", "b_play.txt"]
    with pytest.raises(FileNotFoundError, match=r"nowhere \(`TrainingSettings.validation`\): no such file or folder"):
        text_files([str(plays / "nowhere")], what="validation")
    with pytest.raises(ValueError, match="no text files"):
        text_files([str(plays)], "*.csv")


def test_a_text_file_is_read_once_and_is_trained_on_or_held_out(plays):
    with pytest.raises(ValueError, match=r"`TrainingSettings.train` names .*a_play.txt twice \(also as .*a_play.txt\)"):
        text_files([str(plays), str(plays / "a_play.txt")])
    with pytest.raises(ValueError, match="named by both `TrainingSettings.train` and `TrainingSettings.validation`"):
        text_files([str(plays / "a_play.txt")], exclude=[plays / "a_play.txt"])


def test_a_training_folder_whose_every_file_is_held_out_says_so(plays, tmp_path, cli):
    """(`--train data --validation data` said "no text files in data", of a folder full of them.)"""
    every = [plays / name for name in ("a_play.txt", "b_play.txt", "held_out.txt")]
    with pytest.raises(
        ValueError, match=r"every file of .* \(`TrainingSettings.train`\) matching '\*.txt' is held out"
    ):
        text_files([str(plays)], exclude=every)
    (tmp_path / "more").mkdir()  # another training folder: its text is trained on
    (tmp_path / "more" / "more.txt").write_text("more text")
    assert text_files([str(plays), str(tmp_path / "more")], exclude=every) == [tmp_path / "more" / "more.txt"]
    run = cli("train", "--train", plays, "--validation", plays, *TINY_RUN, "--steps", 1, "--out", tmp_path / "run")
    assert run.returncode == 2 and "(--train) matching '*.txt' is held out by --validation: none is left" in run.stderr


def test_held_out_text_is_never_trained_on_under_another_name(plays, tmp_path):
    """(A hard link to a training file, or a copy of it, was taken as held-out text: the run reported a validation
    perplexity measured on text it trained on.)"""
    os.link(plays / "a_play.txt", tmp_path / "linked.txt")
    with pytest.raises(ValueError, match="named by both `TrainingSettings.train` and `TrainingSettings.validation`"):
        text_files([str(plays / "a_play.txt")], exclude=[tmp_path / "linked.txt"])
    shutil.copyfile(plays / "a_play.txt", tmp_path / "copied.txt")
    settings = TrainingSettings(
        out=str(tmp_path / "run"),
        train=[str(plays)],
        validation=[str(tmp_path / "copied.txt")],
        data_cache=str(tmp_path / "cache"),
    )
    copy = r"copied.txt \(`TrainingSettings.validation`\) holds the same text as .*a_play.txt \(`TrainingSettings.tr"
    with pytest.raises(ValueError, match=copy):
        run_tokens(settings, gpt2_tokenizer(), "gpt2")


def test_held_out_text_is_never_trained_on_through_a_token_folder(plays, tmp_path):
    """(A token folder passed every check: trained on and held out at once, itself, a copy of it, or beside the text
    it was made from, it gave a validation perplexity the card called held out.)"""
    tokenizer = gpt2_tokenizer()
    made = text_tokens([plays / "a_play.txt"], tokenizer, "gpt2", tmp_path / "made", progress=False).folder
    shutil.copytree(made, tmp_path / "copied")
    a_play = plays / "a_play.txt"
    for trained, held in [
        (made, made),
        (made, tmp_path / "copied"),
        (made, a_play),
        (a_play, made),
        (plays, made),  # a folder that holds the text
    ]:
        settings = TrainingSettings(
            out=str(tmp_path / "run"), train=[str(trained)], validation=[str(held)], data_cache=str(tmp_path)
        )
        with pytest.raises(ValueError, match=r"`TrainingSettings.validation`\) holds the same (text|tokens) as "):
            run_tokens(settings, tokenizer, "gpt2")
    held_out = [str(plays / "held_out.txt")]
    settings = TrainingSettings(
        out=str(tmp_path / "run"), train=[str(made)], validation=held_out, data_cache=str(tmp_path)
    )
    trained, _, held = run_tokens(settings, tokenizer, "gpt2")  # other text is held out as before
    assert trained.folder == made and held.info["sources"][0]["path"].endswith("held_out.txt")
    # empty files are alike and hold no text: an empty one on each side is no held-out text trained on
    for name in ("empty_trained.txt", "empty_held.txt"):
        (tmp_path / name).write_text("")
    with_empty = text_tokens([a_play, tmp_path / "empty_trained.txt"], tokenizer, "gpt2", tmp_path / "made2").folder
    held_out.append(str(tmp_path / "empty_held.txt"))
    settings = replace(settings, train=[str(with_empty)], validation=held_out)
    assert run_tokens(settings, tokenizer, "gpt2")[0].folder == with_empty


def test_a_run_says_what_of_its_text_it_does_not_learn_from():
    """(The tokens past the last whole block, a whole file among them, and a tokenizer that read most of the text as
    its unknown token, trained on without a word.) More than 1 % of the tokens is said; GPT-2's end-of-text, its
    unknown token too, is not counted."""
    words = word_tokenizer(["to", "be"])  # [UNK] = 0, [EOS] = 3
    quiet = np.array([1, 2, 3] * 32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_of_what_is_not_learned(quiet, pack(quiet, 32), words)
        warn_of_what_is_not_learned(np.full(64, 50256), pack(np.full(64, 50256), 32), gpt2_tokenizer())
    ragged = np.array([1, 2, 3] * 33)
    with pytest.warns(UserWarning, match=r"the last 3 of the 99 training tokens do not fill a block of 32 \(`Tra"):
        warn_of_what_is_not_learned(ragged, pack(ragged, 32), words)
    unknown = np.array([0, 0, 1, 3] * 16)
    with pytest.warns(UserWarning, match=r"50% of the training tokens are the tokenizer's unknown token '\[UNK\]'"):
        warn_of_what_is_not_learned(unknown, pack(unknown, 32), words)


def test_a_validation_folder_is_its_files_matching_the_glob(plays, tmp_path, cli):
    """`--validation FOLDER` scores the folder's files that match `--glob`, as if each were named."""
    held = tmp_path / "held"
    held.mkdir()
    (held / "one.txt").write_text("Whether 'tis nobler in the mind to suffer")
    (held / "two.txt").write_text("The slings and arrows of outrageous fortune,")
    (held / "notes.md").write_text("not text the glob takes")
    perplexities = []
    for validation in ([held], [held / "one.txt", held / "two.txt"]):
        out = tmp_path / f"run-{len(perplexities)}"
        run = cli("train", "--train", plays, "--validation", *validation, *TINY_RUN, "--steps", 1, "--out", out)
        assert run.returncode == 0, run.stderr[-2000:]
        perplexities.append(json.loads((out / "summary.json").read_text())["validation_perplexity"])
    assert perplexities[0] == perplexities[1]


def test_every_block_once_per_epoch_in_a_seeded_order():
    n_blocks, batch = 10, 4
    order = torch.cat([batch_indices(step, batch, n_blocks, seed=3) for step in range(5)])  # 20 = two epochs
    assert sorted(order[:10].tolist()) == list(range(10)) and sorted(order[10:].tolist()) == list(range(10))
    assert order[:10].tolist() != order[10:].tolist()  # each epoch is shuffled afresh
    assert torch.equal(batch_indices(2, batch, n_blocks, seed=3), order[8:12])  # a pure function of (seed, step)
    assert not torch.equal(batch_indices(0, batch, n_blocks, seed=4), order[:4])


def test_pack_and_perplexity_agree_with_the_models_own_loss():
    tokens = torch.arange(70) % 50
    assert pack(tokens, 32).shape == (2, 32)
    model = tiny_model(vocab_size=50)
    blocks = pack(tokens, 32)
    with torch.no_grad():
        loss = model(blocks, labels=blocks).loss  # transformers' own shifted cross-entropy
    assert perplexity(model, tokens[:64], 32) == pytest.approx(torch.exp(loss).item(), rel=1e-5)


# ---- runs ----------------------------------------------------------------------------------------------------


def test_train_writes_a_complete_model_folder_with_a_measured_card(plays, tmp_path, cli):
    out = tmp_path / "run"
    run = cli(
        "train",
        "--train",
        plays,
        "--validation",
        plays / "held_out.txt",
        *TINY_TRAINING,
        *EVALUATED_EVERY_5,
        "--steps",
        10,
        "--out",
        out,
        "--position",
        "rope",
        "--save-dtype",
        "bfloat16",
        "--bf16",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    model_dir = out / "model"
    assert {
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "modeling_tinygpt.py",
        "tokenizer.json",
        "README.md",
    } <= {p.name for p in model_dir.iterdir()}
    assert all(t.dtype == torch.bfloat16 for t in load_file(model_dir / "model.safetensors").values())

    card = ModelCard.load(model_dir / "README.md")
    training = card.data.tinygpt["training"]
    model = TinyGPTForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    held_out = torch.tensor(gpt2_tokenizer()((plays / "held_out.txt").read_text()).input_ids + [50256])
    measured = perplexity(model, held_out, 32)
    # The card's figure is the shipped (bf16) weights' own, measured again here: equal up to float32 summation order.
    assert training["validation_perplexity"] == pytest.approx(measured, rel=1e-4)
    assert card.data.eval_results[0].metric_value == pytest.approx(measured, rel=1e-4, abs=0.005)
    assert training["command"].startswith("hf-tinygpt train") and "--position rope" in training["command"]
    assert training["train_tokens"] > 0 and training["steps"] == 10
    assert training["tokenizer"] == "GPT-2's BPE" and f"{training['train_tokens']:,} tokens of GPT-2's BPE" in card.text
    assert (
        training["tokenizer_sha256"]
        == tokenizer_sha256(gpt2_tokenizer())
        == tokenizer_sha256(load_tokenizer(model_dir))
    )
    assert f"Validation perplexity: {training['validation_perplexity']:.2f}" in card.text
    summary = json.loads((out / "summary.json").read_text())
    assert [r["step"] for r in summary["history"]] == list(range(1, 11))
    assert summary["history"][-1]["train_loss"] < summary["history"][0]["train_loss"]  # it learned something
    # The curve was redrawn at the last evaluation, from the history the summary holds, and the manifest lists it.
    assert (out / LOSS_CURVE).read_bytes() == loss_curve_png(summary["history"])
    assert (out / LOSS_CURVE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not unproven(out)
    # The model folder carries the history and the curve drawn from it, and its card shows the curve.
    assert json.loads((model_dir / TRAINING_HISTORY).read_text()) == summary["history"]
    assert (model_dir / LOSS_CURVE).read_bytes() == loss_curve_png(summary["history"])
    assert "![training and validation loss](loss.png)" in card.text

    again = cli("train", "--train", plays, *TINY_TRAINING, "--steps", 2, "--out", out)  # never overwritten silently
    assert again.returncode == 2 and "--force" in again.stderr


def test_a_card_names_the_tokenizer_a_run_used_and_its_folder_is_read_with_no_other(plays, tmp_path, cli):
    """(Every card said "GPT-2 BPE tokens", a run with a tokenizer of its own too: a published fact that was false.
    And a folder whose tokenizer files were swapped for another tokenizer of the same size read its ids as other words
    in `generate`, the explorer and the pictures, was published so, and was fine-tuned so, with nothing said.)"""
    word_tokenizer(["Line", "to", "be", "or", "not"]).save_pretrained(tmp_path / "words")
    out = tmp_path / "run"
    run = cli("train", "--train", plays, *TINY_TRAINING, "--steps", 2, "--tokenizer", tmp_path / "words", "--out", out)
    assert run.returncode == 0, run.stderr[-3000:]
    unknown = "of the training tokens are the tokenizer's unknown token '[UNK]': the tokenizer (--tokenizer) has no"
    assert unknown in run.stderr
    card = ModelCard.load(out / "model" / "README.md")
    assert card.data.tinygpt["training"]["tokenizer"] == "a WordLevel tokenizer of 7 tokens"
    assert "tokens of a WordLevel tokenizer of 7 tokens, 2 steps" in card.text and "GPT-2" not in card.text

    # The card records which tokenizer exactly; what reads the folder holds its tokenizer to it.
    from hf_tinygpt.explore.views import load_models
    from hf_tinygpt.generate.text import load_for_generation
    from hf_tinygpt.hub.publish import stage_for_hub

    recorded = card.data.tinygpt["training"]["tokenizer_sha256"]
    assert recorded == tokenizer_sha256(load_tokenizer(tmp_path / "words"))
    assert recorded == tokenizer_sha256(load_tokenizer(out / "model"))  # what the folder holds reads the same
    load_for_generation(str(out / "model"))
    other = word_tokenizer(["Line", "to", "be", "or", "maybe"])
    other.save_pretrained(tmp_path / "other")
    lowercased = word_tokenizer(["Line", "to", "be", "or", "not"])  # the same vocabulary, reading "NOT" as "not"
    lowercased.backend_tokenizer.normalizer = normalizers.Lowercase()
    refused = "the tokenizer its files hold is not the tokenizer its weights were trained with"
    for name, tokenizer in (("swapped", other), ("lowercased", lowercased), ("none", None)):
        shutil.copytree(out / "model", tmp_path / name)
        if tokenizer is None:  # removed: GPT-2's would read its prompts
            for file in ("tokenizer.json", "tokenizer_config.json"):
                (tmp_path / name / file).unlink()
            refused = "it has no tokenizer files, and GPT-2's is not the tokenizer its weights were trained with"
        else:
            tokenizer.save_pretrained(tmp_path / name)
        for load, source in ((load_for_generation, str(tmp_path / name)), (load_models, [str(tmp_path / name)])):
            with pytest.raises(ValueError, match=f"{tmp_path / name}: {refused}.*put back the tokenizer files"):
                load(source)
    swapped = tmp_path / "swapped"
    refused = "the tokenizer its files hold is not the tokenizer its weights were trained with"
    with pytest.raises(ValueError, match=refused):
        stage_for_hub(str(swapped), tmp_path / "staged", "me/words")
    with pytest.raises(ValueError, match="the tokenizer `tokenizer` names .* is not the tokenizer its weights"):
        stage_for_hub(str(out / "model"), tmp_path / "staged", "me/words", tokenizer=str(tmp_path / "other"))
    assert not (tmp_path / "staged").exists()
    tuning = ("--init-from", out / "model", "--tokenizer", tmp_path / "other", "--out", tmp_path / "tuned")
    tuned = cli("train", "--train", plays, *tuning)
    assert tuned.returncode == 2 and "the run's tokenizer (--tokenizer" in tuned.stderr, tuned.stderr[-2000:]
    assert "train with the tokenizer it was made with (--tokenizer: --init-from itself, where" in tuned.stderr


def test_a_tokenizer_that_cannot_read_every_text_has_its_sha256_too():
    """(A tokenizer without an unknown token, such as one of the characters a corpus holds, raised on the probe
    texts' other characters when the card was written, after the last step: the run was lost.)"""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    def characters(text):
        backend = Tokenizer(models.WordLevel({c: i for i, c in enumerate(sorted(set(text)))}))
        backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
        return PreTrainedTokenizerFast(tokenizer_object=backend)

    with pytest.raises(Exception, match="Missing \\[UNK\\] token"):
        characters("to be")("Hello")
    assert tokenizer_sha256(characters("to be")) != tokenizer_sha256(characters("or not"))


def test_a_tokenizer_changed_after_it_was_hashed_hashes_as_what_it_is_now():
    """A process hashes each tokenizer once: a token added since, a setting that changes its ids, or a vocabulary read
    from elsewhere than its backend, is another."""
    from hf_tinygpt.folders import bundled

    tokenizer = gpt2_tokenizer()
    before = tokenizer_sha256(tokenizer)
    tokenizer.add_tokens(["<|scene|>"])
    added = tokenizer_sha256(tokenizer)
    tokenizer.add_bos_token = True  # its ids now start with <|endoftext|>
    bos = tokenizer_sha256(tokenizer)
    assert len({before, added, bos}) == 3
    bundled._HASHED.clear()
    assert tokenizer_sha256(tokenizer) == bos and tokenizer_sha256(gpt2_tokenizer()) == before
    tokenizer = gpt2_tokenizer()
    tokenizer.get_vocab = lambda: {"<|endoftext|>": 50256}  # a vocabulary read from more than its backend
    assert tokenizer_sha256(tokenizer) != before


@pytest.mark.slow  # two runs, each in a fresh interpreter (tqdm reads its settings as it is imported)
def test_the_progress_bars_follow_tqdms_own_settings(plays, tmp_path):
    """The tokenizing and training bars are tqdm's, shown by default; TQDM_DISABLE=1 (tqdm's own setting) hides
    them, as it hides every bar of transformers and datasets."""
    untouched = {name: value for name, value in os.environ.items() if not name.startswith("TQDM_")}
    shown, hidden = (
        train_cli(
            "--train",
            plays,
            *TINY_TRAINING,
            "--steps",
            2,
            "--out",
            tmp_path / name,
            env={**untouched, "HF_TINYGPT_CACHE": str(tmp_path / f"cache-{name}"), **env},
        )
        for name, env in (("shown", {}), ("hidden", {"TQDM_DISABLE": "1"}))
    )
    assert shown.returncode == hidden.returncode == 0, shown.stderr[-2000:] + hidden.stderr[-2000:]
    assert "tokenizing:" in shown.stderr and "training:" in shown.stderr, shown.stderr[-2000:]
    assert "tokenizing:" not in hidden.stderr and "training:" not in hidden.stderr, hidden.stderr[-2000:]


def test_validation_tokens_caps_the_held_out_text_every_validation_scores(plays, tmp_path):
    """`validation_tokens`: the perplexities of the history, the summary and the card are all over the first N
    held-out tokens, and the card says N."""
    held_out = torch.tensor(gpt2_tokenizer()((plays / "held_out.txt").read_text()).input_ids + [50256])
    tokens = 100
    assert len(held_out) > 2 * tokens  # the cap leaves most of the text out
    config = {"n_layer": 1, "n_embd": 16, "n_head": 2}
    settings = TrainingSettings(
        out=str(tmp_path / "run"),
        train=[str(plays)],
        validation=[str(plays / "held_out.txt")],
        config=config,
        block_size=32,
        batch_size=4,
        steps=2,
        warmup_steps=1,
        validation_tokens=tokens,
    )
    _, summary = train(settings)
    final = TinyGPTForCausalLM.from_pretrained(tmp_path / "run" / "model").eval()
    expected = perplexity(final, held_out[:tokens], 32, batch_size=4)
    assert expected != pytest.approx(perplexity(final, held_out, 32, batch_size=4), rel=1e-3)
    assert summary["validation_perplexity"] == pytest.approx(expected, rel=1e-5)
    assert summary["history"][-1]["validation_perplexity"] == pytest.approx(expected, rel=1e-5)
    training = ModelCard.load(tmp_path / "run" / "model" / "README.md").data.tinygpt["training"]
    assert training["validation_tokens"] == tokens
    for bad in (1, True, 2.5):
        with pytest.raises(ValueError, match="TrainingSettings.validation_tokens"):
            TrainingSettings(out="x", train=["y"], validation_tokens=bad)


@pytest.mark.parametrize("scheme", every_scheme(fast=("learned", "fire", "cope", "fox", "path")))
def test_train_position_trains_each_scheme_and_saves_it(scheme, plays, tmp_path, cli):
    """`train --position NAME` for every scheme: the saved model is that scheme, and what its positions learn (GPT-2's
    rows, T5's buckets, KERPLE's kernel, FIRE's MLP, CoPE's vectors) moved from where it started."""
    out = tmp_path / scheme
    run = cli(
        "train",
        "--train",
        plays,
        "--validation",
        plays / "held_out.txt",
        *TINY_TRAINING,
        *EVALUATED_EVERY_5,
        "--steps",
        6,
        "--out",
        out,
        "--position",
        scheme,
        "--lr",
        "3e-2",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    model = TinyGPTForCausalLM.from_pretrained(out / "model")
    assert model.config.position_embedding_type == scheme
    torch.manual_seed(0)  # what the run started from: the same seed, the same shape
    start = TinyGPTForCausalLM(model.config).transformer.positions.state_dict()
    trained = model.transformer.positions.state_dict()
    assert start.keys() == trained.keys() and all(not torch.equal(start[k], trained[k]) for k in start)


NO_DROPOUT = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}


def exact_run(out, plays, **overrides) -> TrainingSettings:
    """Three steps of a one-layer model without dropout: two such runs that should agree can be compared exactly."""
    fields = dict(train=[str(plays)], config={"n_layer": 1, "n_embd": 16, "n_head": 2, **NO_DROPOUT}, block_size=16)
    return TrainingSettings(out=str(out), **{**fields, "steps": 3, "warmup_steps": 1, **overrides})


def test_grad_accum_micro_batches_give_the_gradients_of_the_whole_batch(plays, tmp_path, monkeypatch):
    """`grad_accum=4` splits each batch of 8 into 4 micro-batches of 2: every optimizer step sees the gradients of
    the whole batch (within fp32 rounding) and logs its loss. Clipping is off, since it would hide a gradient 4×
    too large, and so would AdamW alone (its update does not change when every gradient is scaled)."""
    seen = []
    adamw_step = torch.optim.AdamW.step

    def recording_step(optimizer, *args, **kwargs):
        seen[-1].append([p.grad.clone() for group in optimizer.param_groups for p in group["params"]])
        return adamw_step(optimizer, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", recording_step)
    losses = []
    for accumulation in (1, 4):
        seen.append([])
        out = tmp_path / f"accumulate-{accumulation}"
        settings = exact_run(out, plays, batch_size=8, grad_accum=accumulation, grad_clip=0.0)
        _, summary = train(settings)
        losses.append([row["train_loss"] for row in summary["history"]])
    whole, accumulated = seen
    assert len(whole) == len(accumulated) == 3  # one optimizer step per training step, not per micro-batch
    for step_whole, step_accumulated in zip(whole, accumulated, strict=True):
        for grad_whole, grad_accumulated in zip(step_whole, step_accumulated, strict=True):
            torch.testing.assert_close(grad_accumulated, grad_whole, rtol=1e-5, atol=1e-7)
    assert losses[1] == pytest.approx(losses[0], rel=1e-6)
    with pytest.raises(ValueError, match="does not split over 1 process"):
        train(TrainingSettings(out=str(tmp_path / "odd"), train=[str(plays)], batch_size=8, grad_accum=3))


@pytest.mark.slow
def test_a_compiled_run_trains_as_the_eager_one_and_saves_a_plain_model(plays, tmp_path):
    """`compile=True` (torch.compile, inductor): the same losses and final weights as eager, to float rounding
    (inductor fuses and reorders sums), and the saved model is an ordinary TinyGPT folder, not a compiled wrapper's
    `_orig_mod.` keys."""
    from torch._dynamo.utils import counters

    runs = {}
    for compiled in (False, True):
        settings = exact_run(tmp_path / f"compile-{compiled}", plays, batch_size=4, compile=compiled)
        counters.clear()
        torch._dynamo.reset()  # a graph an earlier test compiled would be reused here, and counted as none
        _, summary = train(settings)
        assert (counters["stats"]["unique_graphs"] > 0) == compiled  # dynamo really compiled the model, or not
        weights = load_file(tmp_path / f"compile-{compiled}" / "model" / "model.safetensors")
        runs[compiled] = ([row["train_loss"] for row in summary["history"]], weights)
    (eager_losses, eager), (compiled_losses, compiled) = runs[False], runs[True]
    assert compiled_losses == pytest.approx(eager_losses, rel=1e-4)
    assert compiled.keys() == eager.keys()
    for name in eager:
        torch.testing.assert_close(compiled[name], eager[name], rtol=1e-4, atol=1e-5)


def test_init_from_a_gpt2_checkpoint_starts_exactly_where_gpt2lmheadmodel_is(plays, tmp_path):
    """`init_from` a GPT-2 folder: the first step's loss is GPT2LMHeadModel's own loss on that step's batch (the run
    starts from GPT-2's weights, converted as they load), training moves on from there, and the card names no local
    path. A setting the checkpoint fixes (its shape) is refused by name; dropout may change."""
    gpt2 = random_gpt2(vocab_size=50257, n_positions=32, eos_token_id=50256, bos_token_id=50256)
    gpt2.save_pretrained(tmp_path / "gpt2")
    settings = TrainingSettings(
        out=str(tmp_path / "run"),
        train=[str(plays)],
        init_from=str(tmp_path / "gpt2"),
        config=NO_DROPOUT,
        block_size=16,
        batch_size=4,
        steps=2,
        warmup_steps=1,
    )
    _, summary = train(settings)
    blocks = pack(tokenize_files(text_files([str(plays)]), gpt2_tokenizer()), 16)
    first = blocks[batch_indices(0, 4, len(blocks), seed=0)]
    with torch.no_grad():
        expected = gpt2.eval()(first, labels=first).loss.item()
    assert summary["history"][0]["train_loss"] == pytest.approx(expected, abs=1e-5)
    trained = TinyGPTForCausalLM.from_pretrained(tmp_path / "run" / "model")
    assert trained.config.n_layer == gpt2.config.n_layer and trained.config.resid_pdrop == 0.0
    assert not torch.equal(trained.transformer.wte.weight, gpt2.transformer.wte.weight)  # it trained
    card = ModelCard.load(tmp_path / "run" / "model" / "README.md")
    assert "base_model" not in card.data.to_dict()  # nor its path: a published card would show it
    assert "A TinyGPT fine-tuned from a local model with" in card.text and "from scratch" not in card.text
    with pytest.raises(
        ValueError, match=r"`TrainingSettings.init_from` \(.*\) fixes its shape, .* sets n_layer: leave"
    ):
        train(replace(settings, out=str(tmp_path / "wider"), config={"n_layer": 3}))


DRIVER = """
import json, sys, torch
from accelerate import PartialState
from hf_tinygpt.train.loop import train
from hf_tinygpt.train.settings import TrainingSettings

settings = TrainingSettings(**json.loads(sys.argv[1]))
model, summary = train(settings)
state = PartialState()
torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, f"{settings.out}-rank{state.process_index}.pt")
if state.is_main_process:
    json.dump([r["train_loss"] for r in summary["history"]], open(settings.out + "-losses.json", "w"))
"""


# Two CPU processes (gloo) under torchrun, and a run both can be compared on: no dropout, a checkpoint every 3 steps.
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
COMPARABLE_RUN = {
    "block_size": 32,
    "batch_size": 4,
    "steps": 6,
    "warmup_steps": 2,
    "save_every": 3,
    "config": {"n_layer": 1, "n_embd": 16, "n_head": 2, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0},
}


def run_driver(
    tmp_path, launcher: list[str], settings: dict, *, before: str = "", env=None, check: bool = True
) -> subprocess.CompletedProcess:
    """DRIVER (after the code `before`) under `launcher` (the interpreter, or TORCHRUN) on `settings`, one thread a
    process, with `env` added to the environment; with `check`, it must succeed."""
    driver = tmp_path / "driver.py"
    driver.write_text(before + DRIVER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    command = [*launcher, str(driver), json.dumps(settings)]
    run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)  # a hang: collectives disagree
    assert run.returncode == 0 or not check, run.stderr[-4000:]
    return run


def stopped_after_step_3(plays, tmp_path) -> tuple[dict, dict]:
    """A one-process run's settings, its run folder as if stopped after step 3's checkpoint, and the weights the run
    ended with uninterrupted."""
    settings = {**COMPARABLE_RUN, "train": [str(plays)], "out": str(tmp_path / "run")}
    run_driver(tmp_path, [sys.executable], settings)
    uninterrupted = torch.load(tmp_path / "run-rank0.pt")
    shutil.rmtree(tmp_path / "run" / "model")
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "step-000006")
    (tmp_path / "run" / "summary.json").unlink()
    return settings, uninterrupted


@pytest.mark.slow
def test_two_process_data_parallel_run_matches_one_process(plays, tmp_path):
    """torchrun, 2 CPU processes (gloo): the ranks end identical, and match a 1-process run on the same global batch
    (to float rounding: all-reduced gradients are summed in another order). The learning-rate schedule must advance
    once per step, not once per process as a schedule prepared by accelerate would."""
    validated = {"validation": [str(plays / "held_out.txt")], "eval_every": 3}
    for name, launcher in [("one", [sys.executable]), ("two", TORCHRUN)]:
        run_driver(
            tmp_path, launcher, {**COMPARABLE_RUN, **validated, "train": [str(plays)], "out": str(tmp_path / name)}
        )

    rank0, rank1 = torch.load(tmp_path / "two-rank0.pt"), torch.load(tmp_path / "two-rank1.pt")
    assert all(torch.equal(rank0[key], rank1[key]) for key in rank0)
    single = torch.load(tmp_path / "one-rank0.pt")
    assert max((rank0[key] - single[key]).abs().max().item() for key in single) < 1e-5
    losses_two = json.loads((tmp_path / "two-losses.json").read_text())
    losses_one = json.loads((tmp_path / "one-losses.json").read_text())
    assert len(losses_two) == len(losses_one) == 6
    assert losses_two == pytest.approx(losses_one, abs=1e-5)


@pytest.mark.slow
def test_a_run_saved_by_one_process_resumes_on_two(plays, tmp_path):
    """Each process reads its own RNG state from the checkpoint: the second, which has none, skipped the checkpoint
    and started at step 0 while the first went on from step 3 (their collectives then disagree). Both resume now, say
    so once, and end where the uninterrupted run ended (no dropout: the random numbers are not used)."""
    settings, uninterrupted = stopped_after_step_3(plays, tmp_path)
    run = run_driver(tmp_path, TORCHRUN, {**settings, "resume": True})
    said = run.stdout + run.stderr
    assert "step-000003 (step 3)" in said and said.count("was saved by 1 process and this run has 2") == 1
    rank0, rank1 = torch.load(tmp_path / "run-rank0.pt"), torch.load(tmp_path / "run-rank1.pt")
    assert all(torch.equal(rank0[key], rank1[key]) for key in rank0)
    assert max((rank0[key] - uninterrupted[key]).abs().max().item() for key in rank0) < 1e-5


# The second process alone cannot read a checkpoint's progress, or sees other settings than the first.
SECOND_PROCESS_DIFFERS = """
import os
import hf_tinygpt.train.run_folder as run_folder
if os.environ["RANK"] == "1" and os.environ["SECOND_SEES"] == "unreadable":
    def unreadable(folder):
        raise OSError("not readable on this process")
    run_folder._read_progress = unreadable
elif os.environ["RANK"] == "1":
    run_folder.comparable = lambda settings, comparable=run_folder.comparable: {**comparable(settings), "seed": 7}
"""


@pytest.mark.slow
def test_every_process_resumes_from_the_same_checkpoint_or_none_does(plays, tmp_path):
    """A checkpoint one process alone could not read was skipped by it alone, and a run one process alone refused
    ended on it alone: the others waited in a collective for ever. Now what one skips all skip, and what one refuses
    ends the run on every process."""
    settings, uninterrupted = stopped_after_step_3(plays, tmp_path)
    runs = {
        sees: run_driver(
            tmp_path,
            TORCHRUN,
            {**settings, "resume": True},
            before=SECOND_PROCESS_DIFFERS,
            env={"SECOND_SEES": sees},
            check=False,
        )
        for sees in ("other settings", "unreadable")
    }
    refused = runs["other settings"]
    assert refused.returncode != 0 and "changed: `TrainingSettings.seed` 0 → 7" in refused.stderr, refused.stderr
    skipped = runs["unreadable"]
    assert skipped.returncode == 0, skipped.stderr[-4000:]
    assert "step-000003: not readable on this process" in skipped.stderr, skipped.stderr[-4000:]
    rank0, rank1 = torch.load(tmp_path / "run-rank0.pt"), torch.load(tmp_path / "run-rank1.pt")
    assert all(torch.equal(rank0[key], rank1[key]) for key in rank0)  # both trained from step 0
    assert max((rank0[key] - uninterrupted[key]).abs().max().item() for key in rank0) < 1e-5


# ---- metrics and the optimizer -------------------------------------------------------------------------------


def test_report_to_tensorboard_logs_each_steps_metrics_inside_the_run_folder(plays, tmp_path):
    """accelerate's TensorBoard tracker gets every step's loss and learning rate and each validation perplexity,
    the numbers of the summary's history; it writes under OUT/trackers, and the run folder stays provably ours."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    settings = exact_run(
        out, plays, steps=4, validation=[str(plays / "held_out.txt")], eval_every=2, report_to=["tensorboard"]
    )
    _, summary = train(settings)
    events = EventAccumulator(str(out / "trackers" / "hf-tinygpt")).Reload()
    for metric in ("train_loss", "lr", "validation_perplexity"):
        logged = [(event.step, event.value) for event in events.Scalars(metric)]
        expected = [(row["step"], row[metric]) for row in summary["history"] if metric in row]
        assert [step for step, _ in logged] == [step for step, _ in expected], metric
        assert [value for _, value in logged] == pytest.approx([value for _, value in expected], rel=1e-6), metric
    assert [step for step, _ in logged] == [2, 4]
    assert not unproven(out)


def test_report_to_names_an_unknown_or_missing_tracker(monkeypatch):
    with pytest.raises(ValueError, match=r"TrainingSettings.report_to.*tensorbord is not a tracker.*tensorboard"):
        TrainingSettings(out="x", train=["y"], report_to=["tensorbord"])
    import accelerate.tracking

    monkeypatch.setattr(
        accelerate.tracking, "get_available_trackers", lambda: []
    )  # as where tensorboard is not installed
    with pytest.raises(ValueError, match=r"TrainingSettings.report_to.*tensorboard is not installed"):
        TrainingSettings(out="x", train=["y"], report_to=["tensorboard"])


def test_the_train_verb_keeps_freed_memory(plays, tmp_path, cli, kept_freed_memory):
    """A CPU step frees and allocates tensors of hundreds of MB; glibc maps each afresh and the kernel zeroes its pages
    every step, unless malloc keeps what was freed (`keep_freed_memory`), which the train verb asks for."""
    run = cli("train", "--train", plays, "--out", tmp_path / "run", "--steps", 1, *TINY_RUN)
    assert run.returncode == 0, run.stderr
    assert kept_freed_memory == [True]


@pytest.mark.slow
def test_kept_freed_memory_is_reused_instead_of_faulted_in_again():
    """What `keep_freed_memory` buys, in processes of their own: a 256 MiB tensor allocated a fourth time faults its
    pages in again by default, and hardly at all once freed memory is kept."""
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("keep_freed_memory is glibc's mallopt")
    # In processes of their own (the setting is process-wide and for good): pages faulted in when a 256 MiB tensor is
    # allocated for the fourth time, as at every step of a run.
    refault = textwrap.dedent("""
        import resource, sys, torch
        from hf_tinygpt.train.loop import keep_freed_memory
        if sys.argv[1] == "kept":
            assert keep_freed_memory()
        faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for step in range(4):
            before = faults()
            block = torch.ones(2**26)
            del block
        print(faults() - before)
    """)
    pages = 2**28 // resource.getpagesize()
    faulted = {
        how: int(
            subprocess.run([sys.executable, "-c", refault, how], capture_output=True, text=True, check=True).stdout
        )
        for how in ("default", "kept")
    }
    assert faulted["default"] > pages // 2 and faulted["kept"] < pages // 100, faulted


def test_training_takes_the_fused_adamw_which_makes_torchs_own_adamw_update():
    """Where torch has a fused AdamW kernel for the device (CPU and CUDA have one), training uses it: one pass over
    the weights instead of several, the same update as torch's default AdamW (the single-tensor loop on a CPU) within
    fp32 rounding, matrices decayed and biases and LayerNorms not."""
    from accelerate import Accelerator

    from hf_tinygpt.train.state import BETAS, training_state

    settings = TrainingSettings(
        out="run",
        train=["texts"],
        block_size=16,
        learning_rate=1e-2,
        warmup_steps=0,
        config={"n_layer": 1, "n_embd": 16, "n_head": 2},
    )
    state = training_state(settings, Accelerator(cpu=not torch.accelerator.is_available()), gpt2_tokenizer())
    fused = state.optimizer.optimizer  # accelerate's wrapper holds torch's
    assert fused.defaults["fused"] is True
    ours = [p for group in fused.param_groups for p in group["params"]]
    copies = {id(p): torch.nn.Parameter(p.detach().clone()) for p in ours}
    groups = [{**group, "params": [copies[id(p)] for p in group["params"]]} for group in fused.param_groups]
    assert [group["weight_decay"] for group in groups] == [settings.weight_decay, 0.0]
    assert all(p.dim() >= 2 for p in groups[0]["params"]) and all(p.dim() < 2 for p in groups[1]["params"])
    assert [group["lr"] for group in groups] == [1e-2, 1e-2]  # no warmup: the schedule starts at the full rate
    reference = torch.optim.AdamW(
        [{"params": g["params"], "weight_decay": g["weight_decay"]} for g in groups], 1e-2, betas=BETAS
    )
    for step in range(5):
        for param in ours:
            param.grad = torch.sin(param.detach() * (step + 1))
            copies[id(param)].grad = param.grad.clone()
        fused.step()
        reference.step()
    for param in ours:
        torch.testing.assert_close(param, copies[id(param)], rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_init_from_a_private_hub_repo_at_a_revision_with_a_token_that_no_file_keeps(hub, plays, tmp_path):
    """`--init-from ID --revision R --token T` starts from branch R of a private repo (here on the loopback Hub):
    with a learning rate of 1e-12 the final weights are R's, not main's. T is in no file the run writes (the card's
    command line included), and the card names ID as the base model."""
    from conftest import HUB_TOKEN, hub_subprocess_env, save_with_tokenizer, text_model

    from hf_tinygpt.hub.publish import push_to_hub

    branches = {"main": text_model("rope", seed=0), "v2": text_model("rope", seed=1)}
    for branch, model in branches.items():
        folder = save_with_tokenizer(model, tmp_path / branch)
        push_to_hub(str(folder), "me/start", private=True, revision=branch, token=HUB_TOKEN, endpoint=hub.url)
    args = ["--train", plays, "--block-size", 32, "--batch-size", 2, "--steps", 1, "--lr", 1e-12, "--out", "run"]
    env = hub_subprocess_env(hub, tmp_path)
    run = train_cli("--init-from", "me/start", "--revision", "v2", f"--token={HUB_TOKEN}", *args, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    final = load_file(tmp_path / "run" / "model" / "model.safetensors")
    started = branches["v2"].state_dict()
    for name, weight in final.items():  # the tied head is saved once, as the token embeddings
        torch.testing.assert_close(weight, started[name], rtol=0, atol=1e-6)
    assert not torch.allclose(final[name], branches["main"].state_dict()[name])  # the branches differ
    assert not [p for p in (tmp_path / "run").rglob("*") if p.is_file() and HUB_TOKEN.encode() in p.read_bytes()]
    card = ModelCard.load(tmp_path / "run" / "model" / "README.md")
    assert card.data.base_model == "me/start" and "--revision v2" in card.data.tinygpt["training"]["command"]
    assert "A TinyGPT fine-tuned from me/start with" in card.text and card.data.tinygpt["training"]["hub_ids"] == [
        "me/start"
    ]

    without = train_cli("--init-from", "me/start", "--revision", "v2", *args, "--force", cwd=tmp_path, env=env)
    assert without.returncode != 0 and "me/start" in without.stderr  # private: no token, no weights


@pytest.mark.parametrize("has_bf16", [False, True])
def test_bf16_on_a_cpu_without_bf16_instructions_warns_once_naming_the_flag(
    plays, tmp_path, cli, monkeypatch, has_bf16
):
    monkeypatch.setattr("hf_tinygpt.train.state.cpu_has_bf16_instructions", lambda: has_bf16)
    run = cli("train", "--train", plays, *TINY_TRAINING, "--steps", 3, "--bf16", "--out", tmp_path / "run")
    assert run.returncode == 0, run.stderr[-3000:]
    warned = [line for line in run.stderr.splitlines() if "warning" in line]
    if has_bf16:
        assert warned == []
    else:
        assert len(warned) == 1 and warned[0].startswith("hf-tinygpt train: warning: --bf16: this CPU has no bf16")
        assert "14x slower than float32" in warned[0] and "leave --bf16 out" in warned[0]
