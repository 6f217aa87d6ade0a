"""Booleans, numbers and strings kept apart in every spec: pydantic's lax mode reads 0/1 as false/true, true/false
as 1/0 and "2" as 2, so `{"tp_comm_overlap": 1}`, `{"nvlink_GBps": true}` or `{"num_nodes": "2"}` would be accepted
as something the user did not write (and a stored request would keep the string where its schema says integer). A
`field_validator("*", mode="before")` with `check` refuses all three, naming what was expected."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import ValidationInfo


def _kinds(annotation: Any) -> set[Any]:
    """The plain types an annotation accepts (through Optional, unions and Annotated); `object` stands for any other
    member (str, a Literal, a model...), which may take a string."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _kinds(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        out: set[Any] = set()
        for arg in typing.get_args(annotation):
            out |= _kinds(arg)
        return out
    if annotation is type(None):
        return set()
    return {annotation} if annotation in (bool, int, float) else {object}


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def check(cls: Any, value: Any, info: ValidationInfo) -> Any:
    if info.field_name is None:
        return value
    field = cls.model_fields.get(info.field_name)
    if field is None:
        return value
    kinds = _kinds(field.annotation)
    plain = kinds - {object}
    if not plain:
        return value
    if isinstance(value, str) and object not in kinds:
        expected = "true or false" if plain == {bool} else "a number"
        quoted = value.strip().lower() in ("true", "false") or _numeric(value)  # "2": a number sent as a string
        raise ValueError(f"expected {expected}{', not a string' if quoted else ''} (got {value[:40]!r})")
    if isinstance(value, bool):
        if bool not in plain:
            raise ValueError(f"expected a number, got {str(value).lower()}")
    elif plain == {bool} and isinstance(value, int | float):
        raise ValueError(f"expected true or false, got {value!r}")
    return value
