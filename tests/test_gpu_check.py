"""benchmarks/gpu_check.sh without a GPU: the wheel list and the install step's check of a wheel
folder against it (no network), and the script's dry run (``--device cpu --rounds 1``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import wheel_list
from fedcore.core.config import checkout_root

ROOT = checkout_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="needs the source checkout (benchmarks/)")


def _fake_wheels(folder: Path, listed: dict[str, str]) -> None:
    folder.mkdir()
    for name, version in listed.items():
        (folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"x")


def test_the_shipped_wheel_list_is_well_formed_and_names_what_the_image_lacks():
    listed = wheel_list.read_list()
    assert {"pydantic", "pydantic-core", "typing-extensions", "mlflow-skinny",
            "sqlalchemy", "alembic"} <= set(listed)
    assert "mlflow" not in listed and "torch" not in listed  # skinny only; torch is there
    assert all(v[0].isdigit() for v in listed.values())


def test_a_wheel_folder_must_hold_exactly_the_list(tmp_path):
    listed = {"pydantic": "2.14.4", "typing-extensions": "4.16.0"}
    good = tmp_path / "good"
    _fake_wheels(good, listed)
    assert wheel_list.check_folder(good, listed) == 2
    for folder, problem in (
        ({"pydantic": "2.14.4"}, "missing: typing-extensions"),
        ({**listed, "rich": "1.0"}, "not listed: rich"),
        ({"pydantic": "2.0.0", "typing-extensions": "4.16.0"}, "other version: pydantic 2.0.0"),
    ):
        where = tmp_path / str(len(list(tmp_path.iterdir())))
        _fake_wheels(where, folder)
        with pytest.raises(ValueError, match=problem):
            wheel_list.check_folder(where, listed)
    bad = tmp_path / "list.txt"
    bad.write_text("pydantic>=2\n")
    with pytest.raises(ValueError, match=r"list.txt:1: 'pydantic>=2' is not NAME==VERSION"):
        wheel_list.read_list(bad)


def _script(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable,
           "SITE": str(tmp_path / "site"), "OMP_NUM_THREADS": "1"}
    assert ROOT is not None
    return subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), *args],
                          capture_output=True, text=True, env=env, timeout=900)


def test_a_wrong_wheel_folder_stops_the_script_before_anything_runs(tmp_path):
    wrong = tmp_path / "wheels"
    _fake_wheels(wrong, {"pydantic": "1.0"})
    done = _script(tmp_path, "--device", "cpu", "--rounds", "1", "--wheels", str(wrong))
    assert done.returncode == 1
    assert "wheel_list: " in done.stdout and "wheels missing: " in done.stdout
    assert "cuda tests exit" not in done.stdout and not (tmp_path / "site").exists()
    bad = _script(tmp_path, "--device", "tpu")
    assert bad.returncode == 2 and "allowed: cuda, cpu" in bad.stderr


@pytest.mark.slow
def test_dry_run_on_cpu_writes_the_whole_table(tmp_path):
    done = _script(tmp_path, "--device", "cpu", "--rounds", "1", "--wheels",
                   str(tmp_path / "no-wheels"))
    log = done.stdout
    assert done.returncode == 0, log[-3000:]
    assert "install skipped (wheel list verified)" in log
    assert "cuda tests exit: 0" in log and "recipes exit: 0" in log
    assert "padding exit: 0" in log and "bucketed exit: 0" in log
    counted = json.loads((tmp_path / "out" / "padding.json").read_text())
    assert counted["clients"] == 1000 and counted["bucketed_efficiency"] > 0.8
    bucketed = json.loads((tmp_path / "out" / "bucketed.json").read_text())
    assert bucketed["eager_s_per_round"] > 0 and 0 < bucketed["padding_efficiency"] <= 1
    assert bucketed["compile"] == "not an H100/H200 (auto)"
    table = (tmp_path / "out" / "gpu_table.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + 10  # header; CRAFT x 2 engines x tracked or not; 3 recipes x 2
    craft = [r for r in rows if r.startswith("| CRAFT |")]
    assert len(craft) == 4 and all("failed" not in r and "skipped" not in r for r in rows)
    assert "| SA-PEF | vectorised |" in table and "n/a: model.norm='batch'" in table
    assert (tmp_path / "out" / "gpu_check.txt").read_text() == log
