"""A pydantic validation error as the one line fedcore prints (the key, the allowed values)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from fedcore.core.config import limits
from fedcore.core.config.experiment import ExperimentConfig


def one_line(exc: ValidationError, prefix: str = "", root: type[BaseModel] | None = None) -> str:
    """The first error of ``exc`` as one line: its dotted key (under ``prefix``), the problem
    and the allowed keys or the value given."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))
    key = limits.clip(f"{prefix}.{loc}" if prefix and loc else (prefix or loc))
    if not key:
        return err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        allowed = allowed_keys(root or ExperimentConfig, err["loc"][:-1])
        hint = f"; allowed: {', '.join(allowed)}" if allowed else ""
        return f"{key}: unknown key{hint}"
    msg = err["msg"].removeprefix("Value error, ")
    if msg.startswith(f"{key}."):  # a block's own check names its key in full
        return msg
    if err["type"] in ("literal_error", "enum"):
        return f"{key}: {msg} (got {limits.shown(err.get('input'))})"
    if "input" in err and err["type"] not in ("missing",) and not isinstance(err["input"], dict):
        return f"{key}: {msg} (got {limits.shown(err['input'])})"
    return f"{key}: {msg}"


def allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed in the block of ``model`` at ``loc`` (empty: not a block)."""
    for part in loc:
        field = model.model_fields.get(str(part))
        if (
            field is None
            or not isinstance(field.annotation, type)
            or not issubclass(field.annotation, BaseModel)
        ):
            return []
        model = field.annotation
    return list(model.model_fields)
