"""Publishing to the Hub: stage exactly the files a tinygpt repo needs, then one commit of exactly those files.

Everything that can be wrong with the input (repo id, missing files, tensors that do not fit the config) is found
while staging, before any network call. The token is handed to huggingface_hub and nowhere else: never printed,
logged or written into a staged file.
"""

import contextlib
import functools
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from huggingface_hub import CommitInfo, CommitOperationAdd, HfApi, get_session
from huggingface_hub.utils import HFValidationError, validate_repo_id
from transformers import PretrainedConfig

from ..folders.bundled import TOKENIZER_FILES
from ..folders.errors import hub_answers_in_one_line, printable, redacted
from ..folders.model_folder import save_model_folder
from ..folders.outputs import MANIFEST, output_folder, read_manifest, unproven
from ..folders.reading import (
    cannot_be_a_hub_id,
    check_weights_index,
    has_tokenizer,
    load_strictly,
    read_config_dict,
    reading_checkpoint,
    tinygpt_folder,
)
from ..folders.training_history import TRAINING_HISTORY, read_history
from ..model.configuration_tinygpt import TinyGPTConfig
from .settings import PushSettings, SpacePushSettings

# Every file of a model folder that staging reads (and so could publish, in some form): each must be a regular file.
READ_FILES = ("config.json", "generation_config.json", "README.md", TRAINING_HISTORY, *TOKENIZER_FILES)
# The weights layouts transformers reads; a folder to publish must hold exactly one.
WEIGHTS_LAYOUTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


# ---- what the Hub answers is data: one line, never a token -----------------------------------------------------------


class PushInterrupted(KeyboardInterrupt):
    """Ctrl-C during `push_to_hub`; its message says what may have reached the repo, and what to do."""


def _staging_says_hub_answers_in_one_line(stage):
    """`stage_for_hub`, with an error answer to any request it makes (for a Hub SRC or tokenizer) in one line."""

    @functools.wraps(stage)
    def staging(src, staging, repo_id, **kwargs):
        with hub_answers_in_one_line(f"staging {src}: reading from the Hub", [kwargs.get("token")]):
            return stage(src, staging, repo_id, **kwargs)

    return staging


# ---- staging ---------------------------------------------------------------------------------------------------------


def check_repo_id(repo_id: str) -> str:
    """`owner/name`, valid by the Hub's rules (the card's usage snippet needs the owner), or a ValueError."""
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise ValueError(f"invalid repo id {repo_id!r}: {error}") from None
    if repo_id.count("/") != 1:
        raise ValueError(f"invalid repo id {repo_id!r}: expected owner/name")
    return repo_id


def refuse_links(folder: Path, names, *, inside: Path | None = None):
    """A ValueError naming each of `names` in `folder` that is not a regular file: a symbolic link (it could point
    at any file of the user's, `/proc/self/environ` included), a FIFO, a device. Links that stay `inside` a folder
    are allowed (the Hub cache's snapshots link to its blobs)."""
    bad = []
    for name in names:
        path = folder / name
        if not (path.exists() or path.is_symlink()):
            continue
        if path.is_symlink() and inside is not None and path.resolve().is_relative_to(inside.resolve()):
            path = path.resolve()
        if path.is_symlink():
            bad.append(f"{name} (a symbolic link to {os.readlink(path)})")
        elif not stat.S_ISREG(path.lstat().st_mode):
            bad.append(f"{name} (not a regular file)")
    if bad:
        raise ValueError(
            f"{folder}: {', '.join(bad)}: only regular files are read for publishing; replace each with "
            "a copy of the file it should be"
        )


