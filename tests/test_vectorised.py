"""The vectorised engine: same deltas, steps and batches as the sequential one, chunking, choice."""

import math

import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient

from fedcore.core.callbacks.personal import PersonalEvaluation
from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError
from fedcore.core.engines import sequential
from fedcore.core.engines.select import choose_engine
from fedcore.core.engines.vectorised import VectorisedEngine
from fedcore.core.round.probes import run_round
from fedcore.core.round.simulation import Simulation
from fedcore.tracking.runner import run_tracked

from .conftest import TINY

# Dirichlet 0.5 over 6 clients, one epoch of batches of 16: different step counts per client
# and a partial last batch; momentum and weight decay on.
SKEWED = ["dataset.num_clients=6", "clients_per_round=4", "dataset.alpha=0.5", "rounds=2",
          "local.epochs=1", "local.batch_size=16", "local.momentum=0.5",
          "local.weight_decay=0.001", "engine=sequential"]
CASES = {
    "fedavg_cnn_dropout_gaussian_attack": ["model.name=cnn", "clients.byzantine_fraction=0.3",
                                           "clients.attack=gaussian"],
    "fedprox": ["model.name=mlp", "method=fedprox", "method.client.mu=0.1"],
    "fedquad": ["model.name=mlp", "method=fedquad", "method.client.beta=0.3"],
    "quadrupletfl": ["model.name=mlp", "method=quadrupletfl"],
    "tripletfl": ["model.name=mlp", "method=tripletfl", "method.client.beta=2.5"],
    "supconfl": ["model.name=mlp", "method=supconfl"],
    "sapef_start_points": ["model.name=mlp", "method=sapef_topk"],
    "sapef_theory_alpha_per_client": ["model.name=mlp", "method=sapef_topk",
                                      "method.compression.alpha_schedule=theory"],
    "fednova_accumulation_norm": ["model.name=mlp", "method=fednova"],
    "qfedavg_loss_before": ["model.name=mlp", "method=qfedavg"],
    "fedoui_oui": ["model.name=mlp", "method=fedoui"],
}


# float32 equivalence bound. The engines run the same SGD steps through different kernels (a
# batched, vmapped convolution or matmul against a single one), so every step rounds differently,
# about u = 2**-24 relative per operation and kernel-dependent. Each step's difference is carried
# to the end of training, so the gap grows with the local steps T: ||delta_vec - delta_seq|| =
# c * T * u * ||delta_seq||, checked on the whole delta, not per coordinate. Measured (x86-64
# AVX-512, 2 threads): smooth rounding gives c < 1 (6.4e-7 at T=19); a rounding difference that
# flips a ReLU or max-pool choice gives c = 46 (5.3e-5: the CNN case, T=19, one conv1 filter,
# 16 coordinates off by up to 1.9e-5; per coordinate that failed rtol=1e-4, atol=2e-6).
# Other kernels on the same CPU (ATEN_CPU_CAPABILITY=avx2 or default, MKL and oneDNN held to
# AVX2 or SSE4.1; or one thread): at most 6.6e-7 (no flip), and 5.3e-5 with one thread.
# c = 512 is 11x the worst seen. A wrong computation moves a client's delta by 1.7e-2 or more,
# 40x over the bound. Breakages tried in fedcore/core/engines, each failing here (first failing
# client's relative difference; bound 4e-4 at T=13): dropout masks not replayed from the
# client's seed 0.67 (CNN); one middle step skipped 0.24 (CNN), 0.10 (FedProx); the last step
# dropped 0.085; weight decay off 0.064 (CNN), 0.017 (FedProx), 0.019 (TripletFL); momentum off
# 0.37; proximal term off 0.042; padded rows counted in the loss mean 0.063 (QuadrupletFL);
# train loss not weighted by batch size 0.94 (loss check). Chunk test: a momentum buffer
# leaking into the next chunk 0.13. End to end: momentum off 0.26 against a bound of 4.2e-3.
# Exactness is shown in float64 (test_in_float64_the_engines_agree_to_rounding, 1e-12).
FLOAT32_SLACK = 512
UNIT_ROUNDOFF = 2.0**-24


