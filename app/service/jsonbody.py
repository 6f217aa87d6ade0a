"""JSON request bodies, read strictly: UTF-8 (a leading byte order mark ignored), finite numbers only, no lone
surrogates, each key once per object, at most 32 levels deep.

Python's json module accepts `NaN`, `Infinity`, `1e400` (read as infinity), lone `\\ud800` escapes, a key given
twice (the last one wins, silently) and nesting until the interpreter's recursion limit; each of those once ended in
a 500, in a value the user did not mean, or in a stored plan that could not be read back. Here each is a 422 that
names the field (the JSON path, e.g. cluster.num_nodes) or the place in the text.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

from app.planner.errors import FieldError

MAX_DEPTH = 32
_SURROGATE = re.compile("[\ud800-\udfff]")
JSON_TYPES = ("application/json",)
BOM = "\ufeff"  # U+FEFF, a byte order mark: EF BB BF in UTF-8


class BodyError(ValueError):
    def __init__(self, errors: list[FieldError], status_code: int = 422) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors
        self.status_code = status_code


class _Refused:
    """A value the reader met that JSON (as this service reads it) does not allow; `check_tree` names its path."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


class _Repeated(dict[str, Any]):
    """An object that gave a key more than once (`repeated`, the first such); `check_tree` names the key's path."""

    repeated = ""


def _no_constants(name: str) -> _Refused:
    return _Refused(f"{name} is not a number JSON allows; send a finite number")


def _finite(text: str) -> float | _Refused:
    value = float(text)
    if not math.isfinite(value):
        return _Refused(f"the number {text} is too large (beyond ±1.8e308); send a finite number")
    return value


def _integer(text: str) -> int | _Refused:
    limit = sys.get_int_max_str_digits()
    if limit and len(text.lstrip("-")) > limit:
        return _Refused(f"an integer has more than {limit} digits ({len(text.lstrip('-'))}); send a smaller number")
    return int(text)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) == len(pairs):
        return value
    marked, seen = _Repeated(value), set()
    for key, _value in pairs:
        if key in seen:
            marked.repeated = key
            break
        seen.add(key)
    return marked


def is_json_content_type(content_type: str | None) -> bool:
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    return kind in JSON_TYPES or (kind.startswith("application/") and kind.endswith("+json"))


def check_tree(value: Any, path: str = "") -> None:
    """Depth and text checks over a parsed JSON value, iteratively (no recursion to exhaust)."""
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        node, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise BodyError([FieldError(where, f"nested more than {MAX_DEPTH} levels deep")])
        if isinstance(node, _Refused):
            raise BodyError([FieldError(where, node.message)])
        if isinstance(node, _Repeated):
            key = node.repeated
            raise BodyError(
                [
                    FieldError(
                        f"{where}.{key}" if where else key,
                        f"the key {key!r} is given more than once in one object; give it once (JSON readers differ "
                        "on which value counts)",
                    )
                ]
            )
        if isinstance(node, str):
            if _SURROGATE.search(node):
                raise BodyError(
                    [
                        FieldError(
                            where,
                            "contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text; send valid Unicode",
                        )
                    ]
                )
        elif isinstance(node, dict):
            for key, child in node.items():
                child_path = f"{where}.{key}" if where else str(key)
                if _SURROGATE.search(key):
                    raise BodyError([FieldError(where, "a key contains a lone UTF-16 surrogate (\\ud800-\\udfff)")])
                stack.append((child, child_path, depth + 1))
        elif isinstance(node, list):
            stack.extend((child, f"{where}.{i}" if where else str(i), depth + 1) for i, child in enumerate(node))


def parse_json(text: str, field: str = "") -> Any:
    """Any JSON value, strictly; errors name `field` (e.g. the form's config.json box). A leading byte order mark is
    ignored, as RFC 8259 section 8.1 lets a parser do: editors on Windows save config.json with one, and it was
    refused as "Unexpected UTF-8 BOM" (QA 2026-12-07); the form, the API and the CLI read it alike."""
    try:
        value = json.loads(
            text.removeprefix(BOM),
            parse_constant=_no_constants,
            parse_float=_finite,
            parse_int=_integer,
            object_pairs_hook=_object,
        )
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise BodyError([FieldError(field, f"not valid JSON: {where}: {exc.msg}")]) from None
    except RecursionError:
        raise BodyError([FieldError(field, f"nested more than {MAX_DEPTH} levels deep")]) from None
    check_tree(value, field)  # names the path of a value the reader marked (NaN, 1e400, a key given twice)
    return value


def parse_json_object(raw: bytes, content_type: str | None) -> dict[str, Any]:
    """A request body that must be one JSON object."""
    if content_type is not None and not is_json_content_type(content_type):
        raise BodyError([FieldError("", f"Content-Type {content_type!r} is not JSON; send application/json")], 415)
    if not raw.strip():
        raise BodyError([FieldError("", "a JSON object body is required (Content-Type: application/json)")])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError([FieldError("", f"request body is not valid UTF-8 (byte {exc.start})")]) from None
    try:
        value = parse_json(text)
    except BodyError as exc:
        first = exc.errors[0]
        if first.field == "" and first.message.startswith("not valid JSON"):
            raise BodyError([FieldError("", "request body is " + first.message)]) from None
        raise
    if not isinstance(value, dict):
        raise BodyError(
            [
                FieldError(
                    "",
                    "the request body must be a JSON object (Content-Type: application/json); "
                    f"Input should be a valid dictionary, not a JSON {type(value).__name__}",
                )
            ]
        )
    return value
