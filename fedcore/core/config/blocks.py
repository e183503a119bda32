"""The config blocks' shared bases: strict numbers and keys, recorded keys left out while
unset, and path settings within the limits."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from fedcore.core.config import limits
from fedcore.core.config.numbers import StrictNumbers


def a_path(value: str) -> str:
    """A path setting within the limits of fedcore.core.config.limits (length, parts,
    characters)."""
    problem = limits.path_problem(value)
    if problem:
        raise ValueError(problem)
    return value


PathSetting = Annotated[str, AfterValidator(a_path)]


class Strict(StrictNumbers):
    """Unknown keys are errors; no float setting accepts inf or nan, no number true/false
    (docs/explanation/reliability.md)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False, allow_inf_nan=False)


class Recorded(Strict):
    """A block with keys fedcore fills in for data or models from outside (``OPTIONAL``): left
    out of the resolved config while unset, so the config hashes of built-in ones stay as
    they were."""

    OPTIONAL: ClassVar[tuple[str, ...]] = ()
    # settings added later whose zero default changes nothing: left out while zero, so the
    # hashes of configs written before them stay as they were
    ZERO_OMITTED: ClassVar[tuple[str, ...]] = ()
    # blocks added later: left out while every key holds its default, for the same reason
    DEFAULT_OMITTED: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in self.DEFAULT_OMITTED:
            block = type(self).model_fields[key].default_factory
            if block is not None and data.get(key) == block().model_dump(mode="json"):  # type: ignore[call-arg]
                data.pop(key, None)
        for key in self.OPTIONAL:
            if data.get(key) in (None, {}):
                data.pop(key, None)
        for key in self.ZERO_OMITTED:
            if data.get(key) == 0:
                data.pop(key, None)
        return data
