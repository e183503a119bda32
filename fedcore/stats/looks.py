"""Comparison families decided at looks fixed in advance: a paper's question, answered.

A **family** is one paper's method (its reference row) against that paper's own baselines, on a
primary endpoint declared before anything runs. A **seed plan** runs seeds in looks (``looks:
[3, 5, 8]`` seeds in all by each look). At look ``k`` of ``K`` every comparison still open is
tested on its first ``n_k`` seeds with Holm's step-down over the family at ``alpha / K``
(``fedcore.stats.verdicts.family_test``); a comparison decided (better, worse, equivalent)
keeps its verdict and its row stops, unless another open comparison still needs it; the
reference runs every seed that any open row runs, so comparisons stay paired.

Why the error stays at ``alpha`` over the looks: at each look Holm keeps the chance of any false
better/worse among that look's tests at ``alpha / K`` whatever the dependence between rows (the
step-down only ever uses Bonferroni bounds), rows decided earlier count as already rejected; by
the union bound over the K looks, the chance of any false better/worse in the family is at most
``K * alpha / K = alpha``. Equivalence verdicts are controlled the same way, separately. This
is the plainest alpha-spending (equal spending per look, a Bonferroni split); it is
conservative next to Pocock's constants, and exact constants are not available for t-tests on
3-10 seeds anyway. ``tests/test_families.py`` checks the error rate by simulation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedcore.specs.families import ENDPOINTS, Family, SeedPlan
from fedcore.stats.intervals import DIFFERENCE_RANGE, UNBOUNDED
from fedcore.stats.verdicts import Comparison, family_test


@dataclass
class Decision:
    """One comparison of a family: the reference against ``baseline`` on one endpoint."""

    baseline: str
    comparison: Comparison | None = None  # None: not testable yet
    decided_at: int | None = None  # seeds it was decided at (better/worse/equivalent)
    look: int | None = None  # 0-based look it was decided (or last tested) at
    blocked: str = ""  # why no verdict (failed seeds)

    @property
    def verdict(self) -> str:
        if self.blocked:
            return "blocked"
        return self.comparison.verdict if self.comparison is not None else "not run"

    def words(self, reference: str) -> str:
        """``craft vs fedlf: worse by 0.040 [0.010, 0.070], decided at 5 seeds``."""
        head = f"{reference} vs {self.baseline}"
        c = self.comparison
        if self.blocked:
            return f"{head}: no verdict ({self.blocked})"
        if c is None:
            return f"{head}: not run yet"
        iv, span, hair = c.interval, c.span("+.3f"), c.fragile_text()
        if c.verdict in ("better", "worse"):
            return (f"{head}: {c.verdict} by {abs(iv.mean):.3f} {span}, decided at "
                    f"{self.decided_at} seeds{hair}")
        if c.verdict == "equivalent":
            return (f"{head}: equivalent within ±{c.margin:g} ({iv.mean:+.3f} {span}"
                    f"{c.tost_label()}), decided at {self.decided_at} seeds{hair}")
        if not c.resolved:
            return f"{head}: undecided at {c.n} seeds ({iv.mean:+.3f}, {span[1:-1]}){hair}"
        detect = (f"; detects ±{c.detectable:.3f} at this n" if math.isfinite(c.detectable)
                  else "")
        return f"{head}: undecided at {c.n} seeds ({iv.mean:+.3f} {span}{detect}){hair}"


@dataclass
class FamilyOutcome:
    """A family's comparisons on one endpoint at one setting, after the looks that have data."""

    family: Family
    endpoint: str
    setting: tuple[Any, ...]
    decisions: list[Decision] = field(default_factory=list)
    looks_done: int = 0
    complete: bool = False  # every look that any open row needs has all its seeds

    def open_rows(self) -> list[str]:
        """Baselines whose comparison is still open after the last look with data."""
        return [d.baseline for d in self.decisions if not d.blocked and (
            d.comparison is None or d.comparison.verdict in ("undecided", "no test"))]


