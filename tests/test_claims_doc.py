"""The claims' history in docs/benchmarks/claims-digits.md against the claims files.

Every claim id of ``configs/claims.yaml`` and ``configs/claims.record.yaml`` has a row in the
page's "Every claim's history" table; a claim fixed (per the record) after the claims' first
result was re-specified after a result was seen and carries a ``note:`` naming the retired claims
its row says it replaces; every retired claim is named by a current claim's note; a current
claim's result in the history agrees with the page's results table.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from fedcore.core.config import config_dir

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "claims-digits.md"
HEADING = "## Every claim's history"
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
ID = re.compile(r"`([a-z0-9_]+)`")
VERDICT = re.compile(r"\b(holds|contradicted|equivalent|inconclusive|passes|fails)\b")


def _table(lines: list[str]) -> list[list[str]]:
    """The cells of the first Markdown table in ``lines``, header and rule left out."""
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows[2:]


def history(doc: str) -> dict[str, tuple[str, str, str]]:
    """Claim id -> (first result, moves, current result) from the history table."""
    lines = doc.splitlines()
    if HEADING not in lines:
        return {}
    out = {}
    for cells in _table(lines[lines.index(HEADING):]):
        found = ID.search(cells[0])
        if found is not None and len(cells) == 4:
            out[found.group(1)] = (cells[1], cells[2], cells[3])
    return out


def results(doc: str) -> dict[str, str]:
    """"Paper: claim" -> verdict word, from the page's first (results) table."""
    out = {}
    for cells in _table(doc.splitlines()):
        found = VERDICT.search(cells[-1])
        if found is not None:
            out[cells[0]] = found.group(1)
    return out


def _names(note: str, claim_id: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(claim_id)}(?!\w)", note) is not None


def problems(doc: str, claims: list[dict[str, Any]], record: dict[str, Any]) -> list[str]:
    """What the history table and the claims files disagree on (empty: nothing)."""
    rows = history(doc)
    if not rows:
        return [f"{HEADING!r}: no table of claims"]
    out = [f"{cid}: no row in the history" for cid in
           dict.fromkeys([*(c["id"] for c in claims), *record]) if cid not in rows]
    out += [f"{cid}: no first result with a date" for cid, (first, _, _) in rows.items()
            if not DATE.search(first)]
    dates = [m.group(0) for first, _, _ in rows.values() if (m := DATE.search(first))]
    first_result = min(dates) if dates else ""
    current = {c["id"] for c in claims}
    retired = [cid for cid in rows if cid not in current]
    verdicts = results(doc)
    for c in claims:
        cid, note = c["id"], str(c.get("note") or "")
        fixed = str((record.get(cid) or {}).get("fixed") or c.get("fixed") or "")
        if fixed > first_result and not note:
            out.append(f"{cid}: fixed on {fixed}, after the first result ({first_result}), "
                       "without a note")
        if cid not in rows:
            continue
        _, moves, now = rows[cid]
        out += [f"{cid}: its note does not name {old}, which its history says it replaces"
                for old in ID.findall(moves) if old in retired and not _names(note, old)]
        said = VERDICT.search(now)
        table = verdicts.get(f"{c['paper']}: {c['claim']}")
        if said is None or said.group(1) != table:
            out.append(f"{cid}: current result {now!r} disagrees with the results table "
                       f"({table})")
    notes = " ".join(str(c.get("note") or "") for c in claims)
    out += [f"{old}: retired, but no current claim's note names it" for old in retired
            if not _names(notes, old)]
    return out


def _shipped() -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    claims = yaml.safe_load((config_dir() / "claims.yaml").read_text())["claims"]
    record = yaml.safe_load((config_dir() / "claims.record.yaml").read_text())
    return DOC.read_text(), claims, record


def test_every_claim_has_its_history_and_notes() -> None:
    doc, claims, record = _shipped()
    assert problems(doc, claims, record) == []
    rows = history(doc)
    assert len(rows) == 21  # 9 claims of 2026-11-30, 12 current
    assert all(DATE.search(first) for first, _, _ in rows.values())


def test_history_states_the_first_result_and_the_holm_change() -> None:
    doc = DOC.read_text()
    assert "**6 of 9 held, 3 did not**" in doc
    section = doc[doc.index("## Why two verdicts flipped"):]
    assert "ef32909" in section and "2026-12-04" in section
    assert "`crf_accuracy_clean`" in section and "`sapef_rounds_recipe`" in section


def test_a_claim_missing_from_the_history_is_caught() -> None:
    doc, claims, record = _shipped()
    cut = "\n".join(line for line in doc.splitlines()
                    if not line.startswith("| `fedquad_ratio_a05` |"))
    assert "fedquad_ratio_a05: no row in the history" in problems(cut, claims, record)
    recorded = {**record, "claim_only_in_the_record": {"fixed": "2026-12-05", "digest": "0"}}
    assert "claim_only_in_the_record: no row in the history" in problems(doc, claims, recorded)


def test_a_re_specified_claim_without_a_note_is_caught() -> None:
    doc, claims, record = _shipped()
    bare = [{k: v for k, v in c.items() if not (c["id"] == "fedquad_ratio_a03" and k == "note")}
            for c in claims]
    found = problems(doc, bare, record)
    assert ("fedquad_ratio_a03: fixed on 2026-12-01, after the first result (2026-11-30), "
            "without a note") in found
    assert ("fedquad_ratio_a03: its note does not name fedquad_ratio, which its history says "
            "it replaces") in found


def test_a_note_that_forgets_the_retired_claim_is_caught() -> None:
    doc, claims, record = _shipped()
    vague = [{**c, "note": "the second comparison of craft_worst10_vs_fedlf, fixed with it"}
             if c["id"] == "craft_worst10_vs_fedavg" else c for c in claims]
    assert ("craft_worst10_vs_fedavg: its note does not name craft_worst10, which its history "
            "says it replaces") in problems(doc, vague, record)
    quiet = [{**c, "note": "moved"} if c["id"].startswith("fedquad_") else c for c in claims]
    assert "fedquad_accuracy: retired, but no current claim's note names it" in problems(
        doc, quiet, record)


def test_a_current_result_that_disagrees_with_the_table_is_caught() -> None:
    doc, claims, record = _shipped()
    row = next(line for line in doc.splitlines() if line.startswith("| `crf_accuracy_clean` |"))
    wrong = doc.replace(row, row.replace("**holds** (5 seeds)", "**inconclusive**"))
    assert any(p.startswith("crf_accuracy_clean: current result") for p in
               problems(wrong, claims, record))
