"""Central DP-FedAvg's server step (McMahan et al. 2018): each received delta clipped to L2
norm C, their sum plus N(0, (z C)^2 I), divided by the expected number of clients (a fixed
denominator, so that one client's weight does not depend on who else was sampled)."""

from __future__ import annotations

import torch

from fedcore.core.records.aggregate import UpdateBatch


def clipped_sum(deltas: torch.Tensor, clip: float) -> torch.Tensor:
    """sum_k delta_k min(1, C / ||delta_k||): norms in float64 (a huge delta's squares
    overflow float32), a zero delta left as it is."""
    if deltas.shape[0] == 0:
        return deltas.new_zeros(deltas.shape[1])
    norms = deltas.double().norm(dim=1)
    scale = torch.where(norms > clip, clip / norms, torch.ones_like(norms))
    return (deltas.double() * scale[:, None]).sum(0).to(deltas.dtype)


def noised_mean(
    deltas: torch.Tensor, clip: float, noise_multiplier: float, expected_clients: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """(sum_k clip_C(delta_k) + N(0, (z C)^2 I)) / expected_clients; the noise drawn on the CPU
    from ``generator`` (the same numbers on every device)."""
    total = clipped_sum(deltas, clip)
    noise = torch.randn(total.shape, generator=generator, dtype=total.dtype)
    return (total + noise_multiplier * clip * noise.to(total.device)) / expected_clients


def noised_unclipped_share(
    deltas: torch.Tensor, clip: float, count_std: float, expected_clients: float,
    generator: torch.Generator,
) -> float:
    """Adaptive clipping's estimate of the share of clients within the clip (Andrew et al. 2021):
    (sum_k (1[||delta_k|| <= C] - 1/2) + N(0, count_std^2)) / expected_clients + 1/2, the
    indicators centred so that one client moves the sum by at most 1/2."""
    norms = deltas.double().norm(dim=1) if deltas.shape[0] else deltas.new_zeros(0).double()
    centred = float(((norms <= clip).double() - 0.5).sum())
    noise = float(torch.randn((), generator=generator, dtype=torch.float64))
    return (centred + count_std * noise) / expected_clients + 0.5


def private_batch(batch: UpdateBatch, mean: torch.Tensor) -> UpdateBatch:
    """The batch a mean-of-deltas rule sees: one row, the noised mean, of weight 1 (the rule's
    weighted mean is then that row)."""
    return UpdateBatch(
        deltas=mean[None, :],
        num_samples=torch.ones(1, dtype=mean.dtype),
        layout=batch.layout,
        client_ids=torch.full((1,), -1, dtype=torch.long),
        round=batch.round,
    )
