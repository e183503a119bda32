"""The synthetic CIFAR-10-shaped dataset (fedcore.core.data.synthetic) and the CRAFT CIFAR-10 recipe
run on it at tiny scale, on the CPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError, DatasetConfig, config_dir
from fedcore.core.data.datasets import check_files_present, load_dataset
from fedcore.core.data.federated import build_federated_data
from fedcore.core.data.synthetic import synthetic_arrays, synthetic_sizes
from fedcore.core.engines import sequential
from fedcore.core.round.simulation import Simulation

NAME = "synthetic_cifar10"
RECIPE = config_dir() / "experiments" / "craft.yaml"
# the recipe at tiny scale: 400 train images, 10 clients, 4 per round, 2 rounds
TINY_RECIPE = [f"dataset.name={NAME}", "dataset.synthetic_samples=400", "dataset.num_clients=10",
               "dataset.min_samples=10", "clients_per_round=4", "rounds=2", "eval_every=1",
               "device=cpu"]


def test_full_size_is_cifar10s_and_small_sizes_keep_the_shape():
    assert synthetic_sizes(NAME, None) == (50_000, 10_000)
    assert synthetic_sizes(NAME, 400) == (400, 80)
    d = load_dataset(NAME, seed=0, synthetic_samples=500)
    assert d.name == NAME and d.num_classes == 10 and d.in_shape == (3, 32, 32)
    assert d.x_train.shape == (500, 3, 32, 32) and d.x_test.shape == (100, 3, 32, 32)
    assert d.x_train.dtype == torch.float32 and d.y_train.dtype == torch.int64
    assert torch.equal(torch.bincount(d.y_train), torch.full((10,), 50))  # balanced classes
    mean, std = d.x_train.mean(dim=(0, 2, 3)), d.x_train.std(dim=(0, 2, 3))
    assert torch.allclose(mean, torch.zeros(3), atol=1e-5)
    assert torch.allclose(std, torch.ones(3), atol=1e-5)


def test_same_seed_same_bits_other_seed_other_data():
    a, b, c = (synthetic_arrays(NAME, seed, train=300) for seed in (4, 4, 5))
    for x, y in zip(a[:4], b[:4], strict=True):
        assert torch.equal(x, y)
    assert not torch.equal(a[0], c[0]) and not torch.equal(a[1], c[1])


def test_class_structure_is_learnable_in_a_few_steps():
    x, y, x_test, y_test, classes = synthetic_arrays(NAME, 0, train=2000)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, classes))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    before = float((model(x_test).argmax(1) == y_test).float().mean())
    for step in range(30):
        idx = torch.arange(step * 64, (step + 1) * 64) % len(y)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    after = float((model(x_test).argmax(1) == y_test).float().mean())
    assert before < 0.25 and after > 0.5, (before, after)  # chance is 0.1


def test_named_by_config_needs_no_files_and_checks_its_size_key(tmp_path):
    check_files_present(NAME, tmp_path)  # nothing on disk, nothing needed
    cfg = DatasetConfig(name=NAME, synthetic_samples=200, num_clients=4, min_samples=5)
    data = build_federated_data(cfg, seed=0)
    assert data.in_shape == (3, 32, 32) and data.num_classes == 10
    assert sum(c.num_train + len(c.y_test) for c in data.clients) == 200
    with pytest.raises(ConfigError, match=r"^dataset\.synthetic_samples: only for a synthetic"):
        load_config(None, ["dataset.name=cifar10", "dataset.synthetic_samples=100"])
    # unset, the key is not part of any config (other configs' hashes stay as they were)
    assert "synthetic_samples" not in load_config(None, []).resolved()["dataset"]


@pytest.mark.slow
def test_craft_recipe_runs_at_tiny_scale_with_either_engine():
    for engine in ("auto", "vectorised"):
        sim = Simulation(load_config(RECIPE, [*TINY_RECIPE, f"engine={engine}"]))
        assert sim.engine_name == ("sequential" if engine == "auto" else engine)  # auto on CPU
        assert type(sim.model).__name__ == "ResNet" and sim.aggregator.name == "craft"
        out = sim.run()
        assert len(out.history) == 2 and 0.0 <= out.summary["final/accuracy"] <= 1.0
        assert sim.engine_name == ("sequential" if engine == "auto" else engine)  # no fallback


@pytest.mark.slow
def test_the_engines_agree_on_the_recipes_resnet20_in_float64():
    """ResNet-20 with GroupNorm, the recipe's batch of 20 and ragged clients: the vectorised
    engine's client updates are the sequential engine's to float64 rounding (in float32 the
    19 layers round differently per kernel, beyond the bound of tests/test_vectorised.py)."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        sim = Simulation(load_config(RECIPE, [*TINY_RECIPE, "engine=vectorised"]))
        for c in sim.data.clients:
            c.x_train = c.x_train.double()
        sampled = list(map(int, sim.sample_clients(1)))
        want = sequential.train_round(sim.round_context(1), sampled)
        got = sim.engine.train_round(sim.round_context(1), sampled)
    finally:
        torch.set_default_dtype(default)
    assert len({sim.data.clients[k].num_train for k in sampled}) > 1  # ragged: masks used
    for k in sampled:
        assert got[k].delta.dtype == torch.float64
        assert torch.allclose(got[k].delta, want[k].delta, rtol=0, atol=1e-12), k
