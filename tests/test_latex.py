"""The paper exports (fedcore.pipeline.latex): a booktabs table per family, bold only where the
verdict is better, and the checklist's statistics statement."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from fedcore.pipeline.latex import family_latex, latex_escape, statistics_statement

KW = {"family": "server rules", "endpoint": "final accuracy",
      "interval": "95 % Student-t interval over seeds", "test": "paired t-test on seeds",
      "correction": "Holm"}


def _rows() -> pd.DataFrame:
    return pd.DataFrame([
        {"row": "fedavg", "is_reference": True, "mean": 0.8, "low": 0.79, "high": 0.81, "n": 5,
         "verdict": ""},
        {"row": "craft", "is_reference": False, "mean": 0.85, "low": 0.84, "high": 0.86, "n": 5,
         "verdict": "better"},
        {"row": "fed_prox & 50%", "is_reference": False, "mean": 0.78, "low": 0.76,
         "high": 0.8, "n": 5, "verdict": "worse"},
        {"row": "scaffold", "is_reference": False, "mean": 0.80, "low": 0.795, "high": 0.805,
         "n": 5, "verdict": "equivalent"},
        {"row": "fedfv", "is_reference": False, "mean": 0.81, "low": 0.70, "high": 0.92,
         "n": 3, "verdict": "undecided"},
        {"row": "afl", "is_reference": False, "mean": 0.7, "low": math.nan, "high": math.nan,
         "n": 1, "verdict": ""},
    ])


def _body(tex: str) -> list[list[str]]:
    """The tabular's data rows split into cells (between \\midrule and \\bottomrule)."""
    inner = tex.split("\\midrule\n", 1)[1].split("    \\bottomrule", 1)[0]
    return [re.split(r"(?<!\\)&", line.strip().removesuffix("\\\\"))
            for line in inner.strip().splitlines()]


def test_the_table_is_a_booktabs_tabular_with_four_columns():
    tex = family_latex(_rows(), **KW)
    assert tex.count("\\begin{tabular}{lrrl}") == 1 and tex.count("\\end{tabular}") == 1
    for rule in ("\\toprule", "\\midrule", "\\bottomrule"):
        assert tex.count(rule) == 1
    header = next(line for line in tex.splitlines() if "Verdict" in line)
    assert [c.strip() for c in header.removesuffix("\\\\").split("&")] == [
        "Method", "final accuracy (\\%)", "$n$", "Verdict"]
    body = _body(tex)
    assert len(body) == 6 and all(len(cells) == 4 for cells in body)
    cells = {c[0].strip(): [x.strip() for x in c[1:]] for c in body}
    assert cells["fedavg"] == ["80.00 $\\pm$ 1.00", "5", "reference"]
    assert cells["afl"] == ["70.00", "1", "---"]  # no interval, exploratory
    assert cells["fedfv"][2] == "undecided"


def test_bold_only_on_better_rows():
    tex = family_latex(_rows(), **KW)
    bold = [line for line in tex.splitlines() if "\\textbf" in line]
    assert len(bold) == 1 and bold[0].strip().startswith("\\textbf{craft} & \\textbf{85.00")
    rows = _rows().assign(verdict="better")
    rows.loc[0, "verdict"] = ""
    assert sum("\\textbf" in line for line in family_latex(rows, **KW).splitlines()) == 5


def test_names_are_escaped_and_the_note_names_interval_test_correction_family():
    tex = family_latex(_rows(), **KW)
    assert "fed\\_prox \\& 50\\%" in tex
    lines = tex.splitlines()
    start = next(i for i, line in enumerate(lines) if "footnotesize" in line)
    end = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith("}"))
    note = " ".join(line.strip() for line in lines[start:end + 1])  # wrapped to fit 88 columns
    assert all(len(line) <= 88 for line in lines)
    for text in ("95 \\% Student-t interval over seeds", "paired t-test on seeds", "Holm",
                 "server rules"):
        assert text in note
    assert latex_escape("a_b{c}~^\\") == "a\\_b\\{c\\}\\textasciitilde{}\\textasciicircum{}" \
        "\\textbackslash{}"


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
    for needle in ("5 seeds", "partition", "initial model", "clients sampled in each round",
                   "mini-batches", "mean test accuracy of the last 3 evaluations",
                   "Student-t interval", "paired t-test", "Holm", "*server rules*, *robust rules*",
                   "±0.01", "normal", "discrete", "**Limits.**", "95% confidence", "5% level"):
        assert needle in text, needle
    assert "{" not in text and "}" not in text  # nothing left unfilled
    with pytest.raises(ValueError, match="seeds"):
        statistics_statement(seeds=0, endpoint="", interval="", test="", correction="",
                             families=["x"], equivalence_margin=0.0)
