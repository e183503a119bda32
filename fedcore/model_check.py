"""Whether a model offers what the method's client objective and rule read from it (the
driver checks this once the model is built; the models package knows no component)."""

from __future__ import annotations

from torch import nn

from fedcore.aggregators import Aggregator
from fedcore.clients import ClientAlgorithm
from fedcore.errors import ConfigError
from fedcore.models.protocol import STAT_NEEDS, missing


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
            "use a model that has them (a fedcore.models.FedModel subclass does) or another "
            "method (docs/python-api.md, 'Models')"
        )
