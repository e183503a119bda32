"""Sweep files: grid expansion and validation of every cell before anything runs."""

import pytest
import yaml

from fedcore.core.config import ConfigError, config_dir
from fedcore.specs.sweep import load_sweep


def _write(tmp_path, spec):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_grid_product_and_union(tmp_path):
    spec = {"base": str(config_dir() / "experiment.yaml"), "set": {"rounds": 2},
            "grid": [{"method": ["fedavg", "fedprox"], "dataset.alpha": [0.1, 1.0]},
                     {"method": ["median"], "dataset.alpha": [0.5]}]}
    sweep = load_sweep(_write(tmp_path, spec))
    labels = [c.label for c in sweep.cells]
    assert len(labels) == 5 and labels[-1] == "method=median dataset.alpha=0.5"
    assert {c.config.rounds for c in sweep.cells} == {2}
    assert len({c.config.config_hash() for c in sweep.cells}) == 5


def test_overrides_apply_to_every_cell_and_change_the_hash(tmp_path):
    path = _write(tmp_path, {"grid": {"seed": [0, 1]}})
    a, b = load_sweep(path), load_sweep(path, {"rounds": 3})
    assert all(c.config.rounds == 3 for c in b.cells)
    assert a.sweep_hash != b.sweep_hash


def test_a_bad_cell_is_reported_before_anything_runs(tmp_path):
    path = _write(tmp_path, {"grid": {"dataset.alpha": [0.5, -1.0]}})
    with pytest.raises(ConfigError, match=r"sweep cell \[dataset.alpha=-1.0\]: dataset.alpha"):
        load_sweep(path)
    with pytest.raises(ConfigError, match="sweep.grid"):
        load_sweep(_write(tmp_path, {"grid": {"seed": 3}}))
    with pytest.raises(ConfigError, match="sweep: unknown key 'grids'"):
        load_sweep(_write(tmp_path, {"grids": {}}))


def test_shipped_main_sweep_is_valid():
    sweep = load_sweep(config_dir() / "sweeps" / "main.yaml")
    assert len(sweep.cells) >= 6


def test_a_sweep_evaluating_on_its_studys_tuning_seed_is_refused(tmp_path):
    import yaml

    from fedcore.core.config import ConfigError, config_dir

    def sweep(seeds, studies):
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump({
            "name": "s", "base": str(config_dir() / "experiment.yaml"), "studies": studies,
            "grid": {"method": ["craft"], "seed": seeds}, "set": {"model.name": "mlp"}}))
        return load_sweep(path)

    assert sweep([0, 1], {"craft": "craft_server_lr"}).tuning == {
        "craft": "craft_server_lr: 30 trials, seed 1000"}
    with pytest.raises(ConfigError, match=r"sweep.studies.craft: study 'craft_server_lr' tuned "
                                          r"on seed 1000, which this file evaluates on"):
        sweep([0, 1000], {"craft": "craft_server_lr"})
    with pytest.raises(ConfigError, match="sweep.studies.craft: study 'nope'"):
        sweep([0], {"craft": "nope"})
    with pytest.raises(ConfigError, match="sweep.studies: expected a mapping of METHOD: study"):
        sweep([0], ["craft_server_lr"])
