"""Check a TinyGPT against transformers' own GPT2LMHeadModel on the same weights, and the one verdict every such
comparison gives (`within_tolerance`: verify-gpt2, a verified conversion, an export)."""

import tempfile
from dataclasses import dataclass

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from ..folders.reading import at_one_revision, load_strictly, read_config_dict, reading_checkpoint
from ..model.modeling_tinygpt import TinyGPTForCausalLM
from ..settings import hub_revision, hub_token, setting


@torch.no_grad()
def max_logit_delta(model_a, model_b, input_ids: torch.Tensor) -> tuple[float, float]:
    """max |Δlogits| over the vocabulary both models share, and the logits' scale: max(1, max |logit| of model_b).
    A tolerance applies to Δ / scale: fp32 rounding is a few ulps of the largest logit, which a trained model's
    logits (≈ 10 and more) make larger than a random model's (< 1), for the same exact math."""
    a, b = model_a(input_ids).logits.float(), model_b(input_ids).logits.float()
    vocab = min(a.shape[-1], b.shape[-1])
    return (a[..., :vocab] - b[..., :vocab]).abs().max().item(), max(1.0, b.abs().max().item())


def check_tolerance(tolerance, name: str = "tolerance"):
    """A ValueError naming `name` unless `tolerance` is a number >= 0."""
    if isinstance(tolerance, bool) or not (isinstance(tolerance, (int, float)) and tolerance >= 0):
        raise ValueError(f"`{name}` must be a number >= 0, got {tolerance!r}")


def within_tolerance(delta: float, scale: float, tolerance: float) -> bool:
    """The verdict: max |Δlogits| `delta` is at most `tolerance` per unit of the logits' `scale` (a NaN never is)."""
    return delta <= tolerance * scale


@torch.no_grad()
def compare_with_gpt2(tiny: TinyGPTForCausalLM, gpt2: GPT2LMHeadModel, input_ids: torch.Tensor, new_tokens: int = 16):
    """max |Δlogits| on `input_ids` (and the logits' scale), and both models' greedy continuations (token ids), of
    `new_tokens` or as many as the models' context leaves."""
    delta, scale = max_logit_delta(tiny, gpt2, input_ids)
    new_tokens = min(new_tokens, gpt2.config.n_positions - input_ids.shape[1])
    if new_tokens < 1:
        raise ValueError(f"no room to continue: {input_ids.shape[1]} tokens of {gpt2.config.n_positions} positions")
    kwargs = dict(max_new_tokens=new_tokens, do_sample=False, attention_mask=torch.ones_like(input_ids))
    kwargs["pad_token_id"] = gpt2.config.eos_token_id
    ours, theirs = tiny.generate(input_ids, **kwargs), gpt2.generate(input_ids, **kwargs)
    return {
        "max_abs_logit_delta": delta,
        "logit_scale": scale,
        "tinygpt_tokens": ours[0, input_ids.shape[1] :].tolist(),
        "gpt2_tokens": theirs[0, input_ids.shape[1] :].tolist(),
    }


def random_gpt2_folder(folder: str, seed: int = 0, **config) -> str:
    """Save a GPT2LMHeadModel with random weights (GPT-2 small's shape unless `config` says otherwise)."""
    torch.manual_seed(seed)
    GPT2LMHeadModel(GPT2Config(**config)).save_pretrained(folder)
    return folder


@dataclass
class VerificationSettings:
    """What `verify_gpt2_checkpoint` (`hf-tinygpt verify-gpt2`) is asked to compare."""

    model: str | None = setting(
        None,
        "GPT-2 folder or Hub id (default: a random GPT-2 small made here)",
        positional=True,
        reads=True,
    )
    text: str = setting("To be, or not to be, that is the question:", "the prompt compared")
    tolerance: float = setting(
        1e-5,
        "largest max |Δlogits| against GPT2LMHeadModel accepted, per unit of the logits' scale, max(1, max |logit|) "
        "(for fp32; bf16 needs ~0.05)",
        minimum=0,
    )
    revision: str | None = hub_revision()
    token: str | None = hub_token()


def verify_gpt2_checkpoint(
    gpt2_folder: str | None, text: str, seed: int = 0, tolerance: float = 1e-5, loading=None, **hub_kwargs
) -> dict:
    """Load a GPT-2 folder or Hub id (or, with None, a random GPT-2 small made here) with both libraries in float32
    (whatever its weights are stored in), from one read of its config.json, and compare them on `text`:
    `compare_with_gpt2`'s result, both continuations as text, the parameter count, `tolerance`, and the verdict
    `ok`: the same greedy tokens and max |Δlogits| within `tolerance` per unit of the logits' scale. `loading`, if
    given, is called once the checkpoint is known to be GPT-2's, before the loads (for a caller that says so)."""
    from ..folders.bundled import gpt2_tokenizer

    check_tolerance(tolerance)
    if not text:
        raise ValueError("`text` is empty: give a prompt to compare the two models on")
    announce = loading or (lambda: None)
    with tempfile.TemporaryDirectory() as scratch:
        if gpt2_folder is None:  # GPT-2's by construction: said before the seconds it takes to make
            announce()
        folder = gpt2_folder or random_gpt2_folder(scratch, seed=seed)
        hub_kwargs = at_one_revision(folder, hub_kwargs)
        config_dict = read_config_dict(folder, **hub_kwargs)  # both models are built from this one read
        model_type = config_dict.get("model_type")
        if model_type != "gpt2":
            raise ValueError(f"{folder}: model_type {model_type!r}: verify-gpt2 compares GPT-2 checkpoints")
        if gpt2_folder is not None:
            announce()
        with reading_checkpoint(folder):
            # in float32, whatever the weights are stored in: the claim is fp32 logits within 1e-5 of GPT-2's
            gpt2 = load_strictly(folder, GPT2LMHeadModel, config=config_dict, dtype=torch.float32, **hub_kwargs).eval()
            tiny = load_strictly(folder, config=config_dict, dtype=torch.float32, **hub_kwargs).eval()
        tokenizer = gpt2_tokenizer()
        ids = torch.tensor([tokenizer(text).input_ids])
        if ids.shape[1] >= gpt2.config.n_positions:
            raise ValueError(
                f"`text` is {ids.shape[1]} tokens long, and {folder} has {gpt2.config.n_positions} positions: no room "
                "for a continuation to compare; give a shorter one"
            )
        result = compare_with_gpt2(tiny, gpt2, ids)
        result["tinygpt_text"] = tokenizer.decode(result["tinygpt_tokens"])
        result["gpt2_text"] = tokenizer.decode(result["gpt2_tokens"])
        result["parameters"] = tiny.num_parameters()
        result["tolerance"] = tolerance
        same_tokens = result["tinygpt_tokens"] == result["gpt2_tokens"]
        result["ok"] = same_tokens and within_tolerance(result["max_abs_logit_delta"], result["logit_scale"], tolerance)
        return result
