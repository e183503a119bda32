"""Synchronous rounds on a simulated clock: the sampler draws from the available clients; a
round ends when its last client reports or at its deadline, where a late client is dropped or
sends the local steps it did (``system.late``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from fedcore.core.system.profile import Profile

if TYPE_CHECKING:
    from fedcore.core.records import ClientUpdate, StageContext

MAX_LOOKS = 100_000  # looks for an available client before the run gives up

# The overrides of a tiny run that emits these metrics (fedcore.core.metrics.catalogue).
EMITTED_WHEN = [
    "system.availability=probability", "system.available_p=0.8", "system.speed=uniform",
    "system.speed_spread=3", "system.deadline_s=4",
]

# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "time/simulated_s": "simulated seconds since the run started, at the round's end "
        "(system block set, or an asynchronous rule)",
        "participation/available": "training clients available when the round's clients were "
        "drawn (an asynchronous rule: those not already training)",
        "participation/reported": "clients whose update reached the server this round",
        "participation/late": "sampled clients not done by the round's deadline (dropped, or "
        "sending partial work)",
    },
}


class Synchronous:
    """The clock and availability of a synchronous run; inactive (no simulated time, every
    client there) without a profile."""

    def __init__(self, profile: Profile | None) -> None:
        self.profile = profile
        self.clock = 0.0
        self.drawn: tuple[int, np.ndarray] | None = None  # (round, pool) once looked
        self.counts: dict[str, float] = {}

    def pool(self, round: int, training: np.ndarray, per_round: int) -> tuple[np.ndarray, int]:
        """The clients the sampler may draw from in ``round`` and how many it draws; the
        server waits (``system.retry_s``) while none is available."""
        if self.profile is None:
            return training, per_round
        if self.drawn is None or self.drawn[0] != round:
            self.drawn = (round, self.wait_for(round, training))
        ids = self.drawn[1]
        return ids, min(per_round, len(ids))

    def idle(self, training: np.ndarray) -> np.ndarray:
        """Clients free to be drawn (all of them: a synchronous round has none in flight)."""
        return training

    def wait_for(self, round: int, training: np.ndarray) -> np.ndarray:
        """The idle clients available now, advancing the clock until there is one."""
        assert self.profile is not None
        for look in range(MAX_LOOKS):
            idle = self.idle(training)
            ids: np.ndarray = idle[self.profile.available(self.clock, round, look)[idle]]
            if len(ids) or self.nothing_idle(training):
                self.counts = {"participation/available": float(len(ids))}
                return ids
            self.clock += self.profile.settings.retry_s
        raise RuntimeError(f"round {round}: no client available after {MAX_LOOKS} looks "
                           "(system.available_p or system.on_fraction too small)")

    def nothing_idle(self, training: np.ndarray) -> bool:
        """Whether the server should stop looking with no client drawn (clients in flight)."""
        return False

    def plan(
        self, rc: StageContext, ids: list[int], order: list[int] | None
    ) -> tuple[list[int], list[int] | None]:
        """The sampled clients that report (and the engine's order of them): a late client is
        dropped, or trains the steps it does by the deadline (``rc.step_limits``); the clock
        moves to the round's end."""
        p = self.profile
        if p is None:
            return ids, order
        deadline = p.settings.deadline_s
        done = {k: p.seconds(k, int(p.work[k])) for k in ids}
        late = [k for k in ids if deadline is not None and done[k] > deadline]
        if deadline is not None and p.settings.late == "partial":
            rc.step_limits = {k: p.steps_by(k, deadline) for k in late}
        kept = [k for k in ids if k not in late or rc.step_limits.get(k, 0) > 0]
        self.clock += deadline if deadline is not None and late else max(done.values(),
                                                                          default=0.0)
        self.counts.update({"participation/late": float(len(late)),
                            "participation/reported": float(len(kept))})
        return kept, None if order is None else [k for k in order if k in kept]

    def arrive(self, round: int, ups: list[ClientUpdate]) -> list[ClientUpdate]:
        """The updates that reach the server this round (all trained ones)."""
        return ups

    def metrics(self) -> dict[str, float]:
        """The round's system metrics (none when inactive)."""
        if self.profile is None:
            return {}
        return {"time/simulated_s": self.clock, **self.counts}

    def state_dict(self) -> dict[str, Any]:
        return {"clock": self.clock} if self.profile is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.clock = float(state.get("clock", 0.0))
