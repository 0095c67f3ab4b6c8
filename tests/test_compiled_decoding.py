"""CompiledDecoder: the compiled, frozen decoding step gives what the eager model gives.

Each decoder compiles once (a few seconds for these tiny models). The reference is always an uncompiled forward
over the whole sequence, and for GPT-2 weights transformers' own GPT2LMHeadModel.
"""

import copy
import functools
import re
from functools import partial

import pytest
import torch
import transformers
from conftest import VOCAB, int8_kernel_rows, random_gpt2, tiny_model
from torch._dynamo.utils import counters
from transformers import GenerationConfig
from transformers.testing_utils import CaptureLogger

from hf_tinygpt import POSITION_SCHEME_CLASSES, TinyGPTForCausalLM
from hf_tinygpt.generate.compiled_decoding import CompiledDecoder

pytestmark = pytest.mark.slow  # every test here compiles (most without autotuning: correctness, not speed)

GREEDY = dict(do_sample=False, pad_token_id=0, output_logits=True, return_dict_in_generate=True)


def step_logits_against_full_forward(reference, prompt_length, generated):
    """Max |difference| between each decoding step's logits and `reference`'s forward over the whole output."""
    with torch.no_grad():
        full = reference(generated.sequences).logits[:, prompt_length - 1 : -1]
    steps = torch.stack(generated.logits, dim=1)
    return (steps - full).abs().max().item()


@pytest.mark.parametrize("scheme", list(POSITION_SCHEME_CLASSES))
def test_compiled_decoding_equals_a_full_forward(scheme):
    model = tiny_model(scheme)
    prompt = torch.randint(1, VOCAB, (1, 9), generator=torch.Generator().manual_seed(1))
    eager = model.generate(prompt, max_new_tokens=12, min_new_tokens=12, **GREEDY)
    decoder = CompiledDecoder(model, max_length=32, autotune=False)
    compiled = decoder.generate(prompt, max_new_tokens=12, min_new_tokens=12, **GREEDY)
    assert torch.equal(compiled.sequences, eager.sequences)
    assert step_logits_against_full_forward(model, 9, compiled) < 1e-5


def test_compiled_decoding_of_gpt2_weights_matches_gpt2lmheadmodel(tmp_path):
    reference = random_gpt2()
    reference.save_pretrained(tmp_path / "gpt2")
    model = TinyGPTForCausalLM.from_pretrained(tmp_path / "gpt2")
    prompt = torch.randint(1, VOCAB, (1, 7), generator=torch.Generator().manual_seed(2))
    decoder = CompiledDecoder(model, max_length=40, autotune=False)
    compiled = decoder.generate(prompt, max_new_tokens=20, min_new_tokens=20, **GREEDY)
    assert step_logits_against_full_forward(reference, 7, compiled) < 1e-5
    eager = reference.generate(prompt, max_new_tokens=20, min_new_tokens=20, **GREEDY)
    assert torch.equal(compiled.sequences, eager.sequences)


def test_later_prompts_reuse_the_compiled_step_and_its_cache():
    """Freezing binds the compiled step to the decoder's cache: a new prompt must start from a clean cache, with
    no recompilation (a fresh StaticCache per call would silently keep writing into the first one). Building the
    decoder compiled the step: no call compiles again."""
    model = tiny_model("rope")
    decoder = CompiledDecoder(model, max_length=32, autotune=False)
    prompts = [torch.randint(1, VOCAB, (1, n), generator=torch.Generator().manual_seed(n)) for n in (5, 11, 5)]
    graphs = counters["stats"]["unique_graphs"]
    for prompt in prompts:
        compiled = decoder.generate(prompt, max_new_tokens=10, min_new_tokens=10, **GREEDY)
        assert step_logits_against_full_forward(model, prompt.shape[1], compiled) < 1e-5
    assert counters["stats"]["unique_graphs"] == graphs


