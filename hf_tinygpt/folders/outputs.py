"""Writing output folders so that nothing is ever lost: the one helper every verb that writes a folder uses.

    with output_folder(out, force=force, protect={"`src`": src}) as staging:
        ...write everything into `staging`...
    # here OUT is the complete new folder; on any error (or a kill) it is still the complete old one

- Ownership is proven, not guessed: every folder this tool writes holds a manifest (`MANIFEST`) listing each file
  it wrote with its size and sha256, each folder it made, and each nested output (a folder with a manifest of its
  own). `force=True` replaces OUT only when OUT is proven ours: the manifest is there and OUT holds nothing it does
  not list, no symbolic link, no file changed since it was written. Anything else is refused, by name.
- Before any work, OUT is also refused if it is, contains or lies inside an input, or is or contains the working
  folder (`refuse_inputs`).
- A lock (`.OUT.lock`, beside OUT) keeps a second writer of the same OUT out for the whole run.
- The new folder is built in a sibling `.OUT.partial-PID-HEX` (its manifest is written first, so a leftover one is
  provably ours), given the umask's permissions (safetensors alone would leave the weights readable by their owner
  only), and moved in with one rename: `renameat2(RENAME_NOREPLACE)` without force (so an OUT that appeared
  meanwhile is never replaced), `RENAME_EXCHANGE` with it (so OUT is at every instant the complete old or the
  complete new folder). The old folder is deleted last. Where the kernel or file system lacks renameat2, two
  renames do it, and the next writer puts the old folder back if a kill fell between them.
- The next writer of OUT removes what a killed one left: only entries with exactly those temporary names that
  carry our manifest, or (a recorded file written beside its place, `write_recorded_file`) that the folder's
  manifest lists by name or whose contents are a version it lists; never a mere pattern match on a user's names.
"""

import contextlib
import ctypes
import errno
import fcntl
import fnmatch
import glob
import hashlib
import importlib.metadata
import json
import os
import re
import secrets
import shutil
import stat
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType

from safetensors import SafetensorError

# The marker of ownership, inside every folder this tool writes (never published: `push` leaves it out).
MANIFEST = ".hf-tinygpt-output.json"
WRITTEN_BY = "hf-tinygpt"
# Errors of the write itself (full disk, quota, file size limit, read-only or failing file system).
WRITE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO)
# The names each kind of output's writers make. A writer killed while it wrote leaves an unsealed staging folder:
# the next writer removes it only when it holds nothing else (anything else, a user's file, is left where it is).
_MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model-*-of-*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "README.md",
    "training_history.json",
    "loss.png",
    "*.py",  # the model's code, which save_pretrained copies beside it (auto_map)
)
WRITTEN = {
    "model": _MODEL_FILES,
    "staged": _MODEL_FILES,
    "checkpoint": ("model.safetensors", "training_state.pt", "rng_state_*.pt", "progress.json"),
    "tokens": ("tokens.bin", "tokens.json"),
    "pictures": ("*.png", "*.svg"),
    "space": (
        "app.py",
        "requirements.txt",
        "README.md",
        "long_text.txt",
    ),  # and the package's folder (explore/space.py)
    "run": (),
}
# No folder of ours is nested deeper than this (a run's are 3 deep): past it, a tree is refused, not walked.
MAX_DEPTH = 32
# The temporary names a writer of NAME uses beside it: `.NAME.partial-PID-HEX`, `.NAME.old-PID-HEX`.
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.(?P<tag>partial|old)-\d+-[0-9a-f]{8}$")
_MANIFEST_PARTIAL = re.compile(rf"^\.{re.escape(MANIFEST)}\.partial-\d+-[0-9a-f]{{8}}$")

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


# ---- the manifest: what a folder of ours holds ---------------------------------------------------------------


