"""Sweeps: a base experiment and a grid over any dotted keys, expanded into validated cells."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedcore.config import ConfigError, ExperimentConfig, read_yaml
from fedcore.configure import build_config
from fedcore.pipeline.sweep_file import check_grid_keys, check_shape, sweep_name


@dataclass(frozen=True)
class Cell:
    """One grid point: the overrides that define it and its validated config."""

    overrides: dict[str, Any]
    config: ExperimentConfig

    @property
    def label(self) -> str:
        """``key=value ...`` as on the command line (a mapping: ``{rule: clipavg, clip: 0.5}``)."""
        return point_label(self.overrides)


def label_value(value: Any) -> str:
    """A grid value as an override would spell it: mappings and lists in YAML flow style."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {label_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(label_value(v) for v in value) + "]"
    return str(value)


def point_label(point: dict[str, Any]) -> str:
    """``key=value ...`` of a grid point (see :func:`label_value`)."""
    return " ".join(f"{k}={label_value(v)}" for k, v in point.items())


@dataclass(frozen=True)
class SweepSpec:
    """A sweep's validated cells; ``tuning``: per method, the study its tuned rows come from
    (``craft_server_lr: 30 trials, seed 1000``); ``duplicates``: the grid points left out because
    an earlier cell has the same config (``label`` -> the cell's label that runs it)."""

    name: str
    cells: list[Cell]
    tuning: dict[str, str] = field(default_factory=dict)
    duplicates: dict[str, str] = field(default_factory=dict)

    def duplicates_note(self) -> str | None:
        """One line on the grid points run once as another cell (None if none)."""
        if not self.duplicates:
            return None
        pairs = "; ".join(f"[{a}] = [{b}]" for a, b in self.duplicates.items())
        return (f"{len(self.duplicates)} grid point(s) have the config of an earlier cell and "
                f"run once: {pairs}")[:2000]

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
    grids = check_shape(spec, path)
    name = sweep_name(spec.get("name"), path)
    check_grid_keys(grids, spec.get("set") or {})
    base = read_base(spec.get("base"), path)
    fixed = {**(spec.get("set") or {}), **(overrides or {})}
    points = [dict(zip(g.keys(), values, strict=True))
              for g in grids for values in itertools.product(*g.values())]
    cells: dict[str, Cell] = {}
    duplicates: dict[str, str] = {}
    for point in points:
        try:
            cfg = build_config(base, {**point, **fixed})
        except ConfigError as exc:
            raise ConfigError(f"sweep cell [{point_label(point)}]: {exc}") from None
        cell = Cell(point, cfg)
        first = cells.setdefault(cfg.config_hash(), cell)
        if first is not cell:  # e.g. alpha 0.1 and 1e-1: one config, run once
            duplicates[cell.label] = first.label
    return SweepSpec(name, list(cells.values()),
                     tuning_studies(spec.get("studies"), [c.config.seed for c in cells.values()],
                                    "sweep"), duplicates)


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
    from fedcore.device_check import check_device_present

    seen: set[tuple[str, str, bool]] = set()
    for cfg in configs:
        ds = cfg.dataset
        if (ds.name, ds.root, ds.download) not in seen:
            seen.add((ds.name, ds.root, ds.download))
            check_files_present(ds.name, ds.root, ds.download)
        if devices:
            check_device_present(cfg.device)
