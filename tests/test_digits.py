"""The embedded digits (fedcore/core/data/digits.npz) and its split, against scikit-learn's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fedcore.core.compose.configure import load_config
from fedcore.core.data.datasets import load_dataset
from fedcore.core.data.digits import digits_arrays, stratified_split
from fedcore.core.data.federated import partition_digest
from fedcore.core.round.simulation import Simulation

ROOT = Path(__file__).resolve().parents[1]


def test_shipped_arrays_are_sklearns_digits():
    datasets = pytest.importorskip("sklearn.datasets")
    bunch = datasets.load_digits()
    images, labels = digits_arrays()
    assert images.dtype == np.uint8 and images.shape == (1797, 8, 8)
    np.testing.assert_array_equal(images.astype(np.float64), bunch.images)
    np.testing.assert_array_equal(labels.astype(np.int64), bunch.target)


@pytest.mark.parametrize("fraction", [0.2, 0.3, 0.5, 0.01, 0.9])
@pytest.mark.parametrize("seed", [0, 1, 3, 17])
def test_split_draws_sklearns_indices(seed, fraction):
    model_selection = pytest.importorskip("sklearn.model_selection")
    _, labels = digits_arrays()
    y = labels.astype(np.int64)
    state = int(np.random.SeedSequence([seed, 1234]).generate_state(1)[0])
    want_train, want_test = model_selection.train_test_split(
        np.arange(len(y)), test_size=fraction, stratify=y, random_state=state
    )
    train, test = stratified_split(y, fraction, state)
    np.testing.assert_array_equal(train, want_train)
    np.testing.assert_array_equal(test, want_test)


def test_loaded_digits_equal_the_sklearn_path():
    """load_dataset('digits') gives the tensors the scikit-learn code path gave, bit for bit."""
    datasets = pytest.importorskip("sklearn.datasets")
    model_selection = pytest.importorskip("sklearn.model_selection")
    bunch = datasets.load_digits()
    x = (bunch.images.astype(np.float32) / 16.0)[:, None]
    y = bunch.target.astype(np.int64)
    for seed, fraction in ((0, 0.2), (5, 0.35)):
        state = int(np.random.SeedSequence([seed, 1234]).generate_state(1)[0])
        x_tr, x_te, y_tr, y_te = model_selection.train_test_split(
            x, y, test_size=fraction, stratify=y, random_state=state
        )
        mean, std = float(x_tr.mean()), float(x_tr.std())
        d = load_dataset("digits", seed=seed, global_test_fraction=fraction)
        assert torch.equal(d.x_train, (torch.from_numpy(x_tr) - mean) / std)
        assert torch.equal(d.x_test, (torch.from_numpy(x_te) - mean) / std)
        assert torch.equal(d.y_train, torch.from_numpy(y_tr))
        assert torch.equal(d.y_test, torch.from_numpy(y_te))


def test_partition_and_first_round_unchanged():
    """The default digits partition and the MLP's first round, as with scikit-learn's split."""
    torch.set_num_threads(1)
    cfg = load_config(None, ["rounds=1", "model.name=mlp", "device=cpu"])
    sim = Simulation(cfg)
    assert partition_digest(sim.data) == "50662296d40d44b8"
    first = sim.run().history[0]
    assert len(sim.data.y_test) == 360
    assert round(first["test/accuracy"] * 360) == 57
    assert first["train/loss"] == pytest.approx(1.2015624, rel=1e-5)
    assert first["test/loss"] == pytest.approx(2.5221689, rel=1e-5)


def test_split_rejects_too_small_parts():
    y = np.repeat(np.arange(10), 20)
    with pytest.raises(ValueError, match="global_test_fraction"):
        stratified_split(y, 0.01, 0)  # 2 test samples for 10 classes
    with pytest.raises(ValueError, match="global_test_fraction"):
        stratified_split(y, 1.0, 0)


def test_loading_digits_imports_no_sklearn():
    code = (
        "import sys; from fedcore.core.data.datasets import load_dataset; load_dataset('digits'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
