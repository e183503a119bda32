"""Cross-axis requirements: declared by each component from its own hyper-parameters, checked
in one place (fedcore.core.compose.configure) with one-line errors; components never see the whole
config."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import fedcore
from fedcore.core.aggregators.fedavg import FedAvg
from fedcore.core.component.registry import HParams
from fedcore.core.component.requirements import Need, Requirement, setting
from fedcore.core.compose.configure import load_config
from fedcore.core.config.errors import ConfigError


class PlainSgdRule(FedAvg):
    """A rule from outside fedcore (named by import path) that needs momentum-free clients and
    at least ``min_clients`` clients in the population."""

    class HParams(FedAvg.HParams):
        min_clients: int = 2

    @classmethod
    def requirements(cls, hp: HParams) -> list[Need]:
        assert isinstance(hp, cls.HParams)
        low = hp.min_clients
        return [
            setting("local.momentum", (0.0,), "rule plain_sgd", "needs plain SGD (momentum 0)"),
            Requirement(("dataset.num_clients",), lambda n: n >= low,
                        lambda n: f"dataset.num_clients: rule plain_sgd needs at least {low}, "
                                  f"got {n}"),
        ]


RULE = f"{__name__}:PlainSgdRule"


def test_a_new_components_declared_requirements_are_checked_at_load() -> None:
    load_config(None, [f"method.aggregator.rule={RULE}"])
    with pytest.raises(ConfigError, match=r"^local\.momentum: rule plain_sgd needs plain SGD "
                                          r"\(momentum 0\), got 0\.9$"):
        load_config(None, [f"method.aggregator.rule={RULE}", "local.momentum=0.9"])
    with pytest.raises(ConfigError, match=r"^dataset\.num_clients: rule plain_sgd needs at "
                                          r"least 50, got 20$"):
        load_config(None, [f"method.aggregator.rule={RULE}", "method.aggregator.min_clients=50"])


def test_a_requirement_on_a_key_the_config_lacks_is_a_programming_error() -> None:
    class Typo(PlainSgdRule):
        @classmethod
        def requirements(cls, hp: HParams) -> list[Need]:
            return [setting("local.momentun", (0.0,), "rule typo", "needs plain SGD")]

    from fedcore.core.aggregators.base import REGISTRY

    REGISTRY._external["typo-test"] = Typo
    try:
        with pytest.raises(ValueError, match="'local.momentun', not a config key"):
            load_config(None, ["method.aggregator.rule=typo-test"])
    finally:
        del REGISTRY._external["typo-test"]


def test_components_do_not_see_the_config_schema() -> None:
    """No rule, objective or compressor module names ExperimentConfig (not even for types)."""
    root = Path(fedcore.__file__).parent / "core"
    files = [p for package in ("aggregators", "clients", "compression")
             for p in (root / package).glob("*.py")]
    assert len(files) > 20  # the packages are where this test looks
    # the schema is the config package itself; its component model (registry, ...) is allowed
    named = [str(p.relative_to(root)) for p in files
             if re.search(r"\bExperimentConfig\b|fedcore\.core\.config(?![\w.])", p.read_text())]
    assert named == []
