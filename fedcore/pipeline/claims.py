"""Seed-paper claims checked on small offline experiments (``fedcore claims``).

A claims file (``configs/claims.yaml``) fixes, before anything runs, the base experiment, the
seeds and, per claim, the paper's local recipe, the method's run, the baseline's run, the metric
and the test. Running it simulates every distinct experiment once per seed and judges each claim
by a paired t-test over seeds (:mod:`fedcore.pipeline.stats`, Holm-adjusted over the file's claims):
``holds`` when the test finds the claimed direction, ``contradicted`` when it finds the opposite,
``inconclusive`` otherwise (with the seeds a test would need). A check that holds by construction
is an ``implementation check`` and is judged ``passes``/``fails``, apart from the claims.
Everything here is plain computation on :class:`fedcore.simulation.Result` objects; MLflow lives
in ``fedcore.tracking.claims``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedcore.config import ConfigError, ExperimentConfig, config_dir, read_yaml
from fedcore.configure import build_config
from fedcore.pipeline.hparams import regime
from fedcore.pipeline.stats import Comparison, compare, holm, mean_interval
from fedcore.pipeline.sweep import read_base, tuning_studies
from fedcore.simulation import Result

TESTS = ("zero_every_round", "at_least", "lower", "noisy_below_clean")
REDUCES = ("final", "mean", "max")
KINDS = ("claim", "robustness check", "implementation check")
CLAIM_KEYS = ("id", "paper", "claim", "kind", "recipe", "test", "run", "baseline", "metric",
              "reduce")
FILE_KEYS = ("name", "base", "set", "seeds", "studies", "claims")
VERDICTS = ("holds", "contradicted", "inconclusive", "passes", "fails")


@dataclass(frozen=True)
class Claim:
    """One claim: ``test`` compares ``metric`` (reduced over rounds) of ``run`` to ``baseline``."""

    id: str
    paper: str
    claim: str
    test: str
    run: dict[str, Any]
    baseline: dict[str, Any] | None
    metric: str
    reduce: str
    kind: str = "claim"
    recipe: str | None = None  # configs/experiments/<recipe>.yaml: its local block, both runs


@dataclass(frozen=True)
class ClaimsSpec:
    """A validated claims file. A run's keys, from weakest: ``base``, ``fixed`` (the file's
    ``set``), the claim's recipe (its local optimiser), the claim's run, ``overrides`` (the
    command line), the seed."""

    name: str
    base: dict[str, Any]
    fixed: dict[str, Any]
    seeds: tuple[int, ...]
    claims: tuple[Claim, ...]
    overrides: dict[str, Any] = field(default_factory=dict)
    tuning: dict[str, str] = field(default_factory=dict)

    def config(self, run: dict[str, Any], seed: int,
               recipe: str | None = None) -> ExperimentConfig:
        local = recipe_local(recipe) if recipe else {}
        return build_config(self.base, {**self.fixed, **local, **run, **self.overrides,
                                        "seed": seed})

    def configs(self, claim: Claim, seed: int) -> tuple[ExperimentConfig, ExperimentConfig | None]:
        """The claim's run and baseline (None) at ``seed``."""
        base = claim.baseline
        return (self.config(claim.run, seed, claim.recipe),
                None if base is None else self.config(base, seed, claim.recipe))


def recipe_local(name: str) -> dict[str, Any]:
    """The local block of ``configs/experiments/<name>.yaml`` as dotted overrides."""
    path = config_dir() / "experiments" / f"{name}.yaml"
    if not path.is_file():
        have = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        raise ConfigError(f"recipe: unknown {name!r}; allowed: {have}")
    local = read_yaml(path).get("local") or {}
    return {f"local.{k}": v for k, v in local.items()}


@dataclass(frozen=True)
class ClaimRow:
    """One line of the claims table."""

    id: str
    claim: str
    setting: str
    measured: str
    verdict: str
    values: tuple[float, ...]
    baseline_values: tuple[float, ...] | None
    kind: str = "claim"
    regime: str = ""
    comparison: Comparison | None = None

    @property
    def holds(self) -> bool:
        """The paired test found the claimed direction (or an implementation check passed)."""
        return self.verdict in ("holds", "passes")


