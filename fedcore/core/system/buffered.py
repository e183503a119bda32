"""Buffered asynchronous rounds (FedBuff, Nguyen et al. AISTATS 2022) on the simulated clock:
up to ``concurrency`` clients train at once, each from the global model of the moment it was
dispatched; a server step applies the first ``buffer_size`` updates to arrive, each with its
staleness (server steps since its dispatch) in ``stats["staleness"]`` for the rule to weigh."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fedcore.core.records import ClientUpdate
from fedcore.core.system.profile import Profile
from fedcore.core.system.synchronous import Synchronous

if TYPE_CHECKING:
    from fedcore.core.records import StageContext

# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "participation/in_flight": "clients still training after the server step "
        "(asynchronous rule)",
        "participation/staleness_max": "largest staleness (server steps since dispatch) of the "
        "updates applied this step (asynchronous rule)",
    },
}


@dataclass
class InFlight:
    """A dispatched client: when its update arrives, the server step it started from, and the
    update it will send (trained at dispatch, from that step's model)."""

    arrives_s: float
    client_id: int
    round: int
    update: ClientUpdate | None = None


class Buffered(Synchronous):
    """The clock and the in-flight clients of an asynchronous rule; one run round is one
    server step."""

    def __init__(self, profile: Profile, concurrency: int, buffer_size: int,
                 device: torch.device | str = "cpu") -> None:
        super().__init__(profile)
        self.concurrency, self.buffer_size = concurrency, buffer_size
        self.device = torch.device(device)  # where a resumed run's updates in flight go
        self.flying: list[InFlight] = []

    def pool(self, round: int, training: np.ndarray, per_round: int) -> tuple[np.ndarray, int]:
        """The idle available clients and how many to dispatch: the free slots."""
        ids, _ = super().pool(round, training, per_round)
        return ids, min(self.concurrency - len(self.flying), len(ids))

    def idle(self, training: np.ndarray) -> np.ndarray:
        busy = [f.client_id for f in self.flying]
        return training[~np.isin(training, busy)]

    def nothing_idle(self, training: np.ndarray) -> bool:
        return bool(self.flying)

    def plan(
        self, rc: StageContext, ids: list[int], order: list[int] | None
    ) -> tuple[list[int], list[int] | None]:
        """Dispatch ``ids`` now: each trains fully, from this step's model."""
        assert self.profile is not None
        p = self.profile
        self.flying += [InFlight(self.clock + p.seconds(k, int(p.work[k])), k, rc.round)
                        for k in ids]
        return ids, order

    def arrive(self, round: int, ups: list[ClientUpdate]) -> list[ClientUpdate]:
        """The first ``buffer_size`` updates to arrive (ties by client id), in client order,
        each with its staleness; the clock moves to the last one's arrival."""
        trained = {u.client_id: u for u in ups}
        for f in self.flying:
            if f.update is None:
                f.update = trained[f.client_id]
        self.flying.sort(key=lambda f: (f.arrives_s, f.client_id))
        came, self.flying = self.flying[: self.buffer_size], self.flying[self.buffer_size:]
        self.clock = max(self.clock, came[-1].arrives_s)
        out = []
        for f in sorted(came, key=lambda f: f.client_id):
            assert f.update is not None
            f.update.stats["staleness"] = float(round - f.round)
            out.append(f.update)
        self.counts.update({"participation/reported": float(len(out)),
                            "participation/in_flight": float(len(self.flying)),
                            "participation/staleness_max": float(max(
                                round - f.round for f in came))})
        return out

    def state_dict(self) -> dict[str, Any]:
        """The clock and every client in flight with the update it will send (plain
        containers: a checkpoint holds them)."""
        return {"clock": self.clock, "in_flight": [
            {"arrives_s": f.arrives_s, "client_id": f.client_id, "round": f.round,
             "update": None if f.update is None else dict(vars(f.update))}
            for f in self.flying]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.flying = [InFlight(float(f["arrives_s"]), int(f["client_id"]), int(f["round"]),
                                None if f["update"] is None else self._update(f["update"]))
                       for f in state.get("in_flight", [])]

    def _update(self, fields: dict[str, Any]) -> ClientUpdate:
        """A checkpointed update, its tensors on the run's device."""
        def on(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                return value.to(self.device)
            if isinstance(value, dict):
                return {k: on(v) for k, v in value.items()}
            return value

        return ClientUpdate(**{k: on(v) for k, v in fields.items()})