def _weights_layout(folder: Path, inside: Path | None) -> str:
    """The one weights layout of a tinygpt folder to publish (two would leave unclear which one was verified)."""
    present = [name for name in WEIGHTS_LAYOUTS if (folder / name).exists() or (folder / name).is_symlink()]
    if not present:
        raise FileNotFoundError(f"{folder}: cannot publish, missing: model.safetensors")
    if len(present) > 1:
        raise ValueError(
            f"{folder} holds {' and '.join(present)}: two sets of weights, and only one would be "
            "verified; remove the stale one"
        )
    refuse_links(folder, present, inside=inside)
    if present[0].endswith(".index.json"):
        shards = check_weights_index(folder)
        if missing := [name for name in shards if not (folder / name).exists()]:
            raise FileNotFoundError(f"{folder}: cannot publish, missing: {', '.join(missing)} (named by {present[0]})")
        refuse_links(folder, shards, inside=inside)
    return present[0]


@torch.no_grad()
def _same_weights(a, b) -> bool:
    ours, theirs = a.state_dict(), b.state_dict()
    return ours.keys() == theirs.keys() and all(
        torch.equal(ours[key].dequantize(), theirs[key].dequantize()) for key in ours
    )


def stage_tinygpt_folder(
    folder: Path,
    staging: Path,
    repo_id: str,
    tokenizer: str | None = None,
    *,
    inside: Path | None = None,
    keep_local_paths: bool = False,
    license: str | None = None,
    base_model: str | None = None,
):
    """Write into `staging` what a tinygpt repo needs from `folder`, every file written by the library that read
    and checked it, never copied: the model (config, weights, and the model code *of the installed package*, not
    whatever `.py` files lie in the folder) as loaded strictly by this package, its tokenizer as transformers read
    it (a real vocabulary that fits the model), its generation config as `GenerationConfig` read it, and its card
    for `repo_id` (without local paths unless `keep_local_paths`; its `license` and `base_model` where given). The
    staged folder is loaded back and must give the same weights. A training history goes as checked numbers with its
    curve drawn again from them. Nothing else goes: no optimizer states, logs, images, notes, stray or linked files.
    A folder hf-tinygpt wrote whose weights changed since is refused while it holds the card and history of the
    weights it was written with."""
    from ..folders.bundled import check_trained_with, load_tokenizer
    from ..folders.model_card import rerender_for

    refuse_links(folder, READ_FILES, inside=inside)
    _weights_layout(folder, inside)
    claims = (folder / "README.md").is_file() or (folder / TRAINING_HISTORY).is_file()  # of the weights written
    if claims and (changed := _weights_changed_since_written(folder)):
        raise ValueError(
            f"{folder}: {', '.join(changed)}: its card (README.md) and training history describe the weights "
            "hf-tinygpt wrote there, not these. Publish the folder as it was written, or remove README.md and "
            f"{TRAINING_HISTORY} to publish these weights without them"
        )
    if tokenizer is None and not has_tokenizer(folder):
        raise FileNotFoundError(
            f"{folder}: cannot publish, missing: tokenizer files (tokenizer.json or vocab.json + "
            "merges.txt; or pass `tokenizer='gpt2'`)"
        )
    with reading_checkpoint(folder):
        config = read_config_dict(folder)  # read once: the model is built from it, and its keys are checked
        model = load_strictly(folder, config=config)  # raises, naming tensors, if the weights do not fit
    if unknown := _unknown_config_keys(config):
        raise ValueError(
            f"{folder}/config.json: {', '.join(unknown)}: no field of a TinyGPT's config; a config keeps such keys, "
            "and they would be published as they are (a local path, say): remove them from config.json"
        )
    tokens = load_tokenizer(tokenizer or folder, vocab_size=model.config.vocab_size)
    check_trained_with(
        tokens,
        folder,
        what=f"the tokenizer `tokenizer` names ({tokenizer})" if tokenizer else "the tokenizer its files hold",
        fix="publish it with the tokenizer its training run wrote beside the weights",
    )
    generation = model.generation_config  # load_strictly read the folder's, checked
    history = read_history(folder)  # checked, then written again with its curve drawn anew
    card = rerender_for(
        folder, model.config, repo_id, keep_local_paths=keep_local_paths, license=license, base_model=base_model
    )

    save_model_folder(model, staging, tokenizer=tokens, generation=generation, history=history)
    staged_tokenizer = json.loads((staging / "tokenizer_config.json").read_text())  # transformers keeps any key
    local = sorted(key for key, value in staged_tokenizer.items() if isinstance(value, str) and os.path.isabs(value))
    if local:
        holds = "holds" if len(local) == 1 else "hold"
        raise ValueError(
            f"{tokenizer or folder}: tokenizer_config.json's {', '.join(local)} {holds} a local path "
            f"({staged_tokenizer[local[0]]!r:.60}), which would be published as it is: remove it from the file"
        )
    card.save(staging / "README.md")
    if not _same_weights(model, load_strictly(staging)):
        raise RuntimeError(f"staging {folder} for {repo_id}: the staged weights differ from the verified ones")


