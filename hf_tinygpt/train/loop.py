"""Train a TinyGPT from scratch (or from a checkpoint) with accelerate: one CPU process, or data-parallel on many
processes/GPUs/machines through `accelerate launch` or `torchrun`, with no change to the code.

`train` finds everything that can be wrong with the settings, OUT or the data before OUT is touched; `_train` is
the loop, as nanoGPT's train.py reads: data → step → log → evaluate → save. The run folder (`RunFolder`) keeps
the books of what is written; the data (`RunData`) hands out each step's batch.
"""

import signal
import sys
import time
import warnings

import torch
from tqdm.auto import tqdm
from transformers import get_cosine_with_min_lr_schedule_with_warmup

from ..folders.bundled import load_tokenizer
from ..folders.errors import needs_extra
from ..folders.reading import load_strictly, read_config_dict
from ..model.configuration_tinygpt import TinyGPTConfig
from ..model.modeling_tinygpt import TinyGPTForCausalLM
from ..model.positions import positions_reach
from .data import RunData, batch, run_data
from .evaluate import perplexity
from .settings import DROPOUT_FIELDS, SMALL_MODEL, TrainingSettings, inputs_of

try:
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration, set_seed

    from .run_folder import TRACKERS, RunFolder, TrainingState
except ImportError as error:
    raise needs_extra("train", error) from error


def train(settings: TrainingSettings, *, token: str | None = None) -> tuple[TinyGPTForCausalLM, dict]:
    """Run (or resume) a training run; returns (this process's model, a summary). The final model is written to
    OUT/model, its summary (loss history, validation perplexities, wall time) to OUT/summary.json. `token`: for a
    Hub `init_from`, a Hub token (never recorded; default: the one huggingface_hub knows).

    Everything that can be wrong with the settings, OUT or the data is found before the run folder is touched."""
    protect = inputs_of(settings)
    out = RunFolder.check(settings, protect)
    # cpu=True where there is no accelerator: accelerate then also treats `torchrun` on CPUs as data-parallel (gloo).
    # bf16 is torch's own autocast in the step, not accelerate's mixed_precision, which is fixed per process.
    accelerator = Accelerator(
        cpu=not torch.accelerator.is_available(),
        gradient_accumulation_steps=settings.grad_accum,
        log_with=settings.report_to or None,
        project_config=ProjectConfiguration(project_dir=str(out), logging_dir=str(out / TRACKERS)),
    )
    if settings.batch_size % (accelerator.num_processes * settings.grad_accum):
        raise ValueError(
            f"`TrainingSettings.batch_size` {settings.batch_size} does not split over {accelerator.num_processes} "
            f"process(es) × {settings.grad_accum} micro-batches (`TrainingSettings.grad_accum`)"
        )
    tokenizer_from = settings.tokenizer or "gpt2"
    tokenizer = load_tokenizer(tokenizer_from)
    if tokenizer.eos_token_id is None:
        raise ValueError(
            f"the tokenizer {tokenizer_from} (`TrainingSettings.tokenizer`) has no end-of-text (eos) token, which "
            "training puts after each file: give its tokenizer_config.json an eos_token"
        )
    data = run_data(settings, tokenizer, tokenizer_from, accelerator)
    if not settings.init_from:
        start = build_config(settings, len(tokenizer), tokenizer.eos_token_id)
    else:
        start = starting_model(settings, len(tokenizer), token)

    run = RunFolder(out, accelerator, settings, data)
    with run.held(protect):  # the main process holds OUT's lock for the whole run
        accelerator.wait_for_everyone()
        return _train(settings, accelerator, run, start, data)


