"""Report figures of a sweep comparison: method families, convergence panels and forest plot."""

from __future__ import annotations

import math

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import pytest
import yaml
from matplotlib.container import ErrorbarContainer

from fedcore.core.config import config_dir, method_names
from fedcore.figures.comparison_plots import (
    CONVERGENCE_TITLE,
    FAMILIES,
    FOREST_TITLE,
    VERDICT_COLOURS,
    convergence_png,
    family_forest_png,
    family_of,
)
from fedcore.stats.intervals import mean_interval

ALPHAS = (0.1, 1.0)
SEEDS = (0, 1, 2)
ROUNDS = np.arange(1, 11)
# row -> (method, compressor, seeds); fedavg is the reference
ROWS: dict[str, tuple[str, str, tuple[int, ...]]] = {
    "fedavg": ("fedavg", "none", SEEDS),
    "craft (tuned)": ("craft", "none", SEEDS),
    "fednova": ("fednova", "none", (0,)),  # one seed: no band
    "krum": ("krum", "none", SEEDS),
    "ef_topk": ("ef_topk", "topk", SEEDS),
    "fedavg_topk": ("fedavg_topk", "topk", (1,)),
}


def _method_compressor(name: str) -> tuple[str, str]:
    spec = yaml.safe_load((config_dir() / "methods" / f"{name}.yaml").read_text())
    return spec["name"], str(spec.get("compression", {}).get("compressor", "none"))


def test_every_shipped_method_has_a_family():
    names = method_names()
    assert len(names) >= 30
    unmapped = [n for n in names if family_of(*_method_compressor(n)) == "other"]
    assert unmapped == []
    assert set(FAMILIES) <= set(names)  # no misspelt entry


def test_family_of():
    assert family_of("fedprox", "none") == "client objectives"
    assert family_of("scafcom_topk", "topk") == "compressed uplinks"
    assert family_of("fedavg", "topk") == "compressed uplinks"  # any compressed uplink
    assert family_of("scaffold", "none") == "personalised and control-variate"
    assert family_of("median", "none") == "robust rules"
    assert family_of("crf_fedprox", "none") == "server rules"
    assert family_of("no_such_method", "none") == "other"


def _runs(rows=ROWS, reference="fedavg"):
    records, acc = [], {}
    rng = np.random.default_rng(0)
    for k, (row, (method, compressor, seeds)) in enumerate(rows.items()):
        for alpha in ALPHAS:
            for seed in seeds:
                run_id = f"{row}-{alpha}-{seed}"
                records.append({"run_id": run_id, "row": row, "method": method,
                                "compressor": compressor, "alpha": alpha, "seed": seed,
                                "is_reference": row == reference})
                curve = 0.9 * (1 - np.exp(-ROUNDS / (2 + k))) * (0.8 + alpha / 10)
                acc[run_id] = pd.Series(curve + rng.normal(0, 0.02, len(ROUNDS)), index=ROUNDS)
    return pd.DataFrame.from_records(records), acc


def _png_ok(path):
    assert path.exists()
    assert path.stat().st_size > 20_000  # a drawn figure, not an empty canvas
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _is_black(colour):
    return mcolors.to_hex(colour) == "#000000"


PANELS = [("CRAFT (craft)", 0.1, "fedavg", ["craft (tuned)", "fednova"]),
          ("robust rules, not in a family", 1.0, None, ["krum"]),
          ("compressed uplinks, not in a family", 0.1, None, ["ef_topk", "fedavg_topk"])]


def test_convergence_panels_only_where_there_are_runs_with_n_in_the_legend(tmp_path):
    runs, acc = _runs()
    path = tmp_path / "convergence.png"
    fig = convergence_png(PANELS, runs, acc, path)
    _png_ok(path)
    assert fig.get_suptitle() == CONVERGENCE_TITLE
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in visible] == [
        f"{t}, Dirichlet α = {a:g}" for t, a, _, _ in PANELS]
    expected = [{"craft (tuned) (n=3)", "fednova (1 seed, no band)", "fedavg (reference) (n=3)"},
                {"krum (n=3)"}, {"ef_topk (n=3)", "fedavg_topk (1 seed, no band)"}]
    for ax, want, (_, alpha, ref, _) in zip(visible, expected, PANELS, strict=True):
        assert ax.get_xlabel() == "round"
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert set(lines) == want
        if ref is not None:
            line = lines[f"{ref} (reference) (n=3)"]
            assert _is_black(line.get_color()) and line.get_linestyle() == "--"
            ids = runs.loc[(runs["row"] == ref) & (runs["alpha"] == alpha), "run_id"]
            mean = pd.concat([acc[r] for r in ids], axis=1).mean(axis=1)
            np.testing.assert_allclose(line.get_ydata(), mean.to_numpy())
        assert len(ax.collections) == sum("1 seed" not in label for label in lines)
    assert not any("no runs" in t.get_text() for ax in fig.axes for t in ax.texts)


