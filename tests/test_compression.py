"""Compressors (bytes, contraction, unbiasedness), CSER by hand, sparse averaging, schedules, BN."""

import math
from types import SimpleNamespace

import pytest
import torch

from fedcore.core import compression
from fedcore.core.aggregators import build
from fedcore.core.compose.assembly import stage_chain
from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError
from fedcore.core.records import ClientUpdate, Closing, LocalSchedule
from fedcore.core.records.aggregate import UpdateBatch
from fedcore.core.round.round_phases import closing
from fedcore.core.round.schedules import local_lr
from fedcore.core.round.simulation import Simulation
from fedcore.core.stages.feedback import RESIDUAL, alpha_star, build_feedback


def _x(d=1000, seed=0):
    return torch.randn(d, generator=torch.Generator().manual_seed(seed))


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_topk_keeps_exactly_the_k_largest_and_reports_8k_bytes():
    x = _x()
    comp = compression.build({"compressor": "topk", "k_frac": 0.0137})  # k = floor(13.7) = 13
    out, nbytes = comp.apply(x)
    kept = set(out.nonzero().flatten().tolist())
    assert kept == set(torch.argsort(x.abs(), descending=True)[:13].tolist())
    assert torch.equal(out[list(kept)], x[list(kept)])
    assert nbytes == 8 * 13
    tiny = compression.build({"compressor": "topk", "k_frac": 1e-6})
    assert tiny.apply(x)[1] == 8  # k >= 1 always


def test_randk_is_contractive_in_expectation_with_delta_d_over_k():
    x, d, k = _x(200), 200, 20
    comp = compression.build({"compressor": "randk", "k_frac": 0.1})
    errs = []
    for s in range(2000):
        out, nbytes = comp.apply(x, _gen(s))
        assert int((out != 0).sum()) == k and nbytes == 8 * k
        errs.append(float((out - x).pow(2).sum()))
    bound = (1 - k / d) * float(x.pow(2).sum())  # (1 - 1/delta) ||x||^2, delta = d/k
    assert abs(sum(errs) / len(errs) - bound) < 0.02 * bound


@pytest.mark.parametrize("seed", range(5))
def test_scaled_sign_is_contractive_with_delta_d(seed):
    x = _x(500, seed) ** 3  # heavy tails
    out, nbytes = compression.build({"compressor": "sign"}).apply(x)
    err, sq, d = float((out - x).pow(2).sum()), float(x.pow(2).sum()), x.numel()
    assert err <= (1 - 1 / d) * sq
    assert math.isclose(err, sq - float(x.abs().sum()) ** 2 / d, rel_tol=1e-4)
    assert nbytes == math.ceil(d / 8) + 4


def test_qsgd_is_unbiased_and_reports_its_bits():
    x, levels = _x(50), 4
    comp = compression.build({"compressor": "qsgd", "levels": levels})
    draws = torch.stack([comp.apply(x, _gen(s))[0] for s in range(4000)])
    assert float((draws.mean(0) - x).norm() / x.norm()) < 0.05
    assert not torch.equal(draws[0], draws[1])  # it is random
    assert comp.apply(x, _gen())[1] == 4 + math.ceil(50 * (1 + 3) / 8)


def test_cser_reset_digest_by_hand():
    spec = {"compressor": "topk", "k_frac": 0.1, "error_feedback": "cser", "H": 2,
            "reset_frac": 0.2}
    comp, ef = compression.build(spec), build_feedback(spec)
    sched = LocalSchedule()
    store = {0: {}, 1: {}}
    ef.begin_round(1, sched)
    before = Closing(torch.zeros(10))
    ef.end_round([0, 1], store, before)
    assert torch.equal(before.params, torch.zeros(10))  # round 1: not a reset round
    ef.begin_round(2, sched)
    a = torch.tensor([5.0, -4, 3, 0.5, 0, 0, 0, 0, 0, 0.1])
    b = torch.tensor([0.0, 1, -2, 6, 0, 0, 0, 0, 0, 0])
    sent_a, bytes_a = ef.compress(comp.apply, a, store[0])
    sent_b, _ = ef.compress(comp.apply, b, store[1])
    assert bytes_a == 8 * 1 + 8 * 2  # Top-1 update + top-2 digest
    assert torch.equal(sent_a, torch.tensor([5.0, 0, 0, 0, 0, 0, 0, 0, 0, 0]))
    after = Closing(torch.zeros(10))
    metrics = ef.end_round([0, 1], store, after)
    e_bar = after.params  # the extra server step, added to the model after the rule's
    assert torch.allclose(e_bar, torch.tensor([0.0, -1.5, 0.5, 0, 0, 0, 0, 0, 0, 0]))
    expect_a = torch.tensor([0.0, -2.5, 2.5, 0.5, 0, 0, 0, 0, 0, 0.1])
    expect_b = torch.tensor([0.0, 2.5, -2.5, 0, 0, 0, 0, 0, 0, 0])
    assert torch.allclose(store[0][RESIDUAL], expect_a)
    assert torch.allclose(store[1][RESIDUAL], expect_b)
    assert metrics["cser/reset"] == 1.0


def test_support_normalised_averaging_by_hand():
    deltas = torch.tensor([[1.0, 0, 2, 0], [3.0, 0, 0, 0], [0.0, 0, 4, 5]])
    batch = UpdateBatch(deltas=deltas, num_samples=torch.tensor([1, 2, 1]))
    support = build({"rule": "sparse_fedavg"}).aggregate(batch).step
    assert torch.allclose(support, torch.tensor([7 / 3, 0.0, 3.0, 5.0]))
    plain = build({"rule": "sparse_fedavg", "support_normalised": False}).aggregate(batch).step
    assert torch.allclose(plain, torch.tensor([1.75, 0.0, 1.5, 1.25]))


