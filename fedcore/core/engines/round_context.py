"""The driver's round context: what the engines read of one round
(docs/explanation/round-protocol.md).

The simulation builds one per round. It is the stages' ``fedcore.core.records.StageContext``
(the round, its model, downlink and client store, what the method sends and needs) plus the
client objective the engines train: stages and the per-client template see only the stage
context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedcore.core.records import StageContext

if TYPE_CHECKING:
    from fedcore.core.clients.base import ClientAlgorithm


@dataclass(kw_only=True)
class RoundContext(StageContext):
    """One round of one simulation: the stage context plus the client objective."""

    client_algo: ClientAlgorithm
