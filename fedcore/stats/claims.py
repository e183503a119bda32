"""Seed-paper claims judged on small offline experiments (``fedcore claims``; the file is
``fedcore.specs.claims``).

Running it simulates every distinct experiment per seed, look by look, and judges the claims of
each paper as one family with the machinery of the sweeps (``fedcore.stats.looks``):
``holds`` (the paired test finds the claimed direction), ``contradicted`` (the opposite),
``equivalent`` (within the claim's margin), ``inconclusive`` otherwise. A claim whose runs are
still climbing at the horizon says ``early training``. A check that holds by construction is an
``implementation check`` and is judged ``passes``/``fails``, apart from the claims. Everything
here is plain computation on ``fedcore.core.round.simulation.Result`` objects; MLflow lives in
``fedcore.tracking.claims``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fedcore.core.config import ExperimentConfig
from fedcore.core.round.simulation import Result
from fedcore.specs.claims import TESTS, Claim, ClaimsSpec, regime_text, setting
from fedcore.specs.families import Family
from fedcore.stats.intervals import mean_interval
from fedcore.stats.looks import Decision, decide
from fedcore.stats.verdicts import Comparison

VERDICTS = ("holds", "contradicted", "equivalent", "inconclusive", "passes", "fails")
FLAT_WINDOW = 5  # evaluations over which a trained run's accuracy moves less than FLAT_GAIN
FLAT_GAIN = 0.01


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
    training: str = ""  # "trained" or "early training: ..." (accuracy still climbing)
    decided_at: int | None = None

    @property
    def holds(self) -> bool:
        """The paired test found the claimed direction (or an implementation check passed)."""
        return self.verdict in ("holds", "passes")



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


def oriented(test: str, values: list[float], baseline: list[float] | None) -> list[float]:
    """Per seed, the claimed direction as a positive number: ``values - baseline``
    (``at_least``), ``baseline - values`` (``lower``), ``values`` for ``noisy_below_clean``
    (already clean - noisy)."""
    if test == "noisy_below_clean":
        return list(values)
    if baseline is None:
        raise ValueError(f"test {test} needs baseline values")
    if test == "at_least":
        return [v - b for v, b in zip(values, baseline, strict=True)]
    if test == "lower":
        return [b - v for v, b in zip(values, baseline, strict=True)]
    raise ValueError(f"unknown test {test!r}; allowed: {', '.join(TESTS)}")


def verdict(test: str, values: list[float], comparison: Comparison | None) -> str:
    """holds / contradicted / equivalent / inconclusive from a claim's family comparison (on
    the claimed direction); passes / fails for an implementation check."""
    if test == "zero_every_round":
        return "passes" if values and all(v == 0 for v in values) else "fails"
    if comparison is None:
        return "inconclusive"
    return {"better": "holds", "worse": "contradicted",
            "equivalent": "equivalent"}.get(comparison.verdict, "inconclusive")


def training_state(runs: list[Result]) -> str:
    """``trained`` when the mean test accuracy over seeds moved by less than FLAT_GAIN over the
    last FLAT_WINDOW evaluations, else ``early training (+0.052 over the last 5
    evaluations)``: a comparison there measures speed, not the end point."""
    gains = []
    for r in runs:
        acc = [h["test/accuracy"] for h in r.history if "test/accuracy" in h]
        if len(acc) >= 2:
            window = acc[-FLAT_WINDOW:]
            gains.append(window[-1] - window[0])
    if not gains:
        return ""
    gain = float(np.mean(gains))
    if abs(gain) < FLAT_GAIN:
        return "trained"
    return f"early training ({gain:+.3f} over the last {FLAT_WINDOW} evaluations)"



@dataclass
class _Measured:
    """One claim's values over the seeds that ran: per seed in the claimed direction (``per
    seed``), its own and its baseline's raw values, the runs behind them and the failed seeds."""

    per_seed: dict[int, float] = field(default_factory=dict)
    own: list[float] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)
    runs: list[Result] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)

    def text(self, claim: Claim) -> str:
        """``mean over rounds of final/x: 0.91 [0.90, 0.92] vs 0.88 [...]``."""
        how = "" if claim.reduce == "final" else f"{claim.reduce} over rounds of "
        text = (f"{how}{claim.metric}: {_stats(self.own)}" if claim.test != "noisy_below_clean"
                else f"clean − noisy {claim.metric}: {_stats(self.own)}")
        if self.baseline:
            text += f" vs {_stats(self.baseline)}"
        return text


def _measure_claim(spec: ClaimsSpec, claim: Claim, results: dict[str, Result],
                   diverged: dict[str, str]) -> _Measured:
    """A claim's values on every seed of the plan whose runs are in ``results``."""
    out = _Measured()
    for seed in spec.seed_plan.seeds:
        run, base = spec.configs(claim, seed)
        lost = [diverged[x.config_hash()] for x in (run, base)
                if x is not None and x.config_hash() in diverged]
        if lost:
            out.failed[seed] = "; ".join(lost)
            continue
        if run.config_hash() not in results or (
                base is not None and base.config_hash() not in results):
            continue
        r = results[run.config_hash()]
        out.runs.append(r)
        rounds = r.config["rounds"]
        if claim.test == "noisy_below_clean":
            noisy, clean = noisy_and_clean(r, claim.metric)
            out.own.append(clean - noisy)
            out.per_seed[seed] = clean - noisy
            continue
        v = measure(r, claim.metric, claim.reduce, rounds)
        out.own.append(v)
        if base is not None:
            b = measure(results[base.config_hash()], claim.metric, claim.reduce, rounds)
            out.runs.append(results[base.config_hash()])
            out.baseline.append(b)
            out.per_seed[seed] = oriented(claim.test, [v], [b])[0]
        else:
            out.per_seed[seed] = v
    out.per_seed = {s: v for s, v in out.per_seed.items() if not math.isnan(v)}
    return out


