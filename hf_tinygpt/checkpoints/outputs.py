"""Writing output folders so that nothing is ever lost: the one helper every verb that writes a folder uses.

    with output_folder(out, force=force, protect=[src]) as staging:
        ...write everything into `staging`...
    # here OUT is the complete new folder; on any error (or a kill) it is still the complete old one

- Before any work, OUT is refused if it is (or contains) a source or the working folder, if it exists and
  `force` is not set, or if it holds anything this tool does not write: `--force` replaces an earlier output of
  hf-tinygpt, never a folder of the user's.
- A lock (`.OUT.lock`, beside OUT) keeps a second writer of the same OUT out for the whole run.
- The new folder is built in a sibling `.OUT.partial-*`, given the umask's permissions (safetensors alone would
  leave the weights readable by their owner only), and moved in with one rename: `renameat2(RENAME_NOREPLACE)`
  without force (so an OUT that appeared meanwhile is never replaced), `RENAME_EXCHANGE` with it (so OUT is at
  every instant the complete old or the complete new folder). The old folder is deleted last. Where the kernel
  or file system lacks renameat2, two renames do it, and the next writer puts the old folder back if a kill fell
  between them.
- Partial and old folders left behind by a killed run are removed by the next writer of that OUT.
"""

import contextlib
import ctypes
import errno
import fcntl
import fnmatch
import glob
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from safetensors import SafetensorError

# What a folder written by this tool may hold, by kind. Anything else in an existing OUT makes --force refuse.
MODEL_FOLDER = (
    "config.json", "generation_config.json", "model.safetensors", "model-*-of-*.safetensors",
    "model.safetensors.index.json", "README.md", "tokenizer.json", "tokenizer_config.json", "vocab.json",
    "merges.txt", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
    "configuration_tinygpt.py", "modeling_tinygpt.py", "gpt2_layout.py",
)  # fmt: skip
# Errors of the write itself (full disk, quota, file size limit, read-only or failing file system).
WRITE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO)
RUN_FOLDER = ("checkpoints", "model", "summary.json", ".summary.json.partial", ".model.lock", ".model.partial-*",
              ".model.old-*")  # fmt: skip
PICTURES_FOLDER = ("*.png", "*.svg")
MODEL_TYPES = ("tinygpt", "gpt2")

_RENAME_NOREPLACE, _RENAME_EXCHANGE, _AT_FDCWD = 1, 2, -100
try:
    _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
except (OSError, AttributeError):  # not glibc/Linux
    _renameat2 = None


def _write_errno(error: Exception) -> int | None:
    """The OS error number behind a failed write (safetensors reports it inside its own exception's text)."""
    if isinstance(error, OSError):
        return error.errno
    found = re.search(r"os error (\d+)", str(error))
    return int(found.group(1)) if found else None


def _lock_path(out: Path) -> Path:
    return out.parent / f".{out.name}.lock"


def _is_earlier_output(out: Path, kind: tuple[str, ...]) -> list[str]:
    """The entries of `out` that this tool does not write for this kind of folder (empty: it looks like ours)."""
    foreign = sorted(p.name for p in out.iterdir() if not any(fnmatch.fnmatchcase(p.name, pattern) for pattern in kind))
    if "config.json" in kind and not foreign and (out / "config.json").is_file():
        try:
            model_type = json.loads((out / "config.json").read_text()).get("model_type")
        except (ValueError, AttributeError, UnicodeDecodeError):
            model_type = None
        if model_type not in MODEL_TYPES:
            foreign.append(f"config.json (model_type {model_type!r}, not {' or '.join(MODEL_TYPES)})")
    return foreign


def check_output(out, *, force: bool = False, protect: Iterable = (), kind: tuple[str, ...] = MODEL_FOLDER,
                 reuse: bool = False) -> Path:  # fmt: skip
    """OUT as an absolute path, or an error that says why writing there could lose something. Nothing is touched.

    `protect`: local paths (sources, data) that OUT must neither be nor contain; the working folder is always one.
    `reuse`: an existing OUT is continued, not replaced (a resumed training run)."""
    out = Path(out).absolute()
    resolved = out.resolve()
    for path in [Path.cwd(), *(Path(p) for p in protect if p is not None)]:
        if not path.exists():
            continue  # a Hub id, say
        path = path.resolve()
        if path == resolved or resolved in path.parents:
            what = "the working folder" if path == Path.cwd().resolve() else f"the input {path}"
            relation = "is" if path == resolved else "contains"
            raise ValueError(f"output {out} {relation} {what}: writing there could destroy it; choose another output")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise FileExistsError(f"{out} exists and is not a folder; hf-tinygpt will not replace it, even with --force")
    if out.exists() and reuse and (foreign := _is_earlier_output(out, kind)):
        raise FileExistsError(f"{out} holds {', '.join(foreign[:5])}, which hf-tinygpt does not write: it is not an "
                              "earlier output of this tool, so it is not continued")  # fmt: skip
    if out.exists() and not reuse:
        if not force:
            raise FileExistsError(f"{out} exists; pass --force to replace it")
        if foreign := _is_earlier_output(out, kind):
            raise FileExistsError(
                f"{out} holds {', '.join(foreign[:5])}{' …' if len(foreign) > 5 else ''}, which hf-tinygpt does not "
                "write: it does not look like an earlier output of this tool, so --force will not delete it. "
                "Choose another output, or move those files away yourself."
            )
    return out


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """An exclusive lock on OUT for this process (flock on `.OUT.lock`); a second writer fails at once."""
    out.parent.mkdir(parents=True, exist_ok=True)
    path = _lock_path(out)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise FileExistsError(f"{out} is being written by another hf-tinygpt process (lock {path}); "
                                  "wait for it to finish") from None  # fmt: skip
        try:  # the previous holder may have unlinked the file between our open and our lock: lock the live one
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)


