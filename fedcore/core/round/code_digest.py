"""The code digest: one short hash of the source that determines a run's numbers.

It covers every ``.py`` file of the ``fedcore`` package, its Prefect flows included (relative
path and bytes, in sorted order) plus the torch and numpy versions. The files are
found from ``fedcore.__file__``, so an editable checkout, a clean clone of the same commit and
an installed wheel give the same digest. Tests, docs, configs and README are not part of it (a
config's effect is in the run's config hash). Runs carry it as the tag ``fedcore.code_digest``
and checkpoints as ``code_digest``: a sweep reuses, a report tables and a resume continues only
work made by the same code (docs/explanation/provenance.md).

A run whose rule, client objective or compressor comes from a package outside fedcore
(``fedcore.core.compose.plugins``) has the digest of both: ``of_config`` folds in each such
package's files digest, so editing the user's code reruns the sweep cells that use it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import fedcore

if TYPE_CHECKING:
    from fedcore.core.config import ExperimentConfig

PACKAGES = ("fedcore",)
LIBRARIES = ("torch", "numpy")
LENGTH = 12  # hex characters kept


def source_files(root: Path) -> list[Path]:
    """The ``.py`` files of ``PACKAGES`` under ``root`` (the folder holding them), sorted by
    their path relative to ``root``."""
    found = []
    for package in PACKAGES:
        folder = root / package
        if folder.is_dir():
            found += [p for p in folder.rglob("*.py") if "__pycache__" not in p.parts]
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def library_versions() -> dict[str, str]:
    """``__version__`` of ``LIBRARIES`` as imported (torch's includes its build, e.g.
    ``+cu130``); every run imports both anyway."""
    return {name: importlib.import_module(name).__version__ for name in LIBRARIES}


def digest_of(root: Path, versions: dict[str, str]) -> str:
    """sha256 (first ``LENGTH`` hex characters) of the sources under ``root`` and
    ``versions``; each file enters as its relative path, its length and its bytes."""
    h = hashlib.sha256()
    for path in source_files(root):
        data = path.read_bytes()
        name = path.relative_to(root).as_posix().encode()
        h.update(b"%d:%s:%d:" % (len(name), name, len(data)))
        h.update(data)
    for library, version in sorted(versions.items()):
        h.update(f"{library}=={version};".encode())
    return h.hexdigest()[:LENGTH]


@functools.lru_cache(maxsize=1)
def current() -> str:
    """The digest of the code this process runs (computed once per process)."""
    return digest_of(Path(fedcore.__file__).resolve().parent.parent, library_versions())


def of_method(method: Mapping[str, Any]) -> str:
    """The digest of the code a run of this (resolved) method runs: ``current`` when all
    its components are fedcore's own, else that combined with the files digest of every
    package outside fedcore they come from."""
    from fedcore.core.compose.plugins import sources

    packages = sources(method)
    if not packages:
        return current()
    h = hashlib.sha256(current().encode())
    for source in packages:
        h.update(f";{source.package}:{source.files_digest}".encode())
    return h.hexdigest()[:LENGTH]


def of_config(cfg: ExperimentConfig) -> str:
    """``of_method`` of a validated config's method."""
    return of_method(cfg.resolved()["method"])
