"""Adding a scheme is writing one class (a_new_scheme.py): the config takes its fields, the model builds it, and the
package's generic checks run on it without being told its name."""

import math
import os
import re
import subprocess
import sys

import pytest
import torch
from a_new_scheme import LogDistanceBias
from conftest import REPOSITORY, tiny_config, tiny_model

from hf_tinygpt import POSITION_SCHEME_CLASSES, PositionScheme, TinyGPTConfig, register_position_scheme


@pytest.fixture
def registered():
    """LogDistanceBias registered for one test, and gone after it (other tests walk the registry)."""
    register_position_scheme(LogDistanceBias)
    try:
        yield LogDistanceBias
    finally:
        del POSITION_SCHEME_CLASSES[LogDistanceBias.name]


def test_its_bias_is_its_formula_on_a_worked_example(registered):
    """−s_h · log(1 + d) for distances 0, 1 and 3 behind the last query, s_h starting at log_distance_steepness."""
    positions = tiny_model("log_distance", log_distance_steepness=2.0).transformer.positions
    bias = positions.bias(1, 4, 3)[0, :, 0]  # (heads, keys): the query at slot 3 against keys 0..3
    assert torch.allclose(bias, torch.tensor([-2 * math.log(4), -2 * math.log(3), -2 * math.log(2), 0.0]).expand(4, 4))


def test_the_config_takes_its_field_and_refuses_it_elsewhere(registered, tmp_path):
    config = tiny_config("log_distance")
    assert config.log_distance_steepness == 0.5
    config.save_pretrained(tmp_path)
    assert TinyGPTConfig.from_pretrained(tmp_path).to_dict() == config.to_dict()
    with pytest.raises(ValueError, match="log_distance_steepness must be a finite number > 0, got -1"):
        tiny_config("log_distance", log_distance_steepness=-1)
    with pytest.raises(ValueError, match="log_distance_steepness only applies to .*'log_distance', not 'alibi'"):
        tiny_config("alibi", log_distance_steepness=1.0)


def test_registering_checks_the_class(registered):
    with pytest.raises(ValueError, match="'log_distance' is already LogDistanceBias"):
        register_position_scheme(type("Another", (PositionScheme,), {"name": "log_distance"}))
    with pytest.raises(TypeError, match="a subclass of PositionScheme"):
        register_position_scheme(dict)
    with pytest.raises(ValueError, match="Nameless.name must be an identifier"):
        register_position_scheme(type("Nameless", (PositionScheme,), {}))


@pytest.mark.slow
def test_the_generic_checks_take_a_scheme_they_were_never_told_of():
    """The fast tier's checks that walk the registry (cached and padded decoding, static cache, save/load, sdpa and
    eager, gradient checkpointing, params, plot-positions, a training run, export or its refusal, ...) and the
    compiled decoder's, run on LogDistanceBias in a fresh pytest: at least 17 of them, and none fails."""
    env = {**os.environ, "HF_TINYGPT_NEW_SCHEME": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "", "-k", "log_distance"]
    command += ["tests/test_positions.py", "tests/test_plots.py", "tests/test_params.py", "tests/test_training.py"]
    command += ["tests/test_conversion.py", "tests/test_transformers_integration.py", "tests/test_interpretability.py"]
    command += ["tests/test_compiled_decoding.py"]
    run = subprocess.run(command, cwd=REPOSITORY, env=env, capture_output=True, text=True, timeout=1500)
    summary = run.stdout.strip().splitlines()[-1]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    assert run.returncode == 0 and "failed" not in summary and passed >= 17, run.stdout[-3000:]
