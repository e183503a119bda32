"""FedOUI's regime: AUC by its paper's definition, and clients that train on their whole
partition with fairness taken on the global test set by label mix (dataset.test_fraction 0)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedcore.config import build_config, config_dir, read_yaml
from fedcore.metrics import label_mix, label_mix_accuracy
from fedcore.simulation import Simulation, auc_trapz, run, summarize


def test_auc_trapz_is_fedouis_definition():
    acc = [0.1, 0.5, 0.6, 0.9]
    assert auc_trapz(acc) == pytest.approx(np.trapezoid(acc) / 3)
    # not the mean of the evaluations: the end points count half
    assert auc_trapz(acc) != pytest.approx(np.mean(acc))
    assert auc_trapz([0.4]) == 0.4
    history = [{"round": r, "test/accuracy": a, "test/loss": 1.0, "clients/accuracy_worst10": 0,
                "clients/accuracy_std": 0, "clients/accuracy_mean": 0}
               for r, a in enumerate(acc, 1)]
    assert summarize(history, None)["auc/accuracy_trapz"] == pytest.approx(auc_trapz(acc))


def test_label_mix_accuracy_by_hand():
    y_test = torch.tensor([0, 0, 1, 1, 2])
    correct = torch.tensor([1, 0, 1, 1, 0])  # per class: 0.5, 1.0, 0.0
    loss = torch.tensor([1.0, 3.0, 0.5, 0.5, 4.0])  # per class: 2.0, 0.5, 4.0
    mix = label_mix([torch.tensor([0, 0, 0, 1]), torch.tensor([2, 2]), torch.tensor([1])], 3)
    assert mix.tolist() == [[0.75, 0.25, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    acc, cl = label_mix_accuracy(correct, loss, y_test, mix)
    assert acc.tolist() == pytest.approx([0.75 * 0.5 + 0.25 * 1.0, 0.0, 1.0])
    assert cl.tolist() == pytest.approx([0.75 * 2.0 + 0.25 * 0.5, 4.0, 0.5])


def _cfg(**over):
    return build_config(read_yaml(config_dir() / "experiment.yaml"),
                        {"model.name": "mlp", "rounds": 2, "method": "fedoui", "local.steps": 2,
                         **over})


def test_test_fraction_zero_trains_on_the_whole_partition_and_reports_fairness():
    whole = Simulation(_cfg(**{"dataset.test_fraction": 0}))
    split = Simulation(_cfg())
    for c, (train, test) in zip(whole.data.clients, whole.data.partition, strict=True):
        assert len(test) == 0 and len(c.y_test) == 0 and c.num_train == len(train)
    sizes = [c.num_train for c in whole.data.clients]
    assert sizes == [c.num_train + len(c.y_test) for c in split.data.clients]
    result = whole.run()
    last = result.history[-1]
    for key in ("clients/accuracy_worst10", "clients/accuracy_std", "clients/jain_index"):
        assert math.isfinite(last[key])
    table = result.client_tables[-1]
    mix = label_mix([c.y_train for c in whole.data.clients], whole.data.num_classes)
    # label-mix accuracies are proportions, and each client's label mix sums to 1
    assert table.accuracy.min() >= 0 and table.accuracy.max() <= 1
    assert mix.sum(dim=1).tolist() == pytest.approx([1.0] * len(sizes))


def test_the_fedoui_recipe_trains_on_everything():
    recipe = read_yaml(config_dir() / "experiments" / "fedoui.yaml")
    assert recipe["dataset"]["test_fraction"] == 0
    assert run(_cfg(**{"dataset.test_fraction": 0})).summary["auc/accuracy_trapz"] > 0
