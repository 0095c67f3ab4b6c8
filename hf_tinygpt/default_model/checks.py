"""What a config value must be: the predicates behind every field's one-line error, shared by the config's own
fields and each position scheme's (`PositionScheme.check_config`). Part of the model bundle: standard library only."""

import math
import numbers


def is_int(value) -> bool:
    """An integer, and not a bool (JSON's `true` is no count)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A real number that is not NaN, and not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isnan(value)


def is_positive_number(value) -> bool:
    """A finite number > 0."""
    return is_number(value) and 0 < value < math.inf


def require(config, name: str, holds: bool, must_be: str):
    """A ValueError "NAME must be MUST_BE, got VALUE" unless `holds`."""
    if not holds:
        raise ValueError(f"{name} must be {must_be}, got {getattr(config, name)!r}")
