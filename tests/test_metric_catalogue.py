"""Every metric fedcore records is in fedcore.metric_catalogue (so in docs/reference/metrics.md):
the metric names written in the code, and every metric tiny untracked runs emit."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fedcore.configure import load_config
from fedcore.metric_catalogue import CATALOGUE, MetricDoc, lookup
from fedcore.simulation import Simulation

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"[a-z][a-z0-9_]*/[A-Za-z0-9_]+")
# Strings shaped like a metric name that are not metrics.
NOT_METRICS = {
    "val/images": "a Tiny-ImageNet folder",
    "rejected_by/<x>": "a per-client column: the clients a stage rejected",
    "verdict/<x>": "a tag of the claims run (its metric is holds/<claim id>)",
}


def names_in_code() -> dict[str, str]:
    """Metric-shaped string literals of fedcore/ and flows/ (f-strings with a constant first
    segment, a placeholder as ``<x>``), by name, with where they occur."""
    found: dict[str, str] = {}
    sources = [*ROOT.joinpath("fedcore").rglob("*.py"), *ROOT.joinpath("flows").rglob("*.py")]
    for path in sorted(sources):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            elif isinstance(node, ast.JoinedStr) and isinstance(node.values[0], ast.Constant):
                text = "".join("<x>" if isinstance(v, ast.FormattedValue) else str(v.value)
                               for v in node.values)
            else:
                continue
            if NAME.fullmatch(text.replace("<x>", "x")) and not text.endswith("_"):
                found.setdefault(text, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_metric_name_in_the_code_is_catalogued() -> None:
    missing = [f"{name} ({where})" for name, where in names_in_code().items()
               if name not in NOT_METRICS and lookup(name.replace("<x>", "x")) is None]
    assert not missing, (
        "metrics missing from fedcore/metric_catalogue.py (add them, then run "
        f"scripts/gen_docs.py): {missing}"
    )


def test_the_scan_finds_known_names() -> None:
    names = names_in_code()
    for name in ("train/loss", "craft/conflict_after", "cells/<x>", "sapef/gradient_mismatch"):
        assert name in names


@pytest.mark.parametrize("method, extra", [
    ("ditto", []),
    ("fedquad", []),
    ("cser_topk", ["method.compression.H=1"]),
])
def test_every_metric_of_a_run_is_catalogued(method: str, extra: list[str]) -> None:
    cfg = load_config(None, [f"method={method}", "rounds=1", "model.name=mlp",
                             "dataset.num_clients=6", "clients_per_round=3", "local.steps=2",
                             "target_accuracy=0.01", *extra])
    result = Simulation(cfg).run()
    emitted = {k for row in result.history for k in row if k != "round"} | set(result.summary)
    assert "rounds_to_target" in emitted
    missing = sorted(k for k in emitted if lookup(k) is None)
    assert not missing, f"metrics missing from fedcore/metric_catalogue.py: {missing}"


def test_lookup_matches_patterns_and_rejects_unknown() -> None:
    assert lookup("fedquad/fallback_clients") is not None
    assert lookup("system/gpu_0_memory_usage_megabytes") is not None
    assert lookup("cells/finished") is not None
    assert lookup("craft/no_such_metric") is None
    assert lookup("fedquad/sub/fallback_clients") is None
    assert not MetricDoc("a/<x>", "m", "round", "").matches("a/b/c")


def test_catalogue_names_are_unique() -> None:
    names = [d.name for d in CATALOGUE]
    assert len(names) == len(set(names))
