"""TinyGPT behaves like any transformers causal LM: the Auto classes and pipeline, a saved folder that carries its own
code (and loads where hf_tinygpt is not installed), the tied head, forward-pass features and the input checks of a
forward, and transformers' loading contract (the strict loader every command uses is in test_conversion.py)."""

import json
import os
import subprocess
import sys
import textwrap
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
from conftest import (
    REMOTE_CODE_SCRIPT,
    SCHEME_VARIANTS,
    VOCAB,
    save_with_tokenizer,
    text_model,
    tiny_config,
    tiny_model,
)
from safetensors import safe_open
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, pipeline

import hf_tinygpt
from hf_tinygpt import TinyGPTConfig, TinyGPTForCausalLM, TinyGPTModel
from hf_tinygpt.model import BUNDLE

# ---- Auto classes and pipeline -------------------------------------------------------------------------------


def test_auto_classes_from_config_object():
    config = tiny_config("rope")
    assert isinstance(AutoConfig.for_model("tinygpt"), TinyGPTConfig)
    assert type(AutoModel.from_config(config)) is TinyGPTModel
    assert type(AutoModelForCausalLM.from_config(config)) is TinyGPTForCausalLM


def test_auto_classes_from_saved_folder(tmp_path, scheme):
    model = tiny_model(scheme)
    model.save_pretrained(tmp_path)
    assert type(AutoConfig.from_pretrained(tmp_path)) is TinyGPTConfig
    body = AutoModel.from_pretrained(tmp_path)
    lm = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert type(body) is TinyGPTModel and type(lm) is TinyGPTForCausalLM
    ids = torch.randint(0, VOCAB, (1, 10))
    with torch.no_grad():
        assert torch.equal(lm(ids).logits, model(ids).logits)
        assert torch.equal(body(ids).last_hidden_state, model.transformer(ids).last_hidden_state)


def test_pipeline_from_object_and_from_folder(tmp_path):
    model, tokenizer = text_model(), hf_tinygpt.gpt2_tokenizer()
    kwargs = dict(max_new_tokens=8, do_sample=False)
    from_object = pipeline("text-generation", model=model, tokenizer=tokenizer)("To be, or not", **kwargs)
    save_with_tokenizer(model, tmp_path)
    from_folder = pipeline("text-generation", model=str(tmp_path))("To be, or not", **kwargs)
    assert from_object[0]["generated_text"].startswith("To be, or not")
    assert from_object == from_folder
    # and the pipeline's continuation is exactly the model's greedy continuation
    ids = tokenizer("To be, or not", return_tensors="pt").input_ids
    expected = model.generate(ids, **kwargs, pad_token_id=50256)
    assert from_object[0]["generated_text"] == tokenizer.decode(expected[0])


# ---- remote code: a saved folder carries its own code ---------------------------------------------------------------


def test_saved_folder_carries_code_and_auto_map(tmp_path):
    tiny_model("alibi").save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "tinygpt"
    assert config["auto_map"] == {  # every class: vLLM's Transformers backend builds the body with AutoModel
        "AutoConfig": "configuration_tinygpt.TinyGPTConfig",
        "AutoModel": "modeling_tinygpt.TinyGPTModel",
        "AutoModelForCausalLM": "modeling_tinygpt.TinyGPTForCausalLM",
    }
    assert sorted(path.name for path in tmp_path.glob("*.py")) == sorted(BUNDLE)
    for code_file in BUNDLE:
        source = (tmp_path / code_file).read_text()
        assert "import hf_tinygpt" not in source and "from hf_tinygpt" not in source


