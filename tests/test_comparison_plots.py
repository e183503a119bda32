"""Report figures of a sweep comparison: method families, convergence panels and forest plot."""

from __future__ import annotations

import math

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import pytest
import yaml
from matplotlib.container import ErrorbarContainer

from fedcore.config import config_dir, method_names
from fedcore.pipeline.stats import mean_interval
from fedcore.tracking.comparison_plots import (
    CONVERGENCE_TITLE,
    FAMILIES,
    FOREST_TITLE,
    MAX_ROWS_PER_PANEL,
    VERDICT_COLOURS,
    family_convergence_png,
    family_of,
    forest_png,
)

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


def test_family_convergence(tmp_path):
    runs, acc = _runs()
    path = tmp_path / "convergence.png"
    fig = family_convergence_png(runs, acc, path)
    _png_ok(path)
    assert fig.get_suptitle() == CONVERGENCE_TITLE
    families = ["server rules", "robust rules", "compressed uplinks"]
    axes = fig.axes
    assert len(axes) == len(families) * len(ALPHAS)
    titles = [ax.get_title() for ax in axes]
    assert titles == [f"{f}, Dirichlet α = {a:g}" for f in families for a in ALPHAS]
    expected = {"server rules": {"craft (tuned)", "fednova (1 seed, no band)"},
                "robust rules": {"krum"},
                "compressed uplinks": {"ef_topk", "fedavg_topk (1 seed, no band)"}}
    for ax, (family, alpha) in zip(axes, [(f, a) for f in families for a in ALPHAS],
                                   strict=True):
        assert ax.get_xlabel() == "round"
        assert ax.get_ylabel() == "test accuracy (global test set)"
        assert ax.get_legend() is not None
        lines = {line.get_label(): line for line in ax.get_lines()}
        # the reference in every panel of its alpha, black dashed, with its mean over seeds
        ref = lines.pop("fedavg (reference)")
        assert _is_black(ref.get_color()) and ref.get_linestyle() == "--"
        ref_ids = runs.loc[(runs["row"] == "fedavg") & (runs["alpha"] == alpha), "run_id"]
        mean = pd.concat([acc[r] for r in ref_ids], axis=1).mean(axis=1)
        np.testing.assert_allclose(ref.get_ydata(), mean.to_numpy())
        assert set(lines) == expected[family]
        assert not any(_is_black(line.get_color()) for line in lines.values())
        # bands: the multi-seed rows and the reference, not the one-seed rows
        assert len(ax.collections) == 1 + sum("1 seed" not in label for label in lines)


def test_convergence_band_is_the_t_interval(tmp_path):
    runs, acc = _runs()
    fig = family_convergence_png(runs, acc, tmp_path / "c.png")
    ax = next(a for a in fig.axes if a.get_title() == "robust rules, Dirichlet α = 1")
    ids = runs.loc[(runs["row"] == "krum") & (runs["alpha"] == 1.0), "run_id"]
    at_5 = [float(acc[r].loc[5]) for r in ids]
    interval = mean_interval(at_5)
    (krum,) = [line for line in ax.get_lines() if line.get_label() == "krum"]
    band = next(c for c in ax.collections
                if mcolors.to_hex(c.get_facecolor()[0]) == mcolors.to_hex(krum.get_color()))
    vertices = band.get_paths()[0].vertices
    at_round = vertices[np.isclose(vertices[:, 0], 5.0), 1]
    assert min(at_round) == pytest.approx(interval.low)
    assert max(at_round) == pytest.approx(interval.high)


def test_large_family_is_split(tmp_path):
    rows = {"fedavg": ("fedavg", "none", SEEDS)}
    names = ["craft", "craft_model", "config", "fedoui", "fednova", "qfedavg", "fedfv", "fedlf",
             "afl", "fedavgm"]  # 10 server rules: two panels of 5
    rows |= {n: (n, "none", SEEDS) for n in names}
    runs, acc = _runs(rows)
    fig = family_convergence_png(runs, acc, tmp_path / "split.png")
    assert len(fig.axes) == 2 * len(ALPHAS)
    assert [ax.get_title() for ax in fig.axes[::2]] == [
        "server rules (1/2), Dirichlet α = 0.1", "server rules (2/2), Dirichlet α = 0.1"]
    for ax in fig.axes:
        assert len(ax.get_lines()) <= MAX_ROWS_PER_PANEL + 1
        assert "fedavg (reference)" in [line.get_label() for line in ax.get_lines()]
    drawn = {line.get_label() for ax in fig.axes for line in ax.get_lines()}
    assert drawn == set(names) | {"fedavg (reference)"}


