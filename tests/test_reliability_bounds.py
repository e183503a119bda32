"""Counts a file can set are bounded (fedcore/core/config/limits.py), and inputs that failed
mid-run after a run was created are one line before it: each error names the key and the
allowed values, exit code 2, and nothing is created. Before: ``seeds: {looks: [100000]}``
made ``fedcore report`` grow to 2.1 GB printing nothing for 240 s; ``dataset.num_clients=10000
dataset.min_samples=0`` failed with ``range() arg 3 must not be zero`` after creating a run;
one-class data scored 1.0; float client indices were truncated; an ``x_test`` of another
width was a raw torch error; ``build_config([1, 2])`` raised ``AttributeError``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedcore.api import ConfigError, build_config, federate
from fedcore.core.compose.configure import load_config
from fedcore.core.config import config_dir
from fedcore.specs.study import load_study
from fedcore.specs.sweep import load_sweep

ROOT = Path(__file__).resolve().parents[1]


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'store' / 'm.db'}",
           "FEDCORE_ARTIFACT_LOCATION": str(tmp_path / "artifacts"),
           "PREFECT_HOME": str(tmp_path / "prefect")}
    env.pop("PREFECT_API_URL", None)
    return subprocess.run([sys.executable, "-m", "fedcore", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)


def _one_line_exit_2(done: subprocess.CompletedProcess[str], text: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and text in lines[0], done.stderr[-2000:]


def _sweep(tmp_path: Path, **extra: object) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "base": str(config_dir() / "experiment.yaml"),
                                    "grid": {"method": ["fedavg"]},
                                    "set": {"model.name": "mlp"}, **extra}))
    return path


def test_an_unbounded_look_plan_is_one_line_and_nothing_is_created(tmp_path):
    path = _sweep(tmp_path, seeds={"looks": [100000]})
    for command in ("report", "sweep"):
        done = _cli(tmp_path, command, str(path))
        _one_line_exit_2(done, "sweep.seeds.looks (seeds of the last look): 100000 is above "
                               "the limit of 10,000; allowed: at most 10,000")
    assert not (tmp_path / "reports").exists()
    assert not [p for p in (tmp_path / "store").rglob("*") if p.is_file()]


def test_every_count_a_file_sets_is_bounded():
    with pytest.raises(ConfigError, match=r"^sweep.seeds.looks \(number of looks\): 21 is "):
        load_sweep_plan({"looks": list(range(2, 23))})
    with pytest.raises(ConfigError, match=r"^sweep.seeds \(seeds listed\)"):
        load_sweep_plan(list(range(10_001)))
    for override, message in (
        ("rounds=10000000", "rounds: at most 1,000,000 allowed (got 10000000)"),
        ("local.steps=10000000", "local.steps: at most 1,000,000 allowed"),
        ("dataset.num_clients=1000000", "dataset.num_clients: Input should be less than or "
                                        "equal to 100000"),
        ("seed=99999999999", "seed: Input should be less than or equal to 4294967295"),
        ("method.aggregator={rule: rfa, iterations: 100000000}",
         "method.aggregator.iterations: at most 1,000,000 allowed"),
    ):
        with pytest.raises(ConfigError) as e:
            load_config(None, [override])
        assert str(e.value).startswith(message), str(e.value)


def load_sweep_plan(seeds: object) -> None:
    from fedcore.specs.families import seed_plan

    seed_plan(seeds, "sweep")


def test_a_huge_grid_and_a_huge_study_budget_are_refused(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({"grid": {"local.lr": [0.01 * i for i in range(1, 1001)],
                                             "seed": list(range(1000))}}))
    with pytest.raises(ConfigError, match=r"^sweep.grid \(cells: .*\): 1000000 is above the "
                       "limit of 100,000"):
        load_sweep(path)
    study = tmp_path / "st.yaml"
    study.write_text(yaml.safe_dump({"name": "st", "n_trials": 10**9, "metric": "final/accuracy",
                                     "set": {"seed": 1000},
                                     "search": {"local.lr": {"type": "float", "low": 0.01,
                                                             "high": 0.1}}}))
    with pytest.raises(ConfigError, match=r"^study.n_trials: 1000000000 is above the limit"):
        load_study(study)


def test_clients_without_a_training_sample_are_refused_before_a_run(tmp_path):
    done = _cli(tmp_path, "run", "dataset.num_clients=10000", "dataset.min_samples=0",
                "rounds=1", "model.name=mlp")
    _one_line_exit_2(done, "dataset.num_clients=10000: ")
    assert "get no training sample" in done.stderr
    assert not [p for p in (tmp_path / "store").rglob("*") if p.is_file()]


def _blobs(n: int = 120, classes: int = 3, dim: int = 8):
    rng = np.random.default_rng(0)
    y = rng.integers(0, classes, n)
    return rng.normal(size=(n, dim)).astype(np.float32) + y[:, None], y


def test_smaller_api_inputs_are_one_line():
    x, y = _blobs()
    with pytest.raises(ConfigError, match=r"^y: every label is 0 \(one class\); allowed"):
        federate(x, np.zeros_like(y), num_clients=4)
    idx = [np.arange(0, 60).astype(np.float64) + 0.7, np.arange(60, 120)]
    with pytest.raises(ConfigError, match="^clients: client 0's indices are float64; allowed: "
                                          "integer sample indices"):
        federate(x, y, clients=idx, x_test=x[:10], y_test=y[:10])
    with pytest.raises(ConfigError, match=r"^x_test: samples of shape \(5,\), those of x are "
                                          r"\(8,\); allowed: the same sample shape as x"):
        federate(x, y, x_test=x[:10, :5], y_test=y[:10], num_clients=4)
    with pytest.raises(ConfigError, match="^config: expected a mapping of keys to values "
                                          r"\(got a list\)"):
        build_config([1, 2])  # type: ignore[arg-type]
