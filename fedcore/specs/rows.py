"""What a report row compares: a method at its settings, labelled the same before and after runs.

A row's label is the method, ``(tuned)`` when the sweep or claims file names the study that chose
its changed values (``studies: {method: study}``) and the cell changes that method's
hyperparameters or local optimiser, and otherwise the values the cell sets beyond method, seed
and data (``fedavg lr=0.1``: set by hand). A value in the file's ``set:`` is common to every row
and labels none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SKIP = ("method", "seed", "dataset.name", "dataset.alpha")
TUNABLE = ("method.", "local.")


def _value(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def row_label(overrides: Mapping[str, Any], method: str, studies: Mapping[str, str]) -> str:
    """``craft``, ``craft (tuned)`` or ``fedavg lr=0.1`` (see the module docstring)."""
    extra = {k: v for k, v in overrides.items() if k not in SKIP}
    if method in studies and any(k.startswith(TUNABLE) for k in extra):
        extra = {k: v for k, v in extra.items() if not k.startswith(TUNABLE)}
        return " ".join([f"{method} (tuned)",
                         *(f"{k.rsplit('.', 1)[-1]}={_value(v)}" for k, v in extra.items())])
    return " ".join([method, *(f"{k.rsplit('.', 1)[-1]}={_value(v)}" for k, v in extra.items())])


def is_tuned(label: str) -> bool:
    """Whether a row label says a study chose its values."""
    return " (tuned)" in label
