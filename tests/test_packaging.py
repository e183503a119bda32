"""Packaging: the wheel carries its configs and runs its default outside a checkout; the core
runs without the pipeline extra (MLflow, Prefect, Optuna, Dask)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The files a build reads (a copy: pip builds in the source folder, which must stay clean).
SOURCES = ("fedcore", "flows", "configs", "setup.py", "pyproject.toml", "README.md")
BLOCKER = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _Block())
"""
PIPELINE = ("mlflow", "prefect", "optuna", "dask", "distributed", "prefect_dask", "pyarrow",
            "matplotlib")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy(path, src / name)
    for folder in ("methods", "experiments"):  # what `fedcore tune --best` leaves in configs/
        (src / "configs" / folder / "mystudy_best.yaml").write_text(
            "# Written by `fedcore tune --best`.\nname: mystudy_best\n")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(tmp / "dist"), str(src)],
                   check=True, capture_output=True, text=True)
    print(f"wheel built in {time.perf_counter() - start:.1f} s")
    (found,) = (tmp / "dist").glob("fedcore_fl-*.whl")  # the distribution fedcore-fl
    return found


def test_wheel_ships_every_config_and_runs_its_default_outside_a_checkout(wheel, tmp_path):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"fedcore/_configs/{p.relative_to(ROOT / 'configs')}"
               for p in (ROOT / "configs").rglob("*") if p.suffix in (".yaml", ".md")
               and "fedcore tune --best" not in p.read_text()}
    assert shipped and shipped <= names, sorted(shipped - names)[:5]
    for folder in ("methods", "experiments"):  # results of tune --best stay local
        assert f"fedcore/_configs/{folder}/mystudy_best.yaml" not in names
    assert "fedcore/core/data/digits.npz" in names
    assert not any(n.startswith("configs/") for n in names)  # only inside the package
    # the flows are an edge of the package; flows/ of the checkout holds Prefect's entry points
    assert "fedcore/flows/sweep.py" in names
    assert not any(n.startswith("flows/") for n in names)
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "FEDCORE_ARTIFACT_LOCATION": str(tmp_path / "artifacts")}
    env.pop("FEDCORE_HOME", None)
    # the shipped default experiment and method (the MLP only to keep the test quick)
    out = subprocess.run([sys.executable, "-m", "fedcore", "run", "rounds=1", "model.name=mlp"],
                         cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "method=fedavg  dataset=digits" in out.stdout
    from mlflow.tracking import MlflowClient

    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    (run,) = client.search_runs([client.get_experiment_by_name("fedcore").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.tags["method"] == "fedavg" and run.data.params["local.epochs"] == "5"
    assert run.data.tags["mlflow.source.name"].startswith(str(site))  # the wheel's code ran


def test_core_runs_without_the_pipeline_extra(tmp_path):
    code = BLOCKER.format(blocked=PIPELINE) + f"""
from fedcore.core.compose.configure import load_config
from fedcore.core.round.simulation import run
from fedcore.cli import main
tiny = ["rounds=1", "model.name=mlp", "dataset.num_clients=6", "clients_per_round=3"]
result = run(load_config(None, tiny))
assert 0 < result.summary["final/accuracy"] <= 1
assert main(["run", *tiny]) == 0
assert main(["sweep", "configs/sweeps/main.yaml"]) == 2
assert main(["tune", "fedavg_lr"]) == 2
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {PIPELINE!r})
assert not loaded, loaded
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "not recorded  method=fedavg" in out.stdout
    lines = out.stderr.splitlines()
    assert ("fedcore: note: this run is not recorded (MLflow is not installed; "
            "pip install 'fedcore-fl[pipeline]' records runs)") in lines
    assert ("fedcore: error: fedcore sweep needs the pipeline extra (missing: mlflow, prefect, "
            "dask, distributed, prefect_dask); install it with pip install 'fedcore-fl[pipeline]'"
            ) in lines
    assert any(line.startswith("fedcore: error: fedcore tune needs the pipeline extra")
               for line in lines)


def test_configs_come_from_the_package_when_there_is_no_checkout(monkeypatch):
    from fedcore.core.config import paths as config

    monkeypatch.delenv("FEDCORE_HOME", raising=False)
    assert config.config_dir() == ROOT / "configs"  # a checkout: its own configs/
    monkeypatch.setattr(config, "checkout_root", lambda: None)
    assert config.config_dir() == config.PACKAGED_CONFIGS
    assert config.project_root() == Path.cwd()
    assert config.writable_config_dir() == Path.cwd() / "configs"  # never into the package


def test_the_api_names_the_missing_extra_in_one_line():
    code = BLOCKER.format(blocked=PIPELINE) + """
from fedcore.api import load_config
from fedcore.runtime_env.extras import MissingExtraError
for name in ("run_tracked", "sweep_runs", "load_model"):
    try:
        exec(f"from fedcore.api import {name}")
    except MissingExtraError as exc:
        print(exc)
from fedcore.api import run_tracked
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 1
    assert out.stdout.splitlines() == [
        f"fedcore.api.{name} needs the pipeline extra (missing: mlflow); install it with "
        "pip install 'fedcore-fl[pipeline]'"
        for name in ("run_tracked", "sweep_runs", "load_model")]
    last = out.stderr.strip().splitlines()[-1]  # what a script that imports it shows last
    assert last.startswith("fedcore.runtime_env.extras.MissingExtraError: fedcore.api.run_tracked "
                           "needs the pipeline extra")
