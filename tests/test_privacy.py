"""Central DP-FedAvg and its accountant: epsilon equals dp-accounting's own computation, the
noise has the stated std, clipping bounds a client, calibration meets its target from below,
resuming continues the account, runs are bit-reproducible, refusals are one line (exit 2)."""

import math

import dp_accounting as dpa
import numpy as np
import pytest
import torch
from dp_accounting import pld, rdp
from mlflow.tracking import MlflowClient
from torch import nn

from fedcore.core.callbacks import Callback
from fedcore.core.compose.configure import load_config
from fedcore.core.privacy import accountant
from fedcore.core.privacy.accountant import Account
from fedcore.core.privacy.ledger import Ledger
from fedcore.core.records.aggregate import UpdateBatch
from fedcore.core.round import checkpoint, code_digest
from fedcore.core.round.simulation import Simulation
from fedcore.tracking.runner import run_tracked

from .test_checkpoint import StopAt, _numbers

FAST = ["model.name=mlp", "dataset.num_clients=8", "clients_per_round=4", "local.epochs=1",
        "local.steps=3", "rounds=4"]
CENTRAL = ["privacy.mechanism=central", "privacy.clip=0.5"]
ORDERS = list(range(2, 65)) + [128, 256, 512, 1024]  # the orders fedcore's RDP accountant uses


def _cfg(*extra):
    return load_config(None, [*FAST, *extra])


def _library_epsilon(z, q, rounds, delta, kind="rdp", n=None, m=None):
    """epsilon straight from dp-accounting, written out here rather than through fedcore."""
    if m is None:
        event = dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z))
        acc = (rdp.RdpAccountant(ORDERS) if kind == "rdp" else pld.PLDAccountant())
    else:  # fixed size without replacement: replace-one neighbours, sensitivity 2C
        event = dpa.SampledWithoutReplacementDpEvent(n, m, dpa.GaussianDpEvent(z / 2))
        acc = rdp.RdpAccountant(ORDERS, dpa.NeighboringRelation.REPLACE_ONE)
    return acc.compose(dpa.SelfComposedDpEvent(event, rounds)).get_epsilon(delta)


def test_fedcore_run_records_epsilon_per_round_equal_to_the_library_for_its_params(tracking):
    from fedcore.cli import main

    assert main(["run", *FAST, *CENTRAL, "privacy.noise_multiplier=1.3"]) == 0
    client = MlflowClient(tracking.tracking_uri)
    (run,) = [r for e in client.search_experiments() for r in client.search_runs(
        [e.experiment_id])]
    run_id = run.info.run_id
    assert run.info.status == "FINISHED"
    params = run.data.params
    z, q = float(params["dp.noise_multiplier"]), float(params["dp.sampling_rate"])
    delta = float(params["dp.delta"])
    assert (params["dp.mechanism"], params["dp.accountant"]) == (
        "central", "dp-accounting rdp")
    assert float(params["dp.clip"]) == 0.5 and q == 4 / 8
    assert delta == pytest.approx(8 ** -1.1, rel=1e-12)  # the documented default 1/N^1.1
    history = client.get_metric_history(run_id, "privacy/epsilon")
    assert sorted(m.step for m in history) == [1, 2, 3, 4]
    for m in history:
        expected = _library_epsilon(z, q, m.step, delta)
        assert m.value == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("extra", [["privacy.accountant=pld"],
                                   ["privacy.sampling=fixed", "privacy.delta=1e-3"]])
def test_epsilon_of_pld_and_fixed_size_sampling_equals_the_library(extra):
    result = Simulation(_cfg(*CENTRAL, "privacy.noise_multiplier=0.9", "rounds=3",
                             *extra)).run()
    fixed = "privacy.sampling=fixed" in extra
    delta = 1e-3 if fixed else 8 ** -1.1
    for h in result.history:
        expected = (_library_epsilon(0.9, None, h["round"], delta, n=8, m=4) if fixed else
                    _library_epsilon(0.9, 0.5, h["round"], delta, kind="pld"))
        assert h["privacy/epsilon"] == pytest.approx(expected, rel=1e-6)


def test_fixed_size_sampling_trains_clients_per_round_every_round():
    class Seen(Callback):
        sizes: list[int] = []

        def on_round_end(self, record):
            self.sizes.append(len(record.sampled))

    seen = Seen()
    Simulation(_cfg(*CENTRAL, "privacy.noise_multiplier=1.0", "privacy.sampling=fixed"),
               [seen]).run()
    assert seen.sizes == [4, 4, 4, 4]


