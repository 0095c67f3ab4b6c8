"""TinyGPTConfig: the standard aliases, where the RoPE options land, every value it refuses (by field name, at
construction, before a model is built or a checkpoint read), and how a GPT-2 checkpoint's config is taken over.

The defaults (GPT-2 small, 124,439,808 parameters) are pinned in test_params.py; a config.json that does not parse,
on the command line, in test_cli_errors.py.
"""

import pytest
from conftest import random_gpt2

from hf_tinygpt import TinyGPTConfig, TinyGPTForCausalLM
from hf_tinygpt.model.positions import RotaryPositions

# ---- names and derived fields --------------------------------------------------------------------------------------


def test_standard_aliases_resolve():
    config = TinyGPTConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=8, max_position_embeddings=99)
    assert (config.n_embd, config.n_layer, config.n_head, config.n_positions) == (64, 3, 8, 99)
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (64, 3, 8)
    assert config.max_position_embeddings == 99


def test_rope_options_land_in_rope_parameters():
    config = TinyGPTConfig(position_embedding_type="rope", rope_theta=500.0, partial_rotary_factor=0.5)
    assert config.rope_parameters == {"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5}
    assert RotaryPositions.turning_dims(config) == 32
    in_the_dict = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    assert TinyGPTConfig(position_embedding_type="rope", rope_parameters=in_the_dict).rope_parameters == in_the_dict
    scaled = TinyGPTConfig(position_embedding_type="rope", rope_parameters={"rope_type": "yarn", "factor": 4.0})
    assert scaled.rope_parameters["original_max_position_embeddings"] == 1024
    assert not hasattr(TinyGPTConfig(position_embedding_type="alibi"), "rope_parameters")


def test_a_schemes_own_fields_take_their_defaults_and_survive_a_round_trip(tmp_path):
    t5 = TinyGPTConfig(position_embedding_type="t5", relative_attention_max_distance=64)
    assert (t5.relative_attention_num_buckets, t5.relative_attention_max_distance) == (32, 64)
    assert not hasattr(t5, "kerple_kernel")  # another scheme's field is not there at all, nor in config.json
    assert TinyGPTConfig(position_embedding_type="kerple").kerple_kernel == "log"
    fire = TinyGPTConfig(position_embedding_type="fire", fire_init_L=64.0)
    assert (fire.fire_mlp_width, fire.fire_init_c, fire.fire_init_L) == (32, 0.1, 64.0)
    fire.save_pretrained(tmp_path)
    assert TinyGPTConfig.from_pretrained(tmp_path).to_dict() == fire.to_dict()


# ---- every bad value is refused by name ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(n_embd=30, n_head=4), r"n_embd \(30\) must be divisible by n_head \(4\)"),
        (dict(position_embedding_type="relative"), "position_embedding_type='relative' is not one of"),
        (dict(position_embedding_type="rope", n_embd=48, n_head=4, partial_rotary_factor=0.25), "must be even"),
        (dict(position_embedding_type="rope", partial_rotary_factor=1.5), "partial_rotary_factor must be in"),
        (dict(position_embedding_type="rope", partial_rotary_factor=0.0), "partial_rotary_factor must be in"),
        (dict(position_embedding_type="rope", rope_parameters={"rope_type": "spiral"}), "rope_type"),
        (dict(position_embedding_type="alibi", rope_theta=500.0), "only applies to position_embedding_type='rope'"),
        (dict(position_embedding_type="sinusoidal", n_embd=33, n_head=3), "needs an even n_embd"),
        (dict(activation_function="gelu_newest"), "activation_function='gelu_newest'"),
        (dict(n_layer=0), "n_layer must be a positive integer"),
        (dict(attn_pdrop=1.0), r"attn_pdrop must be in \[0, 1\)"),
        (
            dict(position_embedding_type="alibi", relative_attention_num_buckets=8),
            "only applies to .*'t5', not 'alibi'",
        ),
        (dict(position_embedding_type="fire", kerple_kernel="log"), "kerple_kernel only applies to .*'kerple'"),
        (
            dict(position_embedding_type="t5", relative_attention_num_buckets=1),
            r"num_buckets must be an integer in \[2",
        ),
        (dict(position_embedding_type="t5", relative_attention_max_distance=16), r"above .*num_buckets / 2 \(16"),
        (dict(position_embedding_type="t5", relative_attention_max_distance=True), "max_distance must be an integer"),
        (dict(position_embedding_type="kerple", kerple_kernel="cubic"), "kerple_kernel='cubic' is not one of"),
        (dict(position_embedding_type="fire", fire_mlp_width=0), r"fire_mlp_width must be an integer in \[1"),
        (dict(position_embedding_type="fire", fire_init_c=-0.1), "fire_init_c must be a finite number > 0"),
        (dict(position_embedding_type="fire", fire_init_L=float("nan")), "fire_init_L must be a finite number > 0"),
        (dict(position_embedding_type="rope", no_rope_layer_interval=0), "no_rope_layer_interval must be a positive"),
        (dict(position_embedding_type="xpos", no_rope_layer_interval=2), "no_rope_layer_interval only applies to"),
        (dict(position_embedding_type="xpos", xpos_scale_base=0), "xpos_scale_base must be a finite number > 0"),
        (dict(position_embedding_type="xpos", n_embd=36, n_head=4), r"head_dim \(9\) must be even"),
        (dict(position_embedding_type="xpos", rope_theta=500.0), "only applies to position_embedding_type='rope'"),
        (dict(position_embedding_type="cope", cope_max_positions=0), r"cope_max_positions must be an integer in \[1"),
        (dict(position_embedding_type="rope", cope_max_positions=8), "cope_max_positions only applies to .*'cope'"),
    ],
)
def test_invalid_config_raises_value_error_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        TinyGPTConfig(**fields)


