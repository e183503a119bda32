"""Numbers a config file may set: a number field refuses true/false, and an integer field
without its own upper bound refuses values above ``limits.COUNT`` (the schema's models and every
component's hyper-parameters share this base)."""

from __future__ import annotations

import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationInfo, field_validator
from pydantic.fields import FieldInfo

from fedcore.core.config import limits


def _is_number(annotation: Any) -> bool:
    """Whether a field's type is int or float (or an optional/union of them), not bool."""
    if annotation in (int, float):
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_is_number(a) for a in get_args(annotation))
    return False


class StrictNumbers(BaseModel):
    """A number field refuses true/false (pydantic would read ``rounds: true`` as 1), and an
    integer field without its own upper bound refuses values above ``limits.COUNT`` (a count
    a file sets: rounds, steps, iterations, ...; a huge one hung or exhausted memory)."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and _is_number(field.annotation):
            raise ValueError("expected a number, not true/false")
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _bounded_counts(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if (isinstance(value, int) and not isinstance(value, bool) and value > limits.COUNT
                and field is not None and not _bounded_above(field)):
            raise ValueError(f"at most {limits.COUNT:,} allowed")
        return value


def _bounded_above(field: FieldInfo) -> bool:
    """Whether ``field`` declares its own upper bound (``le``/``lt``)."""
    return any(getattr(m, "le", None) is not None or getattr(m, "lt", None) is not None
               for m in field.metadata)
