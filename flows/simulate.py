"""A Prefect deployment's entry point (prefect.yaml): fedcore.flows.simulate.simulate."""

from fedcore.flows.simulate import simulate

__all__ = ["simulate"]
