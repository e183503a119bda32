"""A Prefect deployment's entry point (prefect.yaml): fedcore.flows.report.report."""

from fedcore.flows.report import report

__all__ = ["report"]
