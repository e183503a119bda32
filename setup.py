"""Packages of the wheel; the metadata is in pyproject.toml.

The top-level ``configs/`` folder (methods, experiments, studies, sweeps, claims) ships inside
the package as ``fedcore/_configs``, so an installed fedcore finds its own defaults without a
checkout (``fedcore.core.config.config_dir``). It stays at the top level of the repository.

Files that ``fedcore tune --best`` wrote into ``configs/`` are a local result, not part of
fedcore: in a git checkout only the files git tracks ship; elsewhere (an unpacked sdist, a
copy) every file but those carrying the tune-best mark.
"""

import subprocess
from pathlib import Path

from setuptools import find_namespace_packages, find_packages, setup

HERE = Path(__file__).resolve().parent
CONFIGS = "fedcore._configs"
TUNE_BEST_MARK = "Written by `fedcore tune --best`"  # fedcore.specs.hparams.TUNE_BEST_MARK
config_packages = [CONFIGS] + [f"{CONFIGS}.{p}" for p in find_namespace_packages(where="configs")]


def tracked_configs():
    """The files under configs/ that git tracks, or None outside a git checkout of this folder."""
    try:
        top = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=30)
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != HERE:
            return None
        listed = subprocess.run(["git", "-C", str(HERE), "ls-files", "-z", "configs"],
                                capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return {HERE / name for name in listed.stdout.split("\0") if name}


def config_data():
    """package_data of the config packages: their YAML and Markdown files that ship."""
    tracked = tracked_configs()
    data = {}
    for package in config_packages:
        folder = HERE / "configs" / Path(*package.split(".")[2:])
        files = sorted(p for pattern in ("*.yaml", "*.md") for p in folder.glob(pattern))
        keep = [p.name for p in files
                if (p in tracked if tracked is not None else TUNE_BEST_MARK not in p.read_text())]
        data[package] = keep
    return data


setup(
    packages=find_packages(include=["fedcore*"]) + config_packages,
    package_dir={CONFIGS: "configs"},
    package_data={"fedcore.core.data": ["digits.npz"], **config_data()},
)
