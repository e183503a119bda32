"""Every recorded run uses one torch thread count (FEDCORE_TORCH_THREADS, default 1), whatever
the process had: `fedcore run`, the thread runner, Dask workers, tuning and claims then give a
cell the same numbers. Before, the thread runner's cells used torch's default (one thread per
core) and Dask's workers one thread: a CRAFT claim's seed gave 0.849 against 0.924."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from mlflow.tracking import MlflowClient

from fedcore.core.compose.configure import load_config
from fedcore.core.round.simulation import Simulation
from fedcore.runtime_env.env import THREADS_VARIABLE, torch_threads
from fedcore.tracking.machine import TORCH_THREADS_TAG
from fedcore.tracking.runner import run_tracked

OVERRIDES = ["method=fedavg", "model.name=mlp", "rounds=3", "dataset.num_clients=20"]
METRICS = ("train/loss", "test/loss", "test/accuracy")


def _alone(threads: int) -> dict[str, float]:
    """The last round of OVERRIDES simulated untracked under ``threads`` torch threads."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        return Simulation(load_config(None, OVERRIDES)).run().history[-1]
    finally:
        torch.set_num_threads(before)


def _recorded(tracking_uri: str, run_id: str) -> tuple[dict[str, float], dict[str, str]]:
    run = MlflowClient(tracking_uri).get_run(run_id)
    return run.data.metrics, run.data.tags


def test_the_thread_count_changes_the_numbers() -> None:
    """Why a count is pinned: 1 and 2 threads round reductions apart within three rounds."""
    one, two = _alone(1), _alone(2)
    assert any(one[k] != two[k] for k in METRICS)


@pytest.mark.parametrize("wanted", [None, "2"])
def test_a_recorded_run_uses_the_pinned_count(tracking, monkeypatch, wanted) -> None:
    if wanted is None:
        monkeypatch.delenv(THREADS_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(THREADS_VARIABLE, wanted)
    threads = int(wanted or 1)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3 - threads)  # the process starts at the other count
        run_id, result = run_tracked(load_config(None, OVERRIDES), figures=False)
        assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)
    metrics, tags = _recorded(tracking.tracking_uri, run_id)
    assert tags[TORCH_THREADS_TAG] == str(threads)
    expected = _alone(threads)
    assert {k: result.history[-1][k] for k in METRICS} == {k: expected[k] for k in METRICS}
    assert {k: metrics[k] for k in METRICS} == {k: expected[k] for k in METRICS}


def test_fedcore_run_from_a_two_thread_process_records_the_one_thread_numbers(tracking) -> None:
    """End to end through the CLI, which pins the count (and checks it before anything runs)
    ahead of run_tracked, since `fedcore run` builds its data before calling it."""
    env = {**os.environ, "OMP_NUM_THREADS": "2", "MLFLOW_TRACKING_URI": tracking.tracking_uri}
    env.pop(THREADS_VARIABLE, None)
    out = subprocess.run([sys.executable, "-m", "fedcore", "run", *OVERRIDES],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    (run,) = MlflowClient(tracking.tracking_uri).search_runs(
        [MlflowClient(tracking.tracking_uri).get_experiment_by_name("fedcore").experiment_id])
    assert run.data.tags[TORCH_THREADS_TAG] == "1"
    expected = _alone(1)
    assert {k: run.data.metrics[k] for k in METRICS} == {k: expected[k] for k in METRICS}


@pytest.mark.parametrize("bad", ["0", "two", "-1", "2.5", "99999"])
def test_a_bad_count_is_one_line_before_anything_runs(tracking, bad) -> None:
    env = {**os.environ, THREADS_VARIABLE: bad, "MLFLOW_TRACKING_URI": tracking.tracking_uri}
    out = subprocess.run([sys.executable, "-m", "fedcore", "run", *OVERRIDES],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and THREADS_VARIABLE in lines[0] and "1 to 1024" in lines[0]
    assert not MlflowClient(tracking.tracking_uri).search_runs(
        [e.experiment_id for e in MlflowClient(tracking.tracking_uri).search_experiments()])


def test_the_default_is_one(monkeypatch) -> None:
    monkeypatch.delenv(THREADS_VARIABLE, raising=False)
    assert torch_threads() == 1
    monkeypatch.setenv(THREADS_VARIABLE, " 4 ")
    assert torch_threads() == 4
