"""The stage chain around each client's update (docs/explanation/round-protocol.md)."""

from __future__ import annotations

from fedcore.core.records import Closing, Message, StageContext
from fedcore.core.stages.base import REGISTRY, Chain, Stage

__all__ = ["REGISTRY", "Chain", "Closing", "Message", "Stage", "StageContext"]