@pytest.mark.parametrize(
    "rope_parameters, message",
    [
        ({"rope_type": "linear"}, "lack 'factor'"),
        ({"rope_type": "dynamic"}, "lack 'factor'"),
        ({"rope_type": "yarn", "factor": 0.5}, "must be a finite number >= 1"),
        ({"rope_type": "default", "rope_theta": -5.0}, "must be a finite number > 0"),
        (  # head_dim 64: 32 rotating pairs (the factors' length failed inside transformers, as a tensor error)
            {"rope_type": "longrope", "short_factor": [1.0] * 64, "long_factor": [1.0] * 32, "factor": 2.0},
            r"rope_parameters\['short_factor'\] must hold one factor per rotating pair of dimensions, 32 here",
        ),
    ],
)
def test_incomplete_rope_parameters_are_named(rope_parameters, message):
    with pytest.raises(ValueError, match=message):
        TinyGPTConfig(position_embedding_type="rope", rope_parameters=rope_parameters)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(layer_norm_epsilon=0.0), "layer_norm_epsilon must be a finite number > 0"),
        (dict(layer_norm_epsilon=float("nan")), "layer_norm_epsilon must be a finite number > 0"),
        (dict(position_embedding_type="rope", rope_theta=float("inf")), "rope_theta must be a finite number"),
        (
            dict(position_embedding_type="rope", rope_parameters={"rope_type": "linear", "factor": float("inf")}),
            r"rope_parameters\['factor'\] must be a finite number",
        ),
        (dict(n_layer=2.5), "n_layer must be a positive integer below 2.31, got 2.5"),
        (dict(n_head="4"), "n_head must be a positive integer below 2.31, got .4."),
        (dict(resid_pdrop="0.1"), r"resid_pdrop must be in \[0, 1\)"),
        (dict(initializer_range=float("inf")), "initializer_range must be a finite number"),
    ],
)
def test_config_values_that_would_give_nan_or_crash_are_named(fields, message):
    with pytest.raises(ValueError, match=message):
        TinyGPTConfig(**fields)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(activation_function=["gelu"]), "activation_function=.'gelu'. is not one of"),
        (dict(position_embedding_type="rope", rope_parameters=[1, 2]), "rope_parameters must be a dict"),
        (dict(dtype="float99"), "dtype must name a floating-point torch dtype"),
        (dict(dtype="int8"), "dtype must name a floating-point torch dtype"),
        (dict(vocab_size=10**400), "vocab_size must be a positive integer below 2.31"),
        (dict(vocab_size=2**30, n_embd=2**20, n_head=1), "more than any machine holds"),
        (dict(bos_token_id="x"), "bos_token_id must be a token id"),
        (dict(tie_word_embeddings="no"), "tie_word_embeddings must be true or false"),
    ],
)
def test_config_values_of_the_wrong_type_are_named(fields, message):
    with pytest.raises(ValueError, match=message):
        TinyGPTConfig(**fields)


# ---- a GPT-2 checkpoint's config -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "option, value",
    [("scale_attn_by_inverse_layer_idx", True), ("reorder_and_upcast_attn", True), ("scale_attn_weights", False)],
)
def test_gpt2_options_that_change_the_math_are_refused_by_name(tmp_path, option, value):
    """In a GPT-2 checkpoint's config, and in a TinyGPT's own (where they were kept, and nothing read them)."""
    random_gpt2(**{option: value}).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=f"{option}={value}"):
        TinyGPTForCausalLM.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match=f"the config has {option}={value}; TinyGPT reproduces only"):
        TinyGPTConfig(**{option: value})


def test_gpt2_folder_takes_config_overrides(tmp_path):
    random_gpt2().save_pretrained(tmp_path)
    model = TinyGPTForCausalLM.from_pretrained(tmp_path, resid_pdrop=0.3)
    assert model.config.resid_pdrop == 0.3 and model.transformer.h[0].mlp.dropout.p == 0.3
