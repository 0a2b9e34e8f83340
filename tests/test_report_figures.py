"""Report figures a reader can trust, checked on the drawn axes: scales anchored at the
normalisation's floor and ceiling, one name per sampler, degenerate and missing intervals
visible, per-cluster panels that name their kinds."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

from plume.report import analyse, load_scores, scan_runs
from plume.report.plots import (
    all_figures,
    draw_breakdown,
    draw_curves,
    draw_interval_estimates,
    draw_poi,
    draw_profiles,
    score_limits,
)
from tests.test_report import LABELS, SHIFTS, write_run

#: Saturated fast kinds and close scores (uniform 0.875, plume_static 0.89 normalised; one
#: clear winner, plume_dynamic 0.96), as in the quickstart, where a 0.016 gap looked dominant
#: on an axis spanning 0.88-0.90.
CEILING = {"fast_low-var": 6.0, "fast_high-var": 6.0}
CLOSE = {"uniform": 1.0, "plume_static": 1.05, "plume_dynamic": 1.4}


def _analysis(root: Path, n_seeds: int):
    for sampler in SHIFTS:
        for seed in range(n_seeds):
            write_run(root, sampler, seed, shift=CLOSE[sampler], n_traces=8, clusters=True,
                      fixed=CEILING)
    return analyse(load_scores(scan_runs(root)), reps=100)


@pytest.fixture(scope="module")
def five(tmp_path_factory):
    return _analysis(tmp_path_factory.mktemp("five"), 5)


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    return _analysis(tmp_path_factory.mktemp("three"), 3)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _spans_floor_to_ceiling(limits: tuple[float, float]) -> bool:
    return limits[0] <= 0.0 and limits[1] >= 1.0


def test_score_limits_anchor_at_floor_and_ceiling():
    low, high = score_limits([0.88, 0.90])
    assert low < 0.0 and 1.0 < high < 1.05
    assert score_limits([-0.4, 1.3])[0] < -0.4 and score_limits([-0.4, 1.3])[1] > 1.3
    assert _spans_floor_to_ceiling(score_limits([np.nan, 0.5]))


def test_interval_figure_shows_the_scale_and_draws_intervals_from_five_runs(five):
    fig = draw_interval_estimates(five)
    for ax in fig.axes:
        assert _spans_floor_to_ceiling(ax.get_xlim())
        assert len(ax.patches) == len(five.algorithms)  # one interval bar per sampler
    assert "95% CIs" in fig._suptitle.get_text()


def test_interval_figure_with_three_runs_draws_points_only_and_says_why(three):
    fig = draw_interval_estimates(three)
    assert all(len(ax.patches) == 0 for ax in fig.axes)
    assert "no intervals: 3 < 5 runs" in fig._suptitle.get_text()


def test_every_figure_names_samplers_as_the_tables_do(five):
    names = set(five.aggregates["algorithm"])
    assert names == {"uniform", "plume_static", "plume_dynamic"}
    figures = [draw_interval_estimates(five), draw_profiles(five), draw_curves(five),
               draw_breakdown(five, "cluster"), draw_poi(five)]
    for fig in figures:
        legends = [t.get_text() for leg in [*fig.legends, *(a.get_legend() for a in fig.axes)]
                   if leg is not None for t in leg.get_texts()]
        assert set(legends) <= names
        ticks = [t.get_text() for ax in fig.axes for t in ax.get_yticklabels() if t.get_text()]
        for tick in ticks:
            assert tick.split(" vs ")[0].split(":")[0] in names or tick.replace(
                ".", "").replace("−", "").replace("-", "").isdigit(), tick


def test_poi_figure_marks_degenerate_intervals_hollow_on_a_zero_to_one_axis(five):
    assert five.poi["poi_degenerate"].any() and not five.poi["poi_degenerate"].all()
    fig = draw_poi(five)
    ax = fig.axes[0]
    assert ax.get_xlim()[0] <= 0.0 and ax.get_xlim()[1] >= 1.0
    hollow = [line for line in ax.lines if line.get_markerfacecolor() == "white"]
    texts = [t.get_text() for t in ax.texts]
    assert len(hollow) == int(five.poi["poi_degenerate"].sum())
    assert texts.count("degenerate: all pairs ordered") == len(hollow)
    assert len(ax.patches) == int((~five.poi["poi_degenerate"]).sum())  # real intervals
    assert set(five.poi["verdict"]) <= set(texts)  # the verdict beside each row


def test_poi_figure_with_three_runs_has_no_interval_and_no_verdict(three):
    ax = draw_poi(three).axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert len(ax.patches) == 0
    assert texts.count("no interval (n < 5)") == len(three.poi)
    assert not {"better", "worse"} & set(texts)


def test_per_cluster_panels_name_their_kinds_and_flag_saturation(five):
    fig = draw_breakdown(five, "cluster")
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0] == "cluster 0: fast_low-var 100%\n(saturated)"
    assert titles[3] == "cluster 3: slow_high-var 100%"
    assert len(titles) == len(LABELS)
    for ax in fig.axes:
        assert _spans_floor_to_ceiling(ax.get_ylim())


def test_curves_and_profiles_show_the_whole_scale(five, three):
    for analysis in (five, three):
        for ax in draw_curves(analysis).axes:
            assert _spans_floor_to_ceiling(ax.get_ylim())
        ax = draw_profiles(analysis).axes[0]
        assert _spans_floor_to_ceiling(ax.get_xlim()) and ax.get_ylim() == (0.0, 1.0)
    bands = [c for c in draw_curves(three).axes[0].collections if len(c.get_paths())]
    assert not bands  # no bootstrap band from 3 runs


def test_all_figures_render_to_png_and_pdf(five, tmp_path):
    files = all_figures(five, tmp_path)
    assert set(files) == {"interval_estimates", "probability_of_improvement",
                          "performance_profiles", "sample_efficiency", "per_kind",
                          "per_cluster"}
    for paths in files.values():
        assert [p.suffix for p in paths] == [".png", ".pdf"]
        assert all(p.stat().st_size > 1000 for p in paths)
