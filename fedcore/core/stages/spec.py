"""``method.stages``: a list of ``{stage: NAME, **hparams}``, each validated against its
stage's ``HParams`` and its declared ``side`` (one-line errors)."""

from __future__ import annotations

from typing import Any

from fedcore.core.config.component_spec import resolve_one
from fedcore.core.config.errors import ConfigError
from fedcore.core.config.limits import shown
from fedcore.core.stages.base import REGISTRY, side_rank


def resolve_stages(specs: Any) -> list[dict[str, Any]] | None:
    """The canonical list (defaults filled in), None when there is none."""
    if specs is None or specs == []:
        return None
    if not isinstance(specs, list):
        raise ConfigError(f"method.stages: expected a list of {{stage: NAME, ...}} "
                          f"(got {shown(specs)})")
    out = []
    for i, spec in enumerate(specs):
        where = f"method.stages[{i}]"
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: expected a mapping {{stage: NAME, ...}} "
                              f"(got {shown(spec)})")
        resolved = resolve_one(spec, where, REGISTRY)
        side_rank(REGISTRY.get(resolved[REGISTRY.key]), where)
        out.append(resolved)
    return out


