"""Packages of the wheel; the metadata is in pyproject.toml.

The top-level ``configs/`` folder (methods, experiments, studies, sweeps, claims) ships inside
the package as ``fedcore/_configs``, so an installed fedcore finds its own defaults without a
checkout (``fedcore.config.config_dir``). It stays at the top level of the repository.
"""

from setuptools import find_namespace_packages, find_packages, setup

CONFIGS = "fedcore._configs"
config_packages = [CONFIGS] + [f"{CONFIGS}.{p}" for p in find_namespace_packages(where="configs")]

setup(
    packages=find_packages(include=["fedcore*", "flows*"]) + config_packages,
    package_dir={CONFIGS: "configs"},
    package_data={
        "fedcore.data": ["digits.npz"], **dict.fromkeys(config_packages, ["*.yaml", "*.md"])
    },
)
