"""EF, SAEF, SA-PEF, CSER in the round loop (docs/methods/compression.md): bookkeeping, cases."""

import functools

import pytest
import torch

from fedcore.core.compose.configure import load_config
from fedcore.core.engines import sequential
from fedcore.core.models.layout import flat_params
from fedcore.core.round.probes import run_round
from fedcore.core.round.simulation import Simulation
from fedcore.core.stages.feedback import RESIDUAL

from .conftest import TINY

pytestmark = pytest.mark.slow  # end to end (see docs/how-to/tests.md)

FAST = [*TINY, "local.steps=2"]
VARIANTS = ["ef_topk", "saef_topk", "sapef_topk", "cser_topk"]
ALPHA = {"ef_topk": 0.0, "saef_topk": 1.0, "sapef_topk": 0.85, "cser_topk": 0.0}


@functools.cache
def _run(overrides: tuple[str, ...]) -> torch.Tensor:
    sim = Simulation(load_config(None, list(overrides)))
    sim.run()
    return sim.params


def _params(overrides: list[str]) -> torch.Tensor:
    return _run(tuple(overrides))


@pytest.mark.parametrize("variant", ["ef", "saef", "sapef", "cser"])
def test_without_compression_every_variant_is_fedavg(variant):
    # Top-k keeping every coordinate: the feedback machinery runs (residual u - C(u) = 0,
    # start theta + alpha e, CSER digests), unlike compressor none, which switches it off and
    # made this equality hold by construction
    reset = ", H: 2" if variant == "cser" else ""  # H=2: a reset round
    comp = f"{{compressor: topk, k_frac: 1.0, error_feedback: {variant}{reset}}}"
    over = [f"method.compression={comp}", "method.aggregator.support_normalised=false"]
    fedavg = _params([*FAST, "method=fedavg"])
    assert torch.equal(_params([*FAST, "method=sapef_topk", *over]), fedavg)


@pytest.mark.parametrize("method", VARIANTS)
def test_round_one_of_every_variant_is_compressed_fedavg(method):
    one = [*FAST, "rounds=1"]
    assert torch.equal(_params([*one, f"method={method}"]), _params([*one, "method=fedavg_topk"]))


@pytest.mark.parametrize("alpha, method", [(0.0, "ef_topk"), (1.0, "saef_topk")])
def test_sapef_alpha_zero_and_one_reproduce_ef_and_saef(alpha, method):
    sapef = _params([*FAST, "method=sapef_topk", f"method.compression.alpha_r={alpha}"])
    assert torch.equal(sapef, _params([*FAST, f"method={method}"]))
    assert not torch.equal(sapef, _params([*FAST, "method=sapef_topk"]))


class _Recorder:
    """Wraps the client algorithm and the error feedback of a Simulation to see one round's
    data."""

    def __init__(self, sim, monkeypatch):
        self.sim, self.local, self.comp = sim, {}, {}
        feedback = next(s for s in sim.chain.stages if s.name == "uplink").feedback
        run_client, compress = sequential.run_client, feedback.compress

        def recorded(algo, ctx):
            update = run_client(algo, ctx)
            self.local[ctx.data.client_id] = (
                ctx.start_params,
                ctx.global_params,
                flat_params(ctx.model),
                update.delta,
            )
            return update

        def wrapped_compress(op, delta, state, generator=None):
            cid = next(k for k in range(sim.data.num_clients) if sim.store[k] is state)
            before = state.get(RESIDUAL)
            sent, nbytes = compress(op, delta, state, generator)
            self.comp[cid] = (delta, before, sent, state[RESIDUAL])
            return sent, nbytes

        monkeypatch.setattr(sequential, "run_client", recorded)  # what the engine calls
        feedback.compress = wrapped_compress


