"""What `fedcore report` prints: the headline of summary.md, the header's warnings and the
paths, within 30 lines however many comparisons the sweep has."""

from __future__ import annotations

from pathlib import Path

from fedcore.report.headline import headline_lines

SUMMARY = "# Sweep `big`\n\n40 cells planned: 40 finished.\n\n**Paper** (digits, Dirichlet 0.1):"


def test_many_verdicts_are_cut_to_thirty_lines_with_a_count_of_the_rest():
    summary = SUMMARY + "\n\n" + "\n".join(f"- a vs b{i}: worse by 0.1" for i in range(50)) + (
        "\n\nEvery row, the plots and how to read them: artifacts `report/table.md`.\n")
    header = ("# Sweep `big`\n\n**Warning: these rows were made by 2 versions of the code; "
              "their numbers may not be comparable.**\n\n**Reference row**: `a`, the sweep's "
              "first row.\n\n## Every row\n\n**Warning** not of the header\n")
    out = Path("/r/big")
    files = [out / n for n in ("table.md", "table.html", "summary.md", "forest.png")]
    lines = headline_lines(summary, header, out, files)
    assert len(lines) <= 30
    assert lines[:3] == ["# Sweep `big`", "40 cells planned: 40 finished.",
                         "**Paper** (digits, Dirichlet 0.1):"]
    assert "... 32 more lines in summary.md" in lines
    assert sum(line.startswith("**Warning") for line in lines) == 1
    assert any(line.startswith("**Reference row**: `a`") for line in lines)
    assert "4 files in /r/big:" in lines
    assert "  table.md, table.html, summary.md and 1 plots and tables" in lines
    assert not any(line.startswith("Every row, the plots") for line in lines)


def test_a_sweep_without_families_says_where_its_rows_are():
    lines = headline_lines(SUMMARY.rsplit("\n\n", 1)[0], "", Path("/r"), [Path("/r/table.md")])
    assert lines[2].startswith("No comparison family is declared")
