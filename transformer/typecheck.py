"""Plain mappings (parsed YAML) built into frozen dataclasses, each value checked against its field's annotation.

`build(cls, values, where)` rejects unknown keys (listing the valid ones, with a close-match suggestion) and values
of the wrong type, converting only where it is lossless (an int where a float is due, a `5e-4` that PyYAML read as
a string); nested dataclasses, `Literal`s, unions, tuples and lists are checked the same way. Every problem is a
`ConfigError` that names the field by its dotted path. `config/sections.py` holds the dataclasses and their own
validation (`__post_init__`); this module holds only the generic checking, so that the config stays one concept.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, Literal, Union

from transformer.errors import ConfigError


def require(ok: bool, message: str) -> None:
    """Raise `ConfigError(message)` unless `ok`: every check of a config value."""
    if not ok:
        raise ConfigError(message)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce(value: Any, tp: Any, where: str) -> Any:
    """Check `value` against the annotation `tp`, converting only where it is lossless (int -> float)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return _coerce_union(value, tp, where)
    if origin is Literal:
        require(value in args, f"{where} must be one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        return build(tp, value, where)
    if origin is tuple:
        ok = isinstance(value, (list, tuple)) and len(value) == len(args)
        require(ok, f"{where} must be a list of {len(args)} values, got {value!r}")
        return tuple(coerce(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if origin is list:
        require(isinstance(value, list), f"{where} must be a list, got {value!r}")
        return [coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)]
    return _coerce_scalar(value, tp, where)


def _coerce_union(value: Any, tp: Any, where: str) -> Any:
    """None where the union allows it, else the first option that accepts `value`."""
    args = typing.get_args(tp)
    if value is None and type(None) in args:
        return None
    options = [a for a in args if a is not type(None)]
    if len(options) == 1:  # Optional[X]: X's own message is the precise one
        return coerce(value, options[0], where)
    for option in options:
        try:
            return coerce(value, option, where)
        except ConfigError:
            continue
    raise ConfigError(f"{where} must be {_type_name(tp)}, got {value!r}")


def _coerce_scalar(value: Any, tp: Any, where: str) -> Any:
    """float (an int or a numeric string accepted), int, bool or str, as YAML gives them (a bool is no number)."""
    if tp is float:
        if isinstance(value, str):  # PyYAML reads `5e-4` (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        require(number, f"{where} must be a number, got {value!r}")
        return float(value)
    if tp is int:
        require(isinstance(value, int) and not isinstance(value, bool), f"{where} must be an integer, got {value!r}")
        return value
    if tp is bool:
        require(isinstance(value, bool), f"{where} must be true or false, got {value!r}")
        return value
    if tp is str:
        require(isinstance(value, str), f"{where} must be a string, got {value!r}")
        return value
    raise TypeError(f"unsupported annotation {tp!r} at {where}")


def build(cls: type, values: Any, where: str) -> Any:
    """Instantiate dataclass `cls` from a mapping, rejecting unknown keys and wrong types."""
    if isinstance(values, cls):
        return values
    require(isinstance(values, dict), f"{where or 'the config'} must be a mapping, got {values!r}")
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in values.items():
        name = f"{where}.{key}" if where else str(key)
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"unknown config key '{name}'{hint}; valid keys: {', '.join(valid)}")
        kwargs[key] = coerce(value, hints[key], name)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where or 'config'}: {exc}") from None
