"""FedOUI (docs/methods/fedoui.md): OUI of activations, Beta fit, scores, weights, probe, loop."""

from __future__ import annotations

import math

import numpy as np
import pydantic
import pytest
import torch
from scipy import stats

from fedcore.core import aggregators
from fedcore.core.clients.extras import AFTER_TRAINING
from fedcore.core.compose.configure import load_config
from fedcore.core.data.client_data import ClientData
from fedcore.core.models import build_model
from fedcore.core.models.layout import ParamLayout, flat_params
from fedcore.core.numerics import oui as oui_lib
from fedcore.core.records import LocalContext, LocalSchedule
from fedcore.core.records.aggregate import UpdateBatch
from fedcore.core.round.probes import run_round
from fedcore.core.round.simulation import Simulation

from .conftest import TINY

# unit-test vector (paper/report snapshot).
O_VEC = [0.1265, 0.2573, 0.3101, 0.3179, 0.3716]
N_VEC = [210, 226, 66, 40, 17]
BETA_AB = (6.096, 15.937)
SCORES = [0.0743, 0.8946, 0.6819, 0.6263, 0.3165]
WEIGHTS = [0.0538, 0.6890, 0.1534, 0.0854, 0.0184]


def batch_of(ouis, n, deltas=None, dtype=torch.float64) -> UpdateBatch:
    m = len(ouis)
    d = torch.eye(m, dtype=dtype) if deltas is None else deltas
    return UpdateBatch(d, torch.tensor(n), stats={"oui": torch.tensor(ouis)})


# --- OUI of a pre-activation matrix ---------------------------------------------------


def test_oui_balanced_units_is_one():
    # B = 4: every unit is positive on exactly 2 of the 4 samples.
    h = torch.tensor([[1.0, -1.0, 2.0], [2.0, 1.0, -3.0], [-1.0, 3.0, 1.0], [-2.0, -4.0, -1.0]])
    assert oui_lib.oui_from_preactivations(h) == 1.0


def test_oui_constant_sign_is_zero():
    h = torch.tensor([[1.0, -1.0, 0.0], [2.0, -2.0, 0.0], [3.0, -3.0, 0.0], [0.5, -0.5, 0.0]])
    assert oui_lib.oui_from_preactivations(h) == 0.0  # always on, always off, zero = inactive


def test_oui_batch_smaller_than_two_is_zero():
    assert oui_lib.oui_from_preactivations(torch.tensor([[1.0, -1.0, 2.0]])) == 0.0
    assert oui_lib.oui_from_preactivations(torch.zeros(0, 5)) == 0.0


def test_oui_mixed_example_by_hand():
    # B = 5, floor(B/2) = 2. Active counts s = (1, 2, 3, 5): u = (1, 2, 2, 0) -> (0.5, 1, 1, 0).
    h = torch.tensor(
        [
            [1.0, 1.0, 1.0, 1.0],
            [-1.0, 1.0, 1.0, 1.0],
            [-1.0, -1.0, 1.0, 1.0],
            [-1.0, -1.0, -1.0, 1.0],
            [0.0, -1.0, -1.0, 1.0],
        ]
    )
    assert math.isclose(oui_lib.oui_from_preactivations(h), (0.5 + 1 + 1 + 0) / 4)
    # Permuting samples or units changes nothing; >2-D inputs are flattened per sample.
    assert math.isclose(oui_lib.oui_from_preactivations(h[[4, 2, 0, 3, 1]][:, [3, 1, 0, 2]]), 0.625)
    assert math.isclose(oui_lib.oui_from_preactivations(h.view(5, 2, 2)), 0.625)


# --- Beta fit, scores, weights ------------------------------------------------