def _diffs():
    records = []
    verdicts = ["better", "worse", "indistinguishable", "no test"]
    rows = ["craft (tuned)", "krum", "ef_topk", "fednova"]  # fednova: one seed
    for alpha in ALPHAS:
        for metric, label in (("final/accuracy", "final accuracy − reference's"),
                              ("final/accuracy_worst10", "worst-10 % accuracy − reference's")):
            for k, (row, verdict) in enumerate(zip(rows, verdicts, strict=True)):
                mean = (0.03, -0.04, 0.005, 0.01)[k] * (1 + alpha)
                one_seed = verdict == "no test"
                records.append({"row": row, "alpha": alpha, "metric": metric, "label": label,
                                "mean": mean,
                                "low": math.nan if one_seed else mean - 0.01 - 0.002 * k,
                                "high": math.nan if one_seed else mean + 0.015,
                                "verdict": verdict, "reference": "fedavg"})
    return pd.DataFrame.from_records(records)


def test_forest(tmp_path):
    diffs = _diffs()
    path = tmp_path / "forest.png"
    fig = forest_png(diffs, path)
    _png_ok(path)
    assert fig.get_suptitle() == FOREST_TITLE
    metrics = ["final/accuracy", "final/accuracy_worst10"]
    assert len(fig.axes) == len(metrics) * len(ALPHAS)
    rows = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert rows == ["craft (tuned)", "krum", "ef_topk", "fednova"]  # top to bottom, as given
    assert all(ax.get_ylim() == fig.axes[0].get_ylim() for ax in fig.axes)
    legend_texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend_texts[:4] == ["better", "worse", "indistinguishable", "no test"]
    for ax, (alpha, metric) in zip(fig.axes, [(a, m) for a in ALPHAS for m in metrics],
                                   strict=True):
        sub = diffs[(diffs["alpha"] == alpha) & (diffs["metric"] == metric)].set_index("row")
        assert ax.get_title() == f"{metric}, Dirichlet α = {alpha:g}"
        assert ax.get_xlabel() == f"{sub['label'].iloc[0]} (vs fedavg)"
        assert any(line.get_xdata()[0] == 0 for line in ax.get_lines())  # the line at 0
        row_at = dict(zip(ax.get_yticks(), rows, strict=True))  # y shared, labels at left
        seen = set()
        for container in ax.containers:
            assert isinstance(container, ErrorbarContainer)
            data_line, _, (bars,) = container.lines
            for (x, y), segment in zip(data_line.get_xydata(), bars.get_segments(),
                                       strict=True):
                row = row_at[round(y)]
                expect = sub.loc[row]
                assert x == pytest.approx(expect["mean"])
                assert segment[:, 0].min() == pytest.approx(expect["low"])
                assert segment[:, 0].max() == pytest.approx(expect["high"])
                assert mcolors.to_hex(data_line.get_color()) == mcolors.to_hex(
                    VERDICT_COLOURS[expect["verdict"]])
                seen.add(row)
        assert seen == {"craft (tuned)", "krum", "ef_topk"}
        # the one-seed row: a point, no bar
        points = [line for line in ax.get_lines() if line.get_marker() == "D"]
        assert len(points) == 1
        assert row_at[round(points[0].get_ydata()[0])] == "fednova"
        assert points[0].get_xdata()[0] == pytest.approx(sub.loc["fednova", "mean"])


def test_forest_with_nothing_to_compare_says_so(tmp_path):
    from fedcore.pipeline.comparison import forest_frame

    fig = forest_png(forest_frame([], {}), tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 0
    assert [t.get_text() for t in fig.texts] == ["no row to compare with the reference"]
