"""Scale-out: a sweep on a Dask LocalCluster (2 worker processes) equals the thread runner."""

from pathlib import Path

import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient

from fedcore.core.config import ConfigError
from fedcore.tracking import load_settings
from tests.processes import prefect_home

CELLS = ["fedavg", "fedprox"]


def _sweep_file(tmp_path: Path, cells: list[str] = CELLS) -> Path:
    path = tmp_path / f"scaleout-{'-'.join(cells)}.yaml"
    path.write_text(yaml.safe_dump({
        "name": "scaleout",
        "grid": {"method": cells},
        "set": {"rounds": 2, "model.name": "mlp", "dataset.num_clients": 6,
                "clients_per_round": 2},
    }))
    return path


def _use_store(monkeypatch, folder: Path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{folder / 'mlflow.db'}")
    monkeypatch.setenv("FEDCORE_ARTIFACT_LOCATION", str(folder / "artifacts"))
    return load_settings()


def _children(settings) -> dict[str, tuple[str, dict[str, float]]]:
    client = MlflowClient(settings.tracking_uri)
    exp = client.get_experiment_by_name(settings.experiment).experiment_id
    parents = client.search_runs([exp], "tags.`fedcore.role` = 'sweep'")
    assert len(parents) == 1
    runs = client.search_runs([exp])
    return {
        r.data.tags["method"]: (
            r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id,
            {k: v for k, v in r.data.metrics.items()
             if not k.startswith(("agg/seconds", "system/"))},  # timing and machine samples
        )
        for r in runs
        if r.info.run_id != parents[0].info.run_id
    }


@pytest.mark.slow
def test_dask_local_cluster_gives_the_thread_runner_metrics(prefect_harness, monkeypatch, tmp_path):
    """The same cells, bit for bit, whatever runs them: one thread worker or two, the cells in
    either order, in this process (threads) or in two Dask worker processes."""
    from fedcore.flows.sweep import sweep

    path = _sweep_file(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # Dask workers run single-threaded (OMP_NUM_THREADS=1)
    try:
        thread_store = _use_store(monkeypatch, tmp_path / "thread")
        thread_rows = sweep(str(path), max_workers=2, runner="thread")
        one_store = _use_store(monkeypatch, tmp_path / "one-worker-reversed")
        one_rows = sweep(str(_sweep_file(tmp_path, CELLS[::-1])), max_workers=1,
                         runner="thread")
    finally:
        torch.set_num_threads(threads)
    dask_store = _use_store(monkeypatch, tmp_path / "dask")
    dask_rows = sweep(str(path), max_workers=2, runner="dask")

    assert [r["status"] for r in thread_rows] == ["finished"] * len(CELLS)
    assert [r["status"] for r in dask_rows] == ["finished"] * len(CELLS)
    assert [r["status"] for r in one_rows] == ["finished"] * len(CELLS)
    on_threads, on_dask = _children(thread_store), _children(dask_store)
    on_one = _children(one_store)
    assert sorted(on_dask) == sorted(CELLS)
    assert all(nested for nested, _ in on_dask.values())
    for method in CELLS:
        assert on_dask[method][1] == on_threads[method][1], method
        assert on_one[method][1] == on_threads[method][1], method
    assert {r["final/accuracy"] for r in dask_rows} == {
        r["final/accuracy"] for r in thread_rows
    }


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"runner": "ray"}, "runner"),
        ({"workers": 0}, "workers"),
        ({"cells_per_gpu": 0}, "cells_per_gpu"),
        ({"dask_address": "tcp://127.0.0.1:1"}, "dask_address"),
    ],
)
def test_bad_runner_options_are_rejected_before_any_run(kwargs, key):
    from fedcore.flows.runners import check_runner

    args = {"runner": "thread", "workers": 1, "dask_address": None, "cells_per_gpu": 1}
    with pytest.raises(ConfigError, match=f"^{key}: "):
        check_runner(**{**args, **kwargs})


def test_cli_rejects_bad_runner_options_with_exit_2(tmp_path, capsys):
    from fedcore.cli import main

    path = str(_sweep_file(tmp_path))
    assert main(["sweep", path, "--runner", "ray"]) == 2
    assert capsys.readouterr().err.strip() == (
        "fedcore: error: runner: unknown runner 'ray'; allowed: thread, dask"
    )
    assert main(["sweep", path, "--dask-address", "tcp://127.0.0.1:1"]) == 2
    assert "dask_address: needs runner=dask" in capsys.readouterr().err


