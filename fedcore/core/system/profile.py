"""The clients' system profile: each client's seconds per local step, availability phase and
nominal local work, drawn once from the run seed (``system`` config block)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedcore.core.component.seeding import numpy_rng
from fedcore.core.config import ExperimentConfig
from fedcore.core.config.system import SystemConfig
from fedcore.core.data.federated import FederatedData


@dataclass(frozen=True)
class Profile:
    """Per-client seconds per local step, periodic phase (seconds) and local steps a round."""

    settings: SystemConfig
    seed: int
    step_s: np.ndarray
    phase_s: np.ndarray
    work: np.ndarray

    def seconds(self, client: int, steps: int) -> float:
        """Simulated seconds client ``client`` needs for ``steps`` local steps and its link."""
        return self.settings.link_s + steps * float(self.step_s[client])

    def steps_by(self, client: int, seconds: float) -> int:
        """Local steps client ``client`` completes within ``seconds`` after the round starts
        (the link takes its time first); at most its nominal work."""
        left = seconds - self.settings.link_s
        return int(min(self.work[client], max(math.floor(left / float(self.step_s[client])), 0)))

    def available(self, now: float, round: int, attempt: int) -> np.ndarray:
        """Which clients are there at simulated time ``now`` (a boolean mask over all clients):
        ``attempt`` counts the server's looks in this round (probability draws anew)."""
        s, n = self.settings, len(self.work)
        if s.availability == "probability":
            draws = numpy_rng(self.seed, "system_available", round, attempt).random(n)
            return np.asarray(draws < s.available_p)
        if s.availability == "periodic":
            return np.asarray(np.mod(now + self.phase_s, s.period_s) < s.on_fraction * s.period_s)
        return np.ones(n, dtype=bool)


def nominal_steps(cfg: ExperimentConfig, num_train: int) -> int:
    """A client's local steps in a round when nothing stops it: ``local.steps``, else
    ``local.epochs`` passes of ``ceil(n / batch)`` minibatches."""
    if cfg.local.steps is not None:
        return cfg.local.steps
    return cfg.local.epochs * -(-num_train // max(min(cfg.local.batch_size, num_train), 1))


def profile(cfg: ExperimentConfig, data: FederatedData) -> Profile:
    """The profile of ``data``'s clients under ``cfg.system``, from ``cfg.seed``."""
    s, n = cfg.system, data.num_clients
    draw = numpy_rng(cfg.seed, "system_speed")
    if s.speed == "lognormal":
        factor = np.exp(draw.normal(0.0, s.speed_spread, n))
    elif s.speed == "uniform":
        factor = draw.uniform(1.0, 1.0 + s.speed_spread, n)
    else:
        factor = np.ones(n)
    phase = numpy_rng(cfg.seed, "system_phase").uniform(0.0, s.period_s, n)
    work = np.array([nominal_steps(cfg, c.num_train) for c in data.clients], dtype=np.int64)
    return Profile(s, cfg.seed, s.step_s * factor, phase, work)
