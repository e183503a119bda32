"""The how-to guides for a stage, a sampler and a callback, run as written: each titled code
block becomes its file in a copy of the project (the component registers itself), then the
guide's check script runs and its printed result is checked (docs/how-to/add-a-*.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fedcore.core.callbacks.configured import REGISTRY as CALLBACKS
from fedcore.core.samplers.base import REGISTRY as SAMPLERS
from fedcore.core.stages.base import REGISTRY as STAGES

from .test_tutorials import BLOCK, install, project, run_script

__all__ = ["project"]  # the fixture, shared with the tutorials' tests
ROOT = Path(__file__).resolve().parents[1]


def guide(page: str) -> dict[str, str]:
    """The code blocks of a how-to guide with a ``title="path"``, by path."""
    text = (ROOT / "docs" / "how-to" / page).read_text()
    return {path: body for path, body in BLOCK.findall(text)}


def test_the_stage_guide_runs(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = guide("add-a-stage.md")
    assert set(files) == {"fedcore/core/stages/cosine_filter.py", "check_cosine_filter.py"}
    with install(project, files, STAGES, "cosine_filter"):
        run_script(project, "check_cosine_filter.py")
        out = capsys.readouterr().out
    assert "rejected: 1.0" in out and "column: [2]" in out
    assert "chain: attack -> flip_one -> uplink -> cosine_filter -> non_finite" in out


def test_the_sampler_guide_runs(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = guide("add-a-sampler.md")
    assert set(files) == {"fedcore/core/samplers/by_size.py", "check_by_size.py"}
    with install(project, files, SAMPLERS, "by_size"):
        run_script(project, "check_by_size.py")
        out = capsys.readouterr().out
    share = float(re.search(r"big pair share: ([0-9.]+)", out).group(1))
    assert share >= 0.9


def test_the_callback_guide_runs(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = guide("add-a-callback.md")
    assert set(files) == {"fedcore/core/callbacks/plateau.py", "check_plateau.py"}
    with install(project, files, CALLBACKS, "plateau"):
        run_script(project, "check_plateau.py")
        out = capsys.readouterr().out
    assert "rounds played: 3" in out
    assert "why: plateau: train/loss flat for 2 rounds" in out
