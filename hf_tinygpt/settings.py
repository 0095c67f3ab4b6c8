"""The fields of a job's settings (`TrainingSettings`, `ConversionSettings`, `GenerationSettings`, ...): each with
its default and what it means, and what the command line needs to make it a flag. The library checks the values;
the command line only spells them."""

from dataclasses import MISSING, field


def setting(default=MISSING, help: str = "", **cli):
    """A field with what it means (`help`, naming other fields as Python does: `glob`); a list or dict default is
    made afresh each time. `cli` says how the verb's flag differs from the field: `flag` (its name, default
    --field-name; a tuple adds other spellings), `metavar`, `group` (its section of --help), `choices`, `minimum` and
    `maximum` (checked as the flag is read, so that the error names it), `positional` (an argument without a flag),
    `reads` (a path or Hub id the job reads: no output may be, hold or lie inside it)."""
    metadata = {"help": help, **cli}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def default_of(setting):
    """A field's default (made afresh where it is a list or dict); None for a field that must be given."""
    if setting.default is not MISSING:
        return setting.default
    return None if setting.default_factory is MISSING else setting.default_factory()


def hub_revision():
    """The `revision` field of a job that reads a model from the Hub."""
    return setting(None, "Hub revision of the model: branch, tag or commit (default: main)")


def hub_token():
    """The `token` field of a job that reads a model from the Hub (never printed, never written)."""
    return setting(None, "Hub token (default: the one huggingface_hub already knows; never printed)")


def hub_kwargs(settings) -> dict:
    """`settings.revision` and `settings.token` as huggingface_hub's keyword arguments (those not given left to its
    defaults)."""
    pairs = (("revision", settings.revision), ("token", settings.token))
    return {key: value for key, value in pairs if value is not None}
