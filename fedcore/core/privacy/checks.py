"""The privacy block against the rest of the config, before any compute: the rule must take a
mean of deltas, the sampler and the uplink must be the ones the accountant assumes. Each
refusal is one ``ConfigError`` line naming the key and what is allowed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedcore.core.aggregators.base import REGISTRY as RULES
from fedcore.core.clients.base import REGISTRY as CLIENTS
from fedcore.core.config.errors import ConfigError
from fedcore.core.privacy.ledger import stage_clip_noise

if TYPE_CHECKING:
    from fedcore.core.config import ExperimentConfig


def mean_rules() -> list[str]:
    """The registered rules whose step is a function of the weighted mean of the deltas only
    (``Aggregator.mean_of_deltas``): the rules central DP works with."""
    return sorted(name for name, cls in RULES.classes().items() if cls.mean_of_deltas)


def check_privacy(cfg: ExperimentConfig) -> None:
    """Refuse what the accountant cannot account (one line, ``ConfigError``)."""
    mechanism = cfg.privacy.mechanism
    if mechanism == "none":
        return
    uplink = CLIENTS.build(cfg.method.client).uplink
    if tuple(uplink) != ("delta",):
        extra = ", ".join(v for v in uplink if v != "delta")
        raise ConfigError(
            f"method.client.algorithm: {cfg.method.client['algorithm']} sends {extra} besides "
            f"its delta, which privacy.mechanism={mechanism} does not privatize; allowed: "
            "objectives that send their delta only")
    if mechanism == "local":
        stage_clip_noise(cfg)
        return
    rule = cfg.method.aggregator["rule"]
    if not RULES.get(rule).mean_of_deltas:
        raise ConfigError(
            f"method.aggregator.rule: central DP needs a rule that takes a mean of the deltas, "
            f"got {rule}; allowed: {', '.join(mean_rules())}")
    if cfg.method.sampler is not None:
        raise ConfigError(
            f"method.sampler: central DP samples clients as privacy.sampling says, got "
            f"{cfg.method.sampler.get('sampler')}; allowed: unset (uniform)")
