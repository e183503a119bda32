"""No error shows a file's content: fedcore reads as YAML only regular files named .yaml/.yml
once links are followed. A ``base:`` that is a link named ``.yaml`` to a secret, and ``confirms:``
naming the secret itself, printed its first line (as an unknown key); each is now one line,
exit code 2, nothing created."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SECRET = "root:$6$SECRETHASH$abcdef:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"


@pytest.mark.parametrize("how", ["linked base", "confirms the secret"])
def test_a_secret_reached_through_a_sweep_file_is_never_echoed(tmp_path, how):
    secret = tmp_path / "shadow"
    secret.write_text(SECRET)
    (tmp_path / "base.yaml").symlink_to(secret)
    spec: dict = {"name": "s", "grid": {"method": ["fedavg", "krum"]},
                  "set": {"model.name": "mlp", "rounds": 1}}
    if how == "linked base":
        spec["base"] = "base.yaml"
        expected = "(a link to 'shadow') is not a .yaml or .yml file"
    else:
        spec.update(seeds=[5], confirms=str(secret),
                    families=[{"name": "f", "reference": "fedavg", "baselines": ["krum"]}])
        expected = "is not a .yaml or .yml file"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'store' / 'm.db'}",
           "PREFECT_HOME": str(tmp_path / "prefect")}
    env.pop("PREFECT_API_URL", None)
    for command in ("sweep", "report"):
        done = subprocess.run([sys.executable, "-m", "fedcore", command, str(path)], env=env,
                              cwd=ROOT, capture_output=True, text=True, timeout=300,
                              check=False)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and expected in lines[0], done.stderr
        assert "SECRETHASH" not in done.stderr + done.stdout and "daemon" not in done.stderr
    assert not [p for p in (tmp_path / "store").rglob("*") if p.is_file()]
