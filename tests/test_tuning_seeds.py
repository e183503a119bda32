"""Studies tune on seeds >= TUNING_SEED_MIN, disjoint from the evaluation seeds of sweeps and
claims; a study at an evaluation seed is refused before any trial."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedcore.cli import main
from fedcore.core.component.seeding import TUNING_SEED_MIN
from fedcore.core.config import ConfigError, config_dir
from fedcore.specs.study import load_study, study_names

SET = {"method": "fedavg", "model.name": "mlp", "rounds": 2, "dataset.num_clients": 6,
       "clients_per_round": 3}


def _study(tmp_path: Path, **over) -> Path:
    spec = {
        "name": "seeds",
        "base": str(config_dir() / "experiment.yaml"),  # its seed is 0, an evaluation seed
        "set": SET,
        "search": {"local.lr": {"type": "float", "low": 0.01, "high": 0.1, "log": True}},
        "n_trials": 3,
        "storage": f"sqlite:///{tmp_path / 'optuna.db'}",
        **over,
    }
    path = tmp_path / "seeds.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _seeds(tree: object) -> list[int]:
    """Every value under a ``seed`` or ``seeds`` key of a YAML tree."""
    if isinstance(tree, list):
        return [s for item in tree for s in _seeds(item)]
    if not isinstance(tree, dict):
        return []
    out = []
    for key, value in tree.items():
        if key in ("seed", "seeds"):
            out += [v for v in (value if isinstance(value, list) else [value])
                    if isinstance(v, int)]
        else:
            out += _seeds(value)
    return out


def test_the_tuning_seeds_start_above_every_evaluation_seed():
    assert TUNING_SEED_MIN == 1000
    evaluation = [s for f in ("experiment.yaml", "sweeps/main.yaml", "claims.yaml")
                  for s in _seeds(yaml.safe_load((config_dir() / f).read_text()))]
    assert 0 in evaluation and max(evaluation) < TUNING_SEED_MIN


def test_every_shipped_study_tunes_on_tuning_seeds():
    for name in study_names():
        spec = load_study(name)
        assert spec.seeds and min(spec.seeds) >= TUNING_SEED_MIN, name


@pytest.mark.parametrize("seed", [0, 4, TUNING_SEED_MIN - 1])
def test_a_study_at_an_evaluation_seed_is_refused_in_one_line(tmp_path, seed):
    path = _study(tmp_path, set={**SET, "seed": seed})
    with pytest.raises(ConfigError) as exc:
        load_study(path)
    message = str(exc.value)
    assert message.startswith(f"study.set.seed: {seed} is an evaluation seed; ")
    assert f"allowed: seeds >= {TUNING_SEED_MIN}" in message and "\n" not in message


def test_the_base_experiments_seed_0_is_refused_unless_the_study_sets_one(tmp_path):
    with pytest.raises(ConfigError, match=r"^study\.set\.seed: 0 \(the base experiment's\) is "
                                          r"an evaluation seed; allowed: seeds >= 1000"):
        load_study(_study(tmp_path))
    assert load_study(_study(tmp_path), {"seed": TUNING_SEED_MIN}).seeds == (TUNING_SEED_MIN,)


def test_a_searched_seed_must_stay_in_the_tuning_range(tmp_path):
    search = {"local.lr": {"type": "float", "low": 0.01, "high": 0.1},
              "seed": {"type": "int", "low": 998, "high": 1002}}
    with pytest.raises(ConfigError, match=r"^study\.search\.seed: 998 is an evaluation seed"):
        load_study(_study(tmp_path, search=search))
    search["seed"] = {"type": "categorical", "choices": [1002, 1000]}
    assert load_study(_study(tmp_path, search=search)).seeds == (1000, 1002)


def test_the_command_line_refuses_an_evaluation_seed_before_any_trial(tracking, tmp_path, capsys):
    path = _study(tmp_path, set={**SET, "seed": TUNING_SEED_MIN})
    assert main(["tune", str(path), "seed=0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedcore: error: study.set.seed: 0 is an evaluation seed; allowed: ")
    assert "\n" not in err and not (tmp_path / "optuna.db").exists()


def test_seeds_and_budget_describe_the_study(tmp_path):
    path = _study(tmp_path, set={**SET, "seed": 1234})
    spec = load_study(path)
    assert spec.seeds == (1234,) and spec.budget == "3 trials"
    assert load_study(path, {"n_trials": 1}).budget == "1 trial"
    assert load_study(path, {"timeout": 600}).budget == "3 trials or 600 s"
    assert load_study(_study(tmp_path, set={**SET, "seed": 1234}, n_trials=None,
                             timeout=90.5)).budget == "90.5 s"
    shipped = {name: load_study(name) for name in ("craft_server_lr", "fedavg_lr")}
    assert {s.budget for s in shipped.values()} == {"30 trials"}
    assert {len(s.params) for s in shipped.values()} == {2}