def generate_where_hf_tinygpt_is_not_installed(models: dict, tmp_path) -> list[dict]:
    """What REMOTE_CODE_SCRIPT reports for each folder of `models` (folder: the model saved there), in one process,
    checked against the tokens each model generates here."""
    tokenizer = hf_tinygpt.gpt2_tokenizer()
    prompt = "Now is the winter of our discontent"
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run(
        [sys.executable, "-c", REMOTE_CODE_SCRIPT, prompt, *map(str, models)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = [json.loads(line) for line in run.stdout.strip().splitlines() if line.startswith("{")]
    for (folder, model), result in zip(models.items(), results, strict=True):
        expected = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=50256)[0].tolist()
        assert result["class"].startswith("transformers_modules."), folder  # the copied code, not the package
        assert result["tokens"] == expected, folder
        assert result["text"] == tokenizer.decode(expected), folder
        assert result["body"] == "TinyGPTModel" and result["config_sent_by_value"], folder
    return results


@pytest.mark.slow
def test_remote_code_folders_load_where_hf_tinygpt_is_not_installed(tmp_path):
    """Every scheme and variant, in one process: the bundle's code is what builds each."""
    models = {}
    for variant, (scheme, fields) in SCHEME_VARIANTS.items():
        model = text_model(scheme, **fields)
        models[save_with_tokenizer(model, tmp_path / variant)] = model
    results = generate_where_hf_tinygpt_is_not_installed(models, tmp_path)
    assert all(result["projections"] == ["Linear"] for result in results)


@pytest.mark.slow
def test_an_int8_remote_code_folder_loads_and_decodes_where_hf_tinygpt_is_not_installed(tmp_path):
    pytest.importorskip("torchao", reason="the [int8] extra (torchao) is not installed")
    from hf_tinygpt.generate.text import int8_weight_only

    float_folder = save_with_tokenizer(text_model("rope"), tmp_path / "float")
    model = TinyGPTForCausalLM.from_pretrained(
        float_folder, dtype=torch.bfloat16, quantization_config=int8_weight_only()
    )
    folder = save_with_tokenizer(model.eval(), tmp_path / "int8")
    (result,) = generate_where_hf_tinygpt_is_not_installed({folder: model}, tmp_path)
    # torchao's own product: the int8 kernels belong to hf_tinygpt's decoding code, not to the folder's bundle.
    assert result["projections"] == ["Linear"]


# ---- tied head -----------------------------------------------------------------------------------------------


def test_head_is_tied_after_construction_loading_and_resizing(tmp_path):
    model = tiny_model()
    assert model.lm_head.weight is model.transformer.wte.weight
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert "transformer.wte.weight" in keys and "lm_head.weight" not in keys  # stored once
    loaded = TinyGPTForCausalLM.from_pretrained(tmp_path)
    assert loaded.lm_head.weight is loaded.transformer.wte.weight
    loaded.resize_token_embeddings(VOCAB + 13)
    assert loaded.lm_head.weight is loaded.transformer.wte.weight
    assert loaded.lm_head.weight.shape == (VOCAB + 13, 32) and loaded.config.vocab_size == VOCAB + 13


def test_untied_head_is_its_own_tensor_and_round_trips(tmp_path):
    model = tiny_model(tie_word_embeddings=False)
    assert model.lm_head.weight is not model.transformer.wte.weight
    assert not torch.equal(model.lm_head.weight, model.transformer.wte.weight)
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        assert {"lm_head.weight", "transformer.wte.weight"} <= set(f.keys())
    loaded = TinyGPTForCausalLM.from_pretrained(tmp_path)
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)
    assert hf_tinygpt.parameter_breakdown(loaded)["lm_head"] == VOCAB * 32


# ---- forward-pass features -----------------------------------------------------------------------------------


def test_labels_give_the_shifted_cross_entropy():
    model = tiny_model("rope")
    ids = torch.randint(0, VOCAB, (2, 9))
    labels = ids.clone()
    labels[1, 5:] = -100
    with torch.no_grad():
        out = model(ids, labels=labels)
    expected = torch.nn.functional.cross_entropy(
        out.logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1), ignore_index=-100
    )
    assert abs(out.loss.item() - expected.item()) <= 1e-6


def test_logits_to_keep():
    model = tiny_model("alibi")
    ids = torch.randint(0, VOCAB, (2, 9))
    with torch.no_grad():
        full = model(ids).logits
        last = model(ids, logits_to_keep=1).logits
        chosen = model(ids, logits_to_keep=torch.tensor([0, 4])).logits
    assert last.shape == (2, 1, VOCAB) and (last - full[:, -1:]).abs().max() <= 1e-6
    assert chosen.shape == (2, 2, VOCAB) and (chosen - full[:, [0, 4]]).abs().max() <= 1e-6


def test_gradient_checkpointing_gives_the_same_gradients(scheme):
    def gradients(checkpointing):
        model = tiny_model(scheme, resid_pdrop=0.0)
        model.train()
        if checkpointing:
            # the newer name; gradient_checkpointing_enable is its deprecated alias
            getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
            assert model.transformer.gradient_checkpointing
        ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
        model(ids, labels=ids).loss.backward()
        return {name: p.grad.clone() for name, p in model.named_parameters()}

    plain, checkpointed = gradients(False), gradients(True)
    assert plain.keys() == checkpointed.keys()
    for name in plain:
        assert (plain[name] - checkpointed[name]).abs().max() <= 1e-6, name