def load_claims(path: str | Path, overrides: dict[str, Any] | None = None) -> ClaimsSpec:
    """Read and validate a claims file; ``overrides`` set ``seeds`` or any experiment key.

    Every claim's runs are built for every seed here, before any compute.
    """
    path = Path(path)
    raw = read_yaml(path)
    unknown = sorted(set(raw) - set(FILE_KEYS))
    if unknown:
        raise ConfigError(f"claims: unknown key {unknown[0]!r}; allowed: {', '.join(FILE_KEYS)}")
    overrides = dict(overrides or {})
    seeds = overrides.pop("seeds", raw.get("seeds", [0, 1, 2]))
    seeds = [seeds] if isinstance(seeds, int) else seeds
    if not isinstance(seeds, list) or not seeds or not all(
        isinstance(s, int) and s >= 0 for s in seeds
    ):
        raise ConfigError(f"claims.seeds: expected a non-empty list of seeds >= 0 (got {seeds!r})")
    spec = ClaimsSpec(
        name=str(raw.get("name") or path.stem),
        base=read_base(raw.get("base"), path),
        fixed=dict(raw.get("set") or {}),
        seeds=tuple(seeds),
        claims=tuple(_claim(i, c) for i, c in enumerate(raw.get("claims") or [])),
        overrides=overrides,
        tuning=tuning_studies(raw.get("studies"), seeds, "claims"),
    )
    if not spec.claims:
        raise ConfigError("claims.claims: expected a non-empty list of claims")
    ids = [c.id for c in spec.claims]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"claims.claims: duplicate id in {ids}")
    for c in spec.claims:
        try:
            for seed in spec.seeds:
                spec.configs(c, seed)
        except ConfigError as exc:
            raise ConfigError(f"claims.{c.id}: {exc}") from None
    return spec


