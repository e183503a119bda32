"""Run identity: every cell of a sweep has its own run name and tags; parents per invocation."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

from fedcore.core.compose.configure import build_config, load_config
from fedcore.core.config import config_dir
from fedcore.specs.sweep import Cell, load_sweep
from fedcore.tracking.names import cell_identities, parent_name, run_identity


def test_no_two_cells_of_the_main_job_share_a_run_name():
    spec = load_sweep(config_dir() / "sweeps" / "main.yaml")
    ids = cell_identities(spec.cells)
    names = [i["run_name"] for i in ids]
    assert len(set(names)) == len(names) == len(spec.cells) == 50 * 5  # 50 rows, seeds 0-4
    assert len({i["cell"] for i in ids}) == len(ids)
    # FedAvg under three protocols and in the default recipe, CRAFT at its paper step and
    # tuned: a name each, a variant of 5 seeds each
    assert {"fedavg-digits-a0.1-s0", "fedavg-digits-a0.1-s0 protocol=craft",
            "fedavg-digits-a0.1-s0 protocol=crf", "fedavg-digits-a0.1-s0 protocol=fedoui",
            "craft-digits-a0.1-s0 protocol=craft",
            "craft-digits-a0.1-s0 protocol=craft server_lr=0.1329 lr=0.06991"} <= set(names)
    variants = Counter(i["variant"] for i in ids)
    assert variants["craft-digits-a0.1 protocol=craft"] == 5
    assert variants["fedavg-digits-a0.1 protocol=craft server_lr=0.9497 lr=0.216"] == 5
    assert set(variants.values()) == {5}  # a variant is one row over the plan's 5 seeds
    assert len(spec.cells_for_look(0)) == 150  # the first look: every row at seeds 0-2


def test_names_take_more_digits_when_four_do_not_tell_cells_apart():
    base = {"model.name": "mlp", "method": "craft"}
    cells = [Cell({"method.aggregator.server_lr": v},
                  build_config({}, {**base, "method.aggregator.server_lr": v}))
             for v in (0.123451, 0.123459)]
    names = [i["run_name"] for i in cell_identities(cells)]
    assert names == ["craft-digits-a0.1-s0 server_lr=0.123451",
                     "craft-digits-a0.1-s0 server_lr=0.123459"]
    twins = cell_identities([cells[0], cells[0]])  # the same config twice: one name
    assert twins[0]["run_name"] == twins[1]["run_name"]


def test_a_run_outside_a_sweep_is_named_by_its_changed_hyperparameters():
    paper = run_identity(load_config(None, ["method=craft"]).resolved())
    tuned = run_identity(load_config(None, ["method=craft",
                                            "method.aggregator.server_lr=0.5"]).resolved())
    assert paper == ("craft-digits-a0.1-s0", "craft-digits-a0.1")
    assert tuned == ("craft-digits-a0.1-s0 server_lr=0.5", "craft-digits-a0.1 server_lr=0.5")


def test_parent_runs_are_named_per_invocation():
    when = datetime(2026, 12, 2, 3, 15, 0, tzinfo=timezone.utc)
    assert parent_name("sweep", "main", when) == "sweep-main-20261202-031500"
    assert parent_name("sweep", "main") != parent_name("sweep", "main", when)
