"""Loading and converting checkpoints: GPT-2 in every layout met in the wild (folders, .bin, sharded, a Hub id),
nanoGPT's ckpt.pt, exports to GPT-2 and GPT-NeoX (always verified against transformers' own class), the strict loader
every command uses, and bad checkpoints, each named in one line with nothing written."""

import collections
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import GPT2_VOCAB, HUB_TOKEN, VOCAB, hub_subprocess_env, random_gpt2, run_cli, tiny_model
from safetensors.torch import load_file, save_file
from transformers import GPT2Config, GPT2LMHeadModel

from hf_tinygpt import POSITION_SCHEME_CLASSES, TinyGPTForCausalLM
from hf_tinygpt.cli.commands import main
from hf_tinygpt.convert.conversions import export_gpt_neox
from hf_tinygpt.folders.reading import load_strictly

IDS = torch.randint(0, VOCAB, (2, 20), generator=torch.Generator().manual_seed(0))
SCRIPTS = Path(__file__).parent.parent / "scripts"


def assert_same_logits(tiny, gpt2, ids=IDS):
    with torch.no_grad():
        assert (tiny(ids).logits - gpt2(ids).logits).abs().max() <= 1e-5


def gpt2_tensors(gpt2):
    return {key: tensor.clone() for key, tensor in gpt2.state_dict().items()}


def write_folder(folder, gpt2, tensors, weights_name="model.safetensors"):
    folder.mkdir(parents=True, exist_ok=True)
    gpt2.config.to_json_file(folder / "config.json")
    if weights_name.endswith(".safetensors"):
        save_file(tensors, folder / weights_name, metadata={"format": "pt"})
    else:
        torch.save(tensors, folder / weights_name)
    return folder