def _claim(index: int, raw: Any) -> Claim:
    where = f"claims.claims[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping with keys {', '.join(CLAIM_KEYS)}")
    unknown = sorted(set(raw) - set(CLAIM_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(CLAIM_KEYS)}")
    for key in ("id", "paper", "claim", "test", "run", "metric"):
        if key not in raw:
            raise ConfigError(f"{where}.{key}: missing")
    if raw["test"] not in TESTS:
        raise ConfigError(f"{where}.test: unknown {raw['test']!r}; allowed: {', '.join(TESTS)}")
    reduce = raw.get("reduce", "final")
    if reduce not in REDUCES:
        raise ConfigError(f"{where}.reduce: unknown {reduce!r}; allowed: {', '.join(REDUCES)}")
    kind = raw.get("kind", "claim")
    if kind not in KINDS:
        raise ConfigError(f"{where}.kind: unknown {kind!r}; allowed: {', '.join(KINDS)}")
    if (raw["test"] == "zero_every_round") != (kind == "implementation check"):
        raise ConfigError(f"{where}.kind: test zero_every_round holds by construction, so it is "
                          "an implementation check, and only it is")
    recipe = raw.get("recipe")
    if recipe is not None:
        if not isinstance(recipe, str):
            raise ConfigError(f"{where}.recipe: expected the name of a configs/experiments file")
        try:
            recipe_local(recipe)
        except ConfigError as exc:
            raise ConfigError(f"{where}.{exc}") from None
    compares = raw["test"] in ("at_least", "lower")
    if compares != ("baseline" in raw):
        need = "needs" if compares else "takes no"
        raise ConfigError(f"{where}.baseline: test {raw['test']} {need} a baseline run")
    for key in ("run", "baseline"):
        if key in raw and not isinstance(raw[key], dict):
            raise ConfigError(f"{where}.{key}: expected a mapping of KEY: value")
    return Claim(str(raw["id"]), str(raw["paper"]), str(raw["claim"]), raw["test"],
                 dict(raw["run"]), raw.get("baseline"), str(raw["metric"]), reduce, kind, recipe)


def measure(result: Result, metric: str, reduce: str, rounds: int) -> float:
    """``metric`` of one run: the summary value or the last/mean/max over rounds that have it.

    ``rounds_to_target`` of a run that never reached the target counts as ``rounds + 1``.
    """
    if metric == "rounds_to_target":
        return float(result.summary.get(metric, rounds + 1))
    if reduce == "final" and metric in result.summary:
        return float(result.summary[metric])
    values = [h[metric] for h in result.history if metric in h]
    if not values:
        raise KeyError(f"metric {metric!r} was not recorded by {result.config['method']['name']}")
    return float({"final": values[-1], "mean": np.mean(values), "max": np.max(values)}[reduce])


def noisy_and_clean(result: Result, stat: str) -> tuple[float, float]:
    """Mean per-client ``stat`` of noisy and of clean clients over every evaluated round in
    which they were aggregated."""
    noisy, clean = [], []
    for table in result.client_tables:
        values = table.extra[stat]
        seen = ~np.isnan(values)
        flags = table.extra["noisy"].astype(bool)
        noisy.extend(values[seen & flags])
        clean.extend(values[seen & ~flags])
    return (float(np.mean(noisy)) if noisy else math.nan,
            float(np.mean(clean)) if clean else math.nan)


def _stats(values: list[float] | tuple[float, ...]) -> str:
    return mean_interval(values).text(".4g")


def judge(test: str, values: list[float], baseline: list[float] | None) -> Comparison | None:
    """The paired test of a claim on the seeds' values (unadjusted; None for
    ``zero_every_round``, which is checked exactly).

    at_least and lower: ``values`` against ``baseline`` (higher resp. lower is the claimed
    direction); noisy_below_clean: ``values`` are clean - noisy per seed, tested against 0.
    """
    if test == "zero_every_round":
        return None
    if test == "noisy_below_clean":
        return compare(values, [0.0] * len(values), higher_is_better=True)
    if baseline is None:
        raise ValueError(f"test {test} needs baseline values")
    if test in ("at_least", "lower"):
        return compare(values, baseline, higher_is_better=test == "at_least")
    raise ValueError(f"unknown test {test!r}; allowed: {', '.join(TESTS)}")


def verdict(test: str, values: list[float], comparison: Comparison | None) -> str:
    """holds / contradicted / inconclusive from a (Holm-adjusted) comparison; passes / fails
    for an implementation check. A NaN value makes a claim inconclusive."""
    if test == "zero_every_round":
        return "passes" if values and all(v == 0 for v in values) else "fails"
    if comparison is None:
        return "inconclusive"
    return {"better": "holds", "worse": "contradicted"}.get(comparison.verdict, "inconclusive")


def setting(spec: ClaimsSpec, claim: Claim) -> str:
    """The claim's experiment in words: data, model, partition, clients, rounds, seeds, the
    local recipe, runs."""
    cfg, base_cfg = spec.configs(claim, spec.seeds[0])
    ds, lo = cfg.dataset, cfg.local
    skew = f"Dir {ds.alpha}" if ds.partition == "dirichlet" else ds.partition
    work = f"{lo.steps} steps" if lo.steps else f"{lo.epochs} epoch{'s' * (lo.epochs > 1)}"
    text = (f"{ds.name} {cfg.model.name}, {skew}, {ds.num_clients} clients "
            f"({cfg.clients_per_round}/round), {cfg.rounds} rounds, {len(spec.seeds)} seeds; "
            f"local: {claim.recipe or 'default'} recipe ({work}, batch {lo.batch_size}, "
            f"lr {lo.lr}, momentum {lo.momentum}"
            + (f", wd {lo.weight_decay}" if lo.weight_decay else "")
            + (f", {lo.lr_schedule}" if lo.lr_schedule != "constant" else "") + ")")
    skip = {"method", "dataset.alpha"}
    extra = ", ".join(f"{k}={v}" for k, v in claim.run.items() if k not in skip)
    text += f"; {cfg.method.name}" + (f" ({extra})" if extra else "")
    if claim.baseline is not None and base_cfg is not None:
        extra = ", ".join(f"{k}={v}" for k, v in claim.baseline.items() if k not in skip)
        text += f" vs {base_cfg.method.name}" + (f" ({extra})" if extra else "")
    return text


def regime_text(spec: ClaimsSpec, claim: Claim) -> str:
    """The regime of the claim's run and of its baseline (``fedcore.pipeline.hparams``)."""
    cfg, base_cfg = spec.configs(claim, spec.seeds[0])
    text = regime(cfg.resolved()).label
    if base_cfg is not None:
        text += f"; baseline: {regime(base_cfg.resolved()).label}"
    return text


def experiments(spec: ClaimsSpec) -> dict[str, ExperimentConfig]:
    """Every distinct experiment of the claims, by config hash, in claim order."""
    out: dict[str, ExperimentConfig] = {}
    for c in spec.claims:
        for seed in spec.seeds:
            for cfg in spec.configs(c, seed):
                if cfg is not None:
                    out.setdefault(cfg.config_hash(), cfg)
    return out


def evaluate(spec: ClaimsSpec, results: dict[str, Result],
             diverged: dict[str, str] | None = None) -> list[ClaimRow]:
    """Judge every claim on ``results`` (by config hash; see :func:`experiments`); the claims'
    paired tests are Holm-adjusted together. A claim with a run in ``diverged`` (config hash:
    what diverged) is inconclusive and says which run diverged."""
    measured_rows: list[tuple[Claim, str, list[float], list[float] | None,
                              Comparison | None]] = []
    diverged = diverged or {}
    for c in spec.claims:
        pairs = [spec.configs(c, s) for s in spec.seeds]
        lost = [diverged[cfg.config_hash()] for pair in pairs for cfg in pair
                if cfg is not None and cfg.config_hash() in diverged]
        if lost:
            measured_rows.append((c, "not judged: " + "; ".join(dict.fromkeys(lost)), [], None,
                                  None))
            continue
        runs = [results[run.config_hash()] for run, _ in pairs]
        rounds = runs[0].config["rounds"]
        base = None
        if c.test == "noisy_below_clean":
            split = [noisy_and_clean(r, c.metric) for r in runs]
            values = [clean - noisy for noisy, clean in split]
            measured = (f"noisy {_stats([p[0] for p in split])} vs clean "
                        f"{_stats([p[1] for p in split])} ({c.metric})")
        else:
            values = [measure(r, c.metric, c.reduce, rounds) for r in runs]
            how = "" if c.reduce == "final" else f"{c.reduce} over rounds of "
            measured = f"{how}{c.metric}: {_stats(values)}"
            if c.baseline is not None:
                base = [measure(results[b.config_hash()], c.metric, c.reduce, rounds)
                        for _, b in pairs if b is not None]
                measured += f" vs {_stats(base)}"
        finite = not any(math.isnan(v) for v in [*values, *(base or [])])
        test = judge(c.test, values, base) if finite else None
        measured_rows.append((c, measured, values, base, test))
    tested = [t for *_, t in measured_rows if t is not None]
    adjusted = iter(holm(tested))
    rows = []
    for c, measured, values, base, test in measured_rows:
        comparison = next(adjusted) if test is not None else None
        if comparison is not None:
            measured += f"; paired difference {comparison.text('+.4g')}"
        rows.append(ClaimRow(
            id=c.id, claim=f"{c.paper}: {c.claim}", setting=setting(spec, c), measured=measured,
            verdict=verdict(c.test, values, comparison), values=tuple(values),
            baseline_values=None if base is None else tuple(base), kind=c.kind,
            regime=regime_text(spec, c), comparison=comparison,
        ))
    return rows


def run_claims(
    spec: ClaimsSpec,
    simulate: Callable[[ExperimentConfig], Result] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[ClaimRow]:
    """Simulate every experiment of ``spec`` once (``simulate``: default untracked) and judge."""
    if simulate is None:
        from fedcore.simulation import run as untracked

        simulate = untracked
    todo = experiments(spec)
    results: dict[str, Result] = {}
    diverged: dict[str, str] = {}
    for i, (h, cfg) in enumerate(todo.items(), 1):
        if progress:
            noisy = f" noisy_fraction={cfg.clients.noisy_fraction}" * (
                cfg.clients.noisy_fraction > 0)
            progress(f"[{i}/{len(todo)}] {cfg.method.name} seed={cfg.seed}{noisy}")
        try:
            results[h] = simulate(cfg)
        except FloatingPointError as exc:  # a diverged run: its claims cannot be judged
            if progress:
                progress(f"  diverged: {exc}")
            diverged[h] = f"{cfg.method.name} seed {cfg.seed} diverged"
    return evaluate(spec, results, diverged)


def verdict_text(row: ClaimRow) -> str:
    """``holds``, ``contradicted``, ``inconclusive (~N seeds)``, ``passes`` or ``fails``."""
    c = row.comparison
    if row.measured.startswith("not judged: "):
        return f"{row.verdict} (a run diverged)"
    if row.verdict == "inconclusive" and c is not None and c.verdict == "indistinguishable":
        return f"inconclusive (~{c.seeds_needed} seeds)" if c.seeds_needed else \
            "inconclusive (no difference)"
    return row.verdict


def markdown(rows: list[ClaimRow]) -> str:
    """The claims table: claim | kind | setting | regime | measured | verdict."""
    lines = ["| claim | kind | setting | regime | measured (mean [95 % interval] over seeds) "
             "| verdict |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.claim} | {r.kind} | {r.setting} | {r.regime} | {r.measured} | "
              f"**{verdict_text(r)}** |" for r in rows]
    return "\n".join(lines)


def tally(rows: list[ClaimRow]) -> str:
    """``claims: 2 hold, 1 contradicted, 5 inconclusive; implementation checks: 1 passes``."""
    parts = []
    for kinds, name in ((("claim", "robustness check"), "claims"),
                        (("implementation check",), "implementation checks")):
        mine = [r.verdict for r in rows if r.kind in kinds]
        if mine:
            counts = ", ".join(f"{mine.count(v)} {v}" for v in VERDICTS if v in mine)
            parts.append(f"{name}: {counts}")
    return "; ".join(parts)
