"""Prefect flows: thin wrappers that schedule fedcore simulations."""

from fedcore.env import configure_environment

configure_environment()
