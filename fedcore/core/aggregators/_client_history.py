"""Server-side memory of each client's last pseudo-gradient and last-seen round (FedFV, FedLF)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class ClientHistory:
    """``grads[c]``: client c's pseudo-gradient when last seen; ``last_round[c]``: that round."""

    def __init__(self) -> None:
        self.grads: dict[int, torch.Tensor] = {}
        self.last_round: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.last_round)

    def update(self, client_ids: torch.Tensor, grads: torch.Tensor, round: int) -> None:
        for cid, g in zip(client_ids.tolist(), grads, strict=True):
            self.grads[int(cid)] = g.detach().clone()
            self.last_round[int(cid)] = int(round)

    def select(self, keep: Callable[[int, int], bool], like: torch.Tensor) -> torch.Tensor:
        """Stack (rows in client-id order) the gradients of clients c with keep(c, last_round)."""
        rows = [self.grads[c].to(like) for c in sorted(self.grads) if keep(c, self.last_round[c])]
        return torch.stack(rows) if rows else like.new_zeros((0, like.shape[-1]))

    def seen_at(self, round: int, like: torch.Tensor) -> torch.Tensor:
        """``select`` the clients last seen in ``round``."""
        return self.select(lambda c, r: r == round, like)

    def state_dict(self) -> dict[str, Any]:
        ids = sorted(self.last_round)
        return {
            "client_ids": torch.tensor(ids, dtype=torch.long),
            "last_round": torch.tensor([self.last_round[c] for c in ids], dtype=torch.long),
            "grads": torch.stack([self.grads[c] for c in ids]) if ids else torch.zeros(0, 0),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ids = [int(c) for c in state["client_ids"].tolist()]
        rounds = [int(r) for r in state["last_round"].tolist()]
        self.grads = {c: state["grads"][i].clone() for i, c in enumerate(ids)}
        self.last_round = dict(zip(ids, rounds, strict=True))
