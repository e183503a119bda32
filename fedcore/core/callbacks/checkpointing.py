"""The built-in checkpoint: asks the driver for the run's checkpoint every ``checkpoint_every``
rounds, at the last round, and after a round a callback paused the run at (nothing when
``checkpoint_every`` is 0)."""

from __future__ import annotations

from fedcore.core.callbacks.base import Callback, RoundRecord, RoundVerdict


class Checkpointing(Callback):
    """Decides when a checkpoint is due; the driver writes it once every callback of the round
    has run (it then reports the path to every callback's ``on_checkpoint``). The last
    callback of a round, so it sees a pause any other callback asked for."""

    def on_round_end(self, record: RoundRecord) -> RoundVerdict | None:
        every = record.run.cfg.checkpoint_every
        if every and (record.round % every == 0 or record.last or record.stop is not None):
            return RoundVerdict(checkpoint=True)
        return None
