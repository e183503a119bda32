"""The claims report: claims file validation, claim judgement, table, MLflow parent run, flow."""

from __future__ import annotations

import math

import pytest
import yaml

from fedcore.core.config import ConfigError, config_dir
from fedcore.core.round.simulation import Result
from fedcore.report.claims import markdown
from fedcore.specs.claims import experiments, load_claims, record_claims
from fedcore.stats.claims import evaluate, measure, run_claims, training_state, verdict

TINY = {"rounds": 2, "dataset.num_clients": 6, "clients_per_round": 3, "local.steps": 2}
PAPERS = {"CRAFT", "CRF", "FedOUI", "SA-PEF", "FedQuad"}


def _file(tmp_path, claims, **top):
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({
        "name": "tiny", "base": str(config_dir() / "experiment.yaml"), "seeds": [0],
        "set": {"model.name": "mlp", **TINY}, "claims": claims, **top,
    }))
    return path


# fedavg against itself: identical numbers on every seed, so the test can never decide
FAILING = {"id": "fedavg_below_itself", "paper": "FedAvg", "claim": "lower loss than FedAvg",
           "test": "lower", "run": {"method": "fedavg"}, "baseline": {"method": "fedavg"},
           "metric": "final/loss"}
# a local step 10^5 times smaller barely moves the model: clearly worse than FedAvg's
CONTRADICTED = {"id": "frozen_at_least_fedavg", "paper": "FedAvg",
                "claim": "a frozen model's accuracy >= FedAvg's", "test": "at_least",
                "run": {"method": "fedavg", "local.lr": 1.0e-7, "local.steps": 5},
                "baseline": {"method": "fedavg", "local.steps": 5}, "metric": "final/accuracy"}


def test_shipped_claims_cover_the_five_papers_in_their_regimes():
    spec = load_claims(config_dir() / "claims.yaml")
    assert len(spec.seeds) >= 5
    assert {c.paper for c in spec.claims} == PAPERS
    assert len(spec.claims) == 12 and all(c.fixed for c in spec.claims)
    assert spec.record is not None  # claims.record.yaml: every claim as fixed
    # a baseline shares its paper's recipe, so FedAvg runs once per recipe, alpha and seed
    assert len(experiments(spec)) == 15 * len(spec.seeds)
    by_id = {c.id: c for c in spec.claims}
    for c in spec.claims:  # every claim runs its paper's local recipe on both sides
        assert c.recipe is not None
        run, base = spec.configs(c, 0)
        assert base is None or base.local == run.local
    assert by_id["craft_conflict_layerwise"].kind == "implementation check"
    assert by_id["crf_reliability_recipe"].kind == "robustness check"
    # CRAFT's worst-10 % claim is against FedLF (its paper's comparison), FedAvg second
    lf_run, lf_base = spec.configs(by_id["craft_worst10_vs_fedlf"], 0)
    assert lf_base is not None and lf_base.method.name == "fedlf" and lf_run.rounds == 300
    assert "craft_worst10" not in by_id  # re-specified after its result: replaced, not moved
    crf_run, crf_base = spec.configs(by_id["crf_accuracy_clean"], 0)
    assert crf_run.clients.noisy_fraction == 0 and crf_base is not None
    assert crf_base.clients.noisy_fraction == 0
    fedquad = [spec.configs(c, 0)[0] for c in spec.claims if c.paper == "FedQuad"]
    assert sorted({cfg.dataset.alpha for cfg in fedquad}) == [0.3, 0.5]
    fedoui, _ = spec.configs(by_id["fedoui_auc_scenario_a"], 0)
    assert fedoui.dataset.test_fraction == 0
    assert by_id["fedoui_auc_scenario_a"].metric.endswith("trapz")
    sapef, _ = spec.configs(by_id["sapef_rounds_recipe"], 0)
    assert (sapef.local.steps, sapef.local.momentum, sapef.local.lr_schedule) == (
        5, 0.9, "warmup_cosine")


