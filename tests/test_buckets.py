"""Step-count buckets of the vectorised engine: the passes it executes, counted exactly
(fedcore/core/engines/buckets.py), the ``engine/padding_efficiency`` metric of a run, the
bucketed engine against the sequential one, and the counting script (benchmarks/padding.py)."""

from __future__ import annotations

import pytest
import torch

from benchmarks import padding
from fedcore.core.clients.base import minibatches
from fedcore.core.compose.configure import load_config
from fedcore.core.data.federated import build_federated_data
from fedcore.core.engines import sequential
from fedcore.core.engines.buckets import (
    Passes,
    Segment,
    bucketed_passes,
    chunk_order,
    lockstep_passes,
    planned_rows,
    round_passes,
    segments,
)
from fedcore.core.engines.vectorised import EFFICIENCY, EXECUTED, USEFUL, VectorisedEngine
from fedcore.core.records import LocalSchedule
from fedcore.core.round.simulation import Simulation

from .conftest import TINY

# A hand-made round, batch 20, one epoch: clients of 45, 7, 20, 61 and 3 samples.
HAND = [[20, 20, 5], [7], [20], [20, 20, 20, 1], [3]]


def _brute(rows: list[list[int]], width: int) -> tuple[int, int, int]:
    """(useful, lock-step executed, drop-off executed), step by step."""
    longest = max(len(r) for r in rows)
    useful = sum(map(sum, rows))
    dropping = sum(width * sum(len(r) > t for r in rows) for t in range(longest))
    return useful, len(rows) * longest * width, dropping


def test_padding_is_counted_exactly_on_a_hand_made_partition():
    order = chunk_order([len(r) for r in HAND], size=10)
    assert order == [[3, 0, 1, 2, 4]]  # longest first, ties in their order
    ranked = [HAND[i] for i in order[0]]
    assert segments([len(r) for r in ranked]) == [
        Segment(0, 1, 5), Segment(1, 3, 2), Segment(3, 4, 1)]
    # useful 45 + 7 + 20 + 61 + 3 = 136; executed (5 + 2 + 2 + 1) x 20 = 200
    assert bucketed_passes(ranked) == Passes(136, 200)
    assert lockstep_passes(HAND) == Passes(136, 5 * 4 * 20)
    lock, bucketed = round_passes(HAND)
    assert (lock.efficiency, bucketed.efficiency) == (136 / 400, 136 / 200)
    # chunks of two: [61, 45] (4 steps), [7, 20] (1 step, 20 wide), [3] (1 step, 3 wide)
    assert round_passes(HAND, chunk=2)[1] == Passes(136, (4 + 2 + 1) * 20 + 2 * 20 + 3)
    assert Passes().efficiency == 1.0
    with pytest.raises(ValueError, match="longest first"):
        segments([1, 3])


@pytest.mark.parametrize("n", [1, 7, 20, 21, 45, 60])
@pytest.mark.parametrize(("epochs", "steps"), [(1, None), (2, None), (1, 3), (1, 5)])
def test_planned_rows_are_the_plans_batches(n, epochs, steps):
    schedule = LocalSchedule(lr=0.1, batch_size=20, epochs=epochs, steps=steps)
    got = [len(b) for b in minibatches(n, schedule, torch.Generator().manual_seed(0))]
    assert planned_rows(n, 20, epochs, steps) == got


def test_a_vectorised_round_records_its_padding_efficiency():
    over = [*TINY, "rounds=2", "local.batch_size=16", "dataset.alpha=0.3", "clients_per_round=4"]
    sim = Simulation(load_config(None, [*over, "engine=vectorised"]))
    history = sim.run().history
    for r, row in enumerate(history, start=1):
        rows = [planned_rows(sim.data.clients[c].num_train, 16, sim.cfg.local.epochs)
                for c in map(int, sim.sample_clients(r))]
        useful, _, executed = _brute(rows, max(max(x) for x in rows))
        assert (row[USEFUL], row[EXECUTED]) == (useful, executed)
        assert row[EFFICIENCY] == useful / executed
    assert any(row[EFFICIENCY] < 1.0 for row in history)  # a ragged batch was padded
    seq = Simulation(load_config(None, [*over, "engine=sequential"])).run().history
    assert all(EFFICIENCY not in row for row in seq)  # the sequential engine pads nothing


