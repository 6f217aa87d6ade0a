"""Typed field checks for plan.json (stdlib only): each names the field and shows the offending value.

`launcher/spec.py` calls these from its dataclasses' ``__post_init__``, so a plan is valid the moment it is
constructed, whether from Python (the renderer) or from JSON (the launcher).
"""

from __future__ import annotations

import math
import re
import reprlib
from collections.abc import Mapping
from dataclasses import MISSING, fields, is_dataclass

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (mypy reads it so), without importing typing: docs/launcher.md
if TYPE_CHECKING:
    from typing import Any, TypeVar

    T = TypeVar("T")

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:\-]*$")
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")

MAX_STRING = 1 << 16  # a path, an argument or an env value; file contents may be longer (MAX_FILE)
MAX_FILE = 16 << 20
_REPR = reprlib.Repr()  # errors show values bounded in length and depth
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong, _REPR.maxlist, _REPR.maxdict = 3, 60, 60, 40, 6, 6


class PlanError(ValueError):
    """plan.json is malformed, of an unknown version, or inconsistent; the message names the field."""


def _shown(value: object) -> str:
    """The value as the error shows it: bounded, however long or deeply nested it is."""
    return f"{_REPR.repr(value)} ({type(value).__name__})"


def need_int(where: str, value: object, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(f"{where}: expected an integer, got {_shown(value)}")
    if lo is not None and value < lo:
        raise PlanError(f"{where}({_REPR.repr(value)}) must be >= {lo}")
    if hi is not None and value > hi:
        raise PlanError(f"{where}({_REPR.repr(value)}) must be <= {hi}")
    return value


def need_float(
    where: str, value: object, positive: bool = True, hi: float | None = None, lo: float | None = None
) -> float:
    """A finite number (JSON's NaN and Infinity, and integers past float's range, are refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PlanError(f"{where}: expected a number, got {_shown(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise PlanError(f"{where}({_REPR.repr(value)}) must be a finite number")
    if positive and not number > 0:
        raise PlanError(f"{where}({value}) must be > 0")
    if lo is not None and number < lo:
        raise PlanError(f"{where}({value}) must be >= {lo:g}")
    if hi is not None and number > hi:
        raise PlanError(f"{where}({value}) must be <= {hi:g}")
    return number


def _encodable(where: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PlanError(
            f"{where}: {_REPR.repr(value)} holds {exc.object[exc.start]!r}, which is not a character "
            f"UTF-8 can write (a lone surrogate)"
        ) from None


def need_bool(where: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise PlanError(f"{where}: expected true or false, got {_shown(value)}")
    return value


def need_str(
    where: str,
    value: object,
    choices: tuple[str, ...] = (),
    pattern: re.Pattern[str] | None = None,
    max_len: int = MAX_STRING,
) -> str:
    if not isinstance(value, str):
        raise PlanError(f"{where}: expected a string, got {_shown(value)}")
    if choices and value not in choices:
        raise PlanError(f"{where}: {_REPR.repr(value)} is not one of {', '.join(choices)}")
    if len(value) > max_len:
        raise PlanError(f"{where}: {len(value)} characters, more than the {max_len} allowed")
    if pattern is not None and not pattern.fullmatch(value):
        raise PlanError(f"{where}: {_REPR.repr(value)} is not a plain name (letters, digits, '.', '_', '-')")
    if "\x00" in value or "\n" in value:
        raise PlanError(f"{where}: {_REPR.repr(value)} contains a NUL or newline")
    _encodable(where, value)
    return value


def need_opt(where: str, value: object, check: Any, *args: Any) -> Any:
    return None if value is None else check(where, value, *args)


def need_str_tuple(
    where: str, value: object, pattern: re.Pattern[str] | None = None, max_len: int = MAX_STRING
) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise PlanError(f"{where}: expected a list of strings, got {_shown(value)}")
    return tuple(need_str(f"{where}[{i}]", item, pattern=pattern, max_len=max_len) for i, item in enumerate(value))


def need_str_map(where: str, value: object, key_pattern: re.Pattern[str], multiline: bool = False) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise PlanError(f"{where}: expected an object of strings, got {_shown(value)}")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key_pattern.fullmatch(key) or len(key) > 255:
            raise PlanError(f"{where}: {_REPR.repr(key)} is not a valid name")
        if not isinstance(item, str):
            raise PlanError(f"{where}.{key}: expected a string, got {_shown(item)}")
        if multiline:
            if len(item) > MAX_FILE:
                raise PlanError(f"{where}.{key}: {len(item)} characters, more than the {MAX_FILE} allowed")
            _encodable(f"{where}.{key}", item)
        else:
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
        shown = ", ".join(_REPR.repr(k) for k in unknown[:5]) + (
            f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        )
        raise PlanError(f"{where}: unknown field(s) {shown} (known: {', '.join(known)})")
    missing = [
        name for name, f in known.items() if f.default is MISSING and f.default_factory is MISSING and name not in data
    ]
    if missing:
        raise PlanError(f"{where}: missing required field(s) {', '.join(map(repr, missing))}")
    return cls(**dict(data))