def test_two_models_of_one_class_each_keep_their_own_compiled_step():
    """Dynamo files every TinyGPT's compiled step under the same code object, and a decoder's guards leave its
    modules out (`torch.compiler.skip_guard_on_all_nn_modules_unsafe`, for speed): what tells one model's frozen
    step (its weights, its cache) from another's is the backend each decoder compiles under. With one backend for
    all, the second model runs the first one's step: this test fails, and so do the next two and the threads test."""
    models = [tiny_model("rope", seed=0), tiny_model("rope", seed=1)]
    prompt = torch.randint(1, VOCAB, (1, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert not torch.allclose(models[0](prompt).logits, models[1](prompt).logits, atol=1e-3)
    decoders = [CompiledDecoder(model, max_length=32, autotune=False) for model in models]
    for _ in range(2):  # each compiles on its first call; both then run again, alternately
        for decoder, model in zip(decoders, models, strict=True):
            compiled = decoder.generate(prompt, max_new_tokens=10, min_new_tokens=10, **GREEDY)
            assert step_logits_against_full_forward(model, 6, compiled) < 1e-5


def test_decoders_of_one_model_each_keep_their_own_step_and_cache():
    """A model may have a decoder per batch size, or two of one size. A compiled step is bound to the cache it
    compiled with; were two decoders of one shape handed the same step, the second would decode from the first
    one's positions (off by up to 0.18 in these logits, seen before each decoder had a private copy)."""
    model = tiny_model("rope")
    # Different prompts, so that decoding from another decoder's cache would show.
    prompts = [
        torch.tensor([[1, 17, 42, 5]]),
        torch.tensor([[5, 9, 33, 21], [8, 60, 2, 3]]),
        torch.tensor([[3, 30, 12, 50]]),
    ]
    decoders = [CompiledDecoder(model, batch_size=len(prompt), max_length=24, autotune=False) for prompt in prompts]
    for _ in range(2):
        for decoder, prompt in zip(decoders, prompts, strict=True):
            mask = torch.ones_like(prompt)
            compiled = decoder.generate(prompt, attention_mask=mask, max_new_tokens=8, min_new_tokens=8, **GREEDY)
            assert step_logits_against_full_forward(model, 4, compiled) < 1e-5


def test_after_the_weights_change_a_new_decoder_compiles_them_and_an_old_one_refuses():
    """Freezing makes the weights constants of the step, and dynamo's guards do not look at values: without the
    decoder's check the old step would keep decoding with the old weights."""
    model = tiny_model("rope")
    prompt = torch.tensor([[1, 17, 42, 5]])
    old = CompiledDecoder(model, max_length=24, autotune=False)
    old.generate(prompt, max_new_tokens=8)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1.5)
    with pytest.raises(ValueError, match="weights changed after this decoder was built"):
        old.generate(prompt, max_new_tokens=8)
    decoder = CompiledDecoder(model, max_length=24, autotune=False)
    compiled = decoder.generate(prompt, max_new_tokens=8, min_new_tokens=8, **GREEDY)
    assert step_logits_against_full_forward(model, 4, compiled) < 1e-5


def test_weights_changed_through_data_never_reach_a_built_decoder():
    """`.data` bumps no version counter, so the decoder cannot see such a change; before it decoded with its own
    copy, its frozen step held some weights as constants and read others live, and decoded with neither the old
    weights nor the new. Changes that bump the counters are still refused."""
    model = tiny_model("rope")
    as_built = copy.deepcopy(model)
    prompt = torch.tensor([[1, 17, 42, 5]])
    decoder = CompiledDecoder(model, max_length=24, autotune=False)
    expected = as_built.generate(prompt, max_new_tokens=10, min_new_tokens=10, **GREEDY).sequences
    block = model.transformer.h[0]
    changes = [
        lambda: model.lm_head.weight.data.mul_(0.5),  # tied: the token table too
        lambda: block.mlp.c_fc.weight.data.copy_(torch.randn_like(block.mlp.c_fc.weight)),
        lambda: block.attn.c_proj.weight.data.__setitem__([0, 1], block.attn.c_proj.weight.data[[1, 0]]),
        lambda: model.transformer.ln_f.weight.data.add_(1.0),
    ]
    for change in changes:
        change()
        compiled = decoder.generate(prompt, max_new_tokens=10, min_new_tokens=10, **GREEDY)
        assert torch.equal(compiled.sequences, expected)
        assert step_logits_against_full_forward(as_built, 4, compiled) < 1e-5
    with torch.no_grad():
        model.transformer.ln_f.weight.mul_(2)
    with pytest.raises(ValueError, match="weights changed after this decoder was built"):
        decoder.generate(prompt, max_new_tokens=4)


def test_int8_decoders_of_two_models_of_one_shape_each_decode_with_their_own_weights(tmp_path):
    """Inductor's FX graph cache keys a frozen step on the weights' shapes, not their values, and the int8 GEMM
    template packs the weights into the step: through that cache the second model's decoder multiplied the first
    model's int8 weights (the decoders compile without it)."""
    pytest.importorskip("torchao", reason="the [int8] extra (torchao) is not installed")
    from hf_tinygpt.generate.int8 import use_int8_kernels
    from hf_tinygpt.generate.text import int8_weight_only

    prompt = torch.tensor([[1, 17, 42, 5]])
    for seed in (1, 2):
        tiny_model("rope", seed=seed, n_embd=64).save_pretrained(tmp_path / str(seed))
        model = use_int8_kernels(
            TinyGPTForCausalLM.from_pretrained(
                tmp_path / str(seed), dtype=torch.bfloat16, quantization_config=int8_weight_only()
            ).eval()
        )
        decoder = CompiledDecoder(model, max_length=24)  # autotuned: the int8 template packs the weights
        compiled = decoder.generate(prompt, max_new_tokens=8, min_new_tokens=8, **GREEDY)
        with torch.no_grad():
            full = model(compiled.sequences).logits[:, 3:-1].float()
        # The int8 kernels of the step and of the eager model each round their bf16 outputs their own way.
        assert (torch.stack(compiled.logits, dim=1).float() - full).abs().max() <= 2**-6 * full.abs().max()


def test_an_int8_step_multiplies_with_inductors_int8_template_alone_at_any_batch(tmp_path):
    """Autotuning times ATen's int8 kernel against inductor's template on weights that stay in cache, and picked it
    for a product now and then, build by build; in a step, which reads every weight from memory, that product then
    took 1.6x as long (scripts/measurement_log.md, "Where a step's time goes"). An int8 step compiles with the template
    alone, as every step does at batch 1; bf16 and fp32 steps above batch 1 keep ATen's GEMMs, which win there."""
    pytest.importorskip("torchao", reason="the [int8] extra (torchao) is not installed")
    from hf_tinygpt.generate.text import int8_weight_only

    tiny_model("rope", n_embd=64).save_pretrained(tmp_path)
    bf16 = TinyGPTForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    assert (
        CompiledDecoder(bf16, batch_size=8, max_length=16).inductor_settings["max_autotune_gemm_backends"] == "CPP,ATEN"
    )
    int8 = TinyGPTForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16, quantization_config=int8_weight_only())
    decoder = CompiledDecoder(int8.eval(), batch_size=8, max_length=16)  # it multiplies its own copy in int8
    assert decoder.inductor_settings["max_autotune_gemm_backends"] == "CPP"

    def aten_int8_calls(new_tokens):  # the prompt's eager forward calls ATen's int8 kernel too
        prompt = torch.randint(1, VOCAB, (8, 3), generator=torch.Generator().manual_seed(0))
        generate = partial(decoder.generate, prompt, max_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
        return len(int8_kernel_rows(generate))

    assert aten_int8_calls(6) == aten_int8_calls(1)  # none in the five compiled steps


def test_an_int8_step_above_four_rows_multiplies_with_bf16_dot_products_once_per_weight(tmp_path):
    """Inductor's int8 kernel takes 8 rows as two calls of 4, each converting every weight again, and the `cat`
    that joins them keeps bias and GELU out of its epilogue: above 4 rows a decoder multiplies with
    `int8_dot_products` instead (where the CPU has AVX-512 BF16), once per weight and step, in its private copy of
    the model, and decodes as the eager model does."""
    pytest.importorskip("torchao", reason="the [int8] extra (torchao) is not installed")
    from hf_tinygpt.generate.int8 import Int8Linear, use_int8_kernels
    from hf_tinygpt.generate.int8_dot_products import int8_dot_products_available
    from hf_tinygpt.generate.text import int8_weight_only

    if not int8_dot_products_available():
        pytest.skip("int8_dot_products: this CPU lacks AVX-512 BF16, or the op could not be built")
    tiny_model("rope", n_embd=64).save_pretrained(tmp_path)
    int8 = TinyGPTForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16, quantization_config=int8_weight_only())
    use_int8_kernels(int8)  # as `generate --int8` loads it: the eager model multiplies in int8 too
    linears = [module for module in int8.modules() if isinstance(module, torch.nn.Linear)]
    assert not CompiledDecoder(int8.eval(), batch_size=4, max_length=16, autotune=False).int8_dot_products
    decoder = CompiledDecoder(int8, batch_size=8, max_length=16, autotune=False)
    assert decoder.int8_dot_products and all(type(module) is Int8Linear for module in linears)  # the model's own

    prompt = torch.randint(1, VOCAB, (8, 3), generator=torch.Generator().manual_seed(0))  # 24 rows: torchao's

    def op_calls(new_tokens):
        with torch.profiler.profile() as profile:
            out = decoder.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **GREEDY)
        return out, sum(event.name == "hf_tinygpt::int8_dot_products" for event in profile.events())

    compiled, calls = op_calls(6)
    assert calls - op_calls(1)[1] == 5 * len(linears)  # five compiled steps
    with torch.no_grad():
        full = int8(compiled.sequences).logits[:, 2:-1].float()
    # The op in the step and torch's int8 kernel in the eager model each round their bf16 outputs their own way.
    assert (torch.stack(compiled.logits, dim=1).float() - full).abs().max() <= 2**-6 * full.abs().max()


