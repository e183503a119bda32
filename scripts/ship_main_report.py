"""Publish the main job's report into the docs, and the README's quote of it.

``./run-main.sh`` (without overrides) runs this after the sweep: it writes
``docs/benchmarks/main-report.md`` (the facts of this run: date, commit, machine, wall time;
then the report's counts and every family's answers, as the report wrote them), copies the
whole report into ``docs/report-example/`` and rewrites the README's block between the
``main-report`` markers from those facts. The README and the docs quote the main job only
from these generated files; ``tests/test_quoted_numbers.py`` fails when they disagree.

    .venv/bin/python scripts/ship_main_report.py --seconds 256 [--report reports/main]
    .venv/bin/python scripts/ship_main_report.py --keep-facts --confirmation-seconds 300
    .venv/bin/python scripts/ship_main_report.py --readme   # only the README block

``./run-main.sh --confirm`` runs the second form after the confirmation sweep: the same page
with the confirmation's answers beside the main job's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAIN_REPORT = ROOT / "docs" / "benchmarks" / "main-report.md"
EXAMPLE = ROOT / "docs" / "report-example"
README = ROOT / "README.md"
CONFIRMATION = ROOT / "reports" / "main-confirm"
START, END = "<!-- main-report:start", "<!-- main-report:end -->"
ANSWER = re.compile(r"^- (?P<pair>.+? vs .+?): (?P<verdict>better|worse|equivalent|undecided|"
                    r"no verdict|not run yet)", re.M)
FACT = re.compile(r"^- \*\*(?P<key>[^*]+)\*\*: (?P<value>.+)$", re.M)
COPIED = ("table.md", "table.csv", "aggregate.csv", "convergence.png", "forest.png",
          "client_accuracy.png", "accuracy_vs_gb.png", "profile_accuracy.png",
          "profile_worst10.png", "accuracy_vs_time.png")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or the platform's word for it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def minutes(seconds: int) -> str:
    return f"{seconds // 60} min {seconds % 60} s"


def _commit() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=7", "HEAD"],
                          capture_output=True, text=True)
    return done.stdout.strip() or "none"


def seeds_fact() -> str:
    """Which seeds the screening and the confirmation run, and which were seen before."""
    from fedcore.specs.sweep import load_sweep

    sweeps = ROOT / "configs" / "sweeps"
    main, confirm = (load_sweep(sweeps / name).seed_plan.seeds
                     for name in ("main.yaml", "main-confirm.yaml"))
    return (f"screening seeds {main[0]}-{main[-1]}, confirmation seeds {confirm[0]}-{confirm[-1]}; "
            "the design (protocols, families, endpoint, margin, looks) was fixed before any of "
            "its cells ran, and no earlier run used the confirmation's seeds; earlier designs "
            f"of the job ran seeds {main[0]}-{main[-1]} of rows in fedcore's default recipe")


def facts(seconds: int, summary: str) -> dict[str, str]:
    """What the README may quote of this run, each one line."""
    import torch

    counts = summary.split("\n\n")[1].strip()
    answers = [line for line in summary.splitlines() if line.startswith("- ")]
    decided = [line for line in answers if "decided at" in line and "undecided" not in line]
    return {
        "date": dt.date.today().isoformat(),
        "commit": _commit(),
        "machine": (f"{os.cpu_count()} cores, {cpu_model()}, torch CPU capability "
                    f"{torch.backends.cpu.get_cpu_capability()}"),
        "time after set-up": minutes(seconds),
        "cells": counts,
        "comparisons": f"{len(decided)} of {len(answers)} decided",
        "seeds": seeds_fact(),
    }


def reading_notes(table: str) -> str:
    """What qualifies the answers, from the whole report: its training-state line and each
    family reference's regime and training state (a horizon other than its paper's, a
    reference still climbing at the endpoint)."""
    lines = [line for line in table.splitlines() if line.startswith("**Training state")]
    refs = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) >= 9 and cells[0].endswith("(reference)"):
            row = cells[0].removesuffix("(reference)").strip().strip("*")
            refs.append(f"- `{row}`: {cells[1]}; {cells[-1]}")
    notes = "\n\n".join(lines)
    if refs:
        notes += ("\n\nEach family's reference, its regime and its training state at the "
                  "endpoint (`data scaled`: the family runs its paper's protocol, rounds, "
                  "participation and local recipe, on digits and an MLP; `horizon other`: the "
                  "row runs at a horizon other than its paper's, so its answers hold at this "
                  "horizon, not at the paper's):\n\n"
                  + "\n".join(dict.fromkeys(refs)))
    return notes


def verdicts(summary: str) -> dict[str, str]:
    """Each comparison's verdict in a report's summary (``craft @craft vs fedavg @craft`` ->
    ``worse``)."""
    return {m.group("pair"): m.group("verdict")
            for m in ANSWER.finditer(summary.replace("\r", "")) if m}


def confirmation_section(screening: str, confirmation: str) -> tuple[str, str]:
    """The confirmation's answers beside the screening's, and the fact line (``3 of 11
    decided verdicts confirmed``)."""
    first, second = verdicts(screening), verdicts(confirmation)
    rows, decided, confirmed = [], 0, 0
    for pair, verdict in first.items():
        again = second.get(pair, "not run")
        held = verdict in ("better", "worse", "equivalent")
        decided += held
        same = held and again == verdict
        confirmed += same
        mark = "confirmed" if same else ("not confirmed" if held else "—")
        rows.append(f"| {pair} | {verdict} | {again} | {mark} |")
    fact = f"{confirmed} of {decided} decided verdicts confirmed on fresh seeds"
    body = "\n\n".join(confirmation.strip().split("\n\n")[1:]).replace(
        "artifacts `report/table.md` and `report/*.png`",
        "[its whole report](../report-example/confirmation/table.md)")
    text = ("## Confirmation on fresh seeds\n\n"
            "`configs/sweeps/main-confirm.yaml` asks every family's questions again, in the same "
            "protocols, rows and looks, on seeds 100-104, which no earlier run used (the sweep "
            "refuses a seed the screening's recorded runs used). A screening verdict is "
            "confirmed when the confirmation reaches the same one.\n\n"
            "| comparison | screening (seeds 0-4) | confirmation (seeds 100-104) | |\n"
            "|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            "The confirmation's answers, as its report wrote them:\n\n" + body + "\n")
    return fact, text


def main_report(values: dict[str, str], summary: str, table: str = "",
                confirmation: str = "") -> str:
    """docs/benchmarks/main-report.md: the facts, what qualifies the answers, the answers."""
    body = "\n\n".join(summary.strip().split("\n\n")[2:])
    body = body.replace("artifacts `report/table.md` and `report/*.png`",
                        "[the whole report](../report-example/table.md)")
    lines = "\n".join(f"- **{k}**: {v}" for k, v in values.items())
    return (
        "# The main job's report\n\n"
        "<!-- generated by scripts/ship_main_report.py from the run of ./run-main.sh; "
        "do not edit -->\n\n"
        "The shipped run of the main job (`configs/sweeps/main.yaml`, `./run-main.sh` without "
        "overrides, into a new store; the commit is the code the cells ran, the time the "
        "sweep and its report after set-up):\n\n"
        f"{lines}\n\n"
        + (f"{reading_notes(table)}\n\n" if table else "")
        + "Each family's answers, as the report wrote them (reference − baseline, the interval at "
        "the family's Holm-adjusted level of its look). How a comparison decides: "
        "[statistics](../explanation/statistics.md); reading the report: "
        "[the first-run tutorial](../tutorials/first-run.md).\n\n"
        f"{body}\n"
        + (f"\n{confirmation}" if confirmation else "")
    )


def read_facts(text: str) -> dict[str, str]:
    return {m.group("key"): m.group("value") for m in FACT.finditer(text)}


def readme_block(values: dict[str, str]) -> str:
    """The README's quote of the shipped run, from docs/benchmarks/main-report.md's facts."""
    return (
        f"{START} (generated by scripts/ship_main_report.py from "
        "docs/benchmarks/main-report.md) -->\n"
        f"The shipped run ({values['date']}, commit {values['commit']}; {values['machine']}) "
        f"took {values['time after set-up']} after set-up. {values['cells']} Of its family "
        f"comparisons, {values['comparisons']}"
        + (f"; {values['confirmation']}" if "confirmation" in values else "")
        + ": [the answers](docs/benchmarks/main-report.md)."
        + (f" Seeds: {values['seeds']}." if "seeds" in values else "") + "\n"
        f"{END}"
    )


def with_readme_block(readme: str, block: str) -> str:
    start, end = readme.index(START), readme.index(END) + len(END)
    return readme[:start] + block + readme[end:]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, help="the main job's wall time after set-up")
    parser.add_argument("--report", type=Path, default=ROOT / "reports" / "main")
    parser.add_argument("--confirmation", type=Path, default=CONFIRMATION,
                        help="the confirmation sweep's report")
    parser.add_argument("--confirmation-seconds", type=int,
                        help="the confirmation's wall time after set-up: add its answers beside "
                        "the main job's (./run-main.sh --confirm)")
    parser.add_argument("--readme", action="store_true", help="only rewrite the README block")
    parser.add_argument("--keep-facts", action="store_true",
                        help="rewrite the page from the same run's report, keeping its facts")
    args = parser.parse_args(argv)
    if not args.readme:
        if args.seconds is None and not args.keep_facts:
            parser.error("--seconds is required (the main job's wall time after set-up)")
        summary = (args.report / "summary.md").read_text()
        table = (args.report / "table.md").read_text()
        values = (read_facts(MAIN_REPORT.read_text()) if args.keep_facts
                  else facts(args.seconds, summary))
        confirmed = ""
        values.pop("confirmation", None)
        if args.confirmation_seconds is not None:
            fact, confirmed = confirmation_section(
                summary, (args.confirmation / "summary.md").read_text())
            values["confirmation"] = (f"{fact} (its run took "
                                      f"{minutes(args.confirmation_seconds)} after set-up)")
            (EXAMPLE / "confirmation").mkdir(parents=True, exist_ok=True)
            for name in COPIED:  # its own folder: its figures are not the main job's
                if (args.confirmation / name).is_file():
                    shutil.copyfile(args.confirmation / name, EXAMPLE / "confirmation" / name)
        MAIN_REPORT.write_text(main_report(values, summary, table, confirmed))
        EXAMPLE.mkdir(exist_ok=True)
        for name in COPIED:
            if (args.report / name).is_file():
                shutil.copyfile(args.report / name, EXAMPLE / name)
    values = read_facts(MAIN_REPORT.read_text())
    README.write_text(with_readme_block(README.read_text(), readme_block(values)))
    print(f"ship: {MAIN_REPORT.relative_to(ROOT)}, {EXAMPLE.relative_to(ROOT)}/ and the "
          "README's quote regenerated from this run")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