def float32_bound(steps: int) -> float:
    """Largest relative difference of two float32 runs of ``steps`` SGD steps (see above)."""
    return FLOAT32_SLACK * steps * UNIT_ROUNDOFF


def assert_same_float32_run(got: torch.Tensor, want: torch.Tensor, steps: int, what: str) -> None:
    """``got`` equals ``want`` up to float32 rounding grown over ``steps`` SGD steps."""
    err = float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30))
    bound = float32_bound(steps)
    assert err <= bound, f"{what}: relative difference {err:.2e} > {bound:.2e} ({steps} steps)"


def _both(sim: Simulation, round: int, chunk: int | None = None):
    sampled = list(map(int, sim.sample_clients(round)))
    rc = sim.round_context(round)
    sim.chain.begin_round(rc, sampled)
    seq = sequential.train_round(rc, sampled)
    engine = VectorisedEngine(sim.model, sim.layout, sim.data.in_shape, sim.device, chunk)
    vec = engine.train_round(rc, sampled)
    assert engine.last_path == "vectorised" and engine.fallback is None  # not the fallback
    return sampled, seq, vec, engine


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_vectorised_deltas_equal_sequential(case):
    sim = Simulation(load_config(None, [*SKEWED, *CASES[case]]))
    round = 1
    if case.startswith("sapef"):  # round 2 starts from w + alpha * residual per client
        run_round(sim, 1)
        round = 2
    sampled, seq, vec, _ = _both(sim, round)
    steps = [seq[c].num_steps for c in sampled]
    assert len(set(steps)) > 1
    assert any(sim.data.clients[c].num_train % 16 for c in sampled)
    for c in sampled:
        s, v = seq[c], vec[c]
        assert v.num_steps == s.num_steps and v.num_samples == s.num_samples
        assert_same_float32_run(v.delta, s.delta, s.num_steps, f"{case} client {c} delta")
        assert_same_float32_run(v.train_loss, s.train_loss, s.num_steps, f"{case} client {c} loss")
        assert v.stats.keys() == s.stats.keys()
        for key in s.stats:
            assert v.stats[key] == pytest.approx(s.stats[key], rel=float32_bound(s.num_steps)), key
    if case.startswith("sapef"):
        assert any("ef_residual" in sim.store[c] for c in sampled)


@pytest.mark.slow
def test_chunks_of_two_give_the_same_deltas():
    sim = Simulation(load_config(None, [*SKEWED, "model.name=mlp", "clients_per_round=5"]))
    sampled, _, whole, one = _both(sim, 1)
    _, _, chunked, two = _both(sim, 1, chunk=2)
    assert one.last_chunks == [5] and two.last_chunks == [2, 2, 1]
    for c in sampled:  # other chunk sizes are other vmapped kernels: float32 tolerance
        steps = whole[c].num_steps
        assert_same_float32_run(chunked[c].delta, whole[c].delta, steps, f"client {c}")