def test_unit_test_vector():
    fit = oui_lib.fit_beta(np.array(O_VEC), eps=1e-3)
    assert fit is not None and fit.method == "moments"
    assert fit.alpha == pytest.approx(BETA_AB[0], abs=1e-3)
    assert fit.beta == pytest.approx(BETA_AB[1], abs=1e-3)
    agg = aggregators.build({"rule": "fedoui"})
    res = agg.aggregate(batch_of(O_VEC, N_VEC))
    step = res.step  # deltas = identity, so step = weights
    assert step.dtype == torch.float64
    np.testing.assert_allclose(step.numpy(), WEIGHTS, atol=5e-5)
    scores, _ = oui_lib.oui_scores(np.array(O_VEC), eps=1e-3)
    np.testing.assert_allclose(scores, SCORES, atol=5e-5)
    assert res.metrics["oui/beta_a"] == pytest.approx(BETA_AB[0], abs=1e-3)
    assert res.metrics["oui/beta_b"] == pytest.approx(BETA_AB[1], abs=1e-3)
    assert res.metrics["oui/fallback"] == 0.0
    assert res.metrics["oui/mean"] == pytest.approx(np.mean(O_VEC))


def test_moments_fit_clips_with_eps():
    # A zero OUI is clipped to eps before the moments: the fit changes with eps.
    v = np.array([0.0, 0.2, 0.3, 0.4])
    for eps in (1e-3, 1e-2):
        c = np.clip(v, eps, 1 - eps)
        mu, var = c.mean(), c.var(ddof=1)
        k = mu * (1 - mu) / var - 1
        fit = oui_lib.fit_beta(v, eps)
        assert fit.alpha == pytest.approx(mu * k) and fit.beta == pytest.approx((1 - mu) * k)


def test_equal_ouis_reduce_to_fedavg():
    torch.manual_seed(0)
    deltas = torch.randn(4, 7)
    n = [10, 50, 30, 7]
    agg = aggregators.build({"rule": "fedoui"})
    res = agg.aggregate(batch_of([0.4] * 4, n, deltas))
    step = res.step
    fedavg = aggregators.build({"rule": "fedavg"}).aggregate(batch_of([0.4] * 4, n, deltas)).step
    torch.testing.assert_close(step, fedavg)
    assert res.metrics["oui/fallback"] == 1.0
    assert math.isnan(res.metrics["oui/beta_a"])


def test_single_client_gets_weight_one():
    one = batch_of([0.3], [12], torch.ones(1, 3))
    step = aggregators.build({"rule": "fedoui"}).aggregate(one).step
    torch.testing.assert_close(step, torch.ones(3))


def test_percentile_fallback_scores_by_rank():
    # m = 5, distinct values: P = rank / 6 -> s = (1/3, 2/3, 1, 2/3, 1/3) by rank.
    s = oui_lib.percentile_scores(np.array([0.9, 0.1, 0.5, 0.3, 0.7]))
    np.testing.assert_allclose(s, [1 / 3, 1 / 3, 1, 2 / 3, 2 / 3])
    # Ties take the average rank: ranks (1.5, 1.5, 3) -> P = (3/8, 3/8, 3/4).
    np.testing.assert_allclose(
        oui_lib.percentile_scores(np.array([0.2, 0.2, 0.6])), [0.75] * 2 + [0.5]
    )


def test_mle_when_moments_invalid():
    # Variance above mu(1-mu): c <= 0, the moments fit is invalid; scipy's MLE takes over.
    v = np.array([0.01, 0.99, 0.02, 0.98])
    c = np.clip(v, 1e-3, 1 - 1e-3)
    assert c.var(ddof=1) > c.mean() * (1 - c.mean())
    fit = oui_lib.fit_beta(v, eps=1e-3)
    a, b, _, _ = stats.beta.fit(np.clip(v, 1e-3, 1 - 1e-3), floc=0, fscale=1)
    assert fit.method == "mle"
    assert fit.alpha == pytest.approx(a) and fit.beta == pytest.approx(b)
    assert fit.alpha < 1 and fit.beta < 1  # U-shaped


