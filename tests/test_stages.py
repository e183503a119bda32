"""The stage chain, error feedback as its own axis, the sampler registry (config side)."""

import numpy as np
import pytest

from fedcore.core.component.base import Component
from fedcore.core.component.requirements import setting
from fedcore.core.component.seeding import numpy_rng
from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError
from fedcore.core.samplers import Population, build
from fedcore.core.stages import Stage


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
    from fedcore.core.round.simulation import Simulation

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
    from fedcore.core.round.checkpoint import CheckpointError
    from fedcore.core.round.simulation import Simulation

    from .conftest import TINY

    sim = Simulation(load_config(None, TINY))
    state = sim.state_dict()
    assert len(state["stages"]) == len(sim.chain.stages)
    old = {k: v for k, v in state.items() if k != "stages"}  # written before the stage chain
    sim.load_state_dict(old, rng=False)
    with pytest.raises(CheckpointError, match="stage states do not match"):
        sim.load_state_dict({**state, "stages": [{}]}, rng=False)


class _RejectOne:
    """A server stage that rejects one client (as a contributor writes one from the docs)."""

    name = "reject_one"

    def __init__(self, client_id):
        self.client_id = client_id

    def on_receive(self, msg, rc):
        if msg.update.client_id == self.client_id:
            msg.accepted = False


def _with_stage(sim, stage, before_last=True):
    """``stage`` (a Stage subclass instance) put into the chain before the non-finite filter."""
    sim.chain.stages.insert(len(sim.chain.stages) - 1 if before_last else 0, stage)


def _rule_rows(sim):
    seen = []
    aggregate = sim.aggregator.aggregate

    def spy(batch):
        seen.append(batch.client_ids.tolist())
        return aggregate(batch)

    sim.aggregator.aggregate = spy
    return seen


def test_a_stage_rejecting_a_client_leaves_the_rule_m_minus_1_rows_and_records_who():
    from fedcore.core.round.simulation import Simulation

    from .conftest import TINY

    class RejectOne(_RejectOne, Stage):
        pass

    sim = Simulation(load_config(None, TINY))
    ids = [0, 2, 4]
    _with_stage(sim, RejectOne(2))
    seen = _rule_rows(sim)
    outcome = sim.play_round(1, sampled=ids)
    # the non-finite filter runs after it and accepts client 2's finite update: no undo
    assert seen == [[0, 4]]
    assert outcome.metrics["agg/rejected_clients"] == 1.0
    assert outcome.metrics["stages/reject_one/rejected"] == 1.0
    assert "stages/non_finite/rejected" not in outcome.metrics
    assert outcome.client_values["rejected_by/reject_one"].tolist() == [
        k == 2 for k in range(6)]


def test_non_finite_adds_its_verdict_to_another_stages_rejection():
    import math

    from fedcore.core.round.simulation import Simulation

    from .conftest import TINY

    class Poison(Stage):
        name = "poison"

        def on_update(self, update, rc):
            if update.client_id == 4:
                update.delta = update.delta * math.nan

    class RejectOne(_RejectOne, Stage):
        pass

    sim = Simulation(load_config(None, TINY))
    _with_stage(sim, Poison(), before_last=False)
    _with_stage(sim, RejectOne(0))
    seen = _rule_rows(sim)
    outcome = sim.play_round(1, sampled=[0, 2, 4])
    assert seen == [[2]]
    assert outcome.metrics["agg/rejected_clients"] == 2.0
    assert outcome.metrics["stages/reject_one/rejected"] == 1.0
    assert outcome.metrics["stages/non_finite/rejected"] == 1.0


def test_median_norm_filter_rejects_an_outsized_update_from_the_config():
    from fedcore.core.round.simulation import Simulation

    from .conftest import TINY

    class Blow(Stage):
        name = "blow"

        def on_update(self, update, rc):
            if update.client_id == 2:
                update.delta = update.delta * 100.0

    cfg = load_config(None, [*TINY, "method.stages=[{stage: median_norm, factor: 3}]"])
    sim = Simulation(cfg)
    assert [s.name for s in sim.chain.stages] == ["attack", "uplink", "median_norm", "non_finite"]
    _with_stage(sim, Blow(), before_last=False)
    seen = _rule_rows(sim)
    outcome = sim.play_round(1, sampled=[0, 2, 4])
    assert seen == [[0, 4]]
    assert outcome.metrics["stages/median_norm/rejected"] == 1.0
    assert outcome.metrics["median_norm/median"] > 0
    assert outcome.client_values["rejected_by/median_norm"].sum() == 1
    # without the outsized update the filter keeps everyone
    sim = Simulation(cfg)
    seen = _rule_rows(sim)
    outcome = sim.play_round(1, sampled=[0, 2, 4])
    assert seen == [[0, 2, 4]] and "stages/median_norm/rejected" not in outcome.metrics


class NeedsPlainSgd(Stage):
    """A stage declaring a requirement, named by import path in the test below."""

    side = "client"

    @classmethod
    def requirements(cls, hp):
        return [setting("local.momentum", (0.0,), "stage needs_plain_sgd", "needs plain SGD")]