@pytest.mark.slow
def test_end_to_end_metrics_match_and_vectorised_is_deterministic():
    over = [*TINY, "local.momentum=0.5", "local.epochs=2"]
    seq = Simulation(load_config(None, [*over, "engine=sequential"]))
    assert seq.engine_name == "sequential"
    start = seq.params.clone()
    a = seq.run()
    vec = Simulation(load_config(None, [*over, "engine=vectorised"]))
    assert vec.engine_name == "vectorised"
    b = vec.run()
    c = Simulation(load_config(None, [*over, "engine=vectorised"])).run()
    assert vec.engine_name == "vectorised" and vec.engine.last_path == "vectorised"
    # float32 across engines: the bound of the longest local path (every round's longest client)
    local = seq.cfg.local
    steps = seq.cfg.rounds * local.epochs * max(
        math.ceil(k.num_train / local.batch_size) for k in seq.data.clients)
    assert_same_float32_run(vec.params - start, seq.params - start, steps, "global model")
    # an accuracy moves by whole test samples: one sample may cross a decision boundary
    one_test = 1 / len(seq.data.x_test)
    one_client = max(1 / (len(k.y_test) * len(seq.data.clients)) for k in seq.data.clients)
    for ha, hb, hc in zip(a.history, b.history, c.history, strict=True):
        for key in ("test/loss", "train/loss"):
            assert hb[key] == pytest.approx(ha[key], rel=float32_bound(steps)), key
        assert abs(hb["test/accuracy"] - ha["test/accuracy"]) <= one_test + 1e-6
        assert abs(hb["clients/accuracy_mean"] - ha["clients/accuracy_mean"]) <= one_client + 1e-6
        assert {k: v for k, v in hb.items() if k != "agg/seconds"} == {
            k: v for k, v in hc.items() if k != "agg/seconds"}


@pytest.fixture
def moon_not_vectorisable(monkeypatch):
    """MOON as an objective without a vectorised form (every shipped objective has one)."""
    from fedcore.core.clients.moon import MoonClient

    monkeypatch.setattr(MoonClient, "vectorisable", False)
    monkeypatch.setattr(MoonClient, "not_vectorised", "its loss reads per-client host state",
                        raising=False)


@pytest.mark.parametrize("over, key", [
    (["model.name=resnet20", "model.norm=batch"], "model.norm='batch'"),
    (["method=moon"], "method.client.algorithm='moon'"),
])
def test_explicit_vectorised_with_unsupported_setting_is_a_one_line_config_error(
    over, key, moon_not_vectorisable
):
    with pytest.raises(ConfigError) as err:
        load_config(None, [*over, "engine.backend=vectorised"])
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("engine.backend:") and key in msg
    assert "allowed:" in msg


def test_the_engine_is_chosen_once_by_the_composition_root(monkeypatch):
    import fedcore.core.engines.select as select

    calls = []
    real = select.choose_engine
    monkeypatch.setattr(select, "choose_engine", lambda cfg: calls.append(cfg) or real(cfg))
    cfg = load_config(None, [*TINY, "method=moon", "engine.backend=auto"])
    assert calls == []  # config validation checks the value, it does not choose
    assert Simulation(cfg).engine_name == "sequential"  # auto on cpu
    assert len(calls) == 1


def test_auto_falls_back_with_a_reason_and_picks_vectorised_where_supported(monkeypatch):
    for method in ("moon", "ditto"):
        assert choose_engine(load_config(None, [f"method={method}"]))[0] == "vectorised"
    name, reason = choose_engine(load_config(None, ["model.name=resnet20", "model.norm=batch"]))
    assert name == "sequential" and "BatchNorm" in reason
    assert choose_engine(load_config(None, ["model.name=resnet20", "model.norm=group"]))[0] == (
        "vectorised")
    moon = Simulation(load_config(None, [*TINY, "method=moon", "engine=vectorised"]))
    assert moon.engine_name == "vectorised"
    from fedcore.core.clients.moon import MoonClient

    monkeypatch.setattr(MoonClient, "vectorisable", False)
    monkeypatch.setattr(MoonClient, "not_vectorised", "its loss reads per-client host state",
                        raising=False)
    sim = Simulation(load_config(None, [*TINY, "method=moon"]))
    assert sim.engine_name == "sequential" and "moon" in sim.engine_reason
    assert "per-client host state" in sim.engine_reason  # the objective's own reason
    cpu = Simulation(load_config(None, [*TINY, "device=cpu"]))  # auto: vectorised on CUDA only
    assert cpu.engine_name == "sequential" and "auto on cpu" in cpu.engine_reason
    assert "measured slower" in cpu.engine_reason and "MLP 0.54-0.59x" in cpu.engine_reason
    forced = Simulation(load_config(None, [*TINY, "device=cpu", "engine=vectorised"]))
    assert forced.engine_name == "vectorised"
    with pytest.raises(ConfigError, match="engine.backend"):
        load_config(None, ["engine=threads"])


