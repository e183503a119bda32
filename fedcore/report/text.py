"""The report's words around its tables: the header's counts, seed plan and early stops, the
parent run's description, the figures section and how to read the report."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fedcore.specs.families import SeedPlan
from fedcore.specs.sweep import SweepSpec
from fedcore.stats.looks import FamilyOutcome, rows_to_run
from fedcore.stats.training_state import MIN_CHANGE, NOISE_SE

FIGURES = (  # file, what it shows (the report's "Figures" section, in this order)
    ("convergence.png", "test accuracy per round, one panel per family and setting (mean over "
     "seeds, band: 95 % interval, the reference dashed black)"),
    ("forest.png", "each family's paired differences, reference − baseline, with their "
     "Holm-adjusted intervals coloured by verdict"),
    ("client_accuracy.png", "final local accuracy of every client, all seeds pooled, per row"),
    ("accuracy_vs_gb.png", "test accuracy against cumulative uplink GB"),
    ("accuracy_vs_epsilon.png", "accuracy against the privacy budget spent"),
    ("accuracy_vs_time.png", "test accuracy against simulated seconds (runs with a simulated "
     "clock: docs/how-to/stragglers.md)"),
)


def figures_markdown(folder: Path) -> str:
    """The "Figures" section: each figure of ``FIGURES`` written to ``folder``, linked by its
    file name (the HTML page embeds them) with what it shows."""
    lines = ["", "## Figures", ""]
    for name, words in FIGURES:
        if (folder / name).is_file():
            lines += [f"![{words}]({name})", "", f"`{name}`: {words}.", ""]
    return "\n".join(lines) + "\n" if len(lines) > 3 else ""


def counts_line(spec: SweepSpec, runs: pd.DataFrame, outcomes: list[FamilyOutcome]) -> str:
    """``123 cells planned: 98 finished, 1 diverged or failed, 20 not needed (no comparison of
    theirs was open after an earlier look: decided, or without verdicts), 4 not yet run``."""
    done = set(runs["config_hash"])
    finished = int((runs["status"] == "FINISHED").sum())
    failed = int((runs["status"] != "FINISHED").sum())
    open_rows = rows_to_run(outcomes)
    first = set(spec.seed_plan.at(0))
    planned = [c for c in spec.cells if spec.planned(c)]
    pending = [c for c in planned if c.config.config_hash() not in done]
    needed = [c for c in pending if c.config.seed in first or c.row in open_rows]
    skipped = len(pending) - len(needed)
    parts = [f"{finished} finished", f"{failed} diverged or failed (kept in their rows)"]
    if skipped:
        parts.append(f"{skipped} not needed (no comparison of theirs was open after an earlier "
                     "look)")
    if needed:
        parts.append(f"{len(needed)} not yet run")
    return f"{len(planned)} cells planned: " + ", ".join(parts) + "."


def early_text(runs: pd.DataFrame) -> str:
    """A line on the runs a callback stopped early (on a validation metric: early stopping
    refuses test-set monitors; or a privacy budget), whose endpoint reads their own last
    rounds; "" for none."""
    early = runs[runs["stopped_early"].astype(bool)] if "stopped_early" in runs else runs[:0]
    if early.empty:
        return ""
    why = "; ".join(dict.fromkeys(early["stopped_early"]))[:300]
    return (f"**Stopped early**: {len(early)} run(s) ended before the horizon on a validation "
            f"metric or a privacy budget ({why}); their endpoint reads their own last "
            "evaluations.\n\n")


def plan_text(plan: SeedPlan) -> str:
    """The seed plan and the boundary in words."""
    if len(plan.looks) == 1:
        return (f"{plan.looks[0]} seeds ({', '.join(map(str, plan.seeds))}), one look; each "
                "family's verdicts at 5 % family-wise (Holm)")
    return (f"looks at {', '.join(map(str, plan.looks))} seeds (seeds {plan.seeds[0]}-"
            f"{plan.seeds[-1]}); at each look Holm over the family at "
            f"{plan.level_per_look:.3g} = 5 % / {len(plan.looks)} looks, so any false "
            "better/worse has at most 5 % chance per family over all looks")


def description(header: str, outcomes: list[FamilyOutcome]) -> str:
    """The parent run's description: the counts and each family's answers in words."""
    lines = [header.split("\n\n")[0], header.split("\n\n")[1]]
    for o in outcomes:
        lines.append(f"**{o.family.paper}** ({o.setting[0]}, Dirichlet {o.setting[1]:g}):")
        lines.append("\n".join(f"- {d.words(o.family.reference)}" for d in o.decisions))
    lines.append("Every row, the plots and how to read them: artifacts `report/table.md` and "
                 "`report/*.png`.")
    return "\n\n".join(lines) + "\n"


def explanation(reference: str, spec: SweepSpec) -> str:
    """How to read the report: families, verdicts, intervals, the exploratory table, regimes."""
    studies = "; ".join(f"`{m}`: study `{t}`" for m, t in spec.tuning.items())
    return (
        "**How to read this report.** A *family* is one paper's method (the reference) against "
        "that paper's own baselines, declared in the sweep file with its primary endpoint "
        "before anything ran. Each comparison pairs the two rows on the same seeds (a seed fixes "
        "partition, initial model, client sampling and batch order for every method) and tests "
        "the per-seed differences, reference − row: `better`/`worse` when the two-sided paired "
        "t-test rejects no difference, `equivalent` when two one-sided tests put the difference "
        "inside ±margin, `undecided` otherwise (with the smallest difference it could detect). "
        "Holm's step-down runs within a family only, at 5 % divided by the number of looks; the "
        "Δ interval is at the level Holm gave that comparison, so it excludes 0 exactly when the "
        "verdict is better or worse; an `equivalent` verdict shows its TOST (1 − 2α) interval, "
        "inside ±margin. Every interval is cut to its metric's range (a difference of "
        "accuracies to [-1, 1], an accuracy to [0, 1]); `no resolution at n = 3` where the "
        "interval or the detectable difference spans it. A verdict is `fragile` when its "
        "p-value lies within 10 % of its threshold. `training`: `climbing` when the mean change "
        "of test accuracy between the last two windows of k evaluations is at least "
        f"{MIN_CHANGE:g} and above {NOISE_SE:g} standard errors of its seed-to-seed spread, "
        "else `plateaued`. Differences equal on every seed get the exact sign-flip "
        "p-value (2/2^n), never 0. `best?`: only the reference, and only when its family's "
        "tests say it beats (or ties within ±margin) every baseline. A failed or diverged seed "
        "stays in its row and blocks the verdicts that need it. "
        "The exploratory table: mean over finished seeds ± half the 95 % Student-t interval; "
        "`detectable Δ vs ref`: the smallest difference to the "
        f"`{reference}` row a paired t-test at 5 % would detect with 80 % power at this n (a "
        "resolution, not a test); rounds to target: the median over seeds with seeds that "
        "never reached the target censored at the horizon, and how many reached it. Accuracy, "
        "worst-10 % and rounds to target are discrete (steps of one test sample, one client, "
        "one round), so ties between seeds are real. "
        "`regime`: `paper` only when the method's hyperparameters, local optimiser, data and "
        "horizon (rounds, clients, participation, model) are all its paper's; otherwise each "
        "part is named: `tuned` (a study chose it), `set` (by hand), `default` (fedcore's default "
        "experiment), `(horizon other)` (paper hyperparameters at another horizon). A value "
        "every row shares (the sweep's `set:`) labels no row."
        + (f" Tuned rows: {studies}." if studies else "")
        + " Personal columns: the personal models of personalised methods (blank for the "
        "others)."
    )
