"""A report's LaTeX tables (``families.tex``) from its summary table and families' outcomes.

One table per family and setting: methods by their papers' names (``SA-PEF``, not
``sapef_topk``), a short header that states k (``Acc. last 5 (\\%)``), a caption in words
without ids, a ``\\label``, and the verdicts worded from the reference's side as the Markdown
report words them. A sweep without families gets one exploratory table per setting, best mean
first. The summary table is the report's (``fedcore.tracking.report.summary_table``): a row per
row label, dataset and alpha with ``<column>_mean``, ``_low``, ``_high`` and ``_n``.
``write_latex`` writes the tables with ``statistics.md``, the paper checklist's paragraph.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from fedcore.report.families import endpoint_text
from fedcore.report.files import write_text_atomic
from fedcore.report.latex import exploratory_latex, family_latex, label_key, statistics_statement
from fedcore.specs.families import DEFAULT_ENDPOINT, ENDPOINTS, Family, SeedPlan
from fedcore.specs.papers import display_name
from fedcore.stats.looks import FamilyOutcome

INTERVAL = "95 % Student-t interval over seeds"
VERDICTS = ("better", "worse", "equivalent", "undecided")  # else (no verdict, not run): ---
TEST = ("two-sided paired t-test on per-seed differences (exact sign-flip test for equal "
        "differences), TOST for equivalence")


def short_header(endpoint: str, k: int) -> str:
    """The column header of ``endpoint`` in LaTeX, with its k: ``Acc. last 5 (\\%)``."""
    return {"accuracy_last_k": f"Acc.\\ last {k} (\\%)", "accuracy": "Final acc.\\ (\\%)",
            "worst10": "Worst-10\\% acc.\\ (\\%)"}.get(endpoint, endpoint)


def endpoint_words(endpoint: str, k: int) -> str:
    """``mean test accuracy of the last 5 evaluations`` (the endpoint, without its metric)."""
    return ENDPOINTS[endpoint][2].split(" (")[0].replace("the last k", f"the last {k}")


def shown(row: str, family: Family) -> str:
    """A family's row as a paper prints it: the method's paper name, without the protocol mark
    every row of the family shares (``fedavg (tuned) @craft`` -> ``FedAvg (tuned)``)."""
    if family.protocol:
        row = row.removesuffix(f" @{family.protocol}")
    return display_name(row)


def setting_text(setting: tuple[Any, ...]) -> str:
    """``digits, Dirichlet 0.1``."""
    return f"{setting[0]}, Dirichlet {float(setting[1]):g}"


def families_tex(outcomes: list[FamilyOutcome], table: pd.DataFrame, k: int,
                 correction: str) -> str:
    """``families.tex``: a table per family and setting (in the outcomes' order), else, for a
    sweep without families, an exploratory table per setting."""
    if not outcomes:
        return exploratory_tex(table, k)
    by_row = {(r["dataset"], r["alpha"], r["row"]): r for _, r in table.iterrows()}
    parts = []
    for o in outcomes:
        col = ENDPOINTS[o.endpoint][0]
        fam, lines = o.family, []
        for row in fam.rows:
            r = by_row.get((*o.setting, row))
            if r is None:
                continue
            d = next((x for x in o.decisions if x.baseline == row), None)
            verdict = "" if d is None or d.verdict not in VERDICTS else d.verdict
            lines.append({"row": shown(row, fam), "is_reference": d is None,
                          "mean": r[f"{col}_mean"], "low": r[f"{col}_low"],
                          "high": r[f"{col}_high"], "n": int(r[f"{col}_n"]),
                          "verdict": verdict})
        reference = shown(fam.reference, fam)
        protocol = " in the paper's protocol" if fam.protocol else ""
        parts.append(family_latex(
            pd.DataFrame(lines), reference=reference,
            caption=f"{fam.paper}: {reference} against its baselines{protocol} "
            f"({setting_text(o.setting)}); {endpoint_words(o.endpoint, k)}.",
            label=f"tab:{label_key(fam.name)}-{label_key(o.setting[0])}-a{o.setting[1]:g}",
            header=short_header(o.endpoint, k), interval=INTERVAL, test=TEST,
            correction=correction))
    return "\n".join(parts)


def exploratory_tex(table: pd.DataFrame, k: int, endpoint: str = DEFAULT_ENDPOINT) -> str:
    """One exploratory table per (dataset, alpha) of ``table``: every row, best mean first."""
    col = ENDPOINTS[endpoint][0]
    parts = []
    for (dataset, alpha), sub in table.groupby(["dataset", "alpha"], sort=True):
        sub = sub.sort_values(f"{col}_mean", ascending=False, kind="stable", na_position="last")
        rows = pd.DataFrame({"row": [display_name(r) for r in sub["row"]],
                             "mean": sub[f"{col}_mean"], "low": sub[f"{col}_low"],
                             "high": sub[f"{col}_high"], "n": sub[f"{col}_n"].astype(int)})
        parts.append(exploratory_latex(
            rows, caption=f"Exploratory: every row ({setting_text((dataset, alpha))}), best first; "
            f"{endpoint_words(endpoint, k)}.",
            label=f"tab:rows-{label_key(dataset)}-a{float(alpha):g}",
            header=short_header(endpoint, k), interval=INTERVAL))
    return "\n".join(parts)


def write_latex(outcomes: list[FamilyOutcome], table: pd.DataFrame, runs: pd.DataFrame,
                plan: SeedPlan, out: Path) -> list[Path]:
    """``families.tex``: a booktabs table per family and setting, or for a sweep without
    families an exploratory one per setting (``fedcore.report.paper_tables``);
    ``statistics.md``: the checklist paragraph, with the seeds each row ran."""
    correction = f"Holm at 5 % / {len(plan.looks)} look(s) within the family"
    tex = out / "families.tex"
    write_text_atomic(tex, families_tex(outcomes, table, int(runs["last_k"].max()), correction))
    stats_md = out / "statistics.md"
    margins = {o.family.margin for o in outcomes} or {0.01}
    write_text_atomic(stats_md, statistics_statement(
        seeds=[int(n) for n in table["seeds"] if n > 0],
        endpoint="; ".join(endpoint_text(runs, e) for e in dict.fromkeys(
            o.endpoint for o in outcomes)) or endpoint_text(runs, DEFAULT_ENDPOINT),
        interval="95 % Student-t interval of the mean over seeds (per row); for a comparison, "
        "the t-interval of the paired differences at the family's Holm-adjusted level",
        test="two-sided paired t-test on per-seed differences, TOST for equivalence",
        correction=f"Holm within each family, at 5 % / {len(plan.looks)} look(s) "
        f"(looks at {', '.join(map(str, plan.looks))} seeds)",
        families=[o.family.name for o in outcomes] or ["none (exploratory)"],
        equivalence_margin=max(margins)) + "\n")
    return [tex, stats_md]