def test_theory_alpha_is_clipped_alpha_star():
    assert alpha_star(0.05, 1.0, 5) == 0.6  # 1/(1 + 12 * 0.25^2) = 0.571 -> 0.6
    assert alpha_star(0.01, 1.0, 5) == 0.9  # 0.971 -> 0.9
    assert math.isclose(alpha_star(0.02, 1.0, 5), 1 / 1.12)
    ef = build_feedback(
        {"compressor": "topk", "error_feedback": "sapef", "alpha_schedule": "theory"}
    )
    ef.begin_round(3, LocalSchedule(lr=0.02, steps=5))
    assert math.isclose(ef.alpha, 1 / 1.12)


def test_constant_decay_starts_in_round_3_as_crafts_code():
    """CRAFT's resolve_round_lr: lr * decay^max(t - 1, 0), t = 0, 1, ... (our round - 1)."""
    cfg = load_config(None, ["local.lr=0.1", "local.lr_decay=0.5"])
    assert [local_lr(cfg.local, r, 5) for r in range(1, 6)] == [0.1, 0.1, 0.05, 0.025, 0.0125]


def test_warmup_cosine_schedule_by_hand():
    cfg = load_config(
        None,
        ["local.lr=0.1", "local.lr_schedule=warmup_cosine", "local.warmup_rounds=2", "rounds=6"],
    )
    lrs = [local_lr(cfg.local, r, 6) for r in range(1, 7)]
    assert lrs[:2] == [0.05, 0.1]
    assert math.isclose(lrs[2], 0.05 * (1 + math.cos(math.pi / 4)))
    assert math.isclose(lrs[5], 0.0, abs_tol=1e-12)
    assert Simulation.schedule(SimpleNamespace(cfg=cfg), 3).lr == lrs[2]
    with pytest.raises(ConfigError, match="lr_decay"):
        load_config(None, ["local.lr_schedule=warmup_cosine", "local.lr_decay=0.9"])


def _bn_update(n, mean, var):
    bufs = {"bn.running_mean": torch.tensor(mean), "bn.running_var": torch.tensor(var)}
    return ClientUpdate(0, torch.zeros(1), n, 1, torch.zeros(()), buffers=bufs)


def _averaged_buffers(spec):
    """The BatchNorm statistics the server loads: averaged, then as the stages close the round."""
    chain = stage_chain(load_config(None, [f"method.compression={spec}"]), compression.build(spec))
    ups = [_bn_update(1, [0.0, 1.0], [1.0, 0.0]), _bn_update(3, [2.0, 1.0], [1.0, 0.0])]
    end = closing(torch.zeros(1), ups, torch.device("cpu"))
    chain.end_round(SimpleNamespace(store={}), [], end)
    return end.buffers


@pytest.mark.parametrize("variant", ["ef", "saef", "sapef", "cser"])
def test_batchnorm_buffers_are_moment_matched_for_error_feedback(variant):
    # docs/methods/sapef.md: var = max(sum p_k (var_k + mu_k^2) - mu_bar^2, 1e-3), p = (1/4, 3/4)
    out = _averaged_buffers({"compressor": "topk", "error_feedback": variant})
    assert torch.allclose(out["bn.running_mean"], torch.tensor([1.5, 1.0]))
    assert torch.allclose(out["bn.running_var"], torch.tensor([1.75, 1e-3]))


@pytest.mark.parametrize("compressor", ["none", "topk"])
def test_batchnorm_buffers_are_sample_weighted_means_without_error_feedback(compressor):
    # every other method: var_bar = sum p_k var_k, no floor (1/4 * 1 + 3/4 * 1 = 1; 0)
    out = _averaged_buffers({"compressor": compressor})
    assert torch.allclose(out["bn.running_mean"], torch.tensor([1.5, 1.0]))
    assert torch.equal(out["bn.running_var"], torch.tensor([1.0, 0.0]))


def test_unknown_error_feedback_is_rejected():
    with pytest.raises(ConfigError, match="error_feedback"):
        load_config(None, ["method=ef_topk", "method.compression.error_feedback=scaffold"])


def test_theory_alpha_uses_the_local_steps_each_client_takes():
    # local.steps unset: a client with n_k samples takes epochs * ceil(n_k / B) steps (the last
    # batch partial), so T_k = 2 ceil(n_k / 32), not T = local.epochs = 2.
    over = ["rounds=2", "model.name=mlp", "dataset.num_clients=6", "clients_per_round=3",
            "method=sapef_topk", "method.compression.alpha_schedule=theory",
            "method.compression.L=0.15", "local.epochs=2", "local.batch_size=32"]
    sim = Simulation(load_config(None, over))
    result = sim.run()
    lr = sim.schedule(2).lr
    expected = []
    for cid in map(int, sim.sample_clients(2)):
        steps = 2 * math.ceil(sim.data.clients[cid].num_train / 32)
        s = lr * 0.15 * steps
        alpha = min(max(1 / (1 + 12 * s * s), 0.6), 0.9)
        assert sim.store[cid]["ef_alpha"] == pytest.approx(alpha)
        expected.append(alpha)
    assert len(set(expected)) > 1  # clients of different sizes get different alphas
    assert result.history[1]["sapef/alpha"] == pytest.approx(sum(expected) / len(expected))
