"""Paper protocols in a sweep: each family's rows run its paper's recipe, checked against the
recipe file before anything runs, labelled by protocol, and judged only at the recipe's horizon."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from fedcore.core.config import ConfigError, config_dir
from fedcore.specs.families import SeedPlan
from fedcore.specs.sweep import load_sweep
from fedcore.stats.looks import family_outcomes

RECIPE = {"dataset": {"name": "digits", "partition": "dirichlet", "alpha": 0.5,
                      "num_clients": 10},
          "model": {"name": "mlp"}, "method": "fedavg", "rounds": 4, "clients_per_round": 5,
          "local": {"epochs": 1, "batch_size": 32, "lr": 0.02}}
PROTO_SET = {"rounds": 4, "clients_per_round": 3, "local.epochs": 1, "local.batch_size": 32,
             "local.lr": 0.02, "dataset.alpha": 0.5}


def _files(tmp_path, protocol_set=None, grid=None, families=None, scaled=None):
    (tmp_path / "paper.yaml").write_text(yaml.safe_dump(RECIPE))
    spec = {
        "name": "proto",
        "base": str(config_dir() / "experiment.yaml"),
        "protocols": {"paper": {"paper": "A paper", "recipe": "paper.yaml",
                                "scaled": scaled or {"model": "MLP"},
                                "set": protocol_set or PROTO_SET}},
        "grid": grid or [{"protocol": ["paper"], "method": ["fedavg", "fedprox"]},
                         {"method": ["fedavg"]}],
        "seeds": [0, 1],
        "set": {"model.name": "mlp", "dataset.num_clients": 6, "rounds": 2},
        "families": families or [{"name": "f", "protocol": "paper", "reference": "fedavg",
                                  "baselines": ["fedprox"]}],
    }
    path = tmp_path / "proto.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_protocol_rows_run_the_recipe_and_are_labelled_by_it(tmp_path):
    spec = load_sweep(_files(tmp_path))
    assert spec.name == "proto"
    rows = {c.row: c.config for c in spec.cells}
    assert set(rows) == {"fedavg @paper", "fedprox @paper", "fedavg"}
    mine = rows["fedavg @paper"]
    assert (mine.rounds, mine.clients_per_round, mine.local.lr, mine.dataset.alpha) == (
        4, 3, 0.02, 0.5)
    assert rows["fedavg"].rounds == 2  # the file's set, outside any protocol
    fam = spec.families[0]
    assert fam.rows == ("fedavg @paper", "fedprox @paper")
    assert (fam.protocol, fam.horizon) == ("paper", 4)
    assert spec.protocols["paper"].scaled_text() == "model: MLP"


@pytest.mark.parametrize(("changed", "message"), [
    ({"local.lr": 0.05}, "local.lr = 0.05 differs from the recipe's 0.02 (paper.yaml)"),
    ({"rounds": 3}, "rounds = 3 differs from the recipe's 4 (paper.yaml)"),
    ({"dataset.alpha": 0.1}, "dataset.alpha = 0.1 differs from the recipe's 0.5"),
    ({"clients_per_round": 2}, "clients_per_round = 2 is not the recipe's participation (50 % "
                               "of 6 clients: 3; paper.yaml)"),
])
def test_a_protocol_that_leaves_its_recipe_is_refused_naming_the_key(tmp_path, changed,
                                                                      message):
    with pytest.raises(ConfigError, match="recipe check") as err:
        load_sweep(_files(tmp_path, {**PROTO_SET, **changed}))
    assert message in str(err.value)


def test_what_the_protocol_says_it_scales_and_what_a_row_sets_itself_are_not_checked(tmp_path):
    scaled = {"model": "MLP", "local.steps": "3 steps for one epoch of the recipe's clients"}
    spec = load_sweep(_files(tmp_path, {**PROTO_SET, "local.steps": 3}, scaled=scaled))
    assert {c.config.local.steps for c in spec.cells if "@" in c.row} == {3}
    grid = [{"protocol": ["paper"], "method": ["fedavg"], "local.lr": [0.1]},
            {"protocol": ["paper"], "method": ["fedprox"]}]
    fam = [{"name": "f", "protocol": "paper", "reference": "fedavg lr=0.1",
            "baselines": ["fedprox"]}]
    spec = load_sweep(_files(tmp_path, grid=grid, families=fam))
    assert {c.row: c.config.local.lr for c in spec.cells} == {"fedavg lr=0.1 @paper": 0.1,
                                                             "fedprox @paper": 0.02}


def test_unknown_protocols_are_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"sweep.grid.protocol: unknown protocol 'other'; "
                                          r"allowed: paper"):
        load_sweep(_files(tmp_path, grid=[{"protocol": ["other"], "method": ["fedavg"]}]))
    fam = [{"name": "f", "protocol": "other", "reference": "fedavg", "baselines": ["fedprox"]}]
    with pytest.raises(ConfigError, match=r"families\[0\].protocol: unknown protocol 'other'"):
        load_sweep(_files(tmp_path, families=fam))
    with pytest.raises(ConfigError, match=r"protocols.paper.recipe: no file"):
        path = _files(tmp_path)
        (tmp_path / "paper.yaml").unlink()
        load_sweep(path)


def _runs(rounds: int) -> pd.DataFrame:
    rows = []
    for seed in range(3):
        for row, acc in (("a @paper", 0.9 + 0.001 * seed), ("b @paper", 0.5 + 0.002 * seed)):
            rows.append({"row": row, "dataset": "digits", "alpha": 0.5, "seed": seed,
                         "status": "FINISHED", "failure": "", "accuracy_last_k": acc,
                         "rounds": rounds})
    return pd.DataFrame(rows)


def test_a_family_is_judged_only_at_its_protocols_horizon(tmp_path):
    from fedcore.specs.families import parse_families
    from fedcore.specs.protocols import parse_protocols

    (tmp_path / "paper.yaml").write_text(yaml.safe_dump(RECIPE))
    protocols = parse_protocols({"paper": {"recipe": "paper.yaml", "set": PROTO_SET}},
                                tmp_path / "sweep.yaml")
    fams = parse_families([{"name": "f", "protocol": "paper", "reference": "a",
                            "baselines": ["b"]}], "sweep", protocols)
    plan = SeedPlan((0, 1, 2), (3,))
    at_horizon = family_outcomes(_runs(4), fams, plan)[0].decisions[0]
    assert at_horizon.verdict == "better"
    short = family_outcomes(_runs(2), fams, plan)[0].decisions[0]
    assert short.verdict == "blocked" and short.comparison is None
    assert short.words("a @paper") == (
        "a @paper vs b @paper: no verdict (ran 2 of the paper protocol's 4 rounds; a family is "
        "judged only at its paper's horizon)")


def test_every_family_of_the_main_job_runs_its_papers_protocol():
    spec = load_sweep(config_dir() / "sweeps" / "main.yaml")  # every protocol row checked
    assert {f.name: f.protocol for f in spec.families} == {
        "craft": "craft", "craft_tuned": "craft", "sapef": "sapef", "fedquad": "fedquad",
        "crf": "crf", "fedoui": "fedoui"}
    assert spec.protocols["craft"].horizon == 500
    for fam in spec.families:
        cells = [c for c in spec.cells if c.row in fam.rows]
        assert {c.config.rounds for c in cells} == {spec.protocols[str(fam.protocol)].horizon}


def test_the_confirmation_asks_the_main_jobs_questions_on_fresh_seeds():
    main = load_sweep(config_dir() / "sweeps" / "main.yaml")
    confirm = load_sweep(config_dir() / "sweeps" / "main-confirm.yaml")
    assert confirm.screening == "main"
    assert confirm.families == main.families
    assert {k: (p.values, p.scaled, p.recipe) for k, p in confirm.protocols.items()} == {
        k: (p.values, p.scaled, p.recipe) for k, p in main.protocols.items()}
    family_rows = {r for f in main.families for r in f.rows}

    def configs(spec):  # noqa: ANN001, ANN202
        return {(c.row, c.config.model_copy(update={"seed": 0}).config_hash())
                for c in spec.cells if c.row in family_rows}

    assert configs(confirm) == configs(main)
    assert {c.row for c in confirm.cells} == family_rows  # no exploratory rows
    assert not set(confirm.seed_plan.seeds) & set(main.seed_plan.seeds)
    assert confirm.seed_plan.looks == main.seed_plan.looks


@pytest.mark.slow
def test_the_report_names_each_familys_protocol_and_the_rounds_it_reads(tracking, tmp_path):
    from fedcore.flows.sweep import parent_run
    from fedcore.tracking.report import build_report
    from fedcore.tracking.runner import run_tracked

    recipe = {**RECIPE, "rounds": 2}
    path = _files(tmp_path, {**PROTO_SET, "rounds": 2})
    (tmp_path / "paper.yaml").write_text(yaml.safe_dump(recipe))
    spec = load_sweep(path)
    parent = parent_run(spec)
    for cell in spec.cells:
        run_tracked(cell.config, parent_run_id=parent, tags={"sweep": spec.name})
    build_report(spec, tmp_path / "out", parent_run_id=parent)
    md = (tmp_path / "out" / "table.md").read_text()
    assert ("Protocol `paper`: A paper's recipe `configs/experiments/paper.yaml` at its 2 "
            "rounds; scaled: model: MLP. Endpoint: mean test accuracy of the last 5 "
            "evaluations (final/accuracy_last_k), rounds 1-2 of 2.") in md
    assert "no verdict (ran" not in md  # at the horizon: judged (the rule: unit test above)


@pytest.mark.parametrize(("rounds", "every", "reads"), [
    (500, 10, "rounds 460-500 of 500"), (20, 1, "rounds 16-20 of 20"), (3, 10, "round 3 of 3"),
    (25, 10, "rounds 10-25 of 25")])
def test_the_endpoint_names_the_rounds_it_reads(rounds, every, reads):
    from fedcore.report.families import endpoint_text

    runs = pd.DataFrame({"rounds": [rounds], "last_k": [5], "eval_every": [every]})
    assert endpoint_text(runs, "accuracy_last_k") == (
        "mean test accuracy of the last 5 evaluations (final/accuracy_last_k), " + reads)
    mixed = pd.DataFrame({"rounds": [500, 20], "last_k": [5, 5], "eval_every": [10, 1]})
    assert endpoint_text(mixed, "accuracy_last_k").endswith(
        "the last 5 evaluations (final/accuracy_last_k), each row at its own last evaluations "
        "(its protocol's rounds)")


def test_rows_outside_any_protocol_keep_their_settings_across_settings(tmp_path):
    """The exploratory rows (no protocol: NaN in `grid:protocol`) at two alphas are two
    settings of the across-settings section, not one setting `nan`."""
    from fedcore.report.across_settings import across_settings

    rows = []
    for alpha in (0.1, 1.0):
        for seed in range(3):
            for row, acc in (("fedavg", 0.8), ("fedprox", 0.7)):
                rows.append({"row": row, "dataset": "digits", "alpha": alpha, "seed": seed,
                             "status": "FINISHED", "grid:protocol": float("nan"),
                             "accuracy_last_k": acc + 0.01 * seed, "accuracy": acc,
                             "worst10": acc - 0.2})
    rows.append({"row": "fedavg @craft", "dataset": "digits", "alpha": 0.1, "seed": 0,
                 "status": "FINISHED", "grid:protocol": "craft", "accuracy_last_k": 0.9,
                 "accuracy": 0.9, "worst10": 0.7})
    text = across_settings(pd.DataFrame(rows), "fedavg", tmp_path)
    assert "2 settings (dataset, alpha, protocol): `dataset=digits alpha=0.1 protocol=`; " \
           "`dataset=digits alpha=1.0 protocol=`." in text
