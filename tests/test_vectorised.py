"""The vectorised engine: same deltas, steps and batches as the sequential one, chunking, choice."""

import pytest
import torch
from mlflow.tracking import MlflowClient

from fedcore.config import ConfigError, load_config
from fedcore.engines import sequential
from fedcore.engines.select import choose_engine
from fedcore.engines.vectorised import VectorisedEngine
from fedcore.simulation import Simulation
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
    "sapef_start_points": ["model.name=mlp", "method=sapef_topk"],
    "sapef_theory_alpha_per_client": ["model.name=mlp", "method=sapef_topk",
                                      "method.compression.alpha_schedule=theory"],
    "fednova_accumulation_norm": ["model.name=mlp", "method=fednova"],
    "qfedavg_loss_before": ["model.name=mlp", "method=qfedavg"],
    "fedoui_oui": ["model.name=mlp", "method=fedoui"],
}


def _both(sim: Simulation, round: int, chunk: int | None = None):
    sampled = list(map(int, sim.sample_clients(round)))
    sim.compressor.begin_round(round, sim.schedule(round))
    seq = sequential.train_round(sim, round, sampled)
    engine = VectorisedEngine(sim)
    engine.max_chunk = chunk
    vec = engine.train_round(sim, round, sampled)
    return sampled, seq, vec, engine


@pytest.mark.parametrize("case", list(CASES))
def test_vectorised_deltas_equal_sequential(case):
    sim = Simulation(load_config(None, [*SKEWED, *CASES[case]]))
    round = 1
    if case.startswith("sapef"):  # round 2 starts from w + alpha * residual per client
        sim.run_round(1)
        round = 2
    sampled, seq, vec, _ = _both(sim, round)
    steps = [seq[c].num_steps for c in sampled]
    assert len(set(steps)) > 1
    assert any(sim.data.clients[c].num_train % 16 for c in sampled)
    for c in sampled:
        s, v = seq[c], vec[c]
        assert v.num_steps == s.num_steps and v.num_samples == s.num_samples
        assert torch.allclose(v.delta, s.delta, rtol=1e-4, atol=2e-6), case
        assert torch.allclose(v.train_loss, s.train_loss, rtol=1e-5), case
        assert v.stats.keys() == s.stats.keys()
        for key in s.stats:
            assert v.stats[key] == pytest.approx(s.stats[key], rel=1e-5), key
    if case.startswith("sapef"):
        assert any("ef_residual" in sim.store[c] for c in sampled)


def test_chunks_of_two_give_the_same_deltas():
    sim = Simulation(load_config(None, [*SKEWED, "model.name=mlp", "clients_per_round=5"]))
    sampled, _, whole, one = _both(sim, 1)
    _, _, chunked, two = _both(sim, 1, chunk=2)
    assert one.last_chunks == [5] and two.last_chunks == [2, 2, 1]
    for c in sampled:
        assert torch.allclose(whole[c].delta, chunked[c].delta, rtol=1e-6, atol=1e-7)


def test_end_to_end_metrics_match_and_vectorised_is_deterministic():
    over = [*TINY, "local.momentum=0.5", "local.epochs=2"]
    seq = Simulation(load_config(None, [*over, "engine=sequential"]))
    assert seq.engine_name == "sequential"
    a = seq.run()
    vec = Simulation(load_config(None, [*over, "engine=vectorised"]))
    assert vec.engine_name == "vectorised"
    b = vec.run()
    c = Simulation(load_config(None, [*over, "engine=vectorised"])).run()
    for ha, hb, hc in zip(a.history, b.history, c.history, strict=True):
        for key in ("test/accuracy", "test/loss", "train/loss", "clients/accuracy_mean"):
            assert hb[key] == pytest.approx(ha[key], rel=1e-4, abs=1e-5), key
        assert {k: v for k, v in hb.items() if k != "agg/seconds"} == {
            k: v for k, v in hc.items() if k != "agg/seconds"}


@pytest.mark.parametrize("over, key", [
    (["model.name=resnet20", "model.norm=batch"], "model.norm='batch'"),
    (["method=moon"], "method.client.algorithm='moon'"),
])
def test_explicit_vectorised_with_unsupported_setting_is_a_one_line_config_error(over, key):
    with pytest.raises(ConfigError) as err:
        load_config(None, [*over, "engine.backend=vectorised"])
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("engine.backend:") and key in msg
    assert "allowed:" in msg


def test_auto_falls_back_with_a_reason_and_picks_vectorised_where_supported():
    assert choose_engine(load_config(None, ["method=ditto"]))[0] == "sequential"
    name, reason = choose_engine(load_config(None, ["model.name=resnet20", "model.norm=batch"]))
    assert name == "sequential" and "BatchNorm" in reason
    assert choose_engine(load_config(None, ["model.name=resnet20", "model.norm=group"]))[0] == (
        "vectorised")
    sim = Simulation(load_config(None, [*TINY, "method=supconfl"]))
    assert sim.engine_name == "sequential" and "supconfl" in sim.engine_reason
    cpu = Simulation(load_config(None, [*TINY, "device=cpu"]))  # auto: vectorised on CUDA only
    assert cpu.engine_name == "sequential" and "auto on cpu" in cpu.engine_reason
    forced = Simulation(load_config(None, [*TINY, "device=cpu", "engine=vectorised"]))
    assert forced.engine_name == "vectorised"
    with pytest.raises(ConfigError, match="engine.backend"):
        load_config(None, ["engine=threads"])


def test_engine_and_fallback_reason_are_recorded_as_mlflow_tags(tracking):
    run_id, _ = run_tracked(load_config(None, [*TINY, "rounds=1", "method=moon"]))
    tags = MlflowClient(tracking.tracking_uri).get_run(run_id).data.tags
    assert tags["engine"] == "sequential" and "moon" in tags["engine_reason"]


def test_engine_shorthand_combines_with_the_chunk_key():
    cfg = load_config(None, ["engine=vectorised", "engine.max_clients_per_chunk=2"])
    assert cfg.engine.backend == "vectorised" and cfg.engine.max_clients_per_chunk == 2
    with pytest.raises(ConfigError, match="engine.max_clients_per_chunk"):
        load_config(None, ["engine.max_clients_per_chunk=0"])


@pytest.mark.parametrize("over", [
    ["model.name=cnn", "local.steps=6", "local.batch_size=64"],
    ["model.name=mlp", "method=fedquad", "local.steps=3", "local.batch_size=64",
     "dataset.alpha=0.05"],  # includes a CE-only client (one class)
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
