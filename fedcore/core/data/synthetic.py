"""Synthetic image datasets of a real dataset's shape, generated on the simulation device.

``synthetic_cifar10`` has CIFAR-10's shape and size: 50,000 train and 10,000 test images of
3 x 32 x 32, 10 balanced classes. It exists to time runs at the true shapes on machines that
lack the real files (a lent GPU machine cannot download them); its accuracies say nothing about
CIFAR-10. How an image of class ``c`` is built:

* each class has a prototype: a 3 x 8 x 8 standard normal pattern, bilinearly upsampled to
  32 x 32 (a smooth colour blob pattern);
* image = ``a * prototype[c] + smooth noise + 0.5 * white noise``, with a per-image contrast
  ``a`` uniform in [0.1, 0.4], smooth noise drawn like a prototype (so it competes with the
  class signal in the same low frequencies) and white noise per pixel;
* the train split's per-channel mean and standard deviation standardise both splits.

Labels (a seeded permutation of ``0..N-1 mod 10``) and prototypes come from a CPU generator, so
labels, and thus every partition, are the same on every device; the noise is drawn on the
device with a generator seeded from ``seed`` (same seed and device type: same images bit for
bit). Generation runs in chunks of 8,192 images: about ten seconds and 1.5 GB for all 60,000
on one thread of a 2-core CPU; ``benchmarks/gpu_check.sh`` reports the time on a GPU.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from fedcore.core.component.seeding import derive_seed


class SyntheticSpec(NamedTuple):
    train: int  # images in the train split
    test: int  # images in the global test split
    shape: tuple[int, int, int]  # (C, H, W)
    num_classes: int


SYNTHETIC = {"synthetic_cifar10": SyntheticSpec(50_000, 10_000, (3, 32, 32), 10)}
LOW_RES = 8  # prototypes and smooth noise are drawn at 8 x 8 and upsampled
CONTRAST = (0.1, 0.4)  # per-image weight of the class prototype
WHITE = 0.5  # standard deviation of the per-pixel noise
CHUNK = 8_192  # images generated at once (bounds the temporaries)


def synthetic_sizes(name: str, train: int | None) -> tuple[int, int]:
    """(train, test) image counts: the spec's, or ``train`` and a fifth of it (at least 1)."""
    spec = SYNTHETIC[name]
    return (spec.train, spec.test) if train is None else (train, max(1, train // 5))


def _upsampler(size: int, device: torch.device) -> torch.Tensor:
    """The ``size`` x ``LOW_RES`` matrix of 1-d bilinear upsampling (half-pixel centres)."""
    eye = torch.eye(LOW_RES, device=device)[None]  # LOW_RES signals of length LOW_RES
    up = F.interpolate(eye, size=size, mode="linear", align_corners=False)[0]
    return up.T.contiguous()


def _smooth(n: int, shape: tuple[int, ...], gen: torch.Generator,
            device: torch.device) -> torch.Tensor:
    """``n`` standard normal ``LOW_RES`` x ``LOW_RES`` patterns, bilinearly upsampled to
    ``shape`` (as two small matrix products: bilinear upsampling is separable)."""
    c, h, w = shape
    low = torch.randn(n, c, LOW_RES, LOW_RES, generator=gen, device=device)
    return _upsampler(h, device) @ low @ _upsampler(w, device).T


def _images(
    labels: torch.Tensor, prototypes: torch.Tensor, gen: torch.Generator, device: torch.device
) -> torch.Tensor:
    """One split's raw images for ``labels`` (on ``device``), drawn chunk by chunk."""
    n, shape = len(labels), tuple(prototypes.shape[1:])
    out = torch.empty(n, *shape, device=device)
    labels = labels.to(device)
    lo_a, hi_a = CONTRAST
    for lo in range(0, n, CHUNK):
        y = labels[lo : lo + CHUNK]
        m = len(y)
        a = torch.rand(m, 1, 1, 1, generator=gen, device=device) * (hi_a - lo_a) + lo_a
        x = _smooth(m, shape, gen, device)
        x.add_(torch.randn(m, *shape, generator=gen, device=device), alpha=WHITE)
        x.addcmul_(a, prototypes[y])
        out[lo : lo + m] = x
    return out


def synthetic_labels(
    name: str, gen: torch.Generator | int, train: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y_train, y_test) of the synthetic dataset ``name``, drawn from ``gen`` (the CPU
    generator the images' prototypes are drawn from next), or from the run's ``seed`` alone
    (an int: the labels, and so the partition, without generating an image)."""
    spec = SYNTHETIC[name]
    if isinstance(gen, int):
        gen = torch.Generator().manual_seed(derive_seed(gen, name, "labels"))
    labels = [torch.arange(n, dtype=torch.int64) % spec.num_classes
              for n in synthetic_sizes(name, train)]
    y_train, y_test = (y[torch.randperm(len(y), generator=gen)] for y in labels)
    return y_train, y_test


def synthetic_arrays(
    name: str, seed: int, device: torch.device | str = "cpu", train: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(x_train, y_train, x_test, y_test, num_classes) of the synthetic dataset ``name``:
    images standardised float32 on ``device``, labels int64 on the CPU."""
    spec = SYNTHETIC[name]
    device = torch.device(device)
    cpu = torch.Generator().manual_seed(derive_seed(seed, name, "labels"))
    y_train, y_test = synthetic_labels(name, cpu, train)
    prototypes = _smooth(spec.num_classes, spec.shape, cpu, torch.device("cpu")).to(device)
    gen = torch.Generator(device=device).manual_seed(derive_seed(seed, name, "images"))
    x_train = _images(y_train, prototypes, gen, device)
    x_test = _images(y_test, prototypes, gen, device)
    mean = x_train.mean(dim=(0, 2, 3), keepdim=True)
    std = x_train.std(dim=(0, 2, 3), keepdim=True)
    for x in (x_train, x_test):
        x.sub_(mean).div_(std)
    return x_train, y_train, x_test, y_test, spec.num_classes
