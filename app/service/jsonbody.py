"""JSON request bodies, read strictly: UTF-8, finite numbers only, no lone surrogates, at most 32 levels deep.

Python's json module accepts `NaN`, `Infinity`, `1e400` (read as infinity), lone `\\ud800` escapes and nesting
until the interpreter's recursion limit; each of those once ended in a 500 or in a stored plan that could not be
read back. Here each is a 422 that names the field (or the place in the text).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from app.planner.errors import FieldError

MAX_DEPTH = 32
_SURROGATE = re.compile("[\ud800-\udfff]")
JSON_TYPES = ("application/json",)


class BodyError(ValueError):
    def __init__(self, errors: list[FieldError], status_code: int = 422) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors
        self.status_code = status_code


def _no_constants(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows; send a finite number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is too large (beyond ±1.8e308); send a finite number")
    return value


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
    """Any JSON value, strictly; errors name `field` (e.g. the form's config.json box)."""
    try:
        value = json.loads(text, parse_constant=_no_constants, parse_float=_finite)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise BodyError([FieldError(field, f"not valid JSON: {where}: {exc.msg}")]) from None
    except RecursionError:
        raise BodyError([FieldError(field, f"nested more than {MAX_DEPTH} levels deep")]) from None
    except ValueError as exc:  # NaN/Infinity, a number past float range, an integer past 4300 digits
        message = "an integer has more than 4300 digits" if "integer string conversion" in str(exc) else str(exc)
        raise BodyError([FieldError(field, message)]) from None
    check_tree(value, field)
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
