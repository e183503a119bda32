"""Any nn.Module (by import path or from Python) and own data, recorded truthfully."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError, config_dir, read_yaml
from fedcore.core.data.own import content_digest, federate
from fedcore.core.round.simulation import Simulation

TINY = ["rounds=2", "dataset.num_clients=4", "clients_per_round=2", "local.epochs=1"]


@pytest.fixture
def user_package(tmp_path, monkeypatch):
    """A package outside the repository, on sys.path: a plain nn.Sequential factory."""
    pkg = tmp_path / "userpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(textwrap.dedent("""
        from torch import nn

        def small_net(in_shape, num_classes, hidden=16) -> nn.Module:
            n = 1
            for s in in_shape:
                n *= s
            return nn.Sequential(nn.Flatten(), nn.Linear(n, hidden), nn.ReLU(),
                                 nn.Linear(hidden, num_classes))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    for name in [m for m in sys.modules if m == "userpkg" or m.startswith("userpkg.")]:
        del sys.modules[name]


def _blobs(n: int = 240, classes: int = 3, dim: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.normal(size=(n, dim)).astype(np.float32) + 2.0 * np.eye(classes, dim)[y]
    return x, y


def test_plain_module_by_import_path_on_own_numpy_data_trains_evaluates_and_is_tracked(
    user_package, tracking
):
    from mlflow.tracking import MlflowClient

    from fedcore.tracking import load_model
    from fedcore.tracking.runner import run_tracked

    x, y = _blobs()
    data = federate(x, y, name="blobs", source="tests: gaussian blobs", num_clients=4,
                    alpha=0.3, seed=5)
    over = [*TINY, "model.name=userpkg.nets:small_net", "model.kwargs={hidden: 12}"]
    cfg = load_config(None, over)
    assert cfg.model.code is not None and cfg.model.code.startswith("file sha256:")
    run_id, result = run_tracked(cfg, data=data)
    assert len(result.history) == 2 and "test/accuracy" in result.history[-1]
    assert not any(k.startswith("repr/") for k in result.history[-1])
    assert result.skipped_metrics == {"repr/*": "the model has no embedding(x)/head(z)"}
    run = MlflowClient(tracking.tracking_uri).get_run(run_id)
    assert run.info.status == "FINISHED"
    params, tags = run.data.params, run.data.tags
    assert params["model.name"] == "userpkg.nets:small_net"
    assert params["model.kwargs.hidden"] == "12"
    assert params["model.code"] == cfg.model.code
    assert tags["fedcore.skipped_metrics"].startswith("repr/*")
    # the data is recorded as itself: name, source, partition settings, digest, config hash
    assert tags["dataset"] == "blobs" and tags["config_hash"] == result.config_hash
    assert params["dataset.digest"] == data.record.digest
    assert params["dataset.alpha"] == "0.3" and params["dataset.partition_seed"] == "5"
    (ds_input,) = run.inputs.dataset_inputs
    assert ds_input.dataset.name == "blobs"
    assert ds_input.dataset.digest == data.record.digest
    assert json.loads(ds_input.dataset.source)["uri"] == "tests: gaussian blobs"
    profile = json.loads(ds_input.dataset.profile)
    assert profile["alpha"] == 0.3 and profile["seed"] == 5 and profile["clients"] == 4
    assert result.config_hash not in _shipped_hashes()
    model = load_model(run_id)  # rebuilt from the import path and kwargs
    assert isinstance(model, nn.Sequential) and model[1].out_features == 12
    with torch.no_grad():
        acc = (model(data.x_test).argmax(1) == data.y_test).float().mean().item()
    assert acc == pytest.approx(result.summary["final/accuracy"], abs=1e-6)
    # editing the model's file changes what the config records, and so its hash
    nets = user_package / "nets.py"
    nets.write_text(nets.read_text() + "\n# edited\n")
    assert load_config(None, over).config_hash() != cfg.config_hash()


@pytest.mark.parametrize("method, lacking", [
    ("moon", "embedding(), head(), add_projection_head(), which client moon needs"),
    ("fedquad", "embedding(), head(), which client fedquad needs"),
    ("fedoui", "oui_units(), which rule fedoui needs"),
])
def test_method_needing_embeddings_with_a_plain_model_is_one_clear_line(
    user_package, method, lacking
):
    cfg = load_config(None, [*TINY, f"method={method}", "model.name=userpkg.nets:small_net"])
    with pytest.raises(ConfigError) as err:
        Simulation(cfg)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"model: userpkg.nets:small_net lacks {lacking}")


def test_bad_model_names_are_one_line_config_errors():
    with pytest.raises(ConfigError, match=r"^model.name: unknown 'nope'; allowed: mlp"):
        load_config(None, ["model.name=nope"])
    missing = r"^model.name: cannot import module 'no_such_pkg_x.nets' of .* \(ModuleNotFoundError"
    with pytest.raises(ConfigError, match=missing):
        load_config(None, ["model.name=no_such_pkg_x.nets:Net"])
    with pytest.raises(ConfigError, match=r"^model.kwargs: only for a model given by import"):
        load_config(None, ["model.kwargs={a: 1}"])


