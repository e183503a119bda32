"""The claims table and its tally, in words: each claim's verdict with the seeds it was decided
at, or the difference it could detect."""

from __future__ import annotations

import math

from fedcore.stats.claims import VERDICTS, ClaimRow


def verdict_text(row: ClaimRow) -> str:
    """``holds (5 seeds)``, ``contradicted``, ``equivalent``, ``inconclusive (detects ±0.03)``,
    ``passes`` or ``fails``, with ``early training`` where the runs still climb."""
    c = row.comparison
    if row.measured.startswith("not judged: "):
        return f"{row.verdict} (a run diverged)"
    text = row.verdict
    if row.decided_at:
        text += f" ({row.decided_at} seeds)"
    elif row.verdict == "inconclusive" and c is not None and math.isfinite(c.detectable):
        text += f" (detects ±{c.detectable:.2g} at {c.n} seeds)"
    if row.training.startswith("early"):
        text += "; early training"
    return text


def markdown(rows: list[ClaimRow]) -> str:
    """The claims table: claim | kind | setting | regime | horizon | measured | verdict."""
    lines = ["| claim | kind | setting | regime | at the horizon | measured (mean [95 % "
             "interval] over seeds) | verdict |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.claim} | {r.kind} | {r.setting} | {r.regime} | {r.training or '—'} | "
              f"{r.measured} | **{verdict_text(r)}** |" for r in rows]
    return "\n".join(lines)


def tally(rows: list[ClaimRow]) -> str:
    """``claims: 2 hold, 1 contradicted, 5 inconclusive; implementation checks: 1 passes``."""
    parts = []
    for kinds, name in ((("claim", "robustness check"), "claims"),
                        (("implementation check",), "implementation checks")):
        mine = [r.verdict for r in rows if r.kind in kinds]
        if mine:
            counts = ", ".join(f"{mine.count(v)} {v}" for v in VERDICTS if v in mine)
            parts.append(f"{name}: {counts}")
    return "; ".join(parts)