def sha256_file(path: Path) -> str:
    """The sha256 of a file's bytes, read a MiB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _file_record(path: Path) -> dict:
    return {"size": path.stat().st_size, "sha256": sha256_file(path)}


def _matches_a_version(path: Path, versions: list) -> bool:
    """Whether the file is one of the recorded versions (hashed only when its size is one of theirs)."""
    size = path.stat().st_size
    return any(isinstance(v, dict) and v.get("size") == size for v in versions) and _file_record(path) in versions


def read_manifest(folder: Path) -> dict | None:
    """The manifest of `folder`, or None when it has none that this tool wrote (absent, a link, not ours)."""
    return read_manifest_file(folder / MANIFEST)


def read_manifest_file(path: Path) -> dict | None:
    """The manifest at `path` (`read_manifest`), or None."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):  # nested too deep for the parser: not ours
        return None
    if not isinstance(manifest, dict) or manifest.get("written_by") != WRITTEN_BY:
        return None
    files, folders, outputs = manifest.get("files"), manifest.get("folders"), manifest.get("outputs")
    if not (isinstance(files, dict) and all(isinstance(versions, list) for versions in files.values())):
        return None
    lists = all(isinstance(names, list) and all(isinstance(n, str) for n in names) for names in (folders, outputs))
    return manifest if lists else None


def _write_manifest(folder: Path, manifest: dict):
    """Replace the manifest in one rename (a kill leaves the old one or the new one)."""
    partial = folder / f".{MANIFEST}.partial-{os.getpid()}-{secrets.token_hex(4)}"
    partial.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(partial, folder / MANIFEST)


def _empty_manifest(kind: str) -> dict:
    return {
        "written_by": WRITTEN_BY,
        "version": importlib.metadata.version("hf-tinygpt"),
        "kind": kind,
        "files": {},
        "folders": [],
        "outputs": [],
    }


def seal(folder: Path, kind: str):
    """Write the manifest of a complete staging folder: every file (size, sha256) and folder in it, and each nested
    output (a folder with a manifest of its own) by name only."""
    manifest = _empty_manifest(kind)

    def walk(directory: Path, prefix: str):
        if prefix.count("/") >= MAX_DEPTH:
            raise ValueError(f"{directory}: folders nested more than {MAX_DEPTH} deep; hf-tinygpt writes none so deep")
        for entry in sorted(directory.iterdir()):
            name = prefix + entry.name
            if prefix == "" and entry.name == MANIFEST:
                continue
            if entry.is_symlink() or not (entry.is_dir() or entry.is_file()):
                raise ValueError(f"{entry}: hf-tinygpt writes only files and folders, not this")
            if entry.is_dir() and read_manifest(entry) is not None:
                manifest["outputs"].append(name)
            elif entry.is_dir():
                manifest["folders"].append(name)
                walk(entry, name + "/")
            else:
                manifest["files"][name] = [_file_record(entry)]

    walk(folder, "")
    _write_manifest(folder, manifest)


def record(
    folder: Path,
    *,
    files: dict[str, list[dict]] | None = None,
    folders: Iterable[str] = (),
    outputs: Iterable[str] = (),
    forget: Iterable[str] = (),
):
    """Add entries to the manifest of a folder of ours that is written while a command runs (a training run), or
    `forget` some. An entry is recorded before it appears and forgotten after it is gone, so what a kill leaves is
    always listed."""
    manifest = read_manifest(folder)
    if manifest is None:
        raise FileNotFoundError(f"{folder}: no {MANIFEST}; it is not a folder hf-tinygpt is writing")
    manifest["files"].update(files or {})
    manifest["folders"] = sorted({*manifest["folders"], *folders})
    gone = set(forget)
    manifest["outputs"] = sorted({*manifest["outputs"], *outputs} - gone)
    for name in gone:
        manifest["files"].pop(name, None)
    _write_manifest(folder, manifest)


