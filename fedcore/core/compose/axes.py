"""The method's axes: the key under ``method`` of each component kind and its registry.

Above the component packages (it imports each registry), below whatever walks all of a
method's components: ``fedcore.core.compose.configure`` (validation),
``fedcore.core.compose.plugins`` (where out-of-tree components come from). A new axis is one line
here.
"""

from __future__ import annotations

from typing import Any

from fedcore.core.aggregators.base import REGISTRY as AGG
from fedcore.core.clients.base import REGISTRY as CLIENTS
from fedcore.core.compression.base import REGISTRY as COMP
from fedcore.core.config.registry import Registry

AXES: tuple[tuple[str, Registry[Any]], ...] = (
    ("client", CLIENTS), ("aggregator", AGG), ("compression", COMP)
)
