"""The stage chain, error feedback as its own axis, the sampler registry (config side)."""

import numpy as np
import pytest

from fedcore.config import ConfigError
from fedcore.configure import load_config
from fedcore.samplers import Population, build
from fedcore.seeding import numpy_rng


def test_error_feedback_key_of_another_variant_is_one_line_error():
    with pytest.raises(ConfigError) as exc:
        load_config(None, ["method=fedavg_topk", "method.compression.alpha_r=0.3"])
    assert str(exc.value) == (
        "method.compression.alpha_r: acts only with error_feedback=sapef (got 'none'); "
        "allowed keys for topk with error_feedback=none: compressor, k_frac, error_feedback"
    )
    with pytest.raises(ConfigError, match=r"^method.compression.H: acts only with "
                       r"error_feedback=cser \(got 'sapef'\)"):
        load_config(None, ["method=sapef_topk", "method.compression.H=3"])
    with pytest.raises(ConfigError, match=r"^method.compression.levels: unknown key"):
        load_config(None, ["method=ef_topk", "method.compression.levels=3"])
    with pytest.raises(ConfigError, match=r"^method.compression.alpha_r: .*less than or equal"):
        load_config(None, ["method=sapef_topk", "method.compression.alpha_r=2"])


def test_resolved_compression_lists_only_the_knobs_that_act():
    assert load_config(None, ["method=fedavg_topk"]).method.compression == {
        "compressor": "topk", "k_frac": 0.01, "error_feedback": "none"}
    comp = load_config(None, ["method=cser_topk"]).method.compression
    assert set(comp) == {"compressor", "k_frac", "error_feedback", "probe_alpha", "H",
                         "reset_frac"}


def test_default_sampler_and_empty_stages_leave_the_config_hash_alone():
    plain = load_config(None, [])
    same = load_config(None, ["method.sampler={sampler: uniform}", "method.stages=[]"])
    assert same.config_hash() == plain.config_hash()
    assert "sampler" not in same.resolved()["method"]
    assert "stages" not in same.resolved()["method"]


def test_unknown_sampler_and_stage_are_one_line_errors():
    with pytest.raises(ConfigError, match=r"^method.sampler.sampler: unknown 'nope'"):
        load_config(None, ["method.sampler={sampler: nope}"])
    with pytest.raises(ConfigError, match=r"^method.stages\[0\].stage: unknown 'nope'"):
        load_config(None, ["method.stages=[{stage: nope}]"])
    with pytest.raises(ConfigError, match=r"^method.stages: expected a list"):
        load_config(None, ["method.stages=3"])


def test_uniform_sampler_gives_todays_draws():
    pop = Population(seed=7, round=3, num_clients=20, per_round=5, sizes=np.ones(20),
                     local_loss=lambda ids: np.zeros(len(ids)))
    want = np.sort(numpy_rng(7, "sample", 3).choice(20, 5, replace=False))
    assert np.array_equal(build(None).sample(pop), want)


def test_sampling_happens_once_per_round_and_play_round_takes_the_sample():
    from fedcore.simulation import Simulation

    from .conftest import TINY

    sim = Simulation(load_config(None, [*TINY, "rounds=2"]))
    calls = []
    sample = sim.sampler.sample

    def counting(pop):
        calls.append(pop.round)
        return sample(pop)

    sim.sampler.sample = counting
    sim.run()
    assert calls == [1, 2]
    chosen = []
    train_round = sim.engine.train_round

    def recording(rc, sampled, order=None):
        chosen.append(list(sampled))
        return train_round(rc, sampled, order)

    sim.engine.train_round = recording
    sim.play_round(3, sampled=[0, 4, 5])
    assert chosen == [[0, 4, 5]]


def test_checkpoint_without_stage_states_loads_and_a_mismatched_one_is_refused():
    from fedcore.checkpoint import CheckpointError
    from fedcore.simulation import Simulation

    from .conftest import TINY

    sim = Simulation(load_config(None, TINY))
    state = sim.state_dict()
    assert len(state["stages"]) == len(sim.chain.stages)
    old = {k: v for k, v in state.items() if k != "stages"}  # written before the stage chain
    sim.load_state_dict(old, rng=False)
    with pytest.raises(CheckpointError, match="stage states do not match"):
        sim.load_state_dict({**state, "stages": [{}]}, rng=False)
