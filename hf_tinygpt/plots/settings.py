"""What `plot-positions` is asked to draw: `PlotSettings`, kept apart from the plotting code so that the command
line reads it without matplotlib (the [plots] extra)."""

import os
from dataclasses import dataclass

from ..model.positions import POSITION_SCHEME_CLASSES
from ..settings import hub_revision, hub_token, setting

DEFAULT_PROMPT = "The cat sat on the mat by the door"  # " the" twice: one token, two positions


def is_scheme_name(source) -> bool:
    """Whether `source` names a position scheme (an untrained model of it) rather than a file, folder or Hub id."""
    return str(source) in POSITION_SCHEME_CLASSES and not os.path.exists(source)


@dataclass
class PlotSettings:
    """What `draw_positions` (`hf-tinygpt plot-positions`) is asked to draw."""

    model: str = setting(
        help="tinygpt or GPT-2 folder or Hub id, a config.json (untrained), or a scheme name (an untrained small "
        f"model): {', '.join(POSITION_SCHEME_CLASSES)}",
        positional=True,
        reads=True,
    )
    out: str = setting(help="folder for the pictures (written atomically)", metavar="DIR")
    force: bool = setting(False, "replace an earlier output of hf-tinygpt at `out`")
    svg: bool = setting(False, "write NAME.svg next to each NAME.png")
    seed: int = setting(0, "picks the traced dimensions and any random init", minimum=0, maximum=2**32 - 1)
    n_dims: int = setting(
        8, "how many single dimensions to trace (every one, where the model has fewer)", flag="--dims", metavar="DIMS"
    )
    max_positions: int | None = setting(None, "positions/offsets/distances to plot (default: n_positions)")
    prompt: str | None = setting(
        None,
        f"text for the token-vs-position picture; repeat a word to see it diverge (default: {DEFAULT_PROMPT!r})",
    )
    revision: str | None = hub_revision()
    token: str | None = hub_token()
