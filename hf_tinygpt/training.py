"""Train a TinyGPT from scratch on plain-text files, with accelerate: one CPU process, or data-parallel on many
processes/GPUs/machines through `accelerate launch` or `torchrun`, with no change to the code.

The run is a pure function of its settings: the batch of step s is drawn from a permutation seeded by (seed, epoch),
so a resumed run sees exactly the batches an uninterrupted one would, and N processes split exactly the global
batch one process would take whole.
"""

import copy
import json
import math
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from tqdm.auto import tqdm
from transformers import get_cosine_with_min_lr_schedule_with_warmup

from .configuration_tinygpt import TinyGPTConfig
from .modeling_tinygpt import TinyGPTForCausalLM

CHECKPOINTS = "checkpoints"  # OUT/checkpoints/step-000100: accelerate states, for --resume
FINAL = "model"  # OUT/model: the complete tinygpt folder


@dataclass
class TrainingSettings:
    out: str
    train: list[str]
    validation: list[str] = field(default_factory=list)
    glob: str = "*.txt"
    tokenizer: str | None = None  # a tokenizer folder; None: the bundled GPT-2 BPE
    config: dict = field(default_factory=dict)  # TinyGPTConfig fields
    block_size: int = 128
    batch_size: int = 16  # global: split across processes
    steps: int = 1000
    learning_rate: float = 1e-3
    min_lr_ratio: float = 0.1  # cosine decay ends at this fraction of the peak
    warmup_steps: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    bf16: bool = False
    seed: int = 0
    eval_every: int = 200
    eval_batch_size: int = 4  # logits are batch × block × vocab floats
    save_every: int = 200
    keep_checkpoints: int = 2
    save_dtype: str | None = None  # float32 / bfloat16 / float16 for the final weights
    resume: bool = False
    force: bool = False
    command: str = ""  # what produced this run, for the model card


# ---- data ----------------------------------------------------------------------------------------------------


def text_files(paths: list[str], glob: str = "*.txt", exclude: list[str] = ()) -> list[Path]:
    """Files named directly, plus those matching `glob` in named folders (sorted), minus `exclude` (held out)."""
    held_out = {Path(p).resolve() for p in exclude}
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            files += sorted(path.glob(glob))
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"{path}: no such file or folder")
    files = [f for f in files if f.resolve() not in held_out]
    if not files:
        raise ValueError(f"no text files in {', '.join(paths)} (matching {glob!r}, after holding out validation)")
    return files


def tokenize_files(files: list[Path], tokenizer) -> torch.Tensor:
    """All files as one stream of token ids, each file followed by the end-of-text token."""
    ids = []
    for file in files:
        ids += tokenizer(file.read_text(encoding="utf-8")).input_ids + [tokenizer.eos_token_id]
    return torch.tensor(ids, dtype=torch.long)


def pack(tokens: torch.Tensor, block_size: int) -> torch.Tensor:
    """(n_blocks, block_size) non-overlapping blocks; the ragged tail is dropped."""
    n_blocks = len(tokens) // block_size
    if n_blocks == 0:
        raise ValueError(f"{len(tokens)} tokens do not fill one block of {block_size}")
    return tokens[: n_blocks * block_size].view(n_blocks, block_size)


def batch_indices(step: int, batch_size: int, n_blocks: int, seed: int) -> torch.Tensor:
    """The block indices of global batch `step`: consecutive slices of a fresh permutation for each epoch."""
    positions = torch.arange(step * batch_size, (step + 1) * batch_size)
    epochs, offsets = positions // n_blocks, positions % n_blocks
    permutations = {int(e): torch.randperm(n_blocks, generator=torch.Generator().manual_seed(seed * 100_003 + int(e)))
                    for e in epochs.unique()}  # fmt: skip
    return torch.stack([permutations[int(e)][o] for e, o in zip(epochs, offsets)])


@torch.no_grad()
def perplexity(model, tokens: torch.Tensor, block_size: int, batch_size: int = 16, accelerator=None) -> float:
    """exp(mean next-token loss) over `tokens` cut into non-overlapping windows of `block_size` (each window's
    first token has no context and is not scored). With an accelerator, windows are shared out and summed."""
    blocks = tokens[: len(tokens) // block_size * block_size].view(-1, block_size)
    if len(tokens) % block_size > 1:  # score the tail too
        tail = tokens[len(blocks) * block_size :]
        blocks = list(blocks) + [tail]
    rank, world = (accelerator.process_index, accelerator.num_processes) if accelerator else (0, 1)
    device = accelerator.device if accelerator else next(model.parameters()).device
    total, count = torch.zeros((), dtype=torch.float64, device=device), torch.zeros((), device=device)
    mine = list(blocks)[rank::world]
    was_training = model.training
    model.eval()
    for start in range(0, len(mine), batch_size):
        chunk = mine[start : start + batch_size]
        for same_length in _by_length(chunk):
            ids = torch.stack(same_length).to(device)
            logits = model(ids).logits.float()
            nll = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten(), reduction="sum")
            total += nll.double()
            count += ids[:, 1:].numel()
    model.train(was_training)
    if accelerator is not None:
        total, count = accelerator.reduce(total, "sum"), accelerator.reduce(count, "sum")
    return math.exp(total.item() / count.item())