def test_model_instance_from_python_is_recorded_by_class_and_initial_weights():
    x, y = _blobs()
    data = federate(x, y, name="blobs", num_clients=4, alpha=0.5)
    cfg = load_config(None, TINY)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 3))
    sim = Simulation(cfg, data=data, model=net)
    assert sim.cfg.model.name == "torch.nn.modules.container:Sequential"
    assert sim.cfg.model.weights is not None and sim.model is not net
    other = nn.Sequential(nn.Linear(8, 3))
    assert Simulation(cfg, data=data, model=other).cfg.config_hash() != sim.cfg.config_hash()
    result = sim.run()
    assert np.isfinite(result.summary["final/accuracy"])


def linear_net(in_shape, num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(in_shape)), num_classes))


def test_factory_from_python_is_called_under_the_seed_and_recorded_by_its_path():
    x, y = _blobs(n=60)
    data = federate(x, y, num_clients=3, partition="iid")
    cfg = load_config(None, ["rounds=1", "clients_per_round=2"])
    first, second = (Simulation(cfg, data=data, model=linear_net) for _ in range(2))
    assert first.cfg.model.name == f"{__name__}:linear_net"
    assert first.cfg.model.weights is None
    assert first.cfg.model.code is not None and first.cfg.model.code.startswith("file sha256:")
    assert torch.equal(first.params, second.params)  # initial weights from the seed
    reseeded = Simulation(load_config(None, ["rounds=1", "clients_per_round=2", "seed=1"]),
                          data=data, model=linear_net)
    assert not torch.equal(first.params, reseeded.params)


def sized_net(in_shape, num_classes, hidden=8) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(in_shape)), hidden), nn.ReLU(),
                         nn.Linear(hidden, num_classes))


def _make(hidden):
    def net(in_shape, num_classes):
        return sized_net(in_shape, num_classes, hidden)
    return net


class Maker:
    def __init__(self, hidden: int) -> None:
        self.hidden = hidden

    def build(self, in_shape, num_classes):
        return sized_net(in_shape, num_classes, self.hidden)

    def __call__(self, in_shape, num_classes):
        return sized_net(in_shape, num_classes, self.hidden)


def test_any_callable_factory_runs_reproducibly_and_is_recorded_truthfully():
    import functools

    x, y = _blobs(n=60)
    data = federate(x, y, num_clients=3, partition="iid")
    cfg = load_config(None, ["rounds=1", "clients_per_round=2"])
    here = __name__
    factories = {  # factory -> (model.name, model.kwargs, rebuilt from the config)
        "lambda": (lambda in_shape, num_classes: sized_net(in_shape, num_classes),
                   f"{here}:test_any_callable_factory_runs_reproducibly_and_is_recorded_"
                   "truthfully.<locals>.<lambda>", {}),
        "closure": (_make(8), f"{here}:_make.<locals>.net", {}),
        "partial": (functools.partial(sized_net, hidden=8), f"{here}:sized_net", {"hidden": 8}),
        "partial args": (functools.partial(sized_net, (8,)), f"{here}:sized_net<partial>", {}),
        "bound method": (Maker(8).build, f"{here}:Maker.build<bound>", {}),
        "callable object": (Maker(8), f"{here}:Maker<instance>", {}),
    }
    runs = {}
    for kind, (factory, name, kwargs) in factories.items():
        sims = [Simulation(cfg, data=data, model=factory) for _ in range(2)]
        model = sims[0].cfg.model
        assert (model.name, model.kwargs) == (name, kwargs), kind
        assert model.code is not None and model.code.startswith("file sha256:"), kind
        assert (model.weights is None) == (kind == "partial"), kind  # else: what it built
        assert sims[0].cfg.config_hash() == sims[1].cfg.config_hash(), kind
        results = [s.run() for s in sims]
        accuracies = [[h.get("test/accuracy") for h in r.history] for r in results]
        assert accuracies[0] == accuracies[1], kind  # the same numbers
        runs[kind] = sims[0].cfg
    # the same initial weights (hidden=8 under seed 0): one weights digest for all opaque kinds
    assert len({c.model.weights for k, c in runs.items() if k != "partial"}) == 1
    wider = Simulation(cfg, data=data, model=_make(16)).cfg
    assert wider.model.name == runs["closure"].model.name
    assert wider.config_hash() != runs["closure"].config_hash()  # another architecture
    # the partial's record rebuilds it; a lambda's is refused without the lambda, in one line
    rebuilt = Simulation(load_config(None, ["rounds=1", "clients_per_round=2",
                                            f"model.name={here}:sized_net",
                                            "model.kwargs={hidden: 8}"]), data=data)
    assert torch.equal(rebuilt.params, Simulation(cfg, data=data,
                                                  model=factories["partial"][0]).params)
    resolved = runs["lambda"].resolved()
    refused = r"^model.name: '.*<lambda>' is a factory that was passed from Python .* " \
        r"Simulation\(cfg, model=\.\.\.\)$"
    with pytest.raises(ConfigError, match=refused):
        Simulation(load_config(None, [f"model.name={resolved['model']['name']}",
                                      "rounds=1", "clients_per_round=2"]), data=data)
    with pytest.raises(ConfigError, match=r"^model: expected an nn.Module, a class or a factory "
                                          r"\(got int\)$"):
        Simulation(cfg, data=data, model=3)  # type: ignore[arg-type]


