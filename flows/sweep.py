"""A Prefect deployment's entry point (prefect.yaml): fedcore.flows.sweep.sweep."""

from fedcore.flows.sweep import sweep

__all__ = ["sweep"]
