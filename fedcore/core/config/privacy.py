"""The ``privacy`` block: user-level differential privacy and its accounting."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from fedcore.core.config.blocks import Strict


class PrivacyConfig(Strict):
    """User-level differential privacy of the run and its accounting (docs/methods/dp_fedavg.md,
    docs/how-to/privacy.md): ``central`` DP-FedAvg on the server (McMahan et al. 2018),
    ``local``: the client-side ``clip_noise`` stage accounted per client, ``none``: off."""

    mechanism: Literal["none", "central", "local"] = Field(
        "none", description="central: the server clips each sampled client's delta, adds "
        "Gaussian noise to the sum and divides by the expected number of clients; local: the "
        "`clip_noise` stage of `method.stages` is accounted per client; none: no privacy")
    noise_multiplier: float | None = Field(
        None, ge=0, description="central: z, the noise std over the clip (N(0, (z C)^2) on the "
        "sum); unset: calibrated from `privacy.target_epsilon`")
    clip: float | None = Field(
        None, gt=0, description="central: C, the L2 bound on each client's delta (unset: 1.0)")
    delta: float | None = Field(
        None, gt=0, lt=1, description="the delta of the (epsilon, delta) reported; unset: "
        "1 / N^1.1 for N training clients")
    target_epsilon: float | None = Field(
        None, gt=0, description="central: choose z before round 1 so that epsilon after "
        "`rounds` rounds is at most this (the accountant's own search)")
    epsilon_budget: float | None = Field(
        None, gt=0, description="stop the run FINISHED after the last round whose epsilon stays "
        "within this budget (tag `fedcore.converged` says so)")
    sampling: Literal["poisson", "fixed"] = Field(
        "poisson", description="central: poisson (each training client joins a round with "
        "q = clients_per_round / N) or fixed (clients_per_round of N without replacement)")
    accountant: Literal["rdp", "pld"] = Field(
        "rdp", description="dp-accounting's accountant: rdp (Renyi DP, Poisson or fixed "
        "sampling) or pld (privacy loss distributions, Poisson sampling only)")
    clip_quantile: float | None = Field(
        None, gt=0, lt=1, description="central: adaptive clipping (Andrew et al. 2021): the "
        "share of clients whose delta the clip should leave unclipped; unset: a fixed clip")
    clip_lr: float = Field(
        0.2, gt=0, description="adaptive clipping: C <- C exp(-clip_lr (b - clip_quantile)), "
        "b the noised unclipped share of the round")
    clip_count_std: float | None = Field(
        None, gt=0, description="adaptive clipping: the std of the noise on the count of "
        "unclipped clients; unset: the larger of clients_per_round / 20 and z (the deltas' noise "
        "multiplier is then at most 1.155 z)")

    @model_validator(mode="after")
    def _consistent(self) -> PrivacyConfig:
        set_keys = [k for k in ("noise_multiplier", "clip", "target_epsilon", "epsilon_budget",
                                "delta") if getattr(self, k) is not None]
        if self.mechanism == "none" and set_keys:
            raise ValueError(f"privacy.{set_keys[0]}: set with privacy.mechanism=none; "
                             "allowed: privacy.mechanism central or local")
        if self.mechanism == "central":
            if (self.noise_multiplier is None) == (self.target_epsilon is None):
                raise ValueError("privacy.noise_multiplier: central DP needs exactly one of "
                                 "privacy.noise_multiplier and privacy.target_epsilon")
            if self.accountant == "pld" and self.sampling == "fixed":
                raise ValueError("privacy.accountant: pld cannot account privacy.sampling="
                                 "fixed (sampling without replacement); allowed: rdp")
        adaptive = [k for k in ("clip_quantile", "clip_count_std") if getattr(self, k) is not None]
        if adaptive and self.mechanism != "central":
            raise ValueError(f"privacy.{adaptive[0]}: adaptive clipping is for "
                             "privacy.mechanism=central; allowed: unset")
        if self.mechanism == "local":
            taken = [k for k in ("noise_multiplier", "clip", "target_epsilon") if k in set_keys]
            if taken:
                raise ValueError(f"privacy.{taken[0]}: local DP takes its clip and noise from "
                                 "the clip_noise stage of method.stages; allowed: unset")
        if (self.target_epsilon is not None and self.epsilon_budget is not None
                and self.target_epsilon > self.epsilon_budget):
            raise ValueError(f"privacy.target_epsilon: {self.target_epsilon:g} exceeds "
                             f"privacy.epsilon_budget={self.epsilon_budget:g}; allowed: at "
                             "most the budget")
        return self
