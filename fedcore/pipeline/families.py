"""Comparison families and their seed plan: a paper's question, decided at looks fixed in advance.

A **family** is one paper's method (its reference row) against that paper's own baselines, on a
primary endpoint declared before anything runs. A **seed plan** runs seeds in looks (``looks:
[3, 5, 8]`` seeds in all by each look). At look ``k`` of ``K`` every comparison still open is
tested on its first ``n_k`` seeds with Holm's step-down over the family at ``alpha / K``
(``fedcore.pipeline.stats.family_test``); a comparison decided (better, worse, equivalent)
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

from fedcore.core.config import ConfigError, limits
from fedcore.pipeline.stats import (
    DIFFERENCE_RANGE,
    LEVEL,
    MARGIN,
    UNBOUNDED,
    Comparison,
    family_test,
)
from fedcore.pipeline.sweep_file import check_entry_keys

# endpoint name -> (report column, whether higher is better, what it is)
ENDPOINTS: dict[str, tuple[str, bool, str]] = {
    "accuracy_last_k": ("accuracy_last_k", True,
                        "mean test accuracy of the last k evaluations (final/accuracy_last_k)"),
    "accuracy": ("accuracy", True, "test accuracy of the last evaluation (final/accuracy)"),
    "worst10": ("worst10", True,
                "mean local accuracy of the worst 10 % of clients at the last evaluation "
                "(final/accuracy_worst10)"),
}
DEFAULT_ENDPOINT = "accuracy_last_k"
DEFAULT_SECONDARY = ("accuracy", "worst10")
FAMILY_KEYS = ("name", "paper", "reference", "baselines", "endpoint", "secondary", "margin",
               "alpha", "protocol")


@dataclass(frozen=True)
class SeedPlan:
    """Seeds in looks: ``looks[k]`` seeds in all by look k (``seeds[:looks[k]]``)."""

    seeds: tuple[int, ...]
    looks: tuple[int, ...]

    @property
    def level_per_look(self) -> float:
        return LEVEL / len(self.looks)

    def at(self, look: int) -> tuple[int, ...]:
        """The seeds of look ``look`` (0-based) and all before it."""
        return self.seeds[: self.looks[look]]


def seed_plan(raw: Any, where: str) -> SeedPlan:
    """``seeds: [0, 1, 2]`` (one look) or ``seeds: {looks: [3, 5, 8], start: 0}``, checked."""
    if isinstance(raw, list):
        if not raw or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                              for s in raw) or len(set(raw)) != len(raw):
            raise ConfigError(f"{where}.seeds: expected distinct seeds >= 0 "
                              f"(got {limits.shown(raw)})")
        limits.check_count(f"{where}.seeds (seeds listed)", len(raw), limits.SEEDS)
        limits.check_count(f"{where}.seeds (largest seed)", max(raw), limits.SEED)
        return SeedPlan(tuple(raw), (len(raw),))
    if not isinstance(raw, dict) or set(raw) - {"looks", "start"} or "looks" not in raw:
        raise ConfigError(f"{where}.seeds: expected a list of seeds or a mapping "
                          "{looks: [n1, n2, ...], start: first seed}")
    looks, start = raw["looks"], raw.get("start", 0)
    ok = (isinstance(looks, list) and looks
          and all(isinstance(n, int) and not isinstance(n, bool) and n >= 2 for n in looks)
          and all(a < b for a, b in zip(looks, looks[1:], strict=False)))
    if not ok:
        raise ConfigError(f"{where}.seeds.looks: expected increasing seed counts >= 2, e.g. "
                          f"[3, 5, 8] (got {limits.shown(looks)})")
    limits.check_count(f"{where}.seeds.looks (number of looks)", len(looks), limits.LOOKS)
    limits.check_count(f"{where}.seeds.looks (seeds of the last look)", looks[-1], limits.SEEDS)
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ConfigError(f"{where}.seeds.start: expected a seed >= 0 "
                          f"(got {limits.shown(start)})")
    limits.check_count(f"{where}.seeds (largest seed: start + last look - 1)",
                       start + looks[-1] - 1, limits.SEED)
    return SeedPlan(tuple(range(start, start + looks[-1])), tuple(looks))


@dataclass(frozen=True)
class Family:
    """A paper's method (``reference``, a row label) against its own baselines (row labels)."""

    name: str
    paper: str
    reference: str
    baselines: tuple[str, ...]
    endpoint: str = DEFAULT_ENDPOINT
    secondary: tuple[str, ...] = DEFAULT_SECONDARY
    margin: float = MARGIN
    alpha: float | None = None  # the Dirichlet alpha it is judged at (None: every alpha)
    protocol: str | None = None  # the paper protocol its rows run (fedcore.pipeline.protocols)
    horizon: int | None = None  # the protocol's rounds: fewer carry no verdicts
    protocol_note: str = ""  # its recipe and what runs scaled, for the report

    @property
    def rows(self) -> tuple[str, ...]:
        return (self.reference, *self.baselines)