class Constant(nn.Module):
    """A model whose loss does not depend on its weights: every client's update is zero."""

    def __init__(self, in_shape, num_classes) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(40_000))
        self.num_classes = num_classes

    def forward(self, x):
        return torch.zeros(x.shape[0], self.num_classes) + 0.0 * self.w[:1]


def test_noise_added_to_a_zero_update_has_the_stated_std():
    z, clip, m = 1.7, 0.5, 4
    cfg = _cfg("privacy.mechanism=central", f"privacy.clip={clip}",
               f"privacy.noise_multiplier={z}", "rounds=1")
    sim = Simulation(cfg, model=Constant)
    before = sim.params.clone()
    sim.run()
    step = (sim.params - before).double()
    assert step.abs().max() > 0  # noise arrived although every client sent zeros
    # the server adds N(0, (z C)^2) to the sum and divides by the expected m
    assert float(step.std()) == pytest.approx(z * clip / m, rel=0.02)
    assert abs(float(step.mean())) < 4 * z * clip / m / math.sqrt(step.numel())


def _ledger(*extra):
    cfg = _cfg(*CENTRAL, "privacy.noise_multiplier=1.0", *extra)
    return Ledger(cfg, 8, 8)


def test_clipping_bounds_a_1e30_norm_client_to_clip_over_expected_clients():
    ledger = _ledger()
    gen = torch.Generator().manual_seed(0)
    honest = torch.randn(3, 500, generator=gen) * 0.01
    huge = torch.randn(1, 500, generator=gen)
    huge = huge / huge.norm() * 1e30
    with_huge = UpdateBatch(torch.cat([honest, huge]), torch.ones(4), round=2)
    without = UpdateBatch(honest, torch.ones(3), round=2)
    a = ledger.privatize(with_huge).deltas[0]
    b = ledger.privatize(without).deltas[0]  # the same round: the same noise
    assert torch.isfinite(a).all()
    assert float((a - b).double().norm()) <= 0.5 / 4 * (1 + 1e-5)
    assert float((a - b).double().norm()) == pytest.approx(0.5 / 4, rel=1e-5)  # clipped, kept


def test_a_1e30_scaled_byzantine_client_moves_the_model_by_at_most_clip_plus_noise():
    base = [*CENTRAL, "privacy.noise_multiplier=0.5", "rounds=1", "privacy.sampling=fixed",
            "clients_per_round=8"]
    honest = Simulation(_cfg(*base))
    attacked = Simulation(_cfg(*base, "clients.byzantine_fraction=0.125", "clients.attack=scale",
                               "clients.attack_strength=1e30"))
    start = honest.params.clone()
    assert torch.equal(start, attacked.params)
    honest.run()
    attacked.run()
    assert torch.isfinite(attacked.params).all()
    # every client is sampled; the attacker's clipped delta replaces its own: at most 2C / m
    moved = float((attacked.params - honest.params).double().norm())
    assert 0 < moved <= 2 * 0.5 / 8 * (1 + 1e-5)


@pytest.mark.parametrize(("target", "sampling", "kind", "rounds"), [
    (1.0, "poisson", "rdp", 20), (4.0, "poisson", "rdp", 20), (8.0, "fixed", "rdp", 20),
    (3.0, "poisson", "pld", 5)])
def test_calibration_meets_its_target_from_below(target, sampling, kind, rounds):
    account = Account(kind, sampling, 0.0, 16, 5)
    z = accountant.calibrate(account, rounds, target, 1e-3)
    eps = accountant.epsilon(account.with_noise(z), rounds, 1e-3)
    assert eps <= target and eps == pytest.approx(target, rel=1e-3)
    assert accountant.epsilon(account.with_noise(z * 0.99), rounds, 1e-3) > target


def test_a_run_calibrated_to_a_target_ends_at_most_at_it():
    sim = Simulation(_cfg(*CENTRAL, "privacy.target_epsilon=3.0"))
    assert sim.privacy_params["dp.calibrated"] == "true"
    result = sim.run()
    final = result.history[-1]["privacy/epsilon"]
    assert final <= 3.0 and final == pytest.approx(3.0, rel=1e-3)


@pytest.mark.parametrize("adaptive", [[], ["privacy.clip_quantile=0.5", "privacy.clip_lr=1.0"]])
def test_resumed_run_continues_the_account_and_equals_an_uninterrupted_one(tmp_path, adaptive):
    extra = [*CENTRAL, "privacy.target_epsilon=2.0", f"checkpoint_dir={tmp_path / 'ck'}",
             *adaptive]
    full = Simulation(_cfg(*extra)).run()
    cfg = _cfg(*extra, "checkpoint_every=2")
    with pytest.raises(KeyboardInterrupt):
        Simulation(cfg, [StopAt(3)]).run()
    resumed = Simulation(cfg)
    assert resumed.resume() and resumed.round == 2
    assert resumed.privacy is not None and resumed.privacy.spent() == 2
    result = resumed.run()
    assert [h["privacy/epsilon"] for h in result.history] == [
        h["privacy/epsilon"] for h in full.history]
    assert _numbers(result.history) == _numbers(full.history)
    clips = [h["privacy/clip"] for h in result.history]
    assert (len(set(clips)) > 1) == bool(adaptive)  # the adapted clip came back too