def test_fallback_when_both_fits_fail(monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("solver failed")

    monkeypatch.setattr(stats.beta, "fit", boom)  # scipy is imported in the fit
    ouis = [0.01, 0.99, 0.02, 0.98]  # moments invalid, MLE raises -> ranks (1, 4, 2, 3) / 5
    agg = aggregators.build({"rule": "fedoui"})
    res = agg.aggregate(batch_of(ouis, [1, 1, 1, 1]))
    step = res.step
    s = np.array([0.4, 0.4, 0.8, 0.8])
    np.testing.assert_allclose(step.numpy(), (s + 1e-3) / (s + 1e-3).sum())
    assert res.metrics["oui/fallback"] == 1.0


def test_typical_client_outweighs_atypical_one_of_same_size():
    agg = aggregators.build({"rule": "fedoui"})
    step = agg.aggregate(batch_of(O_VEC, [100] * 5)).step
    assert int(step.argmin()) == 0  # the outlier OUI 0.1265 has the smallest score
    np.testing.assert_allclose(
        step.numpy(), (np.array(SCORES) + 1e-3) / sum(SCORES + 5 * [1e-3]), atol=5e-5
    )


def test_exponents():
    deltas = torch.eye(5, dtype=torch.float64)
    # gamma = 0: scores ignored -> FedAvg;  rho = gamma = 0: uniform.
    s = aggregators.build({"rule": "fedoui", "gamma": 0.0}).aggregate(batch_of(O_VEC, N_VEC)).step
    np.testing.assert_allclose(s.numpy(), np.array(N_VEC) / sum(N_VEC))
    s = aggregators.build({"rule": "fedoui", "gamma": 0.0, "rho": 0.0}).aggregate(
        batch_of(O_VEC, N_VEC, deltas)
    ).step
    np.testing.assert_allclose(s.numpy(), [0.2] * 5)
    # rho = 0.5, gamma = 2 against the formula with the unit-test vector's scores.
    s = aggregators.build({"rule": "fedoui", "rho": 0.5, "gamma": 2.0}).aggregate(
        batch_of(O_VEC, N_VEC)
    ).step
    w = np.sqrt(N_VEC) * (np.array(SCORES) + 1e-3) ** 2
    np.testing.assert_allclose(s.numpy(), w / w.sum(), atol=2e-4)


def test_server_lr_scales_and_keeps_float32():
    deltas = torch.randn(5, 4)
    b = batch_of(O_VEC, N_VEC, deltas)
    s1 = aggregators.build({"rule": "fedoui"}).aggregate(b).step
    s2 = aggregators.build({"rule": "fedoui", "server_lr": 0.5}).aggregate(b).step
    assert s1.dtype == torch.float32
    torch.testing.assert_close(s2, 0.5 * s1)


def test_var_floor_option_softens_near_equal_ouis():
    ouis = [0.30, 0.30, 0.30, 0.30, 0.31]
    plain, _ = oui_lib.oui_scores(np.array(ouis))
    floored, _ = oui_lib.oui_scores(np.array(ouis), var_floor=1e-4)
    assert plain[-1] < 0.1 < 0.4 < floored[-1]  # the faithful default is peaked, the floor is not


def test_last5_window_uses_previous_four_rounds_and_survives_a_checkpoint():
    rng = np.random.default_rng(0)
    rounds = [list(rng.uniform(0.1, 0.6, size=3)) for _ in range(7)]
    agg = aggregators.build({"rule": "fedoui", "window": "last5"})
    for r in rounds[:6]:
        res = agg.aggregate(batch_of(r, [10, 20, 30]))
    fit = oui_lib.fit_beta(np.concatenate(rounds[1:6]), eps=1e-3)  # rounds 2..6 of 6
    assert res.metrics["oui/beta_a"] == pytest.approx(fit.alpha)
    assert len(agg.state_dict()["history"]) == 4
    clone = aggregators.build({"rule": "fedoui", "window": "last5"})
    clone.load_state_dict(agg.state_dict())
    b = batch_of(rounds[6], [10, 20, 30])
    step = agg.aggregate(b).step
    torch.testing.assert_close(step, clone.aggregate(b).step)
    window = np.concatenate(rounds[2:7])
    s, f = oui_lib.oui_scores(np.array(rounds[6]), window)
    assert f.alpha == pytest.approx(oui_lib.fit_beta(window, 1e-3).alpha)
    w = np.array([10, 20, 30]) * (s + 1e-3)
    np.testing.assert_allclose(step.numpy(), w / w.sum())  # deltas = identity
    assert not np.allclose(s, oui_lib.oui_scores(np.array(rounds[6]))[0])  # window matters
    # "current" keeps no history.
    cur = aggregators.build({"rule": "fedoui"})
    cur.aggregate(batch_of(rounds[0], [1, 1, 1]))
    assert cur.state_dict() == {"history": []}


def test_bad_hyperparameters_are_rejected():
    for bad in ({"window": "last3"}, {"eps": 0.0}, {"rho": -1.0}, {"unknown": 1}):
        with pytest.raises(pydantic.ValidationError):
            aggregators.build({"rule": "fedoui", **bad})
    assert aggregators.build({"rule": "fedoui"}).needs == frozenset({"oui"})


# --- the client's fixed probe and the client-side hook -------------------------------


def test_probe_indices_follow_the_recipe():
    idx = oui_lib.probe_indices(100, 3)
    expected = torch.randperm(100, generator=torch.Generator().manual_seed(0 + 10007 * 3))[:32]
    assert torch.equal(idx, expected) and len(set(idx.tolist())) == 32
    assert torch.equal(idx, oui_lib.probe_indices(100, 3))  # deterministic
    assert not torch.equal(idx, oui_lib.probe_indices(100, 4))  # per-client
    small = oui_lib.probe_indices(10, 2)  # fewer than 32 samples: with replacement
    assert len(small) == 32 and int(small.max()) < 10 and len(set(small.tolist())) <= 10
    expected = torch.randint(0, 10, (32,), generator=torch.Generator().manual_seed(20014))
    assert torch.equal(small, expected)
    assert len(oui_lib.probe_indices(0, 1)) == 0


def _ctx(model, state, n=60, client_id=5):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 1, 8, 8, generator=g)
    data = ClientData(client_id, x, torch.randint(0, 10, (n,), generator=g), x[:0], x[:0, 0, 0, 0])
    params = flat_params(model)
    return LocalContext(
        model=model,
        global_params=params,
        global_buffers={},
        layout=ParamLayout.from_model(model),
        data=data,
        schedule=LocalSchedule(),
        state=state,
        generator=g,
        round=1,
        needs=frozenset({"oui"}),
    )


