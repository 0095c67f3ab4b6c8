"""A job's settings as a verb's arguments: one flag (or positional argument) per field of its settings dataclass,
with the field's help, default, type and choices, in the section its `group` names. What a flag does beyond the
field (a minimum checked as it is read, a path the verb reads) is said once, here; `add_verb` makes a verb of them."""

import argparse
import dataclasses
import math
import types
import typing

from ..settings import default_of
from .errors import in_flags


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """--help shows each flag's default (where it has one) and keeps the examples' line breaks."""

    def _get_help_string(self, action):  # argparse's hook for this: no "(default: None)" on optional flags
        return action.help if action.default is None or action.default is False else super()._get_help_string(action)


def finite_at_least(low: float):
    """An argparse type: a finite float >= low (argparse then names the flag in its error)."""

    def parse(text: str) -> float:
        value = float(text)
        if not (math.isfinite(value) and value >= low):
            raise argparse.ArgumentTypeError(f"must be a finite number >= {low:g}, got {text}")
        return value

    parse.__name__ = "number"
    return parse


def int_at_least(low: int, high: int | None = None):
    """An argparse type: an integer >= low (and <= high, where given)."""

    def parse(text: str) -> int:
        value = int(text)
        if value < low or (high is not None and value > high):
            within = f">= {low}" if high is None else f"from {low} to {high:,}"
            raise argparse.ArgumentTypeError(f"must be an integer {within}, got {text}")
        return value

    parse.__name__ = "integer"
    return parse


def input_path(text: str) -> str:
    """An argparse type that marks an argument as a path the verb reads (or a Hub id): `--out` may neither be,
    contain nor lie inside any of them (`refuse_inputs`, checked for every verb before it runs)."""
    return text


def _kind(setting) -> tuple[type, bool]:
    """The field's type without `| None`, and whether it is a list (`list[X]`: X, True)."""
    kind = setting.type
    if typing.get_origin(kind) in (typing.Union, types.UnionType):  # `X | None`
        kind = next(arg for arg in typing.get_args(kind) if arg is not type(None))
    if typing.get_origin(kind) is list:
        return typing.get_args(kind)[0], True
    return kind, False


def _parser_of(kind: type, meta: dict):
    if meta.get("reads"):
        return input_path
    if meta.get("minimum") is not None:
        return int_at_least(meta["minimum"], meta.get("maximum")) if kind is int else finite_at_least(meta["minimum"])
    return kind


def add_settings_arguments(parser, settings_type, *, groups=()) -> dict:
    """One argument per field of `settings_type` that has a flag (a field with `flag=False` is set another way), in
    the sections `groups` (in that order, or the {group: argparse group} an earlier call returned; a field without a
    group goes to the verb's own). A field with `reads=True` is a path or Hub id the verb reads (`input_path`).
    Returns {group: its argparse group}."""
    sections = groups if isinstance(groups, dict) else {name: parser.add_argument_group(name) for name in groups}
    for setting in dataclasses.fields(settings_type):
        meta = setting.metadata
        if meta.get("flag") is False:
            continue
        kind, many = _kind(setting)
        options = {"help": meta["help"], "metavar": meta.get("metavar"), "choices": meta.get("choices")}
        required = setting.default is dataclasses.MISSING and setting.default_factory is dataclasses.MISSING
        if kind is bool:
            options = {"help": meta["help"], "action": "store_true"}
        else:
            options["type"] = _parser_of(kind, meta)
            optional = meta.get("positional") and not required  # a positional argument that may be left out
            options["nargs"] = ("*" if optional else "+") if many else ("?" if optional else None)
        if "(default:" not in meta["help"] and not required:  # else the help says it, and `settings_values` fills it in
            options["default"] = default_of(setting)
        if meta.get("positional"):
            names = [setting.name]
        else:
            flag = meta.get("flag") or "--" + setting.name.replace("_", "-")
            names = [flag] if isinstance(flag, str) else list(flag)  # a tuple: the flag, then its other spellings
            options["dest"], options["required"] = setting.name, required or None
        target = sections.get(meta.get("group"), parser)
        target.add_argument(*names, **{key: value for key, value in options.items() if value is not None})
    return sections


def settings_values(args, settings_type) -> dict:
    """The fields of `settings_type` that the verb's arguments set, an argument not given as the field's default."""
    fields = [setting for setting in dataclasses.fields(settings_type) if setting.metadata.get("flag") is not False]
    return {
        setting.name: default_of(setting) if getattr(args, setting.name) is None else getattr(args, setting.name)
        for setting in fields
    }


def add_verb(verbs, name: str, help: str, arguments, *, run, example: str):
    """The verb `name` among `verbs` (argparse's subparsers), its flags from `arguments` (a settings dataclass, or a
    function that adds them), its help naming flags and ARGUMENTS where the fields' help names fields; `run(args)`
    runs it."""
    sub = verbs.add_parser(
        name, help=help, description=help, epilog=f"example:\n  {example}", formatter_class=HelpFormatter
    )
    if isinstance(arguments, type):
        add_settings_arguments(sub, arguments)
    else:
        arguments(sub)
    # The verb's own flags, {dest: --flag}, for `in_flags` (argparse lists a parser's actions only in _actions).
    flags = {action.dest: max(action.option_strings, key=len) for action in sub._actions if action.option_strings}
    # The fields' help names other fields as Python does (`glob`, `src`): here they are flags and ARGUMENTS.
    positional = {action.dest: action.dest.upper() for action in sub._actions if not action.option_strings}
    for action in sub._actions:
        if action.help:
            action.help = in_flags(action.help, flags | positional)
    inputs = [action.dest for action in sub._actions if action.type is input_path]
    sub.set_defaults(run=run, flags=flags, inputs=inputs)
