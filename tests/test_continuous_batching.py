"""transformers' continuous batching (`generate_batch`, the paged cache behind `transformers serve`): every scheme's
greedy tokens equal `generate`'s, prompt by prompt, and their log-probabilities within 1e-5, or it is refused at the
start by name."""

import pytest
import torch
import transformers
from conftest import SCHEME_VARIANTS, tiny_model
from transformers import ContinuousBatchingConfig, GenerationConfig

from hf_tinygpt import POSITION_SCHEME_CLASSES
from hf_tinygpt.model.compat import MODELS_UPDATE_THE_PAGED_CACHE

RUNS_HERE = pytest.mark.skipif(not MODELS_UPDATE_THE_PAGED_CACHE, reason="continuous batching from transformers 5.24")

PROMPTS = [[5, 17, 33, 2, 9, 41, 8], [12, 7], [100, 3, 55, 6], [9, 9, 9, 9, 9, 1, 2, 3, 4, 5, 6]]
GREEDY = dict(max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
# A small paged cache: sized by default from the machine's free memory, allocating it would take most of a test.
SMALL = dict(num_blocks=16, page_size=32, max_batch_tokens=64)


def batched(model, prompts=PROMPTS) -> list[tuple[list[int], torch.Tensor]]:
    """Each prompt's new tokens and their log-probabilities, from one `generate_batch` call, in the prompts' order."""
    settings = ContinuousBatchingConfig(**SMALL, return_logprobs=True)
    outputs = model.generate_batch(prompts, GenerationConfig(**GREEDY), settings, warmup=False)
    answers = [outputs[f"req_{i}"] for i in range(len(prompts))]
    return [(answer.generated_tokens, torch.tensor(answer.logprobs)) for answer in answers]


def one_by_one(model, prompts=PROMPTS) -> list[tuple[list[int], torch.Tensor]]:
    """The same from `generate`, each prompt alone (all its tokens real: none is taken for padding)."""
    answers = []
    for prompt in map(torch.tensor, prompts):
        ids = prompt[None]
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), output_scores=True, return_dict_in_generate=True, **GREEDY
        )
        tokens = out.sequences[0, ids.shape[1] :]
        logprobs = torch.stack([scores[0].log_softmax(-1)[t] for scores, t in zip(out.scores, tokens, strict=True)])
        answers.append((tokens.tolist(), logprobs))
    return answers


def assert_the_same(got, expected):
    for (tokens, logprobs), (expected_tokens, expected_logprobs) in zip(got, expected, strict=True):
        assert tokens == expected_tokens
        assert (logprobs - expected_logprobs).abs().max() <= 1e-5


# Each kind of scheme in the fast tier (rows, rotations, a bias, a scheme with its own attention); all in the slow one.
FAST = ("learned", "rope", "alibi", "fox")
RUNS = [
    pytest.param(variant, marks=() if variant in FAST else pytest.mark.slow)
    for variant, (scheme, _) in SCHEME_VARIANTS.items()
    if not POSITION_SCHEME_CLASSES[scheme].rewrites_cache
]


@RUNS_HERE
@pytest.mark.parametrize("variant", RUNS)
def test_generate_batch_gives_each_prompts_greedy_tokens(variant):
    """Prompts of four lengths share the paged cache's batches, side by side: positions come from what continuous
    batching passes, and each query's keys from the mask it builds (the bias schemes count distances from there)."""
    scheme, fields = SCHEME_VARIANTS[variant]
    model = tiny_model(scheme, initializer_range=0.2, **fields)
    assert_the_same(batched(model), one_by_one(model))


@RUNS_HERE
@pytest.mark.parametrize("scheme", ["alibi", "fox"])
def test_eager_attention_runs_as_transformers_paged_eager(scheme):
    """An eager model runs as transformers' "paged|eager" under continuous batching, and is eager again after."""
    model = tiny_model(scheme, initializer_range=0.2, attn_implementation="eager")
    kernels = []
    hook = model.transformer.h[0].attn.register_forward_pre_hook(
        lambda *_: kernels.append(model.config._attn_implementation)
    )
    answers = batched(model)
    hook.remove()
    assert_the_same(answers, one_by_one(model))
    assert set(kernels) == {"paged|eager"} and model.config._attn_implementation == "eager"


