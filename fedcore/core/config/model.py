"""The ``model`` block: a built-in model, or an ``nn.Module`` class or factory by import path."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from fedcore.core.config.blocks import Recorded

MODELS = ("mlp", "cnn", "smallcnn", "resnet20", "resnet56", "resnet110")
IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")  # package.module:Name
# A model factory passed from Python that no import path names (a lambda, a closure, a bound
# method): ``module:qualname`` with Python's <lambda>/<locals> parts (fedcore.core.models.external).
GIVEN_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[\w.<>]*<[\w.<>]*$")



class ModelConfig(Recorded):
    """A built-in model by ``name``, or any ``nn.Module`` class or factory by import path
    (``package.module:Name``, called with ``kwargs``; see ``fedcore.core.models.external``)."""

    OPTIONAL: ClassVar[tuple[str, ...]] = ("kwargs", "code", "weights")
    name: str = "cnn"
    norm: Literal["batch", "group"] = "batch"
    kwargs: dict[str, Any] = Field(default_factory=dict)  # import paths only
    code: str | None = None  # set by fedcore: digest of the defining file, package version
    # set by fedcore: initial weights of an instance, or of what a factory without an import
    # path (a lambda, a closure, a bound method) built, passed from Python
    weights: str | None = None

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in MODELS and not IMPORT_PATH.match(name) and not GIVEN_FACTORY.match(name):
            raise ValueError(
                f"unknown {name!r}; allowed: {', '.join(MODELS)}, or an nn.Module class or "
                "factory by import path (package.module:Name)"
            )
        return name

    @model_validator(mode="after")
    def _kwargs_for_own(self) -> ModelConfig:
        if self.kwargs and self.name in MODELS:
            raise ValueError(
                f"model.kwargs: only for a model given by import path, not {self.name!r}"
            )
        return self
