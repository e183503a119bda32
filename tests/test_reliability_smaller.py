"""The smaller items of issue 39 (docs/explanation/reliability.md): a full PREFECT_HOME, a
report on a full disk, a plugin that calls ``sys.exit()`` at import, a sweep file's ``base``
naming a file that is no config, and an Optuna storage in a folder that does not exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedcore.cli import main
from tests.test_reliability_disk import fill, small_disk  # noqa: F401  (a fixture)

SWEEP = """
name: tiny
set: {rounds: 1, model.name: mlp, dataset.num_clients: 4, clients_per_round: 2}
grid: {seed: [0]}
"""


def test_a_full_prefect_home_is_one_line_naming_it(capfd, tracking, tmp_path, monkeypatch,
                                                   small_disk):  # noqa: F811
    fill(small_disk)
    monkeypatch.setenv("PREFECT_HOME", str(small_disk / "prefect"))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    sweep = tmp_path / "tiny.yaml"
    sweep.write_text(SWEEP)
    assert main(["sweep", str(sweep)]) == 2
    err = capfd.readouterr().err.strip()
    assert err.startswith(f"fedcore: error: PREFECT_HOME {small_disk / 'prefect'}: ")
    assert "\n" not in err and err.endswith("free space there or set PREFECT_HOME to another "
                                            "folder"), err
