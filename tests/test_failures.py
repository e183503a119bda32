"""Failures: FAILED with a reason, the sweep goes on, reruns retry only what did not finish;
concurrent cells logging into one SQLite store lose no metric row."""

import sqlite3
import threading
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from fedcore.core.compose.configure import load_config
from fedcore.tracking.retry import is_locked, with_retry
from fedcore.tracking.runner import run_tracked

pytestmark = pytest.mark.slow  # end to end (see docs/how-to/tests.md)

FAST = {"model.name": "mlp", "dataset.num_clients": 6, "clients_per_round": 3,
        "local.epochs": 1, "local.steps": 3}
DIVERGE = 1.0e6  # local.lr that makes every client's update non-finite in round 1


def _overrides(**extra):
    return [f"{k}={v}" for k, v in {**FAST, **extra}.items()]


def test_divergence_marks_the_run_failed_with_reason(tracking):
    cfg = load_config(None, _overrides(rounds=3, **{"local.lr": DIVERGE}))
    with pytest.raises(FloatingPointError, match="diverged at round 1"):
        run_tracked(cfg)
    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment).experiment_id
    (run,) = client.search_runs([exp])
    assert run.info.status == "FAILED"
    assert run.data.tags["failure_reason"].startswith("FloatingPointError: diverged at round 1")
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")] == [1]


def _runs_by_hash(client, exp):
    out: dict[str, list] = {}
    for run in client.search_runs([exp], "tags.config_hash != ''"):
        out.setdefault(run.data.tags["config_hash"], []).append(run)
    return out


def test_sweep_marks_failures_and_rerun_retries_only_unfinished(prefect_harness, tracking,
                                                                tmp_path):
    from fedcore.flows.sweep import sweep

    not_a_dir = tmp_path / "occupied"
    not_a_dir.write_text("a file where the checkpoint folder should go")
    path = tmp_path / "fail.yaml"
    path.write_text(yaml.safe_dump({
        "name": "fail",
        "grid": [
            {"method": ["fedavg"], "local.lr": [0.05, DIVERGE],
             "checkpoint_dir": [str(tmp_path / "ck")]},
            {"method": ["fedavgm"], "checkpoint_dir": [str(not_a_dir)]},
        ],
        "set": {**FAST, "rounds": 2, "checkpoint_every": 1},
    }))
    first = sweep(str(path))
    assert [r["status"] for r in first] == ["finished", "failed", "failed"]
    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment).experiment_id
    by_hash = _runs_by_hash(client, exp)
    assert len(by_hash) == 3 and all(len(runs) == 1 for runs in by_hash.values())
    ok, diverged, broken = (
        next(rs[0] for rs in by_hash.values() if pred(rs[0]))
        for pred in (
            lambda r: r.info.status == "FINISHED",
            lambda r: "diverged" in r.data.tags.get("failure_reason", ""),
            lambda r: r.data.tags["method"] == "fedavgm",
        )
    )
    assert diverged.info.status == "FAILED" and broken.info.status == "FAILED"
    assert "occupied" in broken.data.tags["failure_reason"]
    (parent,) = client.search_runs([exp], "tags.`fedcore.role` = 'sweep'")
    assert parent.info.status == "FAILED"

    client.delete_run(ok.info.run_id)  # a missing cell: it has no run any more
    second = sweep(str(path), [f"checkpoint_dir={tmp_path / 'ck'}"])  # unhashed: same cells
    assert [r["status"] for r in second] == ["finished", "failed", "finished"]
    after = _runs_by_hash(client, exp)
    assert sorted(after) == sorted(by_hash)
    assert all(len(runs) == 1 for runs in after.values())  # one run per cell, whatever happened
    assert after[diverged.data.tags["config_hash"]][0].info.run_id == diverged.info.run_id
    resumed = after[broken.data.tags["config_hash"]][0]
    assert resumed.info.run_id == broken.info.run_id and resumed.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(resumed.info.run_id, "train/loss")]
    assert steps == [1, 2]  # round 1, logged before the failure, is not logged twice
    redone = after[ok.data.tags["config_hash"]][0]
    assert redone.info.run_id != ok.info.run_id and redone.info.status == "FINISHED"

    third = sweep(str(path), [f"checkpoint_dir={tmp_path / 'ck'}"])
    assert [r["status"] for r in third] == ["skipped", "failed", "skipped"]
    finished = client.search_runs([exp], "attributes.status = 'FINISHED' and "
                                         "tags.config_hash != ''")
    assert len(finished) == 2
    assert len(client.search_runs([exp], "tags.`fedcore.role` = 'sweep'")) == 1


def test_with_retry_waits_out_a_real_sqlite_lock(tmp_path):
    db = tmp_path / "locked.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE t (x INTEGER)")
    holder.execute("BEGIN EXCLUSIVE")
    errors: list[BaseException] = []

    def write() -> int:
        con = sqlite3.connect(db, timeout=0)
        try:
            con.execute("INSERT INTO t VALUES (1)")
            con.commit()
            return 1
        except sqlite3.OperationalError as exc:
            errors.append(exc)
            if len(errors) == 2:
                holder.execute("COMMIT")  # the other writer finishes while we back off
            raise
        finally:
            con.close()

    assert with_retry(write, "insert", delay=0.01) == 1
    assert len(errors) == 2 and all(is_locked(e) for e in errors)
    assert holder.execute("SELECT COUNT(*) FROM t").fetchone() == (1,)
    with pytest.raises(ZeroDivisionError):
        with_retry(lambda: 1 / 0)  # anything else is raised at once


def test_eight_concurrent_cells_lose_no_metric_row(tracking):
    cfgs = [load_config(None, _overrides(rounds=3, seed=i)) for i in range(8)]
    results: dict[int, tuple] = {}
    barrier = threading.Barrier(len(cfgs))

    def cell(i: int) -> None:
        barrier.wait()
        results[i] = run_tracked(cfgs[i])

    threads = [threading.Thread(target=cell, args=(i,)) for i in range(len(cfgs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == list(range(8))
    db = Path(tracking.tracking_uri.removeprefix("sqlite:///"))
    with sqlite3.connect(db) as con:
        rows = dict(con.execute("SELECT run_uuid, COUNT(*) FROM metrics "  # system/*: samples
                                "WHERE key NOT LIKE 'system/%' GROUP BY run_uuid"))
        statuses = dict(con.execute("SELECT run_uuid, status FROM runs"))
    for run_id, result in results.values():
        expected = sum(len(h) - 1 for h in result.history) + len(result.summary)
        assert rows[run_id] == expected
        assert statuses[run_id] == "FINISHED"
    assert len(rows) == 8