def _leftovers(out: Path, tag: str) -> list[Path]:
    return sorted(out.parent.glob(f".{glob.escape(out.name)}.{tag}-*"))


def clean_leftovers(out: Path):
    """Remove what a killed writer of OUT left (call under OUT's lock): partial folders, and old folders once
    OUT is in place. An old folder with no OUT (a kill between the two fallback renames) is put back."""
    old = _leftovers(out, "old")
    if old and not out.exists():
        os.rename(old.pop(), out)
    for folder in [*old, *_leftovers(out, "partial")]:
        shutil.rmtree(folder, ignore_errors=True)


def _umask() -> int:
    try:  # Linux reports it without changing it
        with open("/proc/self/status") as status:
            return int(next(line for line in status if line.startswith("Umask:")).split()[1], 8)
    except (OSError, StopIteration, ValueError):
        mask = os.umask(0o022)
        os.umask(mask)
        return mask


def give_umask_permissions(folder: Path):
    """Files and folders as any other program makes them under the umask (safetensors writes its files 0600)."""
    mask = _umask()
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)


def _new_staging(out: Path) -> Path:
    staging = out.parent / f".{out.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
    os.mkdir(staging)  # 0o777 minus the umask, like any folder the user makes (tempfile.mkdtemp gives 0o700)
    return staging


def _rename2(source: Path, target: Path, flags: int) -> bool:
    """renameat2(2); False where the kernel or file system does not support it."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flags) == 0:
        return True
    error = ctypes.get_errno()
    if error in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(error, os.strerror(error), str(target))


def move_into_place(staging: Path, out: Path, *, replace: bool):
    """Make the complete `staging` folder OUT in one step. Without `replace`, an existing OUT is an error (it
    appeared while we worked); with it, the old OUT is swapped out and deleted after the new one is in."""
    try:
        if _rename2(staging, out, _RENAME_NOREPLACE):
            return
        if not out.exists():  # no renameat2 here
            os.rename(staging, out)
            return
    except FileExistsError:
        pass
    if not replace:
        raise FileExistsError(f"{out} appeared while this command ran; nothing was replaced (pass --force to)")
    if _rename2(staging, out, _RENAME_EXCHANGE):
        shutil.rmtree(staging)  # it holds the old folder now
        return
    old = out.parent / f".{out.name}.old-{os.getpid()}-{secrets.token_hex(4)}"
    os.rename(out, old)
    os.rename(staging, out)
    shutil.rmtree(old)


@contextlib.contextmanager
def output_folder(out, *, force: bool = False, protect: Iterable = (),
                  kind: tuple[str, ...] = MODEL_FOLDER) -> Iterator[Path]:  # fmt: skip
    """Yield an empty staging folder; when the block ends, it becomes OUT atomically. On an error in the block
    (or a kill) OUT is untouched and the staging folder is removed (by the next writer, after a kill)."""
    out = check_output(out, force=force, protect=protect, kind=kind)
    with _locked(out):
        clean_leftovers(out)
        check_output(out, force=force, protect=protect, kind=kind)  # a put-back old folder counts too
        staging = _new_staging(out)
        try:
            yield staging
            give_umask_permissions(staging)
            move_into_place(staging, out, replace=force)
        except (OSError, SafetensorError) as error:
            shutil.rmtree(staging, ignore_errors=True)
            if (code := _write_errno(error)) in WRITE_ERRORS:  # say which output failed: a full disk names no file
                raise OSError(code, f"writing {out} failed ({os.strerror(code)}); {out} was left as it was and "
                                    "nothing partial remains") from error  # fmt: skip
            raise
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


@contextlib.contextmanager
def run_folder(out, *, force: bool = False, resume: bool = False, protect: Iterable = ()) -> Iterator[Path]:
    """A folder that is written while the command runs (a training run's checkpoints), locked for its whole life.
    With `resume` an existing OUT is continued; with `force` an earlier run there is swapped for an empty folder
    in one step (then deleted); otherwise an existing OUT is an error."""
    out = check_output(out, force=force, protect=protect, kind=RUN_FOLDER, reuse=resume)
    with _locked(out):
        clean_leftovers(out)
        if not (resume and out.exists()):
            check_output(out, force=force, protect=protect, kind=RUN_FOLDER)
            staging = _new_staging(out)
            try:
                move_into_place(staging, out, replace=force)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        yield out
