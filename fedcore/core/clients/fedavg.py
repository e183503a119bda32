"""FedAvg client: E epochs of local SGD on cross-entropy (McMahan et al. 2017)."""

from __future__ import annotations

from fedcore.core.clients.base import ClientAlgorithm, register


@register("fedavg")
class FedAvgClient(ClientAlgorithm):
    vectorisable = True
