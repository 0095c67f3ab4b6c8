"""What the `hf-tinygpt` command does before torch and transformers are imported: Ctrl-C during those seconds is
one line, third parties' start-up noise is filtered out, and a deleted working folder is one line. Standard
library only: the package's `__init__` calls `start_the_command` first, because the console script's import of
`hf_tinygpt.cli.commands` runs the package's import before any code of the command."""

import logging
import os
import re
import signal
import sys
import tempfile

# What importing transformers makes third parties log at start-up that says nothing about the command being run:
# torchao's optional GPU extensions that a CPU machine cannot load, and torch's note on torchao's own enums.
START_UP_NOISE = {
    "torchao": re.compile(r"^Failed to load \S+\.so: "),
    "torch.utils._pytree": re.compile(r"is an Enum subclass and is now natively supported by torch\.compile"),
}


def not_start_up_noise(record: logging.LogRecord) -> bool:
    """A logging filter: False for exactly the `START_UP_NOISE` lines of their own loggers; any other record passes."""
    pattern = START_UP_NOISE.get(record.name)
    return pattern is None or not pattern.search(record.getMessage())


def interrupted_while_starting(signum, frame):
    """Ctrl-C while the command line imports torch and transformers: one line and exit 130 (nothing was written yet)."""
    sys.stderr.write("hf-tinygpt: interrupted\n")
    os._exit(130)


def interrupted_while_exiting(signum, frame):
    """Ctrl-C once the command is done, while Python exits (its exit handlers, its threads): one line and exit 130,
    not Python's "Exception ignored" traceback. Every output was written whole before this."""
    sys.stderr.write("hf-tinygpt: interrupted while exiting; the command had finished\n")
    os._exit(130)


# `sys.argv[0]` once `python -m hf_tinygpt` (or `hf_tinygpt.cli`) runs: that module's file. A process the command
# spawns (transformers serve's model process) is given the command's `sys.argv` before it imports this package.
_CLI = os.path.dirname(__file__)  # hf_tinygpt/cli, beside hf_tinygpt
MAIN_FILES = {os.path.join(_CLI, "__main__.py"), os.path.join(os.path.dirname(_CLI), "__main__.py")}


def starting_the_command() -> bool:
    """Whether this process is the `hf-tinygpt` command (or one it spawned) starting up: its console script, or
    `python -m hf_tinygpt` (or `hf_tinygpt.cli`), for which Python sets `sys.argv[0]` to "-m" while it imports this
    package to find the module, and keeps the module's name in `sys.orig_argv`."""
    if sys.argv and (os.path.basename(sys.argv[0]) == "hf-tinygpt" or sys.argv[0] in MAIN_FILES):
        return True
    if sys.argv[:1] != ["-m"]:
        return False
    words = getattr(sys, "orig_argv", [])
    modules = [words[i + 1] for i, word in enumerate(words[:-1]) if word == "-m"]
    modules += [word[2:] for word in words if word.startswith("-m") and len(word) > 2]
    return any(module in ("hf_tinygpt", "hf_tinygpt.cli") for module in modules)


def unusable_ground() -> str | None:
    """What keeps the command from even starting, which importing transformers would report as a raw traceback:
    a working folder that no longer exists, or no usable temporary folder."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return "the working folder no longer exists (deleted or moved away): cd to a folder that does"
    try:
        tempfile.gettempdir()
    except FileNotFoundError as error:
        return f"{error}: set TMPDIR to a folder you can write"
    return None


def start_the_command():
    """Prepare the start of the command when this process is it; anything else importing the package is left as
    it was. `commands.main` puts Python's own Ctrl-C handler back once it runs, and `exiting_the_command` sets
    `interrupted_while_exiting` once it is done."""
    if not starting_the_command():
        return
    signal.signal(signal.SIGINT, interrupted_while_starting)
    for name in START_UP_NOISE:
        logging.getLogger(name).addFilter(not_start_up_noise)
    if problem := unusable_ground():
        sys.stderr.write(f"hf-tinygpt: error: {problem}\n")
        sys.exit(2)


def exiting_the_command():
    """When this process is the `hf-tinygpt` command, a Ctrl-C from here on (Python exiting) is one line."""
    if starting_the_command():
        signal.signal(signal.SIGINT, interrupted_while_exiting)