# ---- GPT-2 layouts load with GPT-2's logits --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "layout",
    [
        "safetensors with lm_head",
        "pytorch_model.bin",
        "no transformer. prefix + legacy buffers",
        "no lm_head",
        "sharded",
    ],
)
def test_layouts_load_with_gpt2_logits(tmp_path, layout):
    gpt2 = random_gpt2()
    tensors = gpt2_tensors(gpt2)
    if layout == "safetensors with lm_head":  # the head stored as its own tensor, equal to wte
        assert "lm_head.weight" in tensors
        write_folder(tmp_path, gpt2, tensors)
    elif layout == "pytorch_model.bin":
        write_folder(tmp_path, gpt2, tensors, "pytorch_model.bin")
    elif layout.startswith("no transformer."):  # like the Hub's original `gpt2` files
        tensors = {key.removeprefix("transformer."): t for key, t in tensors.items() if key != "lm_head.weight"}
        for i in range(gpt2.config.n_layer):
            tensors[f"h.{i}.attn.bias"] = torch.tril(torch.ones(1, 1, 64, 64))
            tensors[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
        write_folder(tmp_path, gpt2, tensors, "pytorch_model.bin")
    elif layout == "no lm_head":
        tensors.pop("lm_head.weight")
        write_folder(tmp_path, gpt2, tensors)
    else:
        gpt2.save_pretrained(tmp_path, max_shard_size="20KB")
        assert (tmp_path / "model.safetensors.index.json").exists()
    tiny = TinyGPTForCausalLM.from_pretrained(tmp_path).eval()
    assert tiny.lm_head.weight is tiny.transformer.wte.weight
    assert_same_logits(tiny, gpt2)


def test_a_lone_weights_file_has_n_embd_over_64_heads_or_the_n_head_given(tmp_path, cli):
    """n_embd 32 and 4 heads: the shapes do not say how many heads, and 64 per head does not divide 32 (the guess
    was one head, and verifying against a GPT2LMHeadModel built on the same guess agreed): given, the logits are
    GPT-2's."""
    gpt2 = random_gpt2(**GPT2_VOCAB)
    save_file(gpt2_tensors(gpt2), tmp_path / "w.safetensors", metadata={"format": "pt"})
    refused = cli("convert", tmp_path / "w.safetensors", "--out", tmp_path / "guessed", "--tokenizer", "gpt2")
    assert refused.returncode == 2 and not (tmp_path / "guessed").exists()
    assert "n_embd 32 is not a multiple of 64" in refused.stderr and "convert it with --n-head" in refused.stderr
    given = cli("convert", tmp_path / "w.safetensors", "--out", tmp_path / "tiny", "--n-head", 4, "--tokenizer", "gpt2")
    assert given.returncode == 0, given.stderr[-2000:]
    assert_same_logits(TinyGPTForCausalLM.from_pretrained(tmp_path / "tiny").eval(), gpt2)


def test_a_head_apart_from_wte_is_kept_or_refused_never_dropped(tmp_path, cli):
    """(A GPT-2 folder whose config ties the head while its checkpoint holds another one loaded with wte as the head:
    GPT-2 keeps the checkpoint's, so the logits differed, and `convert --verify` passed; a lone file with its own
    head could not be converted at all.) The folder is refused with the fix, which gives GPT-2's logits; a lone file's
    own head makes it untied."""
    untied = random_gpt2(tie_word_embeddings=False, **GPT2_VOCAB)
    tensors = gpt2_tensors(untied)
    assert not torch.equal(tensors["lm_head.weight"], tensors["transformer.wte.weight"])
    tied_config = GPT2Config(**{**untied.config.to_dict(), "tie_word_embeddings": True})
    write_folder(tmp_path / "tied", GPT2LMHeadModel(tied_config), tensors)
    differs = "lm_head.weight differs from transformer.wte.weight, but the config ties them"
    with pytest.raises(ValueError, match=f"{differs} .*set tie_word_embeddings to false in its config.json"):
        TinyGPTForCausalLM.from_pretrained(tmp_path / "tied")
    refused = cli("convert", tmp_path / "tied", "--out", tmp_path / "out", "--verify")
    assert refused.returncode == 2 and differs in refused.stderr and not (tmp_path / "out").exists()
    write_folder(tmp_path / "untied", untied, tensors)
    assert_same_logits(TinyGPTForCausalLM.from_pretrained(tmp_path / "untied").eval(), untied)
    (tmp_path / "lone").mkdir()
    save_file(tensors, tmp_path / "lone" / "w.safetensors", metadata={"format": "pt"})
    lone = cli(
        "convert",
        tmp_path / "lone" / "w.safetensors",
        "--out",
        tmp_path / "lone-tiny",
        "--n-head",
        4,
        "--tokenizer",
        "gpt2",
    )
    assert lone.returncode == 0, lone.stderr[-2000:]
    converted = TinyGPTForCausalLM.from_pretrained(tmp_path / "lone-tiny").eval()
    assert not converted.config.tie_word_embeddings
    assert_same_logits(converted, untied)


def test_untying_a_tied_gpt2_checkpoint_gives_the_head_its_own_copy_of_wte(gpt2_folder, tmp_path):
    """(`from_pretrained(gpt2_folder, tie_word_embeddings=False)` left the head on wte's storage while the config said
    untied: training one changed the other, and `save_pretrained` wrote no head, so the folder loaded a random one.)
    The head starts as a copy of wte, GPT-2's logits exactly, and is a weight of its own from then on."""
    gpt2 = GPT2LMHeadModel.from_pretrained(gpt2_folder).eval()
    untied = TinyGPTForCausalLM.from_pretrained(gpt2_folder, tie_word_embeddings=False).eval()
    head, wte = untied.get_output_embeddings().weight, untied.get_input_embeddings().weight
    assert not untied.config.tie_word_embeddings and head.data_ptr() != wte.data_ptr() and torch.equal(head, wte)
    assert_same_logits(untied, gpt2)
    with torch.no_grad():
        head.mul_(2.0)
    assert torch.equal(wte, gpt2.get_input_embeddings().weight)
    untied.save_pretrained(tmp_path / "untied")
    reloaded, info = TinyGPTForCausalLM.from_pretrained(tmp_path / "untied", output_loading_info=True)
    assert not info["missing_keys"] and torch.equal(reloaded.get_output_embeddings().weight, head)


def test_convert_refuses_the_options_its_source_does_not_take(gpt2_folder, tmp_path, cli):
    """(`--n-head` and `--trim-vocab` were ignored where the source's config says its heads and vocabulary.)"""
    save_file(gpt2_tensors(random_gpt2()), gpt2_folder / "beside.safetensors", metadata={"format": "pt"})
    for source, option, value in [
        (gpt2_folder, "--n-head", 8),
        (gpt2_folder / "beside.safetensors", "--n-head", 8),  # its config.json beside it says its heads
        (gpt2_folder, "--trim-vocab", 100),
        (gpt2_folder / "beside.safetensors", "--trim-vocab", 100),
    ]:
        refused = cli("convert", source, "--out", tmp_path / "out", option, value, "--tokenizer", "gpt2")
        assert refused.returncode == 2 and f"{option} applies to a" in refused.stderr, refused.stderr[-2000:]
        assert f"leave {option} out" in refused.stderr and not (tmp_path / "out").exists()
    # A config.json of another kind beside a lone file says nothing of it: its heads are still `n_head`'s to say.
    (tmp_path / "lone").mkdir()
    save_file(gpt2_tensors(random_gpt2(**GPT2_VOCAB)), tmp_path / "lone" / "w.safetensors", metadata={"format": "pt"})
    (tmp_path / "lone" / "config.json").write_text('{"model_type": "something_else"}')
    given = cli(
        "convert", tmp_path / "lone" / "w.safetensors", "--out", tmp_path / "out", "--n-head", 4, "--tokenizer", "gpt2"
    )
    assert given.returncode == 0, given.stderr[-2000:]


def test_verify_gpt2_compares_half_precision_weights_in_float32(tmp_path, cli):
    """(A float16 or bfloat16 folder was compared in its own dtype, where the two libraries' roundings differ by far
    more than 1e-5: MISMATCH for the same weights.)"""
    for dtype in (torch.float16, torch.bfloat16):
        random_gpt2(vocab_size=50257).to(dtype).save_pretrained(tmp_path / str(dtype))
        verified = cli("verify-gpt2", tmp_path / str(dtype), "--text", "To be, or not to be")
        assert verified.returncode == 0 and "both in float32" in verified.stdout, verified.stdout + verified.stderr


def test_old_non_zip_pickle_loads(tmp_path):
    gpt2 = random_gpt2()
    tmp_path.mkdir(exist_ok=True)
    gpt2.config.to_json_file(tmp_path / "config.json")
    torch.save(gpt2_tensors(gpt2), tmp_path / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    assert_same_logits(TinyGPTForCausalLM.from_pretrained(tmp_path).eval(), gpt2)


def test_hub_repo_id_resolves_through_the_hf_cache(tmp_path):
    """A Hub id is resolved by huggingface_hub exactly as transformers does: here from a cache laid out as the
    Hub client lays it out (refs/main → snapshots/<commit>), offline."""
    gpt2 = random_gpt2()
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = tmp_path / "models--someone--tiny-gpt2" / "snapshots" / commit
    gpt2.save_pretrained(snapshot)
    (tmp_path / "models--someone--tiny-gpt2" / "refs").mkdir()
    (tmp_path / "models--someone--tiny-gpt2" / "refs" / "main").write_text(commit)
    tiny = TinyGPTForCausalLM.from_pretrained("someone/tiny-gpt2", cache_dir=tmp_path, local_files_only=True)
    assert_same_logits(tiny.eval(), gpt2)
    by_commit = TinyGPTForCausalLM.from_pretrained("someone/tiny-gpt2", cache_dir=tmp_path, revision=commit)
    assert_same_logits(by_commit.eval(), gpt2)


HTTP_LOAD = """
import sys, torch
from hf_tinygpt import TinyGPTForCausalLM
from hf_tinygpt.cli.commands import main
repo, revision, token, ids, out = sys.argv[1:]
model = TinyGPTForCausalLM.from_pretrained(repo, revision=revision, token=token).eval()
with torch.no_grad():
    torch.save(model(torch.load(ids)).logits, out)
"""


@pytest.mark.slow
def test_private_sharded_hub_repo_over_http_with_revision_and_token(hub, tmp_path):
    """A Hub id through huggingface_hub's real HTTP path (tests/hub_server.py on loopback): a private repo whose
    `dev` branch holds a sharded checkpoint; the token and revision travel as transformers passes them."""
    from huggingface_hub import HfApi

    gpt2 = random_gpt2()
    gpt2.save_pretrained(tmp_path / "gpt2", max_shard_size="20KB")
    api = HfApi(endpoint=hub.url, token=HUB_TOKEN)
    api.create_repo("someone/tiny-gpt2", private=True)
    api.create_branch("someone/tiny-gpt2", branch="dev")
    api.upload_folder(repo_id="someone/tiny-gpt2", folder_path=tmp_path / "gpt2", revision="dev")
    torch.save(IDS, tmp_path / "ids.pt")
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            HTTP_LOAD,
            "someone/tiny-gpt2",
            "dev",
            HUB_TOKEN,
            tmp_path / "ids.pt",
            tmp_path / "o.pt",
        ],
        capture_output=True,
        text=True,
        env=hub_subprocess_env(hub, tmp_path),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    with torch.no_grad():
        assert (torch.load(tmp_path / "o.pt") - gpt2(IDS).logits).abs().max() <= 1e-5
    shards = [path for method, path in hub.requests if method == "GET" and "model-0000" in path]
    assert len(shards) > 1 and all("/resolve/" in path for path in shards)


# ---- converting to tinygpt: GPT-2 folders, nanoGPT checkpoints, the conversion scripts -------------------------------


def run_script(name, *args):
    return subprocess.run([sys.executable, str(SCRIPTS / name), *map(str, args)], capture_output=True, text=True)


def test_convert_gpt2_folder_round_trip_with_verify(tmp_path, cli):
    gpt2 = random_gpt2(vocab_size=50257, eos_token_id=50256, bos_token_id=50256)
    gpt2.save_pretrained(tmp_path / "gpt2")
    out = cli(
        "convert",
        tmp_path / "gpt2",
        "--out",
        tmp_path / "tiny",
        "--tokenizer",
        "gpt2",
        "--verify",
        "--tolerance",
        "1e-5",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "verify: max |Δlogits|" in out.stdout
    assert re.search(r"\d+/\d+ \[", out.stderr)  # progress bars (transformers' own, for writing and loading)
    files = {p.name for p in (tmp_path / "tiny").iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "modeling_tinygpt.py",
        "configuration_tinygpt.py",
        "tokenizer.json",
        "tokenizer_config.json",
    } <= files
    assert "auto_map" in json.loads((tmp_path / "tiny" / "config.json").read_text())

    back = cli("convert", "--to", "gpt2", tmp_path / "tiny", "--out", tmp_path / "back", "--verify")
    assert back.returncode == 0, back.stderr[-2000:]
    reloaded = GPT2LMHeadModel.from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        assert (reloaded(IDS).logits - gpt2(IDS).logits).abs().max() <= 1e-5


def nanogpt_checkpoint(path, *, bias=True, vocab=50257, padded_vocab=50304, compiled=False):
    """A nanoGPT `ckpt.pt` (nn.Linear layout, exact GELU) with random weights, and the same model as transformers'
    GPT2LMHeadModel (activation 'gelu', Conv1D = transposed Linear, zero biases when bias=False)."""
    C, L, H, T = 32, 2, 4, 48
    g = torch.Generator().manual_seed(0)
    rand = lambda *shape: torch.randn(*shape, generator=g) * 0.05  # noqa: E731
    sd = {"transformer.wte.weight": rand(padded_vocab, C), "transformer.wpe.weight": rand(T, C)}
    for i in range(L):
        p = f"transformer.h.{i}."
        sd |= {
            p + "ln_1.weight": 1 + rand(C),
            p + "ln_2.weight": 1 + rand(C),
            p + "attn.c_attn.weight": rand(3 * C, C),
            p + "attn.c_proj.weight": rand(C, C),
            p + "mlp.c_fc.weight": rand(4 * C, C),
            p + "mlp.c_proj.weight": rand(C, 4 * C),
            p + "attn.bias": torch.tril(torch.ones(1, 1, T, T)),
        }
        if bias:
            sd |= {
                p + "ln_1.bias": rand(C),
                p + "ln_2.bias": rand(C),
                p + "attn.c_attn.bias": rand(3 * C),
                p + "attn.c_proj.bias": rand(C),
                p + "mlp.c_fc.bias": rand(4 * C),
                p + "mlp.c_proj.bias": rand(C),
            }
    sd |= {"transformer.ln_f.weight": 1 + rand(C), "lm_head.weight": sd["transformer.wte.weight"]}
    if bias:
        sd["transformer.ln_f.bias"] = rand(C)
    model_args = dict(n_layer=L, n_head=H, n_embd=C, block_size=T, bias=bias, vocab_size=padded_vocab, dropout=0.0)
    saved = {("_orig_mod." + k if compiled else k): v for k, v in sd.items()}
    torch.save({"model": saved, "model_args": model_args, "iter_num": 100, "best_val_loss": 3.0}, path)

    gpt2 = GPT2LMHeadModel(
        GPT2Config(vocab_size=vocab, n_positions=T, n_embd=C, n_layer=L, n_head=H, activation_function="gelu")
    ).eval()
    reference = {}
    for key, tensor in gpt2.state_dict().items():
        source = sd.get(key)
        if source is None:
            reference[key] = torch.zeros_like(tensor)  # bias=False: no bias is a zero bias
        elif key.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            reference[key] = source.t()
        else:
            reference[key] = source[:vocab] if key in ("transformer.wte.weight", "lm_head.weight") else source
    gpt2.load_state_dict(reference)
    return gpt2


@pytest.mark.parametrize("bias, compiled", [(True, False), (False, True)])
def test_nanogpt_checkpoint_converts_exactly(tmp_path, bias, compiled, cli):
    reference = nanogpt_checkpoint(tmp_path / "ckpt.pt", bias=bias, compiled=compiled)
    out = cli(
        "convert",
        tmp_path / "ckpt.pt",
        "--out",
        tmp_path / "tiny",
        "--tokenizer",
        "gpt2",
        "--trim-vocab",
        "50257",
        "--verify",
        "--tolerance",
        "1e-5",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    tiny = TinyGPTForCausalLM.from_pretrained(tmp_path / "tiny").eval()
    assert tiny.config.vocab_size == 50257 and tiny.config.activation_function == "gelu"
    # nanoGPT's dropout (0.0 here) and end of text, not GPT-2's 0.1 (every conversion had 0.1)
    pdrop = (tiny.config.resid_pdrop, tiny.config.embd_pdrop, tiny.config.attn_pdrop)
    assert pdrop == (0.0, 0.0, 0.0) and tiny.config.eos_token_id == 50256
    ids = IDS
    assert_same_logits(tiny, reference, ids)


def test_a_tokenizer_with_more_tokens_than_the_model_has_rows_is_refused(tmp_path, cli):
    """(nanoGPT's character-level Shakespeare, 65 tokens, converted with the GPT-2 BPE its error suggested, was
    written and called converted; only generate found that the tokenizer's ids have no rows.)"""
    nanogpt_checkpoint(tmp_path / "ckpt.pt", vocab=65, padded_vocab=65)
    out = cli("convert", tmp_path / "ckpt.pt", "--out", tmp_path / "tiny", "--tokenizer", "gpt2")
    said = "gpt2: the tokenizer has 50,257 tokens, more than the model's vocabulary (65 rows): some token ids would"
    assert out.returncode == 2 and said in out.stderr and not (tmp_path / "tiny").exists(), out.stderr[-2000:]


def test_dtype_option_stores_bfloat16_weights(tmp_path, cli):
    from safetensors import safe_open

    random_gpt2(**GPT2_VOCAB).save_pretrained(tmp_path / "gpt2")
    out = cli(
        "convert",
        tmp_path / "gpt2",
        "--out",
        tmp_path / "tiny",
        "--tokenizer",
        "gpt2",
        "--dtype",
        "bfloat16",
        "--verify",
        "--tolerance",
        "0.05",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    with safe_open(tmp_path / "tiny" / "model.safetensors", "pt") as f:
        assert {f.get_tensor(key).dtype for key in f.keys()} == {torch.bfloat16}
    assert TinyGPTForCausalLM.from_pretrained(tmp_path / "tiny").dtype == torch.bfloat16


@pytest.mark.slow
def test_the_conversion_scripts_are_the_convert_verb(tmp_path):
    """scripts/convert_*.py in a fresh interpreter: the same `hf-tinygpt convert`, both ways, verified."""
    random_gpt2(vocab_size=50257, eos_token_id=50256, bos_token_id=50256).save_pretrained(tmp_path / "gpt2")
    out = run_script(
        "convert_gpt2_to_tinygpt.py", tmp_path / "gpt2", "--out", tmp_path / "tiny", "--tokenizer", "gpt2", "--verify"
    )
    assert out.returncode == 0 and "verify: max |Δlogits|" in out.stdout, out.stderr[-2000:]
    back = run_script("convert_tinygpt_to_gpt2.py", tmp_path / "tiny", "--out", tmp_path / "back", "--verify")
    assert back.returncode == 0 and "GPT2LMHeadModel format" in back.stdout, back.stderr[-2000:]


# ---- exporting to GPT-2 and GPT-NeoX ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scheme, to, reason",
    [
        ("rope", "gpt2", "RoPE rotates q and k inside attention, which GPT-2's attention does not"),
        ("alibi", "gpt2", "no exact twin among transformers' architectures: BLOOM normalises the token embeddings"),
        ("alibi", "gpt_neox", "no exact twin among transformers' architectures: BLOOM normalises the token embeddings"),
        ("xpos", "gpt_neox", "no exact twin among transformers' architectures: none scales q and k as xPos does"),
        ("cope", "gpt2", "no exact twin among transformers' architectures: none counts positions from the attention"),
    ],
)
def test_export_names_what_the_target_cannot_express(tmp_path, scheme, to, reason, cli):
    tiny_model(scheme).save_pretrained(tmp_path / "tiny")
    out = cli("convert", "--to", to, tmp_path / "tiny", "--out", tmp_path / "exported")
    assert out.returncode == 2 and f"position_embedding_type='{scheme}'" in out.stderr and reason in out.stderr
    assert not (tmp_path / "exported").exists()


def test_every_scheme_exports_to_its_twin_or_is_refused_with_the_reason(tmp_path, scheme, cli):
    """`convert --to` the architecture a scheme's class names as its exact twin writes a folder checked to give the
    same logits; a scheme with none is refused with the reason its class gives, and nothing is written."""
    twin, reason = POSITION_SCHEME_CLASSES[scheme].exact_twin, POSITION_SCHEME_CLASSES[scheme].no_exact_twin
    tiny_model(scheme).save_pretrained(tmp_path / "tiny")
    out = cli("convert", "--to", twin or "gpt2", tmp_path / "tiny", "--out", tmp_path / "twin")
    if twin is None:
        assert out.returncode == 2 and reason in out.stderr and not (tmp_path / "twin").exists()
    else:
        assert out.returncode == 0 and "verify: max |Δlogits|" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize("scheme", ["learned", "sinusoidal", "none"])
@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"scale_embeddings": True},
        {"tie_word_embeddings": False},
        {"scale_embeddings": True, "tie_word_embeddings": False},
    ],
    ids=["tied", "scaled", "untied", "scaled-untied"],
)
def test_gpt2_twins_export_exactly(tmp_path, cli, scheme, fields):
    """Fixed position rows (sinusoidal, or none: zeros) become GPT-2's wpe; scaled embeddings a pre-scaled wte with
    the unscaled matrix as an untied head. transformers' own GPT2LMHeadModel then gives the same logits at every
    position up to n_positions."""
    model = tiny_model(scheme, **fields)
    model.save_pretrained(tmp_path / "tiny")
    out = cli("convert", "--to", "gpt2", tmp_path / "tiny", "--out", tmp_path / "gpt2")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "verify: max |Δlogits|" in out.stdout  # checked against GPT2LMHeadModel before anything was written
    gpt2 = GPT2LMHeadModel.from_pretrained(tmp_path / "gpt2").eval()
    ids = torch.randint(0, VOCAB, (2, model.config.n_positions))
    with torch.no_grad():
        assert (gpt2(ids).logits - model(ids).logits).abs().max() <= 1e-5


