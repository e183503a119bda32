"""cos_align (the FedOUI repository's FedAlign): the spec vectors and its fallbacks."""

import pytest
import torch

from fedcore.core import aggregators
from fedcore.core.aggregators.cos_align import alignment_weights
from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError
from fedcore.core.records.aggregate import UpdateBatch


def _t(*v):
    return torch.tensor(v, dtype=torch.float64)


DELTAS = torch.tensor([[1.0, 0, 0], [0, 2.0, 0], [0, 1.0, 1.0], [0, -1.0, -1.0]],
                      dtype=torch.float64)
N = torch.tensor([10.0, 20.0, 30.0, 40.0])


def _step(deltas, n, **hp):
    agg = aggregators.build({"rule": "cos_align", **hp})
    return agg.aggregate(UpdateBatch(deltas=deltas, num_samples=n))


def test_main_vector():
    res = _step(DELTAS, N)
    w, cos = alignment_weights(DELTAS, N, 1e-3, 1.0, 1.0)
    torch.testing.assert_close(cos, _t(0.301511, 0.904534, 0.426401, -0.426401),
                               atol=1e-6, rtol=0)
    torch.testing.assert_close(w, _t(0.088980, 0.532701, 0.377143, 0.001177), atol=1e-6, rtol=0)
    torch.testing.assert_close(res.step, _t(0.088980, 1.441368, 0.375966), atol=1e-6, rtol=0)
    torch.testing.assert_close(res.client_values["alignment_cos"], cos)


def test_eta_zero_is_fedavg_and_eta_two_is_sharper():
    w0, _ = alignment_weights(DELTAS, N, 1e-3, 0.0, 1.0)
    torch.testing.assert_close(w0, _t(0.1, 0.2, 0.3, 0.4))
    w2, _ = alignment_weights(DELTAS, N, 1e-3, 2.0, 1.0)
    torch.testing.assert_close(w2, _t(0.040146, 0.719444, 0.240409, 0.000002), atol=1e-6, rtol=0)


def test_r_zero_keeps_the_model_still():
    res = _step(_t(1.0, 0.0, -1.0, 0.0).view(2, 2), torch.ones(2))
    torch.testing.assert_close(res.step, torch.zeros(2, dtype=torch.float64))
    w, cos = alignment_weights(_t(1.0, 0.0, -1.0, 0.0).view(2, 2), torch.ones(2), 1e-3, 1, 1)
    torch.testing.assert_close(cos, torch.zeros(2, dtype=torch.float64))
    torch.testing.assert_close(w, _t(0.5, 0.5))


def test_epsilon_zero_falls_back_to_uniform_hence_refused():
    d, n = _t(2.0, 0.0, -1.0, 0.0).view(2, 2), torch.tensor([1.0, 2.0])
    w, _ = alignment_weights(d, n, 0.0, 1.0, 1.0)  # the reference code's uniform fallback
    torch.testing.assert_close(w, _t(0.5, 0.5))
    torch.testing.assert_close(w @ d, _t(0.5, 0.0))  # not FedAvg's zero step
    w, _ = alignment_weights(d, n, 1e-3, 1.0, 1.0)
    torch.testing.assert_close(w, _t(1 / 3, 2 / 3))
    torch.testing.assert_close(w @ d, torch.zeros(2, dtype=torch.float64))
    with pytest.raises(ConfigError, match=r"method\.aggregator\.epsilon"):
        load_config(None, ["method=fedalign_fedoui", "method.aggregator.epsilon=0"])


def test_single_client_is_fedavg():
    res = _step(_t(3.0, 4.0).view(1, 2), torch.tensor([5.0]))
    torch.testing.assert_close(res.step, _t(3.0, 4.0))
