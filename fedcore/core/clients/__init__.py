"""Client algorithms (local objectives). ``build({"algorithm": NAME, **hparams})``."""

from __future__ import annotations

from typing import Any

from fedcore.core.clients.base import REGISTRY, ClientAlgorithm
from fedcore.core.clients.plan import Batch, Commit, Finished, FollowUp, LocalPlan
from fedcore.core.data.client_data import ClientData
from fedcore.core.records import (
    BatchMask,
    ClientUpdate,
    LocalContext,
    LocalSchedule,
)


def build(spec: dict[str, Any]) -> ClientAlgorithm:
    return REGISTRY.build(spec)


def names() -> list[str]:
    return REGISTRY.names()


__all__ = [
    "Batch",
    "BatchMask",
    "ClientAlgorithm",
    "ClientData",
    "ClientUpdate",
    "Commit",
    "Finished",
    "FollowUp",
    "LocalContext",
    "LocalPlan",
    "LocalSchedule",
    "build",
    "names",
]
