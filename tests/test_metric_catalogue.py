"""The metric catalogue is the emitters' declarations (``EMITTED_METRICS``, gathered by
fedcore.core.metrics.catalogue, rendered in docs/reference/metrics.md), and it matches what the code
records both ways: every metric name written in the code and every metric a tiny run of each
shipped method emits is declared, and every declared metric is emitted (by those runs and the
runs the emitters declare in ``EMITTED_WHEN``, or, for the parent runs' metrics, written by the
module that declares it). The columns of a round's per-client table are declared the same way
(scope ``client``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fedcore.core.compose.configure import load_config
from fedcore.core.config import method_names
from fedcore.core.metrics.catalogue import (
    DECLARATION,
    RUN_DECLARATION,
    DeclarationError,
    MetricDoc,
    build,
    build_runs,
    catalogue,
    declaration,
    declared,
    declared_run,
    lookup,
    runs,
)
from fedcore.core.round.simulation import Simulation

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"[a-z][a-z0-9_]*/[A-Za-z0-9_]+")
HOLE = re.compile(r"<[a-z_ ]+>")
# Strings shaped like a metric name that are not metrics.
NOT_METRICS = {
    "val/images": "a Tiny-ImageNet folder",
    "verdict/<x>": "a tag of the claims run (its metric is holds/<claim id>)",
}
RUN_SCOPES = ("round", "summary", "client")  # what a simulation's run records
# Declared metrics no fedcore code writes by name.
NOT_WRITTEN = {"system/<name>": "MLflow's system-metrics monitor names them"}
TINY = ["rounds=1", "model.name=mlp", "dataset.num_clients=6", "clients_per_round=3",
        "local.steps=2", "target_accuracy=0.01"]


def names_in(path: Path, skip_declaration: bool = False) -> dict[str, int]:
    """Metric-shaped string literals of one module (f-strings with a constant first segment, a
    placeholder as ``<x>``), by name, with the line they first occur on; ``skip_declaration``:
    not those of its ``EMITTED_METRICS``."""
    tree = ast.parse(path.read_text())
    skip = declaration(tree) if skip_declaration else None
    inside = {id(n) for n in ast.walk(skip)} if skip is not None else set()
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if id(node) in inside:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr) and isinstance(node.values[0], ast.Constant):
            text = "".join("<x>" if isinstance(v, ast.FormattedValue) else str(v.value)
                           for v in node.values)
        else:
            continue
        if NAME.fullmatch(text.replace("<x>", "x")) and not text.endswith("_"):
            found.setdefault(text, node.lineno)
    return found


def names_in_code() -> dict[str, str]:
    """Metric-shaped string literals of fedcore/ and flows/, by name, with where they occur."""
    found: dict[str, str] = {}
    sources = [*ROOT.joinpath("fedcore").rglob("*.py"), *ROOT.joinpath("flows").rglob("*.py")]
    for path in sorted(sources):
        for name, line in names_in(path).items():
            found.setdefault(name, f"{path.relative_to(ROOT)}:{line}")
    return found


def test_every_metric_name_in_the_code_is_declared() -> None:
    missing = [f"{name} ({where})" for name, where in names_in_code().items()
               if name not in NOT_METRICS and lookup(name.replace("<x>", "x")) is None]
    assert not missing, (
        f"metrics no module declares: add each to the {DECLARATION} of the module that emits "
        f"it, then run scripts/gen_docs.py: {missing}"
    )


def test_the_scan_finds_known_names() -> None:
    names = names_in_code()
    for name in ("train/loss", "craft/conflict_after", "cells/<x>", "sapef/gradient_mismatch"):
        assert name in names


def declared_runs() -> dict[str, list[str]]:
    """A one-round run of each shipped method and each run an emitter declares, by name."""
    out = {name: [f"method={name}"] for name in method_names()}
    return out | {f"{RUN_DECLARATION} of {emitter}": list(overrides)
                  for emitter, overrides in runs().items()}


@pytest.fixture(scope="module")
def emitted() -> dict[str, str]:
    """Every metric (history and summary) and per-client column of ``declared_runs``, with the
    first run that emitted it."""
    out: dict[str, str] = {}
    for run, overrides in declared_runs().items():
        result = Simulation(load_config(None, [*TINY, *overrides])).run()
        columns = [k for table in result.client_tables for k in table.extra]
        for key in [k for row in result.history for k in row if k != "round"] + [
            *result.summary, *columns
        ]:
            out.setdefault(key, run)
    return out


def test_every_metric_of_a_run_is_declared(emitted: dict[str, str]) -> None:
    assert {"rounds_to_target", "stages/median_norm/rejected", "unseen/accuracy",
            "rejected_by/median_norm", "expected_reliability"} <= set(emitted)
    missing = sorted(f"{k} ({run})" for k, run in emitted.items() if lookup(k) is None)
    assert not missing, (f"metrics a run emits that no module declares (add each to the "
                         f"{DECLARATION} of the module that emits it): {missing}")


def test_every_declared_run_metric_is_emitted(emitted: dict[str, str]) -> None:
    covered = {lookup(k) for k in emitted}
    unused = [f"{d.name} ({d.emitter})" for d in catalogue()
              if d.scope in RUN_SCOPES and d not in covered]
    assert not unused, (f"declared metrics no run emitted (remove the declaration, or declare "
                        f"the overrides of a run that emits it in its module's "
                        f"{RUN_DECLARATION}): {unused}")


def test_a_per_client_column_is_declared_in_its_scope() -> None:
    column = lookup("rejected_by/median_norm")
    assert column is not None and column.scope == "client"
    assert column.emitter == "fedcore/core/round/round_phases.py"


def test_runs_are_declared_beside_the_metrics_they_emit(tmp_path: Path) -> None:
    assert runs()["fedcore/core/privacy/ledger.py"][0] == "privacy.mechanism=central"
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mine.py").write_text('EMITTED_WHEN = ["engine=vectorised"]\n')
    (pkg / "other.py").write_text("X = 1\n")
    assert build_runs(pkg) == {"pkg/mine.py": ("engine=vectorised",)}
    for bad in ('EMITTED_WHEN = ["engine"]', "EMITTED_WHEN = []", "EMITTED_WHEN = [f'{X}=1']"):
        with pytest.raises(DeclarationError, match=f"^pkg/x.py: {RUN_DECLARATION} must be"):
            declared_run(bad, "pkg/x.py")


def test_every_declared_parent_metric_is_written_by_its_module() -> None:
    parents = [d for d in catalogue() if d.scope not in RUN_SCOPES]
    assert {d.scope for d in parents} == {"sweep", "study", "claims", "system"}
    unwritten = [f"{d.name} ({d.emitter})" for d in parents if d.name not in NOT_WRITTEN
                 and HOLE.sub("<x>", d.name) not in names_in(ROOT / d.emitter, True)]
    assert not unwritten, f"declared metrics their module does not write: {unwritten}"


def test_the_catalogue_is_the_emitters_declarations() -> None:
    afl = lookup("afl/lambda_max")
    assert afl is not None and afl.emitter == "fedcore/core/aggregators/afl.py"
    assert lookup("train/loss") == MetricDoc(
        "train/loss", "fedcore/core/round/round_phases.py", "round",
        "sample-weighted mean (float64) of the sampled clients' training loss over local steps "
        "(NaN in a round that sampled no client)")
    emitters = {d.emitter for d in catalogue()}
    assert all(DECLARATION in (ROOT / e).read_text() for e in emitters)
    assert "fedcore/core/metrics/catalogue.py" not in emitters


def test_lookup_matches_patterns_and_rejects_unknown() -> None:
    assert lookup("fedquad/fallback_clients") is not None
    assert lookup("system/gpu_0_memory_usage_megabytes") is not None
    assert lookup("cells/finished") is not None
    assert lookup("best/final_accuracy").scope == "sweep"  # type: ignore[union-attr]
    assert lookup("best/final_loss").scope == "study"  # type: ignore[union-attr]
    assert lookup("craft/no_such_metric") is None
    assert lookup("fedquad/sub/fallback_clients") is None
    assert not MetricDoc("a/<x>", "m", "round", "").matches("a/b/c")


def test_a_new_module_declares_its_metrics(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "rules").mkdir(parents=True)
    (pkg / "rules" / "mine.py").write_text(
        '"""A rule."""\n\nEMITTED_METRICS = {\n    "round": {\n        "mine/norm": (\n'
        '            "norm of "\n            "the step"\n        ),\n    },\n'
        '    "summary": {"mine/<x>/best": "best"},\n}\n')
    (pkg / "other.py").write_text("METRICS = ('accuracy',)\n")
    assert build(pkg) == (MetricDoc("mine/norm", "pkg/rules/mine.py", "round", "norm of the step"),
                          MetricDoc("mine/<x>/best", "pkg/rules/mine.py", "summary", "best"))
    (pkg / "twice.py").write_text('EMITTED_METRICS: dict = {"round": {"mine/norm": "again"}}\n')
    with pytest.raises(DeclarationError, match="'mine/norm' is declared by both "
                       "pkg/rules/mine.py and pkg/twice.py"):
        build(pkg)


@pytest.mark.parametrize("source, error", [
    ('EMITTED_METRICS = {"epoch": {"a/b": "x"}}', "scope 'epoch' is not one of round, summary"),
    ('EMITTED_METRICS = {"round": {"A/b": "x"}}', "metric name 'A/b' is not lower-case"),
    ('EMITTED_METRICS = {"round": {"a/b": " "}}', "metric 'a/b' needs its meaning"),
    ('EMITTED_METRICS = {"round": ["a/b"]}', r"EMITTED_METRICS\['round'\] must be a dict"),
    ('EMITTED_METRICS = ("a/b",)', "must be a dict .* not tuple"),
    ('EMITTED_METRICS = {"round": {f"a/{X}": "x"}}', "must be a literal"),
])
def test_a_bad_declaration_is_refused_naming_its_module(source: str, error: str) -> None:
    with pytest.raises(DeclarationError, match=f"^fedcore/x.py: .*{error}"):
        declared(source, "fedcore/x.py")
