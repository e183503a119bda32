"""What a paper can paste: a booktabs table per family and the statistics statement.

``family_latex`` writes one family's rows (mean, half the interval shown, n, verdict) as a
LaTeX ``table`` holding a booktabs ``tabular`` with a caption in words and a ``\\label``; the
verdict is the family's, worded from the reference's side as the Markdown report words it
(``CRAFT vs FedAvg: worse``), and bold marks the winner of a decided comparison. A note under
the table names the interval, the test and the correction. ``exploratory_latex`` writes the
rows of a sweep without families (means, intervals and n, no verdicts).
``statistics_statement`` writes the paragraph the NeurIPS paper checklist asks for in its item 7
(experiment statistical significance). Pure text; nothing is compiled.

Every table is meant to fit ``\\columnwidth`` of a two-column article (241 pt, e.g. ACM's
``sigconf``; IEEEtran's 252 pt): the tabular is set in ``\\small`` with ``\\tabcolsep`` 4 pt
and no outer padding. ``tabular_width`` estimates its typeset width from the characters of each
column (``CHAR_PT``); a table estimated wider is written as ``table*``, across both columns.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Sequence

import pandas as pd

VERDICTS = ("better", "worse", "equivalent", "undecided", "")  # "": the reference
COLUMNS = ("row", "is_reference", "mean", "low", "high", "n", "verdict")
EXPLORATORY_COLUMNS = ("row", "mean", "low", "high", "n")
_ESCAPES = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    "<": r"\textless{}", ">": r"\textgreater{}",
}
COLUMN_WIDTH_PT = 241.0  # \columnwidth of a two-column article (ACM sigconf: 241.1 pt)
TABCOLSEP_PT = 4.0  # set inside the tables (LaTeX's default is 6 pt)
# Estimated width in pt of one character typeset in \small (9 pt Computer Modern in a 10 pt
# article), on the wide side of cmr9's metrics: digits are 0.514 em (4.6 pt), lower-case letters
# average about 0.5 em (4.5 pt; 5.0 here), capitals about 0.72 em (6.5 pt; 7.0 here).
CHAR_PT = {"digit": 4.7, "lower": 5.0, "upper": 7.0, "space": 3.1, "punct": 3.5,
           "wide": 8.0}  # wide: ±, %, em dash, m, w
BOLD = 1.15  # bold extended (cmbx) is about 10-15 % wider than roman
_WIDE = set("±%—mwMW")
_MARKUP = [(r"\$\\pm\$", "±"), (r"\\%", "%"), (r"\\&", "&"), (r"\\_", "_"), (r"\\#", "#"),
           (r"\\\$", "$"), (r"---", "—"), (r"\\ ", " "), (r"\\textasciitilde\{\}", "~"),
           (r"\\textasciicircum\{\}", "^"), (r"\\textbackslash\{\}", "/"),
           (r"\\textless\{\}", "<"), (r"\\textgreater\{\}", ">")]


def latex_escape(text: str) -> str:
    """``text`` with LaTeX's special characters escaped, for text mode."""
    return "".join(_ESCAPES.get(c, c) for c in str(text))


def char_width(c: str) -> float:
    """The estimated width in pt of one character in \\small (``CHAR_PT``)."""
    if c in _WIDE:
        return CHAR_PT["wide"]
    if c.isdigit():
        return CHAR_PT["digit"]
    if c.isspace():
        return CHAR_PT["space"]
    if c.isupper():
        return CHAR_PT["upper"]
    if c.isalpha():
        return CHAR_PT["lower"]
    return CHAR_PT["punct"]


