"""Bad input gets a clear error that names the problem, and nothing is silently random-initialised."""

import json

import pytest
import torch
from conftest import VOCAB, random_gpt2, tiny_model
from safetensors.torch import load_file, save_file

from hf_tinygpt import TinyGPTConfig, TinyGPTForCausalLM
from hf_tinygpt.checkpoints.reading import load_strictly


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(n_embd=30, n_head=4), r"n_embd \(30\) must be divisible by n_head \(4\)"),
        (dict(position_embedding_type="relative"), "position_embedding_type='relative' is not one of"),
        (dict(position_embedding_type="rope", n_embd=48, n_head=4, partial_rotary_factor=0.25), "must be even"),
        (dict(position_embedding_type="rope", partial_rotary_factor=1.5), "partial_rotary_factor must be in"),
        (dict(position_embedding_type="rope", rope_parameters={"rope_type": "spiral"}), "rope_type"),
        (dict(position_embedding_type="alibi", rope_theta=500.0), "only apply to position_embedding_type='rope'"),
        (dict(position_embedding_type="sinusoidal", n_embd=33, n_head=3), "needs an even n_embd"),
        (dict(activation_function="gelu_newest"), "activation_function='gelu_newest'"),
        (dict(n_layer=0), "n_layer must be a positive integer"),
        (dict(attn_pdrop=1.0), r"attn_pdrop must be in \[0, 1\)"),
    ],
)
def test_invalid_config_raises_value_error_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        TinyGPTConfig(**fields)


def test_standard_aliases_resolve():
    config = TinyGPTConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=8, max_position_embeddings=99)
    assert (config.n_embd, config.n_layer, config.n_head, config.n_positions) == (64, 3, 8, 99)
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (64, 3, 8)
    assert config.max_position_embeddings == 99


def test_rope_options_land_in_rope_parameters():
    config = TinyGPTConfig(position_embedding_type="rope", rope_theta=500.0, partial_rotary_factor=0.5)
    assert config.rope_parameters == {"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5}
    assert config.rotary_dim == 32
    scaled = TinyGPTConfig(position_embedding_type="rope", rope_parameters={"rope_type": "yarn", "factor": 4.0})
    assert scaled.rope_parameters["original_max_position_embeddings"] == 1024
    assert not hasattr(TinyGPTConfig(position_embedding_type="alibi"), "rope_parameters")


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


def test_a_missing_tensor_is_reported_by_from_pretrained_and_refused_by_the_strict_loader(tmp_path, cli):
    tiny_model().save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["transformer.h.1.mlp.c_fc.bias"]
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    # transformers' contract: the tensor is initialised and reported, as for any model.
    _, info = TinyGPTForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert set(info["missing_keys"]) == {"transformer.h.1.mlp.c_fc.bias"}
    # What this package owns is strict: the library's loader and every command refuse it, naming the tensor.
    with pytest.raises(ValueError, match=r"Missing: \['transformer.h.1.mlp.c_fc.bias'\]"):
        load_strictly(tmp_path)
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


@pytest.mark.parametrize(
    "option, value",
    [("scale_attn_by_inverse_layer_idx", True), ("reorder_and_upcast_attn", True), ("scale_attn_weights", False)],
)
def test_gpt2_options_that_change_the_math_are_refused_by_name(tmp_path, option, value):
    random_gpt2(**{option: value}).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=f"{option}={value}"):
        TinyGPTForCausalLM.from_pretrained(tmp_path)


def test_gpt2_folder_without_weights_names_the_files_it_looked_for(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 4}))
    with pytest.raises(OSError, match="model.safetensors"):
        TinyGPTForCausalLM.from_pretrained(tmp_path)


def test_sequence_past_n_positions_in_a_cache_is_refused():
    model = tiny_model("learned", n_positions=8)
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    model(torch.randint(0, VOCAB, (1, 8)), cache=cache, use_cache=True)
    with pytest.raises(ValueError, match="position 8 was requested"):
        model(torch.randint(0, VOCAB, (1, 1)), cache=cache, use_cache=True)


@pytest.mark.parametrize(
    "rope_parameters, message",
    [
        ({"rope_type": "linear"}, "lack 'factor'"),
        ({"rope_type": "dynamic"}, "lack 'factor'"),
        ({"rope_type": "yarn", "factor": 0.5}, "must be a finite number >= 1"),
        ({"rope_type": "default", "rope_theta": -5.0}, "must be a finite number > 0"),
    ],
)
def test_incomplete_rope_parameters_are_named(rope_parameters, message):
    with pytest.raises(ValueError, match=message):
        TinyGPTConfig(position_embedding_type="rope", rope_parameters=rope_parameters)


def test_gpt2_folder_takes_config_overrides(tmp_path):
    random_gpt2().save_pretrained(tmp_path)
    model = TinyGPTForCausalLM.from_pretrained(tmp_path, resid_pdrop=0.3)
    assert model.config.resid_pdrop == 0.3 and model.transformer.h[0].mlp.dropout.p == 0.3
