"""Hostile sweep files and concurrent sweeps (issue 27): one-line refusals before Prefect
starts or the store is created, one run per config, reports only under reports/."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedcore.cli import main
from fedcore.specs.sweep import load_sweep

# these tests check that nothing creates the store, or how it is created: no ready-made copy
pytestmark = pytest.mark.new_store

TINY_SET = "set: {rounds: 1, model.name: mlp, dataset.num_clients: 6, clients_per_round: 2}\n"


def _file(tmp_path: Path, text: str, stem: str = "s") -> Path:
    path = tmp_path / f"{stem}.yaml"
    path.write_text(text)
    return path


BAD = [
    ("", "is empty; expected a mapping with a grid"),
    ("name: [1, 2]\ngrid: {seed: [0]}\n", "sweep.name: expected a string (got a list"),
    ("set: [1, 2]\ngrid: {seed: [0]}\n", "sweep.set: expected a mapping of KEY: value (got a list"),
    ("name: ../../x\ngrid: {seed: [0]}\n", "sweep.name: '../../x' is not a valid sweep name"),
    ("name: /tmp/abs\ngrid: {seed: [0]}\n", "sweep.name: '/tmp/abs' is not a valid sweep name"),
    ("name: ..\ngrid: {seed: [0]}\n", "sweep.name: '..' is not a valid sweep name"),
    ("name: x\n" + TINY_SET, "sweep.grid: missing or empty"),
    ("grid: {dataset.name: [mnist, fashion_mnist]}\nset: {dataset.name: digits}\n",
     "sweep.grid.dataset.name: also set by set (dataset.name)"),
    ("grid: {dataset.alpha: [0.1, 1.0]}\nset: {dataset: {partition: iid}}\n",
     "sweep.grid.dataset.alpha: also set by set (dataset)"),
    ("base: /etc/shadow\ngrid: {seed: [0]}\n",
     "base: '/etc/shadow' in 's.yaml' is not a .yaml or .yml file"),
]


@pytest.mark.parametrize("command", ["sweep", "report"])
def test_a_base_that_is_no_yaml_file_is_not_echoed(capsys, tracking, tmp_path, command):
    """``base: /etc/shadow`` echoed the file's first line (parsed as an unknown key)."""
    secret = tmp_path / "shadow"
    secret.write_text("root:SECRETHASH:19000:0:99999:7:::\n")
    path = _file(tmp_path, f"base: {secret}\ngrid: {{seed: [0]}}\n")
    assert main([command, str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "SECRETHASH" not in err and "is not a .yaml or .yml file" in err, err


@pytest.mark.parametrize(("text", "message"), BAD)
@pytest.mark.parametrize("command", ["sweep", "report"])
def test_bad_sweep_file_is_one_line_before_anything_is_written(
    capsys, tracking, tmp_path, text, message, command
):
    path = _file(tmp_path, text)
    assert main([command, str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedcore: error: ") and "\n" not in err and message in err
    assert not (tmp_path / "mlflow.db").exists()  # the store was not created
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_method_keys_in_set_combine_with_a_grid_over_methods(tmp_path):
    # a method's own keys combine with a grid over methods (the method is loaded first)
    both = _file(tmp_path, "grid: {method: [fedavg, fedavgm]}\n"
                 "set: {method.aggregator.server_lr: 0.5, rounds: 1}\n", "m")
    assert [c.config.method.name for c in load_sweep(both).cells] == ["fedavg", "fedavgm"]


@pytest.mark.parametrize("grid", ["{method: [fedavg, fedavg]}", "{dataset.alpha: [0.1, 1e-1]}",
                                  "[{seed: [0]}, {seed: [0, 1]}]"])
def test_duplicate_cells_run_once(tmp_path, grid):
    spec = load_sweep(_file(tmp_path, f"grid: {grid}\n" + TINY_SET))
    hashes = [c.config.config_hash() for c in spec.cells]
    assert len(hashes) == len(set(hashes)) == (2 if "seed: [0, 1]" in grid else 1)
    note = spec.duplicates_note()
    assert note is not None and note.startswith("1 grid point(s) have the config of an earlier")


def _finished(tracking, config_hash: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment).experiment_id
    return client.search_runs([exp], f"tags.config_hash = '{config_hash}' and "
                                     "attributes.status = 'FINISHED'")


def test_two_sweeps_running_one_cell_together_give_one_finished_run(tracking):
    """Two sweeps of one file at once (here two threads; processes take the same flock)."""
    from concurrent.futures import ThreadPoolExecutor

    from fedcore.core.compose.configure import load_config
    from fedcore.flows.sweep import _simulate_cell
    from fedcore.tracking import get_experiment_id, mlflow_client
    from fedcore.tracking.writers import wait_for_runs

    cfg = load_config(None, ["rounds=1", "model.name=mlp", "dataset.num_clients=6",
                             "clients_per_round=2"])
    client = mlflow_client(tracking)
    parent = client.create_run(get_experiment_id(client, tracking)).info.run_id
    with ThreadPoolExecutor(2) as pool:
        rows = list(pool.map(lambda _: _simulate_cell(
            cfg.resolved(), parent, "x", tracking, 1, True, False, {}), range(2)))
    wait_for_runs()
    assert sorted(r["status"] for r in rows) == ["finished", "skipped"]
    assert len(_finished(tracking, cfg.config_hash())) == 1


def test_a_claim_of_a_killed_holder_is_free_at_once(tmp_path):
    import signal
    import subprocess
    import sys

    from fedcore.tracking.cell_claim import claim_dir, try_claim

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = try_claim("abc", uri)  # free; creates the folder of claims
    assert first is not None
    first.release()
    lock = claim_dir(uri) / "abc.lock"
    holder = subprocess.Popen(  # a holder that takes the claim's flock, then is SIGKILLed
        [sys.executable, "-c", "import fcntl, os, time\n"
         f"fcntl.flock(os.open({str(lock)!r}, os.O_RDWR), fcntl.LOCK_EX)\n"
         "print('held', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert try_claim("abc", uri) is None  # held by the other process
        claim = try_claim("abd", uri)  # another config is free
        assert claim is not None
        claim.release()
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        again = try_claim("abc", uri)
        assert again is not None
        again.release()
    finally:
        holder.kill()
        holder.wait(10)


def test_a_rerun_adds_no_duplicate_metric_step_to_the_parent(tracking):
    from mlflow.tracking import MlflowClient

    from fedcore.tracking.parents import sweep_summary

    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(tracking.experiment)
    run = client.create_run(exp_id).info.run_id
    rows = [{"cell": "a", "status": "finished", "final/accuracy": 0.5}]
    for again in (rows, rows, [{**rows[0], "status": "skipped"}]):
        sweep_summary(client, run, "s", again, planned=1)
    for key in ("cells/planned", "cells/finished", "cells/skipped", "best/final_accuracy"):
        steps = [m.step for m in client.get_metric_history(run, key)]
        assert len(steps) == len(set(steps)), (key, steps)
    assert client.get_run(run).data.metrics["cells/skipped"] == 1.0


SECRET_URI = "http://alice:s3cret@127.0.0.1:9"


def test_links_that_are_stored_carry_no_password():
    """Optuna's ``mlflow_run_url`` and Prefect's artifact links are built by these functions."""
    from fedcore.tracking.links import experiment_url, run_url, without_credentials
    from fedcore.tracking.settings import TrackingSettings

    settings = TrackingSettings(SECRET_URI, "file:///tmp/a", "fedcore")
    for url in (run_url(settings, "1", "abc"), experiment_url(settings, "1")):
        assert url.startswith("http://127.0.0.1:9/#/experiments/1") and "s3cret" not in url
    assert without_credentials("postgresql://bob:pw@db:5432/x") == "postgresql://db:5432/x"
    assert without_credentials("sqlite:////tmp/mlflow.db") == "sqlite:////tmp/mlflow.db"


def test_fedcore_ui_prints_no_password(capsys, monkeypatch):
    import fedcore.tracking.ui as ui

    monkeypatch.setenv("MLFLOW_TRACKING_URI", SECRET_URI)
    import fedcore.tracking.reach as reach

    monkeypatch.setattr(ui, "_experiment_id", lambda settings: "1")  # no server at port 9
    monkeypatch.setattr(reach, "check_server", lambda uri: None)  # as if it answered
    assert main(["ui"]) == 0
    out = capsys.readouterr().out
    assert "http://127.0.0.1:9/#/experiments/1/runs" in out and "s3cret" not in out
    assert "alice" not in out


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_dask_scheduler_fails_fast_in_one_line(capsys, tracking, tmp_path):
    import time

    path = _file(tmp_path, "grid: {seed: [0]}\n" + TINY_SET)
    address = f"tcp://127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    assert main(["sweep", str(path), "--runner", "dask", "--dask-address", address]) == 2
    assert time.monotonic() - start < 10
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fedcore: error: dask_address: no Dask scheduler reachable at "
                          f"{address} (") and "\n" not in err
    assert not (tmp_path / "mlflow.db").exists()  # no parent run left RUNNING: none at all


def test_a_sweep_whose_task_runner_fails_does_not_leave_its_parent_running(
    prefect_harness, tracking, tmp_path, monkeypatch
):
    import fedcore.flows.sweep as flow
    from fedcore.tracking import get_experiment_id, mlflow_client

    def unreachable(*args, **kwargs):
        raise OSError("Timed out trying to connect to tcp://10.0.0.5:8786 after 30 s")

    monkeypatch.setattr(flow, "make_task_runner", unreachable)
    path = _file(tmp_path, "name: gone\ngrid: {seed: [0]}\n" + TINY_SET)
    with pytest.raises(OSError, match="Timed out"):
        flow.sweep(str(path))
    client = mlflow_client(tracking)
    (parent,) = client.search_runs([get_experiment_id(client, tracking)],
                                   "tags.`fedcore.role` = 'sweep'")
    assert parent.info.status == "FAILED"
