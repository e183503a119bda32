"""A requested stop (``fedcore.core.runtime.stopping``: SIGTERM, SIGINT, a sweep's stop event) as
a callback's stop: the round in flight is finished, recorded and checkpointed, then the run
raises ``StopRequested`` (the run is KILLED and resumable)."""

from __future__ import annotations

from fedcore.core.callbacks.base import Callback, RoundRecord, RoundVerdict
from fedcore.core.runtime import stopping


class SignalStop(Callback):
    """Asks to stop after a round that ended with a stop requested; ``reason`` says why (None:
    no stop was requested), for the loop to raise once the round is checkpointed."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def on_round_end(self, record: RoundRecord) -> RoundVerdict | None:
        if not stopping.requested():
            return None
        self.reason = f"stopped by {stopping.signal_name()} after round {record.round}"
        return RoundVerdict(stop=self.reason)