@pytest.mark.slow
def test_a_sweep_on_its_own_prefect_server_sets_no_gpu_limit(tmp_path):
    """A ``gpu`` tag limit as large as the pool made every cell wait for the slot its
    predecessor was releasing (benchmarks/prefect_handoff.py); the flow sets none, and GPU seats
    are kept by device locks. The temporary server's database is read after the sweep."""
    import os
    import sqlite3
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "FEDCORE_ARTIFACT_LOCATION": str(tmp_path / "artifacts"),
           "PREFECT_HOME": prefect_home(tmp_path / "prefect"), "PYTHONPATH": str(root)}
    env.pop("PREFECT_API_URL", None)
    done = subprocess.run([sys.executable, "-m", "fedcore", "sweep", str(_sweep_file(tmp_path)),
                           "rounds=1"], env=env, cwd=root, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    with sqlite3.connect(tmp_path / "prefect" / "prefect.db") as db:
        limits = [name for (name,) in db.execute("select name from concurrency_limit_v2")]
    assert "tag:gpu" not in limits


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["sequential", "vectorised"])
def test_dropout_cells_in_parallel_threads_equal_cells_run_alone(engine):
    import threading

    from fedcore.core.compose.configure import load_config
    from fedcore.core.round.simulation import Simulation

    tiny_cnn = ["model.name=cnn", "rounds=1", "dataset.num_clients=4", "clients_per_round=2",
                "local.steps=3", f"engine.backend={engine}"]

    def run(seed: int, out: dict) -> None:
        out[seed] = Simulation(load_config(None, [*tiny_cnn, f"seed={seed}"])).run().history

    alone: dict = {}
    for seed in (0, 1):
        run(seed, alone)
    parallel: dict = {}
    threads = [threading.Thread(target=run, args=(seed, parallel)) for seed in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    strip = [{k: v for k, v in h.items() if k != "agg/seconds"} for h in alone[0]]
    assert strip == [{k: v for k, v in h.items() if k != "agg/seconds"} for h in parallel[0]]
    assert [h["train/loss"] for h in alone[1]] == [h["train/loss"] for h in parallel[1]]


def _worker_settings() -> tuple[str | None, bool]:
    import os

    import dask

    return (os.environ.get("MALLOC_TRIM_THRESHOLD_"),
            dask.config.get("distributed.worker.profile.enabled"))


def test_local_cluster_workers_start_without_dasks_malloc_trim_setting():
    """Dask gives its workers MALLOC_TRIM_THRESHOLD_=65536 (1.2-1.4x slower training,
    benchmarks/worker_malloc.py) and a statistical profiler; the LocalCluster of a dask sweep
    starts them with neither."""
    import dask
    from distributed import Client, LocalCluster

    from fedcore.flows.runners import make_task_runner

    dask.config.refresh()  # Dask's defaults: the variable is set for its workers
    make_task_runner("dask", 1)
    with (LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                       dashboard_address=None) as cluster, Client(cluster) as client):
        assert client.submit(_worker_settings).result() == (None, False)


def test_a_cluster_started_ahead_is_the_one_the_sweeps_task_runner_takes_over(monkeypatch):
    """`fedcore sweep --runner dask` starts its LocalCluster while the Prefect server starts;
    the flow's task runner must take that one over (a second cluster would double the workers'
    start-up and memory), whatever the order of the workers' environment, and one not taken
    over is closed."""
    from fedcore.flows import runners

    try:
        _take_over_a_cluster_started_ahead(monkeypatch)
    finally:  # a failed check leaves no cluster running
        runners.close_early_clusters()


def _take_over_a_cluster_started_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    from fedcore.flows import runners

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    runners.start_cluster_early(1, "http://127.0.0.1:1/api")
    # as in fedcore.flows.server.prefect_api: the flow runs with the server's URL set, so the
    # workers' environment is built again, in another order
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")
    (early,) = runners._early.values()
    task_runner = runners.make_task_runner("dask", 1, api_url="http://127.0.0.1:1/api")
    assert not runners._early
    with task_runner:
        assert task_runner.client.cluster is early.result()
        assert len(task_runner.client.scheduler_info()["workers"]) == 1
    assert early.result().status.name == "closed"

    runners.start_cluster_early(1, "http://127.0.0.1:2/api")  # a stop came before the flow
    (unused,) = runners._early.values()
    runners.close_early_clusters()
    assert not runners._early and unused.result().status.name == "closed"
