"""The sweep parent's per-variant summary table (``variants.json``), in a real MLflow store."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from fedcore.core.config import config_dir
from fedcore.specs.sweep import load_sweep
from fedcore.tracking import load_settings, mlflow_client
from fedcore.tracking.parents import (
    VARIANT_TABLE,
    log_variant_table,
    markdown_rows,
    set_description,
    variant_table,
)


def _summary() -> pd.DataFrame:
    """A report summary: three variants at one setting, one at another, one without a value."""
    return pd.DataFrame({
        "row": ["fedavg", "krum", "craft", "fedavg", "rfa"],
        "dataset": ["digits"] * 5,
        "alpha": [0.1, 0.1, 0.1, 1.0, 0.1],
        "accuracy_mean": [0.61, 0.42, 0.70, 0.80, np.nan],
        "accuracy_low": [0.55, 0.30, 0.66, np.nan, np.nan],
        "accuracy_high": [0.67, 0.54, 0.74, np.nan, np.nan],
        "accuracy_n": [3, 3, 2, 1, 0],
    })


def test_variant_table_is_sorted_best_first_per_setting_with_n_and_interval():
    out = variant_table(_summary(), "accuracy")
    # the UI shows a logged table's first four columns: the variant, mean, interval and n
    assert list(out.columns[:4]) == ["variant", "final accuracy", "95 % interval", "n"]
    assert list(out["variant"]) == ["craft · digits 0.1", "fedavg · digits 0.1",
                                    "krum · digits 0.1", "rfa · digits 0.1",
                                    "fedavg · digits 1.0"]
    assert list(out["n"]) == [2, 3, 3, 0, 1]
    craft = out.iloc[0]
    assert (craft["final accuracy"], craft["95 % low"], craft["95 % high"]) == (0.70, 0.66, 0.74)
    assert craft["95 % interval"] == "[0.6600, 0.7400]" and out.iloc[4]["95 % interval"] == "—"
    one_setting = variant_table(_summary().iloc[:3], "accuracy")
    assert list(one_setting["variant"]) == ["craft", "fedavg", "krum"]
    with pytest.raises(KeyError, match="accuracy_n"):
        variant_table(_summary().drop(columns="accuracy_n"), "accuracy")


def test_logged_table_is_an_mlflow_table_artifact_of_the_run(tracking, tmp_path):
    client = mlflow_client(tracking)
    exp = client.create_experiment("parents")
    run_id = client.create_run(exp).info.run_id
    log_variant_table(client, run_id, _summary(), "accuracy")
    log_variant_table(client, run_id, _summary(), "accuracy")  # a second report replaces it
    tags = client.get_run(run_id).data.tags
    logged = json.loads(tags["mlflow.loggedArtifacts"])  # what makes the UI show a table
    assert logged == [{"path": VARIANT_TABLE, "type": "table"}]
    back = json.loads(open(client.download_artifacts(run_id, VARIANT_TABLE, str(tmp_path))).read())
    assert back["columns"][:4] == ["variant", "final accuracy", "95 % interval", "n"]
    assert [r[0].split()[0] for r in back["data"]] == ["craft", "fedavg", "krum", "rfa", "fedavg"]


def test_variant_intervals_stay_in_the_metrics_range_and_rank_by_the_endpoint():
    summary = _summary().rename(columns=lambda c: c.replace("accuracy", "accuracy_last_k"))
    summary.loc[2, ["accuracy_last_k_low", "accuracy_last_k_high"]] = [0.9, 1.07]
    out = variant_table(summary)  # the primary endpoint by default
    assert out.columns[1] == "accuracy, mean of last k"
    top = out.iloc[0]
    assert top["variant"] == "craft · digits 0.1" and top["95 % high"] == 1.0
    assert top["95 % interval"] == "[0.9000, 1.0000]"


@pytest.mark.slow
def test_the_report_logs_the_variant_table_to_the_sweep_parent(tracking, tmp_path):
    from fedcore.flows.sweep import parent_run
    from fedcore.tracking.report import build_report
    from fedcore.tracking.runner import run_tracked

    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump({
        "name": "variants", "base": str(config_dir() / "experiment.yaml"),
        "grid": {"method": ["fedavg", "fedprox"], "seed": [0, 1]},
        "set": {"rounds": 1, "model.name": "mlp", "dataset.num_clients": 4,
                "clients_per_round": 2, "local.epochs": 1},
    }))
    spec = load_sweep(path)
    parent = parent_run(spec)
    for cell in spec.cells:
        run_tracked(cell.config, parent_run_id=parent, tags={"sweep": spec.name}, figures=False)
    report = build_report(spec, tmp_path / "out", parent_run_id=parent)
    client = mlflow_client(load_settings())
    local = client.download_artifacts(parent, VARIANT_TABLE, str(tmp_path))
    back = json.loads(open(local).read())
    frame = pd.DataFrame(back["data"], columns=back["columns"])
    assert sorted(frame["variant"]) == sorted(report.table["row"])
    assert (frame["n"] == 2).all()
    means = list(frame["accuracy, mean of last k"])
    assert means == sorted(means, reverse=True)


def test_description_tables_keep_their_columns_apart(tracking):
    """The MLflow UI draws description tables without cell padding (alpha 0.1000 next to 3
    seeds read ``0.10003``): a blank column separates every two columns."""
    client = mlflow_client(tracking)
    run_id = client.create_run(client.create_experiment("notes")).info.run_id
    rows = [{"row": "craft", "alpha": 0.1, "seeds": 3}, {"row": "fedavg", "alpha": 0.1,
                                                         "seeds": 3}]
    set_description(client, run_id, "# Sweep\n\n" + markdown_rows(rows, ["row", "alpha", "seeds"])
                    + "\n\nnot | a table")
    note = client.get_run(run_id).data.tags["mlflow.note.content"]
    assert note.splitlines() == [
        "# Sweep", "",
        "| row | &emsp; | alpha | &emsp; | seeds |",
        "| --- | --- | --- | --- | --- |",
        "| craft | &emsp; | 0.1000 | &emsp; | 3 |",
        "| fedavg | &emsp; | 0.1000 | &emsp; | 3 |", "",
        "not | a table"]
