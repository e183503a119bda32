"""A Prefect deployment's entry point (prefect.yaml): fedcore.flows.tune.tune."""

from fedcore.flows.tune import tune

__all__ = ["tune"]
