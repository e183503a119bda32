"""The clip-and-Gaussian-noise client stage (docs/methods/clip_noise.md)."""

import pytest
import torch

from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError
from fedcore.core.round.probes import run_round
from fedcore.core.round.simulation import Simulation
from fedcore.core.stages.clip_noise import clip_and_noise

from .conftest import TINY


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_clip_bounds_the_norm_and_keeps_short_vectors():
    v = torch.arange(1.0, 11.0)
    out = clip_and_noise(v, 2.0, 0.0, _gen())
    assert torch.isclose(out.norm(), torch.tensor(2.0))
    assert torch.allclose(out / out.norm(), v / v.norm())  # direction kept
    short = torch.full((4,), 0.1)
    assert torch.equal(clip_and_noise(short, 2.0, 0.0, _gen()), short)


def test_noise_std_is_sigma_times_clip():
    out = clip_and_noise(torch.zeros(40000), 0.5, 3.0, _gen())
    assert abs(float(out.std()) - 1.5) < 0.03
    assert abs(float(out.mean())) < 0.03


def _sim(clip, sigma):
    stages = f"method.stages=[{{stage: clip_noise, clip: {clip}, sigma: {sigma}}}]"
    return Simulation(load_config(None, [*TINY, "rounds=1", stages]))


def test_every_sent_delta_is_clipped_in_the_round():
    sim = _sim(0.01, 0.0)
    seen = []
    aggregate = sim.aggregator.aggregate

    def recording(batch):
        seen.append(batch.deltas.norm(dim=1))
        return aggregate(batch)

    sim.aggregator.aggregate = recording
    run_round(sim, 1)
    norms = seen[0]
    assert len(norms) == 3 and bool((norms <= 0.01 + 1e-6).all())
    assert bool((norms > 0.0099).all())  # local training moves further than 0.01


def test_noisy_run_is_reproducible_and_noisy():
    a, b, quiet = _sim(0.05, 1.0), _sim(0.05, 1.0), _sim(0.05, 0.0)
    for s in (a, b, quiet):
        run_round(s, 1)
    assert torch.equal(a.params, b.params)
    assert not torch.equal(a.params, quiet.params)


def test_bad_setting_is_a_one_line_error():
    with pytest.raises(ConfigError, match=r"^method.stages\[0\].clip: .*greater than 0"):
        load_config(None, ["method.stages=[{stage: clip_noise, clip: 0}]"])
    with pytest.raises(ConfigError, match=r"^method.stages\[0\].C: unknown key for stage "
                       r"clip_noise; allowed: stage, clip, sigma"):
        load_config(None, ["method.stages=[{stage: clip_noise, C: 1}]"])
