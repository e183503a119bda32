"""The paper recipes in configs/experiments/: every file loads and resolves (no training)."""

from __future__ import annotations

import pytest
import yaml

from fedcore.core.compose.configure import load_config
from fedcore.core.config import MODELS, config_dir

RECIPES = sorted((config_dir() / "experiments").glob("*.yaml"))
PAPERS = ("craft", "crf", "fedoui", "sapef", "fedquad")


def test_every_seed_paper_has_a_recipe():
    assert {p.stem for p in RECIPES} >= set(PAPERS)


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_recipe_resolves_to_its_own_setting(path):
    raw = yaml.safe_load(path.read_text())
    assert raw["model"]["name"] in MODELS, f"{path.name}: model.name"
    cfg = load_config(path)
    resolved = cfg.resolved()
    # every key the recipe sets is what the resolved config runs (no silent default)
    for section in ("dataset", "model", "local", "clients"):
        for key, value in (raw.get(section) or {}).items():
            assert resolved[section][key] == value, f"{path.name}: {section}.{key}"
    for key in ("rounds", "clients_per_round", "seed"):
        assert resolved[key] == raw[key], f"{path.name}: {key}"
    method = raw["method"]
    assert cfg.method.name == (method if isinstance(method, str) else method["name"])


def test_a_recipe_without_its_data_stops_with_one_line_before_any_run(tracking, tmp_path, capsys):
    from fedcore.cli import main
    from fedcore.tracking import get_experiment_id, mlflow_client

    path = config_dir() / "experiments" / "craft.yaml"
    assert main(["run", str(path), f"dataset.root={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedcore: error: dataset 'cifar10'") and "\n" not in err
    client = mlflow_client(tracking)
    assert not client.search_runs([get_experiment_id(client, tracking)])
