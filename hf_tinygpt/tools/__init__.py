"""Tools, above checkpoint I/O: streamed generation, training (the [train] extra), compiled decoding and position
plots (the [plots] extra)."""

# What `hf-tinygpt train` builds unless told otherwise: small enough to train on a CPU in minutes (the 50,257 × 64
# tied head is most of its 3.4 M parameters). TinyGPTConfig's own defaults are GPT-2 small's 124 M.
SMALL_MODEL = {"n_layer": 4, "n_embd": 64, "n_head": 4}


def needs_extra(extra: str, error: ImportError) -> ImportError:
    """The one-line error for a tool whose optional dependencies (`pip install 'hf-tinygpt[EXTRA]'`) are missing."""
    package = (error.name or "a package").partition(".")[0]
    return ImportError(f"this needs {package} (not installed): pip install 'hf-tinygpt[{extra}]'")
