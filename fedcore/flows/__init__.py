"""Prefect flows: thin wrappers that schedule fedcore simulations."""

from fedcore.runtime_env.env import configure_environment

configure_environment()
