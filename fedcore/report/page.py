"""A sweep report's Markdown page: its header (counts, code, reference, endpoint, seed plan,
training state, early stops) and its body (the families, the ranking, the runs in MLflow, every
row), from plain data frames."""

from __future__ import annotations

import pandas as pd

from fedcore.report.exploratory import detectable_vs_reference, exploratory_table, markdown_table
from fedcore.report.families import endpoint_text, family_markdown
from fedcore.report.ranking import ranking_markdown
from fedcore.report.summary import training_header
from fedcore.report.text import counts_line, early_text, explanation, plan_text
from fedcore.specs.families import DEFAULT_ENDPOINT, ENDPOINTS
from fedcore.specs.sweep import SweepSpec
from fedcore.stats.looks import FamilyOutcome


def primary_endpoints(spec: SweepSpec) -> list[str]:
    """The sweep's primary endpoints in the order its families declare them (the default
    without families)."""
    return list(dict.fromkeys([f.endpoint for f in spec.families] or [DEFAULT_ENDPOINT]))


def header(spec: SweepSpec, runs: pd.DataFrame, table: pd.DataFrame,
           outcomes: list[FamilyOutcome], code_lines: str, reference_note: str) -> str:
    """The page's title and the lines above its sections."""
    return (f"# Sweep `{spec.name}`\n\n{counts_line(spec, runs, outcomes)}\n\n"
            + code_lines + reference_note
            + "**Primary endpoint** (declared in the sweep file before it ran): "
            + "; ".join(endpoint_text(runs, e) for e in primary_endpoints(spec))
            + f". **Seed plan**: {plan_text(spec.seed_plan)}.\n\n" + training_header(table)
            + early_text(runs))


def body(spec: SweepSpec, runs: pd.DataFrame, table: pd.DataFrame,
         outcomes: tuple[list[FamilyOutcome], list[FamilyOutcome]], reference: str,
         in_mlflow: str, epsilon_column: str) -> str:
    """The families (primary, secondary ``outcomes``), the ranking on the first primary
    endpoint, the runs in MLflow (``in_mlflow``) and the exploratory table of every row."""
    primary, secondary = outcomes
    families_md = family_markdown(primary, secondary, table, spec.seed_plan, runs)
    text = ("## Families: each paper's question\n\n" + families_md + "\n\n"
            if families_md else "*No comparison family is declared: the tables below are "
            "exploratory (no verdicts).*\n\n")
    first = primary_endpoints(spec)[0]
    text += ranking_markdown(table, ENDPOINTS[first][0], endpoint_text(runs, first),
                             higher=ENDPOINTS[first][1]) + "\n"
    text += in_mlflow
    pretty = exploratory_table(table, detectable_vs_reference(runs, reference),
                               epsilon_column=epsilon_column)
    text += ("## Every row (exploratory: means and intervals, no verdicts)\n\n"
             + markdown_table(pretty) + "\n\nThe other columns (Jain's index, the mean "
             "accuracy over evaluations, the clients' spread, the participation gap and the "
             "unseen-client counts, the personal models' details, the tuning study) are in "
             "`table.csv`, a line per row.\n\n"
             + explanation(reference, spec) + "\n")
    return text
