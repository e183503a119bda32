"""Evaluation in small passes on the CPU: the same per-sample numbers, a fraction of the memory.

A single 2,048-sample pass of the CNN over the MNIST-sized test set held about 770 MB of
activations at once, most of a run's peak memory (docs/benchmarks/client-memory.md).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from fedcore.core.metrics import (
    EVAL_BATCH_CPU,
    embeddings,
    eval_batch_size,
    eval_with_embeddings,
    per_sample_eval,
)
from fedcore.core.models.cnn import CNN


def _model_and_data() -> tuple[CNN, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = CNN(in_shape=(1, 28, 28), num_classes=10)
    x = torch.randn(1000, 1, 28, 28)
    y = torch.randint(0, 10, (1000,))
    return model, x, y


def test_small_cpu_passes_give_the_one_pass_numbers_bit_for_bit():
    model, x, y = _model_and_data()
    assert eval_batch_size(x) == EVAL_BATCH_CPU < len(x)
    one = eval_with_embeddings(model, x, y, batch_size=len(x))
    small = eval_with_embeddings(model, x, y)
    assert all(torch.equal(a, b) for a, b in zip(one, small, strict=True))
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(per_sample_eval(model, x, y, len(x)),
                                                     per_sample_eval(model, x, y), strict=True))
        assert torch.equal(embeddings(model, x, len(x)), embeddings(model, x))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss in KB on Linux")
def test_evaluating_2000_mnist_sized_images_on_the_cpu_stays_small():
    code = textwrap.dedent("""
        import resource, torch
        from fedcore.core.metrics import eval_with_embeddings
        from fedcore.core.models.cnn import CNN
        torch.set_num_threads(1)
        model = CNN(in_shape=(1, 28, 28), num_classes=10)
        x, y = torch.randn(2000, 1, 28, 28), torch.randint(0, 10, (2000,))
        model(x[:8]); before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        eval_with_embeddings(model, x, y)
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    grown_mb = float(out.stdout.strip().splitlines()[-1])
    assert grown_mb < 300, f"evaluation raised the peak by {grown_mb:.0f} MB"
