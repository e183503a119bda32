"""Sweeps: a base experiment and a grid over any dotted keys, expanded into validated cells."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedcore.config import ConfigError, ExperimentConfig, build_config, read_yaml

SWEEP_KEYS = ("name", "base", "grid", "set", "studies")


@dataclass(frozen=True)
class Cell:
    """One grid point: the overrides that define it and its validated config."""

    overrides: dict[str, Any]
    config: ExperimentConfig

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.overrides.items())


@dataclass(frozen=True)
class SweepSpec:
    """A sweep's validated cells; ``tuning``: per method, the study its tuned rows come from
    (``craft_server_lr: 30 trials, seed 1000``)."""

    name: str
    cells: list[Cell]
    tuning: dict[str, str] = field(default_factory=dict)

    def tuning_text(self, method: str) -> str:
        """The study a tuned row of ``method`` comes from, or ``by hand``."""
        return self.tuning.get(method, "by hand")

    @property
    def sweep_hash(self) -> str:
        blob = json.dumps(sorted(c.config.config_hash() for c in self.cells))
        return hashlib.sha256(f"{self.name}:{blob}".encode()).hexdigest()[:16]


def read_base(base: str | None, owner: Path) -> dict[str, Any]:
    """The base experiment YAML named by a sweep or study file (relative to that file)."""
    if not base:
        return {}
    base_path = Path(base)
    if not base_path.is_absolute():
        base_path = owner.parent / base_path
    return read_yaml(base_path)


def load_sweep(path: str | Path, overrides: dict[str, Any] | None = None) -> SweepSpec:
    """Read a sweep YAML ({name, base, grid, set}) and validate every cell before any compute.

    ``grid`` maps dotted keys to value lists (their product is run), or is a list of such
    mappings (the union of their products).

    ``overrides`` apply to every cell (after the grid), e.g. ``{"rounds": 2}``.
    """
    path = Path(path)
    spec = read_yaml(path)
    unknown = set(spec) - set(SWEEP_KEYS)
    if unknown:
        raise ConfigError(
            f"sweep: unknown key {sorted(unknown)[0]!r}; allowed: {', '.join(SWEEP_KEYS)}"
        )
    base = read_base(spec.get("base"), path)
    grid = spec.get("grid") or {}
    grids = grid if isinstance(grid, list) else [grid]
    for g in grids:
        if not isinstance(g, dict) or any(not isinstance(v, list) or not v for v in g.values()):
            raise ConfigError("sweep.grid: expected a mapping of KEY: [non-empty list of values], "
                              "or a list of such mappings")
    fixed = {**(spec.get("set") or {}), **(overrides or {})}
    points = [dict(zip(g.keys(), values, strict=True))
              for g in grids for values in itertools.product(*g.values())]
    cells = []
    for point in points:
        try:
            cfg = build_config(base, {**point, **fixed})
        except ConfigError as exc:
            label = " ".join(f"{k}={v}" for k, v in point.items())
            raise ConfigError(f"sweep cell [{label}]: {exc}") from None
        cells.append(Cell(point, cfg))
    return SweepSpec(spec.get("name") or path.stem, cells,
                     tuning_studies(spec.get("studies"), [c.config.seed for c in cells], "sweep"))


def tuning_studies(raw: Any, seeds: Iterable[int], where: str) -> dict[str, str]:
    """``studies: {method: study}`` of a sweep or claims file: the shipped study each method's
    tuned rows come from, refused when the study tuned on a seed that the file evaluates on.

    Returns per method ``<study>: <budget>, seed(s) <...>`` for the report's ``tuning`` column.
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise ConfigError(f"{where}.studies: expected a mapping of METHOD: study name")
    from fedcore.tuning.spec import load_study

    evaluated = set(seeds)
    out = {}
    for method, name in raw.items():
        try:
            study = load_study(name)
        except ConfigError as exc:
            raise ConfigError(f"{where}.studies.{method}: {exc}") from None
        shared = sorted(evaluated & set(study.seeds))
        if shared:
            raise ConfigError(f"{where}.studies.{method}: study {name!r} tuned on seed "
                              f"{shared[0]}, which this file evaluates on; tuning seeds must be "
                              "disjoint from evaluation seeds")
        seeds_text = ", ".join(map(str, study.seeds))
        out[str(method)] = f"{study.name}: {study.budget}, seed {seeds_text}"
    return out


def check_resources(configs: Iterable[ExperimentConfig], devices: bool = True) -> None:
    """Before Prefect starts: every config's dataset files are on disk (or will be downloaded)
    and, with ``devices``, its device exists on this machine; one-line errors otherwise."""
    from fedcore.data.datasets import check_files_present
    from fedcore.devices import check_device_present

    seen: set[tuple[str, str, bool]] = set()
    for cfg in configs:
        ds = cfg.dataset
        if (ds.name, ds.root, ds.download) not in seen:
            seen.add((ds.name, ds.root, ds.download))
            check_files_present(ds.name, ds.root, ds.download)
        if devices:
            check_device_present(cfg.device)
