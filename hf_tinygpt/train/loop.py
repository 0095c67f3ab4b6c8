"""Train a TinyGPT from scratch (or from a checkpoint) with accelerate: one CPU process, or data-parallel on many
processes/GPUs/machines through `accelerate launch` or `torchrun`, with no change to the code.

`train` reads as nanoGPT's train.py: the data (`RunData`) and the model with its optimizer (`TrainingState`) are made
before OUT is touched, so that everything that can be wrong with the settings, OUT or the data is found first; then
the loop: data → step → log → evaluate → save. The run folder (`RunFolder`) keeps the books of what is written.
"""

import signal
import sys
import time

import numpy as np
import torch
from tqdm.auto import tqdm

from ..folders.errors import needs_extra
from ..model.modeling_tinygpt import TinyGPTForCausalLM
from .data import RunData, run_data
from .evaluate import perplexity
from .settings import TrainingSettings, inputs_of

try:
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration

    from .run_folder import TRACKERS, RunFolder
    from .state import TrainingState, training_state
except ImportError as error:
    raise needs_extra("train", error) from error


def train(settings: TrainingSettings, *, token: str | None = None) -> tuple[TinyGPTForCausalLM, dict]:
    """Run (or resume) a training run; returns (this process's model, a summary). The final model is written to
    OUT/model, its summary (loss history, validation perplexities, wall time) to OUT/summary.json (a run that had
    already finished returns its summary, and its newest checkpoint's model). `token`: for a Hub `init_from`, a Hub
    token (never recorded; default: the one huggingface_hub knows).

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
    data = run_data(settings, accelerator)
    state = training_state(settings, accelerator, data.tokenizer, token)
    run = RunFolder(out, accelerator, settings, data)
    with run.held(protect):  # the main process holds OUT's lock for the whole run
        accelerator.wait_for_everyone()
        progress = run.begin(state)
        if progress.finished is not None:
            return accelerator.unwrap_model(state.model, keep_torch_compile=False), progress.finished
        state.model.train()
        progress.started = time.perf_counter()
        bar = tqdm(  # disable=True off the main process only: a given disable=False would win over TQDM_DISABLE=1
            total=settings.steps,
            initial=progress.step,
            desc="training",
            unit="step",
            dynamic_ncols=True,
            **({} if run.main else {"disable": True}),
        )
        # A run folder that vanishes (deleted, its disk unmounted) loses no training: the model is saved elsewhere.
        with run.rescued(progress, state.model), bar, StopRequest() as stop:
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
                    said = f"checkpoint saved at step {progress.step}; continue with `TrainingSettings.resume=True`"
                    raise TrainingInterrupted(said if run.main else "", stop.signal_number)
        model = accelerator.unwrap_model(state.model, keep_torch_compile=False)
        summary = run.finish(model, progress)
        accelerator.wait_for_everyone()
        return model, summary


def batch(data: RunData, step: int, settings: TrainingSettings, accelerator) -> torch.Tensor:
    """This process's share of the global batch of `step`, as int64 ids on the run's device. The batch of step s is
    drawn from a permutation seeded by (seed, epoch), so a resumed run sees exactly the batches an uninterrupted one
    would, and N processes split exactly the global batch one process would take whole."""
    indices = batch_indices(step, settings.batch_size, len(data.blocks), settings.seed)
    share = settings.batch_size // accelerator.num_processes
    mine = indices[accelerator.process_index * share : (accelerator.process_index + 1) * share]
    ids = read_blocks(data.blocks, mine)
    if accelerator.device.type != "cpu":  # pinned host memory lets the copy overlap the previous step
        ids = ids.pin_memory().to(accelerator.device, non_blocking=True)
    return ids


def read_blocks(blocks, indices: torch.Tensor) -> torch.Tensor:
    """The blocks at `indices` as int64 ids: only these are read from the token file."""
    return torch.from_numpy(np.asarray(blocks[indices.numpy()], dtype=np.int64))


def batch_indices(step: int, batch_size: int, n_blocks: int, seed: int) -> torch.Tensor:
    """The block indices of global batch `step`: consecutive slices of a fresh permutation for each epoch."""
    positions = torch.arange(step * batch_size, (step + 1) * batch_size)
    epochs, offsets = positions // n_blocks, positions % n_blocks
    permutations = {
        int(e): torch.randperm(n_blocks, generator=torch.Generator().manual_seed(seed * 100_003 + int(e)))
        for e in epochs.unique()
    }
    return torch.stack([permutations[int(e)][o] for e, o in zip(epochs, offsets, strict=True)])


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


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the run after a checkpoint was saved; the main process's message says where and how to go on
    (the other processes' is empty, so that it is said once). `signal_number`: the signal this process was sent
    (None: another process was)."""

    def __init__(self, message: str, signal_number: int | None = None):
        super().__init__(message)
        self.signal_number = signal_number


# The signals that ask a run to stop: Ctrl-C, `kill` (and a batch system's preemption), a closed terminal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopRequest:
    """Ctrl-C, SIGTERM or SIGHUP asks the loop to stop after the current step (a checkpoint is then saved): nothing
    is lost. A second one stops at once."""

    def __init__(self):
        self.requested = False
        self.signal_number: int | None = None  # the first stop signal this process was sent
        self._previous = {}

    def __enter__(self):
        for number in STOP_SIGNALS:
            self._previous[number] = signal.signal(number, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.requested:  # a second one: stop now
            raise KeyboardInterrupt
        self.requested, self.signal_number = True, signum

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