def decide(family: Family, plan: SeedPlan, values: Mapping[str, Mapping[int, float]],
           failed: Mapping[str, Mapping[int, str]] | None = None, endpoint: str | None = None,
           setting: tuple[Any, ...] = (),
           bounds: tuple[float, float] = UNBOUNDED) -> FamilyOutcome:
    """Replay the family's looks on the seeds' values (row -> seed -> endpoint value).

    At each look, the open comparisons whose two rows have every seed of that look are tested
    (Holm over the family at ``alpha / K``); a look without all its seeds stops the replay there
    (the runner has not reached it). A failed seed (``failed``: row -> seed -> why) in either
    row of a comparison blocks its verdict, stated. The secondary endpoints replay the same
    looks on the rows the primary endpoint kept running. ``bounds``: the range of a difference
    of the values (intervals are cut to it; a sweep's endpoints are accuracies, [-1, 1]).
    """
    endpoint = endpoint or family.endpoint
    higher = ENDPOINTS[endpoint][1]
    failed = failed or {}
    ref = family.reference
    out = FamilyOutcome(family, endpoint, setting,
                        [Decision(b) for b in family.baselines])
    for k in range(len(plan.looks)):
        seeds = plan.at(k)
        undecided = [d for d in out.decisions
                     if not d.blocked and (d.comparison is None or d.comparison.verdict
                                           in ("undecided", "no test"))]
        if not undecided:
            out.complete = True
            return out
        for d in undecided:
            bad = {s: why for row in (ref, d.baseline) for s, why in
                   (failed.get(row) or {}).items() if s in seeds}
            if bad:
                d.blocked = "; ".join(f"seed {s}: {why}" for s, why in sorted(bad.items()))
        ready = [d for d in undecided if not d.blocked and all(
            s in (values.get(ref) or {}) and s in (values.get(d.baseline) or {}) for s in seeds)]
        if len(ready) < len([d for d in undecided if not d.blocked]):
            return out  # this look is not complete yet
        if not ready:
            out.complete = True
            return out
        earlier = [d for d in out.decisions if d not in ready
                   and (d.blocked or d.comparison is not None)]
        tested = ready + earlier
        comps = family_test(
            [[values[ref][s] for s in seeds] for _ in tested],
            [[values[d.baseline][s] for s in seeds] if d in ready else
             [values[ref][s] for s in seeds] for d in tested],
            higher_is_better=higher, level=plan.level_per_look, margin=family.margin,
            bounds=bounds,
            decided=[None if d in ready else "blocked" if d.blocked or d.comparison is None
                     else d.comparison.verdict for d in tested])
        for d, c in zip(tested, comps, strict=True):
            if d in ready:
                d.comparison, d.look = c, k
                if c.verdict in ("better", "worse", "equivalent"):
                    d.decided_at = len(seeds)
        out.looks_done = k + 1
    out.complete = True
    return out


def rows_to_run(outcomes: Sequence[FamilyOutcome]) -> set[str]:
    """Rows that need the next look's seeds: the open baselines and their references."""
    need: set[str] = set()
    for o in outcomes:
        if o.endpoint != o.family.endpoint:
            continue
        open_rows = o.open_rows()
        if open_rows:
            need.update(open_rows)
            need.add(o.family.reference)
    return need


