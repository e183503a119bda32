"""The paper exports (fedcore.report.latex): a booktabs table per family with verdicts worded
from the reference's side, bold for the winner of a decided comparison, an exploratory table,
the width estimate that keeps a table inside a column, and the statistics statement."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from fedcore.report.latex import (
    CHAR_PT,
    COLUMN_WIDTH_PT,
    TABCOLSEP_PT,
    cell_width,
    exploratory_latex,
    family_latex,
    latex_escape,
    seeds_text,
    statistics_statement,
    tabular_width,
)

KW = {"reference": "FedAvg", "caption": "Server rules: FedAvg against its baselines",
      "label": "tab:rules", "header": "Acc.\\ last 5 (\\%)",
      "interval": "95 % Student-t interval over seeds", "test": "paired t-test on seeds",
      "correction": "Holm"}


def _rows() -> pd.DataFrame:
    return pd.DataFrame([
        {"row": "FedAvg", "is_reference": True, "mean": 0.8, "low": 0.79, "high": 0.81, "n": 5,
         "verdict": ""},
        {"row": "CRAFT", "is_reference": False, "mean": 0.85, "low": 0.84, "high": 0.86, "n": 5,
         "verdict": "worse"},  # FedAvg vs CRAFT: worse, so CRAFT wins
        {"row": "fed_prox & 50%", "is_reference": False, "mean": 0.78, "low": 0.76,
         "high": 0.8, "n": 5, "verdict": "better"},
        {"row": "SCAFFOLD", "is_reference": False, "mean": 0.80, "low": 0.795, "high": 0.805,
         "n": 5, "verdict": "equivalent"},
        {"row": "FedFV", "is_reference": False, "mean": 0.81, "low": 0.70, "high": 0.92,
         "n": 3, "verdict": "undecided"},
        {"row": "AFL", "is_reference": False, "mean": 0.7, "low": math.nan, "high": math.nan,
         "n": 1, "verdict": "undecided"},
    ])


def _body(tex: str) -> list[list[str]]:
    """The tabular's data rows split into cells (between \\midrule and \\bottomrule)."""
    inner = tex.split("\\midrule\n", 1)[1].split("    \\bottomrule", 1)[0]
    return [[c.strip() for c in re.split(r"(?<!\\)&", line.strip().removesuffix("\\\\"))]
            for line in inner.strip().splitlines()]


def test_the_table_is_a_booktabs_tabular_with_a_caption_label_and_short_header():
    tex = family_latex(_rows(), **KW)
    assert tex.count("\\begin{tabular}{@{}lrrl@{}}") == 1 and tex.count("\\end{tabular}") == 1
    for rule in ("\\toprule", "\\midrule", "\\bottomrule"):
        assert tex.count(rule) == 1
    assert "\\caption{Server rules: FedAvg against its baselines}" in tex
    assert "\\label{tab:rules}" in tex and "\\begin{table}[t]" in tex
    header = next(line for line in tex.splitlines() if "Method &" in line)
    assert [c.strip() for c in header.removesuffix("\\\\").split("&")] == [
        "Method", "Acc.\\ last 5 (\\%)", "$n$", "Verdict"]
    cells = {c[0]: c[1:] for c in _body(tex)}
    assert len(cells) == 6 and all(len(c) == 3 for c in cells.values())
    assert cells["FedAvg"] == ["80.00 $\\pm$ 1.00", "5", "reference"]
    assert cells["AFL"] == ["70.00", "1", "undecided"]  # one seed: no interval
    assert "the family's verdict of FedAvg against the row" in " ".join(tex.split())


def test_verdicts_are_the_references_and_bold_marks_the_winner():
    tex = family_latex(_rows(), **KW)
    cells = {c[0]: c[1:] for c in _body(tex)}
    assert cells["\\textbf{CRAFT}"] == ["\\textbf{85.00 $\\pm$ 1.00}", "5", "worse"]
    assert cells["fed\\_prox \\& 50\\%"][2] == "better"  # the reference won: not bold
    assert sum("\\textbf" in line for line in tex.splitlines()) == 1
    rows = _rows().assign(verdict="better")
    rows.loc[0, "verdict"] = ""
    bold = [c[0] for c in _body(family_latex(rows, **KW)) if c[0].startswith("\\textbf")]
    assert bold == ["\\textbf{FedAvg}"]  # better than every baseline: the reference


