"""Input errors as (field, message) pairs that name the field and the numbers, for the CLI, API and form."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError


@dataclass(frozen=True)
class FieldError:
    field: str  # dotted path, e.g. "cluster.num_nodes" ("" for the whole request)
    message: str

    def __post_init__(self) -> None:
        """A message that starts with its own field's name (a validator's "job_name: 'a b' is not ...") loses it:
        the field is named once, not "render.job_name: job_name: ..." (QA, 2026-12-06)."""
        parts = self.field.split(".")
        for named in (".".join(parts[i:]) for i in range(len(parts))):  # "model.name: ..." or "name: ..."
            if named and self.message.startswith(f"{named}: "):
                object.__setattr__(self, "message", self.message[len(named) + 2 :])
                break

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


def _loc(loc: tuple[Any, ...]) -> str:
    # pydantic puts the model-validator name or union branch in the path; keep the user's field names only
    return ".".join(
        str(p) for p in loc if not (isinstance(p, str) and (p.startswith("function-") or p in ("str", "GPUSpec")))
    )


def field_errors(exc: ValidationError, prefix: str = "") -> list[FieldError]:
    out = []
    for err in exc.errors(include_url=False):
        loc = _loc(tuple(err.get("loc", ())))
        field = ".".join(x for x in (prefix, loc) if x)
        msg = error_text(err)
        named = named_field(err, loc, prefix)
        if named is not None:
            field, msg = named.field, named.message
        if "input" in err and err.get("type") not in ("missing", "value_error", "model_type", "extra_forbidden"):
            given = err["input"]
            if not isinstance(given, (dict, list)):
                msg = f"{msg} (got {given!r})"
        if err.get("type") == "extra_forbidden":
            msg = "unknown field"
        out.append(FieldError(field, msg))
    return out


def error_text(err: Any) -> str:
    """pydantic's message for one error, in the planner's words: without its "Value error, " prefix, and for a number
    too large to be an integer (1e30) not its "Unable to parse input string as an integer" (QA 2026-12-08)."""
    if err.get("type") == "int_parsing_size":
        return "a number too large for this whole-number field"
    return str(err.get("msg", "invalid")).removeprefix("Value error, ")


def named_field(err: Any, loc: str, prefix: str = "") -> FieldError | None:
    """A spec's cross-field check that raised an InputError naming the field at fault (from the request's root:
    cluster.hosts, where pydantic says only cluster) inside the spec at `prefix`.`loc`: that field and the check's
    message."""
    cause = (err.get("ctx") or {}).get("error")
    where = ".".join(x for x in (prefix, loc) if x)
    if isinstance(cause, InputError) and cause.field and (not where or cause.field.startswith(f"{where}.")):
        return FieldError(cause.field, cause.message)
    return None


class InputError(ValueError):
    """A planner input error found past validation (a pin the cluster cannot hold, a layout string that does not
    parse): `field` is the dotted path of the input at fault, `message` says what is wrong with the numbers."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field, self.message = field, message


def value_error(exc: ValueError, field: str = "") -> list[FieldError]:
    if isinstance(exc, InputError):
        return [FieldError(exc.field, exc.message)]
    return [FieldError(field, str(exc))]
