"""Booleans and numbers kept apart in every spec: pydantic's lax mode reads 0/1 as false/true and true/false as
1/0, so `{"tp_comm_overlap": 1}` or `{"nvlink_GBps": true}` would be accepted as something the user did not write.
A `field_validator("*", mode="before")` with `check` refuses both, naming what was expected."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import ValidationInfo


def _kinds(annotation: Any) -> set[type]:
    """The plain types an annotation accepts (through Optional, unions and Annotated; Literal and others: none)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _kinds(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        out: set[type] = set()
        for arg in typing.get_args(annotation):
            out |= _kinds(arg)
        return out
    return {annotation} if annotation in (bool, int, float) else set()


def check(cls: Any, value: Any, info: ValidationInfo) -> Any:
    if info.field_name is None:
        return value
    field = cls.model_fields.get(info.field_name)
    if field is None:
        return value
    kinds = _kinds(field.annotation)
    if not kinds:
        return value
    if isinstance(value, bool):
        if bool not in kinds:
            raise ValueError(f"expected a number, got {str(value).lower()}")
    elif kinds == {bool} and isinstance(value, int | float):
        raise ValueError(f"expected true or false, got {value!r}")
    return value
