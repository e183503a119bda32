"""Hostile study input and resumed studies (issue 27): a resumed study proposes new
parameters, a fresh one stays reproducible; bad budgets and storages are one-line errors."""

from __future__ import annotations

import pytest

from fedcore.cli import main
from fedcore.specs.study import load_study
from tests.test_tuning import _study

# these tests check that nothing creates the store, or how it is created: no ready-made copy
pytestmark = pytest.mark.new_store


def _ask(spec, n: int) -> list[dict]:
    """Open (or resume) the study and let its sampler propose ``n`` trials (told COMPLETE)."""
    from fedcore.tuning.study import open_study, suggest

    study = open_study(spec)
    proposed = []
    for _ in range(n):
        trial = study.ask()
        proposed.append({p.key: suggest(trial, p) for p in spec.params})
        study.tell(trial, 0.5)
    return proposed


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_resumed_study_does_not_propose_its_first_trials_again(tmp_path, sampler):
    spec = load_study(_study(tmp_path, sampler={"type": sampler, "seed": 3}))
    first = _ask(spec, 2)
    resumed = _ask(spec, 2)  # as after a SIGKILL or SIGTERM: a new process opens the study
    assert not any(r in first for r in resumed), (first, resumed)
    (tmp_path / "new").mkdir()
    again = load_study(_study(tmp_path / "new", sampler={"type": sampler, "seed": 3}))
    assert _ask(again, 2) == first  # a new study with the same seed: the same trials


@pytest.mark.parametrize(("override", "message"), [
    ("n_trials=1.5", "study.n_trials: expected a positive integer or null (got 1.5)"),
    ("storage=foo://x/y", "study.storage: unknown scheme 'foo' in 'foo://x/y'; allowed: "
                          "sqlite, postgresql, mysql"),
    ("storage=postgres://alice:secret@db/x", "unknown scheme 'postgres' in "
                                             "'postgres://alice:***@db/x'"),
])
def test_bad_study_budget_or_storage_is_one_line(capsys, tracking, tmp_path, override, message):
    path = _study(tmp_path)
    assert main(["tune", str(path), override]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedcore: error: ") and "\n" not in err and message in err
    assert "secret" not in err
    assert not (tmp_path / "optuna.db").exists() and not (tmp_path / "mlflow.db").exists()
