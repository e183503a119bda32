"""The round driver, the engines and the component base classes hold no method knowledge: no
method's name appears in them, not even in a comment (issue 24)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fedcore.aggregators.base import REGISTRY as RULES
from fedcore.clients.base import REGISTRY as CLIENTS
from fedcore.config import method_names

ROOT = Path(__file__).resolve().parent.parent
GENERIC = [
    "fedcore/simulation.py",
    "fedcore/compose.py",
    "fedcore/engines/__init__.py",
    "fedcore/engines/select.py",
    "fedcore/engines/sequential.py",
    "fedcore/engines/vectorised.py",
    "fedcore/stages/base.py",
    "fedcore/samplers/base.py",
    "fedcore/clients/base.py",
    "fedcore/aggregators/base.py",
    "fedcore/compression/base.py",
    "fedcore/callbacks/__init__.py",
    "fedcore/callbacks/base.py",
    "fedcore/callbacks/chain.py",
    "fedcore/clients/template.py",
    "fedcore/records.py",
    "fedcore/clients/plan.py",
]
# names that are also plain words of the code (the ConFIG rule is "config", a robust rule is
# "median"): matched only as a component name would be written, e.g. 'median' in quotes
WORDS = {"config", "median", "none", "fedavg"}
PAPERS = ["sa-pef", "sapef", "saef", "cser", "ditto", "moon", "scaffold", "scafcom", "fedquad",
          "craft", "fedoui", "fedprox", "fednova", "feddyn", "krum", "afl", "fedalign", "crf",
          "supcon", "triplet", "quadruplet", "qfedavg", "q-fedavg", "fedfv", "fedlf", "fedavgm",
          "rfa", "power_of_choice", "power-of-choice", "clip_noise"]


def method_words() -> set[str]:
    names = set(CLIENTS.names()) | set(RULES.names()) | set(method_names()) | set(PAPERS)
    return {n.lower() for n in names if n.lower() not in WORDS}


@pytest.mark.parametrize("path", GENERIC)
def test_no_method_name_in_the_driver_engines_or_base_classes(path: str) -> None:
    text = (ROOT / path).read_text().lower()
    found = sorted(w for w in method_words()
                   if re.search(rf"(?<![a-z0-9_]){re.escape(w)}(?![a-z0-9_])", text))
    quoted = sorted(w for w in WORDS - {"none"} if re.search(rf"[\"']{w}[\"']", text))
    assert not found + quoted, f"{path} names methods: {found + quoted}"