@RUNS_HERE
@pytest.mark.parametrize("scheme", ["alibi", "fox", "learned"])
def test_a_scheme_that_needs_the_full_mask_is_kept_off_flash_kernels(scheme):
    """Continuous batching switches a half-precision model to a flash kernel where one is installed (none is here):
    a scheme that biases or reads the mask is kept off them, whatever settings it was given; the others are not."""
    model = tiny_model(scheme)
    given = ContinuousBatchingConfig(**SMALL)
    manager = model.init_continuous_batching(GenerationConfig(**GREEDY), given)
    needs_mask = POSITION_SCHEME_CLASSES[scheme].needs_full_mask
    assert manager.continuous_batching_config.auto_switch_to_flash is not needs_mask
    assert manager.continuous_batching_config.num_blocks == 16 and given.auto_switch_to_flash


@RUNS_HERE
@pytest.mark.slow  # generate sizes the paged cache from the machine's free memory: most of a minute
def test_generate_with_the_paged_cache_is_continuous_batching():
    model = tiny_model("rope", initializer_range=0.2)
    prompts = [PROMPTS[0], PROMPTS[3][:7]]  # one length: generate takes a tensor
    routed = model.generate(torch.tensor(prompts), cache_implementation="paged", **GREEDY)
    assert [row[7:] for row in routed[0].tolist()] == [tokens for tokens, _ in one_by_one(model, prompts)]


@RUNS_HERE
@pytest.mark.parametrize("scheme", [s for s, c in POSITION_SCHEME_CLASSES.items() if c.rewrites_cache])
def test_a_scheme_that_rewrites_its_cache_is_refused_at_the_start(scheme):
    model = tiny_model(scheme)
    with pytest.raises(ValueError, match=f"'{scheme}' rewrites the keys its cache holds .* generate\\(\\)"):
        model.generate_batch(PROMPTS, GenerationConfig(**GREEDY), ContinuousBatchingConfig(**SMALL), warmup=False)


@RUNS_HERE
@pytest.mark.parametrize("prompts", [[[]], [PROMPTS[1], []]], ids=["alone", "beside another"])
def test_a_prompt_of_no_tokens_is_refused_by_name(prompts):
    """transformers' batching takes it: alone its generation loop fails (and stops `transformers serve`'s model
    process), beside another prompt it answers with tokens read from that prompt's logits. `generate_batch` names
    the prompt before any runs; the manager (what the server adds requests to) names the request."""
    model = tiny_model("rope")
    with pytest.raises(ValueError, match=rf"`inputs\[{len(prompts) - 1}\]` is empty.*at least one token"):
        model.generate_batch(prompts, GenerationConfig(**GREEDY), ContinuousBatchingConfig(**SMALL), warmup=False)
    manager = model.init_continuous_batching(GenerationConfig(**GREEDY), ContinuousBatchingConfig(**SMALL))
    with pytest.raises(ValueError, match=r"request 7's `input_ids` are empty.*at least one token"):
        manager.add_request([], request_id="7")


@pytest.mark.skipif(MODELS_UPDATE_THE_PAGED_CACHE, reason="transformers >= 5.24 runs it")
def test_before_transformers_5_24_it_is_refused_at_the_start():
    """Before 5.24 transformers' paged kernels updated the paged cache themselves, which no scheme's own attention
    calls: refused by name, whatever the scheme."""
    with pytest.raises(
        ValueError, match=f"needs transformers >= 5.24.*this is transformers {transformers.__version__}"
    ):
        tiny_model("learned").init_continuous_batching(GenerationConfig(**GREEDY))
