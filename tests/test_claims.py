"""The claims report: claims file validation, claim judgement, table, MLflow parent run, flow."""

from __future__ import annotations

import math

import pytest
import yaml

from fedcore.claims import (
    experiments,
    judge,
    load_claims,
    markdown,
    measure,
    run_claims,
)
from fedcore.config import ConfigError, config_dir
from fedcore.simulation import Result

TINY = {"rounds": 2, "dataset.num_clients": 6, "clients_per_round": 3, "local.steps": 2}
PAPERS = {"CRAFT", "CRF", "FedOUI", "SA-PEF", "FedQuad"}


def _file(tmp_path, claims, **top):
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({
        "name": "tiny", "base": str(config_dir() / "experiment.yaml"), "seeds": [0],
        "set": {"model.name": "mlp", **TINY}, "claims": claims, **top,
    }))
    return path


# fedavg is never strictly below itself: a claim that cannot hold, by construction
FAILING = {"id": "fedavg_below_itself", "paper": "FedAvg", "claim": "lower loss than FedAvg",
           "test": "lower", "run": {"method": "fedavg"}, "baseline": {"method": "fedavg"},
           "metric": "final/loss"}
HOLDING = {"id": "fedavg_at_least_itself", "paper": "FedAvg", "claim": "accuracy >= FedAvg's",
           "test": "at_least", "run": {"method": "fedavg"}, "baseline": {"method": "fedavg"},
           "metric": "final/accuracy"}


def test_shipped_claims_cover_the_five_papers_with_three_seeds():
    spec = load_claims(config_dir() / "claims.yaml")
    assert len(spec.seeds) >= 3
    assert {c.paper for c in spec.claims} == PAPERS
    assert len(spec.claims) == 9
    # shared runs (the FedAvg baseline at alpha 0.1) are simulated once per seed
    assert len(experiments(spec)) == 8 * len(spec.seeds)


@pytest.mark.parametrize(("change", "message"), [
    ({"test": "better"}, "claims.claims[0].test: unknown 'better'; allowed: zero_every_round"),
    ({"baseline": None}, "claims.claims[0].baseline: test lower needs a baseline run"),
    ({"reduce": "median"}, "claims.claims[0].reduce: unknown 'median'; allowed: final, mean, max"),
    ({"run": {"method": "nope"}}, "claims.fedavg_below_itself: method: unknown method 'nope'"),
])
def test_bad_claims_are_one_line_errors(tmp_path, change, message):
    claim = {k: v for k, v in {**FAILING, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_claims(_file(tmp_path, [claim]))
    with pytest.raises(ConfigError, match="claims.seeds: expected a non-empty list"):
        load_claims(_file(tmp_path, [FAILING]), {"seeds": []})


def test_judge_on_constructed_values():
    assert judge("at_least", [0.8, 0.9], [0.85, 0.85]) is True
    assert judge("at_least", [0.7, 0.8], [0.85, 0.85]) is False
    assert judge("lower", [3.0, 3.0], [3.0, 3.0]) is False  # equal is not lower
    assert judge("lower", [2.0, 3.0], [3.0, 3.0]) is True
    assert judge("zero_every_round", [0.0, 0.0, 0.0], None) is True
    assert judge("zero_every_round", [0.0, 0.05, 0.0], None) is False
    assert judge("noisy_below_clean", [0.2, -0.1], None) is True
    assert judge("noisy_below_clean", [-0.2, 0.1], None) is False
    assert judge("at_least", [math.nan], [0.1]) is False


def test_measure_reduces_over_rounds_and_censors_rounds_to_target():
    history = [{"round": r, "test/accuracy": a, "x/y": v}
               for r, a, v in ((1, 0.2, 3.0), (2, 0.5, 1.0), (3, 0.6, 2.0))]
    result = Result({"method": {"name": "m"}}, "h", history, [], {"final/accuracy": 0.6})
    assert measure(result, "x/y", "final", 3) == 2.0
    assert measure(result, "x/y", "mean", 3) == 2.0
    assert measure(result, "x/y", "max", 3) == 3.0
    assert measure(result, "final/accuracy", "final", 3) == 0.6
    assert measure(result, "rounds_to_target", "final", 3) == 4.0  # never reached: R + 1
    result.summary["rounds_to_target"] = 2.0
    assert measure(result, "rounds_to_target", "final", 3) == 2.0


def test_tiny_run_of_the_shipped_claims_gives_the_whole_table():
    spec = load_claims(config_dir() / "claims.yaml", {"seeds": [0], **TINY})
    rows = run_claims(spec)
    assert [r.id for r in rows] == [c.id for c in spec.claims]
    table = markdown(rows).splitlines()
    assert table[0] == "| claim | setting | measured (mean ± std over seeds) | holds |"
    assert len(table) == 2 + len(rows)
    for line, row in zip(table[2:], rows, strict=True):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 4 and cells[3] in ("yes", "NO")
        assert cells[1].startswith("digits mlp, Dir 0.1, 6 clients (3/round), 2 rounds, 1 seeds")
        assert " ± " in cells[2]
        assert (cells[3] == "yes") == row.holds
        assert all(math.isfinite(v) for v in row.values)
    crf = next(r for r in rows if r.id == "crf_reliability")
    assert "noisy" in crf.measured and "clean" in crf.measured


def test_a_failing_claim_is_reported_as_not_holding(tmp_path):
    spec = load_claims(_file(tmp_path, [FAILING, HOLDING]))
    rows = run_claims(spec)
    assert [r.holds for r in rows] == [False, True]
    assert rows[0].values == rows[0].baseline_values  # measured, and shown: the same run
    assert markdown(rows).splitlines()[2].endswith("| NO |")


def test_tracked_claims_are_one_parent_run_with_the_table(tracking, tmp_path, capsys):
    from fedcore.cli import main
    from fedcore.tracking import get_experiment_id, mlflow_client

    path = _file(tmp_path, [FAILING, HOLDING])
    assert main(["claims", str(path), "--out", str(tmp_path / "t.md")]) == 0
    out = capsys.readouterr().out
    assert "| FedAvg: lower loss than FedAvg |" in out and "1 of 2 claims hold" in out
    client = mlflow_client(tracking)
    runs = client.search_runs([get_experiment_id(client, tracking)])
    parent = next(r for r in runs if r.data.tags.get("fedcore.role") == "claims")
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert parent.info.status == "FINISHED" and len(children) == 1  # one distinct experiment
    assert parent.data.metrics["holds/fedavg_below_itself"] == 0.0
    assert parent.data.metrics["holds/fedavg_at_least_itself"] == 1.0
    note = parent.data.tags["mlflow.note.content"]
    assert note.startswith("Claims `tiny`: 1 of 2 hold") and "| NO |" in note
    assert [a.path for a in client.list_artifacts(parent.info.run_id, "claims")] == [
        "claims/table.md"]
    assert (tmp_path / "t.md").read_text().splitlines()[0].startswith("| claim | setting")


def test_prefect_flow_claims(tracking, tmp_path, prefect_harness):
    from flows.claims import claims

    out = claims(str(_file(tmp_path, [HOLDING])), ["rounds=1"])
    assert out["holds"] == {"fedavg_at_least_itself": True}
    assert "| yes |" in out["table"]
