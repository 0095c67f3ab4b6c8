"""The explorer as a Hugging Face Space: a Gradio Space folder that `hf-tinygpt push-space` publishes as a Space repo.

    files = write_space("explorer-space", ["me/tinygpt-alibi", "me/tinygpt-rope"])

The folder holds `app.py` (it builds the same app as `hf-tinygpt explore`), `requirements.txt` (this package's own
dependencies and its [explore] extra, read from its metadata), a `README.md` whose front matter the Hub reads
(`sdk: gradio`, the installed Gradio's version, the models it shows), the `hf_tinygpt` package itself as its wheel
installs it (the Space needs no index that has hf-tinygpt), and the long text if one is given. The models are Hub
ids, loaded when the Space starts, or none for the shipped model, which travels inside the package.
"""

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

from huggingface_hub import SpaceCard, SpaceCardData
from packaging.requirements import Requirement

from ..folders.bundled import gpt2_tokenizer
from ..folders.errors import first_line
from ..folders.outputs import MANIFEST, output_folder
from ..plots.positions import load_for_plots, prompt_tokenizer
from .limits import long_text_ids

DISTRIBUTION = "hf-tinygpt"
PACKAGE_DIR = Path(__file__).resolve().parent.parent
# What the wheel's build reads: pyproject.toml, the readme it names, and the packages' folders (package-dir included).
BUILT_FROM = ("pyproject.toml", "README.md", "hf_tinygpt", "model_cards")

APP = '''"""The hf-tinygpt position explorer as a Space: written by `hf-tinygpt explore --space-out`."""

import json
from pathlib import Path

from hf_tinygpt.explore.app import build_app, launch
from hf_tinygpt.explore.views import load_models

HERE = Path(__file__).resolve().parent
MODELS = json.loads({models!r})  # Hub ids; none: the shipped model, inside the hf_tinygpt package here
HUB = json.loads({hub!r})  # the revision the models were checked at, where one was named
LONG_TEXT = HERE / "long_text.txt"

demo = build_app(
    load_models(MODELS, hub_kwargs=HUB),
    long_text=LONG_TEXT.read_text(encoding="utf-8") if LONG_TEXT.is_file() else None,
)

if __name__ == "__main__":
    launch(demo)  # where the Space says: it sets GRADIO_SERVER_NAME and GRADIO_SERVER_PORT
'''


def space_requirements() -> list[str]:
    """This package's dependencies and its [explore] extra's, as its installed metadata states them."""
    lines = []
    for line in importlib.metadata.requires(DISTRIBUTION) or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": "explore"}):
            requirement.marker = None
            lines.append(str(requirement))
    return sorted(set(lines))


