"""FedOUI: OUI-guided client weighting (Fernández-Hernández et al., arXiv 2605.11571)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import torch
from pydantic import Field

from fedcore.core.aggregators.base import Aggregator, register
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.numerics.oui import fedoui_weights, oui_scores
from fedcore.core.records.aggregate import Aggregate, UpdateBatch

WINDOW_ROUNDS = 5  # window "last5": this round's OUIs plus those of the previous 4 rounds


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "oui/mean": "mean OUI of the sampled clients",
        "oui/beta_a": "alpha of the Beta fitted to the OUIs (NaN when no fit)",
        "oui/beta_b": "beta of the fitted Beta",
        "oui/fallback": "1 when the rank-percentile fallback replaced the Beta fit",
        "oui/score_mean": "mean typicality score s_k",
    },
}


@register("fedoui")
class FedOUI(Aggregator):
    """Weights w_k ∝ n_k^rho (eps + s_k)^gamma, s_k the Beta typicality of client k's OUI.

    The OUI o_k comes from the client (``fedcore.core.clients.extras.oui``) on its fixed probe.
    """

    class HParams(BaseHParams):
        rho: float = Field(1.0, ge=0.0, description="exponent of the sample count n_k")
        gamma: float = Field(1.0, ge=0.0, description="exponent of the score eps + s_k")
        eps: float = Field(1e-3, gt=0.0, lt=0.5, description="score floor and Beta-fit clip")
        window: Literal["current", "last5"] = "current"
        var_floor: float = Field(0.0, ge=0.0, description="[OUR CHOICE] s^2 floor, 0 = off")
        server_lr: float = Field(1.0, gt=0.0)

    hp: HParams

    needs: ClassVar[frozenset[str]] = frozenset({"oui"})

    def __init__(self, hparams: HParams | None = None) -> None:
        super().__init__(hparams)
        self.history: list[list[float]] = []  # OUIs of the previous rounds (window "last5")

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        hp = self.hp
        # docs/methods/fedoui.md: v = this round's OUIs (+ the previous 4 rounds' for "last5")
        ouis = batch.stats["oui"].detach().double().cpu().numpy()
        window = None
        if hp.window == "last5":
            window = np.concatenate([np.asarray(h) for h in self.history] + [ouis])
            self.history = (self.history + [ouis.tolist()])[-(WINDOW_ROUNDS - 1) :]
        # steps 6-7: Beta fit (moments -> MLE) and s_k = 2 min(F_k, 1 - F_k), else rank fallback
        scores, fit = oui_scores(ouis, window, eps=hp.eps, var_floor=hp.var_floor)
        # step 8: w_k ∝ n_k^rho (eps + s_k)^gamma
        n = batch.num_samples.detach().double().cpu().numpy()
        w = fedoui_weights(n, scores, hp.rho, hp.gamma, hp.eps)
        metrics = {
            "oui/mean": float(ouis.mean()),
            "oui/beta_a": fit.alpha if fit is not None else float("nan"),
            "oui/beta_b": fit.beta if fit is not None else float("nan"),
            "oui/fallback": 0.0 if fit is not None else 1.0,
            "oui/score_mean": float(scores.mean()),
        }
        weights = torch.as_tensor(w, dtype=batch.deltas.dtype, device=batch.deltas.device)
        # step 9: theta_{t+1} = theta_t + eta_s sum_k w_k Delta_k
        return Aggregate(hp.server_lr * (weights @ batch.deltas), metrics)

    def state_dict(self) -> dict[str, Any]:
        return {"history": [list(h) for h in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [list(map(float, h)) for h in state.get("history", [])]
