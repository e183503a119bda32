"""Checkpoints: plain files loaded with weights_only=True; resuming equals not stopping."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from mlflow.tracking import MlflowClient

from fedcore.core.callbacks import Callback
from fedcore.core.compose.configure import load_config
from fedcore.core.config import project_root
from fedcore.core.round import checkpoint
from fedcore.core.round.probes import run_round
from fedcore.core.round.simulation import Simulation
from fedcore.tracking.runner import run_tracked

FAST = ["model.name=mlp", "dataset.num_clients=6", "clients_per_round=3", "local.epochs=1",
        "local.steps=3"]
TIMING = "agg/seconds"  # wall-clock, the one metric that differs between any two runs


class StopAt(Callback):
    """Interrupts the loop after round ``r`` was reported (before its checkpoint is written)."""

    def __init__(self, r: int) -> None:
        self.r = r

    def on_round_end(self, record):
        if record.round == self.r:
            raise KeyboardInterrupt(f"stopped at round {record.round}")


def _numbers(history):
    return [{k: v for k, v in h.items() if k != TIMING} for h in history]


def _same_tables(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.round == y.round and sorted(x.extra) == sorted(y.extra)
        for name in ("client_id", "accuracy", "loss", "num_samples", "sampled"):
            np.testing.assert_array_equal(getattr(x, name), getattr(y, name))
        for name in x.extra:
            np.testing.assert_array_equal(x.extra[name], y.extra[name])


def _cfg(tmp_path, method, *extra):
    return load_config(None, [*FAST, f"method={method}", f"checkpoint_dir={tmp_path / 'ck'}",
                              *extra])


def test_checkpoint_keys_are_recorded_but_not_hashed(tmp_path):
    plain = load_config(None, FAST)
    ck = _cfg(tmp_path, "fedavg", "checkpoint_every=2")
    assert ck.config_hash() == plain.config_hash()
    assert ck.resolved()["checkpoint_every"] == 2
    assert checkpoint.run_folder(ck) == tmp_path / "ck" / plain.config_hash()
    rel = load_config(None, [*FAST, "checkpoint_dir=ckpts"])
    assert checkpoint.run_folder(rel) == project_root() / "ckpts" / plain.config_hash()


@pytest.mark.slow
def test_checkpoint_round_trip_with_weights_only(tmp_path):
    cfg = _cfg(tmp_path, "ef_topk", "rounds=3", "checkpoint_every=1")
    sim = Simulation(cfg, [StopAt(3)])
    with pytest.raises(KeyboardInterrupt):
        sim.run()
    files = checkpoint.checkpoint_files(checkpoint.run_folder(cfg))
    assert [f.name for f in files] == ["round-000001.pt", "round-000002.pt"]
    assert not list(checkpoint.run_folder(cfg).glob("*.tmp"))
    raw = torch.load(files[-1], weights_only=True)  # plain containers and tensors only
    assert raw["format"] == checkpoint.FORMAT and raw["round"] == 2
    assert raw["store"] and all("ef_residual" in s for s in raw["store"].values())
    assert {"torch", "cuda", "numpy", "python"} <= set(raw["rng"])

    fresh = Simulation(cfg)
    state = checkpoint.load(files[-1])
    fresh.load_state_dict(state)
    assert fresh.round == 2 and fresh.bytes_up_total == state["bytes_up_total"] > 0
    assert torch.equal(fresh.params, state["params"])
    again = fresh.state_dict()
    for cid, entry in state["store"].items():
        assert torch.equal(again["store"][cid]["ef_residual"], entry["ef_residual"])
    assert again["history"] == state["history"] and len(state["client_tables"]) == 2
    assert torch.equal(torch.get_rng_state(), state["rng"]["torch"])

    files[-1].write_bytes(files[-1].read_bytes()[:1000])  # a torn newest file
    assert checkpoint.latest(checkpoint.run_folder(cfg))["round"] == 1


@pytest.mark.parametrize(("method", "engine"), [
    ("fedavgm", "sequential"), ("ef_topk", "sequential"), ("ditto", "sequential"),
    ("fedprox", "vectorised"), ("moon", "vectorised"), ("ditto", "vectorised"),
])
@pytest.mark.slow
def test_resume_after_interruption_is_bit_identical(tmp_path, method, engine):
    assert_resume_is_bit_identical(tmp_path, method, f"engine={engine}")


def assert_resume_is_bit_identical(tmp_path, method, *extra):
    """4 rounds unbroken == interrupted in round 3, resumed from round 2's checkpoint."""
    full = Simulation(_cfg(tmp_path, method, "rounds=4", *extra)).run()
    cfg = _cfg(tmp_path, method, "rounds=4", *extra, "checkpoint_every=2")
    with pytest.raises(KeyboardInterrupt):
        Simulation(cfg, [StopAt(3)]).run()
    resumed = Simulation(cfg)
    assert resumed.resume() and resumed.round == 2
    result = resumed.run()
    assert _numbers(result.history) == _numbers(full.history)
    assert result.summary == full.summary
    _same_tables(result.client_tables, full.client_tables)
    assert not checkpoint.run_folder(cfg).exists()  # removed once the run finished