@pytest.mark.slow
def test_engine_and_fallback_reason_are_recorded_as_mlflow_tags(tracking, moon_not_vectorisable):
    run_id, _ = run_tracked(load_config(None, [*TINY, "rounds=1", "method=moon"]))
    tags = MlflowClient(tracking.tracking_uri).get_run(run_id).data.tags
    assert tags["engine"] == "sequential" and "moon" in tags["engine_reason"]


def test_auto_on_cpu_reason_is_the_measurement_and_no_mlp_reason_speaks_of_convolutions():
    mlp = Simulation(load_config(None, [*TINY, "device=cpu", "engine=auto"]))
    assert mlp.engine_name == "sequential" and "auto on cpu" in mlp.engine_reason
    assert "convolution" not in mlp.engine_reason and "measured slower" in mlp.engine_reason
    cnn = Simulation(load_config(None, [*TINY, "device=cpu", "engine=auto", "model.name=cnn"]))
    assert cnn.engine_name == "sequential" and "CNN 0.59-0.86x" in cnn.engine_reason


def test_a_runtime_fallback_is_what_the_engine_tag_says(tracking, monkeypatch, caplog):
    """A vectorised engine that trains sequentially (here: forced) is tagged sequential, with
    the reason, on the simulation and on the MLflow run; it used to stay 'vectorised'."""
    import fedcore.core.engines.vectorised as vectorised

    monkeypatch.setattr(vectorised, "algo_blocker", lambda algo: "a forced fallback")
    cfg = load_config(None, [*TINY, "rounds=2", "engine=vectorised"])
    sim = Simulation(cfg)
    assert sim.engine_name == "vectorised"
    run_round(sim, 1)
    assert sim.engine.last_path == "sequential" and sim.engine_name == "sequential"
    assert "fell back" in sim.engine_reason and "a forced fallback" in sim.engine_reason
    run_id, _ = run_tracked(cfg)
    tags = MlflowClient(tracking.tracking_uri).get_run(run_id).data.tags
    assert tags["engine"] == "sequential" and "a forced fallback" in tags["engine_reason"]


def test_a_vectorised_loss_cannot_read_one_clients_context():
    """The vmapped loss is traced once per chunk: reading ctx.data (or state, generator,
    start_params) raises instead of silently giving every client the first client's."""
    from fedcore.core.clients.fedavg import FedAvgClient

    class ReadsItsData(FedAvgClient):
        vectorisable = True

        def loss(self, b):
            return super().loss(b) * b.ctx.data.num_train

    sim = Simulation(load_config(None, [*TINY, "rounds=1"]))
    sim.client_algo = ReadsItsData(sim.client_algo.hp)
    sampled = list(map(int, sim.sample_clients(1)))
    engine = VectorisedEngine(sim.model, sim.layout, sim.data.in_shape, sim.device)
    with pytest.raises(RuntimeError, match=r"ctx\.data, which differs per client"):
        engine.train_round(sim.round_context(1), sampled)
    sequential.train_round(sim.round_context(1), sampled)  # one client at a time: allowed


def test_engine_shorthand_combines_with_the_chunk_key():
    cfg = load_config(None, ["engine=vectorised", "engine.max_clients_per_chunk=2"])
    assert cfg.engine.backend == "vectorised" and cfg.engine.max_clients_per_chunk == 2
    with pytest.raises(ConfigError, match="engine.max_clients_per_chunk"):
        load_config(None, ["engine.max_clients_per_chunk=0"])


