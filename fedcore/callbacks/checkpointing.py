"""The built-in checkpoint: the run's state every ``checkpoint_every`` rounds, at the last round,
and after a round a callback stopped the run at (nothing when ``checkpoint_every`` is 0)."""

from __future__ import annotations

from fedcore.callbacks.base import Callback, RoundRecord, RoundVerdict


class Checkpointing(Callback):
    """Writes the checkpoint (``Simulation.save_checkpoint``, which reports its path to every
    callback's ``on_checkpoint``); the last callback of a round, so the checkpoint holds the
    round's every metric."""

    def on_round_end(self, record: RoundRecord) -> RoundVerdict | None:
        every = record.sim.cfg.checkpoint_every
        if every and (record.round % every == 0 or record.last or record.stop is not None):
            record.sim.save_checkpoint()
        return None
