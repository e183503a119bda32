"""Integration: prefect.yaml deployed to a real Prefect server, run by a real process worker,
recorded through a real `mlflow server`; every process on 127.0.0.1 and stopped by the test."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
POOL = "fedcore-process"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text()[-3000:]
            raise RuntimeError(f"{url}: process exited {proc.returncode}\n{tail}")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} not healthy after {timeout} s\n{log.read_text()[-3000:]}")


class Processes:
    """Background processes, each in its own process group, killed group-wise on close."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: list[subprocess.Popen] = []

    def start(
        self, name: str, args: list[str], env: dict[str, str]
    ) -> tuple[subprocess.Popen, Path]:
        log = self.folder / f"{name}.log"
        proc = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        self.procs.append(proc)
        return proc, log

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group (flow subprocesses)
            except ProcessLookupError:
                pass
            proc.wait(timeout=20)


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[dict]:
    """Prefect server + MLflow server on 127.0.0.1 (own PREFECT_HOME and stores)."""
    tmp = tmp_path_factory.mktemp("stack")
    prefect_port, mlflow_port = _free_port(), _free_port()
    api = f"http://127.0.0.1:{prefect_port}/api"
    mlflow_uri = f"http://127.0.0.1:{mlflow_port}"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    env = {
        **base,
        "PREFECT_HOME": str(tmp / "prefect-home"),
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "DO_NOT_TRACK": "true",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "MLFLOW_TRACKING_URI": mlflow_uri,
        "FEDCORE_ARTIFACT_LOCATION": "mlflow-artifacts:/fedcore",  # through the server
        "FEDCORE_EXPERIMENT": "fedcore-deployments",
        "FEDCORE_DEVICE_LOCKS": str(tmp / "device-locks"),
        "MPLCONFIGDIR": str(tmp / "mpl"),
        "OMP_NUM_THREADS": "1",
        "PWD": str(ROOT),
    }
    procs = Processes(tmp)
    try:
        server, server_log = procs.start(
            "prefect-server",
            [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port",
             str(prefect_port), "--no-ui", "--analytics-off", "--no-scheduler"],
            env,
        )
        tracking, tracking_log = procs.start(
            "mlflow-server",
            [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(mlflow_port),
             "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp / 'mlflow.db'}",
             "--artifacts-destination", str(tmp / "mlartifacts")],
            env,
        )
        _wait_http(f"{api}/health", server, server_log)
        _wait_http(f"{mlflow_uri}/health", tracking, tracking_log)
        yield {"env": env, "api": api, "mlflow": mlflow_uri, "tmp": tmp, "procs": procs}
    finally:
        procs.close()