def test_gpt2_export_is_complete_for_engines(tmp_path, cli):
    """What engines' converters read: GPT-2's legacy `n_ctx`, and a tokenizer, the bundled one when the source
    relies on it (no tokenizer files, GPT-2's vocabulary, like the shipped model); `--dtype` is honoured."""
    from safetensors import safe_open

    random_gpt2(vocab_size=50257, eos_token_id=50256, bos_token_id=50256).save_pretrained(tmp_path / "gpt2")
    TinyGPTForCausalLM.from_pretrained(tmp_path / "gpt2").save_pretrained(tmp_path / "tiny")  # no tokenizer files
    out = cli(
        "convert",
        "--to",
        "gpt2",
        tmp_path / "tiny",
        "--out",
        tmp_path / "back",
        "--dtype",
        "bfloat16",
        "--verify",
        "--tolerance",
        "0.05",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["n_ctx"] == config["n_positions"] == 64
    assert (tmp_path / "back" / "tokenizer.json").is_file()
    with safe_open(tmp_path / "back" / "model.safetensors", "pt") as f:
        assert {f.get_tensor(key).dtype for key in f.keys()} == {torch.bfloat16}


def test_export_to_gpt2_verifies_a_folder_without_a_tokenizer(tiny_folder, tmp_path, capsys):
    code, err = run_cli(capsys, "convert", tiny_folder, "--to", "gpt2", "--out", tmp_path / "gpt2", "--verify")
    assert code == 0, err
    assert "verify: max |Δlogits|" in err


@pytest.mark.parametrize(
    "flag, value", [("--trim-vocab", "10"), ("--n-head", "2"), ("--license", "apache-2.0"), ("--base-model", "gpt2")]
)
def test_gpt2_export_refuses_flags_it_would_ignore(tmp_path, cli, flag, value):
    tiny_model().save_pretrained(tmp_path / "tiny")
    out = cli("convert", "--to", "gpt2", tmp_path / "tiny", "--out", tmp_path / "gpt2", flag, value)
    assert out.returncode == 2 and f"{flag} only apply to a conversion to tinygpt" in out.stderr
    assert not (tmp_path / "gpt2").exists()


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"partial_rotary_factor": 0.5},
        {"scale_embeddings": True},
        {"tie_word_embeddings": False},
        {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}},
    ],
    ids=["default", "partial", "scaled", "untied", "linear-scaling"],
)
def test_rope_exports_exactly_to_gpt_neox(tmp_path, cli, fields):
    """A rope TinyGPT is GPT-NeoX with sequential residuals: per-head q/k/v rows, rotate-half RoPE on the first
    partial_rotary_factor of each head. transformers' own GPTNeoXForCausalLM gives the same logits."""
    from transformers import GPTNeoXForCausalLM

    model = tiny_model("rope", **fields)
    model.save_pretrained(tmp_path / "tiny")
    out = cli("convert", "--to", "gpt_neox", tmp_path / "tiny", "--out", tmp_path / "neox", "--verify")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "GPTNeoXForCausalLM format" in out.stdout
    neox = GPTNeoXForCausalLM.from_pretrained(tmp_path / "neox").eval()
    assert neox.config.use_parallel_residual is False
    # complete for llama.cpp's converter: an output matrix of its own, and the RoPE settings by their old names
    assert neox.config.tie_word_embeddings is False and neox.get_output_embeddings().weight.abs().sum() > 0
    saved = json.loads((tmp_path / "neox" / "config.json").read_text())
    assert saved["rotary_pct"] == model.config.rope_parameters.get("partial_rotary_factor", 1.0)
    assert saved["rotary_emb_base"] == model.config.rope_parameters["rope_theta"]
    ids = torch.randint(0, VOCAB, (2, model.config.n_positions))
    with torch.no_grad():
        assert (neox(ids).logits - model(ids).logits).abs().max() <= 1e-5
        # and the export in memory, as TransformerLens takes it: RoPE's inv_freq, in no state dict, is computed
        assert (export_gpt_neox(model)(ids).logits - model(ids).logits).abs().max() <= 1e-5