def null_error_rate(plan: SeedPlan, family_size: int, sd: float, trials: int, seed: int,
                    level_per_look: float | None = None,
                    planted: float = 0.0) -> tuple[float, list[int]]:
    """Monte-Carlo check of the looks: the rate of any better/worse verdict over ``trials``
    simulated families of ``family_size`` comparisons whose per-seed paired differences are
    normal with mean ``planted`` and sd ``sd``; with it the count decided at each look.

    ``level_per_look`` replaces the plan's boundary (e.g. 0.05 at every look, to see the error
    it would make).
    """
    rng = np.random.default_rng(seed)
    n_max = plan.looks[-1]
    level = plan.level_per_look if level_per_look is None else level_per_look
    plan_at = SeedPlan(plan.seeds, plan.looks)
    errors = 0
    at_look = [0] * len(plan.looks)
    fam = Family("sim", "sim", "ref", tuple(f"b{i}" for i in range(family_size)), "accuracy")
    for _ in range(trials):
        ref = rng.normal(0.5, sd, n_max)
        values = {"ref": dict(zip(plan.seeds, ref, strict=True))}
        for i in range(family_size):
            diffs = rng.normal(planted, sd, n_max)
            values[f"b{i}"] = dict(zip(plan.seeds, ref - diffs, strict=True))
        outcome = _decide_at(fam, plan_at, values, level)
        flagged = [d for d in outcome.decisions if d.comparison is not None
                   and d.comparison.verdict in ("better", "worse")]
        if flagged:
            errors += 1
            at_look[min(d.look for d in flagged if d.look is not None)] += 1
    return errors / trials, at_look


def _decide_at(family: Family, plan: SeedPlan, values: Mapping[str, Mapping[int, float]],
               level: float) -> FamilyOutcome:
    class _Plan(SeedPlan):
        @property
        def level_per_look(self) -> float:
            return level

    return decide(family, _Plan(plan.seeds, plan.looks), values)


def family_outcomes(runs: Any, families: Sequence[Family], plan: SeedPlan,
                    endpoint: str | None = None) -> list[FamilyOutcome]:
    """Every family at every (dataset, alpha) where its reference has runs, on ``endpoint``
    (None: each family's primary endpoint). ``runs``: a DataFrame with ``row``, ``dataset``,
    ``alpha``, ``seed``, ``status`` (FINISHED or FAILED), ``failure`` and the endpoint columns.
    """
    out = []
    for fam in families:
        name = endpoint or fam.endpoint
        column = ENDPOINTS[name][0]
        mine = runs[runs["row"].isin(fam.rows)]
        if fam.alpha is not None:
            mine = mine[np.isclose(mine["alpha"].astype(float), fam.alpha)]
        for (dataset, alpha), sub in mine.groupby(["dataset", "alpha"], sort=False):
            if fam.reference not in set(sub["row"]):
                continue
            ok = sub[sub["status"] == "FINISHED"]
            values = {str(r): {int(s): float(v) for s, v in zip(g["seed"], g[column],
                                                                  strict=True)
                               if not math.isnan(float(v))}
                      for r, g in ok.groupby("row", sort=False)}
            bad = sub[sub["status"] != "FINISHED"]
            failed = {str(r): {int(s): str(w) for s, w in zip(g["seed"], g["failure"],
                                                              strict=True)}
                      for r, g in bad.groupby("row", sort=False)}
            outcome = decide(fam, plan, values, failed, name, (dataset, alpha),
                             DIFFERENCE_RANGE)  # every endpoint is an accuracy
            short = short_of_horizon(fam, sub)
            for d in outcome.decisions if short else ():  # no verdicts, said why
                d.comparison, d.decided_at, d.blocked = None, None, short
            out.append(outcome)
    return out


def short_of_horizon(family: Family, runs: Any) -> str:
    """Why ``runs`` of a protocol family cannot be judged: fewer rounds than its protocol's
    horizon (``""`` when they ran it, or the family has no protocol)."""
    if family.horizon is None or "rounds" not in runs or runs.empty:
        return ""
    ran = int(runs["rounds"].min())
    if ran >= family.horizon:
        return ""
    return (f"ran {ran} of the {family.protocol} protocol's {family.horizon} rounds; a family is "
            "judged only at its paper's horizon")


def secondary_outcomes(runs: Any, families: Sequence[Family],
                       plan: SeedPlan) -> list[FamilyOutcome]:
    """Each family's secondary endpoints, each tested once on the first look's seeds (every row
    has them) with Holm over the family at the full alpha: a fixed n, so the primary endpoint's
    stopping does not bias them."""
    first = SeedPlan(plan.at(0), (plan.looks[0],))
    out = []
    for fam in families:
        for name in fam.secondary:
            out.extend(family_outcomes(runs, [fam], first, name))
    return out
