"""The report's families: each paper's question in words and as a table (its comparisons on the
primary endpoint, the secondary endpoints, the seed-planning line), the endpoint in words, and
the forest plot's input."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedcore.specs.families import ENDPOINTS, SeedPlan
from fedcore.specs.rows import is_tuned
from fedcore.stats.comparison import half_width
from fedcore.stats.looks import FamilyOutcome
from fedcore.stats.paired import seeds_for


def endpoint_text(runs: pd.DataFrame, endpoint: str) -> str:
    """What the endpoint is, with the rounds it reads (``mean test accuracy of the last 5
    evaluations (rounds 16-20 of 20)``)."""
    what = ENDPOINTS[endpoint][2]
    if runs.empty:
        return what
    k = int(runs["last_k"].max())
    what = what.replace("the last k", f"the last {k}")
    if runs[["rounds", "eval_every"]].drop_duplicates().shape[0] > 1:  # rows in protocols
        return what + ", each row at its own last evaluations (its protocol's rounds)"
    rounds, every = (int(runs[c].max()) for c in ("rounds", "eval_every"))
    # evaluated: every `every` rounds and the last one (fedcore.core.callbacks.evaluation)
    evaluated = sorted({r for r in range(every, rounds + 1, every)} | {rounds})
    if endpoint == "accuracy_last_k":
        window = evaluated[-k:]
        span = (f"rounds {window[0]}-{window[-1]}" if len(window) > 1
                else f"round {window[0]}")
        return f"{what}, {span} of {rounds}"
    return f"{what}, round {rounds} of {rounds}"


def family_markdown(outcomes: list[FamilyOutcome], secondary: list[FamilyOutcome],
                    table: pd.DataFrame, plan: SeedPlan, runs: pd.DataFrame) -> str:
    """One section per family and setting: the answers in words, then the table of its
    comparisons on the primary endpoint, then the secondary endpoints."""
    if not outcomes:
        return ""
    by_row = {(r["dataset"], r["alpha"], r["row"]): r for _, r in table.iterrows()}
    parts = []
    for o in outcomes:
        fam, (dataset, alpha) = o.family, o.setting
        col = ENDPOINTS[o.endpoint][0]
        head = (f"### {fam.paper}: `{fam.reference}` against its baselines ({dataset}, "
                f"Dirichlet {alpha:g}; family `{fam.name}`)")
        if fam.protocol:  # the paper protocol its rows run, and where its endpoint reads
            head += (f"\n\nProtocol `{fam.protocol}`: {fam.protocol_note}. Endpoint: "
                     + endpoint_text(runs[runs["row"].isin(fam.rows)], o.endpoint) + ".")
        status = ("" if o.complete else
                  f"\n\n*In progress: {o.looks_done} of {len(plan.looks)} looks have all "
                  "their seeds; rerun the sweep to continue.*")
        words = "\n".join(f"- {d.words(fam.reference)}{_tuning_note(fam.reference, d.baseline)}"
                          for d in o.decisions)
        lines = ["| row | regime | seeds | endpoint (mean ± 95 %) | Δ reference − row "
                 "[adjusted interval] | verdict | decided at | best? | training |",
                 "|---|---|---|---|---|---|---|---|---|"]
        marks = best_marks(o)
        for row in fam.rows:
            r = by_row.get((dataset, alpha, row))
            d = next((x for x in o.decisions if x.baseline == row), None)
            seeds = "—" if r is None else str(int(r["seeds"])) + (
                f" (+{int(r['failed'])} failed: {r['failures']})" if r["failed"] else "")
            value = "—" if r is None else half_width(r[f"{col}_mean"], r[f"{col}_low"],
                                                     r[f"{col}_high"], int(r[f"{col}_n"]),
                                                     ".4f", bool(r[f"{col}_resolved"]))
            state = "" if r is None else str(r.get("training", ""))
            regime_text = "" if r is None else str(r["hparams"])
            if d is None:
                lines.append(f"| **{row}** (reference) | {regime_text} | {seeds} | {value} | "
                             f"— | — | — | {marks.get(row, '')} | {state} |")
                continue
            c = d.comparison
            delta = "—" if c is None else c.text("+.4f").split(", " + c.verdict)[0]
            verdict = d.verdict + ("" if c is None else (
                c.tost_label() if c.verdict == "equivalent" else "") + c.fragile_text())
            lines.append(f"| {row} | {regime_text} | {seeds} | {value} | {delta} | "
                         f"{verdict} | {d.decided_at or '—'} | {marks.get(row, '')} | "
                         f"{state} |")
        sec = [x for x in secondary if x.family.name == fam.name and x.setting == o.setting]
        sec_text = ""
        if sec:
            sec_lines = ["| row | " + " | ".join(
                f"Δ {ENDPOINTS[x.endpoint][0]} (first {plan.looks[0]} seeds)" for x in sec)
                + " |", "|---|" + "---|" * len(sec)]
            for b in fam.baselines:
                cells = []
                for x in sec:
                    d = next(y for y in x.decisions if y.baseline == b)
                    c = d.comparison
                    cells.append(d.verdict if c is None else c.text("+.3f") + c.fragile_text())
                sec_lines.append(f"| {b} | " + " | ".join(cells) + " |")
            sec_text = ("\n\nSecondary endpoints (each tested once on the first look's seeds, "
                        "Holm over the family at 5 %; intervals cut to the range of a "
                        "difference of accuracies, [-1, 1]; `no resolution at n = ...` where "
                        "the interval or the detectable difference spans that range):\n\n"
                        + "\n".join(sec_lines))
        parts.append(f"{head}{status}\n\n{words}\n\n" + "\n".join(lines) + sec_text
                     + plan_line(o, plan))
    return "\n\n".join(parts)


PLANNED_DIFFERENCE = 0.02  # the difference the seed-planning line sizes a family for


def plan_line(outcome: FamilyOutcome, plan: SeedPlan) -> str:
    """For planning the next experiment, not this one: the seeds a paired t-test at this
    family's first Holm level would need to detect a PLANNED_DIFFERENCE with 80 % power, from
    the median spread of the family's paired differences (a pilot's estimate)."""
    sds = [float(np.std(d.comparison.differences, ddof=1)) for d in outcome.decisions
           if d.comparison is not None and d.comparison.n >= 2]
    if not sds:
        return ""
    sd = float(np.median(sds))
    level = plan.level_per_look / max(1, len(outcome.decisions))
    n = seeds_for(PLANNED_DIFFERENCE, sd, level)
    return ("" if n is None else
            f"\n\n*Planning a new experiment (not this one): with the median paired sd of this "
            f"family ({sd:.3f}) a {PLANNED_DIFFERENCE:g} difference needs about {n} seeds at its "
            f"first Holm level ({level:.2g}) for 80 % power; fix them as looks before it runs.*")


def _tuning_note(reference: str, baseline: str) -> str:
    """A warning when one side of a comparison was tuned by a study and the other was not."""
    if is_tuned(reference) == is_tuned(baseline):
        return ""
    side = "reference" if is_tuned(reference) else "baseline"
    return f" (**tuning differs**: only the {side} was tuned by a study)"


def best_marks(outcome: FamilyOutcome) -> dict[str, str]:
    """``best`` on the reference when it is better than every baseline, ``tied best (±δ)``
    when it is better than or equivalent to each with at least one equivalence; nothing else
    (a baseline is compared with the reference only, never with the other baselines)."""
    verdicts = [d.verdict for d in outcome.decisions]
    fam = outcome.family
    if verdicts and all(v == "better" for v in verdicts):
        return {fam.reference: "best"}
    if verdicts and all(v in ("better", "equivalent") for v in verdicts):
        return {fam.reference: f"tied best (±{fam.margin:g})"}
    return {}


def forest_frame(outcomes: list[FamilyOutcome]) -> pd.DataFrame:
    """The forest plot's input: one line per comparison of every family (primary endpoint),
    with the interval a table shows (TOST's for an equivalent verdict, cut to [-1, 1]) and the
    family's equivalence margin."""
    columns = ["family", "setting", "row", "mean", "low", "high", "verdict", "reference", "n",
               "margin"]
    lines = []
    for o in outcomes:
        for d in o.decisions:
            c = d.comparison
            shown = None if c is None else c.shown
            lines.append({
                "family": f"{o.family.paper} ({o.family.name}), Dirichlet {o.setting[1]:g}",
                "setting": o.setting, "row": d.baseline,
                "mean": np.nan if shown is None else shown.mean,
                "low": np.nan if shown is None else shown.low,
                "high": np.nan if shown is None else shown.high,
                "verdict": d.verdict if c is not None else "not run",
                "reference": o.family.reference, "n": 0 if c is None else c.n,
                "margin": o.family.margin})
    return pd.DataFrame(lines, columns=columns)