def test_only_rope_exports_to_gpt_neox(tmp_path, cli):
    tiny_model("learned").save_pretrained(tmp_path / "tiny")
    out = cli("convert", "--to", "gpt_neox", tmp_path / "tiny", "--out", tmp_path / "neox")
    assert out.returncode == 2 and "position_embedding_type='learned' has no GPT-NeoX twin" in out.stderr
    assert not (tmp_path / "neox").exists()


def test_an_export_that_does_not_match_its_source_writes_nothing(tmp_path, cli):
    """Exports are always verified: bf16 weights miss the default 1e-5 bound, so nothing is written, and the error
    says why and what to raise (it did not: --tolerance 0.05 for bf16, as for every verified conversion)."""
    tiny_model("sinusoidal").save_pretrained(tmp_path / "tiny")
    out = cli("convert", "--to", "gpt2", tmp_path / "tiny", "--out", tmp_path / "gpt2", "--dtype", "bfloat16")
    assert out.returncode == 2 and "verification failed" in out.stderr and "nothing written" in out.stderr
    assert "weights saved in bfloat16 move the logits: raise the tolerance (bfloat16 needs ~0.05)" in out.stderr
    assert not (tmp_path / "gpt2").exists()


# ---- each input read once ---------------------------------------------------------------------------------------------


