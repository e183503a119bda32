"""A flow's graceful stop: SIGTERM (a terminal, Slurm, Kubernetes, a deployment's cancellation)
lets the tasks in flight finish their round, and the flow run ends Cancelled."""

from __future__ import annotations

from prefect.states import Cancelled, State

from fedcore import stopping


def hold_sigterm() -> None:
    """Called first in a flow: SIGTERM requests a stop (:mod:`fedcore.stopping`) instead of
    Prefect's crash of the flow run while its task threads keep training."""
    stopping.hold_sigterm()


def stopped_state(what: str) -> State:
    """The Cancelled state a stopped flow or task returns (``what``: e.g. ``sweep kill``)."""
    return Cancelled(message=f"{what} stopped by {stopping.signal_name()}")
