"""transformers' own model test suite, run on TinyGPT for every position scheme, exactly as an in-tree model runs it.

The suite (`ModelTesterMixin`, `GenerationTesterMixin`, `ConfigTester`, the training / tensor-parallel / FSDP
mixins, wired by `CausalLMModelTester` / `CausalLMModelTest`) is used as a dependency from
`../shared/transformers-tests` (or `$HF_TINYGPT_TRANSFORMERS_TESTS`), never copied here. Each scheme gets its own
test class; GPT-2 runs in the same session as the reference (`pytest -m slow tests/test_transformers_suite.py`).

This file skips nothing itself. The suite skips, by its own checks, what does not apply here, the same way for
GPT-2: GPU-only kernels (flash attention 2/3/4, CUDA, MPS, several accelerators, deepspeed, kernels), optional
packages not installed (timm, av, pytesseract, optimum-quanto), pipeline tests for tasks a causal LM does not have
or whose tiny models live on the Hub (offline here), classification / QA heads (TinyGPT has none), RoPE tests on
schemes without RoPE, MoE / composite / recurrent-layer / fp32-module tests, tests marked slow upstream
(`RUN_SLOW`), and the multi-process FSDP / tensor-parallel runs, which its offline copy cannot start
(tests/distributed_testing_utils.py there): TinyGPT's are in tests/test_distributed.py. A scheme whose attention
rewrites its cache (PaTH) is declared stateful, as transformers declares its recurrent models, so the suite's own
check leaves out assisted decoding and packing for it; tests/test_positions_path.py checks that such a cache refuses
a crop.
"""

import atexit
import os
import shutil
import sys
import tempfile
import unittest
from pathlib import Path

import pytest
from conftest import SCHEME_VARIANTS, TRANSFORMERS_SUITE

SUITE = TRANSFORMERS_SUITE


def not_run(why: str):
    """Skip the whole suite, loudly; a failure where .ci/run sets HF_TINYGPT_SUITE_MUST_RUN (there it must run)."""
    if os.environ.get("HF_TINYGPT_SUITE_MUST_RUN"):
        pytest.fail(why, pytrace=False)
    pytest.skip(why, allow_module_level=True)


if not (SUITE / "tests" / "causal_lm_tester.py").is_file():
    not_run(
        f"TRANSFORMERS' MODEL TEST SUITE NOT FOUND at {SUITE}: none of its tests ran. Put the suite there (see "
        "../shared/transformers-tests/SOURCE.md) or point HF_TINYGPT_TRANSFORMERS_TESTS at it."
    )


def suite_view() -> Path:
    """A folder of links that looks like transformers' source tree: the suite's `tests/` and `utils/` beside
    `src/transformers` (the installed package, which the pipeline mixin imports from there). The suite itself is
    left untouched."""
    import transformers

    view = Path(tempfile.mkdtemp(prefix="tinygpt-transformers-suite-"))
    atexit.register(shutil.rmtree, view, ignore_errors=True)  # removes the links, never what they point to
    for entry in ("tests", "utils"):
        (view / entry).symlink_to(SUITE / entry, target_is_directory=True)
    (view / "src").mkdir()
    (view / "src" / "transformers").symlink_to(Path(transformers.__file__).parent, target_is_directory=True)
    return view


sys.path.insert(0, str(suite_view()))
for requirement in ("parameterized", "timeout_decorator", "pytest_timeout", "httpx"):
    pytest.importorskip(requirement, reason=f"transformers' test suite needs {requirement} (pip install -e '.[dev]')")

os.environ["DISABLE_SAFETENSORS_CONVERSION"] = "true"  # as the suite's own conftest sets it: never ask the Hub

from transformers import GenerationMixin  # noqa: E402
from transformers.models.auto import modeling_auto  # noqa: E402

from hf_tinygpt import POSITION_SCHEME_CLASSES, TinyGPTConfig, TinyGPTForCausalLM, TinyGPTModel  # noqa: E402

try:
    from tests.causal_lm_tester import CausalLMModelTest, CausalLMModelTester
    from tests.models.gpt2 import test_modeling_gpt2  # a module: its test class is not collected twice
except ImportError as error:
    # The suite is transformers' own tests from one version (its SOURCE.md); they import that version's internals,
    # so an older installed transformers cannot run it. Skipped loudly, as above, rather than a collection error
    # that would stop the fast tier too.
    import transformers

    not_run(
        f"TRANSFORMERS' MODEL TEST SUITE at {SUITE} DOES NOT IMPORT on the installed transformers "
        f"{transformers.__version__} ({error}): none of its tests ran. Run it on the transformers it was copied from."
    )

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True, scope="module")
def tinygpt_in_transformers_tables():
    """The suite tells a base model from an LM head by transformers' built-in auto tables (which
    `AutoModel.register` does not touch): list TinyGPT there, as an in-tree model is listed."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(modeling_auto.MODEL_MAPPING_NAMES, "tinygpt", "TinyGPTModel")
        patch.setitem(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, "tinygpt", "TinyGPTForCausalLM")
        yield


class TinyGPTModelTester(CausalLMModelTester):
    base_model_class = TinyGPTModel
    config_class = TinyGPTConfig
    causal_lm_class = TinyGPTForCausalLM

    def __init__(self, parent, position_embedding_type="learned", scheme_fields=None, **kwargs):
        # n_embd 32, 2 layers (the suite's defaults) and 4 heads: head_dim 8, so partial rotary has room to work.
        super().__init__(parent, num_attention_heads=4, **kwargs)
        self.position_embedding_type = position_embedding_type
        for name, value in (scheme_fields or {}).items():  # the tester passes its attributes the config takes
            setattr(self, name, value)


def suite_for(scheme: str, name: str | None = None, **scheme_fields):
    """The suite's test class for one position scheme (with `scheme_fields` set in its config)."""

    class Tester(TinyGPTModelTester):
        if POSITION_SCHEME_CLASSES[scheme].rewrites_cache:  # stateful, as transformers declares its recurrent models
            base_model_class = type("TinyGPTModel", (TinyGPTModel,), {"_is_stateful": True})
            causal_lm_class = type("TinyGPTForCausalLM", (TinyGPTForCausalLM, GenerationMixin), {"_is_stateful": True})

        def __init__(self, parent, **kwargs):
            super().__init__(parent, position_embedding_type=scheme, scheme_fields=scheme_fields, **kwargs)

    class Test(CausalLMModelTest, unittest.TestCase):
        model_tester_class = Tester
        # The suite runs this check only for models whose config file has a 2023+ copyright line; ours has none.
        test_can_init_all_missing_weights_before_2023 = True

    Test.__name__ = Test.__qualname__ = f"TestTinyGPT{name or scheme.capitalize()}"
    return Test


# Every registered scheme (TestTinyGPTLearned, ..., one a test adds too) and the variants the other checks run
# (TestTinyGPTRopeNopeLayers, TestTinyGPTPRope).
for _variant, (_scheme, _fields) in SCHEME_VARIANTS.items():
    _suite = suite_for(_scheme, _variant.title().replace("-", "") if _fields else None, **_fields)
    globals()[_suite.__name__] = _suite


class TestGPT2Reference(test_modeling_gpt2.GPT2ModelTest):
    """transformers' own GPT-2 test class, unchanged, in the same session: what 'passing' looks like here."""
