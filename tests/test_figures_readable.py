"""Every report and run figure reads as saved: each text at least 8 pt and inside the figure
(titles not clipped), the reference drawn on top and first in the legend, legends where the marks
need one, bands of accuracies and fractions inside [0, 1]."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

from fedcore.figures.across_settings import cd_diagram_png, profile_png
from fedcore.figures.comparison_plots import (
    FOREST_TITLE,
    REFERENCE_ZORDER,
    accuracy_vs_gb_png,
    client_accuracy_png,
    convergence_png,
    family_forest_png,
    fitted,
)
from fedcore.figures.plots import curves_png, fairness_png
from fedcore.figures.privacy import accuracy_vs_epsilon_png

from .test_comparison_plots import PANELS, _diffs, _runs

LONG = "A family title far longer than a panel is wide (paper name, reference, setting)"


def shown_ticks(locations, labels, limits) -> list[Text]:
    """The tick labels inside the axis' view (matplotlib keeps labels for ticks past it)."""
    low, high = sorted(limits)
    span = (high - low) * 1e-9
    return [label for loc, label in zip(locations, labels, strict=True)
            if low - span <= loc <= high + span]


def drawn_texts(fig: Figure) -> list[Text]:
    """The texts the saved figure shows: its titles, texts and legends, and of each visible
    axes its title, labels, tick labels, texts and legend."""
    texts: list[Text] = [t for t in fig.texts]
    if fig._suptitle is not None:  # noqa: SLF001  (matplotlib keeps no public accessor)
        texts.append(fig._suptitle)  # noqa: SLF001
    for legend in fig.legends:
        texts += legend.get_texts()
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        texts += [ax.title, ax._left_title, ax._right_title, *ax.texts]  # noqa: SLF001
        if ax.axison:
            texts += [ax.xaxis.label, ax.yaxis.label, *shown_ticks(ax.get_xticks(),
                      ax.get_xticklabels(), ax.get_xlim()), *shown_ticks(
                      ax.get_yticks(), ax.get_yticklabels(), ax.get_ylim())]
        if ax.get_legend() is not None:
            texts += ax.get_legend().get_texts()
    return [t for t in texts if t.get_visible() and t.get_text().strip()]


def unreadable(fig: Figure) -> list[str]:
    """One line per text under 8 pt or reaching past the figure's edge."""
    canvas = FigureCanvasAgg(fig)  # a closed pyplot figure keeps no renderer: draw it again
    canvas.draw()
    renderer = canvas.get_renderer()
    box = fig.bbox
    out = []
    for text in drawn_texts(fig):
        if text.get_fontsize() < 8:
            out.append(f"{text.get_text()!r}: {text.get_fontsize():.1f} pt")
        ext = text.get_window_extent(renderer)
        if ext.x0 < box.x0 - 1 or ext.x1 > box.x1 + 1 or ext.y0 < box.y0 - 1 or \
                ext.y1 > box.y1 + 1:
            out.append(f"{text.get_text()!r}: outside the figure ({ext} of {box})")
    return out


def _near_one():
    """Runs whose accuracy sits near 1 with seed noise: a t-band would pass 1."""
    runs, acc = _runs()
    rng = np.random.default_rng(1)
    acc = {k: pd.Series(np.clip(0.985 + rng.normal(0, 0.012, len(v)), 0, 1), index=v.index)
           for k, v in acc.items()}
    return runs, acc


def test_convergence_reads_with_the_reference_on_top_and_bands_in_range(tmp_path):
    runs, acc = _near_one()
    panels = [(LONG, 0.1, "fedavg", ["craft (tuned)", "fednova"]), *PANELS[1:]]
    fig = convergence_png(panels, runs, acc, tmp_path / "c.png")
    assert unreadable(fig) == []
    ax = fig.axes[0]
    assert "\n" in ax.get_title() and ax.get_title().replace("\n", " ").startswith(LONG)
    lines = ax.get_lines()
    reference = next(line for line in lines if "(reference)" in str(line.get_label()))
    assert lines[-1] is reference and reference.get_linestyle() == "--"
    assert reference.get_zorder() == REFERENCE_ZORDER > max(
        line.get_zorder() for line in lines[:-1])
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[0] == "fedavg (reference) (n=3)"
    for a in fig.axes:
        for band in a.collections:
            y = band.get_paths()[0].vertices[:, 1]
            assert y.min() >= 0 and y.max() <= 1