def _cli(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    done = subprocess.run(
        [str(BIN / "prefect"), "--no-prompt", *args], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=timeout,
    )
    assert done.returncode == 0, f"prefect {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _api(api: str, path: str, body: dict | None = None) -> dict | list:
    req = urllib.request.Request(
        f"{api}{path}", data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"}, method="GET" if body is None else "POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def worker(stack) -> dict:
    """The work pool, the ``gpu`` limit, prefect.yaml deployed, and one process worker."""
    env = stack["env"]
    _cli(env, "work-pool", "create", POOL, "--type", "process")
    _cli(env, "concurrency-limit", "create", "gpu", "1")
    _cli(env, "deploy", "--all")
    proc, log = stack["procs"].start(
        "worker",
        [str(BIN / "prefect"), "worker", "start", "--pool", POOL, "--limit", "1"],
        env,
    )
    return {"proc": proc, "log": log}


def test_sweep_deployment_runs_on_a_worker_and_records_through_mlflow_server(
    stack, worker, tmp_path
):
    from mlflow.tracking import MlflowClient

    from fedcore.tracking import load_model

    env, api = stack["env"], stack["api"]
    deployments = {d["name"]: d for d in _api(api, "/deployments/filter", {})}
    assert set(deployments) == {"simulate", "sweep", "tune", "report", "claims"}
    sweep_dep = deployments["sweep"]
    assert sweep_dep["work_pool_name"] == POOL
    schema = sweep_dep["parameter_openapi_schema"]["properties"]
    assert {"sweep_file", "overrides", "max_workers", "runner", "dask_address",
            "cells_per_gpu"} <= set(schema)
    assert [s["active"] for s in sweep_dep["schedules"]] == [False]
    assert sweep_dep["pull_steps"][0]["prefect.deployments.steps.set_working_directory"] == {
        "directory": str(ROOT)
    }

    sweep_file = tmp_path / "deployed.yaml"
    sweep_file.write_text(yaml.safe_dump({
        "name": "deployed",
        "grid": {"method": ["fedavg", "fedavgm"]},
        "set": {"rounds": 3, "model.name": "mlp", "dataset.num_clients": 6,
                "clients_per_round": 2},
    }))
    worker, worker_log = worker["proc"], worker["log"]
    params = {"sweep_file": str(sweep_file), "overrides": ["rounds=2"], "max_workers": 2}
    out = _cli(env, "deployment", "run", "sweep/sweep", "--params", json.dumps(params),
               "--watch", "--watch-timeout", "240", "--watch-interval", "2", timeout=300)
    assert worker.poll() is None, worker_log.read_text()[-3000:]

    runs = _api(api, "/flow_runs/filter", {"deployments": {"id": {"any_": [sweep_dep["id"]]}}})
    assert len(runs) == 1, out
    assert runs[0]["state_type"] == "COMPLETED", out + worker_log.read_text()[-3000:]
    assert runs[0]["parameters"]["overrides"] == ["rounds=2"]
    tasks = _api(api, "/task_runs/filter", {
        "flow_runs": {"id": {"any_": [runs[0]["id"]]}}, "task_runs": {"tags": {"all_": ["gpu"]}},
    })
    assert sorted(t["state_type"] for t in tasks) == ["COMPLETED", "COMPLETED"]
    # task runs are named after the cells' run names (fedavg-digits-a0.1-s0, ...)
    assert sorted(t["name"].split("-")[0] for t in tasks) == ["fedavg", "fedavgm"]
    artifacts = _api(api, "/artifacts/filter", {
        "artifacts": {"flow_run_id": {"any_": [runs[0]["id"]]}}})
    assert [a["type"] for a in artifacts] == ["markdown"]
    assert "workflowType=machine_learning" in artifacts[0]["data"]

    # a bad runner (or worker count) is refused when the run is created, not in the worker
    for bad in ({"runner": "dsak"}, {"max_workers": 0}):
        refused = subprocess.run(
            [str(BIN / "prefect"), "--no-prompt", "deployment", "run", "sweep/sweep",
             "--params", json.dumps({"sweep_file": str(sweep_file), **bad})],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )
        assert refused.returncode != 0, refused.stdout
    assert len(_api(api, "/flow_runs/filter", {
        "deployments": {"id": {"any_": [sweep_dep["id"]]}}})) == 1

    client = MlflowClient(stack["mlflow"])
    exp = client.get_experiment_by_name("fedcore-deployments").experiment_id
    parents = client.search_runs([exp], "tags.`fedcore.role` = 'sweep'")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    children = client.search_runs(
        [exp], f"tags.`mlflow.parentRunId` = '{parents[0].info.run_id}'"
    )
    assert sorted(c.data.tags["method"] for c in children) == ["fedavg", "fedavgm"]
    for child in children:
        assert child.info.status == "FINISHED"
        assert child.data.params["rounds"] == "2"
        assert 0.0 <= child.data.metrics["final/accuracy"] <= 1.0
        assert "config.yaml" in {a.path for a in client.list_artifacts(child.info.run_id)}
        # provenance, dataset input, logged model and system metrics, through the server
        tags = child.data.tags
        assert tags["fedcore.prefect_flow_run_id"] == runs[0]["id"]
        assert len(tags["mlflow.source.git.commit"]) == 40 and tags["mlflow.user"]
        assert tags["fedcore.version"] and tags["fedcore.torch_version"]
        assert tags["device"] and tags["fedcore.git.dirty"] in ("true", "false")
        (dataset,) = child.inputs.dataset_inputs
        assert dataset.dataset.name == "digits" and len(dataset.dataset.digest) == 16
        assert {"partition", "alpha", "seed", "clients"} <= {t.key for t in dataset.tags}
        assert "system/cpu_utilization_percentage" in child.data.metrics
        model = load_model(child.info.run_id, tracking_uri=stack["mlflow"])
        assert sum(p.numel() for p in model.parameters()) > 0
    # cells share the partition (same dataset, seed, alpha): one digest
    assert len({c.inputs.dataset_inputs[0].dataset.digest for c in children}) == 1
    assert (stack["tmp"] / "mlartifacts").is_dir()


def test_cancelling_a_deployed_sweep_stops_its_cells_at_a_round_boundary(stack, worker, tmp_path):
    """`prefect flow-run cancel`: the worker sends SIGTERM to the flow run's process; the cell
    in flight finishes its round and ends KILLED, the queued one never starts, the parent ends
    KILLED and the flow run Cancelled."""
    from mlflow.tracking import MlflowClient

    env, api = stack["env"], stack["api"]
    sweep_file = tmp_path / "cancelled.yaml"
    sweep_file.write_text(yaml.safe_dump({
        "name": "cancelled",
        "grid": {"seed": [0, 1]},
        # rounds enough that the cancel lands mid-run (later rounds' metrics reach the store in
        # batches, METRICS_EVERY_S; the first round's at once, and the cancel follows it)
        "set": {"rounds": 4000, "model.name": "mlp", "dataset.num_clients": 6,
                "clients_per_round": 2, "local.epochs": 1, "local.steps": 2},
    }))
    (dep,) = [d for d in _api(api, "/deployments/filter", {}) if d["name"] == "sweep"]
    before = {r["id"] for r in _api(api, "/flow_runs/filter", {})}
    _cli(env, "deployment", "run", "sweep/sweep", "--params",
         json.dumps({"sweep_file": str(sweep_file), "max_workers": 2}))
    (flow_run,) = [r for r in _api(api, "/flow_runs/filter", {"deployments": {
        "id": {"any_": [dep["id"]]}}}) if r["id"] not in before]

    client = MlflowClient(stack["mlflow"])
    query = "tags.sweep = 'cancelled' and tags.config_hash != ''"
    deadline = time.monotonic() + 240
    while True:
        assert time.monotonic() < deadline, worker["log"].read_text()[-3000:]
        exp = client.get_experiment_by_name("fedcore-deployments")
        running = [] if exp is None else client.search_runs(
            [exp.experiment_id], f"{query} and attributes.status = 'RUNNING' "
            "and metrics.`train/loss` > -1")
        if running:  # the ``gpu`` limit of 1 runs one cell at a time
            break
        time.sleep(1)
    _cli(env, "flow-run", "cancel", flow_run["id"])

    deadline = time.monotonic() + 180
    while _api(api, f"/flow_runs/{flow_run['id']}")["state_type"] not in (
        "CANCELLED", "CRASHED", "FAILED", "COMPLETED"
    ):
        assert time.monotonic() < deadline, worker["log"].read_text()[-3000:]
        time.sleep(1)
    state = _api(api, f"/flow_runs/{flow_run['id']}")
    assert state["state_type"] == "CANCELLED", (state["state"], worker["log"].read_text()[-3000:])
    assert worker["proc"].poll() is None, "the worker survives the cancellation"
    exp_id = client.get_experiment_by_name("fedcore-deployments").experiment_id
    cells = client.search_runs([exp_id], query)
    assert len(cells) == 1  # the queued cell never started
    for run in cells:
        rounds = len(client.get_metric_history(run.info.run_id, "train/loss"))
        assert run.info.status == "KILLED" and 0 < rounds < 4000, (run.info.status, rounds)
        assert run.data.tags["failure_reason"] == (
            f"StopRequested: stopped by SIGTERM after round {rounds}")
    (parent,) = client.search_runs([exp_id], "tags.`fedcore.role` = 'sweep' "
                                   "and tags.sweep = 'cancelled'")
    assert parent.info.status == "KILLED"