def test_an_argument_that_would_compile_the_step_again_is_refused_and_the_decoder_goes_on():
    """`output_hidden_states=True` changes the step's graph. Compiled again after the build, the step would run
    unfrozen and untuned, and with int8 weights inductor failed outright: the decoder refuses such a call."""
    model = tiny_model("rope")
    prompt = torch.tensor([[1, 17, 42, 5]])
    decoder = CompiledDecoder(model, max_length=24, autotune=False)
    for argument in ("output_hidden_states", "output_attentions"):
        with pytest.raises(ValueError, match="changes what this decoder's compiled step computes"):
            decoder.generate(prompt, max_new_tokens=4, return_dict_in_generate=True, **{argument: True})
    # (Beams and several sequences per prompt failed inside the cache, "index_copy_(): Source/destination tensor must
    # have same slice shapes"; use_cache=False was one of a list of every argument given.)
    refused = {
        "num_beams": (dict(num_beams=2), "num_beams / num_return_sequences make 2 rows of each prompt"),
        "num_return_sequences": (dict(do_sample=True, num_return_sequences=3), "make 3 rows of each prompt"),
        "use_cache": (dict(use_cache=False, pad_token_id=0), "use_cache=False: this decoder's step decodes through"),
        "generation_config": (dict(generation_config=GenerationConfig(num_beams=2)), "make 2 rows of each prompt"),
        "outputs": (
            dict(output_hidden_states=True, output_attentions=True, return_dict_in_generate=True),
            "output_hidden_states and output_attentions change what this decoder's compiled step computes",
        ),
    }
    for arguments, message in refused.values():
        with pytest.raises(ValueError, match=re.escape(message)):
            decoder.generate(prompt, max_new_tokens=4, **arguments)
    compiled = decoder.generate(prompt, max_new_tokens=8, min_new_tokens=8, **GREEDY)
    assert step_logits_against_full_forward(model, 4, compiled) < 1e-5