def test_device_map_auto_loads_whole_blocks(tmp_path):
    assert TinyGPTForCausalLM._no_split_modules == ["TinyGPTBlock"]
    model = tiny_model("rope")
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, device_map="auto")
    ids = torch.randint(0, VOCAB, (1, 8))
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)


def test_return_dict_false_gives_a_tuple():
    model = tiny_model()
    ids = torch.randint(0, VOCAB, (1, 5))
    logits = model(ids, return_dict=False, use_cache=False)[0]
    assert logits.shape == (1, 5, VOCAB)


@pytest.mark.parametrize("bad_id", [VOCAB, VOCAB + 100, -1])
def test_token_ids_outside_the_vocabulary_are_rejected(bad_id):
    model = tiny_model()
    ids = torch.tensor([[3, 4, bad_id, 5]])
    with pytest.raises(ValueError, match=rf"Token id {bad_id} is outside the vocabulary \(vocab_size={VOCAB}\)"):
        model(ids)


def test_input_ids_and_inputs_embeds_are_exclusive():
    model = tiny_model()
    ids = torch.tensor([[1, 2]])
    with pytest.raises(ValueError, match="exactly one of input_ids or inputs_embeds"):
        model(ids, inputs_embeds=model.transformer.wte(ids))
    with pytest.raises(ValueError, match="exactly one of input_ids or inputs_embeds"):
        model()


def test_an_input_of_no_tokens_is_refused_by_name():
    """GPT2LMHeadModel fails inside its attention on one (a RuntimeError; transformers' server answers it with a 500)."""
    model = tiny_model()
    no_tokens = torch.zeros(1, 0, dtype=torch.long)
    with pytest.raises(ValueError, match="has no tokens"):
        model(no_tokens)
    with pytest.raises(ValueError, match="has no tokens"):
        model.generate(no_tokens, max_new_tokens=2, do_sample=False)


def test_an_unbatched_sequence_is_refused_with_the_shape_asked_for():
    """(`model(torch.tensor([1, 2, 3]))` failed deep inside with "The size of tensor a (3) must match the size of
    tensor b (32)"; GPT-2's fails with an IndexError.)"""
    model = tiny_model()
    for given in (dict(input_ids=torch.tensor([1, 2, 3])), dict(inputs_embeds=torch.zeros(3, 32))):
        with pytest.raises(ValueError, match=r"expected, got shape \(3,( 32)?\) \(one sequence is a batch of one"):
            model(**given)
    assert model(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, model.config.vocab_size)


def test_bf16_forward_runs_and_stays_close_to_fp32():
    model = tiny_model("rope")
    ids = torch.randint(0, VOCAB, (1, 16))
    with torch.no_grad():
        fp32 = model(ids).logits
        bf16 = model.to(torch.bfloat16)(ids).logits
    assert bf16.dtype == torch.bfloat16
    assert (bf16.float() - fp32).abs().max() < 0.05


# ---- transformers' loading contract (the strict loader the CLI uses is in test_conversion.py) ---------------------


@pytest.mark.parametrize("tied", [True, False])
def test_a_base_model_checkpoint_loads_into_the_lm_class(tmp_path, tied):
    """A TinyGPTModel checkpoint (no `transformer.` prefix, no head) loads into TinyGPTForCausalLM. A tied head is
    never "missing"; an untied one is initialised and reported, as transformers does for any model."""
    lm = tiny_model("rope", tie_word_embeddings=tied)
    lm.transformer.save_pretrained(tmp_path)
    loaded, info = TinyGPTForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert set(info["missing_keys"]) == (set() if tied else {"lm_head.weight"}) and not info["unexpected_keys"]
    assert torch.equal(loaded.transformer.wte.weight, lm.transformer.wte.weight)
    if tied:
        ids = torch.randint(0, VOCAB, (2, 9))
        with torch.no_grad():
            assert torch.equal(loaded.eval()(ids).logits, lm(ids).logits)


def test_an_empty_state_dict_initialises_every_weight_as_transformers_does():
    """`from_pretrained(None, config=..., state_dict={})`: every tensor comes from `_init_weights`, none from meta."""
    model = TinyGPTForCausalLM.from_pretrained(None, config=tiny_config("sinusoidal"), state_dict={})
    assert all(t.device.type == "cpu" for t in [*model.parameters(), *model.buffers()])
    built = TinyGPTForCausalLM(tiny_config("sinusoidal"))
    assert torch.equal(model.transformer.positions.inv_freq, built.transformer.positions.inv_freq)
    assert model.lm_head.weight is model.transformer.wte.weight