@pytest.mark.parametrize("over", [
    pytest.param(["model.name=cnn", "local.steps=6", "local.batch_size=64"],
                 marks=pytest.mark.slow),
    ["model.name=mlp", "method=fedquad", "local.steps=3", "local.batch_size=64",
     "dataset.alpha=0.05"],  # includes a CE-only client (one class)
    ["model.name=mlp", "method=supconfl", "local.steps=4"],  # partial batches: masked SupCon
])
def test_in_float64_the_engines_agree_to_rounding(over):
    """float32 rounding can flip a ReLU/hinge after a few steps; in float64 nothing flips."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        sim = Simulation(load_config(None, [*SKEWED, *over]))
        for c in sim.data.clients:
            c.x_train = c.x_train.double()
        sampled, seq, vec, _ = _both(sim, 1)
    finally:
        torch.set_default_dtype(default)
    if "method=fedquad" in over:
        assert any(seq[c].stats["fedquad/ce_only_clients"] for c in sampled)
    for c in sampled:
        assert seq[c].delta.dtype == torch.float64
        assert torch.allclose(vec[c].delta, seq[c].delta, rtol=0, atol=1e-12)


def test_a_new_objective_runs_vectorised_from_its_one_definition():
    """An objective written once (loss + mask helpers) is vmapped with no engine edits and
    equals the sequential engine in float64 (here: CE with label smoothing and a prox term)."""
    from fedcore.core.clients.base import batch_mean
    from fedcore.core.clients.fedprox import FedProxClient
    from fedcore.core.records.plan import Batch

    class Smoothed(FedProxClient):
        vectorisable = True

        def loss(self, b: Batch):
            per_row = torch.nn.functional.cross_entropy(
                b.model(b.x), b.y, reduction="none", label_smoothing=0.1
            )
            return batch_mean(per_row, None if b.mask is None else b.mask.rows)

    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        sim = Simulation(load_config(None, [*SKEWED, "model.name=mlp", "method=fedprox",
                                            "method.client.mu=0.1", "local.steps=4"]))
        sim.client_algo = Smoothed(sim.client_algo.hp)
        for c in sim.data.clients:
            c.x_train = c.x_train.double()
        sampled, seq, vec, engine = _both(sim, 1)
    finally:
        torch.set_default_dtype(default)
    assert engine.last_chunks  # trained vectorised, not by the sequential fallback
    for c in sampled:
        assert torch.allclose(vec[c].delta, seq[c].delta, rtol=0, atol=1e-12)


def test_a_plan_with_a_shift_and_a_follow_up_vectorises_with_no_engine_edits():
    """An objective that describes its work as a plan (per-client shift, proximal mu, a
    follow-up pass kept in its state) and adds stats in ``finish`` gets the same deltas,
    stats and follow-up models from both engines in float64."""
    from dataclasses import replace

    from fedcore.core.clients.base import minibatches
    from fedcore.core.clients.fedavg import FedAvgClient
    from fedcore.core.records.plan import FollowUp

    def keep(state, params, buffers):
        state["second"] = params

    class Planned(FedAvgClient):
        def plan(self, ctx):
            plan = super().plan(ctx)
            shift = torch.full_like(ctx.global_params, 0.01 * (ctx.data.client_id + 1))
            batches = list(minibatches(ctx.data.num_train, ctx.schedule, ctx.generator))
            follow = FollowUp(ctx.global_params, {}, ctx.schedule, batches, 0.2, self.loss, keep)
            return replace(plan, shift=shift, mu=0.1, follow_up=follow)

        def finish(self, done):
            done.update.stats["planned/steps_clients"] = float(len(done.plan.batches))

    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        sim = Simulation(load_config(None, [*SKEWED, "model.name=mlp", "local.steps=3"]))
        sim.client_algo = Planned(sim.client_algo.hp)
        for c in sim.data.clients:
            c.x_train = c.x_train.double()
        sampled = list(map(int, sim.sample_clients(1)))
        rc = sim.round_context(1)
        seq = sequential.train_round(rc, sampled)
        second = {c: sim.store[c].pop("second") for c in sampled}
        engine = VectorisedEngine(sim.model, sim.layout, sim.data.in_shape, sim.device)
        vec = engine.train_round(rc, sampled)
    finally:
        torch.set_default_dtype(default)
    assert engine.last_path == "vectorised" and sum(engine.last_chunks) == 2 * len(sampled)
    for c in sampled:
        assert vec[c].stats == seq[c].stats and seq[c].stats["planned/steps_clients"] == 3.0
        assert torch.allclose(vec[c].delta, seq[c].delta, rtol=0, atol=1e-12)
        assert not torch.allclose(second[c], sim.params + seq[c].delta, atol=1e-6)
        assert torch.allclose(sim.store[c]["second"], second[c], rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", ["scaffold", "scafcom_topk"])
def test_control_variate_clients_vectorise_exactly(method):
    """SCAFFOLD's drift correction is a gradient shift of the shared SGD: after two rounds
    (c, c_i non-zero) both engines give the same deltas and extra uplink vectors in float64."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        over = [o for o in SKEWED if not o.startswith("local.momentum")]
        sim = Simulation(load_config(None, [*over, "model.name=mlp", f"method={method}",
                                            "local.steps=4", "dataset.num_clients=6"]))
        for c in sim.data.clients:
            c.x_train = c.x_train.double()
        run_round(sim, 1)
        run_round(sim, 2)
        sampled, seq, vec, engine = _both(sim, 3)
    finally:
        torch.set_default_dtype(default)
    assert engine.last_chunks and float(sim.aggregator.c.norm()) > 0
    for c in sampled:
        assert torch.allclose(vec[c].delta, seq[c].delta, rtol=0, atol=1e-12)
        for name, v in seq[c].extras.items():
            assert torch.allclose(vec[c].extras[name], v, rtol=0, atol=1e-12), name