def _metric_rows(client, run_id):
    run = client.get_run(run_id)
    return {key: [(m.step, m.value) for m in client.get_metric_history(run_id, key)]
            for key in run.data.metrics
            if key != TIMING and not key.startswith("system/")}  # machine samples, not results


@pytest.mark.slow
def test_tracked_resume_continues_the_same_run(tracking, tmp_path):
    ref_id, ref = run_tracked(_cfg(tmp_path, "fedfv", "rounds=4", "seed=1"))
    client = MlflowClient(tracking.tracking_uri)
    expected = _metric_rows(client, ref_id)
    ref_frame = pd.read_parquet(client.download_artifacts(ref_id, "per_client.parquet",
                                                          str(tmp_path)))
    client.delete_run(ref_id)  # keep one run per config hash in this store

    cfg = _cfg(tmp_path, "fedfv", "rounds=4", "seed=1", "checkpoint_every=2")
    with pytest.raises(KeyboardInterrupt):
        run_tracked(cfg, callbacks=[StopAt(3)])  # round 3 is logged, its checkpoint is not
    exp = client.get_experiment_by_name(tracking.experiment).experiment_id
    (failed,) = client.search_runs([exp], f"tags.config_hash = '{cfg.config_hash()}'")
    assert failed.info.status == "FAILED"
    assert "KeyboardInterrupt" in failed.data.tags["failure_reason"]
    names = {a.path for a in client.list_artifacts(failed.info.run_id, "checkpoint")}
    assert names == {"checkpoint/checkpoint.pt"}

    run_id, result = run_tracked(cfg)
    assert run_id == failed.info.run_id and result.summary == ref.summary
    (run,) = client.search_runs([exp], f"tags.config_hash = '{cfg.config_hash()}'")
    assert run.info.status == "FINISHED" and "failure_reason" not in run.data.tags
    assert run.data.tags["fedcore.resumed_from_round"] == "2"
    assert _metric_rows(client, run_id) == expected  # every (metric, round) exactly once
    cpu = [m.step for m in client.get_metric_history(run_id, "system/cpu_utilization_percentage")]
    assert len(cpu) >= 2 and len(set(cpu)) == len(cpu)  # the resumed run's samples go on
    (tmp_path / "resumed").mkdir()
    frame = pd.read_parquet(client.download_artifacts(run_id, "per_client.parquet",
                                                      str(tmp_path / "resumed")))
    pd.testing.assert_frame_equal(frame, ref_frame)


@pytest.mark.slow
def test_resume_from_mlflow_artifact_when_local_folder_is_gone(tracking, tmp_path):
    cfg = _cfg(tmp_path, "fedavgm", "rounds=3", "seed=2", "checkpoint_every=1")
    full = Simulation(cfg.model_copy(update={"checkpoint_every": 0})).run()
    with pytest.raises(KeyboardInterrupt):
        run_tracked(cfg, callbacks=[StopAt(3)])
    checkpoint.remove(checkpoint.run_folder(cfg))

    class Seen(Callback):
        def on_run_start(self, sim):
            self.start = sim.round

    seen = Seen()
    _, result = run_tracked(cfg, callbacks=[seen])
    assert seen.start == 2 and result.summary == full.summary


def _wait_for(path: Path, proc: subprocess.Popen, log: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not checkpoint.checkpoint_files(path):
        assert proc.poll() is None, log.read_text()[-2000:]
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.02)


@pytest.mark.slow
def test_sigkill_then_rerun_gives_identical_final_metrics(tracking, tmp_path):
    args = [*FAST, "rounds=10", "seed=3", "method=fedavgm", f"checkpoint_dir={tmp_path / 'ck'}"]
    cfg = load_config(None, [*args, "checkpoint_every=1"])
    reference = Simulation(load_config(None, args)).run()
    command = [sys.executable, "-m", "fedcore.cli", "run", *args, "checkpoint_every=1"]
    # bit-identity holds at one thread count: the killed process uses this process's
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    log = tmp_path / "killed.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    _wait_for(checkpoint.run_folder(cfg), proc, log)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment).experiment_id
    query = f"tags.config_hash = '{cfg.config_hash()}'"
    (killed,) = client.search_runs([exp], query)
    assert killed.info.status == "RUNNING"  # what a SIGKILL leaves behind
    assert checkpoint.checkpoint_files(checkpoint.run_folder(cfg))

    from fedcore.cli import main

    assert main(command[3:]) == 0  # the same command line, rerun (in this process: no restart)
    runs = client.search_runs([exp], query)
    assert [(r.info.run_id, r.info.status) for r in runs] == [(killed.info.run_id, "FINISHED")]
    metrics = runs[0].data.metrics
    for key, value in reference.summary.items():
        assert metrics[key] == value, key
    history = client.get_metric_history(runs[0].info.run_id, "test/accuracy")
    assert [(m.step, m.value) for m in history] == [
        (h["round"], h["test/accuracy"]) for h in reference.history
    ]
    assert not checkpoint.run_folder(cfg).exists()