def test_the_old_cache_argument_name_still_works():
    """transformers 5.24 renamed `past_key_values=` to `cache=`; the old name gives the same result (with transformers'
    own deprecation warning on 5.24+, as its in-tree models do)."""
    from hf_tinygpt.model.compat import CACHE_FIELD

    model, ids = tiny_model("rope"), torch.randint(0, VOCAB, (1, 6))
    renamed = CACHE_FIELD == "cache"
    with torch.no_grad():
        cache = getattr(model(ids[:, :5], use_cache=True), CACHE_FIELD)
        with pytest.warns(FutureWarning, match="`past_key_values` is deprecated") if renamed else nullcontext():
            new = model(ids[:, 5:], past_key_values=cache).logits
        full = model(ids).logits[:, 5:]
    assert (new - full).abs().max() < 1e-5


def test_the_packed_qkv_tensor_parallel_style_is_registered_where_transformers_looks():
    """`base_model_tp_plan` names "packed_qkv_colwise" for c_attn; transformers resolves plan names through this
    registry (every supported version has it in `tensor_parallel`), so a missing entry would only fail under torchrun."""
    from transformers.distributed.tensor_parallel import ALL_PARALLEL_STYLES

    assert hf_tinygpt.TinyGPTConfig.base_model_tp_plan["h.*.attn.c_attn"] == "packed_qkv_colwise"
    assert "packed_qkv_colwise" in ALL_PARALLEL_STYLES


LOAD_AND_COUNT = textwrap.dedent(
    """
    import sys
    import hf_tinygpt
    from transformers import GPT2LMHeadModel

    model_class = {"gpt2": GPT2LMHeadModel, "tinygpt": hf_tinygpt.TinyGPTForCausalLM}[sys.argv[1]]
    model_class.from_pretrained(sys.argv[2], token=sys.argv[3])
    """
)


@pytest.mark.slow
def test_a_tinygpt_hub_repo_costs_no_request_beyond_what_a_gpt2_repo_costs(hub, tmp_path):
    """Counted on the loopback Hub, with an empty cache and again with a warm one: TinyGPTForCausalLM reads its
    config.json once, as GPT2LMHeadModel does (finding out whether a checkpoint is GPT-2's costs nothing more)."""
    from conftest import HUB_TOKEN, hub_subprocess_env, random_gpt2
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.url, token=HUB_TOKEN)
    for repo, model in [("me/gpt2", random_gpt2()), ("me/tinygpt", tiny_model("rope"))]:
        model.save_pretrained(tmp_path / repo)
        api.create_repo(repo)
        api.upload_folder(repo_id=repo, folder_path=tmp_path / repo)
    requests = {}
    for kind in ("gpt2", "tinygpt"):
        for cache in ("cold", "warm"):
            before = len(hub.requests)
            run = subprocess.run(
                [sys.executable, "-c", LOAD_AND_COUNT, kind, f"me/{kind}", HUB_TOKEN],
                capture_output=True,
                text=True,
                env=hub_subprocess_env(hub, tmp_path),
            )
            assert run.returncode == 0, run.stderr[-3000:]
            requests[kind, cache] = [
                (method, path.split("?")[0].replace(kind, "REPO"))
                for method, path in hub.requests[before:]
                if "agent-harnesses" not in path
            ]
    for cache in ("cold", "warm"):
        assert len(requests["tinygpt", cache]) <= len(requests["gpt2", cache]), requests
    assert sum(path.endswith("/config.json") and method == "GET" for method, path in requests["tinygpt", "cold"]) == 1


SAVED_BEFORE_THE_MOVE = Path(__file__).parent / "fixtures" / "saved_before_the_move"


@pytest.mark.parametrize("scheme", ["learned", "rope", "alibi"])
def test_a_folder_saved_before_the_package_was_rearranged_loads_with_its_logits(scheme):
    """Folders saved by the package as it stood before its folders were named by job (commit c8a3b30, the model
    file holding the positions, `checkpoints/` and `tools/`) load here with the logits they had then. The code
    files `save_pretrained` copied beside them are left out of the fixture: the installed package's classes load
    a tinygpt folder, never its copy (and the copy would be a second, stale copy of the model in the tree)."""
    expected = json.loads((SAVED_BEFORE_THE_MOVE / "expected_logits.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(SAVED_BEFORE_THE_MOVE / scheme)
    assert type(model) is TinyGPTForCausalLM and model.config.position_embedding_type == scheme
    with torch.no_grad():
        logits = model(torch.tensor([expected["input_ids"]])).logits[0, -1]
    torch.testing.assert_close(logits, torch.tensor(expected["last_logits"][scheme]), rtol=0, atol=1e-5)