def test_a_decoder_changes_nothing_outside_itself():
    """The caller's model keeps its attention kernel and config; other compiled functions keep their compiled code
    (no `torch._dynamo.reset()`, even when the weights change and a new decoder compiles); inductor's settings are
    as they were."""
    model = tiny_model("rope")
    model.set_attn_implementation("sdpa")
    config_before = model.config.to_dict()
    other = torch.compile(lambda x: x.sin() + 1)
    other(torch.ones(3))
    frames = counters["stats"]["unique_graphs"]
    CompiledDecoder(model, max_length=24, autotune=False).generate(torch.tensor([[1, 2, 3]]), max_new_tokens=4)
    with torch.no_grad():
        model.transformer.ln_f.weight.mul_(2)
    CompiledDecoder(model, max_length=24, autotune=False)
    assert model.config._attn_implementation == "sdpa" and model.config.to_dict() == config_before
    assert not torch._inductor.config.freezing and not torch._inductor.config.max_autotune
    compiled_since = counters["stats"]["unique_graphs"]
    other(torch.ones(3))  # still compiled: running it adds no graph
    assert counters["stats"]["unique_graphs"] == compiled_since > frames


def test_left_padded_batch_equals_single_sequences():
    model = tiny_model("alibi")
    short, long = [1, 17, 42], [5, 9, 33, 21, 8, 60]
    batch = torch.tensor([[0] * 3 + short, long])
    mask = torch.tensor([[0] * 3 + [1] * 3, [1] * 6])
    decoder = CompiledDecoder(model, batch_size=2, max_length=24, autotune=False)
    ten_greedy = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False, pad_token_id=0)
    out = decoder.generate(batch, attention_mask=mask, **ten_greedy)
    for row, prompt in zip(out, (short, long), strict=True):
        alone = model.generate(torch.tensor([prompt]), **ten_greedy)
        assert row[-10:].tolist() == alone[0, -10:].tolist()