def test_client_hook_uses_fixed_probe_in_eval_mode():
    torch.manual_seed(0)
    model = build_model("cnn", (1, 8, 8), 10).train()  # has dropout: train != eval
    state: dict = {}
    ctx = _ctx(model, state)
    before = flat_params(model).clone()
    value = AFTER_TRAINING["oui"](model, ctx, 3, None)
    idx = state["oui_probe"]
    assert torch.equal(idx, oui_lib.probe_indices(60, 5))
    assert model.training and torch.equal(flat_params(model), before)
    model.eval()
    with torch.no_grad():
        h = model.preactivation(ctx.data.x_train[idx])
    model.train()
    # by hand (not the library function the extra itself calls), float32 vs float64 counts
    assert value == pytest.approx(_hand_oui(h.numpy()), abs=1e-6) and 0.0 < value <= 1.0
    # Next round: new parameters, same probe (the stored indices are reused, not redrawn).
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1)
    state["oui_probe"] = idx.flip(0)  # a stored probe is used as is
    AFTER_TRAINING["oui"](model, _ctx(model, state), 3, None)
    assert torch.equal(state["oui_probe"], idx.flip(0))


def _hand_oui(h: np.ndarray) -> float:
    """fedoui.md by hand: mean over units of min(#active, B - #active) / floor(B / 2)."""
    active = (h > 0).sum(axis=0)
    return float(np.minimum(active, h.shape[0] - active).mean() / (h.shape[0] // 2))


def test_simulation_oui_mean_is_the_mean_of_the_clients_hand_computed_ouis():
    cfg = load_config(None, [*TINY, "method=fedoui", "local.steps=2", "seed=7"])
    sim = Simulation(cfg)
    metrics = run_round(sim, 1)
    ref = Simulation(cfg)
    theta, sampled = ref.params.clone(), list(map(int, ref.sample_clients(1)))
    updates = ref.engine.train_round(ref.round_context(1), sampled)
    expected, before = [], []
    for cid in sampled:
        c = ref.data.clients[cid]
        gen = torch.Generator().manual_seed(7 + 10007 * cid)  # probe seed = the run's seed
        assert c.num_train >= 32
        probe = torch.randperm(c.num_train, generator=gen)
        ref.model.load_state_dict(
            {**ref.layout.unflatten(theta + updates[cid].delta)}, strict=False
        )
        ref.model.eval()
        with torch.no_grad():  # MLP: fc2's output is the input of the last ReLU
            h = ref.model.fc2(torch.relu(ref.model.fc1(c.x_train[probe[:32]].flatten(1))))
        expected.append(_hand_oui(h.numpy()))
        assert torch.equal(sim.store[cid]["oui_probe"], probe[:32])
        with torch.no_grad():  # the same probe at theta_t, before local training
            ref.model.load_state_dict({**ref.layout.unflatten(theta)}, strict=False)
            h0 = ref.model.fc2(torch.relu(ref.model.fc1(c.x_train[probe[:32]].flatten(1))))
        before.append(_hand_oui(h0.numpy()))
    # the check has power: OUI before training differs, so the metric is the trained model's
    assert metrics["oui/mean"] != pytest.approx(float(np.mean(before)), abs=1e-6)
    assert metrics["oui/mean"] == pytest.approx(float(np.mean(expected)), abs=1e-6)  # float32


def test_probe_seed_follows_the_experiment_seed():
    probes = {}
    for seed in (0, 3):
        over = [*TINY, "method=fedoui", "local.steps=1", f"seed={seed}"]
        sim = Simulation(load_config(None, over))
        run_round(sim, 1)
        cid = int(sim.sample_clients(1)[0])
        n = sim.data.clients[cid].num_train
        assert torch.equal(sim.store[cid]["oui_probe"], oui_lib.probe_indices(n, cid, seed=seed))
        probes[seed] = oui_lib.probe_indices(n, cid, seed=seed)
    assert not torch.equal(probes[0], probes[3])


def test_resnet_oui_counts_every_channel_and_position_of_the_last_relu():
    # The OUI units (docs/methods/fedoui.md) are the inputs of the last ReLU before the
    # classifier; in a ResNet that ReLU acts on the (64, h, w) map of layer3's last block,
    # so d = 64 h w units, not 64 channel means after pooling.
    torch.manual_seed(0)
    model = build_model("resnet20", (1, 8, 8), 10, norm="group")
    state: dict = {}
    ctx = _ctx(model, state)
    value = AFTER_TRAINING["oui"](model, ctx, 1, None)
    x = ctx.data.x_train[state["oui_probe"]]
    with torch.no_grad():
        h = model.layer3[:-1](model.layer2(model.layer1(torch.relu(model.bn1(model.conv1(x))))))
        spatial = model.layer3[-1].preact(h)
    assert spatial.shape[1:] == (64, 2, 2)
    assert value == pytest.approx(_hand_oui(spatial.flatten(1).numpy()), abs=1e-12)
    assert value != pytest.approx(_hand_oui(spatial.mean(dim=(2, 3)).numpy()), abs=1e-3)


