"""Tools, above checkpoint I/O: streamed generation, training (the [train] extra), compiled decoding and position
plots (the [plots] extra)."""


def needs_extra(extra: str, error: ImportError) -> ImportError:
    """The one-line error for a tool whose optional dependencies (`pip install 'hf-tinygpt[EXTRA]'`) are missing."""
    return ImportError(f"this needs {error.name or 'a package'} (not installed): pip install 'hf-tinygpt[{extra}]'")