def _tracked(source_tree: Path) -> set[str] | None:
    """The paths git tracks in `source_tree` (relative, posix), or None where it is no git checkout."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(source_tree), "ls-files", "-z", "--", *BUILT_FROM], capture_output=True, text=True
        )
    except FileNotFoundError:  # no git here
        return None
    return set(filter(None, listed.stdout.split("\0"))) if listed.returncode == 0 else None


def _copy_source(source_tree: Path, tree: Path):
    """The files a wheel is built from, copied from `source_tree` into `tree`: in a git checkout only the files git
    tracks (a note, a scratch file or a secret beside them would be published: each is named in a warning), and
    never what a link points at."""
    tracked, left_out = _tracked(source_tree), []
    for name in BUILT_FROM:
        top = source_tree / name
        files = [top] if not top.is_dir() else [Path(root) / f for root, _, fs in os.walk(top) for f in fs]
        for file in sorted(files):
            relative = file.relative_to(source_tree).as_posix()
            if "__pycache__" in file.parts:
                continue
            if tracked is not None and relative not in tracked:
                left_out.append(relative)
                continue
            if file.is_symlink():
                raise ValueError(f"{file} is a link: the Space's package is built from files, never what a link names")
            (tree / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, tree / relative)
    if left_out:
        warnings.warn(
            f"left out of the Space's package, as files git does not track: {', '.join(left_out[:10])}"
            + (f" and {len(left_out) - 10} more" if len(left_out) > 10 else ""),
            stacklevel=3,
        )


def _wheel_files(into: Path, source_tree: Path = PACKAGE_DIR.parent):
    """Write the hf_tinygpt package into `into` as its wheel installs it: built from a fresh copy of the source
    tree when this package runs from one (an editable install; a build in the tree itself would reuse its stale
    `build/`), else the files its installed record lists."""
    if (source_tree / "pyproject.toml").is_file():
        with tempfile.TemporaryDirectory() as scratch:
            tree, wheels = Path(scratch) / "source", Path(scratch) / "wheels"
            _copy_source(source_tree, tree)
            built = subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", wheels, "."],
                cwd=tree,
                capture_output=True,
                text=True,
            )
            if built.returncode != 0:
                raise RuntimeError(f"building the hf_tinygpt wheel from {source_tree} failed: {built.stderr[-2000:]}")
            (wheel,) = wheels.glob("hf_tinygpt-*.whl")
            with zipfile.ZipFile(wheel) as archive:
                for name in archive.namelist():
                    if name.startswith("hf_tinygpt/") and not name.endswith("/"):
                        archive.extract(name, into)
        return
    for file in importlib.metadata.distribution(DISTRIBUTION).files or []:
        if file.parts[0] == "hf_tinygpt" and "__pycache__" not in file.parts:
            target = into / Path(*file.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file.locate(), target)


def _gradio_version() -> str:
    try:
        return importlib.metadata.version("gradio")
    except importlib.metadata.PackageNotFoundError as error:
        from ..folders.errors import needs_extra

        raise needs_extra("explore", ImportError(str(error), name="gradio")) from None


def write_space(
    out,
    models=(),
    *,
    long_text: str | None = None,
    title: str = "hf-tinygpt explore",
    force: bool = False,
    hub_kwargs: dict | None = None,
) -> dict[str, int]:
    """Write OUT, a Gradio Space folder serving the explorer over `models` (Hub ids or scheme names; none: the
    shipped model), atomically. Each model is loaded here first, so what the Space could not load is refused now;
    the Space loads them at the revision of `hub_kwargs` too. Returns {relative path: bytes}."""
    models = [str(model) for model in models]
    for source in models:
        if os.path.exists(source):
            raise ValueError(
                f"{source}: a Space loads its models from the Hub, and this is a local path; publish it first "
                f"(`hf-tinygpt push {source} OWNER/NAME`) and name OWNER/NAME instead"
            )
    if not (isinstance(title, str) and title.strip()):
        raise ValueError(f"`title` must be a non-empty string, got {title!r}")
    if long_text is not None and not isinstance(long_text, str):
        raise ValueError(f"`long_text` must be text or None, got {type(long_text).__name__}")
    schemes, tokenizers = [], {}
    for source in models:
        try:
            model, _ = load_for_plots(source, hub_kwargs=hub_kwargs)
            if long_text is not None:
                tokenizers[source] = prompt_tokenizer(source, model, hub_kwargs=hub_kwargs)
        except (OSError, ValueError) as error:
            reason = first_line(error).removeprefix(f"{source}: ") or type(error).__name__  # it names the source too
            raise ValueError(f"{source}: the Space could not load it: {reason}") from error
        schemes.append(model.config.position_embedding_type)
    if long_text is not None:  # the Space's tab would refuse a text past its limits on every request
        for source, tokenizer in (tokenizers or {"the shipped model": gpt2_tokenizer()}).items():
            try:
                long_text_ids(long_text, tokenizer)
            except ValueError as error:
                raise ValueError(f"`long_text`: {error} (as {source} reads it)") from None
    hub_ids = [source for source in models if "/" in source]
    if (hub_kwargs or {}).get("revision") and not hub_ids:  # the shipped model and scheme names have no revision
        raise ValueError("`revision` is the revision of the Space's Hub models, and none of its models is a Hub id")
    card = SpaceCard.from_template(
        SpaceCardData(
            title=title,
            emoji="🧭",
            colorFrom="indigo",
            colorTo="green",
            sdk="gradio",
            sdk_version=_gradio_version(),
            python_version=f"{sys.version_info.major}.{sys.version_info.minor}",
            app_file="app.py",
            pinned=False,
            license="mit",
            models=hub_ids or None,
            short_description="How GPTs put tokens in order: position schemes side by side",
        ),
        template_str="---\n{{ card_data }}\n---\n\n# {{ title }}\n\n{{ body }}\n",
        title=title,
        body=(
            "The hf_tinygpt position explorer over "
            + (", ".join(f"`{m}` ({s})" for m, s in zip(models, schemes, strict=True)) or "the shipped model")
            + ": token + position, the scheme's pictures, attention, per-position loss past the training length, "
            "and greedy generation. Written by `hf-tinygpt explore --space-out`."
        ),
    )
    with output_folder(out, force=force, kind="space") as staging:
        at = {"revision": hub_kwargs["revision"]} if (hub_kwargs or {}).get("revision") else {}  # never the token
        (staging / "app.py").write_text(APP.format(models=json.dumps(models), hub=json.dumps(at)), encoding="utf-8")
        (staging / "requirements.txt").write_text("\n".join(space_requirements()) + "\n", encoding="utf-8")
        card.save(staging / "README.md")
        if long_text is not None:
            (staging / "long_text.txt").write_text(long_text, encoding="utf-8")
        _wheel_files(staging)
    out = Path(out)
    return {
        path.relative_to(out).as_posix(): path.stat().st_size
        for path in sorted(out.rglob("*"))
        if path.is_file() and path.relative_to(out).as_posix() != MANIFEST
    }
