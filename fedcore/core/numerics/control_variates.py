"""Control-variate arithmetic shared by the SCAFFOLD client and server
(docs/methods/scaffold.md): a leaf, so that neither component package imports the other."""

from __future__ import annotations

import torch


def reconstructed_delta_c(
    deltas: torch.Tensor, c: torch.Tensor, num_steps: torch.Tensor, lr: torch.Tensor
) -> torch.Tensor:
    """Option II's Delta c_k = -c - delta_k / (K_k lr) from what the server knows (0 if K = 0)."""
    scale = (num_steps.to(deltas) * lr.to(deltas))[:, None]
    out = -c - deltas / scale.clamp_min(torch.finfo(deltas.dtype).tiny)
    return torch.where(scale > 0, out, torch.zeros_like(out))