@pytest.mark.parametrize("batch_size", [1, 2])
def test_autotuned_decoding_equals_a_full_forward(batch_size):
    """With the kernels a decoder picks by timing them, as the benchmark builds it: inductor's CPP GEMM template
    alone at batch 1 (ATen's kernels win its timing on cached weights, and lose in the step), the template or ATen
    above. Odd sizes, so that the template meets rows and columns that are no multiple of its blocks."""
    model = tiny_model("rope", n_embd=40, n_head=5, vocab_size=1001)
    prompt = torch.randint(1, 1001, (batch_size, 7), generator=torch.Generator().manual_seed(batch_size))
    decoder = CompiledDecoder(model, batch_size=batch_size, max_length=24)
    mask = torch.ones_like(prompt)
    compiled = decoder.generate(prompt, attention_mask=mask, max_new_tokens=10, min_new_tokens=10, **GREEDY)
    assert step_logits_against_full_forward(model, 7, compiled) < 1e-5


def test_the_decoder_refuses_inputs_its_compiled_step_cannot_take():
    with pytest.raises(ValueError, match="max_length=65 exceeds n_positions=64"):
        CompiledDecoder(tiny_model("learned"), max_length=65, autotune=False)
    with pytest.raises(ValueError, match="max_length=65 exceeds n_positions=64"):
        CompiledDecoder(random_gpt2(), max_length=65, autotune=False)
    CompiledDecoder(tiny_model("rope"), max_length=65, autotune=False)  # positions computed, not looked up: any length
    decoder = CompiledDecoder(tiny_model(), max_length=16, autotune=False)
    with pytest.raises(ValueError, match="built for batch size 1, got 2"):
        decoder.generate(torch.ones(2, 4, dtype=torch.long), max_new_tokens=2)
    with pytest.raises(ValueError, match=r"Prompt \(10 tokens\) \+ max_new_tokens \(7\) exceeds .*max_length=16"):
        decoder.generate(torch.ones(1, 10, dtype=torch.long), max_new_tokens=7)


def test_a_decoder_of_the_smallest_max_length_builds_and_decodes():
    """`max_length=4` is the least the build's own decode (a 1-token prompt and 3 new tokens) fits in."""
    model = tiny_model("learned")
    decoder = CompiledDecoder(model, max_length=4, autotune=False)
    prompt = torch.tensor([[1, 17]])
    compiled = decoder.generate(prompt, max_new_tokens=2, min_new_tokens=2, **GREEDY)
    assert torch.equal(
        compiled.sequences, model.generate(prompt, max_new_tokens=2, min_new_tokens=2, **GREEDY).sequences
    )


def test_decoders_are_safe_to_call_from_several_threads():
    """Two decoders of one model (they share a cache) and one decoder shared by two threads: every call gives the
    tokens and step logits a lone call gives. Without the lock this test fails: a call crashed with an index out
    of bounds inside the compiled kernel (the issue saw wrong greedy tokens in 2 of 12 calls, with no error)."""
    from concurrent.futures import ThreadPoolExecutor

    model = tiny_model("learned")
    decoders = [CompiledDecoder(model, max_length=32, autotune=False) for _ in range(2)]
    prompts = [torch.randint(1, VOCAB, (1, 3 + i), generator=torch.Generator().manual_seed(i)) for i in range(6)]
    expected = [model.generate(p, max_new_tokens=16, min_new_tokens=16, **GREEDY).sequences for p in prompts]
    decoders[0].generate(prompts[0], max_new_tokens=16)  # compile once, before the threads start

    def decode(job):
        decoder, prompt = job
        return decoder.generate(prompt, max_new_tokens=16, min_new_tokens=16, **GREEDY)

    jobs = [(decoders[i % 2], p) for i, p in enumerate(prompts)] + [(decoders[0], p) for p in prompts]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(decode, jobs))
    for (_, prompt), result, want in zip(jobs, results, expected + expected, strict=True):
        assert torch.equal(result.sequences, want)
        assert step_logits_against_full_forward(model, prompt.shape[1], result) < 1e-5


def test_building_a_batched_decoder_logs_no_padding_warning():
    """The build decodes a prompt of pad ids; generate must not take it for a right-padded batch."""
    logger = transformers.utils.logging.get_logger("transformers.generation.utils")
    with CaptureLogger(logger) as logged:
        CompiledDecoder(tiny_model("rope"), batch_size=2, max_length=16, autotune=False)
    assert "padding" not in logged.out


