"""The run folder, OUT: everything a training run writes, kept provably ours by its manifest.

    OUT/checkpoints/step-000200/   what resuming needs (the newest `keep_checkpoints` of them)
    OUT/loss.png                   the loss curve, redrawn at every evaluation
    OUT/trackers/hf-tinygpt/       what the trackers of `report_to` write (TensorBoard)
    OUT/model/                     the complete tinygpt folder, with its card
    OUT/summary.json               the loss history, validation perplexity and wall time

Each of them is recorded in OUT's manifest before it appears and forgotten after it is gone, so the folder is ours
at every moment (`folders.outputs`). Only the main process writes; the others wait where it does.
"""

import contextlib
import json
import math
import pickle
import re
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from accelerate.utils import gather_object
from safetensors import SafetensorError
from safetensors.torch import load_file, save_model
from tqdm.auto import tqdm

from ..folders.model_folder import save_model_folder
from ..folders.outputs import (
    check_output,
    output_folder,
    read_manifest,
    record,
    record_tree,
    remove_leftovers_in,
    run_folder,
    unproven,
    write_recorded_file,
)
from ..folders.reading import describe, read_json_object
from ..folders.training_history import LOSS_CURVE, checked_history, loss_curve_png
from ..model.gpt2_layout import HEAD, TIED_TO
from .data import RunData
from .final_model import card_training, write_final_model
from .settings import TrainingSettings
from .state import TrainingState

CHECKPOINTS = "checkpoints"  # OUT/checkpoints/step-000100: what resuming needs
FINAL = "model"  # OUT/model: the complete tinygpt folder
SUMMARY = "summary.json"
TRACKERS, TRACKER_RUN = "trackers", "hf-tinygpt"  # OUT/trackers/hf-tinygpt: where TensorBoard writes

# Settings that do not change what the run computes: a resumed run may change them.
FREE_ON_RESUME = {
    "out",
    "resume",
    "force",
    "command",
    "eval_every",
    "save_every",
    "keep_checkpoints",
    "report_to",
    "data_cache",
}
# A checkpoint holds only safe formats: weights as safetensors, optimizer and schedule state and each process's RNG
# state as tensors/numbers that `torch.load(weights_only=True)` reads without running any code. (accelerate's
# `load_state` unpickles registered objects with weights_only=False, so a crafted run folder could run code.)
PROGRESS, WEIGHTS, TRAINING_STATE = "progress.json", "model.safetensors", "training_state.pt"


@dataclass
class Progress:
    """How far the run is: the steps taken, one history entry per step, and the training time so far."""

    step: int = 0
    history: list[dict] = field(default_factory=list)
    wall_before: float = 0.0  # seconds spent training before this process started (a resumed run)
    command: str = ""  # what started the run: its card records the recipe, not the command that resumed it
    started: float = field(default_factory=time.perf_counter)
    finished: dict | None = None  # the summary of a run that had already finished: nothing to do

    @property
    def wall_s(self) -> float:
        return self.wall_before + time.perf_counter() - self.started