def count_reads(monkeypatch, folder) -> collections.Counter:
    """{file name: times opened} for the files of `folder` from now on: JSON through `open` (ours and transformers'),
    weights through the `safe_open` transformers loads safetensors with."""
    import builtins

    import transformers.modeling_utils

    folder, reads = Path(folder).resolve(), collections.Counter()

    def counting(opener):
        def opened(file, *args, **kwargs):
            if isinstance(file, (str, os.PathLike)) and Path(file).resolve().parent == folder:
                reads[Path(file).name] += 1
            return opener(file, *args, **kwargs)

        return opened

    monkeypatch.setattr(builtins, "open", counting(builtins.open))
    monkeypatch.setattr(transformers.modeling_utils, "safe_open", counting(transformers.modeling_utils.safe_open))
    return reads


def test_converting_a_gpt2_folder_reads_each_of_its_files_once(gpt2_folder, tmp_path, monkeypatch):
    """config.json is read once (the model type, the config, the model all come from that one read), the weights
    once, and the verification compares with the tensors already in memory."""
    from hf_tinygpt.convert.conversions import gpt2_to_tinygpt

    reads = count_reads(monkeypatch, gpt2_folder)
    gpt2_to_tinygpt(str(gpt2_folder), str(tmp_path / "tiny"), tokenizer="gpt2", verify_tolerance=1e-5)
    assert reads == {"config.json": 1, "model.safetensors": 1, "generation_config.json": 1}


