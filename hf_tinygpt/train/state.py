"""What a training step changes: the model (new, from the settings' small model and `config`, or the one
`init_from` names), AdamW and the cosine schedule, as accelerate prepared them. `train` builds it before the run
folder is touched: a model that cannot be made or loaded costs nothing there."""

import os
import warnings
from dataclasses import dataclass

import psutil
import torch
from accelerate.utils import set_seed
from transformers import get_cosine_with_min_lr_schedule_with_warmup

from ..folders.bundled import check_trained_with
from ..folders.reading import load_strictly, read_config_dict
from ..model.configuration_tinygpt import TinyGPTConfig
from ..model.modeling_tinygpt import TinyGPTForCausalLM
from ..model.params import parameter_breakdown
from ..model.positions import positions_reach
from ..model.pretrained import cpu_has_bf16_instructions
from .settings import TrainingSettings, build_config

BETAS = (0.9, 0.95)  # AdamW's, as nanoGPT and GPT-3 train


@dataclass
class TrainingState:
    """What a step changes and a checkpoint saves (the model as accelerate prepared it, perhaps compiled)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler


def training_state(settings: TrainingSettings, accelerator, tokenizer, token: str | None = None) -> TrainingState:
    """The model (new, sized for the run's tokenizer and blocks, or `init_from`'s: `token` is its Hub token), AdamW
    and the cosine schedule, prepared by accelerate."""
    if accelerator.is_main_process:
        warn_if_bf16_is_slow_here(settings, accelerator.device)
    vocab_size = len(tokenizer)
    if not settings.init_from:
        start = build_config(settings, vocab_size, tokenizer.eos_token_id)
        check_it_fits(start, accelerator.device)
    else:
        start = starting_model(settings, tokenizer, token)
    set_seed(settings.seed)
    model = start if isinstance(start, TinyGPTForCausalLM) else TinyGPTForCausalLM(start)
    decay = [p for p in model.parameters() if p.dim() >= 2]  # matrices decay; biases and LayerNorms do not
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    try:  # fused: one kernel over every parameter instead of several passes, the same update
        optimizer = torch.optim.AdamW(groups, lr=settings.learning_rate, betas=BETAS, fused=True)
    except RuntimeError:  # no fused kernel for this device: torch's multi-tensor path
        optimizer = torch.optim.AdamW(groups, lr=settings.learning_rate, betas=BETAS)
    schedule = get_cosine_with_min_lr_schedule_with_warmup(
        optimizer, settings.warmup_steps, settings.steps, min_lr_rate=settings.min_lr_ratio
    )
    # The schedule is not prepared: accelerate would step it once per process, but our batch size is global.
    model, optimizer = accelerator.prepare(model, optimizer)
    if settings.compile:  # not accelerate's dynamo_backend: the first Accelerator of a process fixes that for all
        model = torch.compile(model)
    return TrainingState(model, optimizer, schedule)


def check_it_fits(config: TinyGPTConfig, device: torch.device):
    """A new model's weights, their gradients and AdamW's two moments (16 bytes a parameter, in float32), checked
    against the memory free on `device` before they are made: past it, the system may end the process unannounced."""
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if device.type == "cpu" else 1  # on this machine
    if device.type == "cpu":
        free = psutil.virtual_memory().available // processes
    elif device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    else:
        return
    parameters = parameter_breakdown(config)["total"]
    if (needed := 16 * parameters) > free:
        raise ValueError(
            f"the model has {parameters:,} parameters: they, their gradients and AdamW's moments need "
            f"{needed / 2**30:.1f} GiB, more than the {free / 2**30:.1f} GiB free on {device}"
            f"{f' for each of {processes} processes' if processes > 1 else ''}; train a smaller model "
            "(`n_positions`, `n_embd`, `n_layer`)"
        )


def starting_model(settings: TrainingSettings, tokenizer, token: str | None = None) -> TinyGPTForCausalLM:
    """The model of `init_from`, loaded strictly in float32 (a GPT-2 checkpoint converted as it loads), with the
    run's dropout; it must take the run's blocks and the tokenizer's ids, and be the tokenizer its card says it was
    trained with, where it says."""
    hub = {"revision": settings.init_revision, "token": token}
    if quantized := read_config_dict(settings.init_from, **hub).get("quantization_config"):
        method = quantized.get("quant_method", "quantized") if isinstance(quantized, dict) else "quantized"
        raise ValueError(
            f"{settings.init_from} (`TrainingSettings.init_from`) holds {method} weights (its config.json has a "
            "quantization_config): training needs float weights; start from the model it was quantized from"
        )
    its_own = (
        "train with the tokenizer it was made with (`TrainingSettings.tokenizer`: `TrainingSettings.init_from` "
        "itself, where it holds tokenizer files)"
    )
    what = f"the run's tokenizer (`TrainingSettings.tokenizer`: {settings.tokenizer or 'gpt2'})"
    check_trained_with(tokenizer, settings.init_from, what=what, fix=its_own, **hub)  # before its weights are read
    model = load_strictly(settings.init_from, dtype=torch.float32, **hub, **settings.config)  # the run's dropout
    if len(tokenizer) > model.config.vocab_size:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens, more than the {model.config.vocab_size} rows of "
            f"{settings.init_from} (`TrainingSettings.init_from`): {its_own}"
        )
    if (reach := positions_reach(model.config)) is not None and reach < settings.block_size:
        raise ValueError(
            f"`TrainingSettings.block_size` {settings.block_size} > n_positions {reach} of "
            f"{settings.init_from} (`TrainingSettings.init_from`, {model.config.position_embedding_type} positions)"
        )
    return model


def warn_if_bf16_is_slow_here(settings: TrainingSettings, device: torch.device):
    """bf16 autocast on a CPU without bf16 instructions trains ~14x slower than float32 (scripts/README.md,
    "Training speed"): say so once, before the first step, with the way out."""
    if settings.bf16 and device.type == "cpu" and not cpu_has_bf16_instructions():
        warnings.warn(
            "`TrainingSettings.bf16`: this CPU has no bf16 instructions (AVX-512 BF16 or AMX), so bf16 autocast "
            "trains about 14x slower than float32 here; leave `bf16=True` out to train in float32",
            stacklevel=4,  # the caller of `train`
        )