def _train(settings: TrainingSettings, accelerator, run: RunFolder, start, data: RunData):
    """`start`: the model to train (from `init_from`), or the config of a new one."""
    state = training_state(settings, accelerator, start)
    progress = run.begin(state)
    if progress.finished is not None:
        return accelerator.unwrap_model(state.model, keep_torch_compile=False), progress.finished

    bar = tqdm(  # disable=True off the main process only: a given disable=False would win over TQDM_DISABLE=1
        total=settings.steps,
        initial=progress.step,
        desc="training",
        unit="step",
        dynamic_ncols=True,
        **({} if run.main else {"disable": True}),
    )
    state.model.train()
    progress.started = time.perf_counter()
    try:  # a run folder that vanishes (deleted, its disk unmounted) loses no training: it is saved elsewhere
        with StopRequest() as stop:
            while progress.step < settings.steps:
                tick = time.perf_counter()
                ids = batch(data, progress.step, settings, accelerator)  # data
                lr = state.schedule.get_last_lr()[0]  # the rate this step uses
                loss = step(state, ids, settings, accelerator)  # step
                progress.step += 1
                tokens_per_s = settings.batch_size * settings.block_size / (time.perf_counter() - tick)
                bar.update(1)  # log
                bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_s:,.0f}")
                logged = {"step": progress.step, "train_loss": loss, "lr": lr, "tokens_per_s": tokens_per_s}
                if data.validation is not None and (
                    progress.step % settings.eval_every == 0 or progress.step == settings.steps
                ):  # evaluate
                    logged["validation_perplexity"] = perplexity(
                        state.model, data.validation, settings.block_size, settings.eval_batch_size, accelerator
                    )
                    run.say(
                        f"step {progress.step}: train loss {loss:.4f}, validation perplexity "
                        f"{logged['validation_perplexity']:.2f}",
                        file=sys.stdout,
                    )
                stop_now = stop.requested_anywhere(accelerator)
                run.record(progress, logged, state, stopping=stop_now)  # save
                if stop_now:
                    bar.close()
                    said = f"checkpoint saved at step {progress.step}; continue with `TrainingSettings.resume=True`"
                    raise TrainingInterrupted(said if run.main else "")
        bar.close()
        model = accelerator.unwrap_model(state.model, keep_torch_compile=False)
        summary = run.finish(model, progress)
    except OSError as error:
        if run.out.is_dir() or not run.main:
            raise
        bar.close()
        model = accelerator.unwrap_model(state.model, keep_torch_compile=False)
        raise run.rescue(progress.step, model) from error
    accelerator.wait_for_everyone()
    return model, summary


def training_state(settings: TrainingSettings, accelerator, start) -> TrainingState:
    """The model (new from a config, or the one given), AdamW and the cosine schedule, prepared by accelerate."""
    if accelerator.is_main_process:
        warn_if_bf16_is_slow_here(settings, accelerator.device)
    set_seed(settings.seed)
    model = start if isinstance(start, TinyGPTForCausalLM) else TinyGPTForCausalLM(start)
    decay = [p for p in model.parameters() if p.dim() >= 2]  # matrices decay; biases and LayerNorms do not
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    optimizer = adamw(groups, settings.learning_rate)
    schedule = get_cosine_with_min_lr_schedule_with_warmup(
        optimizer, settings.warmup_steps, settings.steps, min_lr_rate=settings.min_lr_ratio
    )
    # The schedule is not prepared: accelerate would step it once per process, but our batch size is global.
    model, optimizer = accelerator.prepare(model, optimizer)
    if settings.compile:  # not accelerate's dynamo_backend: the first Accelerator of a process fixes that for all
        model = torch.compile(model)
    return TrainingState(model, optimizer, schedule)


def step(state: TrainingState, ids: torch.Tensor, settings: TrainingSettings, accelerator) -> float:
    """One optimizer step on this process's share of the batch; the step's loss, averaged over every process.

    accelerate's `accumulate`: backward divides each micro-batch's loss by grad_accum, and the gradients are
    synchronised across processes and applied (optimizer.step) only after the last micro-batch."""
    step_loss = 0.0
    for micro_ids in ids.chunk(settings.grad_accum):
        with accelerator.accumulate(state.model):
            with torch.autocast(accelerator.device.type, dtype=torch.bfloat16, enabled=settings.bf16):
                loss = state.model(input_ids=micro_ids, labels=micro_ids, use_cache=False).loss  # no cache to build
            accelerator.backward(loss)
            if settings.grad_clip and accelerator.sync_gradients:
                accelerator.clip_grad_norm_(state.model.parameters(), settings.grad_clip)
            state.optimizer.step()
            state.optimizer.zero_grad(set_to_none=True)
        step_loss += loss.detach() / settings.grad_accum  # micro-batches hold equally many tokens
    state.schedule.step()
    return accelerator.reduce(step_loss, "mean").item()


def adamw(groups: list[dict], learning_rate: float) -> torch.optim.AdamW:
    """AdamW, fused (one kernel over every parameter) where torch has that kernel for the parameters' device, else
    its multi-tensor path: the same update, in fewer passes over the weights."""
    try:
        return torch.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.95), fused=True)
    except RuntimeError:  # no fused kernel for this device
        return torch.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.95))


def build_config(settings: TrainingSettings, vocab_size: int, eos_token_id: int) -> TinyGPTConfig:
    """The config of a new model: the small model, sized for the run's blocks and tokenizer, as `config` changes it."""
    fields = {
        **SMALL_MODEL,
        "n_positions": settings.block_size,
        "vocab_size": vocab_size,
        "bos_token_id": eos_token_id,
        "eos_token_id": eos_token_id,
        **settings.config,
    }
    config = TinyGPTConfig(**fields)
    if (reach := positions_reach(config)) is not None and reach < settings.block_size:
        raise ValueError(
            f"`TrainingSettings.block_size` {settings.block_size} > n_positions {reach} "
            f"({config.position_embedding_type} positions)"
        )
    return config


