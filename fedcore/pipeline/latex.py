"""What a paper can paste: a booktabs table per family and the statistics statement.

``family_latex`` writes one family's rows (mean, half the interval shown, n, verdict) as a
LaTeX ``table`` holding a booktabs ``tabular``, bold only where the family's adjusted test says
better, with a note naming the interval, the test, the correction and the family.
``statistics_statement`` writes the paragraph the NeurIPS paper checklist asks for in its
item 7 (experiment statistical significance): what a seed varies, how many seeds, how the
intervals were computed, the assumptions and their limits. Pure text; nothing is compiled.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence

import pandas as pd

VERDICTS = ("better", "worse", "equivalent", "undecided", "")  # "": reference / exploratory
COLUMNS = ("row", "is_reference", "mean", "low", "high", "n", "verdict")
_ESCAPES = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    "<": r"\textless{}", ">": r"\textgreater{}",
}


def latex_escape(text: str) -> str:
    """``text`` with LaTeX's special characters escaped, for text mode."""
    return "".join(_ESCAPES.get(c, c) for c in str(text))


def _check_rows(rows: pd.DataFrame) -> None:
    missing = [c for c in COLUMNS if c not in rows.columns]
    if missing:
        raise ValueError(f"rows: missing column(s) {', '.join(missing)}; "
                         f"expected: {', '.join(COLUMNS)}")
    bad = sorted({str(v) for v in rows["verdict"] if v not in VERDICTS})
    if bad:
        raise ValueError(f"rows.verdict: unknown {', '.join(map(repr, bad))}; allowed: "
                         "better, worse, equivalent, undecided, or '' (reference, exploratory)")


def _value(mean: float, low: float, high: float, scale: float, digits: int) -> str:
    if math.isnan(mean):
        return "---"
    if math.isnan(low) or math.isnan(high):
        return f"{mean * scale:.{digits}f}"
    half = (high - low) / 2 * scale
    return f"{mean * scale:.{digits}f} $\\pm$ {half:.{digits}f}"


def family_latex(
    rows: pd.DataFrame,
    *,
    family: str,
    endpoint: str,
    interval: str,
    test: str,
    correction: str,
    scale: float = 100.0,
    digits: int = 2,
) -> str:
    """One family's booktabs table (needs ``\\usepackage{booktabs}``): columns method,
    endpoint as mean ± half the interval (times ``scale``: 100 shows accuracies in percent),
    n, verdict. Rows in the order given; the reference's verdict reads "reference", an
    exploratory row's "---". Bold (name and value) only where the verdict is "better"."""
    _check_rows(rows)
    unit = r" (\%)" if scale == 100.0 else ""
    lines = [
        f"% fedcore: {latex_escape(family)}; needs \\usepackage{{booktabs}}",
        r"\begin{table}[t]",
        r"  \centering",
        f"  \\caption{{{latex_escape(family)}: {latex_escape(endpoint)}}}",
        r"  \begin{tabular}{lrrl}",
        r"    \toprule",
        f"    Method & {latex_escape(endpoint)}{unit} & $n$ & Verdict \\\\",
        r"    \midrule",
    ]
    for r in rows.itertuples(index=False):
        name = latex_escape(str(r.row))
        value = _value(float(r.mean), float(r.low), float(r.high), scale, digits)
        verdict = "reference" if bool(r.is_reference) else (r.verdict or "---")
        if r.verdict == "better" and not bool(r.is_reference):
            name, value = f"\\textbf{{{name}}}", f"\\textbf{{{value}}}"
        lines.append(f"    {name} & {value} & {int(r.n)} & {verdict} \\\\")
    note = (f"Mean over seeds $\\pm$ half the {latex_escape(interval)}; $n$: seeds. Verdicts "
            f"against the reference: {latex_escape(test)}, {latex_escape(correction)} within "
            f"the family ``{latex_escape(family)}''. Bold: better than the reference after "
            "correction.")
    lines += [
        r"    \bottomrule",
        r"  \end{tabular}",
        r"  \par\smallskip",
        *textwrap.wrap(f"\\parbox{{\\linewidth}}{{\\footnotesize {note}}}", 86,
                       initial_indent="  ", subsequent_indent="    ",
                       break_long_words=False, break_on_hyphens=False),
        r"\end{table}",
    ]
    return "\n".join(lines) + "\n"


SOURCES = ("the partition of the data among the clients (and, with `dataset.holdout_clients`, "
           "which clients are held out)", "the initial model",
           "the clients sampled in each round", "the order of the mini-batches on each client")


def statistics_statement(
    *,
    seeds: int,
    endpoint: str,
    interval: str,
    test: str,
    correction: str,
    families: Sequence[str],
    equivalence_margin: float,
    confidence: float = 0.95,
) -> str:
    """A filled-in Markdown paragraph for the NeurIPS checklist's item 7 (statistical
    significance), from what the report used: the number of seeds, the endpoint, the interval,
    the test, the correction, the families and the equivalence margin (on the endpoint's
    scale)."""
    if seeds < 1:
        raise ValueError(f"seeds: must be at least 1 (got {seeds})")
    if not equivalence_margin >= 0:
        raise ValueError(f"equivalence_margin: must be >= 0 (got {equivalence_margin})")
    if not families:
        raise ValueError("families: at least one family is needed")
    fams = ", ".join(f"*{f}*" for f in families)
    sources = "; ".join(SOURCES)
    small = (f"With {seeds} seed{'s' if seeds != 1 else ''} this cannot be checked from the "
             "data, and a single outlying run (a diverged seed) moves the interval a lot.")
    return "\n".join([
        "# Statistics (NeurIPS paper checklist, item 7: experiment statistical significance)",
        "",
        f"**What the error bars capture.** Every configuration was run with {seeds} "
        f"seed{'s' if seeds != 1 else ''}. The seed fixes, and changing it varies together, "
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
