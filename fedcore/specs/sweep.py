"""Sweeps: a base experiment and a grid over any dotted keys, expanded into validated cells."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedcore.core.compose.configure import build_config
from fedcore.core.config import ConfigError, ExperimentConfig, limits, read_yaml
from fedcore.specs.families import Family, SeedPlan, parse_families, seed_plan
from fedcore.specs.protocols import (
    GRID_KEY,
    Protocol,
    check_against_recipe,
    labelled,
    parse_protocols,
)
from fedcore.specs.rows import row_label
from fedcore.specs.sweep_file import check_grid_keys, check_shape, read_base, sweep_name


@dataclass(frozen=True)
class Cell:
    """One grid point: the overrides that define it, its validated config and its report row."""

    overrides: dict[str, Any]
    config: ExperimentConfig
    row: str = ""

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
    """``key=value ...`` of a grid point (see ``label_value``)."""
    return " ".join(f"{k}={label_value(v)}" for k, v in point.items())


@dataclass(frozen=True)
class SweepSpec:
    """A sweep's validated cells; ``tuning``: per method, the study its tuned rows come from
    (``craft_server_lr: 30 trials, seed 1000``); ``duplicates``: the grid points left out because
    an earlier cell has the same config (``label`` -> the cell's label that runs it);
    ``families``: the comparisons it decides (``fedcore.specs.families``); ``plan``: its
    seeds and looks (None: the seeds its grid lists, one look); ``screening``: the name of the
    sweep a confirmation confirms (``confirms:``), whose recorded runs it must not reuse."""

    name: str
    cells: list[Cell]
    tuning: dict[str, str] = field(default_factory=dict)
    duplicates: dict[str, str] = field(default_factory=dict)
    families: tuple[Family, ...] = ()
    plan: SeedPlan | None = None
    screening: str | None = None  # a confirmation's screening sweep (its name in the store)
    protocols: dict[str, Protocol] = field(default_factory=dict)

    @property
    def seed_plan(self) -> SeedPlan:
        """The declared plan, else one look over every seed the cells have."""
        if self.plan is not None:
            return self.plan
        seeds = tuple(sorted({c.config.seed for c in self.cells}))
        return SeedPlan(seeds, (len(seeds),))

    def cells_for_look(self, look: int, rows: set[str] | None = None) -> list[Cell]:
        """The cells that look ``look`` (0-based) adds: its new seeds, for ``rows`` (None: every
        row) at the alphas their families judge them; a row at an alpha no family judges (an
        exploratory row) runs only the first look's seeds."""
        plan = self.seed_plan
        new = set(plan.at(look)) - (set(plan.at(look - 1)) if look else set())
        return [c for c in self.cells if c.config.seed in new
                and (look == 0 or rows is None or (c.row in rows and self.judged(c)))]

    def planned(self, cell: Cell) -> bool:
        """Whether some look may run ``cell``: the first look's seeds run every row; later
        looks' seeds only rows a family judges at that alpha (every row without families)."""
        return (cell.config.seed in self.seed_plan.at(0) or not self.families
                or self.judged(cell))

    def judged(self, cell: Cell) -> bool:
        """Whether a declared family compares ``cell``'s row at the cell's alpha."""
        return any(cell.row in f.rows and f.alpha in (None, cell.config.dataset.alpha)
                   for f in self.families)

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


def load_sweep(path: str | Path, overrides: dict[str, Any] | None = None,
               confirms: bool = True) -> SweepSpec:
    """Read a sweep YAML ({name, base, grid, set}) and validate every cell before any compute.

    ``grid`` maps dotted keys to value lists (their product is run), or is a list of such
    mappings (the union of their products).

    ``overrides`` apply to every cell (after the grid), e.g. ``{"rounds": 2}``. ``confirms``:
    False reads a screening sweep without following its own ``confirms:`` (no chain or cycle
    of files is followed).
    """
    path = Path(path)
    spec = read_yaml(path)
    grids = check_shape(spec, path)
    name = sweep_name(spec.get("name"), path)
    check_grid_keys(grids, spec.get("set") or {})
    plan = None
    if spec.get("seeds") is not None:
        plan = seed_plan(spec["seeds"], "sweep")
        if any("seed" in g for g in grids) or "seed" in (spec.get("set") or {}):
            raise ConfigError("sweep.seeds: the seeds are planned here, so no grid or set may "
                              "list `seed` as well")
    base = read_base(spec.get("base"), path)
    protocols = parse_protocols(spec.get("protocols"), path)
    fixed = dict(spec.get("set") or {})
    size = sum(math.prod(len(v) for v in g.values()) for g in grids)
    limits.check_count("sweep.grid (cells: the product of its value lists, times the planned "
                       "seeds)", size * (len(plan.seeds) if plan is not None else 1),
                       limits.CELLS)
    points = [dict(zip(g.keys(), values, strict=True))
              for g in grids for values in itertools.product(*g.values())]
    if plan is not None:
        points = [{**p, "seed": s} for p in points for s in plan.seeds]
    studies = spec.get("studies") or {}
    cells: dict[str, Cell] = {}
    duplicates: dict[str, str] = {}
    for point in points:
        proto = point.get(GRID_KEY)
        if proto is not None and proto not in protocols:
            raise ConfigError(f"sweep.grid.{GRID_KEY}: unknown protocol {limits.shown(proto)}; "
                              f"allowed: {', '.join(protocols) or 'none (no protocols:)'}")
        own = {k: v for k, v in point.items() if k != GRID_KEY}
        recipe = protocols[proto].values if proto is not None else {}
        try:
            cfg = build_config(base, {**fixed, **recipe, **own, **(overrides or {})})
            if proto is not None:
                as_filed = build_config(base, {**fixed, **recipe, **own}) if overrides else cfg
                check_against_recipe(protocols[proto], as_filed, own, "recipe check")
        except ConfigError as exc:
            raise ConfigError(f"sweep cell [{point_label(point)}]: {exc}") from None
        row = labelled(row_label(own, cfg.method.name,
                                 studies if isinstance(studies, dict) else {}), proto)
        cell = Cell(point, cfg, row)
        first = cells.setdefault(cfg.config_hash(), cell)
        if first is not cell:  # e.g. alpha 0.1 and 1e-1: one config, run once
            duplicates[cell.label] = first.label
    families = parse_families(spec.get("families"), "sweep", protocols)
    check_rows(list(cells.values()), families, "sweep")
    check_tuned_alike(list(cells.values()), families, studies, "sweep")
    screening = None
    if spec.get("confirms") is not None and confirms:
        screening = check_confirmation(spec["confirms"], path,
                                       {c.config.seed for c in cells.values()}, families)
    return SweepSpec(name, list(cells.values()),
                     tuning_studies(spec.get("studies"), [c.config.seed for c in cells.values()],
                                    "sweep"), duplicates, families, plan, screening, protocols)


def check_confirmation(screening: Any, owner: Path, seeds: set[int],
                       families: tuple[Family, ...]) -> str:
    """A confirmation (``confirms: <screening sweep file>``) tests chosen comparisons on fresh
    seeds: refused unless it declares families, names another sweep file, and none of its seeds
    is one the screening sweep's file lists, so that choosing rows by looking at the screening
    cannot bias its tests. Returns the screening's name: the seeds its recorded runs used are
    checked against the store before the sweep runs
    (``fedcore.tracking.confirmation.check_screening_runs``), whatever its file says now."""
    if not isinstance(screening, str):
        raise ConfigError("sweep.confirms: expected the path of the screening sweep file")
    other = Path(screening) if Path(screening).is_absolute() else owner.parent / screening
    shown_path = limits.shown(str(other))
    if not other.is_file():
        raise ConfigError(f"sweep.confirms: no sweep file {shown_path}")
    if other.resolve() == owner.resolve():
        raise ConfigError(f"sweep.confirms: {shown_path} is this sweep file itself; a "
                          "confirmation names the screening sweep it confirms")
    if not families:
        raise ConfigError("sweep.confirms: a confirmation must declare the families it tests")
    try:
        screen = load_sweep(other, confirms=False)
    except ConfigError as exc:
        raise ConfigError(f"sweep.confirms: {exc}") from None
    shared = sorted(seeds & {c.config.seed for c in screen.cells})
    if shared:
        raise ConfigError(f"sweep.confirms: seed {shared[0]} was run by the screening sweep "
                          f"{shown_path}; a confirmation needs fresh seeds (disjoint from "
                          "the screening's), e.g. seeds: {looks: [...], start: 100}")
    return screen.name


def check_rows(cells: list[Cell], families: tuple[Family, ...], where: str) -> None:
    """Every family row is a row of the file, and no two cells of one row, setting and seed differ
    in anything else (their label would hide the difference); one-line errors."""
    seen: dict[tuple[Any, ...], str] = {}
    for c in cells:
        key = (c.row, c.config.dataset.name, c.config.dataset.alpha, c.config.seed)
        other = seen.setdefault(key, c.label)
        if other != c.label:
            raise ConfigError(f"{where}: cells [{other}] and [{c.label}] are both row {c.row!r} "
                              "at one dataset, alpha and seed; set the value that differs in "
                              "the grid (it then names the row) or run them as two sweeps")
    rows = list(dict.fromkeys(c.row for c in cells))
    for i, f in enumerate(families):
        for label in f.rows:
            if label not in rows:
                raise ConfigError(f"{where}.families[{i}] ({f.name}): no row {label!r}; rows: "
                                  f"{', '.join(rows)}"[:1500])


def check_tuned_alike(cells: list[Cell], families: tuple[Family, ...], studies: Any,
                      where: str) -> None:
    """The families' tuned rows come from studies that searched alike, on validation
    (``fedcore.specs.tuned_alike``)."""
    if not families or not isinstance(studies, dict) or not studies:
        return
    from fedcore.specs.study import load_study
    from fedcore.specs.tuned_alike import check_families

    specs = {}
    for method, name in studies.items():
        try:
            specs[str(method)] = load_study(str(name))
        except ConfigError as exc:
            raise ConfigError(f"{where}.studies.{method}: {exc}") from None
    check_families(families, {c.row: c.config.method.name for c in cells}, specs, where)


def tuning_studies(raw: Any, seeds: Iterable[int], where: str) -> dict[str, str]:
    """``studies: {method: study}`` of a sweep or claims file: the shipped study each method's
    tuned rows come from, refused when the study tuned on a seed that the file evaluates on.

    Returns per method ``<study>: <budget>, seed(s) <...>`` for the report's ``tuning`` column.
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise ConfigError(f"{where}.studies: expected a mapping of METHOD: study name")
    from fedcore.specs.study import load_study

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
    """Before Prefect starts: every config's dataset files are on disk (or will be downloaded),
    its checkpoint key file (if any) is trusted and, with ``devices``, its device exists on this
    machine; one-line errors otherwise."""
    from fedcore.core.data.datasets import check_files_present
    from fedcore.core.round import checkpoint
    from fedcore.core.runtime.device_check import check_device_present

    seen: set[tuple[str, str, bool]] = set()
    for cfg in configs:
        if cfg.checkpoint_every:
            checkpoint.check_key(checkpoint.run_folder(cfg).parent)
        ds = cfg.dataset
        if (ds.name, ds.root, ds.download) not in seen:
            seen.add((ds.name, ds.root, ds.download))
            check_files_present(ds.name, ds.root, ds.download)
        if devices:
            check_device_present(cfg.device)
