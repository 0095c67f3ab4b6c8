"""The fields of a job's settings (`TrainingSettings`, `ConversionSettings`, `GenerationSettings`, ...): each with
its default and what it means, and what the command line needs to make it a flag. The library checks the values;
the command line only spells them."""

from dataclasses import MISSING, field


def setting(default=MISSING, help: str = "", **cli):
    """A field with what it means (`help`, naming other fields as Python does: `glob`); a list or dict default is
    made afresh each time. `cli` says how the verb's flag differs from the field: `flag` (its name, default
    --field-name), `metavar`, `group` (its section of --help), `choices`, `minimum` and `maximum` (checked as the
    flag is read, so that the error names it), `positional` (an argument without a flag)."""
    metadata = {"help": help, **cli}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def default_of(setting):
    """A field's default (made afresh where it is a list or dict); None for a field that must be given."""
    if setting.default is not MISSING:
        return setting.default
    return None if setting.default_factory is MISSING else setting.default_factory()