def test_the_checkpoint_keeps_the_noise_multiplier_of_the_account(tmp_path):
    cfg = _cfg(*CENTRAL, "privacy.target_epsilon=2.0", f"checkpoint_dir={tmp_path / 'ck'}",
               "checkpoint_every=2")
    with pytest.raises(KeyboardInterrupt):
        Simulation(cfg, [StopAt(3)]).run()
    resumed = Simulation(cfg)
    state = checkpoint.latest(checkpoint.run_folder(cfg), code_digest.of_config(cfg))
    assert state is not None and state["privacy"]["rounds"] == 2
    calibrated = state["privacy"]["noise_multiplier"]
    assert calibrated == float(resumed.privacy_params["dp.noise_multiplier"])
    state["privacy"] = {**state["privacy"], "noise_multiplier": 5.0}
    resumed.load_state_dict(state, rng=False)  # the account's z, not a new calibration
    assert resumed.privacy is not None and resumed.privacy.noise_multiplier == 5.0
    assert resumed.privacy.spent() == 2


def test_dp_runs_are_bit_reproducible_per_seed():
    extra = [*CENTRAL, "privacy.noise_multiplier=0.8", "seed=3"]
    a, b = Simulation(_cfg(*extra)), Simulation(_cfg(*extra))
    ra, rb = a.run(), b.run()
    assert _numbers(ra.history) == _numbers(rb.history)
    assert torch.equal(a.params, b.params)
    c = Simulation(_cfg(*CENTRAL, "privacy.noise_multiplier=0.8", "seed=4"))
    c.run()
    assert not torch.equal(a.params, c.params)


def test_a_round_without_clients_still_adds_the_noise():
    sim = Simulation(_cfg(*CENTRAL, "privacy.noise_multiplier=1.0", "dataset.num_clients=20",
                          "clients_per_round=1"))
    empty = next(r for r in range(1, 50) if len(sim.sample_clients(r)) == 0)
    before = sim.params.clone()
    outcome = sim.play_round(empty)
    assert math.isnan(outcome.metrics["train/loss"])
    assert float((sim.params - before).double().std()) == pytest.approx(0.5, rel=0.05)


def test_budget_finishes_the_run_before_it_would_be_exceeded(tracking):
    eps = [accountant.epsilon(Account("rdp", "poisson", 1.0, 8, 4), r, 8 ** -1.1)
           for r in (1, 2, 3, 4)]
    budget = (eps[1] + eps[2]) / 2  # two rounds fit, the third would not
    cfg = _cfg(*CENTRAL, "privacy.noise_multiplier=1.0", f"privacy.epsilon_budget={budget}")
    run_id, result = run_tracked(cfg, figures=False)
    assert [h["round"] for h in result.history] == [1, 2]
    assert result.history[-1]["privacy/epsilon"] == pytest.approx(eps[1], rel=1e-9)
    run = MlflowClient(tracking.tracking_uri).get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["fedcore.converged"].startswith("privacy budget: epsilon")
    assert "privacy.epsilon_budget" in run.data.tags["fedcore.converged"]


def test_local_dp_accounts_the_clip_noise_stage_per_client():
    cfg = _cfg("privacy.mechanism=local", "privacy.delta=1e-3",
               "method.stages=[{stage: clip_noise, clip: 0.5, sigma: 4.0}]", "rounds=6",
               "dataset.num_clients=12")
    seen = []

    class Sampled(Callback):
        def on_round_end(self, record):
            seen.extend(int(k) for k in record.sampled)

    sim = Simulation(cfg, [Sampled()])
    assert sim.privacy_params["dp.sampling"] == "local"
    result = sim.run()
    most = int(max(np.bincount(seen)))
    assert most < len(result.history)  # no client took part in every round: fewer releases
    # each client's release: a Gaussian of sensitivity 2C (its data replaced), no sampling
    event = dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(4.0 / 2), most)
    expected = rdp.RdpAccountant(ORDERS).compose(event).get_epsilon(1e-3)
    assert result.history[-1]["privacy/epsilon"] == pytest.approx(expected, rel=1e-6)


