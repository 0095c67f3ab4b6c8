"""Publishing to the Hub: stage exactly the files a tinygpt repo needs, then one `upload_folder` commit.

Everything that can be wrong with the input (repo id, missing files, tensors that do not fit the config) is found
while staging, before any network call. The token is handed to huggingface_hub and nowhere else: never printed,
logged or written into a staged file.
"""

import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

from huggingface_hub import HfApi, get_session, snapshot_download
from huggingface_hub.utils import HFValidationError, validate_repo_id
from transformers import GenerationConfig

from ..model.configuration_tinygpt import TinyGPTConfig
from .reading import load_strictly, read_config_dict, read_json_object, reading_checkpoint
from .outputs import output_folder

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json",
                   "added_tokens.json")  # fmt: skip


def check_repo_id(repo_id: str) -> str:
    """`owner/name`, valid by the Hub's rules (the card's usage snippet needs the owner), or a ValueError."""
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise ValueError(f"invalid repo id {repo_id!r}: {error}") from None
    if repo_id.count("/") != 1:
        raise ValueError(f"invalid repo id {repo_id!r}: expected owner/name")
    return repo_id


def _weight_files(folder: Path) -> list[str]:
    """The weight files of a tinygpt folder: model.safetensors, or a sharded index and the shards it names (plain
    `*.safetensors` names in the folder itself: an index naming `../elsewhere` is refused, never followed)."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return ["model.safetensors"]
    weight_map = read_json_object(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{index}: no weight_map (tensor name → shard file)")
    shards = sorted({str(name) for name in weight_map.values()})
    if bad := [name for name in shards if Path(name).name != name or not name.endswith(".safetensors")]:
        raise ValueError(f"{index}: shard names must be .safetensors files in the folder itself, got {bad}")
    return [index.name, *shards]


def _tinygpt_folder(src: str, **hub_kwargs) -> Path | None:
    """The local folder of a tinygpt SRC (a Hub id is downloaded through the HF cache), or None if SRC is GPT-2."""
    config = read_config_dict(src, **hub_kwargs)
    if config.get("model_type") == "gpt2":
        return None
    if config.get("model_type") != TinyGPTConfig.model_type:
        raise ValueError(f"{src}: model_type {config.get('model_type')!r} is neither tinygpt nor gpt2")
    return Path(src) if Path(src).is_dir() else Path(snapshot_download(src, **hub_kwargs))


def stage_tinygpt_folder(folder: Path, staging: Path, repo_id: str, tokenizer: str | None = None):
    """Write into `staging` what a tinygpt repo needs from `folder`, after checking that the model loads with this
    package: its config, weights and tokenizer, the model code *of the installed package* (the code that was just
    checked, not whatever `.py` files lie in the folder), a generation config, and its card for `repo_id`.
    Nothing else goes: no optimizer states, logs, notes or stray files."""
    from transformers.dynamic_module_utils import custom_object_save

    from .bundled import load_tokenizer
    from .model_card import rerender_for

    missing = [name for name in _weight_files(folder) if not (folder / name).is_file()]
    tokenizer_files = [name for name in TOKENIZER_FILES if (folder / name).is_file()]
    if tokenizer is None and not {"tokenizer.json", "vocab.json"} & set(tokenizer_files):
        missing.append("tokenizer files (tokenizer.json or vocab.json + merges.txt; or pass --tokenizer gpt2)")
    if missing:
        raise FileNotFoundError(f"{folder}: cannot publish, missing: {', '.join(missing)}")
    with reading_checkpoint(folder):
        model = load_strictly(folder)  # raises, naming tensors, if the weights do not fit

    custom_object_save(model, staging, config=model.config)  # the installed code files; fills in auto_map
    model.name_every_class_in_auto_map(model.config)
    model.config.save_pretrained(staging)
    for name in [*_weight_files(folder), *([] if tokenizer else tokenizer_files)]:
        shutil.copy2(folder / name, staging / name)
    if (folder / "generation_config.json").is_file():
        shutil.copy2(folder / "generation_config.json", staging / "generation_config.json")
    else:
        GenerationConfig.from_model_config(model.config).save_pretrained(staging)
    if tokenizer is not None:
        load_tokenizer(tokenizer).save_pretrained(staging)
    rerender_for(folder, model.config, repo_id).save(staging / "README.md")


def stage_for_hub(src: str, staging: str | Path, repo_id: str, *, tokenizer: str | None = None,
                  base_model: str | None = None, license: str = "mit", verify_tolerance: float = 1e-5,
                  force: bool = False, **hub_kwargs) -> dict[str, int]:  # fmt: skip
    """Stage into `staging` exactly the files `push_to_hub` would upload for SRC (a tinygpt folder or Hub id, or
    any GPT-2 source, converted and verified first). Returns {relative path: bytes}. Written atomically."""
    from .convert import gpt2_to_tinygpt
    from .model_card import rerender_for

    check_repo_id(repo_id)
    if not Path(src).exists() and (src.startswith((".", "/")) or src.count("/") > 1):
        raise FileNotFoundError(f"{src}: no such file or folder")
    with output_folder(staging, force=force, protect=[src]) as work:
        folder = None if Path(src).is_file() else _tinygpt_folder(src, **hub_kwargs)
        if folder is not None:
            stage_tinygpt_folder(folder, work, repo_id, tokenizer=tokenizer)
        else:  # GPT-2, nanoGPT or a lone weights file: convert (verified), then re-render the card for repo_id
            converted = work / "converted"
            _, source, _ = gpt2_to_tinygpt(src, converted, tokenizer=tokenizer, base_model=base_model,
                                           license=license, verify_tolerance=verify_tolerance, **hub_kwargs)  # fmt: skip
            rerender_for(converted, source.config, repo_id).save(converted / "README.md")
            for file in converted.iterdir():
                file.rename(work / file.name)
            converted.rmdir()
    staging = Path(staging)
    return {str(p.relative_to(staging)): p.stat().st_size for p in sorted(staging.rglob("*")) if p.is_file()}


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


def push_to_hub(src: str, repo_id: str, *, private: bool = False, revision: str | None = None,
                commit_message: str | None = None, create_pr: bool = False, token: str | None = None,
                endpoint: str | None = None, tokenizer: str | None = None, base_model: str | None = None,
                license: str = "mit", verify_tolerance: float = 1e-5, timeout: float = 60.0,
                on_staged=None):  # fmt: skip
    """Stage SRC for `repo_id`, create the repo (and branch `revision`) if needed, and upload everything in one
    commit (or pull request). `token=None` uses the token huggingface_hub already knows. Returns its CommitInfo.
    `on_staged(files)` is called with {path: bytes} once staging succeeded, before any network call.

    A request that makes no progress for `timeout` seconds ends the push with a ConnectionError naming the
    endpoint (huggingface_hub retries some requests a few times first); the commit is one request, so an
    interrupted push publishes nothing."""
    check_repo_id(repo_id)
    if not timeout > 0:
        raise ValueError(f"--timeout must be a positive number of seconds, got {timeout}")
    with tempfile.TemporaryDirectory() as scratch:
        staged = Path(scratch) / "staged"
        hub_kwargs = {} if token is None else {"token": token}  # also for reading a private Hub SRC
        files = stage_for_hub(src, staged, repo_id, tokenizer=tokenizer, base_model=base_model, license=license,
                              verify_tolerance=verify_tolerance, **hub_kwargs)  # fmt: skip
        if on_staged is not None:
            on_staged(files)
        api = HfApi(endpoint=endpoint, token=token)
        try:
            with network_timeout(timeout):
                api.create_repo(repo_id, private=private, exist_ok=True)
                if revision not in (None, "main"):
                    api.create_branch(repo_id, branch=revision, exist_ok=True)
                return api.upload_folder(
                    repo_id=repo_id, folder_path=staged, revision=revision, create_pr=create_pr,
                    commit_message=commit_message or f"Upload tinygpt model ({len(files)} files) with hf_tinygpt",
                )  # fmt: skip
        except _transport_error() as error:
            raise ConnectionError(
                f"pushing to {api.endpoint} failed: {type(error).__name__}: {error or 'no answer'} (timeout "
                f"{timeout:g} s). The upload is one commit, so {repo_id} holds all of it or none of it: look at the "
                "repo, then push again"
            ) from error
