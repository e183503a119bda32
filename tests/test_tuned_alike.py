"""Tuned alike: tuned rows of a family come from equal studies scored on validation; a study's
best value at a bound of its range is reported."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedcore.core.config import ConfigError, config_dir
from fedcore.specs.study import load_study
from fedcore.specs.study_fields import Param
from fedcore.specs.sweep import load_sweep
from fedcore.specs.tuned_alike import at_bound, scores_validation, unequal

STUDY = {"base": str(config_dir() / "experiment.yaml"),
         "set": {"model.name": "mlp", "rounds": 2, "seed": 1000, "dataset.val_fraction": 0.5},
         "search": {"method.aggregator.server_lr": {"type": "float", "low": 0.1, "high": 2.0,
                                                    "log": True},
                    "local.lr": {"type": "float", "low": 0.01, "high": 0.3, "log": True}},
         "metric": "final/val_accuracy", "n_trials": 4, "sampler": {"type": "tpe", "seed": 0},
         "pruner": {"type": "percentile", "percentile": 25, "metric": "val/accuracy",
                    "n_startup_trials": 2, "n_warmup_steps": 1, "interval_steps": 1}}


def _study(tmp_path: Path, name: str, method: str, **changes) -> Path:
    spec = {**STUDY, "name": name, "set": {**STUDY["set"], "method": method}, **changes}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _sweep(tmp_path: Path, studies: dict[str, Path], baseline: str = "fedavg (tuned)") -> Path:
    spec = {"name": "tuned", "base": str(config_dir() / "experiment.yaml"),
            "studies": {m: str(p) for m, p in studies.items()},
            "grid": [{"method": ["fedavgm"], "local.lr": [0.1]},
                     {"method": ["fedavg"], "local.lr": [0.2]},
                     {"method": ["fedprox"]}],
            "seeds": [0, 1], "set": {"model.name": "mlp", "rounds": 2},
            "families": [{"name": "t", "reference": "fedavgm (tuned)",
                          "baselines": [baseline]}]}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_rows_from_equal_validation_studies_are_compared(tmp_path):
    studies = {"fedavgm": _study(tmp_path, "a", "fedavgm"), "fedavg": _study(tmp_path, "b",
                                                                             "fedavg")}
    spec = load_sweep(_sweep(tmp_path, studies))
    assert spec.families[0].rows == ("fedavgm (tuned)", "fedavg (tuned)")


@pytest.mark.parametrize(("change", "what"), [
    ({"n_trials": 8}, "n_trials"),
    ({"sampler": {"type": "random", "seed": 0}}, "sampler"),
    ({"search": {"method.aggregator.server_lr": {"type": "float", "low": 0.1, "high": 2.0},
                 "local.lr": {"type": "float", "low": 0.01, "high": 0.5, "log": True}}},
     "searched shared-recipe dimensions"),
    ({"search": {"method.aggregator.server_lr": {"type": "float", "low": 0.1, "high": 2.0}}},
     "searched shared-recipe dimensions"),
])
def test_unequally_tuned_rows_are_refused_in_one_line(tmp_path, change, what, capsys):
    from fedcore.cli import main

    studies = {"fedavgm": _study(tmp_path, "a", "fedavgm"),
               "fedavg": _study(tmp_path, "b", "fedavg", **change)}
    with pytest.raises(ConfigError) as err:
        load_sweep(_sweep(tmp_path, studies))
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("sweep.families[0] (t): rows 'fedavgm (tuned)' and 'fedavg (tuned)' "
                           f"were tuned unequally (studies 'a' and 'b' differ in {what})")
    assert main(["sweep", str(_sweep(tmp_path, studies))]) == 2  # before any cell runs
    assert text in capsys.readouterr().err


def test_a_study_scored_on_the_test_split_feeds_no_family(tmp_path):
    studies = {"fedavgm": _study(tmp_path, "a", "fedavgm", metric="final/accuracy"),
               "fedavg": _study(tmp_path, "b", "fedavg", metric="final/accuracy")}
    with pytest.raises(ConfigError, match="scores final/accuracy; tuned rows must come from a "
                                          "study scored on the validation split"):
        load_sweep(_sweep(tmp_path, studies))


def test_a_tuned_reference_against_an_untuned_baseline_is_refused(tmp_path):
    studies = {"fedavgm": _study(tmp_path, "a", "fedavgm"), "fedavg": _study(tmp_path, "b",
                                                                             "fedavg")}
    with pytest.raises(ConfigError, match="the reference 'fedavgm \\(tuned\\)' is tuned and the "
                                          "baseline 'fedprox' is not"):
        load_sweep(_sweep(tmp_path, studies, baseline="fedprox"))


def test_the_shipped_tuned_family_studies_search_alike_on_validation():
    craft, fedavg = load_study("craft_server_lr"), load_study("fedavg_lr")
    assert unequal(craft, fedavg) == ""
    assert scores_validation(craft) and scores_validation(fedavg)
    main = load_sweep(config_dir() / "sweeps" / "main.yaml")
    proto = main.protocols["craft"].values
    for study in (craft, fedavg):  # tuned in the protocol the family runs
        assert {k: study.fixed[k] for k in proto if k in study.fixed} == {
            k: v for k, v in proto.items() if k in study.fixed}
        assert not {k for k in proto if k not in study.fixed} - {p.key for p in study.params}


def test_a_best_value_at_a_bound_is_said():
    lr = Param("local.lr", "float", 0.001, 0.3, log=True)
    assert at_bound(lr, 0.295) == ("local.lr = 0.295 is at the upper bound 0.3 of its range; "
                                   "widen it unless that bound is the parameter's own limit")
    assert at_bound(Param("a", "float", 0.0, 1.0), 0.96).startswith("a = 0.96 is at the upper")
    assert at_bound(lr, 0.00105).startswith("local.lr = 0.00105 is at the lower bound 0.001")
    assert at_bound(lr, 0.02) == ""
    assert at_bound(Param("g", "categorical", choices=("a", "b")), "a") == ""
