"""Prefect flows: thin wrappers that schedule fedcore simulations."""

from fedcore.pipeline.env import configure_environment

configure_environment()
