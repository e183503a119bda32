"""Per-client state that outlives a round (residuals, personal models, control variates)."""

from __future__ import annotations

from typing import Any


class ClientStore:
    """One state dict per client, kept also for clients that are not sampled this round."""

    def __init__(self) -> None:
        self._states: dict[int, dict[str, Any]] = {}

    def __getitem__(self, client_id: int) -> dict[str, Any]:
        return self._states.setdefault(client_id, {})

    def state_dict(self) -> dict[str, Any]:
        return {str(k): v for k, v in self._states.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._states = {int(k): dict(v) for k, v in state.items()}
