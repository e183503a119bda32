"""A Prefect deployment's entry point (prefect.yaml): fedcore.flows.claims.claims."""

from fedcore.flows.claims import claims

__all__ = ["claims"]
