"""How the command line presents what went wrong: each library error or warning as one line that names flags, not
Python names; an allocation that failed as what to lower; Ctrl-C as one line and exit 130."""

import ast
import contextlib
import os
import re
import shlex
import sys
import warnings

from huggingface_hub.errors import HfHubHTTPError

from ..folders.errors import hub_error_line
from ..folders.reading import describe

# The library's errors name what a Python caller passed, in backticks (`max_new_tokens`, `force=True`,
# `TrainingSettings.steps`); a user of the command line passed flags, so each such name becomes the flag that sets
# it. Backticks make the match exact: no word in running text (nor `enforce`) is ever taken for a name.
_PYTHON_NAME = re.compile(r"`(?:\w+Settings\.)?(\w+)(?:=([^`]*))?`")


def in_flags(message: str, flags: dict[str, str]) -> str:
    """`message` with each backticked Python name that the verb has a flag for (`flags`: {dest: --flag}) written
    as that flag: `max_new_tokens` → --max-new-tokens, `force=True` → --force, `tokenizer='gpt2'` → --tokenizer
    gpt2. Any other backticked text is left as it is."""

    def flag(match: re.Match) -> str:
        name, value = match.groups()
        option = flags.get(name)
        if option is None:
            return match[0]
        if value is None or value == "True":  # the argument itself, or a switch turned on
            return option
        with contextlib.suppress(ValueError, SyntaxError):  # a Python literal, as a shell word
            literal = ast.literal_eval(value)
            value = shlex.quote(literal) if isinstance(literal, str) else value
        return f"{option} {value}"

    return _PYTHON_NAME.sub(flag, message)


# How torch says an allocation failed (CPU: "can't allocate memory: you tried to allocate N bytes"; CUDA: "out of
# memory. Tried to allocate 2.00 GiB").
_OUT_OF_MEMORY = re.compile(r"can't allocate memory|not enough memory|out of memory", re.IGNORECASE)
# What to lower, per verb, when memory runs out.
LOWER = {
    "train": "lower --batch-size or --block-size (raise --grad-accum to keep the batch), or train a smaller model",
    "generate": "ask for fewer --max-new-tokens, or load the model with --int8",
}


def out_of_memory(error: BaseException, verb: str) -> str:
    """One line for an allocation that failed: how much it asked for (where torch says) and what to lower."""
    found = re.search(r"tried to allocate (\d+) bytes", str(error)) or re.search(
        r"tried to allocate ([\d.]+ [KMGT]iB)", str(error), re.IGNORECASE
    )
    asked = ""
    if found and found[1].isdigit():
        asked = f": an allocation of {int(found[1]) / 2**30:.1f} GiB failed"
    elif found:
        asked = f": an allocation of {found[1]} failed"
    return f"out of memory{asked}; {LOWER.get(verb, 'use a smaller model or free memory')}"


@contextlib.contextmanager
def library_warnings_in_flags(verb: str, flags: dict[str, str]):
    """In the block, the package's own warnings are one line in flags, like its errors; any other as Python shows
    it."""
    package, python_shows = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep, warnings.showwarning

    def show(message, category, filename, lineno, *where):  # `warnings.showwarning`'s, then its file and line
        if os.path.abspath(filename).startswith(package):
            print(f"hf-tinygpt {verb}: warning: {in_flags(str(message), flags)}", file=sys.stderr)
        else:
            python_shows(message, category, filename, lineno, *where)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def presented(run, *, verb: str, flags: dict[str, str], token: str | None) -> int:
    """`run()`'s exit code, with what went wrong as one line of `hf-tinygpt VERB: ...` on stderr: an error (exit 2)
    in flags and without the token, an allocation that failed, a Ctrl-C (exit 130)."""

    def failed(message: str) -> int:
        print(f"hf-tinygpt {verb}: error: {in_flags(message, flags)}", file=sys.stderr)
        return 2

    try:
        with library_warnings_in_flags(verb, flags):
            return run()
    except (ValueError, OSError, ImportError, HfHubHTTPError) as error:
        return failed(hub_error_line(error, [token]))
    except (TypeError, KeyError, IndexError, AttributeError) as error:  # a value of the wrong type in some file
        if os.environ.get("HF_TINYGPT_TRACEBACK"):
            raise
        return failed(
            f"{describe(error)} (a file of the model or tokenizer may hold a value of the wrong type; "
            "HF_TINYGPT_TRACEBACK=1 shows where)"
        )
    except (MemoryError, RuntimeError) as error:
        if not (isinstance(error, MemoryError) or _OUT_OF_MEMORY.search(str(error))):
            raise
        return failed(out_of_memory(error, verb))
    except KeyboardInterrupt as interrupt:  # every output is written whole or not at all (folders/outputs.py)
        # An interrupt that says more says what is true beyond local files (a push: whether the commit may land).
        said = str(interrupt) or "interrupted; nothing was left half-written"
        print(f"\nhf-tinygpt {verb}: {said}", file=sys.stderr)
        return 130