def _unknown_config_keys(config: dict) -> list[str]:
    """The keys of a config.json that are neither a TinyGPT config's fields (those of every scheme registered now) nor
    what transformers writes beside them."""
    known = {*TinyGPTConfig.field_names(), *PretrainedConfig().to_dict(), "auto_map", "torch_dtype"}
    return sorted(config.keys() - known)


def _weights_changed_since_written(folder: Path) -> list[str]:
    """The weight files of a folder hf-tinygpt wrote (its manifest says so) that changed, or came, since."""
    if read_manifest(folder) is None:
        return []
    weights = re.compile(r"(model|pytorch_model)(-\d+-of-\d+)?\.(safetensors|bin)(\.index\.json)?")
    return [problem for problem in unproven(folder) if weights.fullmatch(problem.split(" (")[0].rstrip("/"))]


@_staging_says_hub_answers_in_one_line
def stage_for_hub(
    src: str,
    staging: str | Path,
    repo_id: str,
    *,
    tokenizer: str | None = None,
    base_model: str | None = None,
    license: str | None = None,
    verify_tolerance: float | None = None,
    force: bool = False,
    keep_local_paths: bool = False,
    **hub_kwargs,
) -> dict[str, int]:
    """Stage into `staging` exactly the files `push_to_hub` would upload for SRC (a tinygpt folder or Hub id, or
    any GPT-2 source, converted and verified first). Returns {relative path: bytes}. Written atomically. The card's
    `license` and `base_model`, where given, replace what a tinygpt folder's card says (a conversion's licence:
    its source card's, else mit, as GPT-2's weights)."""
    from ..convert.conversions import gpt2_to_tinygpt
    from ..folders.model_card import source_card

    check_repo_id(repo_id)
    for name, value in (("src", src), ("staging", staging), ("tokenizer", tokenizer), ("base_model", base_model)):
        if not (isinstance(value, (str, os.PathLike)) or (value is None and name in ("tokenizer", "base_model"))):
            raise ValueError(f"`{name}` must be a path or Hub id, got {value!r}")
    if not (license is None or (isinstance(license, str) and license)):
        raise ValueError(f"`license` must be a licence id such as 'mit', got {license!r}")
    if base_model is not None:  # the Hub refuses a card whose base_model is no repo id ("gpt2" is one)
        try:
            validate_repo_id(str(base_model))
        except HFValidationError as error:
            raise ValueError(f"`base_model` must be a Hub id such as 'openai-community/gpt2': {error}") from None
    if verify_tolerance is not None and (
        isinstance(verify_tolerance, bool) or not (isinstance(verify_tolerance, (int, float)) and verify_tolerance >= 0)
    ):
        raise ValueError(f"`verify_tolerance` must be a number >= 0, got {verify_tolerance!r}")
    src = str(src)
    if not Path(src).exists() and cannot_be_a_hub_id(src):
        raise FileNotFoundError(f"{src}: no such file or folder")
    if is_space_folder(src):
        raise ValueError(
            f"{src} is a Space folder (`hf-tinygpt explore --space-out` wrote it), not a model: publish it with "
            f"`hf-tinygpt push-space` (`push_space` in Python)"
        )
    with output_folder(staging, force=force, protect={"`src`": src, "`tokenizer`": tokenizer}, kind="staged") as work:
        found = None if Path(src).is_file() else tinygpt_folder(src, **hub_kwargs)
        if found is not None and verify_tolerance is not None:
            raise ValueError(
                f"`verify_tolerance` bounds the check of a GPT-2 `src` converted first; {src} is a tinygpt model, "
                "published as it is: leave it out"
            )
        converted = work / "converted"
        if found is None:  # GPT-2, nanoGPT or a lone weights file: the converter writes a tinygpt folder (verified)
            if Path(src).is_dir():
                refuse_links(Path(src), READ_FILES)
            card = None if Path(src).is_file() else source_card(src, **hub_kwargs)
            theirs = card.data.to_dict().get("license") if card is not None else None  # a fine-tune's own licence
            if theirs is not None and not (isinstance(theirs, str) and theirs):
                raise ValueError(f"{src}: its card's license must be a licence id, got {theirs!r:.60}")
            gpt2_to_tinygpt(
                src,
                converted,
                tokenizer=tokenizer,
                base_model=base_model,
                license=license or theirs or "mit",
                verify_tolerance=1e-5 if verify_tolerance is None else verify_tolerance,
                **hub_kwargs,
            )
            found, tokenizer = (converted, None), None  # the converted folder holds its tokenizer
        stage_tinygpt_folder(
            found[0],
            work,
            repo_id,
            tokenizer=tokenizer,
            inside=found[1],
            keep_local_paths=keep_local_paths,
            license=license,
            base_model=base_model,
        )
        if converted.exists():
            shutil.rmtree(converted)
    return staged_files(Path(staging))


