"""The round driver, the engines and the component base classes hold no method knowledge: no
method's name appears in them, not even in a comment (issue 24), no slot that exists for one
method's need, and no branch between the delta and the other uplink vectors (issue 37)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fedcore.core.aggregators.base import REGISTRY as RULES
from fedcore.core.clients.base import REGISTRY as CLIENTS
from fedcore.core.config import method_names

ROOT = Path(__file__).resolve().parent.parent
GENERIC = [
    "fedcore/core/round/simulation.py",
    "fedcore/core/compose/assembly.py",
    "fedcore/core/engines/__init__.py",
    "fedcore/core/engines/select.py",
    "fedcore/core/engines/sequential.py",
    "fedcore/core/engines/vectorised.py",
    "fedcore/core/engines/functional.py",
    "fedcore/core/engines/chunk_inputs.py",
    "fedcore/core/engines/chunk_step.py",
    "fedcore/core/engines/loss_context.py",
    "fedcore/core/stages/base.py",
    "fedcore/core/samplers/base.py",
    "fedcore/core/clients/base.py",
    "fedcore/core/aggregators/base.py",
    "fedcore/core/compression/base.py",
    "fedcore/core/callbacks/__init__.py",
    "fedcore/core/callbacks/base.py",
    "fedcore/core/callbacks/dispatch.py",
    "fedcore/core/clients/template.py",
    "fedcore/core/records/__init__.py",
    "fedcore/core/records/plan.py",
    "fedcore/core/records/run.py",
    "fedcore/core/round/round_phases.py",
    "fedcore/core/round/run_state.py",
    "fedcore/core/round/probes.py",
    "fedcore/core/engines/round_context.py",
    "fedcore/core/stages/feedback/base.py",
    "fedcore/core/stages/uplink.py",
]
# what one method needed of the driver, now declared in the method's own file: CSER's extra
# server step (a stage may move ``Closing.params``), SCAFCOM's implied client deltas (the rule
# reports its own conflict), the error-feedback BatchNorm moment matching (the variant replaces
# ``Closing.buffers``), SA-PEF's planned step count (``start_point`` calls ``planned_steps()``)
SLOTS = [r"closing\.step", r"roundend", r"client_deltas", r"moment_matched", r"needs_num_steps",
         r"\.active\b"]
# the one accessor of an uplink vector by name (``ClientUpdate.vector``) may tell the delta
# from the others; nothing else in generic code does
DELTA_BRANCH = r"(==|!=)\s*[\"']delta[\"']|[\"']delta[\"']\s+(not\s+)?in\b"
ONE_ACCESSOR = "fedcore/core/records/__init__.py"
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


@pytest.mark.parametrize("path", GENERIC)
def test_no_single_method_slot_or_delta_branch_in_generic_code(path: str) -> None:
    text = (ROOT / path).read_text().lower()
    slots = [s for s in SLOTS if re.search(s, text)]
    assert not slots, f"{path} keeps a slot for one method's need: {slots}"
    if path != ONE_ACCESSOR:
        branch = re.search(DELTA_BRANCH, text)
        assert branch is None, f"{path} branches on the delta: {branch.group(0)!r}"
