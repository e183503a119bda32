"""Seed-paper claims checked on small offline experiments (``fedcore claims``).

A claims file (``configs/claims.yaml``) fixes, before anything runs, the base experiment, the
seeds and, per claim, the method's run, the baseline's run, the metric and the test. Running it
simulates every distinct experiment once per seed and judges each claim on the measured numbers;
a claim that does not hold is reported as not holding, with what was measured. Everything here is
plain computation on :class:`fedcore.simulation.Result` objects; MLflow lives in
``fedcore.tracking.claims``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedcore.config import ConfigError, ExperimentConfig, build_config, read_yaml
from fedcore.simulation import Result
from fedcore.sweep import read_base

TESTS = ("zero_every_round", "at_least", "lower", "noisy_below_clean")
REDUCES = ("final", "mean", "max")
CLAIM_KEYS = ("id", "paper", "claim", "test", "run", "baseline", "metric", "reduce")
FILE_KEYS = ("name", "base", "set", "seeds", "claims")


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


@dataclass(frozen=True)
class ClaimsSpec:
    name: str
    base: dict[str, Any]
    fixed: dict[str, Any]
    seeds: tuple[int, ...]
    claims: tuple[Claim, ...]

    def config(self, run: dict[str, Any], seed: int) -> ExperimentConfig:
        return build_config(self.base, {**run, **self.fixed, "seed": seed})


@dataclass(frozen=True)
class ClaimRow:
    """One line of the claims table."""

    id: str
    claim: str
    setting: str
    measured: str
    holds: bool
    values: tuple[float, ...]
    baseline_values: tuple[float, ...] | None


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
        fixed={**(raw.get("set") or {}), **overrides},
        seeds=tuple(seeds),
        claims=tuple(_claim(i, c) for i, c in enumerate(raw.get("claims") or [])),
    )
    if not spec.claims:
        raise ConfigError("claims.claims: expected a non-empty list of claims")
    ids = [c.id for c in spec.claims]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"claims.claims: duplicate id in {ids}")
    for c in spec.claims:
        for run in (c.run, c.baseline):
            if run is None:
                continue
            try:
                for seed in spec.seeds:
                    spec.config(run, seed)
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
    compares = raw["test"] in ("at_least", "lower")
    if compares != ("baseline" in raw):
        need = "needs" if compares else "takes no"
        raise ConfigError(f"{where}.baseline: test {raw['test']} {need} a baseline run")
    for key in ("run", "baseline"):
        if key in raw and not isinstance(raw[key], dict):
            raise ConfigError(f"{where}.{key}: expected a mapping of KEY: value")
    return Claim(str(raw["id"]), str(raw["paper"]), str(raw["claim"]), raw["test"],
                 dict(raw["run"]), raw.get("baseline"), str(raw["metric"]), reduce)


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
    std = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return f"{np.mean(values):.4g} ± {std:.2g}"


def judge(test: str, values: list[float], baseline: list[float] | None) -> bool:
    """Whether a claim holds on the seeds' values (means over seeds are compared).

    zero_every_round: every value (the max over rounds) is 0; at_least: mean >= baseline mean;
    lower: mean < baseline mean; noisy_below_clean: ``values`` are clean - noisy per seed, their
    mean is > 0. A NaN anywhere means the claim does not hold.
    """
    if any(math.isnan(v) for v in [*values, *(baseline or [])]):
        return False
    if test == "zero_every_round":
        return all(v == 0 for v in values)
    if test == "noisy_below_clean":
        return float(np.mean(values)) > 0
    if baseline is None:
        raise ValueError(f"test {test} needs baseline values")
    if test == "at_least":
        return float(np.mean(values)) >= float(np.mean(baseline))
    if test == "lower":
        return float(np.mean(values)) < float(np.mean(baseline))
    raise ValueError(f"unknown test {test!r}; allowed: {', '.join(TESTS)}")


def setting(spec: ClaimsSpec, claim: Claim) -> str:
    """The claim's experiment in words: data, model, partition, clients, rounds, seeds, runs."""
    cfg = spec.config(claim.run, spec.seeds[0])
    ds = cfg.dataset
    skew = f"Dir {ds.alpha}" if ds.partition == "dirichlet" else ds.partition
    text = (f"{ds.name} {cfg.model.name}, {skew}, {ds.num_clients} clients "
            f"({cfg.clients_per_round}/round), {cfg.rounds} rounds, {len(spec.seeds)} seeds")
    extra = ", ".join(f"{k}={v}" for k, v in claim.run.items() if k != "method")
    text += f"; {cfg.method.name}" + (f" ({extra})" if extra else "")
    if claim.baseline is not None:
        base = build_config(spec.base, {**claim.baseline, **spec.fixed}).method.name
        extra = ", ".join(f"{k}={v}" for k, v in claim.baseline.items() if k != "method")
        text += f" vs {base}" + (f" ({extra})" if extra else "")
    return text


def experiments(spec: ClaimsSpec) -> dict[str, ExperimentConfig]:
    """Every distinct experiment of the claims, by config hash, in claim order."""
    out: dict[str, ExperimentConfig] = {}
    for c in spec.claims:
        for run in (c.run, c.baseline):
            if run is None:
                continue
            for seed in spec.seeds:
                cfg = spec.config(run, seed)
                out.setdefault(cfg.config_hash(), cfg)
    return out


def evaluate(spec: ClaimsSpec, results: dict[str, Result]) -> list[ClaimRow]:
    """Judge every claim on ``results`` (by config hash; see :func:`experiments`)."""
    rows = []
    for c in spec.claims:
        runs = [results[spec.config(c.run, s).config_hash()] for s in spec.seeds]
        rounds = runs[0].config["rounds"]
        base = None
        if c.test == "noisy_below_clean":
            pairs = [noisy_and_clean(r, c.metric) for r in runs]
            values = [clean - noisy for noisy, clean in pairs]
            measured = (f"noisy {_stats([p[0] for p in pairs])} vs clean "
                        f"{_stats([p[1] for p in pairs])} ({c.metric})")
        else:
            values = [measure(r, c.metric, c.reduce, rounds) for r in runs]
            how = "" if c.reduce == "final" else f"{c.reduce} over rounds of "
            measured = f"{how}{c.metric}: {_stats(values)}"
            if c.baseline is not None:
                base = [measure(results[spec.config(c.baseline, s).config_hash()], c.metric,
                                c.reduce, rounds) for s in spec.seeds]
                measured += f" vs {_stats(base)}"
        rows.append(ClaimRow(
            id=c.id, claim=f"{c.paper}: {c.claim}", setting=setting(spec, c), measured=measured,
            holds=judge(c.test, values, base), values=tuple(values),
            baseline_values=None if base is None else tuple(base),
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
    results = {}
    for i, (h, cfg) in enumerate(todo.items(), 1):
        if progress:
            noisy = f" noisy_fraction={cfg.clients.noisy_fraction}" * (
                cfg.clients.noisy_fraction > 0)
            progress(f"[{i}/{len(todo)}] {cfg.method.name} seed={cfg.seed}{noisy}")
        results[h] = simulate(cfg)
    return evaluate(spec, results)


def markdown(rows: list[ClaimRow]) -> str:
    """The claims table: claim | setting | measured (mean ± std over seeds) | holds."""
    lines = ["| claim | setting | measured (mean ± std over seeds) | holds |", "|---|---|---|---|"]
    lines += [f"| {r.claim} | {r.setting} | {r.measured} | {'yes' if r.holds else 'NO'} |"
              for r in rows]
    return "\n".join(lines)
