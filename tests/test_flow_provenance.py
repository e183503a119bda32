"""Prefect and MLflow point at each other: cell-named task runs, a markdown artifact with the
result table and MLflow links, the flow-run id on every MLflow run, parent-run descriptions,
and typed deployment parameters that the server refuses when bad."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient


def _sweep_file(tmp_path: Path) -> Path:
    path = tmp_path / "linked.yaml"
    path.write_text(yaml.safe_dump({
        "name": "linked",
        "grid": {"method": ["fedavg", "fedavgm"]},
        "set": {"rounds": 2, "model.name": "mlp", "dataset.num_clients": 6,
                "clients_per_round": 2},
    }))
    return path


def test_sweep_flow_names_tasks_publishes_artifact_and_links_runs(prefect_harness, tracking,
                                                                    tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterId,
    )

    from fedcore.flows.sweep import sweep

    path = _sweep_file(tmp_path)
    state = sweep(str(path), ["rounds=2"], return_state=True)
    rows = state.result()
    flow_run_id = state.state_details.flow_run_id
    assert [r["status"] for r in rows] == ["finished", "finished"]

    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(flow_run_id)
        tasks = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
        )
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    assert sorted(t.name for t in tasks) == ["fedavg-digits-a0.1-s0", "fedavgm-digits-a0.1-s0"]
    assert re.fullmatch(r"sweep-linked-\d{8}-\d{6}", flow_run.name)  # not a random name
    assert len(artifacts) == 1 and artifacts[0].type == "markdown"
    assert artifacts[0].key == "sweep-linked"

    mlflow = MlflowClient(tracking.tracking_uri)
    exp = mlflow.get_experiment_by_name(tracking.experiment).experiment_id
    parent = mlflow.search_runs([exp], "tags.`fedcore.role` = 'sweep'")[0]
    markdown = artifacts[0].data
    assert markdown.startswith("**MLflow**: [parent run]")  # the links first
    assert f"#/experiments/{exp}/runs/{parent.info.run_id}" in markdown
    assert "workflowType=machine_learning" in markdown
    assert parent.info.run_name.startswith("sweep-linked-20")  # one per invocation
    for row in rows:
        assert (f"#/experiments/{exp}/runs/{row['run_id']}?workflowType=machine_learning"
                in markdown)
        assert f"- [{row['run_name']}](" in markdown
        child = mlflow.get_run(row["run_id"])
        method = row["cell"].removeprefix("method=")
        assert child.info.run_name == f"{method}-digits-a0.1-s0"
        assert child.data.tags["variant"] == f"{method}-digits-a0.1"
        assert child.data.tags["cell"] == row["cell"]
        assert child.data.tags["fedcore.prefect_flow_run_id"] == str(flow_run_id)
        assert child.data.tags["mlflow.source.type"] == "JOB"

    # the parent: sweep YAML + overrides, summary metrics, the cell table as description
    tags = parent.data.tags
    assert tags["fedcore.overrides"] == "rounds=2"
    assert tags["fedcore.prefect_flow_run_id"] == str(flow_run_id)
    # cells kept apart by a blank column (the MLflow UI pads no table cell)
    assert "| method=fedavg | &emsp; | finished |" in tags["mlflow.note.content"]
    assert parent.data.metrics["cells/finished"] == 2.0
    assert parent.data.metrics["best/final_accuracy"] == max(r["final/accuracy"] for r in rows)
    text = mlflow.download_artifacts(parent.info.run_id, "sweep.yaml", str(tmp_path / "dl"))
    assert Path(text).read_text().startswith(path.read_text())
    assert "# overrides: rounds=2" in Path(text).read_text()


def _schemas() -> dict:
    from prefect.utilities.callables import parameter_schema

    from fedcore.flows.report import report
    from fedcore.flows.simulate import simulate
    from fedcore.flows.sweep import sweep
    from fedcore.flows.tune import tune

    return {f.name: parameter_schema(f.fn).model_dump_for_openapi()
            for f in (simulate, sweep, tune, report)}


def test_every_flow_parameter_is_described_and_typed():
    schemas = _schemas()
    for name, schema in schemas.items():
        for param, prop in schema["properties"].items():
            assert prop.get("description"), f"{name}.{param} has no description"
    sweep = schemas["sweep"]["properties"]
    assert sweep["runner"]["enum"] == ["thread", "dask"]
    assert sweep["max_workers"]["minimum"] == 1 and sweep["cells_per_gpu"]["minimum"] == 1
    assert schemas["tune"]["properties"]["max_workers"]["minimum"] == 1


@pytest.mark.parametrize("bad", [{"runner": "dsak"}, {"max_workers": 0}])
def test_bad_deployment_parameters_are_refused_at_creation(prefect_harness, bad):
    from prefect.client.orchestration import get_client
    from prefect.exceptions import PrefectHTTPStatusError

    from fedcore.flows.sweep import sweep

    schema = _schemas()["sweep"]

    async def create():
        async with get_client() as client:
            flow_id = await client.create_flow_from_name("sweep")
            dep_id = await client.create_deployment(
                flow_id=flow_id, name=f"typed-{next(iter(bad))}",
                parameter_openapi_schema=schema, enforce_parameter_schema=True,
                entrypoint="flows/sweep.py:sweep",
            )
            good = await client.create_flow_run_from_deployment(
                dep_id, parameters={"sweep_file": "configs/sweeps/main.yaml"}
            )
            assert good.parameters == {"sweep_file": "configs/sweeps/main.yaml"}
            await client.delete_flow_run(good.id)
            with pytest.raises(PrefectHTTPStatusError) as info:
                await client.create_flow_run_from_deployment(
                    dep_id, parameters={"sweep_file": "configs/sweeps/main.yaml", **bad}
                )
            return info.value.response.status_code, info.value.response.text

    assert sweep.name == "sweep"
    status, text = asyncio.run(create())
    assert status in (409, 422), text
    assert next(iter(bad)) in text