REFUSED = [
    (["method=krum"], "method.aggregator.rule: central DP needs a rule that takes a mean of the "
     "deltas, got krum; allowed: fedavg, fedavgm"),
    (["method=craft"], "allowed: fedavg, fedavgm"),
    (["method=scaffold"], "method.client.algorithm: scaffold sends delta_c"),
    (["method.sampler=power_of_choice"], "method.sampler: central DP samples clients"),
    (["privacy.accountant=pld", "privacy.sampling=fixed"],
     "privacy.accountant: pld cannot account privacy.sampling=fixed"),
    (["privacy.target_epsilon=2"], "privacy.noise_multiplier: central DP needs exactly one"),
    (["privacy.epsilon_budget=0.01"], "privacy.epsilon_budget: one round already spends"),
    (["privacy.sampling=sometimes"], "privacy.sampling: Input should be 'poisson' or 'fixed'"),
    (["privacy.accountant=pld", "privacy.noise_multiplier=0.1"],
     "privacy.accountant: pld needs an accounted noise multiplier >= 0.5"),
]


@pytest.mark.parametrize(("args", "message"), REFUSED)
def test_refusals_exit_2_in_one_line_before_any_run(tracking, capsys, args, message):
    from fedcore.cli import main

    assert main(["run", *FAST, *CENTRAL, "privacy.noise_multiplier=1.0", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    client = MlflowClient(tracking.tracking_uri)
    assert all(not client.search_runs([e.experiment_id]) for e in client.search_experiments())


@pytest.mark.parametrize(("args", "message"), [
    (["privacy.noise_multiplier=1.0"], "privacy.noise_multiplier: set with privacy.mechanism"
     "=none; allowed: privacy.mechanism central or local"),
    (["privacy.mechanism=local"], "privacy.mechanism: local DP accounts one clip_noise stage"),
    (["privacy.mechanism=local", "privacy.clip_quantile=0.5"],
     "privacy.clip_quantile: adaptive clipping is for privacy.mechanism=central; allowed: unset"),
])
def test_refusals_without_central(tracking, capsys, args, message):
    from fedcore.cli import main

    assert main(["run", *FAST, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_adaptive_clip_moves_towards_the_target_quantile_of_the_norms():
    cfg = _cfg(*CENTRAL, "privacy.noise_multiplier=0.5", "privacy.clip_quantile=0.5",
               "privacy.clip_lr=0.3", "privacy.clip=0.05", "privacy.clip_count_std=1.0")
    ledger = Ledger(cfg, 8, 8)
    gen = torch.Generator().manual_seed(1)
    norms = torch.tensor([0.5, 0.8, 1.2, 2.0])  # median between 0.8 and 1.2
    clips = []
    for r in range(1, 81):
        rows = torch.randn(4, 50, generator=gen)
        ledger.privatize(UpdateBatch(rows / rows.norm(dim=1, keepdim=True) * norms[:, None],
                                     torch.ones(4), round=r))
        clips.append(ledger.clip)
    assert clips[0] > 0.05  # every delta was clipped: the clip grows
    late = np.array(clips[40:])
    assert 0.5 < float(np.median(late)) < 2.0


def test_adaptive_clipping_splits_the_accounted_noise_between_deltas_and_count():
    z, count_std = 1.2, 1.0  # z_delta = (z^-2 - (2 count_std)^-2)^-1/2
    cfg = _cfg("privacy.mechanism=central", "privacy.clip=0.5", f"privacy.noise_multiplier={z}",
               "privacy.clip_quantile=0.5", f"privacy.clip_count_std={count_std}", "rounds=1")
    sim = Simulation(cfg, model=Constant)
    z_delta = (z ** -2 - (2 * count_std) ** -2) ** -0.5
    assert float(sim.privacy_params["dp.delta_noise_multiplier"]) == pytest.approx(z_delta)
    before = sim.params.clone()
    result = sim.run()
    step = (sim.params - before).double()
    assert float(step.std()) == pytest.approx(z_delta * 0.5 / 4, rel=0.02)
    # the round is accounted as one Gaussian mechanism of noise multiplier z
    assert result.history[0]["privacy/epsilon"] == pytest.approx(
        _library_epsilon(z, 0.5, 1, 8 ** -1.1), rel=1e-6)


def test_a_count_noise_that_leaves_none_for_the_deltas_is_refused(tracking, capsys):
    from fedcore.cli import main

    assert main(["run", *FAST, *CENTRAL, "privacy.noise_multiplier=3.0",
                 "privacy.clip_quantile=0.5", "privacy.clip_count_std=1.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "privacy.clip_count_std: 1 leaves no noise for the deltas" in err[0]