def _float64_sims(over: list[str], engines=("sequential", "vectorised")) -> dict[str, Simulation]:
    """One float64 simulation per engine (the digits cast to float64): nothing flips."""
    sims = {}
    for name in engines:
        sim = Simulation(load_config(None, [*over, f"engine={name}"]))
        assert sim.engine_name == name
        for c in sim.data.clients:
            c.x_train, c.x_test = c.x_train.double(), c.x_test.double()
        sim.data.x_test = sim.data.x_test.double()  # SA-PEF's mismatch probe reads it
        sims[name] = sim
    return sims


@pytest.mark.parametrize("model", [
    "mlp", pytest.param("cnn", marks=pytest.mark.slow),  # the CNN has dropout
])
def test_moon_vectorises_exactly_over_rounds(model, caplog):
    """MOON's shared global model and per-client stacked previous models: three rounds (first
    participants beside returning ones) equal the sequential engine in float64, global model
    and every client's previous model."""
    over = [o for o in SKEWED if o != "engine=sequential"]
    over += [f"model.name={model}", "method=moon", "method.client.out_dim=16",
             "method.client.mu=2.0", "local.steps=4"]
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        sims = _float64_sims(over)
        seq, vec = sims["sequential"], sims["vectorised"]
        groups = []
        with caplog.at_level("INFO", logger="fedcore"):
            for r in (1, 2, 3):
                run_round(seq, r)
                run_round(vec, r)
                groups.append(len(vec.engine.last_chunks))
                assert torch.allclose(vec.params, seq.params, rtol=0, atol=1e-12), r
    finally:
        torch.set_default_dtype(default)
    assert "training sequentially" not in caplog.text
    assert groups[0] == 1 and max(groups) == 2  # first-timers (CE only) train apart
    assert not torch.allclose(seq.params, vec.params.new_zeros(()), atol=1e-3)
    for k in range(6):
        if "moon_prev" in seq.store[k]:
            want = seq.store[k]["moon_prev"]
            assert torch.allclose(vec.store[k]["moon_prev"], want, rtol=0, atol=1e-12), k


