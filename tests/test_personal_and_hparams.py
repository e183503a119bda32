"""Personalised methods summarised by their personal models; paper vs tuned hyperparameters."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from fedcore.core.compose.configure import build_config, load_config
from fedcore.core.config import ConfigError, config_dir
from fedcore.core.metrics import jain_index
from fedcore.core.round.simulation import Simulation
from fedcore.specs.hparams import hparams_changes, hparams_label, hparams_tags, regime

from .conftest import TINY

SMALL = [*TINY, "local.epochs=1", "local.steps=3"]


def test_ditto_summary_is_its_personal_models_at_the_last_round():
    sim = Simulation(load_config(None, ["method=ditto", *SMALL, "method.client.personal_steps=3"]))
    result = sim.run()
    personal = result.client_tables[-1].extra["personal_accuracy"]
    s = result.summary
    assert s["final/personal_accuracy_mean"] == pytest.approx(float(np.mean(personal)))
    assert s["final/personal_accuracy_std"] == pytest.approx(float(np.std(personal)))
    assert s["final/personal_accuracy_worst10"] == pytest.approx(float(np.min(personal)))
    assert s["final/personal_jain"] == pytest.approx(jain_index(personal))
    # the global model's summary is a different quantity: the personal models differ from it
    assert not np.allclose(personal, result.client_tables[-1].accuracy)


def test_methods_without_personal_models_have_no_personal_summary():
    result = Simulation(load_config(None, ["method=fedavg", *SMALL])).run()
    assert not any(k.startswith("final/personal") for k in result.summary)


def _study(tmp_path, method, metric):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "base": str(config_dir() / "experiment.yaml"),
        "set": {"method": method, "model.name": "mlp", "rounds": 2, "seed": 1000},
        "search": {"local.lr": {"type": "float", "low": 0.01, "high": 0.1}},
        "metric": metric, "n_trials": 1, "storage": f"sqlite:///{tmp_path / 'o.db'}",
    }))
    return path


def test_a_study_can_maximise_personal_accuracy_of_ditto_only(tmp_path):
    from fedcore.specs.study import load_study

    spec = load_study(_study(tmp_path, "ditto", "final/personal_accuracy_worst10"))
    assert spec.metrics == ("final/personal_accuracy_worst10",)
    with pytest.raises(ConfigError, match="study.metric: final/personal_jain needs a personal"):
        load_study(_study(tmp_path, "fedavg", "final/personal_jain"))


def test_shipped_method_is_paper_and_a_change_by_hand_is_set():
    paper = load_config(None, ["method=craft", "model.name=mlp"]).resolved()["method"]
    assert hparams_label(paper) == "paper" and hparams_changes(paper) == {}
    assert hparams_tags(paper) == {"hparams": "paper"}
    tuned = load_config(
        None, ["method=craft", "model.name=mlp", "method.aggregator.server_lr=0.7"]
    ).resolved()["method"]
    assert hparams_label(tuned) == "set"  # by hand: "tuned" means a study chose it
    assert hparams_changes(tuned) == {"aggregator.server_lr": 0.7}
    assert hparams_tags(tuned) == {"hparams": "set",
                                   "hparams_changed": "aggregator.server_lr=0.7"}
    unknown = {**paper, "name": "my_craft"}
    assert hparams_label(unknown) == "set"


def test_paper_hyperparameters_at_another_horizon_say_so():
    main = build_config({}, {"method": "craft", "model.name": "mlp", "rounds": 20})
    r = regime(main.resolved())
    assert r.horizon == "other" and r.label.startswith("method paper (horizon other) · ")
    recipe = load_config(config_dir() / "experiments" / "craft.yaml", []).resolved()
    assert regime(recipe).horizon == "paper" and regime(recipe).label == "paper"
    fedavg = build_config({}, {"method": "fedavg", "model.name": "mlp"})
    assert regime(fedavg.resolved()).horizon == "none"  # no recipe: no horizon claimed


def test_a_tune_best_method_file_is_tuned(tmp_path, monkeypatch):
    (tmp_path / "configs" / "methods").mkdir(parents=True)
    text = (config_dir() / "methods" / "fedavg.yaml").read_text()
    (tmp_path / "configs" / "methods" / "fedavg.yaml").write_text(text)
    (tmp_path / "configs" / "methods" / "fedavg_best.yaml").write_text(
        "# Written by `fedcore tune --best`.\n" + text.replace("name: fedavg", "name: fedavg_best"))
    monkeypatch.setenv("FEDCORE_HOME", str(tmp_path))
    method = load_config(None, ["method=fedavg_best", "model.name=mlp"]).resolved()["method"]
    assert hparams_label(method) == "tuned"
    method = load_config(None, ["method=fedavg", "model.name=mlp"]).resolved()["method"]
    assert hparams_label(method) == "paper"


def test_report_shows_personal_columns_for_ditto_only_and_marks_tuned_rows(tracking, tmp_path):
    from fedcore.specs.sweep import load_sweep
    from fedcore.tracking import load_settings, mlflow_client
    from fedcore.tracking.report import build_report
    from fedcore.tracking.runner import run_tracked

    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump({
        "name": "small",
        "base": str(config_dir() / "experiment.yaml"),
        "grid": [{"method": ["fedavg", "ditto"]},
                 {"method": ["craft"], "method.aggregator.server_lr": [0.7]}],
        "set": {"rounds": 2, "model.name": "mlp", "dataset.num_clients": 6,
                "clients_per_round": 3, "local.epochs": 1, "local.steps": 2},
    }))
    spec = load_sweep(path)
    ids = [run_tracked(cell.config)[0] for cell in spec.cells]
    client = mlflow_client(load_settings())
    tags = [client.get_run(i).data.tags for i in ids]
    assert [t["hparams_method"] for t in tags] == ["paper", "paper", "set"]
    assert {t["hparams_local"] for t in tags} == {"set"}  # local.epochs/steps set by hand
    assert {t["hparams_data"] for t in tags} == {"default"}
    assert tags[0]["hparams"] == "method paper · local set · data default"
    assert tags[2]["hparams_changed"] == "aggregator.server_lr=0.7"
    report = build_report(spec, tmp_path / "out")
    table = report.table.set_index("method")
    assert list(table["hparams"]) == [t["hparams"] for t in tags]
    ditto = client.get_run(ids[1]).data.metrics
    assert table.loc["ditto", "personal_accuracy_mean"] == pytest.approx(
        ditto["final/personal_accuracy_mean"])
    assert table.loc["ditto", "personal_jain_mean"] == pytest.approx(ditto["final/personal_jain"])
    assert np.isnan(table.loc["fedavg", "personal_accuracy_mean"])
    md = (tmp_path / "out" / "table.md").read_text().splitlines()
    header = [c.strip() for c in next(r for r in md if r.startswith("| row")).split("|")]
    fedavg = [c.strip() for c in next(r for r in md if r.startswith("| fedavg")).split("|")]
    row = dict(zip(header, fedavg, strict=True))
    assert row["regime"] == tags[0]["hparams"] and row["personal accuracy"] == ""
    # the row says what the cell sets beyond method and seed; no study named: set, not tuned
    assert "| craft server_lr=0.7 | method set (horizon other) · local set" in "\n".join(md)


def test_main_job_runs_every_method_at_paper_but_two_tuned_rows_from_equal_studies():
    from fedcore.specs.hparams import row_regime
    from fedcore.specs.study import load_study
    from fedcore.specs.sweep import load_sweep
    from fedcore.specs.tuned_alike import unequal

    spec = load_sweep(config_dir() / "sweeps" / "main.yaml")
    regimes: dict[str, set] = {}
    seeds: dict[str, set] = {}
    for cell in spec.cells:
        mode = row_regime(cell.config.resolved(), cell.row, cell.overrides)
        regimes.setdefault(cell.row, set()).add((mode.method, mode.local, mode.data))
        seeds.setdefault(cell.row, set()).add(cell.config.seed)
    tuned = {c.config.method.name for c in spec.cells if "(tuned)" in c.row}
    assert tuned == {"craft", "fedavg"} == set(spec.tuning)
    assert regimes["craft @craft"] == {("paper", "paper", "scaled")}  # the paper row stays
    assert regimes["craft (tuned) @craft"] == {("tuned", "tuned", "scaled")}
    assert regimes["fedavg @craft"] == {("paper", "craft protocol", "scaled")}
    for row, seen in regimes.items():  # every other row at its paper's hyperparameters
        if "(tuned)" not in row:
            ((method, local, data),) = seen
            assert method == "paper", row
            assert (local, data) == ("default", "default") or data == "scaled", row
    assert all(len(s) >= 3 for s in seeds.values())  # every row has an interval
    studies = [load_study(name) for name in ("craft_server_lr", "fedavg_lr")]
    assert unequal(*studies) == ""  # one search: dimensions, budget, sampler, pruner
    evaluated = {c.config.seed for c in spec.cells}
    assert all(not set(s.seeds) & evaluated for s in studies)


def test_misbehaving_clients_take_the_data_part_out_of_paper_and_default():
    clean = build_config({}, {"method": "crf_fedavg", "dataset.name": "mnist"})
    noisy = build_config({}, {"method": "crf_fedavg", "dataset.name": "mnist",
                              "clients.noisy_fraction": 0.2})
    assert regime(clean.resolved()).data == "paper"  # the CRF recipe's MNIST at Dirichlet 0.1
    assert regime(noisy.resolved()).data == "other"
    attacked = build_config({}, {"clients.byzantine_fraction": 0.2})
    assert regime(build_config({}, {}).resolved()).data == "default"
    assert regime(attacked.resolved()).data == "other"


def test_a_tune_best_recipe_never_labels_a_run_it_did_not_make(tmp_path, monkeypatch):
    """``tune --best`` writes experiments/<study>_best.yaml; when its local block equals the
    defaults it would match every default run, which then read ``<study>_best recipe``."""
    import shutil

    from fedcore.specs.hparams import TUNE_BEST_MARK, local_label, regime_tags

    shutil.copytree(config_dir(), tmp_path / "configs")
    best = build_config({"model": {"name": "mlp"}}).resolved()  # its local block: the defaults
    best["method"]["name"] = "fedquad_margins_best"
    (tmp_path / "configs" / "experiments" / "fedquad_margins_best.yaml").write_text(
        f"# {TUNE_BEST_MARK}.\n" + yaml.safe_dump(best, sort_keys=False))
    monkeypatch.setenv("FEDCORE_HOME", str(tmp_path))
    plain = load_config(None, ["method=fedavg", "model.name=mlp"]).resolved()
    assert local_label(plain) == "default"
    assert regime_tags(plain)["hparams_local"] == "default"
