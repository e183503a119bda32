"""The error of a checkpoint that cannot be resumed, naming its file and how to start afresh."""

from __future__ import annotations

from typing import Any

from fedcore.core.config import ConfigError

ORIGIN = "__origin__"  # added on load: where the state came from and how to start afresh


class CheckpointError(ConfigError):
    """A checkpoint that cannot be resumed: one line naming the file, what it lacks and what
    to do (bad input, exit code 2; raised before any round is played)."""


def unusable(state: dict[str, Any], problem: str) -> CheckpointError:
    """The error for ``state`` (as ``load`` returned it) with ``problem``, e.g. what it
    lacks, naming its file and the way to start afresh."""
    origin = state.get(ORIGIN, {"file": "the checkpoint", "remedy": "delete it and rerun"})
    return CheckpointError(
        f"checkpoint {origin['file']} cannot be resumed: {problem}; {origin['remedy']}"
    )
