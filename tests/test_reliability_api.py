"""Python API inputs (docs/explanation/reliability.md): labels, clients, a Dataset's length and
the model's output shape and parameters are checked in one line naming the argument and the
allowed range, before any compute (they were truncated silently, raised raw torch errors, or
allocated 0.8 GB for one label of 1e8)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedcore.api import ConfigError, Simulation, build_config, federate

SMALL = {"rounds": 1, "clients_per_round": 2, "dataset": {"num_clients": 4},
         "local": {"epochs": 1}}


def _blobs(n: int = 120, classes: int = 3, dim: int = 8):
    rng = np.random.default_rng(0)
    y = rng.integers(0, classes, n)
    return rng.normal(size=(n, dim)).astype(np.float32), y


def _one_line(exc: pytest.ExceptionInfo, start: str) -> None:
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(start), msg


@pytest.mark.parametrize(("labels", "start"), [
    (lambda y: y + 0.5, "y: label 2.5 is not a whole number (labels are not rounded); allowed: "
                        "integers in 0..99999"),
    (lambda y: np.where(np.arange(len(y)) == 3, np.nan, y), "y: label nan is not a whole"),
    (lambda y: np.where(np.arange(len(y)) == 3, -1, y), "y: label -1 is out of range; allowed: "
                                                         "integers in 0..99999 (or give "
                                                         "num_classes)"),
    (lambda y: np.where(np.arange(len(y)) == 3, 10**8, y), "y: label 100000000 is out of range"),
    (lambda y: y.astype(str), "y: labels must be integers, got dtype <U21"),
])
def test_bad_labels_are_one_line_naming_the_argument(labels, start):
    x, y = _blobs()
    with pytest.raises(ConfigError) as e:
        federate(x, labels(y), num_clients=4)
    _one_line(e, start)


def test_labels_beyond_num_classes_and_a_bad_num_classes():
    x, y = _blobs()
    with pytest.raises(ConfigError) as e:
        federate(x, y, num_clients=4, num_classes=2)
    _one_line(e, "y: label 2 is out of range; allowed: integers in 0..1")
    for bad in (0, 1.5, True, 10**9):
        with pytest.raises(ConfigError) as e:
            federate(x, y, num_clients=4, num_classes=bad)
        _one_line(e, f"num_classes: {bad!r}; allowed: an integer in 2..100000")
    xt, yt = _blobs(30)
    with pytest.raises(ConfigError) as e:
        federate(x, y, x_test=xt, y_test=yt + 0.25, num_clients=4)
    _one_line(e, "y_test: label 2.25 is not a whole number")
    assert federate(x, y.astype(np.float64), num_clients=4).num_classes == 3  # whole floats


def test_an_empty_client_and_no_samples_are_refused():
    x, y = _blobs()
    xt, yt = _blobs(30)
    with pytest.raises(ConfigError) as e:
        federate(x, y, x_test=xt, y_test=yt, clients=[list(range(60)), [], list(range(60, 120))])
    _one_line(e, "clients: client 1 has no samples; allowed: at least 1 index per client")
    with pytest.raises(ConfigError) as e:
        federate(x[:0], y[:0], num_clients=4)
    _one_line(e, "x: no samples; allowed: at least 1")


class _Huge(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 10**12

    def __getitem__(self, i: int):
        return torch.zeros(4), 0


def test_a_dataset_of_absurd_length_is_refused_before_it_is_read():
    with pytest.raises(ConfigError) as e:
        federate(_Huge(), num_clients=4)
    _one_line(e, "x: a Dataset of 1000000000000 samples; allowed: 1..10000000")


class _Wide(nn.Module):
    def __init__(self, out: int) -> None:
        super().__init__()
        self.fc = nn.Linear(8, out)

    def forward(self, x):
        return self.fc(x)


def test_a_model_with_the_wrong_output_shape_or_no_trainable_parameters_is_refused():
    x, y = _blobs()
    data = federate(x, y, num_clients=4)
    cfg = build_config(SMALL)
    with pytest.raises(ConfigError) as e:
        Simulation(cfg, data=data, model=_Wide(5))
    _one_line(e, "model: tests.test_reliability_api:_Wide maps a batch shaped (2, 8) to "
                 "(2, 5); it must give logits shaped (2, 3) (batch, num_classes=3)")
    frozen = _Wide(3).requires_grad_(False)
    with pytest.raises(ConfigError) as e:
        Simulation(cfg, data=data, model=frozen)
    _one_line(e, "model: tests.test_reliability_api:_Wide has no trainable parameters")
    flat = nn.Sequential(nn.Linear(4, 3))  # expects 4 features, the data has 8
    with pytest.raises(ConfigError) as e:
        Simulation(cfg, data=data, model=flat)
    _one_line(e, "model: torch.nn.modules.container:Sequential fails on a batch shaped (2, 8)")
    assert Simulation(cfg, data=data, model=_Wide(3)).run().summary
