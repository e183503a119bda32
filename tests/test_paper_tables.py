"""families.tex of a main-job-shaped report (fedcore.report.paper_tables): every table fits a
two-column article's \\columnwidth, methods by their papers' names, k in the header, a label
per table, no ids in captions, verdicts from the reference's side; an exploratory table for a
sweep without families; compiled by pdflatex where it is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedcore.core.config import read_yaml
from fedcore.report.latex import COLUMN_WIDTH_PT, tabular_width
from fedcore.report.paper_tables import families_tex
from fedcore.specs.families import SeedPlan, parse_families
from fedcore.specs.papers import display_name, methods
from fedcore.specs.protocols import parse_protocols
from fedcore.stats.comparison import with_intervals
from fedcore.stats.looks import family_outcomes

ROOT = Path(__file__).resolve().parent.parent
MAIN = ROOT / "configs" / "sweeps" / "main.yaml"
SEEDS = (0, 1, 2, 3, 4)


def main_shaped() -> tuple[list, pd.DataFrame]:
    """The main job's families over made-up runs (5 seeds, every row; one diverged seed) and
    the report's summary table of them."""
    raw = read_yaml(MAIN)
    families = parse_families(raw["families"], "main",
                              parse_protocols(raw.get("protocols"), MAIN, "main"))
    rng = np.random.default_rng(0)
    records = []
    for fam in families:
        for i, row in enumerate(fam.rows):
            for seed in SEEDS:
                records.append({"row": row, "dataset": "digits", "alpha": fam.alpha,
                                "seed": seed, "status": "FINISHED", "failure": "",
                                "rounds": 10_000, "accuracy_last_k": float(np.clip(
                                    0.97 - 0.011 * i + rng.normal(0, 0.004), 0, 1))})
    runs = pd.DataFrame(records).drop_duplicates(["row", "dataset", "alpha", "seed"])
    runs.loc[runs.index[-1], ["status", "accuracy_last_k"]] = ["FAILED", np.nan]
    outcomes = family_outcomes(runs, families, SeedPlan(SEEDS, (3, 5)))
    table = with_intervals(runs, ["accuracy_last_k"], ["row", "dataset", "alpha"],
                           {"accuracy_last_k": (0.0, 1.0)})
    return outcomes, table


def tables(tex: str) -> list[str]:
    return re.findall(r"\\begin\{table\*?\}.*?\\end\{table\*?\}", tex, re.S)


def tabular_cells(table: str) -> list[list[str]]:
    inner = table.split("\\toprule\n", 1)[1].split("\\bottomrule", 1)[0]
    return [[c.strip() for c in re.split(r"(?<!\\)&", line.strip().removesuffix("\\\\"))]
            for line in inner.splitlines() if "&" in line]


def test_every_family_table_of_the_main_job_fits_a_column():
    outcomes, table = main_shaped()
    tex = families_tex(outcomes, table, 5, "Holm at 5 % / 2 look(s) within the family")
    found = tables(tex)
    assert len(found) == len(outcomes) == 6
    for t in found:
        width = tabular_width(tabular_cells(t))
        assert width <= COLUMN_WIDTH_PT, (width, t.splitlines()[2])
        assert t.startswith("\\begin{table}[t]")


def test_the_tables_speak_the_papers_language():
    outcomes, table = main_shaped()
    tex = families_tex(outcomes, table, 5, "Holm")
    for t in tables(tex):
        caption = re.search(r"\\caption\{(.*?)\}\n  \\label", t, re.S)
        assert caption, t
        text = " ".join(caption.group(1).split())
        assert "\\_" not in text and "craft_tuned" not in text  # no ids in captions
        assert len(re.findall(r"\\label\{tab:[a-z0-9.-]+\}", t)) == 1
        header = tabular_cells(t)[0]
        assert header[1] == "Acc.\\ last 5 (\\%)"
        names = [c[0].removeprefix("\\textbf{").removesuffix("}") for c in tabular_cells(t)[1:]]
        assert all("\\_" not in n and "@" not in n for n in names), names  # no code names
    shown = re.sub(r"\\label\{.*?\}", "", tex.split("\\begin{table}", 1)[1])
    assert "SA-PEF" in tex and "sapef" not in shown.lower()  # ids only in the labels
    assert "CRAFT (tuned)" in tex and "FedAvg (tuned)" in tex
    labels = re.findall(r"\\label\{(.*?)\}", tex)
    assert len(labels) == len(set(labels)) == 6


def test_verdicts_read_from_the_references_side():
    outcomes, table = main_shaped()
    craft = next(o for o in outcomes if o.family.name == "craft")
    words = {d.baseline: d.verdict for d in craft.decisions}
    t = next(t for t in tables(families_tex([craft], table, 5, "Holm")))
    cells = {c[0].removeprefix("\\textbf{").removesuffix("}"): c for c in tabular_cells(t)[1:]}
    assert cells["CRAFT"][3] == "reference"
    for baseline, verdict in words.items():
        name = display_name(baseline.removesuffix(" @craft"))
        assert cells[name][3] == verdict  # "craft vs fedavg: <verdict>"
    assert "better" in words.values()  # the made-up data: CRAFT is on top


def test_display_names_come_from_the_declarations_gen_docs_reads():
    import scripts.gen_docs as gen

    assert {k: (m.paper, m.page) for k, m in methods().items()} == gen.papers()
    assert display_name("sapef_topk") == "SA-PEF"
    assert display_name("fedavg lr=0.1") == "FedAvg lr=0.1"
    assert display_name("my_rule") == "my_rule"


def test_a_sweep_without_families_gets_an_exploratory_table_per_setting():
    _, table = main_shaped()
    table = pd.concat([table, table.assign(alpha=1.0)], ignore_index=True)
    tex = families_tex([], table, 5, "Holm")
    found = tables(tex)
    assert len(found) == 3 and "no comparison family" not in tex  # alpha 0.1, 0.3, 1
    first = tabular_cells(found[0])
    assert first[0] == ["Method", "Acc.\\ last 5 (\\%)", "$n$"]
    means = [float(c[1].split()[0]) for c in first[1:]]
    assert means == sorted(means, reverse=True)  # best first
    assert "\\label{tab:rows-digits-a0.1}" in tex and "\\label{tab:rows-digits-a1}" in tex


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
def test_pdflatex_sets_every_table_without_an_overfull_box(tmp_path):
    outcomes, table = main_shaped()
    (tmp_path / "families.tex").write_text(families_tex(outcomes, table, 5, "Holm"))
    (tmp_path / "paper.tex").write_text(
        "\\documentclass[twocolumn]{article}\n\\usepackage{booktabs}\n\\begin{document}\n"
        "\\input{families}\n\\end{document}\n")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "paper.tex"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    log = (tmp_path / "paper.log").read_text(errors="replace")
    assert done.returncode == 0, log[-2000:]
    assert "Overfull \\hbox" not in log