def _shipped_hashes() -> set[str]:
    from fedcore.specs.sweep import load_sweep

    hashes = {load_config(None, []).config_hash()}
    for path in sorted((config_dir() / "experiments").glob("*.yaml")):
        hashes.add(load_config(path, []).config_hash())
    hashes |= {c.config.config_hash() for c in load_sweep(config_dir() / "sweeps" / "main.yaml")
               .cells}
    return hashes


def test_own_numpy_data_is_in_the_config_and_its_hash_matches_no_shipped_config():
    x, y = _blobs()
    data = federate(x, y, name="blobs", num_clients=6, alpha=0.3, seed=5)
    assert data.record is not None and data.record.digest == content_digest(data)
    # the same arrays split another way: another digest
    other = federate(x, y, name="blobs", num_clients=6, alpha=0.3, seed=6)
    assert other.record is not None and other.record.digest != data.record.digest
    base = load_config(None, [])  # the default config, whose hash is a main-sweep cell's kind
    cfg = Simulation(base, data=data, model=nn.Sequential(nn.Linear(8, 3))).cfg
    assert cfg.dataset.name == "blobs" and cfg.dataset.alpha == 0.3
    assert cfg.dataset.num_clients == 6 and cfg.dataset.partition_seed == 5
    assert cfg.dataset.digest == data.record.digest
    assert cfg.config_hash() not in _shipped_hashes()
    assert base.config_hash() == load_config(None, []).config_hash()  # the caller's is intact


def test_hand_made_federated_data_is_not_recorded_as_the_configs_dataset():
    from fedcore.core.data.federated import FederatedData

    x, y = _blobs(n=60)
    built = federate(x, y, num_clients=3, partition="iid")
    bare = FederatedData(built.clients, built.x_test, built.y_test, 3, (8,))
    cfg = load_config(None, ["rounds=1", "clients_per_round=2"])
    sim = Simulation(cfg, data=bare, model=nn.Sequential(nn.Linear(8, 3)))
    assert sim.cfg.dataset.name == "custom" and sim.cfg.dataset.partition == "given"
    assert sim.cfg.dataset.digest == content_digest(bare)
    assert sim.cfg.config_hash() != cfg.config_hash()


def test_torch_dataset_and_client_index_lists():
    from torch.utils.data import TensorDataset

    x, y = _blobs(n=90)
    ds = TensorDataset(torch.as_tensor(x), torch.as_tensor(y))
    from_ds = federate(ds, num_clients=3, partition="iid", seed=1)
    from_np = federate(x, y, num_clients=3, partition="iid", seed=1)
    assert from_ds.record.digest == from_np.record.digest
    assert from_ds.record.source.startswith("torch Dataset torch.utils.data.dataset.TensorDataset")
    lists = [np.arange(0, 30), np.arange(30, 60), np.arange(60, 80)]
    given = federate(x, y, x_test=x[80:], y_test=y[80:], clients=lists, test_fraction=0.0)
    assert given.record.partition == "given" and given.num_clients == 3
    assert [c.num_train for c in given.clients] == [30, 30, 20]
    with pytest.raises(ConfigError, match="^dataset: with client index lists"):
        federate(x, y, clients=lists)
    with pytest.raises(ConfigError, match="^dataset.alpha"):
        federate(x, y, alpha=-1)
    with pytest.raises(ConfigError, match="^dataset.partition: 'given' needs the client index"):
        federate(x, y, partition="given")


def test_own_data_name_in_a_config_without_the_data_is_refused():
    with pytest.raises(ConfigError, match=r"^dataset.name: unknown 'blobs'; allowed: digits"):
        load_config(None, ["dataset.name=blobs"])
    assert Path(config_dir()).is_dir() and read_yaml  # the shipped configs are read above


def test_plain_module_trains_on_the_vectorised_engine_as_on_the_sequential_one(user_package):
    from fedcore.core.engines import sequential
    from fedcore.core.engines.vectorised import VectorisedEngine

    cfg = load_config(None, [*TINY, "model.name=userpkg.nets:small_net", "engine=vectorised"])
    sim = Simulation(cfg)
    assert sim.engine_name == "vectorised"
    sampled = list(map(int, sim.sample_clients(1)))
    rc = sim.round_context(1)
    seq = sequential.train_round(rc, sampled)
    vec = VectorisedEngine(sim.model, sim.layout, sim.data.in_shape, sim.device).train_round(
        rc, sampled)
    for c in sampled:  # float32 rounding of batched kernels, grown over the local steps
        err = (vec[c].delta - seq[c].delta).norm() / seq[c].delta.norm()
        assert float(err) <= 512 * seq[c].num_steps * 2.0**-24, c
