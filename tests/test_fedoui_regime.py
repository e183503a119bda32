"""FedOUI's regime: AUC by its paper's definition, and clients that train on their whole
partition with fairness taken on the global test set by label mix (dataset.test_fraction 0)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedcore.core.callbacks.summary import auc_trapz, summarize
from fedcore.core.compose.configure import build_config
from fedcore.core.config import config_dir, read_yaml
from fedcore.core.data.datasets import load_dataset
from fedcore.core.data.federated import build_federated_data, partition_indices
from fedcore.core.metrics import label_mix, label_mix_accuracy, per_sample_eval
from fedcore.core.round.probes import evaluate
from fedcore.core.round.simulation import Simulation, run


def _history(acc: list[float]) -> list[dict[str, float]]:
    return [{"round": r, "test/accuracy": a, "test/loss": 1.0, "clients/accuracy_worst10": 0.0,
             "clients/accuracy_std": 0.0, "clients/accuracy_mean": 0.0}
            for r, a in enumerate(acc, 1)]


def test_auc_trapz_matches_numpy_trapezoid_on_a_known_history():
    acc = [0.1, 0.5, 0.6, 0.9]
    expected = float(np.trapezoid(acc)) / (len(acc) - 1)  # (0.3 + 0.55 + 0.75) / 3
    assert expected == pytest.approx(1.6 / 3)
    summary = summarize(_history(acc), None)
    assert summary["auc/accuracy_trapz"] == pytest.approx(expected, abs=1e-12)
    assert summary["auc/accuracy"] == pytest.approx(np.mean(acc))  # unchanged: the mean
    rng = np.random.default_rng(0)
    for n in (2, 3, 7, 20):
        a = rng.random(n).tolist()
        assert auc_trapz(a) == pytest.approx(float(np.trapezoid(a)) / (n - 1), abs=1e-12)
    assert auc_trapz([0.4]) == 0.4  # R = 1: the one accuracy


def test_auc_trapz_differs_from_the_mean_on_a_nonlinear_curve():
    acc = [0.1, 0.8, 0.85, 0.9, 0.92]  # concave: the end points count half in trapz
    summary = summarize(_history(acc), None)
    assert summary["auc/accuracy_trapz"] == pytest.approx(np.trapezoid(acc) / 4)
    assert summary["auc/accuracy_trapz"] - summary["auc/accuracy"] > 0.05
    line = [0.1, 0.3, 0.5, 0.7, 0.9]  # on a straight line the two agree
    assert auc_trapz(line) == pytest.approx(np.mean(line))


def test_label_mix_accuracy_by_hand():
    y_test = torch.tensor([0, 0, 1, 1, 2])
    correct = torch.tensor([True, False, True, True, False])  # per class: 0.5, 1.0, 0.0
    loss = torch.tensor([1.0, 3.0, 0.5, 0.5, 4.0])  # per class: 2.0, 0.5, 4.0
    mix = label_mix([torch.tensor([0, 0, 0, 1]), torch.tensor([2, 2]), torch.tensor([1])], 3)
    assert mix.tolist() == [[0.75, 0.25, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    acc, cl = label_mix_accuracy(correct, loss, y_test, mix)
    assert acc.tolist() == pytest.approx([0.75 * 0.5 + 0.25 * 1.0, 0.0, 1.0])
    assert cl.tolist() == pytest.approx([0.75 * 2.0 + 0.25 * 0.5, 4.0, 0.5])


def _cfg(**over: object):
    return build_config(read_yaml(config_dir() / "experiment.yaml"),
                        {"model.name": "mlp", "rounds": 2, "method": "fedoui", "local.steps": 2,
                         **over})


def test_test_fraction_zero_trains_every_client_on_its_whole_partition():
    cfg = _cfg(**{"dataset.test_fraction": 0})
    data = build_federated_data(cfg.dataset, cfg.seed)
    arrays = load_dataset(cfg.dataset.name, seed=cfg.seed)
    parts = partition_indices(arrays.y_train.numpy(), cfg.dataset, cfg.seed)
    for c, part, (train, test) in zip(data.clients, parts, data.partition, strict=True):
        assert len(test) == 0 and len(c.y_test) == 0
        assert np.array_equal(np.sort(part), train)
        assert torch.equal(c.y_train, arrays.y_train[torch.as_tensor(train)])
    assert sum(c.num_train for c in data.clients) == sum(len(p) for p in parts)
    split = build_federated_data(_cfg().dataset, cfg.seed)  # test_fraction 0.2: same partition
    assert [c.num_train for c in data.clients] == [
        c.num_train + len(c.y_test) for c in split.clients
    ]


def test_label_mix_of_noisy_clients_is_of_their_clean_labels():
    cfg = _cfg(**{"dataset.test_fraction": 0, "clients.noisy_fraction": 0.5,
                  "clients.noise_rate": 1.0})
    data = build_federated_data(cfg.dataset, cfg.seed, behaviour=cfg.clients)
    clean = build_federated_data(_cfg(**{"dataset.test_fraction": 0}).dataset, cfg.seed)
    assert len(data.noisy_clients) > 0
    flipped = label_mix([c.y_train for c in data.clients], data.num_classes)
    assert not torch.equal(flipped, data.label_mix())
    assert torch.equal(data.label_mix(),
                       label_mix([c.y_train for c in clean.clients], clean.num_classes))


def test_test_fraction_zero_client_accuracy_is_the_label_mix_of_global_class_accuracy():
    sim = Simulation(_cfg(**{"dataset.test_fraction": 0}))
    metrics, table = evaluate(sim, 0, np.arange(5))
    correct, _ = per_sample_eval(sim.model, sim.data.x_test, sim.data.y_test)
    y = sim.data.y_test.cpu().numpy()
    ok = correct.cpu().numpy()
    per_class = np.array([ok[y == c].mean() for c in range(sim.data.num_classes)])
    for c, acc in zip(sim.data.clients, table.accuracy, strict=True):
        p = np.bincount(c.y_train.cpu().numpy(), minlength=sim.data.num_classes) / c.num_train
        assert acc == pytest.approx(float(p @ per_class), abs=1e-9)
    assert metrics["clients/accuracy_mean"] == pytest.approx(table.accuracy.mean())
    assert metrics["clients/accuracy_worst10"] == pytest.approx(np.sort(table.accuracy)[:2].mean())


def test_a_run_at_test_fraction_zero_has_finite_fairness_metrics():
    result = run(_cfg(**{"dataset.test_fraction": 0}))
    for h in result.history:
        for key in ("clients/accuracy_worst10", "clients/accuracy_std", "clients/accuracy_mean",
                    "clients/jain_index"):
            assert math.isfinite(h[key]), key
        assert 0 < h["clients/jain_index"] <= 1
    table = result.client_tables[-1]
    assert table.accuracy.min() >= 0 and table.accuracy.max() <= 1
    assert 0 < result.summary["auc/accuracy_trapz"] <= 1
    assert math.isfinite(result.summary["final/accuracy_worst10"])


def test_the_fedoui_recipe_trains_on_everything():
    recipe = read_yaml(config_dir() / "experiments" / "fedoui.yaml")
    assert recipe["dataset"]["test_fraction"] == 0
