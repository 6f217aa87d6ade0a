"""Typed field checks for plan.json (stdlib only): each names the field and shows the offending value.

`launcher/spec.py` calls these from its dataclasses' ``__post_init__``, so a plan is valid the moment it is
constructed, whether from Python (the renderer) or from JSON (the launcher).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, TypeVar

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:\-]*$")
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")

T = TypeVar("T")


class PlanError(ValueError):
    """plan.json is malformed, of an unknown version, or inconsistent; the message names the field."""


def _shown(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def need_int(where: str, value: object, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(f"{where}: expected an integer, got {_shown(value)}")
    if lo is not None and value < lo:
        raise PlanError(f"{where}({value}) must be >= {lo}")
    if hi is not None and value > hi:
        raise PlanError(f"{where}({value}) must be <= {hi}")
    return value


def need_float(where: str, value: object, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PlanError(f"{where}: expected a number, got {_shown(value)}")
    if positive and not value > 0:
        raise PlanError(f"{where}({value}) must be > 0")
    return float(value)


def need_bool(where: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise PlanError(f"{where}: expected true or false, got {_shown(value)}")
    return value


def need_str(where: str, value: object, choices: tuple[str, ...] = (), pattern: re.Pattern[str] | None = None) -> str:
    if not isinstance(value, str):
        raise PlanError(f"{where}: expected a string, got {_shown(value)}")
    if choices and value not in choices:
        raise PlanError(f"{where}: {value!r} is not one of {', '.join(choices)}")
    if pattern is not None and not pattern.fullmatch(value):
        raise PlanError(f"{where}: {value!r} is not a plain name (letters, digits, '.', '_', '-')")
    if "\x00" in value or "\n" in value:
        raise PlanError(f"{where}: {value!r} contains a NUL or newline")
    return value


def need_opt(where: str, value: object, check: Any, *args: Any) -> Any:
    return None if value is None else check(where, value, *args)


def need_str_tuple(where: str, value: object, pattern: re.Pattern[str] | None = None) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise PlanError(f"{where}: expected a list of strings, got {_shown(value)}")
    return tuple(need_str(f"{where}[{i}]", item, pattern=pattern) for i, item in enumerate(value))


def need_str_map(where: str, value: object, key_pattern: re.Pattern[str], multiline: bool = False) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise PlanError(f"{where}: expected an object of strings, got {_shown(value)}")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key_pattern.fullmatch(key):
            raise PlanError(f"{where}: {key!r} is not a valid name")
        if not isinstance(item, str):
            raise PlanError(f"{where}.{key}: expected a string, got {_shown(item)}")
        if not multiline:
            need_str(f"{where}.{key}", item)
        out[key] = item
    return out


def build(cls: type[T], data: object, where: str) -> T:
    """Construct dataclass `cls` from a JSON object: unknown and missing keys are errors naming `where`."""
    if not isinstance(data, Mapping):
        raise PlanError(f"{where}: expected an object, got {_shown(data)}")
    assert is_dataclass(cls)
    known = {f.name: f for f in fields(cls) if f.init}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise PlanError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))} (known: {', '.join(known)})")
    missing = [
        name for name, f in known.items()
        if f.default is MISSING and f.default_factory is MISSING and name not in data
    ]
    if missing:
        raise PlanError(f"{where}: missing required field(s) {', '.join(map(repr, missing))}")
    return cls(**dict(data))
