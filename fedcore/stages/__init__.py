"""The stage chain around each client's update (docs/explanation/round-protocol.md)."""

from __future__ import annotations

from fedcore.stages.base import REGISTRY, Chain, Message, RoundEnd, Stage

__all__ = ["REGISTRY", "Chain", "Message", "RoundEnd", "Stage"]
