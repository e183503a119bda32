"""The embedded ``digits`` dataset and its seeded, stratified train/test split (no scikit-learn).

``digits.npz`` (next to this module) holds the 1,797 8x8 images of the UCI "Optical Recognition
of Handwritten Digits" test set (E. Alpaydin and C. Kaynak, 1998, CC BY 4.0,
https://doi.org/10.24432/C50P49) as scikit-learn's ``load_digits`` returns them: integer pixels
0..16 (uint8 here) and labels 0..9, in the same order. ``stratified_split`` draws exactly
the indices ``sklearn.model_selection.train_test_split(..., stratify=y, random_state=state)``
draws, so loading it costs milliseconds instead of importing scikit-learn (about 0.8 s), and
every split, partition and metric is the one scikit-learn gave. ``tests/test_digits.py``
checks both against scikit-learn.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

DIGITS_FILE = Path(__file__).with_name("digits.npz")
DIGITS_SOURCE = "fedcore/core/data/digits.npz (UCI optdigits test set, as sklearn load_digits)"


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The images (uint8, N x 8 x 8, values 0..16) and labels (uint8, N) of ``digits.npz``."""
    with np.load(DIGITS_FILE) as f:
        return f["images"], f["labels"]


def stratified_split(
    y: np.ndarray, test_fraction: float, random_state: int
) -> tuple[np.ndarray, np.ndarray]:
    """Train and test indices of a stratified shuffle split of labels ``y``.

    The same draws, in the same order, from the same ``np.random.RandomState(random_state)`` as
    scikit-learn's ``StratifiedShuffleSplit`` (behind ``train_test_split(stratify=y)``): the
    test size is ``ceil(test_fraction * n)``, each class gets its approximate-mode share of the
    train and test sizes (ties in the leftover shares broken at random), each class's samples
    are permuted and cut, and both index lists are permuted once more.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"global_test_fraction must be in (0, 1), got {test_fraction}")
    n = len(y)
    n_test = math.ceil(test_fraction * n)
    n_train = n - n_test
    _, y_indices, class_counts = np.unique(y, return_inverse=True, return_counts=True)
    n_classes = len(class_counts)
    if min(n_train, n_test) < n_classes:
        raise ValueError(
            f"global_test_fraction={test_fraction} leaves {n_train} train and {n_test} test "
            f"samples; each part needs at least one per class ({n_classes})"
        )
    class_indices = np.split(np.argsort(y_indices, kind="stable"), np.cumsum(class_counts)[:-1])
    rng = np.random.RandomState(random_state)
    n_i = _approximate_mode(class_counts, n_train, rng)
    t_i = _approximate_mode(class_counts - n_i, n_test, rng)
    train: list[np.ndarray] = []
    test: list[np.ndarray] = []
    for i in range(n_classes):
        shuffled = class_indices[i].take(rng.permutation(class_counts[i]), mode="clip")
        train.append(shuffled[: n_i[i]])
        test.append(shuffled[n_i[i] : n_i[i] + t_i[i]])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))


def _approximate_mode(
    class_counts: np.ndarray, n_draws: int, rng: np.random.RandomState
) -> np.ndarray:
    """How many of ``n_draws`` each class gets: its floored proportional share, plus one for the
    classes with the largest leftover fractions (ties drawn at random) until ``n_draws``."""
    continuous = class_counts / class_counts.sum() * n_draws
    floored: np.ndarray = np.floor(continuous)
    need_to_add = int(n_draws - floored.sum())
    if need_to_add > 0:
        remainder = continuous - floored
        for value in np.sort(np.unique(remainder))[::-1]:
            (inds,) = np.where(remainder == value)
            add_now = min(len(inds), need_to_add)
            floored[rng.choice(inds, size=add_now, replace=False)] += 1
            need_to_add -= add_now
            if need_to_add == 0:
                break
    return floored.astype(int)
