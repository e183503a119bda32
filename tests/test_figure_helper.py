"""The run's figures drawn by the helper process (fedcore/tracking/figure_helper.py)."""

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from fedcore.core.compose.configure import load_config
from fedcore.figures import plots
from fedcore.tracking import figure_helper
from fedcore.tracking.runner import run_tracked

from .conftest import TINY

HISTORY = [{"round": r, "train/loss": 2.0 / r, "test/loss": 2.1 / r, "test/accuracy": r / 4,
            "clients/accuracy_mean": r / 5, "clients/accuracy_worst10": r / 6}
           for r in (1, 2, 3)]
ACCURACY = np.array([0.1, 0.5, 0.75, 0.9])


@pytest.fixture
def helper(monkeypatch):
    """A helper process of this test's own (the suite turns the shared one off)."""
    started = figure_helper.launch()
    assert started is not None
    monkeypatch.setattr(figure_helper, "_HELPER", started)
    monkeypatch.setattr(figure_helper, "_STARTED", True)
    yield started
    started.close()


def test_the_helper_draws_the_same_files_as_this_process(helper, tmp_path):
    (tmp_path / "here").mkdir()
    (tmp_path / "helper").mkdir()
    plots.curves_png(HISTORY, tmp_path / "here" / "curves.png")
    plots.fairness_png(ACCURACY, 3, tmp_path / "here" / "fairness.png")
    drawing = figure_helper.draw(HISTORY, ACCURACY, 3, tmp_path / "helper")
    drawing.wait()
    assert drawing.drawn  # by the helper, not by the fallback here
    for name in ("curves.png", "fairness.png"):
        assert (tmp_path / "helper" / name).read_bytes() == (tmp_path / "here" / name).read_bytes()


def test_a_tracked_run_does_not_draw_its_figures_in_the_training_process(
        helper, tracking, tmp_path, monkeypatch):
    def not_here(*args, **kwargs):
        raise AssertionError("figure drawn in the training process")

    monkeypatch.setattr(plots, "curves_png", not_here)
    monkeypatch.setattr(plots, "fairness_png", not_here)
    run_id, _ = run_tracked(load_config(None, [*TINY, "rounds=1"]))
    client = MlflowClient(tracking.tracking_uri)
    assert client.get_run(run_id).info.status == "FINISHED"
    local = client.download_artifacts(run_id, "", str(tmp_path))
    for name in ("curves.png", "fairness.png"):
        assert open(f"{local}/{name}", "rb").read(4) == b"\x89PNG"


def test_a_dead_helper_leaves_the_figures_to_this_process(helper, tmp_path):
    helper.proc.kill()
    helper.proc.wait()
    drawing = figure_helper.draw(HISTORY, ACCURACY, 3, tmp_path)
    drawing.wait()
    assert not drawing.drawn
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "fairness.png").read_bytes()[:4] == b"\x89PNG"


def test_a_report_figure_drawn_by_the_helper_is_the_one_drawn_here(helper, tmp_path):
    """``draw_figure``: the report's convergence figure drawn in the helper, the same bytes."""
    import pandas as pd

    from fedcore.figures.comparison_plots import convergence_png

    runs = pd.DataFrame({"run_id": ["a", "b"], "method": ["fedavg", "craft"],
                         "row": ["fedavg", "craft"], "alpha": [0.1, 0.1],
                         "dataset": ["digits", "digits"], "status": ["FINISHED"] * 2})
    acc = {"a": pd.Series({1: 0.2, 2: 0.5, 3: 0.6}), "b": pd.Series({1: 0.3, 2: 0.6, 3: 0.7})}
    panels = [("digits", 0.1, "fedavg", ["fedavg", "craft"])]
    convergence_png(panels, runs, acc, tmp_path / "here.png")
    name = f"{convergence_png.__module__}.{convergence_png.__name__}"
    drawing = figure_helper.draw_figure(name, panels, runs, acc, tmp_path / "helper.png")
    drawing.wait()
    assert drawing.drawn
    assert (tmp_path / "helper.png").read_bytes() == (tmp_path / "here.png").read_bytes()
    with pytest.raises(ValueError, match="not a function of fedcore.figures"):
        figure_helper.draw_figure("os.remove", str(tmp_path / "here.png"))