@pytest.mark.parametrize("model, inner", [
    ("mlp", []),
    pytest.param("cnn", [], marks=pytest.mark.slow),  # the CNN has dropout
    pytest.param("mlp", ["method.client.inner={algorithm: moon, out_dim: 16}"],
                 marks=pytest.mark.slow),  # MOON's frozen models inside Ditto
])
def test_ditto_vectorises_exactly_with_its_personal_models(model, inner, caplog):
    """Ditto's personal models, stacked per client and pulled to theta_t through the shared
    SGD (momentum, weight decay): three rounds equal the sequential engine in float64, the
    global model, every personal model and the personal accuracies."""
    over = [o for o in SKEWED if o != "engine=sequential"]
    over += [f"model.name={model}", "method=ditto", "method.client.lam=0.5",
             "method.client.personal_lr=0.03", "method.client.personal_steps=5", "local.steps=4",
             *inner]
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        sims = _float64_sims(over)
        seq, vec = sims["sequential"], sims["vectorised"]
        with caplog.at_level("INFO", logger="fedcore"):
            for r in (1, 2, 3):
                run_round(seq, r)
                run_round(vec, r)
                assert sum(vec.engine.last_chunks) == 8  # global models, then personal ones
                assert torch.allclose(vec.params, seq.params, rtol=0, atol=1e-12), r
        personal = {name: PersonalEvaluation(s.client_algo).accuracy(s)
                    for name, s in sims.items()}
    finally:
        torch.set_default_dtype(default)
    assert "training sequentially" not in caplog.text
    trained = [k for k in range(6) if "ditto_personal" in seq.store[k]]
    assert len(trained) == 6
    for k in trained:
        want = seq.store[k]["ditto_personal"]
        assert not torch.allclose(want, seq.params, atol=1e-3)
        assert torch.allclose(vec.store[k]["ditto_personal"], want, rtol=0, atol=1e-12), k
    assert np.array_equal(personal["vectorised"], personal["sequential"], equal_nan=True)


# SA-PEF's paper protocol (configs/sweeps/main.yaml, protocol sapef) at unit scale: fixed local
# steps, warm-up then cosine lr across rounds, momentum, weight decay, Top-k with error feedback
# and the step-ahead start w - alpha e from round 2 on.
SAPEF_PROTOCOL = ["model.name=mlp", "method=sapef_topk", "dataset.num_clients=6",
                  "clients_per_round=3", "dataset.alpha=0.1", "rounds=5", "local.steps=5",
                  "local.batch_size=64", "local.lr=0.1", "local.lr_schedule=warmup_cosine",
                  "local.lr_min=0.003", "local.warmup_rounds=2", "local.momentum=0.9",
                  "local.weight_decay=0.0005"]


def test_sapef_protocol_rounds_agree_between_engines_in_float64():
    """Five rounds of the SA-PEF protocol: global model, every client's error-feedback residual
    and the lr of each round equal the sequential engine in float64 (float32 runs of this
    protocol drift apart over ~50 rounds from rounding alone, docs/benchmarks/vectorised.md)."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        sims = _float64_sims(SAPEF_PROTOCOL)
        seq, vec = sims["sequential"], sims["vectorised"]
        lrs = []
        for r in range(1, 6):
            lrs.append(seq.round_context(r).schedule.lr)
            run_round(seq, r)
            run_round(vec, r)
            assert vec.engine.last_path == "vectorised"
            assert torch.allclose(vec.params, seq.params, rtol=0, atol=1e-12), r
    finally:
        torch.set_default_dtype(default)
    assert len(set(lrs)) == 5 and lrs[1] == max(lrs)  # warm-up, then cosine decay
    residuals = [k for k in range(6) if "ef_residual" in seq.store[k]]
    assert residuals
    for k in residuals:
        want = seq.store[k]["ef_residual"]
        assert torch.allclose(vec.store[k]["ef_residual"], want, rtol=0, atol=1e-12), k