def _decisions(spec: ClaimsSpec, measured: dict[str, _Measured]) -> dict[str, Decision]:
    """Each paper's claims as one family per margin, their looks replayed against zero."""
    plan = spec.seed_plan
    decisions: dict[str, Decision] = {}
    for paper in dict.fromkeys(c.paper for c in spec.claims):
        mine = [c for c in spec.claims if c.paper == paper and c.test != "zero_every_round"]
        for margin in sorted({c.margin for c in mine}):
            group = [c for c in mine if c.margin == margin]
            fam = Family(paper, paper, "0", tuple(c.id for c in group), "accuracy",
                         margin=margin)
            zero = {s: 0.0 for s in plan.seeds}
            table: dict[str, dict[int, float]] = {"0": zero, **{
                c.id: {s: -v for s, v in measured[c.id].per_seed.items()} for c in group}}
            outcome = decide(fam, plan, table, {c.id: measured[c.id].failed for c in group})
            decisions.update({d.baseline: d for d in outcome.decisions})
    return decisions


def _row(spec: ClaimsSpec, claim: Claim, measured: _Measured, d: Decision | None) -> ClaimRow:
    """The claims table's line of ``claim``."""
    comparison = d.comparison if d is not None and not d.blocked else None
    text = measured.text(claim)
    if d is not None and d.blocked:
        text = f"not judged: {d.blocked}; " + text
    elif comparison is not None:
        text += f"; claimed direction {comparison.text('+.4g')}"
    state = training_state(measured.runs) if claim.baseline is not None else ""
    return ClaimRow(
        id=claim.id, claim=f"{claim.paper}: {claim.claim}", setting=setting(spec, claim),
        measured=text, verdict=verdict(claim.test, measured.own, comparison),
        values=tuple(measured.own),
        baseline_values=tuple(measured.baseline) if claim.baseline is not None else None,
        kind=claim.kind, regime=regime_text(spec, claim),
        comparison=comparison, training=state,
        decided_at=None if d is None else d.decided_at,
    )


def evaluate(spec: ClaimsSpec, results: dict[str, Result],
             diverged: dict[str, str] | None = None) -> list[ClaimRow]:
    """Judge every claim on ``results`` (by config hash; see ``experiments``), replaying the
    seed plan's looks: the claims of one paper are one family (Holm within it at 5 % over the
    looks; ``fedcore.stats.looks.decide``). A claim with a diverged run (``diverged``:
    config hash -> what diverged) gets no verdict and says which run diverged."""
    measured = {c.id: _measure_claim(spec, c, results, diverged or {}) for c in spec.claims}
    decisions = _decisions(spec, measured)
    return [_row(spec, c, measured[c.id], decisions.get(c.id)) for c in spec.claims]


def open_claims(spec: ClaimsSpec, rows: list[ClaimRow]) -> list[Claim]:
    """Claims that the next look still needs (no verdict yet, not blocked)."""
    done = {r.id for r in rows if r.verdict != "inconclusive" or r.measured.startswith(
        "not judged")}
    return [c for c in spec.claims if c.id not in done and c.test != "zero_every_round"]


def run_claims(
    spec: ClaimsSpec,
    simulate: Callable[[ExperimentConfig], Result] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[ClaimRow]:
    """Simulate the experiments of ``spec`` look by look (``simulate``: default untracked),
    each once, and judge; a look runs only the seeds of claims still undecided."""
    if simulate is None:
        from fedcore.core.round.simulation import run as untracked

        simulate = untracked
    plan = spec.seed_plan
    results: dict[str, Result] = {}
    diverged: dict[str, str] = {}
    todo_claims = list(spec.claims)
    rows: list[ClaimRow] = []
    for look in range(len(plan.looks)):
        todo: dict[str, ExperimentConfig] = {}
        for c in todo_claims:
            for seed in plan.at(look):
                for cfg in spec.configs(c, seed):
                    if cfg is not None and cfg.config_hash() not in results:
                        todo.setdefault(cfg.config_hash(), cfg)
        for i, (h, cfg) in enumerate(todo.items(), 1):
            if h in diverged:
                continue
            if progress:
                noisy = f" noisy_fraction={cfg.clients.noisy_fraction}" * (
                    cfg.clients.noisy_fraction > 0)
                progress(f"[look {look + 1}: {i}/{len(todo)}] {cfg.method.name} "
                         f"seed={cfg.seed}{noisy}")
            try:
                results[h] = simulate(cfg)
            except FloatingPointError as exc:  # a diverged run: its claims cannot be judged
                if progress:
                    progress(f"  diverged: {exc}")
                diverged[h] = f"{cfg.method.name} seed {cfg.seed} diverged"
        rows = evaluate(spec, results, diverged)
        todo_claims = open_claims(spec, rows)
        if not todo_claims:
            break
    return rows