def staged_files(staging: Path) -> dict[str, int]:
    """{relative path: bytes} of what a push uploads from `staging` (its manifest stays here)."""
    return {
        str(p.relative_to(staging)): p.stat().st_size
        for p in sorted(staging.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def _transport_error() -> type[Exception]:
    """httpx's TransportError (timeouts, refused or dropped connections), from the httpx package this
    huggingface_hub uses (`httpx`, or `httpx2` in newer releases)."""
    return sys.modules[type(get_session()).__module__.partition(".")[0]].TransportError


@contextlib.contextmanager
def network_timeout(seconds: float):
    """Every request huggingface_hub makes in the block gives up after `seconds` without progress (its shared
    client waits forever by default, so a hung server would hang the push)."""
    session = get_session()
    previous, session.timeout = session.timeout, seconds
    try:
        yield
    finally:
        session.timeout = previous


def push_to_hub(
    src: str,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
    create_pr: bool = False,
    token: str | None = None,
    endpoint: str | None = None,
    tokenizer: str | None = None,
    base_model: str | None = None,
    license: str | None = None,
    verify_tolerance: float | None = None,
    timeout: float = 60.0,
    keep_local_paths: bool = False,
    on_staged=None,
):
    """Stage SRC for `repo_id`, create the repo (and branch `revision`) if needed, and upload everything in one
    commit (or pull request). `token=None` uses the token huggingface_hub already knows. Returns its CommitInfo, or
    None where the repo already held every file as staged (no commit is made, no pull request opened).
    `on_staged(files)` is called with {path: bytes} once staging succeeded, before any network call.

    A request that makes no progress for `timeout` seconds ends the push with a ConnectionError naming the
    endpoint (huggingface_hub retries some requests a few times first); an error answer ends it with a
    HubRequestError, one line without the token. The commit is one request, so the repo gets all of it or none;
    Ctrl-C raises a PushInterrupted (a KeyboardInterrupt) that says whether the commit had been sent, and so may
    still land."""
    check_repo_id(repo_id)
    if not timeout > 0:
        raise ValueError(f"`timeout` must be a positive number of seconds, got {timeout}")
    api = HfApi(endpoint=endpoint, token=token)
    sent = []  # (method, path) of every request of the push, recorded as it goes out
    try:
        with tempfile.TemporaryDirectory() as scratch:
            staged = Path(scratch) / "staged"
            hub_kwargs = {} if token is None else {"token": token}  # also for reading a private Hub SRC
            files = stage_for_hub(
                src,
                staged,
                repo_id,
                tokenizer=tokenizer,
                base_model=base_model,
                license=license,
                verify_tolerance=verify_tolerance,
                keep_local_paths=keep_local_paths,
                **hub_kwargs,
            )
            if on_staged is not None:
                on_staged(files)
            upload = dict(private=private, revision=revision, create_pr=create_pr, timeout=timeout, token=token)
            message = commit_message or f"Upload tinygpt model ({len(files)} files) with hf_tinygpt"
            return _commit_files(api, staged, files, repo_id, message=message, sent=sent, **upload)
    except KeyboardInterrupt as interrupt:
        raise PushInterrupted(interrupted_push(sent, repo_id, f"{api.endpoint}/{repo_id}", revision)) from interrupt


@dataclass
class Published:
    """What `push` or `push_space` did: the files it uploaded ({path: bytes}, or for a dry run what it would
    upload), the commit (None for a dry run, or where the repo already held the files) and the collection the model
    was added to (its URL, or None)."""

    files: dict[str, int]
    commit: CommitInfo | None = None
    collection_url: str | None = None


def push(settings: PushSettings, *, on_staged=None, on_committed=None) -> Published:
    """`push_to_hub` as `settings` ask (`hf-tinygpt push`), then `add_to_collection` where a `collection` is named
    (checked before anything is staged); with `dry_run`, only `stage_for_hub` into `out`. `on_staged(files)` and
    `on_committed(commit)` hear of each step as it ends (a collection the Hub refuses fails after the commit)."""
    s = settings
    if (s.out is not None or s.force) and not s.dry_run:
        given = "`force` replaces an earlier `out`" if s.force else "`out`"
        raise ValueError(
            f"{given}: where `dry_run` stages the files; without `dry_run` the push stages in a temporary folder"
        )
    if s.collection is not None:
        check_collection(s.collection)  # before the push, not after it
    options = dict(
        tokenizer=s.tokenizer,
        base_model=s.base_model,
        license=s.license,
        verify_tolerance=s.verify_tolerance,
        keep_local_paths=s.keep_local_paths,
    )
    if s.dry_run:
        if s.out is None:
            raise ValueError("`dry_run` needs `out`: the folder to stage the files in")
        reading = {} if s.token is None else {"token": s.token}  # for a private Hub `src`
        return Published(stage_for_hub(s.src, s.out, s.repo_id, force=s.force, **options, **reading))
    published = Published({})

    def staged(files):
        published.files = files
        if on_staged is not None:
            on_staged(files)

    published.commit = push_to_hub(s.src, s.repo_id, on_staged=staged, token=s.token, **_commit_settings(s), **options)
    if on_committed is not None:
        on_committed(published.commit)
    if s.collection:
        published.collection_url = add_to_collection(
            s.repo_id, s.collection, private=s.private, token=s.token, timeout=s.timeout
        )
    return published


def _commit_settings(settings) -> dict:
    return {name: getattr(settings, name) for name in ("private", "revision", "commit_message", "create_pr", "timeout")}


def _commit_files(
    api: HfApi,
    folder: Path,
    files: dict[str, int],
    repo_id: str,
    *,
    message: str,
    sent: list,
    private: bool,
    revision: str | None,
    create_pr: bool,
    timeout: float,
    token: str | None,
    repo_type: str | None = None,
    space_sdk: str | None = None,
):
    """Create the repo (and branch `revision`) if needed and upload exactly `files` (paths in `folder`, as listed to
    the user) in one commit, each request recorded in `sent`; a transport error becomes a ConnectionError that says
    the repo holds all of the commit or none of it. Returns its CommitInfo, or None where the repo already held every
    file as it is (no commit is made, and no pull request opened)."""
    try:
        with (
            network_timeout(timeout),
            recording_requests(sent),
            hub_answers_in_one_line(f"pushing to {api.endpoint}", [token]),
        ):
            api.create_repo(repo_id, repo_type=repo_type, space_sdk=space_sdk, private=private, exist_ok=True)
            if revision not in (None, "main"):
                api.create_branch(repo_id, repo_type=repo_type, branch=revision, exist_ok=True)
            info = api.create_commit(
                repo_id=repo_id,
                repo_type=repo_type,
                operations=[
                    CommitOperationAdd(path_in_repo=name, path_or_fileobj=Path(folder) / name) for name in files
                ],
                revision=revision,
                create_pr=create_pr,
                commit_message=message,
            )
    except _transport_error() as error:
        what = redacted(printable(f"{type(error).__name__}: {error or 'no answer'}"), [token])
        raise ConnectionError(
            f"pushing to {api.endpoint} failed: {what} (timeout {timeout:g} s). The upload is one commit, so "
            f"{repo_id} holds all of it or none of it: look at the repo, then push again"
        ) from error
    return info if commit_sent(sent, repo_id) else None  # huggingface_hub sends no commit that changes no file


def is_space_folder(folder) -> bool:
    """Whether `folder` is a Space folder by its manifest (`hf-tinygpt explore --space-out` writes them)."""
    manifest = read_manifest(Path(folder)) if Path(folder).is_dir() else None
    return manifest is not None and manifest.get("kind") == "space"


def space_files(folder, repo_id: str) -> dict[str, int]:
    """{relative path: bytes} of exactly what a push of the Space folder `folder` to the Space `repo_id` uploads: the
    files its manifest lists, which `push_space` uploads and a dry run shows. A ValueError for a repo id the Hub
    refuses, or a folder that is not exactly as `write_space` wrote it: a file changed, or anything the manifest
    does not list, a leftover folder of ours included (a Space publishes what it lists, nothing beside it)."""
    check_repo_id(repo_id)
    folder = Path(folder)
    if not is_space_folder(folder):
        raise ValueError(
            f"{folder}: not a Space folder of hf-tinygpt (write one with `hf-tinygpt explore --space-out`)"
        )
    manifest = read_manifest(folder)
    problems = unproven(folder, leftovers=False) + [f"{name}/ (a nested output)" for name in manifest["outputs"]]
    if problems:
        raise ValueError(
            f"{folder}: not as `hf-tinygpt explore --space-out` wrote it ({'; '.join(problems[:5])}): write it again"
        )
    return {name: (folder / name).stat().st_size for name in sorted(manifest["files"])}


def push_space(settings: SpacePushSettings, *, endpoint: str | None = None, on_staged=None) -> Published:
    """Publish a Space folder written by `write_space` as the Gradio Space repo `settings.repo_id`, in one commit
    (with `dry_run`, only list its files). The folder must be exactly as written (its manifest proves every file);
    `on_staged(files)` sees {path: bytes} first."""
    s = settings
    if not s.timeout > 0:
        raise ValueError(f"`timeout` must be a positive number of seconds, got {s.timeout}")
    files = space_files(s.src, s.repo_id)
    if s.dry_run:
        return Published(files)
    if on_staged is not None:
        on_staged(files)
    api = HfApi(endpoint=endpoint, token=s.token)
    sent = []
    upload = dict(_commit_settings(s), token=s.token)
    message = upload.pop("commit_message") or f"Upload the hf-tinygpt explorer ({len(files)} files)"
    try:
        info = _commit_files(
            api, s.src, files, s.repo_id, message=message, sent=sent, repo_type="space", space_sdk="gradio", **upload
        )
    except KeyboardInterrupt as interrupt:
        url = f"{api.endpoint}/spaces/{s.repo_id}"
        raise PushInterrupted(interrupted_push(sent, s.repo_id, url, s.revision)) from interrupt
    return Published(files, info)


# The longest collection title taken here: a title is a line on the owner's page, not a text.
MAX_COLLECTION_TITLE = 100


def check_collection(collection: str) -> str:
    """`collection` if it is a title: one line of printable text, not empty, at most `MAX_COLLECTION_TITLE`
    characters; else a ValueError that says which rule it breaks."""
    if not isinstance(collection, str) or not collection.strip():
        raise ValueError("`collection` must be a title, got an empty one")
    if len(collection) > MAX_COLLECTION_TITLE:
        raise ValueError(
            f"`collection` is {len(collection):,} characters long; a title takes at most {MAX_COLLECTION_TITLE}"
        )
    if (control := next((i for i, c in enumerate(collection) if not c.isprintable()), None)) is not None:
        code = f"U+{ord(collection[control]):04X}"
        raise ValueError(
            f"`collection` holds a control character ({code} at character {control + 1}): a title is one line of text"
        )
    return collection


def add_to_collection(
    repo_id: str,
    collection: str,
    *,
    note: str | None = None,
    private: bool = False,
    token: str | None = None,
    endpoint: str | None = None,
    timeout: float = 60.0,
) -> str:
    """Add the model repo `repo_id` to its owner's collection titled `collection`, made first if the owner has none
    by that title (`private` then says whether it is); a repo already in it stays where it is. `note` is shown beside
    the model. Returns the collection's URL. Errors as `push_to_hub`'s: one line, never the token."""
    check_repo_id(repo_id)
    check_collection(collection)
    api = HfApi(endpoint=endpoint, token=token)
    doing = f"adding {repo_id} to the collection {collection!r} on {api.endpoint}"
    try:
        with network_timeout(timeout), hub_answers_in_one_line(doing, [token]):
            namespace = repo_id.split("/")[0]
            made = api.create_collection(collection, namespace=namespace, private=private, exists_ok=True)
            api.add_collection_item(made.slug, repo_id, "model", note=note, exists_ok=True)
    except _transport_error() as error:
        what = redacted(printable(f"{type(error).__name__}: {error or 'no answer'}"), [token])
        raise ConnectionError(f"{doing} failed: {what} (timeout {timeout:g} s)") from error
    return made.url


@contextlib.contextmanager
def recording_requests(sent: list):
    """Appends (method, path) of each request huggingface_hub's shared client sends in the block to `sent`, just
    before it goes out: from then on the request may reach the Hub, whatever happens here."""

    def record(request):
        sent.append((request.method, request.url.path))

    hooks = get_session().event_hooks["request"]
    hooks.append(record)
    try:
        yield sent
    finally:
        hooks.remove(record)


def commit_sent(sent, repo_id: str) -> bool:
    """Whether a commit to `repo_id` is among the requests `sent` (see `recording_requests`)."""
    return any(method == "POST" and f"/{repo_id}/commit/" in path for method, path in sent)


def interrupted_push(sent, repo_id: str, url: str, revision: str | None = None) -> str:
    """What is true of `repo_id` (at `url`) after Ctrl-C, given the requests `sent` (see `recording_requests`)."""
    writes = [path for method, path in sent if method == "POST"]
    if commit_sent(sent, repo_id):
        where = repo_id if revision in (None, "main") else f"{repo_id} (revision {revision})"
        return (
            f"interrupted after the commit to {where} was sent: it may still land, all files or none. "
            f"Look at {url} before pushing again"
        )
    signs = {"the repo": "/api/repos/create", "its branch": f"/{repo_id}/branch/", "a pull request": "/discussions"}
    made = [what for what, sign in signs.items() if any(sign in path for path in writes)]
    if not made:
        return f"interrupted before anything was sent to {repo_id}: nothing was published"
    return (
        f"interrupted before the commit was sent: no file was published to {repo_id} "
        f"({' and '.join(made)} may have been created, empty)"
    )