def starting_model(settings: TrainingSettings, vocab_size: int, token: str | None = None) -> TinyGPTForCausalLM:
    """The model of `init_from`, loaded strictly in float32 (a GPT-2 checkpoint converted as it loads), with the
    run's dropout; it must take the tokenizer's ids and the run's blocks."""
    hub = {"revision": settings.init_revision, "token": token}
    if quantized := read_config_dict(settings.init_from, **hub).get("quantization_config"):
        method = quantized.get("quant_method", "quantized") if isinstance(quantized, dict) else "quantized"
        raise ValueError(
            f"{settings.init_from} (`TrainingSettings.init_from`) holds {method} weights (its config.json has a "
            "quantization_config): training needs float weights; start from the model it was quantized from"
        )
    if fixed := sorted(set(settings.config) - set(DROPOUT_FIELDS)):
        raise ValueError(
            f"`TrainingSettings.config` sets {', '.join(fixed)}, which the model of `TrainingSettings.init_from` "
            f"({settings.init_from}) fixes; only dropout ({', '.join(DROPOUT_FIELDS)}) may change"
        )
    model = load_strictly(settings.init_from, dtype=torch.float32, **hub, **settings.config)  # the run's dropout
    if vocab_size > model.config.vocab_size:
        raise ValueError(
            f"the tokenizer has {vocab_size} tokens, more than the {model.config.vocab_size} rows of "
            f"{settings.init_from} (`TrainingSettings.init_from`): train with the tokenizer it was made with"
        )
    if (reach := positions_reach(model.config)) is not None and reach < settings.block_size:
        raise ValueError(
            f"`TrainingSettings.block_size` {settings.block_size} > n_positions {reach} of "
            f"{settings.init_from} (`TrainingSettings.init_from`, {model.config.position_embedding_type} positions)"
        )
    return model


def cpu_has_bf16_instructions() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX-512 BF16 or AMX), by torch's own probes (private, so a
    torch without them counts as having the instructions: no warning rather than a wrong one)."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    probes = [probe for probe in probes if probe is not None]
    return not probes or any(probe() for probe in probes)


def warn_if_bf16_is_slow_here(settings: TrainingSettings, device: torch.device):
    """bf16 autocast on a CPU without bf16 instructions trains ~14x slower than float32 (scripts/README.md,
    "Training speed"): say so once, before the first step, with the way out."""
    if settings.bf16 and device.type == "cpu" and not cpu_has_bf16_instructions():
        warnings.warn(
            "`TrainingSettings.bf16`: this CPU has no bf16 instructions (AVX-512 BF16 or AMX), so bf16 autocast "
            "trains about 14x slower than float32 here; leave `bf16=True` out to train in float32",
            stacklevel=5,  # the caller of `train`
        )


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the run after a checkpoint was saved; the main process's message says where and how to go on
    (the other processes' is empty, so that it is said once)."""


# The signals that ask a run to stop: Ctrl-C, `kill` (and a batch system's preemption), a closed terminal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopRequest:
    """Ctrl-C, SIGTERM or SIGHUP asks the loop to stop after the current step (a checkpoint is then saved): nothing
    is lost. A second one stops at once."""

    def __init__(self):
        self.requested = False
        self._previous = {}

    def __enter__(self):
        for number in STOP_SIGNALS:
            self._previous[number] = signal.signal(number, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.requested:  # a second one: stop now
            raise KeyboardInterrupt
        self.requested = True

    def requested_anywhere(self, accelerator) -> bool:
        """Whether any process was asked to stop: all of them then stop after the same step."""
        return accelerator.reduce(torch.tensor(float(self.requested), device=accelerator.device), "sum") > 0

    def __exit__(self, *exc):
        for number, previous in self._previous.items():
            signal.signal(number, previous)


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def keep_freed_memory() -> bool:
    """Make glibc's malloc keep large blocks a process frees, for the next step to reuse (process-wide, for good).

    A CPU training step allocates and frees tensors of hundreds of MB (the logits over the vocabulary and their
    gradients). glibc serves each from a fresh mmap and returns it to the system when freed, so every step faults in
    and zeroes all of them again, in the kernel (scripts/measurement_log.md, "Training speed", has what it cost). With
    no mmaps and no trimming they stay in the heap and are reused. The process's memory then never shrinks below its
    peak, which a training process reaches at every step anyway. Returns whether the setting took (glibc only)."""
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)
    return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
