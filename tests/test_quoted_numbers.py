"""The README quotes the main job only from the generated report of the shipped run: its block
between the ``main-report`` markers is what scripts/ship_main_report.py derives from
docs/benchmarks/main-report.md, its prose carries no other number, and the shipped report's
answers are those of the whole report in docs/report-example/."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAIN_REPORT = ROOT / "docs" / "benchmarks" / "main-report.md"
FULL_REPORT = ROOT / "docs" / "report-example" / "table.md"
README_MAX_LINES = 160


CONFIRMATION_HEAD = "## Confirmation on fresh seeds"


def _ship():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("ship", ROOT / "scripts" / "ship_main_report.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prose(markdown: str) -> str:
    """The text a reader reads as prose: no code, no generated blocks, no link targets."""
    text = re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)
    text = re.sub(r"<!-- (\S+):start.*?<!-- \1:end -->", "", text, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    return re.sub(r"\]\([^)]*\)|https?://\S+", "]", text)


def test_the_readme_block_is_generated_from_the_shipped_report():
    ship = _ship()
    values = ship.read_facts(MAIN_REPORT.read_text())
    assert set(values) >= {"date", "commit", "machine", "time after set-up", "cells",
                           "comparisons"}
    readme = README.read_text()
    assert ship.readme_block(values) in readme, (
        "README.md's main-report block differs from docs/benchmarks/main-report.md: run "
        "`.venv/bin/python scripts/ship_main_report.py --readme`")


def test_the_readme_prose_quotes_no_other_number():
    numbers = re.findall(r"[^\s]*\d[^\s]*", prose(README.read_text()))
    assert numbers == [], f"numbers in README.md outside the generated quote: {numbers}"


def test_the_prose_filter_can_see_a_number():
    assert re.findall(r"\d+", prose("It took 4 min.\n`rounds=5` [a](b2.md)")) == ["4"]


def test_the_readme_is_short():
    assert len(README.read_text().splitlines()) <= README_MAX_LINES


def _screening(page: str) -> str:
    return page.split(CONFIRMATION_HEAD)[0]


def test_the_shipped_answers_are_the_whole_reports():
    shipped, full = _screening(MAIN_REPORT.read_text()), FULL_REPORT.read_text()
    counts = _ship().read_facts(shipped)["cells"]
    assert counts in full.split("\n\n")[1]
    answers = [line for line in shipped.splitlines() if line.startswith("- ") and " vs " in line]
    assert answers
    missing = [line for line in answers if line not in full]
    assert not missing, f"main-report.md answers not in docs/report-example/table.md: {missing}"


def test_the_shipped_confirmation_is_its_whole_report():
    page = MAIN_REPORT.read_text()
    assert CONFIRMATION_HEAD in page, "the main job's report carries its confirmation"
    full = (MAIN_REPORT.parent.parent / "report-example" / "confirmation" / "table.md").read_text()
    answers = [line for line in page.split(CONFIRMATION_HEAD)[1].splitlines()
               if line.startswith("- ") and " vs " in line]
    assert answers and all(line in full for line in answers)
    ship = _ship()
    confirmed = ship.read_facts(page)["confirmation"]
    assert confirmed.startswith(ship.confirmation_section(_screening(page), page.split(
        CONFIRMATION_HEAD)[1])[0] + " (its run took ")


def test_a_confirmation_is_set_beside_its_screening():
    ship = _ship()
    screening = ("# Sweep\n\n2 cells.\n\n- a vs b: worse by 0.1 [-0.2, -0.05], decided at 3 "
                 "seeds\n- a vs c: better by 0.2 [+0.1, +0.3], decided at 5 seeds\n"
                 "- a vs d: undecided at 5 seeds (+0.001 [-0.01, +0.01])\n")
    confirmation = screening.replace("better by 0.2 [+0.1, +0.3]", "undecided at 5")
    fact, text = ship.confirmation_section(screening, confirmation)
    assert fact == "1 of 2 decided verdicts confirmed on fresh seeds"
    assert "| a vs b | worse | worse | confirmed |" in text
    assert "| a vs c | better | undecided | not confirmed |" in text
    assert "| a vs d | undecided | undecided | — |" in text


def test_the_decided_count_is_the_answers():
    shipped = _screening(MAIN_REPORT.read_text())
    answers = [line for line in shipped.splitlines() if line.startswith("- ") and " vs " in line]
    decided = [a for a in answers if "decided at" in a and "undecided" not in a]
    quoted = _ship().read_facts(shipped)["comparisons"]
    assert quoted == f"{len(decided)} of {len(answers)} decided"


def test_the_latex_example_on_the_paper_page_is_the_generated_file():
    page = (ROOT / "docs" / "explanation" / "paper-results.md").read_text()
    block = page.split("```latex\n", 1)[1].split("```\n", 1)[0]
    assert block == (ROOT / "docs" / "paper-example" / "table.tex").read_text().rstrip("\n") + "\n"


SUMMARY = """# Sweep `main`

6 cells planned: 5 finished, 1 diverged or failed (kept in their rows).

**CRAFT** (digits, Dirichlet 0.1):

- craft vs fedavg: worse by 0.447 [-0.664, -0.230], decided at 5 seeds
- craft vs qfedavg: undecided at 5 seeds (-0.001 [-0.141, +0.139]; detects ±0.184 at this n)

Every row, the plots and how to read them: artifacts `report/table.md` and `report/*.png`.
"""


def test_a_report_summary_becomes_facts_the_readme_block_quotes(tmp_path):
    ship = _ship()
    values = ship.facts(257, SUMMARY)
    assert values["time after set-up"] == "4 min 17 s"
    assert values["cells"] == ("6 cells planned: 5 finished, 1 diverged or failed (kept in "
                               "their rows).")
    assert values["comparisons"] == "1 of 2 decided"
    page = ship.main_report(values, SUMMARY)
    assert ship.read_facts(page) == values
    assert "- craft vs fedavg: worse by 0.447 [-0.664, -0.230], decided at 5 seeds" in page
    assert "[the whole report](../report-example/table.md)" in page
    readme = f"intro\n\n{ship.START} -->\nold\n{ship.END}\n\nrest\n"
    block = ship.readme_block(values)
    assert ship.with_readme_block(readme, block) == f"intro\n\n{block}\n\nrest\n"
    assert "4 min 17 s" in block and "1 of 2 decided" in block


def test_the_shipped_page_says_what_qualifies_the_answers():
    shipped, full = MAIN_REPORT.read_text(), FULL_REPORT.read_text()
    state = next(line for line in full.splitlines() if line.startswith("**Training state"))
    assert state in shipped
    references = [line.split("|")[1].strip().strip("*").split("**")[0].strip()
                  for line in full.splitlines() if "(reference) |" in line]
    assert references and all(f"- `{r}`: " in shipped for r in references)
    assert "data scaled" in shipped and "horizon other" in shipped
