"""What one request may ask of the explorer, and the checks that hold every request to it.

The explorer is a server: several tabs, or strangers on a Space, send it requests at once, each one untrusted input.
Every endpoint checks its inputs here before any work. The largest request each endpoint accepts stays within the
memory the README states ("Explore in the browser"); a larger one is refused with one sentence naming the limit.
"""

MAX_PROMPT_CHARACTERS = 4_000
MAX_PROMPT_TOKENS = 256
MAX_TEXT_CHARACTERS = 400_000
MAX_TEXT_TOKENS = 65_536
MIN_WINDOW, MAX_WINDOW = 8, 2_048
MAX_NEW_TOKENS = 200
MAX_DIMENSIONS = 16
MAX_SEED = 2**31 - 1
QUEUE_SIZE = 16  # requests waiting for their turn; Gradio turns more away


def checked_text(text, name: str, max_characters: int) -> str:
    """`text` if it is text a tokenizer can read, of at most `max_characters`; else a ValueError in one sentence.
    A browser can send lone surrogates, which no UTF-8 tokenizer takes."""
    text = "" if text is None else text
    if not isinstance(text, str):
        raise ValueError(f"the {name} must be text, got {type(text).__name__}")
    if len(text) > max_characters:
        raise ValueError(f"the {name} is {len(text):,} characters long; the explorer takes at most {max_characters:,}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"the {name} holds a character that is not text (a lone surrogate, character {error.start + 1}): "
            "paste it again"
        ) from None
    return text


def whole_number(value, name: str, low: int, high: int) -> int:
    """`value` as an int if it is a whole number from `low` to `high`; else a ValueError in one sentence (a slider's
    1.5 is refused, not cut to 1)."""
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if number is None or number != number or not float(number).is_integer() or not low <= number <= high:
        shown = value if isinstance(value, (int, float)) else type(value).__name__
        raise ValueError(f"the {name} must be a whole number from {low:,} to {high:,}, got {shown}")
    return int(number)


def long_text_ids(text, tokenizer) -> list[int]:
    """The ids `tokenizer` reads a long text to score into, or a ValueError: more than `MAX_TEXT_CHARACTERS`
    characters (checked before the tokenizer runs) or `MAX_TEXT_TOKENS` tokens."""
    ids = tokenizer(checked_text(text, "long text", MAX_TEXT_CHARACTERS))["input_ids"]
    if len(ids) > MAX_TEXT_TOKENS:
        raise ValueError(f"the long text is {len(ids):,} tokens long; the explorer scores at most {MAX_TEXT_TOKENS:,}")
    return ids
