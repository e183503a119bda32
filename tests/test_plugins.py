"""Components from a package outside the repository (docs/how-to/plugins.md): a rule and a
client objective by entry point and by import path, through ``run``, ``sweep`` (threads and a
Dask LocalCluster) and ``tune``; their code is in the code digest, so editing the rule reruns
the sweep's cells."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from fedcore.core.aggregators.base import REGISTRY as AGG
from fedcore.core.clients.base import REGISTRY as CLIENTS
from fedcore.core.compose import plugins
from fedcore.core.compose.configure import load_config
from fedcore.core.compression.base import REGISTRY as COMP
from fedcore.core.config import ConfigError
from fedcore.core.round import code_digest
from fedcore.tracking.provenance import CODE_DIGEST_TAG, code_label

PKG = "fcplug"
RULE = '''\
"""ClipAvg: the weighted mean of client deltas clipped to an L2 norm."""
import torch
from pydantic import Field

from fedcore.core.aggregators.base import Aggregate, Aggregator, UpdateBatch, weighted_mean
from fedcore.core.component.registry import HParams

SCALE = 1.0


class ClipAvg(Aggregator):
    class HParams(HParams):
        clip: float = Field(1.0, gt=0)

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        norms = batch.deltas.norm(dim=1, keepdim=True).clamp_min(1e-12)
        clipped = batch.deltas * torch.clamp(SCALE * self.hp.clip / norms, max=1.0)
        return Aggregate(weighted_mean(clipped, batch.weights), {"clip/norm": float(norms.mean())})
'''
OBJECTIVE = '''\
"""Cross-entropy with label smoothing."""
from pydantic import Field
from torch.nn.functional import cross_entropy

from fedcore.core.clients.base import ClientAlgorithm
from fedcore.core.component.registry import HParams


class SmoothCE(ClientAlgorithm):
    class HParams(HParams):
        smoothing: float = Field(0.1, ge=0, lt=1)

    def loss(self, b):
        return cross_entropy(b.model(b.x), b.y, label_smoothing=self.hp.smoothing)
'''
ENTRY_POINTS = f"""\
[fedcore.rules]
clipavg = {PKG}.rules:ClipAvg
brokenrule = {PKG}.broken:Rule