def test_exporting_a_tinygpt_folder_reads_each_of_its_files_once(tiny_folder, tmp_path, monkeypatch):
    from hf_tinygpt.convert.conversions import export_tinygpt

    reads = count_reads(monkeypatch, tiny_folder)
    export_tinygpt(str(tiny_folder), str(tmp_path / "gpt2"), to="gpt2", verify_tolerance=1e-5)
    assert reads == {"config.json": 1, "model.safetensors": 1, "generation_config.json": 1}


def test_verify_gpt2_reads_the_config_once(tmp_path, monkeypatch):
    """Both libraries load the weights (that is what is compared), from the one config.json read."""
    from hf_tinygpt.convert.verify import verify_gpt2_checkpoint

    random_gpt2(vocab_size=50257).save_pretrained(tmp_path / "gpt2")
    reads = count_reads(monkeypatch, tmp_path / "gpt2")
    verify_gpt2_checkpoint(str(tmp_path / "gpt2"), "To be, or not to be")
    assert reads == {"config.json": 1, "model.safetensors": 2, "generation_config.json": 2}


@pytest.mark.slow
def test_converting_a_hub_id_reads_its_files_once_from_one_commit(hub, tmp_path):
    """A branch is resolved to its commit once; config.json, the weights and the generation config are each fetched
    once, from that commit (a branch that moves meanwhile cannot mix two commits' files)."""
    from huggingface_hub import HfApi

    random_gpt2(**GPT2_VOCAB).save_pretrained(tmp_path / "gpt2")
    api = HfApi(endpoint=hub.url, token=HUB_TOKEN)
    api.create_repo("someone/tiny-gpt2", private=True)
    api.create_branch("someone/tiny-gpt2", branch="dev")
    api.upload_folder(repo_id="someone/tiny-gpt2", folder_path=tmp_path / "gpt2", revision="dev")
    hub.requests.clear()
    args = ["convert", "someone/tiny-gpt2", "--revision", "dev", "--token", HUB_TOKEN, "--out", tmp_path / "tiny"]
    run = subprocess.run(
        [sys.executable, "-m", "hf_tinygpt.cli", *map(str, args), "--tokenizer", "gpt2", "--verify"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=hub_subprocess_env(hub, tmp_path),
    )
    assert run.returncode == 0 and "verify: max |Δlogits|" in run.stdout, run.stderr[-3000:]
    assert [path for _, path in hub.requests if "/revision/" in path] == ["/api/models/someone/tiny-gpt2/revision/dev"]
    fetched = [path for method, path in hub.requests if method == "GET" and "/resolve/" in path]
    names = ("config.json", "model.safetensors", "generation_config.json")
    assert sorted(path.rsplit("/", 1)[1] for path in fetched) == sorted(names)
    assert len({path.split("/resolve/")[1].split("/")[0] for path in fetched}) == 1  # one commit
    assert all(re.search(r"/resolve/[0-9a-f]{40}/", path) for path in fetched)


def test_the_library_holds_the_convert_policy(gpt2_folder, tiny_folder, tmp_path, capsys):
    """`convert` (what the verb calls): an export is verified even unasked, a conversion to tinygpt only when asked;
    the options of a conversion to tinygpt are refused for an export, by their Python names, which the command
    line writes as its flags."""
    from hf_tinygpt.convert.conversions import ConversionSettings, convert

    message = "`n_head`, `trim_vocab` only apply to a conversion to tinygpt, not with `to='gpt2'`"
    with pytest.raises(ValueError, match=re.escape(message)):
        convert(ConversionSettings(str(tiny_folder), str(tmp_path / "gpt2"), to="gpt2", n_head=2, trim_vocab=10))
    code, err = run_cli(
        capsys,
        "convert",
        tiny_folder,
        "--to",
        "gpt2",
        "--out",
        tmp_path / "gpt2",
        "--n-head",
        "2",
        "--trim-vocab",
        "10",
    )
    assert code == 2 and err.strip().splitlines()[-1] == (
        "hf-tinygpt convert: error: --n-head, --trim-vocab only apply to a conversion to tinygpt, not with --to gpt2"
    )
    assert not (tmp_path / "gpt2").exists()
    exported = convert(ConversionSettings(str(tiny_folder), str(tmp_path / "gpt2"), to="gpt2"))
    assert exported.delta is not None and exported.tolerance == 1e-5 and exported.form == "GPT2LMHeadModel format"
    converted = convert(ConversionSettings(str(gpt2_folder), str(tmp_path / "converted"), tokenizer="gpt2"))
    assert converted.delta is None and converted.tolerance is None
    assert converted.form == "gpt2 → tinygpt, 2 layers, n_embd 32"
    verified = convert(
        ConversionSettings(str(gpt2_folder), str(tmp_path / "converted"), tokenizer="gpt2", force=True, verify=True)
    )
    assert verified.delta <= 1e-5 and verified.tolerance == 1e-5
    with pytest.raises(ValueError, match="`tolerance` must be a number >= 0, got -1"):
        convert(
            ConversionSettings(str(gpt2_folder), str(tmp_path / "other"), tokenizer="gpt2", verify=True, tolerance=-1)
        )


# ---- the strict loader: every tensor of the checkpoint, and only those, in the model's shapes ------------------------


def test_a_missing_tensor_is_reported_by_from_pretrained_and_refused_by_the_strict_loader(tmp_path, cli):
    tiny_model().save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["transformer.h.1.mlp.c_fc.bias"]
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    reports = []  # transformers' LOAD REPORT, which says the tensor was "newly initialized"
    handler = logging.Handler()
    handler.emit = lambda record: reports.extend([record.getMessage()] if "LOAD REPORT" in record.getMessage() else [])
    logging.getLogger("transformers.modeling_utils").addHandler(handler)
    try:
        # transformers' contract: the tensor is initialised and reported, as for any model.
        _, info = TinyGPTForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
        assert set(info["missing_keys"]) == {"transformer.h.1.mlp.c_fc.bias"}
        assert len(reports) == 1 and "LOAD REPORT" in reports[0]
        # What this package owns is strict: the library's loader and every command refuse it, naming the tensor
        # (and only the error says so: the report would first say the tensor was initialised).
        with pytest.raises(ValueError, match=r"Missing: \['transformer.h.1.mlp.c_fc.bias'\]"):
            load_strictly(tmp_path)
        assert len(reports) == 1
    finally:
        logging.getLogger("transformers.modeling_utils").removeHandler(handler)
    result = cli("generate", "hi", "--model", tmp_path, "--max-new-tokens", "2")
    assert result.returncode != 0 and "Missing: ['transformer.h.1.mlp.c_fc.bias']" in result.stderr


def test_gpt2_folder_with_missing_and_misshapen_tensors_lists_them(tmp_path):
    random_gpt2().save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["transformer.h.0.ln_2.weight"]
    tensors["transformer.h.1.attn.c_proj.bias"] = torch.zeros(31)
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError) as error:
        load_strictly(tmp_path)
    assert "Missing: ['transformer.h.0.ln_2.weight']" in str(error.value)
    assert "transformer.h.1.attn.c_proj.bias is (31,) in the checkpoint, (32,) in the model" in str(error.value)