def record_tree(folder: Path, name: str):
    """Record `folder/name` and everything in it as it is now: for a folder another library writes into while a
    run goes on (a tracker's logs), recorded after each of its writes. A link or special file is not recorded."""
    files, folders = {}, [name]
    for path in sorted((folder / name).rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if path.is_symlink():
            continue
        if path.is_dir():
            folders.append(relative)
        elif path.is_file():
            files[relative] = [_file_record(path)]
    record(folder, files=files, folders=folders)


def write_recorded_file(folder: Path, name: str, data: bytes):
    """Write `folder/name` atomically, recorded in the folder's manifest: the old and new contents are both listed
    while the file is replaced, and so is the temporary file it is written to, so that whatever a kill leaves of
    it is provably ours (the next write of `name` removes it)."""
    earlier = f".{glob.escape(name)}.partial-*"
    remove_leftovers_in(folder, earlier)  # what a kill left of an earlier write of it
    new = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    files = (read_manifest(folder) or {}).get("files", {})
    partial = folder / f".{name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
    record(folder, files={name: [*files.get(name, []), new], partial.name: [new]})
    partial.write_bytes(data)
    os.replace(partial, folder / name)
    gone = [listed for listed in files if fnmatch.fnmatchcase(listed, earlier)] + [partial.name]
    record(folder, files={name: [new]}, forget=gone)


def _is_leftover_of_ours(entry: Path) -> bool:
    """A temporary entry a writer of this tool left beside its output: an empty lock file, our manifest's own
    temporary file (`.MANIFEST.partial-PID-HEX`, a manifest itself), a recorded file's (`write_recorded_file`
    killed: the manifest lists its name, or it holds a version of the file that the manifest lists), a staging
    folder (empty, or still holding the staging manifest it was made with, or sealed and proven), or a replaced
    folder proven ours, contents included."""
    try:
        info = os.lstat(entry)
    except FileNotFoundError:
        return False
    if entry.name.startswith(".") and entry.name.endswith(".lock"):
        return stat.S_ISREG(info.st_mode) and info.st_size == 0  # nothing to lose
    if _MANIFEST_PARTIAL.match(entry.name):
        return read_manifest_file(entry) is not None
    found = _TEMPORARY.match(entry.name)
    if found is not None and found["tag"] == "partial" and stat.S_ISREG(info.st_mode):
        files = (read_manifest(entry.parent) or {"files": {}})["files"]
        return entry.name in files or _matches_a_version(entry, files.get(found["name"], []))
    if found is None or not stat.S_ISDIR(info.st_mode):
        return False
    manifest = read_manifest(entry)
    if found["tag"] == "partial" and manifest is None:
        return not any(entry.iterdir())  # killed before its manifest was written: empty
    if found["tag"] == "partial" and not (manifest["files"] or manifest["folders"] or manifest["outputs"]):
        # Written when the folder was made, replaced when sealed: a writer killed in between left what it wrote so
        # far, which no manifest lists, so only names its kind of writer makes count as its own.
        return manifest.get("staging") is True and _only_what_writers_make(entry, manifest.get("kind"))
    return not unproven(entry)


def _only_what_writers_make(staging: Path, kind) -> bool:
    """Whether an unsealed staging folder holds nothing but entries that writers of its `kind` make (`WRITTEN`):
    files of those names, and leftovers or outputs of ours nested in it."""
    names = WRITTEN.get(kind) if isinstance(kind, str) else None
    if names is None:
        return False
    for entry in staging.iterdir():
        if entry.name == MANIFEST or _is_leftover_of_ours(entry):
            continue
        if entry.is_dir() and not entry.is_symlink() and not unproven(entry):
            continue  # a nested output, whole (a GPT-2 source converted while staging for the Hub)
        if entry.is_symlink() or not entry.is_file() or not any(fnmatch.fnmatchcase(entry.name, n) for n in names):
            return False
    return True


def unproven(folder: Path, *, leftovers: bool = True, depth: int = 0) -> list[str]:
    """What keeps `folder` from being proven ours (empty: it is): no manifest, or entries the manifest does not list
    (files, folders, links, anything else), or files changed since they were written. With `leftovers`, what a
    killed writer of ours left is passed over (the next writer removes it); without, it counts as an entry the
    manifest does not list (a folder published as it is holds nothing else). `depth`: how deep `folder` lies in the
    output being proven (past `MAX_DEPTH`, nothing is ours)."""
    manifest = read_manifest(folder)
    if manifest is None:
        entries = sorted(entry.name + "/" * entry.is_dir() for entry in folder.iterdir())
        return [f"no {MANIFEST} (hf-tinygpt writes one into every folder it makes)", *entries]
    files, folders, outputs = manifest["files"], set(manifest["folders"]), set(manifest["outputs"])
    problems = []

    def walk(directory: Path, prefix: str):
        if prefix.count("/") + depth >= MAX_DEPTH:
            problems.append(f"{prefix} (folders nested more than {MAX_DEPTH} deep)")
            return
        for entry in sorted(directory.iterdir()):
            name = prefix + entry.name
            if (prefix == "" and entry.name == MANIFEST) or (leftovers and _is_leftover_of_ours(entry)):
                continue
            if entry.is_symlink():
                problems.append(f"{name} (a symbolic link)")
            elif entry.is_dir() and name in outputs:
                nested = unproven(entry, leftovers=leftovers, depth=depth + name.count("/") + 1)
                problems.extend(f"{name}/{problem}" for problem in nested)
            elif entry.is_dir() and name in folders:
                walk(entry, name + "/")
            elif entry.is_dir() or name not in files:
                problems.append(name + "/" * entry.is_dir())
            elif not entry.is_file():
                problems.append(f"{name} (not a regular file)")
            elif not _matches_a_version(entry, files[name]):
                problems.append(f"{name} (changed since hf-tinygpt wrote it)")

    walk(folder, "")
    return problems


# ---- checking and locking OUT ----------------------------------------------------------------------------------


def _resolved(path: Path, what: str) -> Path:
    try:
        return path.resolve()
    except RuntimeError:  # pathlib's word for a symbolic link loop (ELOOP)
        raise ValueError(f"{path} ({what}) is a loop of symbolic links: it names no file or folder") from None


def refuse_inputs(out: Path, protect: Mapping):
    """A ValueError when OUT is, contains or lies inside one of the inputs `protect` names, or is or contains the
    working folder: writing there could destroy what the command reads. `protect` maps each input's name (as the
    error should say it) to a path or a list of them; a `Path` is local even before it exists, a str that names
    nothing on disk is taken for a Hub id."""
    if not isinstance(protect, Mapping):
        raise TypeError(
            f"`protect` must map each input's name to its path ({{'`src`': path}}), got {type(protect).__name__}"
        )
    out = Path(out).absolute()
    resolved = _resolved(out, "the output")
    cwd = Path.cwd().resolve()
    if cwd == resolved or resolved in cwd.parents:
        relation = "is" if cwd == resolved else "contains"
        raise ValueError(
            f"output {out} {relation} the working folder: writing there could destroy it; choose another output"
        )
    for name, given in protect.items():
        for value in given if isinstance(given, (list, tuple)) else [given]:
            if value is not None and not isinstance(value, (str, os.PathLike)):
                raise TypeError(f"`protect`: a path of {name} must be a str or a Path, got {type(value).__name__}")
            if value is None or (isinstance(value, str) and not os.path.lexists(value)):
                continue  # not given, or a Hub id
            path = _resolved(Path(value).absolute(), name)
            if path == resolved or resolved in path.parents or path in resolved.parents:
                relation = "is" if path == resolved else "contains" if resolved in path.parents else "is inside"
                raise ValueError(
                    f"output {out} {relation} the input {path} ({name}): writing there could destroy it or change "
                    "what is read; choose another output"
                )


def check_output(
    out,
    *,
    force: bool = False,
    protect: Mapping = MappingProxyType({}),
    reuse: bool = False,
    kind: str | None = None,
) -> Path:
    """OUT as an absolute path, or an error that says why writing there could lose something. Nothing is touched.

    `protect`: the inputs, {name: path} (sources, tokenizers, data; see `refuse_inputs`), that OUT must neither be,
    contain nor lie inside; the working folder is always protected. `reuse`: an existing OUT is continued, not
    replaced (a resumed training run), which needs it to be a run proven ours. `kind`: what is to be written there
    (a training run is replaced only by another)."""
    out = Path(out).absolute()
    refuse_inputs(out, protect)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        what = f"a symbolic link (to {os.readlink(out)})" if out.is_symlink() else "not a folder"
        raise FileExistsError(f"{out} exists and is {what}; hf-tinygpt will not replace it, even with `force=True`")
    if not out.exists():
        return out
    if reuse:
        if problems := unproven(out):
            raise FileExistsError(
                f"{out} is not a training run of hf-tinygpt that can be continued, as written: "
                f"{_listed(problems)}. Move those away to continue"
            )
        if (read_manifest(out) or {}).get("kind") != "run":
            raise FileExistsError(f"{out} was written by hf-tinygpt, but it is not a training run")
        return out
    if not force:
        raise FileExistsError(f"{out} exists; pass `force=True` to replace it")
    if problems := unproven(out):
        raise FileExistsError(
            f"{out} holds {_listed(problems)}: it is not proven to be an earlier output of hf-tinygpt, so `force=True` "
            "will not delete it. Choose another output, or move those files away yourself."
        )
    if kind != "run" and (read_manifest(out) or {}).get("kind") == "run":  # hours of training, not a quick output
        raise FileExistsError(
            f"{out} is a training run of hf-tinygpt: `force=True` replaces it only with another training run. "
            "Choose another output, or delete it yourself."
        )
    return out


def _listed(problems: list[str]) -> str:
    """The first few problems on one line (a name with a newline in it is shown quoted)."""
    shown = [problem if problem.isprintable() else repr(problem) for problem in problems[:5]]
    return ", ".join(shown) + (f" and {len(problems) - 5} more" if len(problems) > 5 else "")


_HELD: set[tuple[int, Path]] = set()  # (thread, OUT) for each lock this process holds


@contextlib.contextmanager
def _locked(out: Path, wait: bool = False, inside: Path | None = None) -> Iterator[None]:
    """An exclusive lock on OUT for this process (flock on `.OUT.lock`); a second writer fails at once, or with
    `wait` waits until the first is done. The folders above OUT are made as needed, down from `inside` where given."""
    path = out.parent / f".{out.name}.lock"
    held = (threading.get_ident(), out.resolve())
    if held in _HELD:  # flock is per open file: a second lock in this thread would wait on the first forever
        raise FileExistsError(f"{out} is already being written by this process; it cannot be written twice at once")
    while True:
        _make_folders_above(out, inside)  # again each time: a failed writer removes the folders it made
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError as error:
            if error.errno != errno.ELOOP:
                raise OSError(
                    error.errno, f"cannot write {out}: creating its lock {path} failed ({error.strerror})"
                ) from None
            raise FileExistsError(
                f"{path} is a symbolic link: hf-tinygpt locks {out} with that file; remove the link"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise FileExistsError(
                f"{out} is being written by another hf-tinygpt process (lock {path}); wait for it to finish"
            ) from None
        try:  # the previous holder may have unlinked the file between our open and our lock: lock the live one
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    _HELD.add(held)
    try:
        yield
    finally:
        _HELD.discard(held)
        info = os.fstat(fd)
        with contextlib.suppress(FileNotFoundError):
            if info.st_size == 0 and os.stat(path).st_ino == info.st_ino:  # a lock file, not a file of someone's
                os.unlink(path)
        os.close(fd)


def _make_folders_above(out: Path, inside: Path | None):
    """The folders that hold OUT, made where missing; with `inside`, only those below it, one level at a time, so
    that an `inside` that vanished is not made again (a FileNotFoundError instead)."""
    if inside is None:
        out.parent.mkdir(parents=True, exist_ok=True)
        return
    if not inside.is_dir():
        raise FileNotFoundError(errno.ENOENT, f"{inside} is gone", str(inside))
    for folder in reversed([p for p in out.parents if inside in p.parents]):
        folder.mkdir(exist_ok=True)


def remove_leftovers_in(folder: Path, pattern: str = "*"):
    """Remove every temporary entry a killed writer of this tool left in `folder` (each one proven ours), or those
    whose names match `pattern`."""
    for entry in sorted(folder.glob(pattern)) if folder.is_dir() else ():
        if _is_leftover_of_ours(entry):
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()


def clean_leftovers(out: Path):
    """Remove what a killed writer of OUT left (call under OUT's lock): its staging folders, and replaced folders
    once OUT is in place. A replaced folder with no OUT (a kill between the two fallback renames) is put back.
    Only entries proven ours are touched."""
    found = {"old": [], "partial": []}
    for entry in sorted(out.parent.iterdir()):
        if (match := _TEMPORARY.match(entry.name)) and match["name"] == out.name and _is_leftover_of_ours(entry):
            found[match["tag"]].append(entry)
    old = found["old"]
    if old and not out.exists():
        os.rename(old.pop(), out)
    for folder in [*old, *found["partial"]]:
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


def _new_staging(out: Path, kind: str) -> Path:
    staging = out.parent / f".{out.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
    os.mkdir(staging)  # 0o777 minus the umask, like any folder the user makes (tempfile.mkdtemp gives 0o700)
    _write_manifest(staging, {**_empty_manifest(kind), "staging": True})  # a leftover staging folder is ours
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
        raise FileExistsError(f"{out} appeared while this command ran; nothing was replaced (pass `force=True` to)")
    if _rename2(staging, out, _RENAME_EXCHANGE):
        shutil.rmtree(staging)  # it holds the old folder now
        return
    old = out.parent / f".{out.name}.old-{os.getpid()}-{secrets.token_hex(4)}"
    os.rename(out, old)
    os.rename(staging, out)
    shutil.rmtree(old)


@contextlib.contextmanager
def output_folder(
    out,
    *,
    force: bool = False,
    protect: Mapping = MappingProxyType({}),
    kind: str = "model",
    wait: bool = False,
    inside: Path | None = None,
) -> Iterator[Path]:
    """Yield an empty staging folder; when the block ends, it gets its manifest (`kind` says what it is) and
    becomes OUT atomically. On an error in the block (or a kill) OUT is untouched and the staging folder is
    removed (by the next writer, after a kill). `force` replaces an OUT proven ours (see `check_output`). Where
    another process is writing OUT, this fails at once, or with `wait` waits for it and then checks OUT again
    (without `force`, the OUT it wrote is then an error). `inside`: a folder OUT is written within (a run folder)
    that must still be there: one that vanished is not made again, so the write fails instead of filling a folder
    that no manifest proves ours."""
    out = check_output(out, force=force, protect=protect, kind=kind)
    missing = [folder for folder in out.parents if not os.path.lexists(folder)]  # made for OUT, below
    try:
        with _locked(out, wait=wait, inside=inside):
            clean_leftovers(out)
            check_output(out, force=force, protect=protect, kind=kind)  # a put-back old folder counts too
            yield from _staged_into_place(out, force, kind)
    except BaseException:
        for folder in missing:  # the folders made to hold OUT, nearest first, if they hold nothing else
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _staged_into_place(out: Path, force: bool, kind: str) -> Iterator[Path]:
    """`output_folder`'s work under OUT's lock: yield a staging folder, then seal it and move it into place."""
    staging = _new_staging(out, kind)
    try:
        yield staging
        seal(staging, kind)
        give_umask_permissions(staging)
        move_into_place(staging, out, replace=force)
    except (OSError, SafetensorError) as error:
        shutil.rmtree(staging, ignore_errors=True)
        if (code := _write_errno(error)) in WRITE_ERRORS:  # say which output failed: a full disk names no file
            raise OSError(
                code,
                f"writing {out} failed ({os.strerror(code)}); {out} was left as it was and nothing partial remains",
            ) from error
        raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


@contextlib.contextmanager
def run_folder(
    out, *, force: bool = False, resume: bool = False, protect: Mapping = MappingProxyType({})
) -> Iterator[Path]:
    """A folder that is written while the command runs (a training run's checkpoints), locked for its whole life;
    what goes into it is `record`ed in its manifest as it is written. With `resume` an existing run of ours is
    continued; with `force` an earlier output there is swapped for an empty run folder in one step (then deleted);
    otherwise an existing OUT is an error."""
    out = check_output(out, force=force, protect=protect, reuse=resume, kind="run")
    with _locked(out):
        clean_leftovers(out)
        if not (resume and out.exists()):
            check_output(out, force=force, protect=protect, kind="run")
            staging = _new_staging(out, "run")
            try:
                give_umask_permissions(staging)
                move_into_place(staging, out, replace=force)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        yield out