def _old_checkpoint(tmp_path, cfg) -> Path:
    """Round 1's checkpoint as fedcore wrote it before round protocol v2: no bytes_down_total,
    the aggregator's and compressor's last metrics beside their states."""
    sim = Simulation(cfg)
    run_round(sim, 1)
    sim.round = 1
    state = sim.state_dict()
    del state["bytes_down_total"]
    state.update(aggregator_last={"metrics": {}, "client_stats": None}, compressor={},
                 compressor_last_metrics={})
    return checkpoint.save(state, checkpoint.run_folder(cfg), 1)


def test_resuming_a_checkpoint_of_the_old_shape_is_a_one_line_error_before_compute(tmp_path):
    cfg = _cfg(tmp_path, "fedavg", "rounds=3", "checkpoint_every=1")
    path = _old_checkpoint(tmp_path, cfg)
    sim = Simulation(cfg)
    start = sim.params.clone()
    with pytest.raises(checkpoint.CheckpointError) as err:
        sim.resume()
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"checkpoint {path} cannot be resumed: it lacks bytes_down_total")
    assert f"delete the folder {path.parent} and rerun" in msg
    assert sim.round == 0 and torch.equal(sim.params, start) and not sim.history


@pytest.mark.slow
def test_fedcore_run_on_an_old_checkpoint_exits_2_with_the_file_and_the_fix(
    tmp_path, tracking, capsys
):
    from fedcore.cli import main

    over = [*FAST, "method=fedavg", "rounds=3", "checkpoint_every=1",
            f"checkpoint_dir={tmp_path / 'ck'}"]
    path = _old_checkpoint(tmp_path, load_config(None, over))
    assert main(["run", *over]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"fedcore: error: checkpoint {path} cannot be resumed: it lacks "
                          "bytes_down_total")
    assert "delete the folder" in err
    checkpoint.remove(path.parent)  # the fix the line names: the rerun starts from round 1
    assert main(["run", *over]) == 0


class _Seen(Callback):
    """Overrides only the checkpoint report; the other hooks are the base's no-ops."""

    def __init__(self) -> None:
        self.paths: list[Path] = []

    def on_checkpoint(self, path: Path) -> None:
        self.paths.append(Path(path))


def test_callbacks_get_every_report_from_the_explicit_protocol(tmp_path):
    cfg = _cfg(tmp_path, "fedavg", "rounds=2", "checkpoint_every=1")
    seen = _Seen()
    Simulation(cfg, [seen]).run()
    assert [p.name for p in seen.paths] == ["round-000001.pt", "round-000002.pt"]

    class Duck:  # the loop's methods, but not a Callback
        def on_run_start(self, sim):
            raise AssertionError("not reached")

    with pytest.raises(TypeError, match="Duck is not a fedcore.core.callbacks.Callback"):
        Simulation(cfg, [Duck()]).run()


@pytest.mark.slow
def test_an_old_checkpoint_uploaded_to_mlflow_names_its_run_and_the_fix(tracking, tmp_path):
    """The fallback copy (``checkpoint/checkpoint.pt`` of the unfinished run) of the old shape."""
    cfg = _cfg(tmp_path, "fedavg", "rounds=3", "checkpoint_every=1")
    with pytest.raises(KeyboardInterrupt):
        run_tracked(cfg, callbacks=[StopAt(2)])  # an unfinished run with round 1 uploaded
    old = _old_checkpoint(tmp_path, cfg)
    upload = tmp_path / "up" / "checkpoint.pt"
    upload.parent.mkdir()
    upload.write_bytes(old.read_bytes())
    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment).experiment_id
    (run,) = client.search_runs([exp], f"tags.config_hash = '{cfg.config_hash()}'")
    client.log_artifact(run.info.run_id, str(upload), "checkpoint")  # replaces the new-shape one
    checkpoint.remove(checkpoint.run_folder(cfg))
    with pytest.raises(checkpoint.CheckpointError) as err:
        run_tracked(cfg)
    msg = str(err.value)
    assert "\n" not in msg and "lacks bytes_down_total" in msg
    assert f"checkpoint/checkpoint.pt of MLflow run {run.info.run_id}" in msg
    assert f"mlflow runs delete --run-id {run.info.run_id}" in msg