def parse_families(raw: Any, where: str,
                   protocols: Mapping[str, Any] | None = None) -> tuple[Family, ...]:
    """A file's ``families:`` list, each ``{name, paper, reference, baselines, endpoint?,
    secondary?, margin?, alpha?, protocol?}``; one-line errors naming the key. With
    ``protocol`` (a name in the file's ``protocols:``) its rows are that protocol's rows:
    ``fedavg`` names ``fedavg @craft``."""
    protocols = protocols or {}
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"{where}.families: expected a list of families")
    out = []
    for i, f in enumerate(raw):
        at = f"{where}.families[{i}]"
        check_entry_keys(f, FAMILY_KEYS, at)
        for key in ("name", "reference", "baselines"):
            if key not in f:
                raise ConfigError(f"{at}.{key}: missing")
        base = f["baselines"]
        if not isinstance(base, list) or not base or not all(isinstance(b, str) for b in base):
            raise ConfigError(f"{at}.baselines: expected a non-empty list of row labels")
        if f["reference"] in base:
            raise ConfigError(f"{at}.baselines: the reference {f['reference']!r} is not its own "
                              "baseline")
        endpoint = f.get("endpoint", DEFAULT_ENDPOINT)
        secondary = f.get("secondary", list(DEFAULT_SECONDARY))
        for key, names in (("endpoint", [endpoint]), ("secondary", secondary)):
            bad = [n for n in names if n not in ENDPOINTS]
            if bad:
                raise ConfigError(f"{at}.{key}: unknown {bad[0]!r}; allowed: "
                                  f"{', '.join(ENDPOINTS)}")
        margin = f.get("margin", MARGIN)
        if not isinstance(margin, (int, float)) or not 0 <= margin < 1:
            raise ConfigError(f"{at}.margin: expected an equivalence margin in [0, 1) "
                              f"(got {margin!r})")
        alpha = f.get("alpha")
        if alpha is not None and (not isinstance(alpha, (int, float)) or alpha <= 0):
            raise ConfigError(f"{at}.alpha: expected a Dirichlet alpha > 0 (got {alpha!r})")
        proto = f.get("protocol")
        if proto is not None and proto not in protocols:
            raise ConfigError(f"{at}.protocol: unknown protocol {proto!r}; allowed: "
                              f"{', '.join(protocols) or 'none (the file has no protocols:)'}")
        mark = "" if proto is None else f" @{proto}"
        out.append(Family(str(f["name"]), str(f.get("paper", f["name"])),
                          str(f["reference"]) + mark, tuple(f"{b}{mark}" for b in base), endpoint,
                          tuple(s for s in secondary if s != endpoint), float(margin),
                          None if alpha is None else float(alpha),
                          None if proto is None else str(proto),
                          None if proto is None else int(protocols[proto].horizon),
                          "" if proto is None else protocols[proto].note()))
    names = [f.name for f in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}.families: duplicate name in {names}")
    return tuple(out)


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
