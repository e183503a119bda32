"""Server-side averaging of BatchNorm running statistics (buffers, not part of theta)."""

from __future__ import annotations

import torch

VAR_FLOOR = 1e-3  # floor of a moment-matched running_var (SA-PEF's repo)


def average_bn_statistics(
    buffers: list[dict[str, torch.Tensor]], weights: torch.Tensor, moment_match: bool = False
) -> dict[str, torch.Tensor]:
    """Average each client's floating buffers with ``weights`` (summing to one).

    Default: every buffer, ``running_var`` included, is the weighted mean of the clients'
    (docs/explanation/round-protocol.md). ``moment_match`` (the error-feedback
    methods, docs/methods/sapef.md): a ``running_var`` next to a ``running_mean`` becomes
    max(sum w_k (var_k + mu_k^2) - mu_bar^2, 1e-3), the variance of the mixture.
    """
    out = {}
    for name in buffers[0]:
        stacked = torch.stack([b[name] for b in buffers])
        mean_name = name.removesuffix("running_var") + "running_mean"
        if moment_match and name.endswith("running_var") and mean_name in buffers[0]:
            mus = torch.stack([b[mean_name] for b in buffers])
            second = torch.tensordot(weights, stacked + mus.square(), dims=1)
            mu_bar = torch.tensordot(weights, mus, dims=1)
            out[name] = (second - mu_bar.square()).clamp_min(VAR_FLOOR)
        else:
            out[name] = torch.tensordot(weights, stacked, dims=1)
    return out