def test_bucketed_engine_agrees_with_sequential_over_many_buckets_and_split_chunks():
    """Many step counts (Dirichlet 0.05, 2 epochs), chunks of 3 that cut buckets: in float64
    the bucketed engine is the sequential computation (to 1e-12)."""
    over = ["dataset.num_clients=8", "clients_per_round=7", "dataset.alpha=0.05",
            "local.epochs=2", "local.batch_size=8", "local.momentum=0.5", "model.name=mlp",
            "engine=sequential", "rounds=1"]
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        sim = Simulation(load_config(None, over))
        for c in sim.data.clients:
            c.x_train = c.x_train.double()
        sampled = list(map(int, sim.sample_clients(1)))
        rc = sim.round_context(1)
        seq = sequential.train_round(rc, sampled)
        engine = VectorisedEngine(sim.model, sim.layout, sim.data.in_shape, sim.device, 3)
        vec = engine.train_round(rc, sampled)
    finally:
        torch.set_default_dtype(default)
    assert len({seq[c].num_steps for c in sampled}) >= 4 and engine.last_chunks == [3, 3, 1]
    for c in sampled:
        assert vec[c].num_steps == seq[c].num_steps
        assert torch.allclose(vec[c].delta, seq[c].delta, rtol=0, atol=1e-12)
    rows = [planned_rows(sim.data.clients[c].num_train, 8, 2) for c in sampled]
    assert engine.passes == round_passes(rows, chunk=3)[1]


REDUCED = ["dataset.num_clients=100", "clients_per_round=10", "dataset.synthetic_samples=5000"]


def test_the_counting_script_on_a_reduced_partition(tmp_path, capsys):
    cfg = load_config(padding.CRAFT, [*padding.CRAFT_OVERRIDES, *REDUCED])
    got = padding.count(cfg, rounds=4)
    data = build_federated_data(cfg.dataset, cfg.seed)  # the run's own clients, images drawn
    assert got.sizes.tolist() == [c.num_train for c in data.clients]
    lock = bucketed = Passes()
    for r in range(1, 5):
        ids = padding.sampled_clients(cfg, got.sizes, r)
        assert len(ids) == 10
        rows = [planned_rows(int(got.sizes[k]), 20, 1) for k in ids]
        useful, locked, dropped = _brute(rows, max(max(x) for x in rows))
        lock += Passes(useful, locked)
        bucketed += Passes(useful, dropped)
    assert (got.lockstep, got.bucketed) == (lock, bucketed)
    assert got.bucketed.efficiency > 0.8 > 0.5 > got.lockstep.efficiency
    out = tmp_path / "padding.json"
    assert padding.main(["--rounds", "4", "--json", str(out), *REDUCED]) == 0
    assert "bucketed_efficiency" in capsys.readouterr().out
    assert f'"bucketed_efficiency": {got.bucketed.efficiency}' in out.read_text()
    assert padding.main(["--rounds", "0"]) == 2
    assert padding.main(["dataset.partition=natural"]) == 2
    assert "dataset.partition" in capsys.readouterr().err


def test_auto_on_cpu_follows_the_tiny_clients_measurement():
    """``auto`` on CPU: vectorised for many one-step clients on the MLP (measured 1.31-1.50x),
    sequential for the CNN there (0.72-0.81x), with more steps, or with fewer clients."""
    from benchmarks.tiny_clients import PROTOCOL

    def engine(*over: str) -> tuple[str, str]:
        sim = Simulation(load_config(None, [*PROTOCOL, "engine=auto", "rounds=1", *over]))
        return sim.engine_name, sim.engine_reason

    name, reason = engine("model.name=mlp")
    assert name == "vectorised" and "10 clients per round of 1 local steps" in reason
    assert "1.31-1.50x for the MLP" in reason
    for over in (["model.name=cnn"], ["model.name=mlp", "local.epochs=3"],
                 ["model.name=mlp", "clients_per_round=9"]):
        name, reason = engine(*over)
        assert name == "sequential" and "at least 10 clients per round of at most 2" in reason


def test_compile_is_tried_only_where_asked_or_on_a_fast_gpu():
    from benchmarks.bucketed import should_compile

    cpu = torch.device("cpu")
    assert should_compile("auto", cpu) == (False, "not an H100/H200 (auto)")
    assert should_compile("yes", cpu) == (True, "--compile yes")
    assert should_compile("no", cpu)[0] is False


@pytest.mark.slow
def test_a_compiled_bucketed_step_trains_the_same_clients():
    """``compile_step``: each chunk's vmapped step under torch.compile (about 30 s to compile
    on this CPU) gives the eager engine's deltas to float32 rounding, round after round."""
    from benchmarks.tiny_clients import PROTOCOL

    sim = Simulation(load_config(None, [*PROTOCOL, "model.name=mlp", "local.epochs=2"]))
    eager = VectorisedEngine(sim.model, sim.layout, sim.data.in_shape, sim.device)
    compiled = VectorisedEngine(sim.model, sim.layout, sim.data.in_shape, sim.device)
    compiled.compile_step = True
    for r in (1, 2):
        sampled = list(map(int, sim.sample_clients(r)))
        rc = sim.round_context(r)
        want, got = eager.train_round(rc, sampled), compiled.train_round(rc, sampled)
        assert compiled.passes == eager.passes
        for c in sampled:
            assert torch.allclose(got[c].delta, want[c].delta, rtol=1e-5, atol=1e-7)
