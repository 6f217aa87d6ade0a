"""The service's two refusals (a 4xx naming each field, a 404), and pydantic's error lists as field errors.

Errors the planner raises are converted by the planner's own `field_errors` (pydantic ValidationError) and
`value_error` (its typed `InputError`, which carries the field). What is left here is the request bodies' own
validation: their tagged unions (`model` as a preset name, `{"preset": ...}`, `{"hf_config": ...}` or ModelSpec
fields; `cluster` as a saved name or a description) put the tag in pydantic's location; the field named to the
user never has it. The messages are worded exactly as `field_errors` words them, so the API, the form and the CLI
say the same thing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from app.planner.errors import FieldError, error_text, field_errors, named_field, value_error

TAG_PREFIX = "as:"  # union tags of the request bodies (app/service/bodies.py); field names never contain ':'
_LOCATIONS = ("body", "query", "path", "header", "cookie")
_NO_GOT = ("missing", "value_error", "model_type", "extra_forbidden", "json_invalid")


class Refused(Exception):
    """The request is malformed or out of range; `errors` name each field and say why (-> 4xx, 422 by default)."""

    def __init__(self, errors: list[FieldError], status_code: int = 422, retry_after_s: int | None = None) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors
        self.status_code = status_code
        self.retry_after_s = retry_after_s


class NotFound(Exception):
    def __init__(self, what: str, field: str = "") -> None:
        super().__init__(what)
        self.error = FieldError(field, what)


def _user_loc(loc: Iterable[Any]) -> str:
    """pydantic's location without the union tags, validator names and the branches field_errors drops."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in _LOCATIONS:
        parts = parts[1:]
    return ".".join(
        p for p in parts if not (p.startswith(TAG_PREFIX) or p.startswith("function-") or p in ("str", "GPUSpec"))
    )


def _message(err: Mapping[str, Any]) -> str:
    """field_errors' wording: pydantic's message, the value given when it is a scalar, 'unknown field'."""
    kind = err.get("type")
    if kind == "extra_forbidden":
        return "unknown field"
    msg = error_text(err)
    given = err.get("input")
    if isinstance(given, str) and tuple(err.get("loc", ()))[:1] == ("header",):
        given = _header_text(given)
    if "input" in err and kind not in _NO_GOT and not isinstance(given, (dict, list)):
        msg = f"{msg} (got {given!r})"
    return msg


def _header_text(value: str) -> str:
    """A header value as the client wrote it: Starlette decodes header bytes as latin-1, so UTF-8 text (a key in
    Cyrillic, say) came back as mojibake ('ÐºÐ»Ñ\x8eÑ\x87' for 'ключ', QA)."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value


def error_list(errors: Iterable[Mapping[str, Any]], prefix: str = "") -> list[FieldError]:
    """pydantic error dicts (a ValidationError's, or FastAPI's RequestValidationError's) as field errors."""
    out = []
    for err in errors:
        loc = _user_loc(err.get("loc", ()))
        named = named_field(err, loc, prefix)
        if named is not None:
            out.append(named)
            continue
        out.append(FieldError(".".join(x for x in (prefix, loc) if x), _message(err)))
    return out


def validation_errors(exc: ValidationError, prefix: str = "") -> list[FieldError]:
    """A request body's ValidationError (union tags dropped from the fields)."""
    return error_list(exc.errors(include_url=False), prefix)


def planner_errors(exc: ValueError) -> list[FieldError]:
    """An input error the planner raised: pydantic's (a field per loc) or its typed InputError (its field)."""
    return field_errors(exc) if isinstance(exc, ValidationError) else value_error(exc)