def _by_length(blocks):
    lengths = sorted({len(b) for b in blocks})
    return [[b for b in blocks if len(b) == n] for n in lengths]


# ---- the run -------------------------------------------------------------------------------------------------


class _StopRequest:
    """Ctrl-C asks the loop to stop after the current step (a checkpoint is then saved): nothing is lost."""

    def __init__(self):
        self.requested = False
        self._previous = None

    def __enter__(self):
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.requested:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self._previous)


def _checkpoint_dirs(out: Path) -> list[Path]:
    return sorted((out / CHECKPOINTS).glob("step-*"))


def _changed_settings(saved: dict, now: dict) -> list[str]:
    free = {"resume", "force", "command", "eval_every", "save_every", "keep_checkpoints"}  # do not change results
    return sorted(key for key in now if key not in free and saved.get(key) != now[key])


def build_config(settings: TrainingSettings, vocab_size: int, eos_token_id: int) -> TinyGPTConfig:
    fields = {"n_positions": settings.block_size, "vocab_size": vocab_size, "bos_token_id": eos_token_id,
              "eos_token_id": eos_token_id, **settings.config}  # fmt: skip
    config = TinyGPTConfig(**fields)
    if config.position_embedding_type == "learned" and config.n_positions < settings.block_size:
        raise ValueError(f"block_size {settings.block_size} > n_positions {config.n_positions} (learned positions)")
    return config


def train(settings: TrainingSettings) -> tuple[TinyGPTForCausalLM, dict]:
    """Run (or resume) a training run; returns (this process's model, a summary). The final model is written to
    OUT/model, its summary (loss history, validation perplexities, wall time) to OUT/summary.json."""
    from . import GPT2_TOKENIZER_DIR
    from .convert import load_tokenizer

    out = Path(settings.out)
    if out.exists() and not settings.resume and not settings.force:
        raise FileExistsError(f"{out} exists; pass --resume to continue that run or --force to start afresh")
    # cpu=True where there is no accelerator: accelerate then also treats `torchrun` on CPUs as data-parallel (gloo)
    accelerator = Accelerator(mixed_precision="bf16" if settings.bf16 else "no", cpu=not torch.accelerator.is_available())
    main = accelerator.is_main_process
    if settings.batch_size % accelerator.num_processes:
        raise ValueError(f"batch size {settings.batch_size} does not split over {accelerator.num_processes} processes")
    if out.exists() and settings.force and not settings.resume and main:
        shutil.rmtree(out)
    accelerator.wait_for_everyone()

    tokenizer_from = settings.tokenizer or str(GPT2_TOKENIZER_DIR)
    tokenizer = load_tokenizer(tokenizer_from)
    train_files = text_files(settings.train, settings.glob, exclude=settings.validation)
    train_blocks = pack(tokenize_files(train_files, tokenizer), settings.block_size)
    validation = tokenize_files([Path(p) for p in settings.validation], tokenizer) if settings.validation else None

    set_seed(settings.seed)
    config = build_config(settings, len(tokenizer), tokenizer.eos_token_id)
    model = TinyGPTForCausalLM(config)
    decay = [p for p in model.parameters() if p.dim() >= 2]  # matrices decay; biases and LayerNorms do not
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=settings.learning_rate, betas=(0.9, 0.95),
    )  # fmt: skip
    schedule = get_cosine_with_min_lr_schedule_with_warmup(
        optimizer, settings.warmup_steps, settings.steps, min_lr_rate=settings.min_lr_ratio
    )
    model, optimizer = accelerator.prepare(model, optimizer)
    # Not prepared: accelerate would step a schedule once per process, but our batch size is already global.
    accelerator.register_for_checkpointing(schedule)

    step = 0
    if settings.resume and (checkpoints := _checkpoint_dirs(out)):
        progress_file = json.loads((checkpoints[-1] / "progress.json").read_text())
        if changed := _changed_settings(progress_file["settings"], asdict(settings)):
            raise ValueError(f"--resume needs the settings the run started with; changed: {', '.join(changed)}")
        accelerator.load_state(str(checkpoints[-1]))
        step = progress_file["step"]
        if main:
            tqdm.write(f"resumed from {checkpoints[-1]} (step {step})")

    def save_checkpoint():
        folder = out / CHECKPOINTS / f"step-{step:06d}"
        accelerator.save_state(str(folder))
        if main:
            (folder / "progress.json").write_text(json.dumps({"step": step, "settings": asdict(settings)}, indent=2))
            for old in _checkpoint_dirs(out)[: -settings.keep_checkpoints]:
                shutil.rmtree(old)
        accelerator.wait_for_everyone()

    per_process = settings.batch_size // accelerator.num_processes
    tokens_per_step = settings.batch_size * settings.block_size
    history, started, losses = [], time.perf_counter(), []
    progress = tqdm(total=settings.steps, initial=step, disable=not main, desc="training", unit="step", dynamic_ncols=True)
    model.train()
    with _StopRequest() as stop:
        while step < settings.steps:
            tick = time.perf_counter()
            indices = batch_indices(step, settings.batch_size, len(train_blocks), settings.seed)
            mine = indices[accelerator.process_index * per_process : (accelerator.process_index + 1) * per_process]
            ids = train_blocks[mine].to(accelerator.device)
            with accelerator.autocast():
                loss = model(input_ids=ids, labels=ids).loss
            lr = schedule.get_last_lr()[0]  # the rate this step uses
            accelerator.backward(loss)
            if settings.grad_clip:
                accelerator.clip_grad_norm_(model.parameters(), settings.grad_clip)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            mean_loss = accelerator.reduce(loss.detach(), "mean").item()
            losses.append(mean_loss)
            progress.update(1)
            progress.set_postfix(loss=f"{mean_loss:.3f}", tok_s=f"{tokens_per_step / (time.perf_counter() - tick):,.0f}")
            record = {"step": step, "train_loss": mean_loss, "lr": lr}
            if validation is not None and (step % settings.eval_every == 0 or step == settings.steps):
                record["validation_perplexity"] = perplexity(
                    model, validation, settings.block_size, settings.eval_batch_size, accelerator
                )
                if main:
                    tqdm.write(f"step {step}: train loss {mean_loss:.4f}, validation perplexity "
                               f"{record['validation_perplexity']:.2f}")  # fmt: skip
            history.append(record)
            stop_now = accelerator.reduce(torch.tensor(float(stop.requested), device=accelerator.device), "sum") > 0
            if step % settings.save_every == 0 or stop_now:
                save_checkpoint()
            if stop_now:
                progress.close()
                if main:
                    print(f"interrupted: checkpoint saved at step {step}; continue with --resume", file=sys.stderr)
                raise KeyboardInterrupt
    progress.close()
    wall = time.perf_counter() - started

    summary = {"steps": step, "final_train_loss": losses[-1] if losses else None, "wall_s": wall, "history": history}
    model = accelerator.unwrap_model(model)
    if main:
        summary["validation_perplexity"] = _write_final_model(
            model, out / FINAL, settings, tokenizer_from, len(train_files), train_blocks.numel(), validation, wall,
            accelerator,
        )  # fmt: skip
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    accelerator.wait_for_everyone()
    return model, summary


