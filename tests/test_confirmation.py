"""A confirmation sweep (``confirms:``) is checked against the runs its screening sweep recorded
in the store, not only against the screening's file as it is now: editing the screening's seeds
after it ran let a confirmation on the old seeds pass, which then skipped every cell because the
screening's FINISHED runs had the same config hashes. A confirmation naming itself recursed
until ``RecursionError``; one naming a file that is not YAML echoed its first line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedcore.core.config import ConfigError, config_dir
from fedcore.specs.sweep import load_sweep
from fedcore.tracking.confirmation import check_screening_runs
from fedcore.tracking.runner import run_tracked
from fedcore.tracking.settings import load_settings

FAM = [{"name": "f", "reference": "fedavg", "baselines": ["krum"]}]


def _sweep(folder: Path, name: str, extra: dict) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "base": str(config_dir() / "experiment.yaml"),
        "grid": {"method": ["fedavg", "krum"]},
        "set": {"rounds": 1, "model.name": "mlp", "dataset.num_clients": 6,
                "clients_per_round": 3}, **extra}))
    return path


def test_a_confirmation_on_seeds_the_screening_ran_is_refused_whatever_its_file_says(
        tmp_path, tracking):
    screen = _sweep(tmp_path, "screen", {"seeds": [0, 1]})
    for cell in load_sweep(screen).cells:  # the screening ran (its cells' runs, sweep tag)
        if cell.config.seed == 1:
            run_tracked(cell.config, tags={"sweep": "screen"}, figures=False)
    _sweep(tmp_path, "screen", {"seeds": [50, 51]})  # its seeds edited afterwards
    confirm = _sweep(tmp_path, "confirm", {"seeds": {"looks": [2, 4]}, "confirms": "screen.yaml",
                                           "families": FAM})
    spec = load_sweep(confirm)  # the file alone no longer shows the overlap
    assert spec.screening == "screen"
    with pytest.raises(ConfigError) as e:
        check_screening_runs(spec, load_settings())
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(
        "sweep.confirms: seed 1 (cell [method=fedavg seed=1]) was run by the sweep 'screen' "
        "(run "), msg
    fresh = load_sweep(_sweep(tmp_path, "confirm2", {
        "seeds": {"looks": [2], "start": 100}, "confirms": "screen.yaml", "families": FAM}))
    check_screening_runs(fresh, load_settings())  # seeds it never ran: accepted
    # the screening renamed in its file too: the cells' configs were still run before
    _sweep(tmp_path, "screen", {"name": "renamed", "seeds": [50, 51]})
    with pytest.raises(ConfigError, match=r"seed 1 \(cell \[method=fedavg seed=1\]\) was run "
                       "by the sweep 'screen'"):
        check_screening_runs(load_sweep(confirm), load_settings())
    # the command: one line, exit code 2, before Prefect starts or any run is made
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    env.pop("PREFECT_API_URL", None)
    done = subprocess.run([sys.executable, "-m", "fedcore", "sweep", str(confirm)], env=env,
                          cwd=root, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "was run by the sweep 'screen'" in lines[0], lines
    from fedcore.tracking.run_store import MlflowRunStore

    assert MlflowRunStore(load_settings()).runs_of_sweep("confirm") == []  # no parent, no cell


def test_a_confirmation_naming_itself_or_no_yaml_is_one_line(tmp_path):
    itself = _sweep(tmp_path, "self", {"seeds": [3], "confirms": "self.yaml", "families": FAM})
    with pytest.raises(ConfigError, match=r"^sweep.confirms: '.*self.yaml' is this sweep file "
                       "itself; a confirmation names the screening sweep it confirms$"):
        load_sweep(itself)
    # two files confirming each other: no chain is followed
    a = _sweep(tmp_path, "a", {"seeds": [3], "confirms": "b.yaml", "families": FAM})
    _sweep(tmp_path, "b", {"seeds": [4], "confirms": "a.yaml", "families": FAM})
    assert load_sweep(a).screening == "b"
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$SECRETHASH:19000:0:99999:7:::\n")
    for target in (str(secret), "link.yaml"):
        (tmp_path / "link.yaml").unlink(missing_ok=True)
        (tmp_path / "link.yaml").symlink_to(secret)
        bad = _sweep(tmp_path, "c", {"seeds": [3], "confirms": target, "families": FAM})
        with pytest.raises(ConfigError) as e:
            load_sweep(bad)
        assert "SECRETHASH" not in str(e.value) and "is not a .yaml or .yml file" in str(e.value)