class RunFolder:
    """OUT of one training run, as the loop sees it, in the loop's order: `begin` (resumed from the newest
    checkpoint, trackers started), `record` after each step (metrics, curve, checkpoints saved and pruned), `finish`
    (the final model and the summary), and `rescued` around them: where OUT vanished, the model is saved elsewhere."""

    def __init__(self, out: Path, accelerator, settings: TrainingSettings, data: RunData):
        self.out, self.accelerator, self.settings, self.data = out, accelerator, settings, data
        self.main = accelerator.is_main_process
        self.reporting = False  # whether trackers of `report_to` get the metrics (`_start_trackers`)

    @staticmethod
    def check(settings: TrainingSettings, protect: dict) -> Path:
        """OUT, checked before anything is read: free, or a run of ours to resume (or to replace, with `force`);
        never one of the run's inputs (`protect`)."""
        out = check_output(settings.out, force=settings.force, protect=protect, reuse=settings.resume, kind="run")
        if settings.resume and (out / FINAL).exists():  # written again at the end: say now if that would lose work
            check_output(out / FINAL, force=True)
        return out

    @contextlib.contextmanager
    def held(self, protect: dict):
        """OUT locked by the main process for the whole run; with `force` an earlier run is swapped out here."""
        if not self.main:
            yield
            return
        with run_folder(self.out, force=self.settings.force, resume=self.settings.resume, protect=protect):
            yield

    def begin(self, state: TrainingState) -> Progress:
        """Where the run starts: the newest checkpoint loaded into `state` (with `resume`), else step 0; the
        trackers started, unless the run had already finished (`Progress.finished`)."""
        settings = self.settings
        progress, checkpoint = self._resume(state) if settings.resume else (Progress(command=settings.command), None)
        self.settings = replace(settings, command=progress.command)  # the card records what started the run
        if settings.resume and (summary := self._finished_summary()) is not None:
            # Its newest checkpoint may be older than its last step; the settings were compared with it above.
            if checkpoint is None:
                raise ValueError(
                    f"`TrainingSettings.resume`: {self.out} holds a run that finished at step {summary.get('steps')} "
                    "and kept no checkpoint that loads to compare these settings with: there is nothing to resume "
                    "(to train again in its place, set `TrainingSettings.force`)"
                )
            self.say(f"{self.out}: this run already finished at step {summary.get('steps')}; nothing to do")
            progress.finished = summary
        else:
            if checkpoint is not None and self.main:
                tqdm.write(f"resumed from {checkpoint} (step {progress.step})")
            self._start_trackers()
        return progress

    def record(self, progress: Progress, logged: dict, state: TrainingState, *, stopping: bool):
        """After a step: its metrics kept and reported, the curve redrawn at an evaluation, a checkpoint saved
        every `save_every` steps or when the run is `stopping` (the trackers then end too)."""
        progress.history.append(logged)
        self._report(logged)
        if progress.step % self.settings.save_every == 0 or stopping:
            self._save_checkpoint(state, progress)  # first: what resuming needs
        if "validation_perplexity" in logged and self.main:
            write_recorded_file(self.out, LOSS_CURVE, loss_curve_png(progress.history))
        if stopping:
            self._end_trackers()

    # ---- checkpoints -------------------------------------------------------------------------------------------

    def checkpoints(self) -> list[Path]:
        """Complete checkpoints, oldest first. Each is written beside its place and renamed in when complete, so a
        checkpoint cut short by a kill is never taken for the newest (nor is a `step-N` without progress.json)."""
        return sorted(p for p in (self.out / CHECKPOINTS).glob("step-*") if (p / PROGRESS).is_file())

    def _save_checkpoint(self, state: TrainingState, progress: Progress):
        """OUT/checkpoints/step-N, then the oldest beyond `keep_checkpoints` removed (one someone changed is kept)."""
        settings, data = self.settings, self.data
        folder = self.out / CHECKPOINTS / f"step-{progress.step:06d}"
        if self.main:  # recorded before it appears, forgotten after it is gone: the run folder stays provably ours
            record(self.out, folders=[CHECKPOINTS], outputs=[f"{CHECKPOINTS}/{folder.name}"])
        at = {  # what progress.json records
            "step": progress.step,
            "settings": comparable(settings),
            "data": data.identity,
            "history": progress.history,
            "wall_s": progress.wall_s,
        }
        save_checkpoint(folder, self.accelerator, state, at)
        if self.main:
            for old in self.checkpoints()[: -settings.keep_checkpoints]:
                if problems := unproven(old):  # someone changed it meanwhile: leave it
                    tqdm.write(f"keeping {old}: it holds {', '.join(problems[:3])}", file=sys.stderr)
                    continue
                shutil.rmtree(old)
                record(self.out, forget=[f"{CHECKPOINTS}/{old.name}"])

    def _resume(self, state: TrainingState) -> tuple[Progress, Path | None]:
        """Load the newest checkpoint that loads (an unreadable one is reported and skipped) into `state`; where the
        run then stands, and that checkpoint (None: there was none). Checkpoints a kill cut short are removed first:
        only those the manifest proves ours. Every process resumes from the same checkpoint, or none does: each
        judges it, and what one of them cannot read is skipped, what one of them refuses ends the run, for all."""
        settings = self.settings
        self._remove_checkpoints_cut_short()
        for folder in reversed(self.checkpoints()):
            progress = read = skip = refusal = None
            try:
                progress, read = self._read_to_resume(folder, state)
            except _Skip as error:
                skip = str(error)
            except ValueError as error:
                refusal = str(error)
            verdicts = gather_object([(skip, refusal)])
            if refusals := [refusal for _, refusal in verdicts if refusal]:
                raise ValueError(refusals[0])
            if skips := [skip for skip, _ in verdicts if skip]:
                self.say(f"skipping {folder}: {skips[0]}")
                continue
            load_checkpoint(self.accelerator, state, read)
            if (count := len(list(folder.glob("rng_state_*.pt")))) != self.accelerator.num_processes:
                self.say(
                    f"{folder} was saved by {count} process{'es' * (count != 1)} and this run has "
                    f"{self.accelerator.num_processes}: each process's random numbers (dropout) are not those of an "
                    "uninterrupted run"
                )
            return replace(progress, command=progress.command or settings.command), folder
        return Progress(command=settings.command), None

    def _read_to_resume(self, folder: Path, state: TrainingState) -> tuple[Progress, dict]:
        """Where the checkpoint stands and what `load_checkpoint` puts into `state`: a _Skip where it does not read, a
        ValueError where the run must not go on from it (other settings or data, or past `steps`)."""
        settings = self.settings
        try:
            progress, saved = _read_progress(folder)
        except (OSError, ValueError) as error:
            raise _Skip(error) from error
        if changed := changed_settings(saved["settings"], comparable(settings)):
            started = f" (it started as: {progress.command})" if progress.command else ""
            model = "train on from its model in a new run (`TrainingSettings.init_from`)"
            raise ValueError(
                "`TrainingSettings.resume` goes on with the settings the run started with; changed: "
                + "; ".join(f"`TrainingSettings.{name}` {was!r:.60} → {now!r:.60}" for name, was, now in changed)
                + f"{started}. Give them as they were, or "
                + (model if (self.out / FINAL).is_dir() else "start a new run")
            )
        if "data" in saved and (changed := _changed_data(saved["data"], self.data.identity)):
            raise ValueError(
                f"`TrainingSettings.resume`: the data changed since {folder} was saved: {', '.join(changed[:3])}; "
                "continue on the data the run started on, or start a new run"
            )
        if progress.step > settings.steps:
            raise ValueError(f"{folder} is at step {progress.step}, past `TrainingSettings.steps` {settings.steps}")
        try:
            return progress, read_checkpoint(folder, self.accelerator, state)
        except ValueError as error:
            raise _Skip(error) from error

    def _remove_checkpoints_cut_short(self):
        if self.main:
            outputs = (read_manifest(self.out) or {}).get("outputs", [])
            if self._finished_summary() is not None:  # resumed only to say so: its steps stay, staging leftovers go
                outputs = []
            for name in outputs:
                folder = self.out / name
                if (
                    re.fullmatch(rf"{CHECKPOINTS}/step-\d+", name)
                    and folder.is_dir()
                    and not (folder / PROGRESS).is_file()
                ):
                    shutil.rmtree(folder)  # a step-N of ours without its progress: never complete
                    record(self.out, forget=[name])
            remove_leftovers_in(self.out / CHECKPOINTS)  # the staging folders of saves a kill cut short
        self.accelerator.wait_for_everyone()

    def say(self, message: str, file=None):
        """One line from the main process, beside the progress bar (on standard error unless `file`)."""
        if self.main:
            tqdm.write(message, file=file or sys.stderr)

    # ---- trackers ----------------------------------------------------------------------------------------------

    def _start_trackers(self):
        """The trackers of `report_to` (none: nothing to do), given the run's settings as hyperparameters; their
        folder is recorded first."""
        settings = self.settings
        self.reporting = bool(settings.report_to)
        if not self.reporting:
            return
        if self.main:
            record(self.out, folders=[TRACKERS])
        hyperparameters = {
            k: v if isinstance(v, (int, float, str, bool)) else json.dumps(v) for k, v in asdict(settings).items()
        }
        self.accelerator.init_trackers(TRACKER_RUN, config=hyperparameters)

    def _report(self, logged: dict):
        """A step's metrics to the trackers; what they write under OUT is then recorded as ours."""
        if not self.reporting:
            return
        self.accelerator.log({k: v for k, v in logged.items() if k != "step"}, step=logged["step"])
        if self.main:
            for tracker in self.accelerator.trackers:
                getattr(tracker.tracker, "flush", lambda: None)()  # TensorBoard's writer buffers in a thread
            record_tree(self.out, TRACKERS)

    def _end_trackers(self):
        if not self.reporting:
            return
        self.accelerator.end_training()
        if self.main:
            record_tree(self.out, TRACKERS)

    # ---- the end: the summary, or a rescue --------------------------------------------------------------------

    def _finished_summary(self) -> dict | None:
        """The summary of a run that already finished, or None."""
        if (self.out / FINAL).is_dir() and (self.out / SUMMARY).is_file():
            return read_json_object(self.out / SUMMARY)
        return None

    def finish(self, model, progress: Progress) -> dict:
        """The trackers ended, OUT/model and OUT/summary.json (the main process writes them); the summary."""
        with self.rescued(progress, model):  # as in the loop: a vanished OUT loses no training
            self._end_trackers()
            summary = {
                "steps": progress.step,
                "final_train_loss": progress.history[-1]["train_loss"] if progress.history else None,
                "wall_s": progress.wall_s,
                "history": progress.history,
            }
            if self.main:
                record(self.out, outputs=[FINAL])
                training = card_training(self.settings, self.data, summary, self.accelerator)
                summary["validation_perplexity"] = write_final_model(
                    model, self.out / FINAL, self.settings, self.data, training=training, history=progress.history
                )
                write_recorded_file(self.out, SUMMARY, (json.dumps(summary, indent=2) + "\n").encode())
            return summary

    @contextlib.contextmanager
    def rescued(self, progress: Progress, model):
        """A run folder that vanishes (deleted, its disk unmounted) loses no training: where writing into it fails
        because it is gone, `model` as trained so far is saved elsewhere (`_rescue`) and the error says where."""
        try:
            yield
        except OSError as error:
            if self.out.is_dir() or not self.main:
                raise
            raise self._rescue(progress.step, self.accelerator.unwrap_model(model, keep_torch_compile=False)) from error

    def _rescue(self, step: int, model) -> OSError:
        """The model written to a folder beside where the run folder was (or the temporary folder, where that is gone
        too); the error to raise, saying where, and at which step the run stopped."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for place in (self.out.parent, Path(tempfile.gettempdir())):
            rescued = place / f"{self.out.name}-rescued-step-{step}-{stamp}"
            try:
                with output_folder(rescued) as staging:
                    save_model_folder(model, staging, tokenizer=self.data.tokenizer)
            except OSError:
                continue
            return FileNotFoundError(
                f"the run folder {self.out} vanished during the run, at step {step}: the model as trained so far is "
                f"saved in {rescued} (go on with `TrainingSettings.init_from` set to it)"
            )
        return FileNotFoundError(
            f"the run folder {self.out} vanished during the run, at step {step}, and the model could not be saved "
            "elsewhere"
        )


# ---- a checkpoint's files ------------------------------------------------------------------------------------


def comparable(settings: TrainingSettings) -> dict:
    """The settings as a checkpoint records them: paths absolute, so that `data` and `./data` are one setting."""

    def absolute(path):
        return str(Path(path).absolute().resolve()) if path not in (None, "gpt2") and Path(path).exists() else path

    fields = asdict(settings)
    fields["train"] = [absolute(p) for p in settings.train]
    fields["validation"] = [absolute(p) for p in settings.validation]
    fields["tokenizer"] = absolute(settings.tokenizer)
    fields["init_from"] = absolute(settings.init_from)
    fields["dataset"] = absolute(settings.dataset)
    return fields


def changed_settings(saved: dict, now: dict) -> list[tuple[str, object, object]]:
    """The settings that change what the run computes and differ between a checkpoint's and now: (name, its value
    then, its value now)."""
    # A setting added since the checkpoint was saved had its default then.
    default = {name: f.default for name, f in TrainingSettings.__dataclass_fields__.items()}
    was = {key: saved.get(key, default[key]) for key in now}
    # Without held-out text these measure nothing (runs saved before they were refused without it may hold any).
    free = FREE_ON_RESUME | ({"eval_batch_size", "validation_tokens"} if not now.get("validation") else set())
    return [(key, was[key], now[key]) for key in sorted(now) if key not in free and was[key] != now[key]]


def _rng_file(folder: Path, rank: int) -> Path:
    return folder / f"rng_state_{rank}.pt"


def _rng_state() -> dict:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict):
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(folder: Path, accelerator, state: TrainingState, progress: dict):
    """The main process writes the checkpoint (with every process's RNG state, gathered) through `output_folder`:
    it appears as `step-N` only when complete, and a checkpoint of the same step from an earlier run is replaced."""
    rng_states = gather_object([_rng_state()])  # one per process, in rank order
    if accelerator.is_main_process:
        # A checkpoint of ours from an earlier run of the same step (proven unchanged when resuming) is replaced.
        with output_folder(folder, force=True, kind="checkpoint", inside=folder.parents[1]) as staging:  # in OUT
            for rank, rng in enumerate(rng_states):
                torch.save(rng, _rng_file(staging, rank))
            save_model(accelerator.unwrap_model(state.model, keep_torch_compile=False), str(staging / WEIGHTS))
            saved = {"optimizer": state.optimizer.state_dict(), "schedule": state.schedule.state_dict()}
            torch.save(saved, staging / TRAINING_STATE)
            (staging / PROGRESS).write_text(json.dumps(progress, indent=2))
    accelerator.wait_for_everyone()


def read_checkpoint(folder: Path, accelerator, state: TrainingState) -> dict:
    """Everything `load_checkpoint` puts into `state`, read (nothing that can run code) and checked against it, so
    that a checkpoint that does not load changes nothing: a ValueError says why. This process's RNG state is None
    where the run that saved it had fewer processes."""
    try:
        weights = load_file(folder / WEIGHTS)  # to the CPU: `load_state_dict` copies it where the model is
        saved = torch.load(folder / TRAINING_STATE, map_location="cpu", weights_only=True)
        saved = {"optimizer": saved["optimizer"], "schedule": saved["schedule"]}
        groups = [len(group["params"]) for group in saved["optimizer"]["param_groups"]]
        if groups != [len(group["params"]) for group in state.optimizer.param_groups]:
            raise ValueError(f"its optimizer holds parameter groups of {groups}: not this model's")
        if not _rng_file(folder, 0).is_file():
            raise FileNotFoundError(f"no {_rng_file(folder, 0).name}: every checkpoint holds the first process's")
        rng_file = _rng_file(folder, accelerator.process_index)
        rng = torch.load(rng_file, map_location="cpu", weights_only=True) if rng_file.exists() else None
    except (OSError, RuntimeError, KeyError, TypeError, ValueError, SafetensorError, pickle.UnpicklingError) as error:
        raise ValueError(f"{folder}: cannot resume from this checkpoint ({describe(error)})") from error
    model = accelerator.unwrap_model(state.model, keep_torch_compile=False)
    shapes = {key: tensor.shape for key, tensor in model.state_dict().items()}
    foreign = [key for key, tensor in weights.items() if shapes.get(key) != tensor.shape]
    tied = model.get_parameter(HEAD) is model.get_parameter(TIED_TO)  # one tensor under two names: saved under one
    if foreign or shapes.keys() - weights.keys() not in ([set(), {HEAD}, {TIED_TO}] if tied else [set()]):
        raise ValueError(f"{folder}: cannot resume from this checkpoint (its weights are not this model's)")
    return {"weights": weights, "rng": rng, **saved}


def load_checkpoint(accelerator, state: TrainingState, read: dict):
    """What `read_checkpoint` read, into `state`: the weights, the optimizer and schedule, this process's RNG."""
    accelerator.unwrap_model(state.model, keep_torch_compile=False).load_state_dict(read["weights"], strict=False)
    state.optimizer.load_state_dict(read["optimizer"])
    state.schedule.load_state_dict(read["schedule"])
    if read["rng"] is not None:
        _set_rng_state(read["rng"])


class _Skip(Exception):
    """A checkpoint that does not read: the run goes on to the one before it."""


def _read_progress(folder: Path) -> tuple[Progress, dict]:
    """A checkpoint's progress.json: where the run stood, and the whole record (its settings, its data)."""
    saved = read_json_object(folder / PROGRESS)
    step, settings = saved.get("step"), saved.get("settings")
    if not (isinstance(step, int) and step >= 0 and isinstance(settings, dict)):
        raise ValueError(f"{folder / PROGRESS} has no step and settings")
    history = saved.get("history") or []  # a checkpoint from before histories were kept has none
    if history:
        checked_history(history, f"{folder / PROGRESS}")
    wall = saved.get("wall_s", 0.0)
    if isinstance(wall, bool) or not isinstance(wall, (int, float)) or not 0 <= wall < math.inf:
        raise ValueError(f"{folder / PROGRESS}: wall_s must be a number of seconds, got {wall!r:.40}")
    return Progress(step, history, wall, settings.get("command") or ""), saved


def _changed_data(saved, now: dict) -> list[str]:
    """What differs between the data a checkpoint was saved on and the run's now (both `TokenFile.identity`s, by
    split): each source by its path, else the split's tokens."""
    changed = []
    for split in ("train", "validation"):
        before, after = (saved or {}).get(split) or {}, now.get(split) or {}
        if before == after:
            continue
        sources = {s.get("path"): s for s in before.get("sources", []) if isinstance(s, dict)}
        paths = [s["path"] for s in after.get("sources", []) if sources.get(s["path"]) != s]
        paths += sorted(set(sources) - {s["path"] for s in after.get("sources", [])})
        changed += [f"{path} ({split})" for path in paths] or [f"the {split} tokens"]
    return changed
