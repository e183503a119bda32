"""Federations as they are (issue 48): clients that are not always there, train at their own
speed and report late on a simulated clock (``system``), and FedBuff's buffered asynchronous
aggregation on that clock."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedcore.core.callbacks import Callback
from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError
from fedcore.core.records.aggregate import Aggregate, UpdateBatch
from fedcore.core.records.run import RoundRecord, RoundVerdict
from fedcore.core.round.simulation import Simulation
from fedcore.core.system import profile

TINY = ["model.name=mlp", "dataset.num_clients=8", "local.steps=4", "local.batch_size=8"]


def sim(*overrides: str) -> Simulation:
    return Simulation(load_config(None, [*TINY, *overrides]))


def record_batches(s: Simulation) -> list[UpdateBatch]:
    """The batches the rule of ``s`` receives, in order (the rule itself still runs)."""
    seen: list[UpdateBatch] = []
    rule = s.aggregator.aggregate

    def recording(batch: UpdateBatch) -> Aggregate:
        seen.append(batch)
        return rule(batch)

    s.aggregator.aggregate = recording  # type: ignore[method-assign]
    return seen


def column(history: list[dict[str, float]], key: str) -> list[float]:
    return [h[key] for h in history]


def test_availability_one_half_aggregates_about_half_the_clients_and_the_clock_runs():
    s = sim("rounds=12", "clients_per_round=8", "system.availability=probability",
            "system.available_p=0.5", "system.link_s=2")
    history = s.run().history
    reported = column(history, "participation/reported")
    assert reported == column(history, "participation/available")  # every available one
    assert 2.5 <= float(np.mean(reported)) <= 5.5 and max(reported) < 8
    clock = column(history, "time/simulated_s")
    assert all(b > a for a, b in zip(clock, clock[1:], strict=False)) and clock[0] == 2 + 4


def test_without_a_system_block_no_clock_is_recorded():
    history = sim("rounds=1", "clients_per_round=4").run().history
    assert not [k for k in history[0] if k.startswith(("time/", "participation/"))]


def test_partial_work_under_a_deadline_reaches_fednova_as_its_step_counts():
    s = sim("rounds=2", "clients_per_round=6", "method=fednova", "system.speed=uniform",
            "system.speed_spread=3", "system.link_s=1", "system.deadline_s=9",
            "system.late=partial")
    batches = record_batches(s)
    history = s.run().history
    p = s.system.profile
    assert p is not None
    counts = []
    for batch in batches:
        expected = [min(4, math.floor((9 - 1) / p.step_s[k])) for k in batch.client_ids.tolist()]
        assert batch.num_steps.tolist() == expected
        # FedNova's ||a_k||_1 of plain SGD is the steps taken
        assert batch.stats["accumulation_norm"].tolist() == [float(e) for e in expected]
        counts += expected
    assert min(counts) < 4 and max(counts) == 4  # some cut short, some complete
    assert sum(column(history, "participation/late")) > 0
    assert column(history, "time/simulated_s") == [9.0, 18.0]  # the deadline ends each round


def test_partial_work_is_the_same_on_the_vectorised_engine():
    args = ("rounds=2", "clients_per_round=6", "method=fednova", "system.speed=uniform",
            "system.speed_spread=3", "system.link_s=1", "system.deadline_s=9",
            "system.late=partial")
    steps = []
    for engine in ("sequential", "vectorised"):
        s = sim(*args, f"engine={engine}")
        batches = record_batches(s)
        s.run()
        assert s.engine_name == engine
        steps.append([(b.client_ids.tolist(), b.num_steps.tolist()) for b in batches])
    assert steps[0] == steps[1] and min(min(n) for _, n in steps[0]) < 4


def test_late_clients_are_dropped_by_default():
    s = sim("rounds=2", "clients_per_round=6", "system.speed=uniform", "system.speed_spread=3",
            "system.deadline_s=8")
    batches = record_batches(s)
    history = s.run().history
    p = s.system.profile
    assert p is not None
    for batch, h in zip(batches, history, strict=True):
        ids = batch.client_ids.tolist()
        assert all(4 * p.step_s[k] <= 8 for k in ids) and batch.num_steps.tolist() == [4] * len(ids)
        assert h["participation/reported"] == len(ids) == 6 - h["participation/late"]
    assert sum(column(history, "participation/late")) > 0


def test_a_sampler_draws_only_available_clients_even_when_fewer_than_its_candidates():
    s = sim("rounds=3", "clients_per_round=3", "method.sampler={sampler: power_of_choice, d: 6}",
            "system.availability=probability", "system.available_p=0.3")
    p = s.system.profile
    assert p is not None
    for r in (1, 2, 3):
        ids = s.sample_clients(r)
        available = np.flatnonzero(p.available(s.system.clock, r, 0))
        assert set(ids.tolist()) <= set(available.tolist())
        assert len(ids) == min(3, len(available))
        s.play_round(r, ids)


def test_periodic_availability_follows_each_clients_phase():
    s = sim("rounds=1", "clients_per_round=2", "system.availability=periodic",
            "system.period_s=10", "system.on_fraction=0.3")
    p = s.system.profile
    assert p is not None
    for t in (0.0, 3.7, 12.5):
        on = p.available(t, 1, 0)
        assert on.tolist() == [((t + p.phase_s[k]) % 10) < 3 for k in range(8)]
    ids = s.sample_clients(1)
    assert p.available(s.system.clock, 1, 0)[ids].all()


def test_the_clock_and_its_draws_are_the_same_on_every_engine_and_thread_count():
    args = ("rounds=3", "clients_per_round=4", "method=fedbuff", "method.aggregator.buffer_size=2",
            "method.aggregator.concurrency=4", "system.speed=lognormal", "system.speed_spread=0.8",
            "system.availability=probability", "system.available_p=0.7")
    seen = []
    threads = torch.get_num_threads()
    try:
        for engine, n in (("sequential", 1), ("vectorised", 2), ("sequential", 2)):
            torch.set_num_threads(n)
            s = sim(*args, f"engine={engine}")
            batches = record_batches(s)
            history = s.run().history
            seen.append(([b.client_ids.tolist() for b in batches],
                         [{k: v for k, v in h.items() if k.startswith(("time/", "participation/"))}
                          for h in history]))
    finally:
        torch.set_num_threads(threads)
    assert seen[0] == seen[1] == seen[2]
    assert any(h["participation/staleness_max"] > 0 for h in seen[0][1])


def test_fedbuff_with_no_staleness_and_a_full_buffer_is_fedavg_bit_for_bit():
    common = ("rounds=3", "clients_per_round=4")
    fedavg = sim(*common, "method=fedavg")
    fedbuff = sim(*common, "method=fedbuff", "method.aggregator.buffer_size=4",
                  "method.aggregator.concurrency=4")
    a, b = fedavg.run(), fedbuff.run()
    assert torch.equal(fedavg.params, fedbuff.params)
    assert column(a.history, "test/accuracy") == column(b.history, "test/accuracy")
    assert column(b.history, "fedbuff/staleness_mean") == [0.0] * 3


def test_fedbuff_weighs_stale_updates_by_the_inverse_square_root():
    s = sim("rounds=4", "clients_per_round=4", "method=fedbuff", "method.aggregator.buffer_size=1",
            "method.aggregator.concurrency=3", "system.speed=uniform", "system.speed_spread=2")
    batches = record_batches(s)
    history = s.run().history
    stale = [float(b.stats["staleness"][0]) for b in batches]
    assert max(stale) > 0
    assert column(history, "fedbuff/weight_mean") == pytest.approx(
        [1 / math.sqrt(1 + t) for t in stale])
    assert column(history, "participation/in_flight") == [2.0] * 4
    clock = column(history, "time/simulated_s")
    assert clock == sorted(clock)


class StopAfterOne(Callback):
    def on_round_end(self, record: RoundRecord) -> RoundVerdict:
        return RoundVerdict(stop=True)


def test_a_resumed_run_keeps_its_clock():
    args = ("clients_per_round=3", "system.speed=uniform", "system.speed_spread=1")
    whole = sim("rounds=3", *args).run().history
    first = Simulation(load_config(None, [*TINY, "rounds=3", *args]), [StopAfterOne()])
    first.run()
    second = sim("rounds=3", *args)
    second.load_state_dict(first.state_dict())
    assert second.system.clock == first.system.clock == whole[0]["time/simulated_s"] > 0
    assert second.run().history[-1]["time/simulated_s"] == whole[-1]["time/simulated_s"]


class StopAt(Callback):
    def __init__(self, r: int) -> None:
        self.r = r

    def on_round_end(self, record: RoundRecord) -> RoundVerdict:
        return RoundVerdict(stop=record.round == self.r)


def test_a_resumed_fedbuff_run_keeps_its_clients_in_flight(tmp_path):
    args = [*TINY, "rounds=5", "clients_per_round=4", "method=fedbuff",
            "method.aggregator.buffer_size=2", "method.aggregator.concurrency=4",
            "system.speed=uniform", "system.speed_spread=2", "checkpoint_every=1",
            f"checkpoint_dir={tmp_path}"]
    cfg = load_config(None, args)
    whole = Simulation(cfg)
    expected = whole.run().history
    first = Simulation(cfg, [StopAt(2)])
    assert first.run().stopped is not None
    assert len(first.state_dict()["system"]["in_flight"]) == 2
    second = Simulation(cfg)
    assert second.resume()
    assert [f.client_id for f in second.system.flying] == [
        f.client_id for f in first.system.flying]
    history = second.run().history
    assert torch.equal(second.params, whole.params)
    assert column(history, "time/simulated_s") == column(expected, "time/simulated_s")
    assert column(history, "participation/staleness_max") == column(
        expected, "participation/staleness_max")


def test_time_to_target_is_summarised_in_simulated_seconds():
    result = sim("rounds=2", "clients_per_round=3", "system.link_s=5",
                 "target_accuracy=0.01").run()
    assert result.summary["time_to_target_s"] == result.history[0]["time/simulated_s"] == 9.0


@pytest.mark.parametrize(("overrides", "message"), [
    (["system.availability=sometimes"], "system.availability: Input should be 'always', "
     "'probability' or 'periodic'"),
    (["system.available_p=0.5"], "system.available_p: set with system.availability=always; "
     "allowed: 1.0, or availability=probability"),
    (["system.late=partial"], "system.late: partial needs system.deadline_s"),
    (["system.deadline_s=1", "system.link_s=2"], "system.deadline_s: 1 leaves no time to "
     "train after system.link_s=2; allowed: more than link_s"),
    (["system.speed=gamma"], "system.speed: Input should be 'constant', 'lognormal' or "
     "'uniform'"),
    (["method=fedbuff", "system.deadline_s=5"], "system.deadline_s: FedBuff (an asynchronous "
     "rule) has no round deadline"),
    (["method=fedbuff", "method.stages=[{stage: median_norm}]"], "method.stages: FedBuff"),
    (["method=fedbuff", "method.client.algorithm=moon"], "method.client.algorithm: FedBuff (an "
     "asynchronous rule) takes the client objectives fedavg and fedprox, got 'moon'"),
    (["method=fedbuff", "method.aggregator.buffer_size=11"], "buffer_size: 11 exceeds "
     "concurrency=10; allowed: 1..10"),
])
def test_bad_system_settings_are_one_line_config_errors(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, [*TINY, *overrides])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_profile_is_drawn_from_the_seed_only():
    cfg = load_config(None, [*TINY, "system.speed=lognormal", "system.speed_spread=1"])
    s = Simulation(cfg)
    again = profile(cfg, s.data)
    assert s.system.profile is not None
    assert np.array_equal(again.step_s, s.system.profile.step_s)
    other = profile(load_config(None, [*TINY, "seed=1", "system.speed=lognormal",
                                       "system.speed_spread=1"]), s.data)
    assert not np.array_equal(other.step_s, again.step_s)


def test_the_stragglers_sweep_holds_its_rows_and_families():
    from fedcore.core.config import config_dir
    from fedcore.specs.sweep import load_sweep

    spec = load_sweep(config_dir() / "sweeps" / "stragglers.yaml")
    assert len(spec.cells) == 18  # 6 rows x 3 seeds
    rows = {c.row: c.config for c in spec.cells}
    assert {r.split()[0] for r in rows} == {"fedavg", "fednova", "fedbuff"}
    for row, cfg in rows.items():
        assert cfg.system.speed == "lognormal" and cfg.system.available_p == 0.8
        assert (cfg.system.deadline_s is None) == row.startswith("fedbuff")
    assert {f.name for f in spec.families} == {"nova_mild", "nova_strong", "buff_mild",
                                               "buff_strong"}
    assert all(f.reference in rows and set(f.baselines) <= set(rows) for f in spec.families)


def test_a_round_where_every_client_is_late_leaves_the_model_and_moves_the_clock():
    s = sim("rounds=2", "clients_per_round=3", "system.deadline_s=0.5")  # a step takes 1 s
    start = s.params.clone()
    history = s.run().history
    assert torch.equal(s.params, start)
    assert column(history, "participation/reported") == [0.0, 0.0]
    assert column(history, "participation/late") == [3.0, 3.0]
    assert column(history, "time/simulated_s") == [0.5, 1.0]