def test_names_are_escaped_and_lines_fit_the_source_width():
    tex = family_latex(_rows(), **KW)
    assert "fed\\_prox \\& 50\\%" in tex
    assert all(len(line) <= 88 for line in tex.splitlines())
    note = " ".join(tex.split("\\footnotesize", 1)[1].split())
    for text in ("95 \\% Student-t interval over seeds", "paired t-test on seeds", "Holm"):
        assert text in note
    assert latex_escape("a_b{c}~^\\") == "a\\_b\\{c\\}\\textasciitilde{}\\textasciicircum{}" \
        "\\textbackslash{}"


def test_the_width_estimate_counts_characters_markup_and_column_gaps():
    assert cell_width("abc") == pytest.approx(3 * CHAR_PT["lower"])
    assert cell_width("87.4 $\\pm$ 1") == pytest.approx(
        4 * CHAR_PT["digit"] + CHAR_PT["punct"] + 2 * CHAR_PT["space"] + CHAR_PT["wide"])
    assert cell_width("\\textbf{ab}") > cell_width("ab")
    assert cell_width("fed\\_prox") == pytest.approx(cell_width("fed_prox"))
    assert tabular_width([["ab", "1"], ["abcd", "12"]]) == pytest.approx(
        4 * CHAR_PT["lower"] + 2 * CHAR_PT["digit"] + 2 * TABCOLSEP_PT)


def test_a_table_too_wide_for_a_column_spans_both():
    wide = _rows().assign(row="a method with a very long name indeed, set by hand lr=0.1")
    tex = family_latex(wide, **KW)
    assert "\\begin{table*}[t]" in tex and "\\end{table*}" in tex
    assert "wider than \\columnwidth" in tex.splitlines()[1]
    assert "\\begin{table}[t]" in family_latex(_rows(), **KW)


def test_the_exploratory_table_has_no_verdicts():
    rows = _rows()[["row", "mean", "low", "high", "n"]]
    tex = exploratory_latex(rows, caption="Exploratory: every row", label="tab:x",
                            header="Acc.\\ last 5 (\\%)", interval="95 % t-interval")
    assert "\\begin{tabular}{@{}lrr@{}}" in tex and "\\label{tab:x}" in tex
    assert [len(c) for c in _body(tex)] == [3] * 6 and "\\textbf" not in tex
    assert "no row is tested" in " ".join(tex.split())


def test_bad_rows_are_one_line():
    with pytest.raises(ValueError, match="rows.verdict: unknown 'significant'; allowed"):
        family_latex(_rows().assign(verdict="significant"), **KW)
    with pytest.raises(ValueError, match="rows: missing column"):
        family_latex(_rows().drop(columns="n"), **KW)


def test_the_statistics_statement_is_filled_in():
    text = statistics_statement(seeds=5, endpoint="mean test accuracy of the last 3 evaluations",
                                interval="Student-t interval of the mean over seeds",
                                test="paired t-test", correction="Holm",
                                families=["server rules", "robust rules"],
                                equivalence_margin=0.01)
    for needle in ("Every row was run with 5 seeds.", "partition", "initial model",
                   "clients sampled in each round",
                   "mini-batches", "mean test accuracy of the last 3 evaluations",
                   "Student-t interval", "paired t-test", "Holm", "*server rules*, *robust rules*",
                   "±0.01", "normal", "discrete", "**Limits.**", "95% confidence", "5% level"):
        assert needle in text, needle
    assert "{" not in text and "}" not in text  # nothing left unfilled
    with pytest.raises(ValueError, match="seeds"):
        statistics_statement(seeds=0, endpoint="", interval="", test="", correction="",
                             families=["x"], equivalence_margin=0.0)


def test_the_statistics_statement_counts_seeds_per_row():
    counts = [3] * 13 + [5] * 28
    assert seeds_text(counts) == ("The rows were run with 3 to 5 seeds: 13 of 41 rows with 3, "
                                  "28 with 5 (each table's n column gives a row's).")
    text = statistics_statement(seeds=counts, endpoint="e", interval="i", test="t",
                                correction="c", families=["f"], equivalence_margin=0.01)
    assert "13 of 41 rows with 3" in text and "Every row" not in text
    assert "With 3 seeds this cannot be checked" in text
    assert seeds_text([1]) == "Every row was run with 1 seed."


def test_the_column_width_is_a_two_column_articles():
    assert COLUMN_WIDTH_PT == 241.0