@pytest.mark.parametrize(("change", "message"), [
    ({"test": "better"}, "claims.claims[0].test: unknown 'better'; allowed: zero_every_round"),
    ({"baseline": None}, "claims.claims[0].baseline: test lower needs a baseline run"),
    ({"reduce": "median"}, "claims.claims[0].reduce: unknown 'median'; allowed: final, mean, max"),
    ({"run": {"method": "nope"}}, "claims.fedavg_below_itself: method: unknown method 'nope'"),
])
def test_bad_claims_are_one_line_errors(tmp_path, change, message):
    claim = {k: v for k, v in {**FAILING, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_claims(_file(tmp_path, [claim]))
    with pytest.raises(ConfigError, match="claims.seeds: expected a non-empty list"):
        load_claims(_file(tmp_path, [FAILING]), {"seeds": []})


def test_a_claim_changed_after_it_was_fixed_is_refused(tmp_path):
    claim = {**CONTRADICTED, "fixed": "2026-12-04"}
    path = _file(tmp_path, [claim], seeds=[0, 1])
    assert record_claims(path) == ["frozen_at_least_fedavg"]
    assert record_claims(path) == []  # an entry is never rewritten
    load_claims(path)
    moved = {**claim, "baseline": {"method": "fedprox", "local.steps": 5}}  # a new baseline
    _file(tmp_path, [moved], seeds=[0, 1])
    with pytest.raises(ConfigError, match="claims.frozen_at_least_fedavg: its regime differs "
                       "from the one fixed on 2026-12-04.*give it a new id"):
        load_claims(path)
    _file(tmp_path, [claim], seeds=[0, 1, 2])  # the file's seeds are part of every regime
    with pytest.raises(ConfigError, match="its regime differs"):
        load_claims(path)
    renamed = {**moved, "id": "frozen_at_least_fedprox", "note": "replaces ..."}
    _file(tmp_path, [renamed], seeds=[0, 1])
    assert load_claims(path).claims[0].id == "frozen_at_least_fedprox"  # a new claim
    with pytest.raises(ConfigError, match="fixed: missing"):
        record_claims(_file(tmp_path, [{**CONTRADICTED, "id": "undated"}], seeds=[0, 1]))


def test_a_quick_look_with_overrides_is_labelled_exploratory(tmp_path):
    path = _file(tmp_path, [CONTRADICTED], seeds=[0, 1])
    assert not load_claims(path).exploratory
    assert load_claims(path, {"rounds": 3}).exploratory
    assert load_claims(path, {"seeds": [0]}).exploratory


def test_claims_are_judged_as_a_family_per_paper(tmp_path):
    base = [0.80, 0.82, 0.79, 0.85, 0.81]
    up = [b + d for b, d in zip(base, [0.05, 0.06, 0.04, 0.05, 0.07], strict=True)]
    noisy = [b + d for b, d in zip(base, [0.06, -0.05, 0.04, -0.04, 0.04], strict=True)]
    close = [b + d for b, d in zip(base, [0.001, -0.001, 0.0005, -0.0005, 0.0], strict=True)]
    claims = [{**CONTRADICTED, "id": f"c{i}", "run": {"method": "fedavg", "local.lr": 0.01 * i},
               "metric": "final/accuracy"} for i in range(1, 4)]
    spec = load_claims(_file(tmp_path, claims, seeds=[0, 1, 2, 3, 4]))
    results = {}
    for claim, values in zip(spec.claims, (up, close, noisy), strict=True):
        for seed in spec.seeds:
            run, b = spec.configs(claim, seed)
            results[run.config_hash()] = Result({"rounds": 3}, "h", [], [],
                                                {"final/accuracy": values[seed]})
            results[b.config_hash()] = Result({"rounds": 3}, "h", [], [],
                                              {"final/accuracy": base[seed]})
    rows = {r.id: r for r in evaluate(spec, results)}
    assert rows["c1"].verdict == "holds" and rows["c1"].decided_at == 5
    assert rows["c2"].verdict == "equivalent"  # within ±0.01 by two one-sided tests
    assert rows["c3"].verdict == "inconclusive"  # +0.01 on average, seed noise ±0.05
    assert rows["c1"].comparison is not None and rows["c1"].comparison.level == 0.05 / 3
    assert "detects ±" in markdown(list(rows.values())).splitlines()[4]


def test_a_claim_still_climbing_at_its_horizon_says_early_training():
    def run_of(acc):
        return Result({}, "h", [{"round": i + 1, "test/accuracy": a} for i, a in enumerate(acc)],
                      [], {})

    flat = [run_of([0.5, 0.8, 0.90, 0.901, 0.899, 0.90, 0.902])]
    climbing = [run_of([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])]
    assert training_state(flat) == "trained"
    assert training_state(climbing).startswith("early training (+0.400 over the last 5")


def test_verdicts_of_claims():
    # implementation check (zero by construction when the code is right): exactly 0 passes,
    # anything else, a NaN or no value at all fails
    assert verdict("zero_every_round", [0.0, 0.0, 0.0], None) == "passes"
    assert verdict("zero_every_round", [0.0, math.nan], None) == "fails"
    assert verdict("zero_every_round", [], None) == "fails"
    assert verdict("zero_every_round", [0.0, 0.05, 0.0], None) == "fails"
    assert verdict("at_least", [math.nan], None) == "inconclusive"


def test_implementation_checks_and_recipes_are_validated(tmp_path):
    check = {**FAILING, "test": "zero_every_round", "baseline": None}
    del check["baseline"]
    with pytest.raises(ConfigError, match="claims.claims.0..kind: test zero_every_round holds"):
        load_claims(_file(tmp_path, [check]))
    shipped = "craft, craft_cifar100, crf, fedoui, fedquad, sapef"  # configs/experiments/
    refused = rf"^claims\.claims\[0\]\.recipe: unknown 'nope'; allowed: {shipped}$"
    with pytest.raises(ConfigError, match=refused):
        load_claims(_file(tmp_path, [{**FAILING, "recipe": "nope"}]))
    spec = load_claims(_file(tmp_path, [{**FAILING, "recipe": "sapef"}]))
    run, base = spec.configs(spec.claims[0], 0)
    # both sides take every local setting of SA-PEF's recipe file, read here on its own
    recipe = yaml.safe_load((config_dir() / "experiments" / "sapef.yaml").read_text())["local"]
    assert base is not None and recipe
    for key, value in recipe.items():
        assert getattr(run.local, key) == value == getattr(base.local, key), key
    no_recipe = load_claims(_file(tmp_path, [FAILING]))
    plain = no_recipe.configs(no_recipe.claims[0], 0)[0].local
    assert plain != run.local  # without a recipe the local work is the default one


def test_measure_reduces_over_rounds_and_censors_rounds_to_target():
    history = [{"round": r, "test/accuracy": a, "x/y": v}
               for r, a, v in ((1, 0.2, 3.0), (2, 0.5, 1.0), (3, 0.6, 2.0))]
    result = Result({"method": {"name": "m"}}, "h", history, [], {"final/accuracy": 0.6})
    assert measure(result, "x/y", "final", 3) == 2.0
    assert measure(result, "x/y", "mean", 3) == 2.0
    assert measure(result, "x/y", "max", 3) == 3.0
    assert measure(result, "final/accuracy", "final", 3) == 0.6
    assert measure(result, "rounds_to_target", "final", 3) == 4.0  # never reached: R + 1
    result.summary["rounds_to_target"] = 2.0
    assert measure(result, "rounds_to_target", "final", 3) == 2.0


def test_tiny_run_of_the_shipped_claims_gives_the_whole_table():
    spec = load_claims(config_dir() / "claims.yaml", {"seeds": [0], **TINY})
    rows = run_claims(spec)
    claims = {c.id: c for c in spec.claims}
    assert [r.id for r in rows] == [c.id for c in spec.claims]
    table = markdown(rows).splitlines()
    assert table[0].startswith("| claim | kind | setting | regime | at the horizon | measured")
    assert len(table) == 2 + len(rows)
    for line, row in zip(table[2:], rows, strict=True):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 7 and cells[6].strip("*").split(" ")[0].rstrip(";") in (
            "holds", "contradicted", "equivalent", "inconclusive", "passes", "fails")
        assert cells[2].startswith("digits mlp, Dir 0.")
        assert "6 clients (3/round), 2 rounds, 1 seeds; local: " in cells[2]
        assert "(1 seed, no interval)" in cells[5]
        # TINY's local.steps override every recipe: the local part is named as set; noisy
        # clients take the data part out of the default (and of every paper but FedOUI's)
        noisy = any("noisy_fraction" in k for k in claims[row.id].run)
        data = "other" if noisy else "default"
        assert cells[3].startswith("method paper") and f"local set · data {data}" in cells[3]
        assert all(math.isfinite(v) for v in row.values)
    crf = next(r for r in rows if r.id == "crf_reliability_recipe")
    assert "noisy" in crf.measured and "clean" in crf.measured


def test_a_contradicted_claim_and_an_undecidable_one(tmp_path):
    spec = load_claims(_file(tmp_path, [FAILING, CONTRADICTED], seeds=[0, 1, 2]))
    rows = run_claims(spec)
    # the same run on both sides: equal on every seed, and 3 seeds cannot show equivalence
    assert [r.verdict for r in rows] == ["inconclusive", "contradicted"]
    assert rows[0].values == rows[0].baseline_values  # measured, and shown: the same run
    assert markdown(rows).splitlines()[2].endswith("| **inconclusive; early training** |")
    assert rows[1].comparison is not None and rows[1].comparison.interval.high < 0


def test_tracked_claims_are_one_parent_run_with_the_table(tracking, tmp_path, capsys):
    from fedcore.cli import main
    from fedcore.tracking import get_experiment_id, mlflow_client

    path = _file(tmp_path, [FAILING, CONTRADICTED], seeds=[0, 1, 2])
    assert main(["claims", str(path), "--out", str(tmp_path / "t.md")]) == 0
    out = capsys.readouterr().out
    assert "| FedAvg: lower loss than FedAvg |" in out
    assert "claims: 1 contradicted, 1 inconclusive" in out
    client = mlflow_client(tracking)
    runs = client.search_runs([get_experiment_id(client, tracking)])
    parent = next(r for r in runs if r.data.tags.get("fedcore.role") == "claims")
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    # three distinct experiments (fedavg at 2 and at 5 local steps, the frozen one) x 3 seeds
    assert parent.info.status == "FINISHED" and len(children) == 9
    assert parent.data.metrics["holds/fedavg_below_itself"] == 0.0
    assert parent.data.tags["verdict/frozen_at_least_fedavg"] == "contradicted"
    note = parent.data.tags["mlflow.note.content"]
    assert note.startswith("Claims `tiny`: claims: 1 contradicted, 1 inconclusive")
    assert "**contradicted (3 seeds); early training**" in note
    assert [a.path for a in client.list_artifacts(parent.info.run_id, "claims")] == [
        "claims/table.md"]
    assert (tmp_path / "t.md").read_text().splitlines()[0].startswith("| claim | kind")


def test_prefect_flow_claims(tracking, tmp_path, prefect_harness):
    from fedcore.flows.claims import claims

    out = claims(str(_file(tmp_path, [CONTRADICTED], seeds=[0, 1, 2])))
    assert out["holds"] == {"frozen_at_least_fedavg": False}
    assert out["verdicts"] == {"frozen_at_least_fedavg": "contradicted"}
    assert "| **contradicted (3 seeds); early training** |" in out["table"]


def test_the_shipped_claims_run_on_real_mnist_given_a_root(tmp_path):
    from pathlib import Path

    from fedcore.core.data.idx import repack_mnist_t10k

    src = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist-t10k"
    if not (src / "t10k-images-idx3-ubyte.gz").is_file():
        pytest.skip("real MNIST t10k files not found in ../shared/data/mnist-t10k")
    repack_mnist_t10k(src, tmp_path, n_train=8000, seed=0)
    spec = load_claims(config_dir() / "claims.yaml", {
        "seeds": [0], **TINY, "dataset.name": "mnist", "dataset.root": str(tmp_path)})
    crf = next(c for c in spec.claims if c.id == "crf_accuracy_clean")
    rows = run_claims(spec.__class__(spec.name, spec.base, spec.fixed, spec.seeds, (crf,),
                                     spec.overrides))
    assert rows[0].setting.startswith("mnist mlp, Dir 0.1")
    # MNIST at Dirichlet 0.1 is the CRF paper's own data setting (not FedAvg's); TINY's
    # local.steps override the recipe, so the local part is named as changed
    # CRF's recipe horizon is not TINY's 2 rounds of 6 clients: "horizon other"
    assert rows[0].regime == ("method paper (horizon other) · local set · data paper; "
                              "baseline: method paper · local set · data other")
    assert all(math.isfinite(v) for v in rows[0].values)


def test_a_diverged_run_leaves_its_claim_unjudged_and_the_others_judged(tmp_path):
    exploding = {**CONTRADICTED, "id": "exploding", "run": {"method": "fedavg", "local.lr": 1e9,
                                                            "local.steps": 5}}
    spec = load_claims(_file(tmp_path, [exploding, CONTRADICTED], seeds=[0, 1, 2]))
    rows = run_claims(spec)
    assert rows[0].verdict == "inconclusive" and "fedavg seed 0 diverged" in rows[0].measured
    assert rows[0].measured.startswith("not judged: seed 0: fedavg seed 0 diverged")
    assert "**inconclusive (a run diverged)**" in markdown(rows).splitlines()[2]
    assert rows[1].verdict == "contradicted"  # judged on its own runs