def test_every_component_kind_shares_the_base_and_is_checked_in_one_loop():
    from fedcore.core.aggregators.base import Aggregator
    from fedcore.core.callbacks.configured import ConfiguredCallback
    from fedcore.core.clients.base import ClientAlgorithm
    from fedcore.core.compose.configure import component_specs
    from fedcore.core.compression.base import Compressor
    from fedcore.core.samplers.base import Sampler
    from fedcore.core.stages.feedback.base import ErrorFeedback

    kinds = (ClientAlgorithm, Aggregator, Compressor, ErrorFeedback, Sampler, Stage,
             ConfiguredCallback)
    assert all(issubclass(k, Component) for k in kinds)
    cfg = load_config(None, ["method=sapef_topk", "dataset.val_fraction=0.1",
                             "method.stages=[{stage: median_norm}]",
                             "callbacks=[{callback: early_stopping}]"])
    assert [r.kind for r, _ in component_specs(cfg)] == [
        "client algorithm", "aggregator rule", "compressor", "error feedback", "sampler",
        "stage", "callback"]
    stage = f"{__name__}:NeedsPlainSgd"
    load_config(None, [f"method.stages=[{{stage: '{stage}'}}]"])
    with pytest.raises(ConfigError, match=r"^local.momentum: stage needs_plain_sgd needs plain "
                       r"SGD, got 0.9"):
        load_config(None, [f"method.stages=[{{stage: '{stage}'}}]", "local.momentum=0.9"])


class WireTag(Stage):
    """Wire side: sees what goes on the wire, before the built-in uplink compresses it."""

    side = "wire"


class ServerLook(Stage):
    side = "server"


class ClientTouch(Stage):
    side = "client"


class Sideways(Stage):
    side = "sever"


def test_a_stage_lands_where_its_side_says_with_the_config_order_within_a_side():
    from fedcore.core.round.simulation import Simulation

    from .conftest import TINY

    listed = ", ".join(f"{{stage: '{__name__}:{cls}'}}"
                       for cls in ("ServerLook", "WireTag", "ClientTouch"))
    cfg = load_config(None, [*TINY, f"method.stages=[{listed}, {{stage: clip_noise}}]"])
    sim = Simulation(cfg)
    names = [type(s).__name__ for s in sim.chain.stages]
    assert names == ["Attack", "ClientTouch", "ClipNoise", "WireTag", "Uplink", "ServerLook",
                     "NonFinite"]
    assert [s.side for s in sim.chain.stages] == [
        "client", "client", "client", "wire", "wire", "server", "server"]


def test_a_stage_without_a_valid_side_is_a_one_line_error():
    from fedcore.core.stages.base import Chain

    with pytest.raises(ConfigError) as exc:
        load_config(None, [f"method.stages=[{{stage: '{__name__}:Sideways'}}]"])
    assert str(exc.value) == (
        "method.stages[0].side: got 'sever'; allowed: client, wire, server")
    with pytest.raises(ConfigError, match=r"^stage norm.side: not declared; allowed: client, "
                       r"wire, server$"):
        Chain([type("Norm", (Stage,), {"name": "norm"})()])


def test_every_uplink_vector_goes_through_one_mapping_with_no_delta_branch():
    """The rule's batch stacks each uplink name (``delta`` is the batch's deltas, zeros when
    not sent); error feedback corrects the vector its variant names, C alone the others."""
    import torch

    from fedcore.core.compression.topk import TopK
    from fedcore.core.models.layout import ParamLayout
    from fedcore.core.records import ClientUpdate, Message
    from fedcore.core.round.round_phases import update_batch
    from fedcore.core.stages.feedback import RESIDUAL
    from fedcore.core.stages.feedback.ef import EF

    layout = ParamLayout((), ((0, 4),), ("model",))
    ups = [ClientUpdate(k, torch.zeros(4), 1, 1, torch.tensor(0.0), extras={"c": torch.ones(4) * k})
           for k in range(3)]
    msgs = [Message(u, {"c": u.vector("c")}) for u in ups]
    msgs[1].reject("test")
    batch = update_batch(msgs, ("c",), layout, torch.zeros(4), 1)
    assert batch.deltas.tolist() == [[0.0] * 4] * 2
    assert batch.extras["c"][:, 0].tolist() == [0.0, 2.0]

    class CorrectsC(EF):
        corrects = "c"

    op = TopK(TopK.HParams(k_frac=0.25)).apply
    vec = torch.tensor([4.0, 3.0, 2.0, 1.0])
    for fb, kept in ((EF(), "delta"), (CorrectsC(), "c")):
        for name in ("delta", "c"):
            state: dict = {}
            sent, _ = fb.compress_vector(name, op, vec, state)
            assert sent.tolist() == [4.0, 0.0, 0.0, 0.0]
            assert (RESIDUAL in state) == (name == kept)


def test_a_stage_closes_the_round_through_end_round_and_may_move_the_model():
    """An extra server step (CSER's kind) is what any stage may do to the ``Closing`` it is
    handed once the rule's step is applied; the driver has no slot for it."""
    import torch

    from fedcore.core.round.simulation import Simulation
    from fedcore.core.stages.base import Chain

    from .conftest import TINY

    class Nudge(Stage):
        name = "nudge"
        side = "server"

        def end_round(self, rc, sampled, closing):
            self.after_rule = closing.params.clone()
            closing.params = closing.params + 1.0
            return {"nudge/applied": 1.0}

    plain = Simulation(load_config(None, TINY))
    plain.play_round(1, sampled=[0, 2, 4])
    sim = Simulation(load_config(None, TINY))
    nudge = Nudge()
    sim.chain = Chain([*sim.chain.stages, nudge])
    outcome = sim.play_round(1, sampled=[0, 2, 4])
    assert outcome.metrics["nudge/applied"] == 1.0
    assert torch.equal(nudge.after_rule, plain.params)
    assert torch.equal(sim.params, plain.params + 1.0)
