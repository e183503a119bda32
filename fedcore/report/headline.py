"""What ``fedcore report`` prints: the headline verdicts and where the files are, never the
whole table (it is in ``table.md``)."""

from __future__ import annotations

from pathlib import Path

MAX_VERDICT_LINES = 22  # the summary's lines printed (the rest are in summary.md): with the
# header's notes and the paths, at most 30 lines


NOTES = ("**Warning", "**Reference row**")  # header lines printed too


def headline_lines(summary: str, table_md: str, out: Path, files: list[Path]) -> list[str]:
    """The lines to print: the summary's title, counts and verdicts (``summary.md`` without
    its closing pointer, cut at MAX_VERDICT_LINES with a count of the rest), the warnings and
    the reference note of ``table_md``'s header, then the report's folder and its files."""
    lines = [line for line in summary.splitlines()
             if line.strip() and not line.startswith("Every row, the plots")]
    if len(lines) > MAX_VERDICT_LINES:
        rest = len(lines) - (MAX_VERDICT_LINES - 1)
        lines = lines[:MAX_VERDICT_LINES - 1] + [f"... {rest} more lines in summary.md"]
    if len(lines) <= 2:  # title and counts only
        lines.append("No comparison family is declared: the rows are compared in table.md "
                     "(exploratory, no verdicts).")
    header = table_md.split("\n## ")[0]
    lines += [line for line in header.splitlines() if line.startswith(NOTES)]
    names = {f.name for f in files}
    main = [name for name in ("table.md", "table.html", "table.csv", "summary.md",
                              "families.tex", "statistics.md") if name in names]
    lines += ["", f"{len(files)} files in {out}:",
              "  " + ", ".join(main) + (f" and {len(files) - len(main)} plots and tables"
                                       if len(files) > len(main) else ""),
              f"  every row, the plots and how to read them: {out / 'table.md'}"]
    return lines
