"""A run's privacy: the mechanism's resolved parameters (z calibrated before round 1 when a
target epsilon is given, delta defaulted), the account of the rounds spent (checkpointed, so a
resumed run continues it), and the callback that reports ``privacy/epsilon`` after every round
and finishes the run before it would overspend its budget."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fedcore.core.callbacks.base import Callback, RoundRecord, RoundVerdict
from fedcore.core.component.seeding import derive_seed
from fedcore.core.config.errors import ConfigError
from fedcore.core.privacy import accountant
from fedcore.core.privacy.accountant import Account, Sampling
from fedcore.core.privacy.mechanism import noised_mean, noised_unclipped_share, private_batch
from fedcore.core.privacy.sampling import PoissonSampler

if TYPE_CHECKING:
    from fedcore.core.config import ExperimentConfig
    from fedcore.core.records.aggregate import UpdateBatch
    from fedcore.core.samplers.base import Sampler

log = logging.getLogger("fedcore")

# The overrides of a tiny run that emits these metrics (fedcore.core.metrics.catalogue).
EMITTED_WHEN = [
    "privacy.mechanism=central", "privacy.noise_multiplier=1.0", "privacy.clip_quantile=0.5",
]

# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "privacy/epsilon": (
            "epsilon at privacy.delta spent so far (central: the rounds played; local: the most "
            "rounds any client took part in), computed by the accountant"
        ),
        "privacy/clip": (
            "central DP: the clip C the round used (privacy.clip; with privacy.clip_quantile it "
            "adapts from round to round)"
        ),
    },
}


def stage_clip_noise(cfg: ExperimentConfig) -> tuple[float, float]:
    """(clip, sigma) of the one ``clip_noise`` stage of ``method.stages`` (local DP)."""
    found = [s for s in cfg.method.stages or [] if s.get("stage") == "clip_noise"]
    if len(found) != 1:
        raise ConfigError(f"privacy.mechanism: local DP accounts one clip_noise stage of "
                          f"method.stages, found {len(found)}; allowed: exactly one")
    return float(found[0]["clip"]), float(found[0]["sigma"])


def delta_noise_multiplier(total: float, count_std: float) -> float:
    """The noise multiplier left for the deltas when the count of adaptive clipping takes its
    share: z_delta = (z^-2 - (2 count_std)^-2)^(-1/2), so that the round is one Gaussian
    mechanism of noise multiplier z (Andrew et al. 2021, Theorem 1)."""
    rest = total ** -2 - (2 * count_std) ** -2 if total > 0 else -1.0
    if rest <= 0:
        raise ConfigError(
            f"privacy.clip_count_std: {count_std:g} leaves no noise for the deltas at noise "
            f"multiplier {total:.4g}; allowed: more than {total / 2:.4g}")
    return float(rest ** -0.5)


class Ledger:
    """The privacy of one run: what the mechanism is and what it has spent.

    Args:
        cfg: the run's config (``privacy`` block not ``none``).
        num_training: N, the clients a round may sample.
        num_clients: all clients (the ids of the participation counts of local DP).
    """

    def __init__(self, cfg: ExperimentConfig, num_training: int, num_clients: int) -> None:
        p = cfg.privacy
        self.mechanism = p.mechanism
        self.seed = cfg.seed
        self.planned_rounds = cfg.rounds
        self.budget = p.epsilon_budget
        self.delta = p.delta if p.delta is not None else accountant.default_delta(num_training)
        self.expected_clients = float(cfg.clients_per_round)
        self.calibrated = False
        if self.mechanism == "central":
            self.clip = p.clip if p.clip is not None else 1.0
            sampling: Sampling = p.sampling
            z = p.noise_multiplier if p.noise_multiplier is not None else 0.0
        else:
            self.clip, z = stage_clip_noise(cfg)
            sampling = "local"
        self.round_clip = self.clip  # the clip of the round last privatized
        self.account = Account(p.accountant, sampling, z, num_training, cfg.clients_per_round)
        if p.target_epsilon is not None:
            z = accountant.calibrate(self.account, cfg.rounds, p.target_epsilon, self.delta)
            self.account = self.account.with_noise(z)
            self.calibrated = True
            log.info("privacy: noise multiplier %.6g meets epsilon %g at delta %.3g after %d "
                     "rounds", z, p.target_epsilon, self.delta, cfg.rounds)
        self.quantile, self.clip_lr = p.clip_quantile, p.clip_lr
        # the paper's m/20, or z where that is smaller (z_delta is then at most 1.155 z)
        self.count_std = (p.clip_count_std if p.clip_count_std is not None
                          else max(cfg.clients_per_round / 20, self.noise_multiplier))
        self.delta_noise = self.noise_multiplier
        if self.quantile is not None:
            self.delta_noise = delta_noise_multiplier(self.noise_multiplier, self.count_std)
        if p.accountant == "pld" and self.account.accounted_noise < accountant.PLD_MIN_NOISE:
            raise ConfigError(
                f"privacy.accountant: pld needs an accounted noise multiplier >= "
                f"{accountant.PLD_MIN_NOISE:g} (its loss grid grows as 1/z^2), got "
                f"{self.account.accounted_noise:g}; allowed: rdp, or more noise")
        self._epsilons: dict[int, float] = {}  # releases -> epsilon, for this z
        self.rounds = 0  # central: rounds accounted
        self.participations = np.zeros(num_clients, dtype=np.int64)  # local: per client
        if self.budget is not None and self.epsilon_after(1) > self.budget:
            raise ConfigError(
                f"privacy.epsilon_budget: one round already spends epsilon "
                f"{self.epsilon_after(1):.4g} > {self.budget:g}; allowed: a larger budget or "
                "more noise")

    @property
    def noise_multiplier(self) -> float:
        """z, the accounted noise multiplier of a round (with adaptive clipping: of the delta
        and the count together)."""
        return self.account.noise_multiplier

    def sampler(self, default: Sampler) -> Sampler:
        """The sampler the accountant assumes: Poisson for central DP with Poisson sampling,
        else ``default`` (uniform: fixed size without replacement)."""
        if self.mechanism == "central" and self.account.sampling == "poisson":
            return PoissonSampler(self.account.rate)
        return default

    def privatize(self, batch: UpdateBatch) -> UpdateBatch:
        """Central DP: the one-row batch of the noised mean of the clipped deltas; local DP:
        ``batch`` (the stage noised each client)."""
        if self.mechanism != "central":
            return batch
        gen = torch.Generator().manual_seed(derive_seed(self.seed, "privacy", batch.round))
        mean = noised_mean(batch.deltas, self.clip, self.delta_noise, self.expected_clients, gen)
        self.round_clip = self.clip
        if self.quantile is not None:  # the clip of the next round (Andrew et al. 2021)
            share = noised_unclipped_share(batch.deltas, self.clip, self.count_std,
                                           self.expected_clients, gen)
            self.clip *= math.exp(-self.clip_lr * (share - self.quantile))
        return private_batch(batch, mean)

    def spend(self, sampled: list[int]) -> None:
        """Account one played round whose sampled clients were ``sampled``."""
        self.rounds += 1
        self.participations[np.asarray(sampled, dtype=np.int64)] += 1

    def spent(self) -> int:
        """The releases composed so far: rounds (central), the most any client made (local)."""
        if self.mechanism == "central":
            return self.rounds
        return int(self.participations.max()) if len(self.participations) else 0

    def epsilon_after(self, releases: int) -> float:
        """epsilon at ``delta`` after ``releases`` rounds (computed once per count)."""
        if releases not in self._epsilons:
            self._epsilons[releases] = accountant.epsilon(self.account, releases, self.delta)
        return self._epsilons[releases]

    def params(self) -> dict[str, str]:
        """The mechanism's resolved parameters, as the run's params (``dp.*``)."""
        return {
            "dp.mechanism": self.mechanism,
            "dp.noise_multiplier": repr(self.noise_multiplier),
            "dp.clip": repr(self.clip),
            "dp.sampling_rate": repr(self.account.rate),
            "dp.sampling": self.account.sampling,
            "dp.delta": repr(self.delta),
            "dp.accountant": f"dp-accounting {self.account.accountant}",
            "dp.calibrated": str(self.calibrated).lower(),
            **({"dp.clip_quantile": repr(self.quantile), "dp.clip_lr": repr(self.clip_lr),
                "dp.clip_count_std": repr(self.count_std),
                "dp.delta_noise_multiplier": repr(self.delta_noise)}
               if self.quantile is not None else {}),
        }

    def callbacks(self) -> list[Callback]:
        return [PrivacyReport(self)]

    def state_dict(self) -> dict[str, Any]:
        return {"noise_multiplier": self.noise_multiplier, "rounds": self.rounds,
                "participations": self.participations.copy(), "clip": self.clip}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the account of a checkpoint (its noise multiplier: a calibration is not
        redone)."""
        self.account = self.account.with_noise(float(state["noise_multiplier"]))
        self._epsilons = {}
        if self.quantile is not None:
            self.delta_noise = delta_noise_multiplier(self.noise_multiplier, self.count_std)
        else:
            self.delta_noise = self.noise_multiplier
        self.clip = float(state.get("clip", self.clip))
        self.rounds = int(state["rounds"])
        self.participations = np.asarray(state["participations"], dtype=np.int64).copy()


class PrivacyReport(Callback):
    """``privacy/epsilon`` after every round; with ``privacy.epsilon_budget``, finishes the run
    after the last round whose epsilon the budget covers."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def on_round_end(self, record: RoundRecord) -> RoundVerdict:
        ledger = self.ledger
        spent = ledger.spent()
        eps = ledger.epsilon_after(spent)
        finish: str | bool = False
        if ledger.budget is not None and not record.last:
            following = ledger.epsilon_after(spent + 1)
            if following > ledger.budget:
                finish = (f"privacy budget: epsilon {eps:.4g} after round {record.round}; "
                          f"round {record.round + 1} would spend {following:.4g} > "
                          f"privacy.epsilon_budget={ledger.budget:g}")
        metrics = {"privacy/epsilon": eps}
        if ledger.mechanism == "central":
            metrics["privacy/clip"] = ledger.round_clip
        return RoundVerdict(metrics=metrics, finish=finish)