@pytest.mark.parametrize("method", ["sapef_topk", "saef_topk"])
def test_residual_identity_unsampled_clients_and_unshifted_delta(method, monkeypatch):
    sim = Simulation(load_config(None, [*FAST, "rounds=4", f"method={method}",
                                        "engine.backend=sequential"]))
    rec, alpha = _Recorder(sim, monkeypatch), ALPHA[method]
    for r in range(1, 5):
        before = {k: sim.store[k].get(RESIDUAL) for k in range(sim.data.num_clients)}
        before = {k: None if e is None else e.clone() for k, e in before.items()}
        rec.local.clear(), rec.comp.clear()
        run_round(sim, r)
        sim.round = r
        sampled = set(map(int, sim.sample_clients(r)))
        assert set(rec.comp) == sampled
        for k in range(sim.data.num_clients):
            if k not in sampled:  # a client not sampled keeps its residual unchanged
                after = sim.store[k].get(RESIDUAL)
                assert (after is None and before[k] is None) or torch.equal(after, before[k])
                continue
            start, global_params, local_end, delta = rec.local[k]
            e_old = before[k] if before[k] is not None else torch.zeros_like(delta)
            # training starts at w_r - alpha e = w_r + alpha * residual here (compression.md)
            expected_start = global_params + alpha * e_old
            assert torch.allclose(start if start is not None else global_params, expected_start)
            # step 4: the update is measured from the UN-shifted global model
            assert torch.allclose(delta, local_end - global_params, atol=1e-6)
            if alpha > 0 and before[k] is not None:
                assert not torch.allclose(delta, local_end - start, atol=1e-6)
            # steps 5-7: u = delta + (1 - alpha) residual = c + e_new
            _, _, sent, e_new = rec.comp[k]
            assert torch.allclose(sent + e_new, delta + (1 - alpha) * e_old, atol=1e-6)


def test_cser_resets_on_multiples_of_h():
    sim = Simulation(
        load_config(None, [*FAST, "rounds=4", "method=cser_topk", "method.compression.H=2"])
    )
    result = sim.run()
    assert [h["cser/reset"] for h in result.history] == [0.0, 1.0, 0.0, 1.0]
    d, m = sim.layout.dim, 3
    k, k1 = int(0.01 * d), int(0.1 * d)
    assert [h["comm/bytes_up"] for h in result.history] == [
        (8 * k + 4) * m,
        (8 * (k + k1) + 4) * m,
        (8 * k + 4) * m,
        (8 * (k + k1) + 4) * m,
    ]


def test_topk_bytes_and_ef_metrics_are_reported():
    sim = Simulation(load_config(None, [*FAST, "method=sapef_topk", "eval_every=2"]))
    result = sim.run()
    k = int(0.01 * sim.layout.dim)
    per_round = 3 * (8 * k + 4)  # 3 clients, k (index, value) pairs and n_k each
    assert [h["comm/bytes_up_total"] for h in result.history] == [
        per_round, 2 * per_round, 3 * per_round
    ]
    assert "sapef/gradient_mismatch" not in result.history[0]  # only every eval_every rounds
    assert result.history[1]["sapef/gradient_mismatch"] > 0
    assert all(h["sapef/residual_norm_mean"] > 0 for h in result.history)
    assert result.history[0]["sapef/alpha"] == 0.85  # implementation check: alpha_r echoed


def test_error_feedback_composes_with_fedprox():
    over = [*FAST, "method=sapef_topk", "method.client={algorithm: fedprox, mu: 0.1}"]
    result = Simulation(load_config(None, over)).run()
    assert all(h["agg/rejected_clients"] == 0 for h in result.history)
    # both parts act: the proximal term changes the model, the residuals are kept
    assert not torch.equal(_params(tuple(over)), _params((*FAST, "method=sapef_topk")))
    assert all(h["sapef/residual_norm_mean"] > 0 for h in result.history)


def test_uplink_bytes_count_batchnorm_statistics_and_sample_count():
    # ResNet-20 with BatchNorm at Top-1 %: 8k bytes of (index, value) pairs, plus the running
    # mean and var of its 19 BatchNorms (16 + 6 x 16 + 6 x 32 + 6 x 64 = 688 channels, so
    # 1376 values) in fp16, plus n_k as an int32 (docs/methods/compression.md).
    over = [*FAST, "rounds=1", "method=sapef_topk", "model.name=resnet20", "model.norm=batch",
            "local.steps=1"]
    sim = Simulation(load_config(None, over))
    result = sim.run()
    k = int(0.01 * sim.layout.dim)
    per_client = 8 * k + 2 * 1376 + 4
    assert result.history[0]["comm/bytes_up"] == sim.cfg.clients_per_round * per_client