def _write_final_model(model, folder: Path, settings, tokenizer_from, n_files, train_tokens, validation, wall,
                       accelerator) -> float | None:  # fmt: skip
    """OUT/model, atomically: weights (in `save_dtype`), tokenizer, generation config, and a card whose validation
    perplexity is measured on the weights exactly as written."""
    from .convert import DTYPES, write_model_folder
    from .model_card import render_model_card

    dtype = DTYPES.get(settings.save_dtype) if settings.save_dtype else None
    if settings.save_dtype and dtype is None:
        raise ValueError(f"--save-dtype {settings.save_dtype!r} is not one of {sorted(DTYPES)}")
    to_save = model if dtype is None else copy.deepcopy(model).to(dtype)
    measured = {}

    def finish(staging):
        ppl = None
        if validation is not None:
            written = TinyGPTForCausalLM.from_pretrained(staging, dtype=torch.float32)
            ppl = perplexity(written, validation, settings.block_size, settings.eval_batch_size)
        measured["ppl"] = ppl
        device = accelerator.device.type
        if device == "cpu":
            device = f"CPU ({torch.get_num_threads()} threads)"
        hardware = (f"{accelerator.num_processes} process{'es' if accelerator.num_processes > 1 else ''} × {device}"
                    f"{', bf16 autocast' if settings.bf16 else ''}")  # fmt: skip
        training = {
            "train_description": f"{n_files} text files ({', '.join(settings.train)}, `{settings.glob}`)",
            "train_tokens": int(train_tokens), "steps": settings.steps,
            "tokens_per_step": settings.batch_size * settings.block_size, "hardware": hardware,
            "wall_time": f"{wall / 60:.1f} min", "validation_perplexity": ppl,
            "validation_description": ", ".join(Path(p).name for p in settings.validation) or None,
            "validation_tokens": int(len(validation)) if validation is not None else 0,
            "block_size": settings.block_size, "command": settings.command,
            "seed": settings.seed, "learning_rate": settings.learning_rate,
        }  # fmt: skip
        card = render_model_card(model.config, model_id=str(folder), provenance={"made_by": "training",
                                                                               "training": training})  # fmt: skip
        card.save(Path(staging) / "README.md")

    write_model_folder(to_save, folder, tokenizer_from=tokenizer_from, force=True, finish=finish)
    return measured["ppl"]
