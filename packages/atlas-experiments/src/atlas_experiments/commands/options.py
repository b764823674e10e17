"""Command options as a mapping (a protocol's `args`, a workflow config section) instead of a command line.

Two directions, one spelling rule (key `kv_pairs` is option `--kv-pairs`; a list is one comma-separated value;
True is a bare flag; False and None are left out):

- `option_argv` writes a mapping as the arguments of an `atlas` command, for a shell (the workflow's rules) or for
  a person to rerun a job by hand;
- `options_namespace` turns a mapping into the namespace a command's handler takes, checked and typed by the
  command's own parser (the key, its type, its choices), so a caller in the same process runs the command without
  a round trip through text.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any


def option_argv(options: Mapping[str, Any]) -> list[str]:
    """{'kv_pairs': [2, 4], 'no_track': True, 'heads': None} -> ['--kv-pairs', '2,4', '--no-track']."""
    argv: list[str] = []
    for key, value in options.items():
        flag = f"--{key.replace('_', '-')}"
        if value is True:
            argv.append(flag)
        elif value is not False and value is not None:
            argv += [flag, ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)]
    return argv


def _flag_action(action: argparse.Action) -> bool:
    return isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction)


def _typed(action: argparse.Action, value: Any, where: str) -> Any:
    """`value` as the option's type (a number from a config file stays a number; text is converted as the command
    line would convert it); a bad value names the key."""
    key = action.dest
    if _flag_action(action):
        if not isinstance(value, bool):
            raise ValueError(f"{where}: {key!r} is a flag: true or false, not {value!r}")
        return value
    kind = action.type
    if value is None or (kind is None and isinstance(value, list | tuple)):
        typed = value  # a list is what a comma-separated value parses to (evaluation's parse_list takes both)
    elif kind is None:
        typed = str(value)  # an untyped option is text on the command line
    elif isinstance(value, bool | list | tuple | Mapping):
        raise ValueError(f"{where}: {key!r} takes one {getattr(kind, '__name__', 'value')}, not {value!r}")
    else:
        try:
            typed = kind(value) if kind in (int, float) and not isinstance(value, str) else kind(str(value))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {key!r}: {value!r} is not a valid {kind.__name__}") from exc
        if kind is int and isinstance(value, float) and value != typed:
            raise ValueError(f"{where}: {key!r}: {value!r} is not an integer")
    if action.choices is not None and typed is not None and typed not in action.choices:
        raise ValueError(f"{where}: {key!r}: {typed!r} is not one of {', '.join(map(str, action.choices))}")
    return typed


def options_namespace(parser: argparse.ArgumentParser, options: Mapping[str, Any], *, where: str) -> argparse.Namespace:
    """The namespace `parser` would give for a command line of `options`: the parser's defaults (and its handler),
    each option checked against the parser's actions and typed as they would type it. Unknown keys are refused by
    name, with the keys the command has; options the parser requires must be present."""
    actions = {a.dest: a for a in parser._actions if a.dest not in ("help", argparse.SUPPRESS)}
    unknown = sorted(set(options) - set(actions))
    if unknown:
        raise ValueError(
            f"{where}: not an option of `{parser.prog}`: {', '.join(map(repr, unknown))} "
            f"(its options: {', '.join(sorted(actions))})"
        )
    missing = sorted(a.dest for a in actions.values() if a.required and a.dest not in options)
    if missing:
        raise ValueError(f"{where}: `{parser.prog}` needs {', '.join(map(repr, missing))}")
    values = {dest: action.default for dest, action in actions.items()}
    values.update(parser._defaults)
    for key, value in options.items():
        values[key] = _typed(actions[key], value, where)
    return argparse.Namespace(**values)
