"""What an error says, in one line: the first line of a long message, and the Hub's answers as data (status,
endpoint, a short reason), never a token. Below every module that reads or publishes checkpoints."""

import contextlib
import http
import re

from huggingface_hub import get_token
from huggingface_hub.errors import HfHubHTTPError


def first_line(error: BaseException) -> str:
    """The first line of an error's message (torch's and transformers' can run to a dozen lines)."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


def describe(error: BaseException) -> str:
    """`Type: first line of the message`, for an error wrapped in one that names the file."""
    return f"{type(error).__name__}: {first_line(error)}"


# ---- what the Hub answers is data: one line, never a token -----------------------------------------------------------

# A Hub token's shape (`hf_` and letters or digits) and an Authorization header's value: redacted from any server
# text passed on, whoever's token it is.
_TOKEN_SHAPED = re.compile(r"hf_[A-Za-z0-9]{20,}|\b(?i:bearer)\s+\S+")
REASON_CHARS = 100  # of the server's own words kept in an error


class HubRequestError(ConnectionError):
    """A request to the Hub that was answered with an error, said in one line: the HTTP status, the endpoint, the
    server's reason cut short, every token redacted. The whole answer is its `__cause__`."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def redacted(text: str, tokens=()) -> str:
    """`text` with each of `tokens`, the token huggingface_hub knows, any `hf_...`-shaped token and any `Bearer ...`
    value replaced by `<redacted>`."""
    with contextlib.suppress(Exception):  # a failing OIDC exchange raises: then there is no known token to add
        tokens = (*tokens, get_token())
    for token in sorted({t for t in tokens if isinstance(t, str) and t.strip()}, key=len, reverse=True):
        text = text.replace(token, "<redacted>")
    return _TOKEN_SHAPED.sub(lambda m: "<redacted>" if m[0].startswith("hf_") else "Bearer <redacted>", text)


def printable(text: str) -> str:
    """One line of printable characters: line breaks, tabs and terminal escapes become single spaces."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


def hub_answer(error: BaseException | None) -> HfHubHTTPError | None:
    """The Hub's error answer behind `error`: `error` itself or what it was raised from (`__cause__`, and
    `__context__` unless the code that raised `error` suppressed it, having said what matters)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, HfHubHTTPError):
            return error
        seen.add(id(error))
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return None


def describe_answer(answer: HfHubHTTPError, tokens=()) -> str:
    """`HTTP 403 on POST /api/repos/create: <reason>`: the endpoint without its query, the server's own message cut
    to REASON_CHARS printable characters (the status's name if it gave none), tokens redacted."""
    status = answer.response.status_code
    try:
        where = f"{answer.response.request.method} {answer.response.request.url.path}"
    except RuntimeError:  # a response built without its request
        where = f"{answer.response.url.path}"
    reason = redacted(printable(answer.server_message or ""), tokens)
    if not reason:
        with contextlib.suppress(ValueError):  # a status code Python has no name for
            reason = http.HTTPStatus(status).phrase
    if len(reason) > REASON_CHARS:
        reason = reason[: REASON_CHARS - 1].rstrip() + "…"
    reason = reason.replace("`", "'")  # the server's words are not the library's: no `name` in them becomes a flag
    return f"HTTP {status} on {redacted(printable(where), tokens)}: {reason or 'no reason given'}"


def hub_error_line(error: BaseException, tokens=()) -> str:
    """What to say of any error in one line where the Hub's answer is behind it (after the first line of whatever
    wrapped that answer, e.g. transformers' OSError); any other error as it is. Tokens redacted either way."""
    answer = hub_answer(error)
    if answer is None or isinstance(error, HubRequestError):
        return redacted(str(error), tokens)
    if error is answer:
        return describe_answer(answer, tokens)
    wrapped = redacted(printable(first_line(error)), tokens).rstrip(":. ")
    return f"{wrapped}: {describe_answer(answer, tokens)}"


@contextlib.contextmanager
def hub_answers_in_one_line(doing: str, tokens=()):
    """Around requests to the Hub: an error answer ends the block as a HubRequestError `{doing} failed: HTTP ...`."""
    try:
        yield
    except HubRequestError:
        raise
    except Exception as error:
        if (answer := hub_answer(error)) is None:
            raise
        message = f"{doing} failed: {describe_answer(answer, tokens)}"
        raise HubRequestError(message, answer.response.status_code) from error


def needs_extra(extra: str, error: ImportError) -> ImportError:
    """The one-line error for a tool whose optional dependencies (`pip install 'hf-tinygpt[EXTRA]'`) are missing."""
    package = (error.name or "a package").partition(".")[0]
    return ImportError(f"this needs {package} (not installed): pip install 'hf-tinygpt[{extra}]'")
