"""Whether a model offers what the method's client objective and rule read from it (the
driver checks this once the model is built; the models package knows no component)."""

from __future__ import annotations

import torch
from torch import nn

from fedcore.core.aggregators import Aggregator
from fedcore.core.clients import ClientAlgorithm
from fedcore.core.config.errors import ConfigError
from fedcore.core.models.protocol import STAT_NEEDS, missing


def check_model(
    model: nn.Module, label: str, client: ClientAlgorithm, aggregator: type[Aggregator]
) -> None:
    """Raise a one-line ``ConfigError`` when ``model`` lacks what the method needs."""
    wanted = [(n, f"client {client.name}") for n in client.model_needs]
    for stat in sorted(aggregator.needs):
        wanted += [(n, f"rule {aggregator.name}") for n in STAT_NEEDS.get(stat, ())]
    lacking = missing(model, [n for n, _ in wanted])
    if lacking:
        who = ", ".join(dict.fromkeys(w for n, w in wanted if n in lacking))
        raise ConfigError(
            f"model: {label} lacks {', '.join(f'{n}()' for n in lacking)}, which {who} needs; "
            "use a model that has them (a fedcore.core.models.FedModel subclass does) or another "
            "method (docs/python-api.md, 'Models')"
        )


PROBE_BATCH = 2  # samples in the batch that checks the model's output shape


def check_outputs(
    model: nn.Module, label: str, in_shape: tuple[int, ...], num_classes: int
) -> None:
    """Raise a one-line ``ConfigError`` when ``model`` has no trainable parameter, or does not
    map a batch ``(2, *in_shape)`` to logits ``(2, num_classes)``. The probe runs in eval mode
    without gradients, so it changes no parameter, buffer or random state."""
    params = list(model.parameters())
    if not any(p.requires_grad and p.numel() for p in params):
        raise ConfigError(f"model: {label} has no trainable parameters (requires_grad); "
                          "federated training needs at least one")
    device = params[0].device
    x = torch.zeros((PROBE_BATCH, *in_shape), device=device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(x)
    except Exception as exc:  # noqa: BLE001  (any failure of the user's model is reported)
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ConfigError(f"model: {label} fails on a batch shaped {tuple(x.shape)} (the "
                          f"data's samples are {tuple(in_shape)}): {type(exc).__name__}: "
                          f"{first}") from None
    finally:
        model.train(was_training)
    want = (PROBE_BATCH, num_classes)
    got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
    if got != want:
        raise ConfigError(f"model: {label} maps a batch shaped {tuple(x.shape)} to {got}; it "
                          f"must give logits shaped {want} (batch, num_classes={num_classes})")