def test_convergence_band_is_the_t_interval(tmp_path):
    runs, acc = _runs()
    fig = convergence_png(PANELS, runs, acc, tmp_path / "c.png")
    ax = next(a for a in fig.axes if a.get_title().startswith("robust rules"))
    ids = runs.loc[(runs["row"] == "krum") & (runs["alpha"] == 1.0), "run_id"]
    interval = mean_interval([float(acc[r].loc[5]) for r in ids])
    (krum,) = [line for line in ax.get_lines() if line.get_label() == "krum (n=3)"]
    band = next(c for c in ax.collections
                if mcolors.to_hex(c.get_facecolor()[0]) == mcolors.to_hex(krum.get_color()))
    vertices = band.get_paths()[0].vertices
    at_round = vertices[np.isclose(vertices[:, 0], 5.0), 1]
    assert min(at_round) == pytest.approx(interval.low)
    assert max(at_round) == pytest.approx(interval.high)


def _diffs():
    rows = [("CRAFT (craft), Dirichlet 0.1", "fedlf", 0.04, 0.01, 0.07, "better"),
            ("CRAFT (craft), Dirichlet 0.1", "fedavg", -0.05, -0.08, -0.02, "worse"),
            ("CRAFT (craft), Dirichlet 0.1", "fedprox", 0.001, -0.004, 0.006, "equivalent"),
            ("CRF (crf), Dirichlet 0.1", "krum", 0.01, -0.02, 0.04, "undecided"),
            ("CRF (crf), Dirichlet 0.1", "median", 0.02, math.nan, math.nan, "undecided")]
    return pd.DataFrame([{"family": f, "setting": ("digits", 0.1), "row": r, "mean": m,
                          "low": lo, "high": hi, "verdict": v,
                          "reference": f.split("(")[1].split(")")[0].replace("crf", "crf_fedavg"),
                          "n": 5} for f, r, m, lo, hi, v in rows])


def test_family_forest_intervals_and_colours_follow_the_verdicts(tmp_path):
    diffs = _diffs()
    path = tmp_path / "forest.png"
    fig = family_forest_png(diffs, path)
    _png_ok(path)
    assert fig.get_suptitle() == FOREST_TITLE
    assert [ax.get_title() for ax in fig.axes] == list(dict.fromkeys(diffs["family"]))
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["better", "worse", "equivalent", "undecided", "no test"]
    for ax in fig.axes:
        sub = diffs[diffs["family"] == ax.get_title()].reset_index(drop=True)
        assert [t.get_text() for t in ax.get_yticklabels()] == [f"{r} (n=5)" for r in sub["row"]]
        assert any(line.get_xdata()[0] == 0 for line in ax.get_lines())
        for container in ax.containers:
            assert isinstance(container, ErrorbarContainer)
            data_line, _, (bars,) = container.lines
            (x, y), segment = data_line.get_xydata()[0], bars.get_segments()[0]
            expect = sub.loc[round(y)]
            assert x == pytest.approx(expect["mean"])
            assert (segment[:, 0].min(), segment[:, 0].max()) == pytest.approx(
                (expect["low"], expect["high"]))
            assert mcolors.to_hex(data_line.get_color()) == mcolors.to_hex(
                VERDICT_COLOURS[expect["verdict"]])
            # the plot agrees with the verdict: the interval excludes 0 iff better/worse
            excludes = expect["low"] > 0 or expect["high"] < 0
            assert excludes == (expect["verdict"] in ("better", "worse"))
    points = [line for ax in fig.axes for line in ax.get_lines() if line.get_marker() == "D"]
    assert len(points) == 1  # the comparison without an interval: a point


def test_forest_without_families_says_so(tmp_path):
    from fedcore.report.families import forest_frame

    fig = family_forest_png(forest_frame([]), tmp_path / "f.png")
    assert [t.get_text() for t in fig.texts] == ["no comparison family in this sweep"]


def test_the_forest_draws_the_equivalence_margin(tmp_path):
    diffs = _diffs().assign(margin=0.01)
    fig = family_forest_png(diffs, tmp_path / "forest.png")
    for ax in fig.axes:
        xs = sorted(line.get_xdata()[0] for line in ax.get_lines()
                    if line.get_linestyle() == "--")
        assert xs == pytest.approx([-0.01, 0.01])
