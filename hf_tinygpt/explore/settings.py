"""What `hf-tinygpt explore` is asked to do: `ExploreSettings`, kept apart from the app so that the command line
reads it without Gradio (the [explore] extra), and the long text it reads, checked before anything is served."""

import os
from dataclasses import dataclass

from ..folders.reading import refuse_what_is_not_a_file
from ..settings import hub_revision, hub_token, setting
from .limits import MAX_TEXT_CHARACTERS, checked_text


@dataclass
class ExploreSettings:
    models: list[str] = setting(
        [],
        "tinygpt or GPT-2 folders or Hub ids, config.json files or scheme names, shown side by side (default: the "
        "shipped model)",
        positional=True,
        reads=True,
    )
    port: int = setting(7860, "port on 127.0.0.1 (0: any free one)", minimum=0, maximum=65535)
    long_text: str | None = setting(
        None, "a long text file for the past-the-training-length tab", metavar="FILE", reads=True
    )
    # An output like every verb's `out`: no input may be, hold or lie inside it.
    out: str | None = setting(
        None,
        "write a Gradio Space folder serving this explorer over these models (Hub ids or scheme names), written "
        "atomically, instead of serving it here; `hf-tinygpt push-space DIR OWNER/NAME` publishes it",
        flag="--space-out",
        metavar="DIR",
    )
    force: bool = setting(False, "with `out`: replace an earlier Space folder there")
    revision: str | None = hub_revision()
    token: str | None = hub_token()

    def __post_init__(self):
        if self.force and not self.out:
            raise ValueError("`force` replaces an earlier `out` folder: it needs `out` DIR")


def read_long_text(path: str | None) -> str | None:
    """The text of the file at `path` (None: none), checked now against the explorer's limit on characters, not when
    its tab first scores it (its tokens are checked by `build_app`, with each model's tokenizer); a ValueError or
    FileNotFoundError names `long_text`."""
    if not path:
        return None
    refuse_what_is_not_a_file(path, f"`long_text` {path}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"`long_text` {path}: no such file")
    try:
        text = open(path, encoding="utf-8").read()
    except UnicodeDecodeError as error:
        raise ValueError(f"`long_text` {path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    try:
        checked_text(text, "long text", MAX_TEXT_CHARACTERS)
    except ValueError as error:
        raise ValueError(f"`long_text` {path}: {error}") from None
    return text