def cell_width(cell: str) -> float:
    """The estimated typeset width in pt of one tabular cell's LaTeX source in \\small: its
    markup (``\\textbf``, ``$\\pm$``, escapes, ``$n$``) read as the characters it prints."""
    text, bold = cell.strip(), False
    if text.startswith("\\textbf{") and text.endswith("}"):
        text, bold = text[len("\\textbf{"):-1], True
    for pattern, printed in _MARKUP:
        text = re.sub(pattern, printed, text)
    text = re.sub(r"\\[a-zA-Z]+\*?", "", text).replace("{", "").replace("}", "").replace("$", "")
    return sum(map(char_width, text)) * (BOLD if bold else 1.0)


def tabular_width(cells: Sequence[Sequence[str]], tabcolsep: float = TABCOLSEP_PT) -> float:
    """The estimated width in pt of a ``@{}...@{}`` tabular of ``cells`` (rows of LaTeX cell
    sources, header included): each column as wide as its widest cell, plus ``2 tabcolsep``
    between two columns."""
    columns = max((len(r) for r in cells), default=0)
    widest = [max((cell_width(r[i]) for r in cells if i < len(r)), default=0.0)
              for i in range(columns)]
    return sum(widest) + 2 * tabcolsep * max(0, columns - 1)


def label_key(text: str) -> str:
    """``text`` as a ``\\label`` key part: letters, digits, ``.`` and ``-`` only."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", str(text)).strip("-").lower() or "x"


def _check_rows(rows: pd.DataFrame, columns: Sequence[str] = COLUMNS) -> None:
    missing = [c for c in columns if c not in rows.columns]
    if missing:
        raise ValueError(f"rows: missing column(s) {', '.join(missing)}; "
                         f"expected: {', '.join(columns)}")
    if "verdict" not in columns:
        return
    bad = sorted({str(v) for v in rows["verdict"] if v not in VERDICTS})
    if bad:
        raise ValueError(f"rows.verdict: unknown {', '.join(map(repr, bad))}; allowed: "
                         "better, worse, equivalent, undecided, or '' (the reference)")


def _value(mean: float, low: float, high: float, scale: float, digits: int) -> str:
    if math.isnan(mean):
        return "---"
    if math.isnan(low) or math.isnan(high):
        return f"{mean * scale:.{digits}f}"
    half = (high - low) / 2 * scale
    return f"{mean * scale:.{digits}f} $\\pm$ {half:.{digits}f}"


def _table(cells: list[list[str]], *, spec: str, caption: str, label: str, note: str,
           what: str) -> str:
    """A ``table`` (``table*`` when estimated wider than a column) of the tabular ``cells``
    (header first), with its caption, label and note."""
    width = tabular_width(cells)
    env = "table" if width <= COLUMN_WIDTH_PT else "table*"
    fits = (f"estimated width {width:.0f} pt, fits \\columnwidth ({COLUMN_WIDTH_PT:g} pt)"
            if env == "table" else f"estimated width {width:.0f} pt, wider than \\columnwidth "
            f"({COLUMN_WIDTH_PT:g} pt): table* across both columns")
    wrap = {"width": 86, "break_long_words": False, "break_on_hyphens": False}
    lines = [
        f"% fedcore: {what}; needs \\usepackage{{booktabs}}",
        f"% {fits}",
        f"\\begin{{{env}}}[t]",
        r"  \centering",
        *textwrap.wrap(f"\\caption{{{caption}}}", initial_indent="  ",
                       subsequent_indent="    ", **wrap),  # type: ignore[arg-type]
        f"  \\label{{{label}}}",
        f"  {{\\small\\setlength{{\\tabcolsep}}{{{TABCOLSEP_PT:g}pt}}%",
        f"  \\begin{{tabular}}{{@{{}}{spec}@{{}}}}",
        r"    \toprule",
        "    " + " & ".join(cells[0]) + r" \\",
        r"    \midrule",
        *("    " + " & ".join(r) + r" \\" for r in cells[1:]),
        r"    \bottomrule",
        r"  \end{tabular}}",
        r"  \par\smallskip",
        *textwrap.wrap(f"\\parbox{{\\linewidth}}{{\\footnotesize {note}}}",
                       initial_indent="  ", subsequent_indent="    ",
                       **wrap),  # type: ignore[arg-type]
        f"\\end{{{env}}}",
    ]
    return "\n".join(lines) + "\n"


def family_latex(
    rows: pd.DataFrame,
    *,
    reference: str,
    caption: str,
    label: str,
    header: str,
    interval: str,
    test: str,
    correction: str,
    scale: float = 100.0,
    digits: int = 2,
) -> str:
    """One family's booktabs table (needs ``\\usepackage{booktabs}``): columns method, the
    endpoint (``header``, LaTeX) as mean ± half the interval (times ``scale``: 100 shows
    accuracies in percent), n, and the family's verdict of ``reference`` (the reference row's
    name as printed) against the row, as the Markdown report words it; the reference's own row
    reads "reference". Rows in the order given, names as given (escaped here). Bold (name and
    value): a row the reference is worse than, and the reference when it is better than every
    other row. ``caption`` (plain text, escaped here) and ``label`` (a ``\\label`` key) name
    the table."""
    _check_rows(rows)
    ref = latex_escape(reference)
    verdicts = [str(v) for v, is_ref in zip(rows["verdict"], rows["is_reference"], strict=True)
                if not bool(is_ref)]
    best = bool(verdicts) and all(v == "better" for v in verdicts)
    cells = [["Method", header, "$n$", "Verdict"]]
    for r in rows.itertuples(index=False):
        name = latex_escape(str(r.row))
        value = _value(float(r.mean), float(r.low), float(r.high), scale, digits)
        verdict = "reference" if bool(r.is_reference) else (r.verdict or "---")
        if (r.verdict == "worse" and not bool(r.is_reference)) or (
                bool(r.is_reference) and best):
            name, value = f"\\textbf{{{name}}}", f"\\textbf{{{value}}}"
        cells.append([name, value, str(int(r.n)), verdict])
    note = (f"Mean over seeds $\\pm$ half the {latex_escape(interval)}; $n$: seeds. Verdict: "
            f"the family's verdict of {ref} against the row ({ref} better, worse, equivalent "
            f"or undecided; {latex_escape(test)}, {latex_escape(correction)}). Bold: the "
            "winner of a decided comparison.")
    return _table(cells, spec="lrrl", caption=latex_escape(caption), label=label, note=note,
                  what=latex_escape(caption.split(":")[0]))


def exploratory_latex(
    rows: pd.DataFrame,
    *,
    caption: str,
    label: str,
    header: str,
    interval: str,
    scale: float = 100.0,
    digits: int = 2,
) -> str:
    """The booktabs table of rows no family compares (a sweep without families): method,
    the endpoint (``header``) as mean ± half the interval and n, in the order given, no
    verdicts and no bold."""
    _check_rows(rows, EXPLORATORY_COLUMNS)
    cells = [["Method", header, "$n$"]]
    for r in rows.itertuples(index=False):
        cells.append([latex_escape(str(r.row)),
                      _value(float(r.mean), float(r.low), float(r.high), scale, digits),
                      str(int(r.n))])
    note = (f"Mean over seeds $\\pm$ half the {latex_escape(interval)}; $n$: seeds. "
            "Exploratory: no comparison was declared before the runs, so no row is tested.")
    return _table(cells, spec="lrr", caption=latex_escape(caption), label=label, note=note,
                  what=latex_escape(caption.split(":")[0]))


def seeds_text(counts: Sequence[int]) -> str:
    """How many seeds the rows ran: ``Every row was run with 5 seeds.``, or, when they
    differ, ``The rows were run with 3 to 5 seeds: 13 of 41 rows with 3, 28 with 5 (each
    table's n column gives a row's).``"""
    tally = {n: counts.count(n) for n in sorted(set(counts))}
    if len(tally) == 1:
        n = counts[0]
        return f"Every row was run with {n} seed{'s' if n != 1 else ''}."
    parts = [f"{k} of {len(counts)} rows with {n}" if i == 0 else f"{k} with {n}"
             for i, (n, k) in enumerate(tally.items())]
    return (f"The rows were run with {min(tally)} to {max(tally)} seeds: {', '.join(parts)} "
            "(each table's n column gives a row's).")


SOURCES = ("the partition of the data among the clients (and, with `dataset.holdout_clients`, "
           "which clients are held out)", "the initial model",
           "the clients sampled in each round", "the order of the mini-batches on each client")


def statistics_statement(
    *,
    seeds: int | Sequence[int],
    endpoint: str,
    interval: str,
    test: str,
    correction: str,
    families: Sequence[str],
    equivalence_margin: float,
    confidence: float = 0.95,
) -> str:
    """A filled-in Markdown paragraph for the NeurIPS checklist's item 7 (statistical
    significance), from what the report used: the seeds of each row (one count for all), the
    endpoint, the interval, the test, the correction, the families and the equivalence margin
    (on the endpoint's scale)."""
    counts = [seeds] if isinstance(seeds, int) else list(seeds)
    if not counts or min(counts) < 1:
        raise ValueError(f"seeds: every row needs at least 1 seed (got {seeds})")
    if not equivalence_margin >= 0:
        raise ValueError(f"equivalence_margin: must be >= 0 (got {equivalence_margin})")
    if not families:
        raise ValueError("families: at least one family is needed")
    fams = ", ".join(f"*{f}*" for f in families)
    sources = "; ".join(SOURCES)
    fewest = min(counts)
    small = (f"With {fewest} seed{'s' if fewest != 1 else ''} this cannot be checked from the "
             "data, and a single outlying run (a diverged seed) moves the interval a lot.")
    return "\n".join([
        "# Statistics (NeurIPS paper checklist, item 7: experiment statistical significance)",
        "",
        f"**What the error bars capture.** {seeds_text(counts)} The seed fixes, and changing "
        "it varies together, "
        f"four sources of randomness: {sources} (and any randomness of the method itself, such "
        "as added noise). Methods run at the same seed share all four, so every comparison "
        "with the reference is paired by seed. The error bars do not capture other datasets "
        "or models, other hyperparameters, or differences between hardware: on one device and "
        "engine a seed reproduces its run bit for bit.",
        "",
        f"**Endpoint.** {endpoint}. It was fixed before the results were seen; no round or "
        "hyperparameter was selected on the test set (tuned hyperparameters, where any were "
        "used, were chosen on seeds 1000 and above, disjoint from the seeds reported).",
        "",
        f"**How the intervals were computed.** {interval}. They are {confidence:.0%} "
        "confidence intervals "
        "of the mean over seeds, not standard deviations or standard errors; the tables show "
        "the mean plus or minus half the interval.",
        "",
        f"**Test and correction.** {test}, against the family's reference, adjusted with "
        f"{correction} over the comparisons of each family ({fams}); a family is one table. "
        f"*Better* or *worse*: the adjusted test rejects equality at the {1 - confidence:.0%} "
        "level, in that "
        f"direction. *Equivalent*: two one-sided tests (TOST) at the same adjusted level put "
        f"the difference inside ±{equivalence_margin:g} (on the endpoint's scale). *Undecided*: "
        "neither; more seeds may decide it, but only at looks fixed before the first result.",
        "",
        "**Assumptions.** The t-based intervals and the paired test assume that the per-seed "
        f"differences are roughly normal. {small} Accuracy is discrete: on a test set of N "
        "samples it moves in steps of 1/N, so two methods can tie exactly, and a method "
        "whose seeds all score the same has a zero-width interval that understates its "
        "uncertainty.",
        "",
        "**Limits.** The seeds are a sample of this setup's randomness, not of datasets or "
        "tasks: the intervals say how far the reported means would move under new seeds of the "
        "same experiment, not how the methods rank elsewhere. The correction covers the rows "
        "of one family, not all tables of the paper together.",
        "",
    ])