def generate_counting_inputs(decoder, prompt, **kwargs):
    """`decoder.generate(prompt, **kwargs)`, and how many times the step's inputs were made for it
    (`prepare_inputs_for_generation`: transformers' loop makes them for the prompt and every further token)."""
    prepare, made = decoder.model.prepare_inputs_for_generation, []

    @functools.wraps(prepare)  # generate checks its arguments against this signature
    def counting(*args, **kwargs):
        made.append(1)
        return prepare(*args, **kwargs)

    decoder.model.prepare_inputs_for_generation = counting  # the decoder's private copy: no one else calls it
    try:
        return decoder.generate(prompt, **kwargs), len(made)
    finally:
        del decoder.model.prepare_inputs_for_generation


@pytest.mark.parametrize("scheme", list(POSITION_SCHEME_CLASSES))
def test_the_greedy_loop_gives_transformers_loops_tokens_making_the_steps_inputs_once(scheme):
    """Plain greedy decoding takes the decoder's own loop, which makes the step's inputs for the prompt and the first
    new token and moves them on in place; asked for scores, the decoder runs transformers' loop over the same step."""
    decoder = CompiledDecoder(tiny_model(scheme), max_length=24, autotune=False)
    prompt = torch.randint(1, VOCAB, (1, 9), generator=torch.Generator().manual_seed(3))
    greedy = dict(max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    ours, made = generate_counting_inputs(decoder, prompt, **greedy)
    theirs, made_by_theirs = generate_counting_inputs(decoder, prompt, return_dict_in_generate=True, **greedy)
    assert (made, made_by_theirs) == (2, 12)
    assert torch.equal(ours, theirs.sequences)


@pytest.mark.parametrize("gpt2_weights", [False, True])
def test_the_greedy_loop_stops_each_row_at_eos_and_pads_it_as_transformers_loop_does(gpt2_weights, tmp_path):
    """A left-padded batch whose first row meets EOS early: the same tokens (padding after EOS included) as
    transformers' loop, with TinyGPT's own positions and with GPT-2 weights converted."""
    if gpt2_weights:
        random_gpt2().save_pretrained(tmp_path / "gpt2")
        model = TinyGPTForCausalLM.from_pretrained(tmp_path / "gpt2").eval()
    else:
        model = tiny_model("rope")
    batch = torch.tensor([[0, 0, 0, 7, 19, 42], [5, 9, 33, 21, 8, 60]])
    mask = torch.tensor([[0, 0, 0, 1, 1, 1], [1] * 6])
    decoder = CompiledDecoder(model, batch_size=2, max_length=24, autotune=False)
    greedy = dict(attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0)
    free = decoder.generate(batch, eos_token_id=None, **greedy)
    eos = int(free[0, 6 + 2])  # the first row's third new token
    assert eos not in free[1, 6:9].tolist()  # the second row goes on past it
    ours, made = generate_counting_inputs(decoder, batch, eos_token_id=eos, **greedy)
    theirs, _ = generate_counting_inputs(decoder, batch, eos_token_id=eos, return_dict_in_generate=True, **greedy)
    assert made == 2 and torch.equal(ours, theirs.sequences)
    assert ours[0, 9:].eq(0).all() and not ours[1, 9:].eq(0).all()  # padded after its EOS, the other row not


def test_a_process_that_compiled_the_forward_64_times_still_builds_a_decoder():
    """(A slow-tier worker built its 65th decoder and dynamo refused it: every compile of a TinyGPT forward is an entry
    on one code object, and the decoder raised dynamo's limit on them to 64 only.) The entries are made here cheaply,
    by compiling the forward for 64 prompt lengths without inductor, on top of those earlier tests in this process
    made."""
    model = tiny_model("rope")
    forward = torch.compile(model.__call__, backend="eager", dynamic=False, fullgraph=True)
    limit = torch._dynamo.config.accumulated_recompile_limit  # dynamo's ceiling on a code object's entries
    with torch.no_grad(), torch._dynamo.config.patch(recompile_limit=limit):
        for length in range(1, 65):
            forward(torch.ones(1, length, dtype=torch.long), use_cache=False)
    prompt = torch.tensor([[5, 9, 33]])
    decoder = CompiledDecoder(model, batch_size=1, max_length=16, autotune=False)
    expected = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, do_sample=False)
    assert torch.equal(decoder.generate(prompt, max_new_tokens=4, do_sample=False), expected)