def test_gpt2_folder_without_weights_names_the_files_it_looked_for(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 4}))
    with pytest.raises(OSError, match="model.safetensors"):
        TinyGPTForCausalLM.from_pretrained(tmp_path)


def test_a_tinygpt_folder_with_unexpected_tensors_is_refused(tmp_path):
    """A learned model whose config was edited to rope would silently drop its trained `wpe`."""
    tiny_model("learned").save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["position_embedding_type"] = "rope"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"Unexpected: \['transformer.wpe.weight'\]"):
        load_strictly(tmp_path)


def test_a_target_class_checkpoint_that_does_not_fit_is_named_as_well(tmp_path):
    """The strict loader reads exports back with their own class (GPT-NeoX names its layer count differently)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    GPTNeoXForCausalLM(
        GPTNeoXConfig(
            hidden_size=32,
            num_attention_heads=4,
            num_hidden_layers=2,
            intermediate_size=64,
            vocab_size=VOCAB,
            tie_word_embeddings=False,
        )
    ).save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["embed_out.weight"]
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(
        ValueError, match=r"does not match the model \(2 layers\)\. Missing: \['(embed_out|lm_head).weight'\]"
    ):
        load_strictly(tmp_path, GPTNeoXForCausalLM)


# ---- bad checkpoints: a clear message and no partial output ----------------------------------------------------------


def broken_source(tmp_path, kind):
    gpt2 = random_gpt2()
    folder = tmp_path / "src"
    gpt2.save_pretrained(folder)
    weights = folder / "model.safetensors"
    if kind == "truncated safetensors":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
        return folder, r"src: cannot read this checkpoint \(SafetensorError"
    if kind == "wrong shapes":
        tensors = load_file(weights)
        tensors["transformer.h.0.mlp.c_fc.weight"] = torch.zeros(32, 100)
        save_file(tensors, weights, metadata={"format": "pt"})
        return folder, r"transformer.h.0.mlp.c_fc.weight is \(32, 100\) in the checkpoint, \(32, 128\) in the model"
    if kind == "config/weights disagree":
        config = json.loads((folder / "config.json").read_text())
        config["n_layer"] = 3
        (folder / "config.json").write_text(json.dumps(config))
        return folder, r"Missing: \['transformer.h.2"
    if kind == "unknown format":
        (tmp_path / "weights.npz").write_bytes(b"not a checkpoint")
        return tmp_path / "weights.npz", "unknown checkpoint format '.npz'"
    if kind == "missing weights":
        weights.unlink()
        return folder, "no file named model.safetensors, or pytorch_model.bin"
    if kind == "missing source":
        return tmp_path / "nowhere", "nowhere: no such model folder"
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind",
    [
        "truncated safetensors",
        "wrong shapes",
        "config/weights disagree",
        "unknown format",
        "missing weights",
        "missing source",
    ],
)
def test_bad_sources_fail_clearly_and_leave_nothing(tmp_path, kind, capsys):
    src, message = broken_source(tmp_path, kind)
    assert main(["convert", str(src), "--out", str(tmp_path / "out"), "--tokenizer", "gpt2"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("hf-tinygpt convert: error:") and re.search(message, error), error
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.partial-")]


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_convert_refuses_non_finite_weights(gpt2_folder, tmp_path, capsys, value):
    tensors = load_file(gpt2_folder / "model.safetensors")
    tensors["transformer.h.1.mlp.c_fc.weight"][3, 4] = value
    save_file(tensors, gpt2_folder / "model.safetensors", metadata={"format": "pt"})
    code, err = run_cli(capsys, "convert", gpt2_folder, "--out", tmp_path / "out", "--tokenizer", "gpt2")
    assert code == 2 and "inf or NaN values: transformer.h.1.mlp.c_fc.weight" in err
    assert not (tmp_path / "out").exists()


def test_convert_refuses_integer_tensors_in_a_weights_file_by_name(gpt2_folder, tmp_path, capsys):
    """(A GPT-2 folder is read by transformers' GPT2LMHeadModel, which casts tensors to the model's dtype.)"""
    tensors = load_file(gpt2_folder / "model.safetensors")
    tensors["transformer.h.0.ln_1.bias"] = torch.zeros(32, dtype=torch.int64)
    save_file(tensors, gpt2_folder / "model.safetensors", metadata={"format": "pt"})
    code, err = run_cli(
        capsys, "convert", gpt2_folder / "model.safetensors", "--out", tmp_path / "out", "--tokenizer", "gpt2"
    )
    assert code == 2 and "not floating-point weights: transformer.h.0.ln_1.bias (torch.int64)" in err


def weights_file(tmp_path, tensors) -> Path:
    path = tmp_path / "weights.bin"
    torch.save(tensors, path)
    return path


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: weights_file(p, [torch.zeros(2)]), "holds list, not a state dict"),
        (lambda p: weights_file(p, {3: torch.zeros(2)}), "holds dict, not a state dict"),
        (lambda p: weights_file(p, {"wte.weight": torch.zeros(5)}), "not a GPT-2 checkpoint"),
        (lambda p: nanogpt_file(p, model={7: torch.zeros(2)}), "'model' must map tensor names to tensors"),
        (lambda p: nanogpt_file(p, vocab_size=None), "model_args\\['vocab_size'\\] is None, not an integer"),
    ],
)
def test_malformed_weights_files_are_named(tmp_path, capsys, make, message):
    code, err = run_cli(capsys, "convert", make(tmp_path), "--out", tmp_path / "out", "--tokenizer", "gpt2")
    assert code == 2 and re.search(message, err), err


def nanogpt_file(tmp_path, model=None, **args) -> Path:
    model_args = {"vocab_size": 64, "block_size": 16, "n_embd": 8, "n_layer": 1, "n_head": 2, **args}
    torch.save(
        {"model": model or {"transformer.wte.weight": torch.zeros(64, 8)}, "model_args": model_args},
        tmp_path / "ckpt.pt",
    )
    return tmp_path / "ckpt.pt"
