"""The MLP's written-out cross-entropy step gives autograd's loss and gradients bit for bit,
runs only where it applies, and leaves a whole run's history as autograd's left it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fedcore.core.clients import template
from fedcore.core.clients.base import ClientAlgorithm
from fedcore.core.clients.ditto import DittoClient
from fedcore.core.compose.configure import load_config
from fedcore.core.models import build_model
from fedcore.core.models.layout import load_flat_params, trainable_params
from fedcore.core.models.mlp import MLP
from fedcore.core.models.mlp_step import mlp_cross_entropy_step, mlp_step_for
from fedcore.core.round.simulation import Simulation
from fedcore.core.stages.feedback.mismatch import flat_grad

from .conftest import TINY


def autograd_step(model: MLP, x: torch.Tensor, y: torch.Tensor):
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("hidden", [200, 17])
def test_loss_and_gradients_are_autograds_bit_for_bit(dtype: torch.dtype, hidden: int) -> None:
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = MLP((1, 8, 8), 10, hidden=hidden).to(dtype)
    params = list(model.parameters())
    for trial in range(30):
        bs = int(torch.randint(1, 70, (1,), generator=gen))
        x = torch.randn(bs, 1, 8, 8, generator=gen, dtype=dtype) * (1 + trial % 4)
        y = torch.randint(0, 10, (bs,), generator=gen)
        want_loss, want = autograd_step(model, x, y)
        loss, grads = mlp_cross_entropy_step(params, x, y)
        assert torch.equal(loss, want_loss), trial
        for name, g, w in zip(("w1", "b1", "w2", "b2", "w3", "b3"), grads, want, strict=True):
            assert g.shape == w.shape and torch.equal(g, w), (trial, name)
        with torch.no_grad():  # move on, so that ReLUs switch off and on between trials
            for p, g in zip(params, grads, strict=True):
                p.sub_(0.5 * g)


class _OwnLoss(ClientAlgorithm):
    name = "own_loss_for_test"

    def loss(self, b):  # type: ignore[no-untyped-def]
        return super().loss(b) * 2


def test_it_runs_only_for_the_plain_mlp_and_loss_on_the_cpu() -> None:
    def step(model: torch.nn.Module, loss: object) -> object:
        run = template.Pass(torch.zeros(0), {}, None, [], loss)  # type: ignore[arg-type]
        return template.written_out_step(run, model, trainable_params(model))

    plain = ClientAlgorithm()
    mlp = build_model("mlp", (1, 8, 8), 10)
    assert step(mlp, plain.loss) is not None
    assert step(mlp, _OwnLoss().loss) is None  # an objective's own loss, not marked
    assert step(mlp, DittoClient.personal_loss) is not None  # marked: Ditto's personal model
    assert step(build_model("cnn", (1, 8, 8), 10), plain.loss) is None
    moon = build_model("mlp", (1, 8, 8), 10)
    moon.add_projection_head(16)
    assert step(moon, plain.loss) is None  # the head reads the projection
    frozen = build_model("mlp", (1, 8, 8), 10)
    frozen.fc1.weight.requires_grad_(False)
    assert step(frozen, plain.loss) is None


def test_the_gradient_mismatch_probe_is_autograds() -> None:
    """SA-PEF's probe takes the MLP's gradient by the written-out backward: the same bits."""
    gen = torch.Generator().manual_seed(1)
    model = build_model("mlp", (1, 8, 8), 10)
    params = torch.randn(sum(p.numel() for p in model.parameters()), generator=gen) * 0.1
    x, y = torch.randn(64, 1, 8, 8, generator=gen), torch.randint(0, 10, (64,), generator=gen)
    copy = build_model("cnn", (1, 8, 8), 10)  # no written-out step: autograd's path
    assert mlp_step_for(copy, trainable_params(copy)) is None
    load_flat_params(model, params)
    want = torch.cat([g.reshape(-1) for g in torch.autograd.grad(
        F.cross_entropy(model(x), y), list(model.parameters()))])
    assert torch.equal(flat_grad(model, params, x, y), want)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fedavg", "fedprox", "sapef_topk", "ditto"])
def test_a_run_with_it_is_the_run_with_autograd(method: str, monkeypatch) -> None:
    """Local SGD with momentum (SA-PEF's), a proximal pull (FedProx) and a follow-up pass
    (Ditto's personal model) give the same history either way."""
    over = [*TINY, f"method={method}", "model.name=mlp", "local.momentum=0.9", "rounds=3"]
    calls = []
    real = template.written_out_step

    def counted(*args):  # type: ignore[no-untyped-def]
        step = real(*args)
        calls.append(step is not None)
        return step

    monkeypatch.setattr(template, "written_out_step", counted)
    fast = Simulation(load_config(None, over)).run()
    assert calls and all(calls)
    monkeypatch.setattr(template, "written_out_step", lambda *args: None)
    slow = Simulation(load_config(None, over)).run()
    assert untimed(fast.history) == untimed(slow.history)
    assert untimed([fast.summary]) == untimed([slow.summary])


def untimed(rows: list[dict[str, float]]) -> list[dict[str, float]]:
    """Every metric but the wall times."""
    return [{k: v for k, v in row.items() if "seconds" not in k} for row in rows]