def test_the_unclipped_band_would_pass_one():
    """The data of the test above: its uncut t-interval leaves [0, 1] (so the cut is tested)."""
    from fedcore.stats.intervals import mean_interval

    _, acc = _near_one()
    highs = [mean_interval([acc[f"krum-1.0-{s}"].loc[r] for s in range(3)]).high
             for r in range(1, 11)]
    assert max(highs) > 1


def test_the_forest_title_and_panels_fit_the_figure(tmp_path):
    diffs = _diffs()
    diffs.loc[diffs["family"] == diffs["family"].iloc[0], "family"] = LONG
    fig = family_forest_png(diffs, tmp_path / "forest.png")
    assert unreadable(fig) == []
    assert fig.get_suptitle() == FOREST_TITLE and "\n" in FOREST_TITLE


def test_client_accuracy_has_a_legend_and_readable_ticks(tmp_path):
    runs, _ = _runs()
    rng = np.random.default_rng(0)
    finals = {r: rng.uniform(0.2, 1.0, 10) for r in runs["run_id"]}
    fig = client_accuracy_png(runs, finals, tmp_path / "client_accuracy.png")
    assert unreadable(fig) == []
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[:2] == ["median", "mean"]
    for ax in fig.axes:
        assert min(t.get_fontsize() for t in ax.get_xticklabels()) >= 8


def test_accuracy_vs_gb_and_epsilon_read(tmp_path):
    runs, acc = _runs()
    sent = {r: pd.Series(np.cumsum(np.full(len(a), 1e6 if "topk" in r else 1e7)),
                         index=a.index) for r, a in acc.items()}
    assert unreadable(accuracy_vs_gb_png(runs, acc, sent, tmp_path / "gb.png")) == []
    private = pd.DataFrame({"method": ["fedavg"] * 6, "epsilon": [1.0] * 3 + [np.inf] * 3,
                            "accuracy_last_k": [0.6, 0.62, 0.61, 0.8, 0.82, 0.81]})
    accuracy_vs_epsilon_png(private, tmp_path / "eps.png")  # no figure returned: drawn only
    assert (tmp_path / "eps.png").stat().st_size > 0


def test_the_profile_draws_the_reference_on_top_first_in_the_legend(tmp_path):
    tau = np.linspace(0, 1, 11)
    same = pd.DataFrame({"tau": tau, "fraction": 1 - tau, "low": 1 - tau - 0.1,
                         "high": 1 - tau + 0.1})
    profiles = {"craft": same, "fedavg": same.copy(), "fedprox": same * 0.9}
    fig = profile_png(profiles, "final accuracy", "fedavg", tmp_path / "p.png")
    assert unreadable(fig) == []
    ax = fig.axes[0]
    reference = ax.get_lines()[-1]
    assert reference.get_label() == "fedavg (reference)" and reference.get_linestyle() == "--"
    assert reference.get_zorder() > max(line.get_zorder() for line in ax.get_lines()[:-1])
    assert ax.get_legend().get_texts()[0].get_text() == "fedavg (reference)"
    for band in ax.collections:
        y = band.get_paths()[0].vertices[:, 1]
        assert y.min() >= 0 and y.max() <= 1


def test_the_cd_diagram_and_the_run_figures_read(tmp_path):
    ranks = pd.Series({"craft": 1.4, "fedavg": 2.1, "fedprox with a longer label": 2.5})
    assert unreadable(cd_diagram_png(ranks, 0.9, "final accuracy", tmp_path / "cd.png")) == []
    history = [{"round": r, "train/loss": 1 / r, "test/loss": 1.1 / r, "test/accuracy": r / 10,
                "clients/accuracy_mean": r / 11, "clients/accuracy_worst10": r / 20}
               for r in range(1, 11)]
    assert unreadable(curves_png(history, tmp_path / "curves.png")) == []
    accuracy = np.random.default_rng(0).uniform(0, 1, 20)
    assert unreadable(fairness_png(accuracy, 10, tmp_path / "fairness.png")) == []


@pytest.mark.parametrize("width", [3.0, 6.5, 13.0])
def test_fitted_wraps_only_what_is_wider_than_the_figure(width):
    short = "Accuracy"
    assert fitted(short, width) == short
    wrapped = fitted(LONG * 2, width)
    assert wrapped.replace("\n", " ") == (LONG * 2).replace("  ", " ")
    assert max(map(len, wrapped.splitlines())) <= max(20, int(width * 72 / (0.55 * 12)))