[fedcore.clients]
smoothce = {PKG}.objectives:SmoothCE
"""
TINY = {"rounds": 1, "model.name": "mlp", "dataset.num_clients": 6, "clients_per_round": 3,
        "local.epochs": 1, "local.steps": 2}


def _forget() -> None:
    """As a new process: the package unimported, its source unread, no entry point cached."""
    for name in [m for m in sys.modules if m == PKG or m.startswith(f"{PKG}.")]:
        del sys.modules[name]
    plugins.package_source.cache_clear()
    plugins.package_files.cache_clear()
    plugins._all_distributions.cache_clear()
    for registry in (AGG, CLIENTS, COMP):
        for name in [n for n, c in registry.classes().items() if not plugins.in_tree(c)]:
            del registry._external[name]
        registry.refresh()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[Path]:
    """A folder outside the repository holding the package ``fcplug`` (a git work tree) and the
    metadata of its distribution ``fcplug 0.1`` with entry points, as pip would write it; it is
    on ``sys.path`` (and given to subprocesses as PYTHONPATH)."""
    root = tmp_path_factory.mktemp("site")
    (root / PKG).mkdir()
    (root / PKG / "__init__.py").write_text("")
    (root / PKG / "rules.py").write_text(RULE)
    (root / PKG / "objectives.py").write_text(OBJECTIVE)
    (root / PKG / "broken.py").write_text("raise RuntimeError('boom')\n")
    info = root / f"{PKG}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PKG}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    (info / "top_level.txt").write_text(f"{PKG}\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "plugin"], check=True)
    sys.path.insert(0, str(root))
    _forget()
    yield root
    sys.path.remove(str(root))
    _forget()


def _commit(site: Path) -> str:
    return subprocess.run(["git", "-C", str(site), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()


@pytest.mark.parametrize(("override", "message"), [
    ("method.aggregator.rule=nope", "method.aggregator.rule: unknown 'nope'; allowed: afl, "),
    ("method.aggregator.rule=fcplug.rules:Nope",
     "method.aggregator.rule: module 'fcplug.rules' has no attribute 'Nope' "
     "('fcplug.rules:Nope')"),
    ("method.aggregator.rule=fcplug.objectives:SmoothCE",
     "method.aggregator.rule: 'fcplug.objectives:SmoothCE' is not a valid aggregator rule: it "
     "must be a class subclassing fedcore.core.aggregators.base.Aggregator"),
    ("method.aggregator.rule=fcplug.broken:Rule",
     "method.aggregator.rule: cannot import module 'fcplug.broken' of 'fcplug.broken:Rule' "
     "(RuntimeError: boom)"),
    ("method.aggregator.rule=nomodule_xyz.rules:Rule",
     "method.aggregator.rule: cannot import module 'nomodule_xyz.rules' of "
     "'nomodule_xyz.rules:Rule' (ModuleNotFoundError: No module named 'nomodule_xyz') "
     "(is its package installed or on PYTHONPATH?)"),
    ("method.aggregator.rule=brokenrule",
     "method.aggregator.rule: cannot load entry point 'brokenrule' (fcplug.broken:Rule of "
     "distribution fcplug, group fedcore.rules): module 'fcplug.broken' (RuntimeError: boom)"),
    ("method.aggregator.clip=-1",
     "method.aggregator.clip: Input should be greater than 0 (got -1)"),
])
def test_bad_components_are_one_line_errors(site, capsys, override, message):
    from fedcore.cli import main

    assert main(["run", "method.aggregator={rule: clipavg}", override]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"fedcore: error: {message}" or err.startswith(f"fedcore: error: {message}")
    assert len(err.splitlines()) == 1


def test_a_lone_rule_override_names_the_rule_and_where_an_unknown_key_came_from(site, capsys):
    from fedcore.cli import main

    assert main(["run", f"method.aggregator.rule={PKG}.rules:ClipAvg"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"fedcore: error: method.aggregator.server_lr: not a key of rule {PKG}.rules:ClipAvg; it "
        "came with the aggregator block of method 'fedavg' (only method.aggregator.rule was "
        "overridden); allowed: rule, clip; set the whole block instead, e.g. "
        f"method.aggregator={{rule: {PKG}.rules:ClipAvg}}")
    with pytest.raises(ConfigError, match=r"^method\.aggregator\.granularity: not a key of rule "
                                          r"krum; it came with the aggregator block of method "
                                          r"'craft' "):
        load_config(None, ["method=craft", "method.aggregator.rule=krum"])
    with pytest.raises(ConfigError, match=r"^method\.aggregator\.bogus: unknown key; allowed: "):
        load_config(None, ["method.aggregator.rule=krum", "method.aggregator.bogus=1"])


def test_entry_points_and_import_paths_resolve_with_typed_hparams(site):
    assert "clipavg" in AGG.names() and "smoothce" in CLIENTS.names()
    with pytest.raises(ConfigError, match=r"allowed: .*brokenrule, clipavg, config, .*"
                                          r"or an import path module:Class"):
        load_config(None, ["method.aggregator.rule=clip"])
    cfg = load_config(None, ["method.aggregator={rule: clipavg}", "method.aggregator.clip=0.5",
                             f"method.client.algorithm={PKG}.objectives:SmoothCE"])
    assert cfg.method.aggregator == {"rule": "clipavg", "clip": 0.5}
    assert cfg.method.client == {"algorithm": f"{PKG}.objectives:SmoothCE", "smoothing": 0.1}
    assert AGG.get("clipavg") is AGG.get(f"{PKG}.rules:ClipAvg")
    [source] = plugins.sources(cfg.resolved()["method"])
    assert (source.package, source.distribution, source.version) == (PKG, PKG, "0.1")
    assert (source.git_commit, source.git_dirty, source.root) == (_commit(site), False, str(site))
    assert code_digest.of_config(cfg) != code_digest.current()
    assert code_digest.of_config(load_config(None, [])) == code_digest.current()


def test_run_records_the_plugin_code(site, tracking, tmp_path):
    from fedcore.cli import main

    method = tmp_path / "clipped.yaml"  # a method YAML: the rule by import path
    method.write_text(yaml.safe_dump({"client": {"algorithm": "smoothce", "smoothing": 0.2},
                                      "aggregator": {"rule": f"{PKG}.rules:ClipAvg", "clip": 0.5}}))
    assert main(["run", f"method={method}", *[f"{k}={v}" for k, v in TINY.items()]]) == 0
    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment).experiment_id
    [run] = client.search_runs([exp])
    tags = run.data.tags
    cfg = load_config(None, [f"method={method}", *[f"{k}={v}" for k, v in TINY.items()]])
    assert tags[CODE_DIGEST_TAG] == code_digest.of_config(cfg) != code_digest.current()
    assert tags["fedcore.plugins"] == (f"smoothce = {PKG}.objectives:SmoothCE, "
                                       f"{PKG}.rules:ClipAvg = {PKG}.rules:ClipAvg")
    prefix = f"fedcore.plugin.{PKG}"
    assert tags[f"{prefix}.distribution"] == PKG and tags[f"{prefix}.version"] == "0.1"
    assert tags[f"{prefix}.git_commit"] == _commit(site)
    assert tags[f"{prefix}.files_digest"] == plugins.package_source(PKG).files_digest
    assert code_label(tags).endswith(f" + {PKG} files {tags[f'{prefix}.files_digest']}")
    assert "clip/norm" in run.data.metrics


def _sweep(tmp_path: Path) -> Path:
    path = tmp_path / "plug.yaml"
    path.write_text(yaml.safe_dump({
        "name": "plug", "grid": {"method.aggregator.rule": ["clipavg", f"{PKG}.rules:ClipAvg"]},
        "set": {**TINY, "method": {"name": "clip", "client": {"algorithm": "smoothce"},
                                   "aggregator": {"rule": "clipavg"}}}}))
    return path


def test_sweep_on_threads_and_dask_reruns_cells_after_the_rule_changes(
    site, prefect_harness, tracking, tmp_path
):
    from fedcore.flows.sweep import sweep

    path = _sweep(tmp_path)
    first = sweep(str(path), max_workers=2)
    assert [r["status"] for r in first] == ["finished", "finished"]
    assert [r["status"] for r in sweep(str(path))] == ["skipped", "skipped"]

    rules = site / PKG / "rules.py"
    rules.write_text(RULE.replace("SCALE = 1.0", "SCALE = 0.5"))
    try:
        _forget()  # as a new `fedcore sweep` process: the flow digests the edited rule
        # fresh worker processes import the edited rule: a new digest, so both cells rerun
        again = sweep(str(path), max_workers=1, runner="dask")
    finally:
        rules.write_text(RULE)
    assert [r["status"] for r in again] == ["finished", "finished"]
    client = MlflowClient(tracking.tracking_uri)
    runs = {r["run_id"]: client.get_run(r["run_id"]).data.tags for r in first + again}
    assert len(runs) == 4
    before = {runs[r["run_id"]][CODE_DIGEST_TAG] for r in first}
    after = {runs[r["run_id"]][f"fedcore.plugin.{PKG}.files_digest"] for r in again}
    assert len(before) == 1 and len(after) == 1
    assert after != {runs[first[0]["run_id"]][f"fedcore.plugin.{PKG}.files_digest"]}
    assert all(runs[r["run_id"]][f"fedcore.plugin.{PKG}.git_dirty"] == "true" for r in again)


def test_a_worker_that_cannot_import_the_plugin_names_itself(site, tracking):
    from fedcore.flows.sweep import _simulate_cell

    cfg = load_config(None, [f"{k}={v}" for k, v in TINY.items()]).resolved()
    cfg["method"]["aggregator"] = {"rule": "nomodule_xyz.rules:Rule"}
    with pytest.raises(ConfigError, match=r"^method\.aggregator\.rule: cannot import module "
                                          r"'nomodule_xyz\.rules'.* \(on host .+\)$"):
        _simulate_cell(cfg, "parent", "plug", tracking, 1, False, False, {})


def test_tune_trials_use_the_plugin(site, tracking, tmp_path):
    from fedcore.cli import main

    study = tmp_path / "clip.yaml"
    study.write_text(yaml.safe_dump({
        "name": "clip", "set": {**TINY, "seed": 1000, "method": {
            "name": "clip", "client": {"algorithm": f"{PKG}.objectives:SmoothCE"},
            "aggregator": {"rule": "clipavg"}}},
        "search": {"method.aggregator.clip": {"type": "float", "low": 0.1, "high": 2.0}},
        "metric": "final/accuracy", "direction": "maximize", "n_trials": 1,
        "storage": f"sqlite:///{tmp_path / 'optuna.db'}"}))
    assert main(["tune", str(study)]) == 0
    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment).experiment_id
    trials = client.search_runs([exp], "tags.`fedcore.plugins` LIKE '%clipavg%'")
    assert len(trials) == 1
    assert {t.data.params["method.aggregator.rule"] for t in trials} == {"clipavg"}
    assert all(t.data.tags[f"fedcore.plugin.{PKG}.distribution"] == PKG for t in trials)


def test_a_worker_resolves_the_plugin_from_the_roots_its_cell_carries(site):
    method = load_config(None, ["method.aggregator={rule: clipavg}"]).resolved()["method"]
    assert plugins.import_roots(method) == [str(site)]
    assert plugins.import_roots(load_config(None, []).resolved()["method"]) == []
    sys.path.remove(str(site))  # a worker started without the user's folder on its path
    _forget()
    try:
        with pytest.raises(KeyError, match="unknown 'clipavg'"):
            AGG.get("clipavg")
        plugins.add_roots([str(site), "/no/such/folder"])
        assert AGG.get("clipavg").__module__ == f"{PKG}.rules"
        assert "/no/such/folder" not in sys.path
    finally:
        if str(site) in sys.path:
            sys.path.remove(str(site))
        sys.path.insert(0, str(site))
        _forget()


def test_editing_the_rule_changes_the_code_digest(site):
    _forget()  # whatever an earlier test in this process imported or pinned
    method = load_config(None, ["method.aggregator={rule: clipavg}"]).resolved()["method"]
    before = code_digest.of_method(method)
    rules = site / PKG / "rules.py"
    rules.write_text(RULE.replace("SCALE = 1.0", "SCALE = 0.5"))
    try:
        _forget()  # as a new process would read it
        assert code_digest.of_method(method) != before
        assert plugins.package_source(PKG).git_dirty is True
    finally:
        rules.write_text(RULE)
        _forget()
    assert code_digest.of_method(method) == before


def test_a_rule_edited_after_it_was_imported_keeps_the_digest_of_the_code_loaded(site):
    """A rule edited while a thread-runner sweep starts: its cells ran the code imported at the
    start but recorded the edited files' digest, so a rerun skipped them and the new code never
    ran. The files are digested as the package is imported."""
    over = ["method.aggregator={rule: clipavg}"]
    _forget()
    loaded = code_digest.of_config(load_config(None, over))
    _forget()
    cfg = load_config(None, over)  # imports the rule (the sweep's start)
    rules = site / PKG / "rules.py"
    rules.write_text(RULE.replace("SCALE = 1.0", "SCALE = 0.5"))
    try:
        assert code_digest.of_config(cfg) == loaded  # the first cell runs after the edit
        assert sys.modules[f"{PKG}.rules"].SCALE == 1.0  # the code it runs
    finally:
        rules.write_text(RULE)
        _forget()


def test_a_worker_that_loaded_other_code_than_the_sweep_fails_its_cell(site, tracking):
    from fedcore.flows.sweep import _simulate_cell

    cfg = load_config(None, [f"{k}={v}" for k, v in TINY.items()]).resolved()
    with pytest.raises(ConfigError, match=r"^cell \w+: host .+ loaded other code \(digest "
                                          r"\w+\) than the sweep digested at its start "
                                          r"\(0123456789ab\): a plugin file changed"):
        _simulate_cell(cfg, "parent", "plug", tracking, 1, False, False, {}, "0123456789ab")


def test_report_header_names_the_packages_of_plugin_rows():
    import pandas as pd

    from fedcore.tracking.report import code_header

    label = "commit abc1234 + fcplug files 1a2b3c4d5e6f"
    runs = pd.DataFrame({"code_digest": [code_digest.current(), "0123456789ab"],
                         "code": ["commit abc1234", label]})
    assert f"(cells with components of other packages: {label});" in code_header(runs, False)
    assert "other packages" not in code_header(runs.iloc[:1], False)
