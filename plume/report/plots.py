"""Report figures (matplotlib, Agg). Each is written as PNG and PDF by ``save_figure`` and its
title states how many runs it pools ("n = 5 runs per sampler").

What a reader can trust in them:

* **Axes show the scale.** Normalised scores are drawn on an axis that spans at least
  [0, 1] (the floor and ceiling anchors of the normalisation), so a 0.016 gap looks like
  0.016 and not like the whole axis; probabilities of improvement on [0, 1].
* **One name per algorithm**: the names of the report's tables, in every legend and label.
* **Degenerate and missing intervals are visible**: a probability of improvement whose
  interval collapsed to a point is drawn hollow and labelled "degenerate"; below MIN_RUNS
  runs there are no intervals at all and the titles say so.
* **Per-cluster panels name their trace kinds** ("cluster 2: slow_high-var 100%").

``draw_*`` build a figure (tests inspect its axes); ``*_figure`` draw and save it. Colours
follow the paper's figures (arXiv 2302.12403, its plotting colours): Random/uniform #1b9e77 dashed,
Plume-Dynamic #D62728, Plume-Static #a6761d, Trace-Error #7570b3; other samplers take the
remaining tab10 colours in rank order.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from plume.figures import save_figure
from plume.report.comparisons import METRICS
from plume.report.inference import MIN_RUNS
from plume.report.stats import Analysis

PAPER_STYLES = {
    "uniform": ("#1b9e77", "--", "o"),
    "plume_dynamic": ("#D62728", "-", "v"),
    "plume_static": ("#a6761d", "-", "d"),
    "trace_error": ("#7570b3", "-", "<"),
}
_OTHER_COLOURS = ["#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
                  "#17becf", "#2ca02c", "#000000"]
_OTHER_MARKERS = "s^DPX*hp<>"
METRIC_LABELS = {"IQM": "IQM [bootstrap]", "mean": "Mean [Student t]",
                 "median": "Median [bootstrap]", "optimality_gap": "Optimality gap [Student t]"}
SCORE_AXIS = "normalised score (0 = floor, 1 = ceiling)"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _sampler_of(name: str) -> str:
    match = re.search(r"sampler=([^,/]+)", name)
    if match:
        return match.group(1)
    return name.split("/")[-1]


def styles(names: list[str]) -> dict[str, tuple[str, str, str]]:
    """(colour, line style, marker) per algorithm name; paper colours for known samplers."""
    out, k = {}, 0
    taken: set[str] = set()
    for name in names:
        sampler = _sampler_of(name)
        if sampler in PAPER_STYLES and sampler not in taken:
            out[name] = PAPER_STYLES[sampler]
            taken.add(sampler)
        else:
            out[name] = (_OTHER_COLOURS[k % len(_OTHER_COLOURS)], "-",
                         _OTHER_MARKERS[k % len(_OTHER_MARKERS)])
            k += 1
    return out


def score_limits(values: Iterable[float], margin: float = 0.03) -> tuple[float, float]:
    """Axis limits for normalised scores: [0, 1] (the normalisation's anchors) widened to
    every finite value, plus a small margin."""
    finite = [v for v in np.asarray(list(values), dtype=float).ravel() if np.isfinite(v)]
    low, high = min([0.0, *finite]), max([1.0, *finite])
    pad = margin * (high - low)
    return low - pad, high + pad


def _pooled(analysis: Analysis, n_tasks: int | None = None) -> str:
    tasks = len(analysis.tasks) if n_tasks is None else n_tasks
    return f"{analysis.runs_text()} x {tasks} task{'s' if tasks != 1 else ''}"


def _interval_note(analysis: Analysis, what: str = "95% CIs") -> str:
    """What the title says about intervals: which, or that there are none and why."""
    if analysis.has_intervals:
        return what
    return f"no intervals: {analysis.n_runs} < {MIN_RUNS} runs"


# --------------------------------------------------------------------------- aggregates


def draw_interval_estimates(analysis: Analysis):
    """IQM, mean, median and optimality gap of the final scores with their intervals, on
    axes anchored at the normalisation's floor and ceiling."""
    plt = _plt()
    table = analysis.aggregates
    names = table["algorithm"].tolist()[::-1]  # best at the top
    colours = styles(analysis.algorithms)
    fig, axes = plt.subplots(1, len(METRICS), figsize=(3.0 * len(METRICS), 0.45 * len(names) + 1.8),
                             sharey=True)
    for ax, metric in zip(axes, METRICS):
        cols = [metric, f"{metric}_lo", f"{metric}_hi"]
        for y, name in enumerate(names):
            point, lo, hi = table.loc[table["algorithm"] == name, cols].iloc[0]
            colour = colours[name][0]
            if np.isfinite(lo):
                ax.barh(y, hi - lo, left=lo, height=0.6, color=colour, alpha=0.6)
            ax.plot([point], [y], marker="o", color=colour, markeredgecolor="black", zorder=3)
        ax.set_xlim(*score_limits(table[cols].to_numpy()))
        ax.set_ylim(-0.6, len(names) - 0.4)
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names)
        ax.set_title(METRIC_LABELS[metric] + (" (lower is better)" if metric == "optimality_gap"
                                              else ""), fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        ax.set_xlabel("normalised score", fontsize=8)
    fig.suptitle(f"Final test score (progress {analysis.final_progress:.0%}), "
                 f"{_interval_note(analysis)}; {_pooled(analysis)}; axis 0 = floor, "
                 "1 = ceiling", fontsize=10)
    fig.tight_layout()
    return fig


def interval_estimates_figure(analysis: Analysis, stem: str | Path) -> list[Path]:
    return save_figure(draw_interval_estimates(analysis), stem)


# --------------------------------------------------------------------------- PoI


def _poi_mark(ax, y: int, row, colour: str) -> None:
    """One comparison: its interval as a bar, or a hollow marker labelled 'degenerate'
    (interval collapsed to a point) or 'no interval' (too few runs)."""
    if np.isfinite(row["lo"]) and not row["poi_degenerate"]:
        ax.barh(y, row["hi"] - row["lo"], left=row["lo"], height=0.5, color=colour, alpha=0.6)
        ax.plot([row["poi"]], [y], marker="D", markersize=6, color=colour,
                markeredgecolor="black", zorder=3)
        return
    label = ("degenerate: all pairs ordered" if row["poi_degenerate"]
             else f"no interval (n < {MIN_RUNS})")
    ax.plot([row["poi"]], [y], marker="D", markersize=8, markerfacecolor="white",
            markeredgecolor=colour, markeredgewidth=1.5, zorder=3)
    ax.annotate(label, (row["poi"], y), xytext=(-8 if row["poi"] > 0.5 else 8, 7),
                textcoords="offset points", fontsize=7, color="dimgrey",
                ha="right" if row["poi"] > 0.5 else "left")


def draw_poi(analysis: Analysis):
    """P(algorithm > baseline) with its interval per comparison, the verdict beside it;
    degenerate and missing intervals drawn hollow and labelled."""
    plt = _plt()
    rows = analysis.poi.iloc[::-1].reset_index(drop=True)
    colours = styles(analysis.algorithms)
    fig, ax = plt.subplots(figsize=(7.4, 0.42 * len(rows) + 1.6))
    for y, row in rows.iterrows():
        _poi_mark(ax, y, row, colours[row["algorithm"]][0])
        ax.annotate(row["verdict"], (1.0, y), xycoords=("axes fraction", "data"),
                    xytext=(6, 0), textcoords="offset points", va="center", fontsize=7,
                    annotation_clip=False)
    ax.axvline(0.5, color="grey", linestyle=":", linewidth=1)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r.algorithm} vs {r.baseline}: {r.scope}" for r in rows.itertuples()],
                       fontsize=8)
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel(f"P(X > {analysis.baseline}) (probability of improvement; 0.5 = no difference)")
    ax.set_title(f"Probability of improvement over {analysis.baseline}, "
                 f"{_interval_note(analysis, '95% bootstrap CIs')}; hollow = degenerate or no "
                 f"interval; verdicts: Welch t, Holm; {analysis.runs_text()}", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def poi_figure(analysis: Analysis, stem: str | Path) -> list[Path] | None:
    """None without comparisons."""
    if analysis.poi.empty:
        return None
    return save_figure(draw_poi(analysis), stem)


# --------------------------------------------------------------------------- profiles, curves


def draw_profiles(analysis: Analysis):
    """Performance profiles: fraction of runs x tasks scoring above tau, with bands."""
    plt = _plt()
    colours = styles(analysis.algorithms)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name in analysis.algorithms:
        rows = analysis.profiles[analysis.profiles["algorithm"] == name]
        colour, line, _ = colours[name]
        ax.plot(rows["tau"], rows["fraction"], color=colour, linestyle=line, label=name)
        if rows["lo"].notna().all():
            ax.fill_between(rows["tau"], rows["lo"], rows["hi"], color=colour, alpha=0.2)
    ax.set_xlabel(r"normalised score $\tau$")
    ax.set_ylabel(r"fraction of (run, task) scores > $\tau$")
    ax.set_xlim(*score_limits(analysis.profiles["tau"], margin=0.0))
    ax.set_ylim(0.0, 1.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"Performance profiles (final scores), "
                 f"{_interval_note(analysis, '95% bootstrap bands')}; {_pooled(analysis)}",
                 fontsize=9)
    fig.tight_layout()
    return fig


def profiles_figure(analysis: Analysis, stem: str | Path) -> list[Path]:
    return save_figure(draw_profiles(analysis), stem)


def draw_curves(analysis: Analysis):
    """Sample efficiency: IQM of the normalised test score over training, one panel for all
    tasks and one per task, y from the floor to the ceiling."""
    plt = _plt()
    colours = styles(analysis.algorithms)
    curves = analysis.curves
    scopes = list(dict.fromkeys(curves["scope"]))
    fig, axes = plt.subplots(1, len(scopes), figsize=(4.2 * len(scopes), 3.6), squeeze=False,
                             sharey=True)
    for ax, scope in zip(axes[0], scopes):
        for name in analysis.algorithms:
            rows = curves[(curves["scope"] == scope) & (curves["algorithm"] == name)]
            colour, line, marker = colours[name]
            x = 100 * rows["progress"].to_numpy()
            ax.plot(x, rows["IQM"], color=colour, linestyle=line, marker=marker, markersize=4,
                    label=name)
            if rows["lo"].notna().all():
                ax.fill_between(x, rows["lo"], rows["hi"], color=colour, alpha=0.2)
        n_tasks = int(curves.loc[curves["scope"] == scope, "n_tasks"].iloc[0])
        ax.set_title(f"{scope} ({n_tasks} task{'s' if n_tasks != 1 else ''})", fontsize=9)
        ax.set_xlabel("training progress (%)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylim(*score_limits(curves[["IQM", "lo", "hi"]].to_numpy()))
    axes[0][0].set_ylabel("IQM " + SCORE_AXIS, fontsize=8)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Sample efficiency, {_interval_note(analysis, '95% bootstrap bands')}; "
                 f"{analysis.runs_text()}", fontsize=10)
    fig.tight_layout()
    return fig


def curves_figure(analysis: Analysis, stem: str | Path) -> list[Path]:
    return save_figure(draw_curves(analysis), stem)


# --------------------------------------------------------------------------- breakdowns


def panel_title(grouping: str, group: str, members: str, saturated: bool) -> str:
    """'cluster 2: slow_high-var 100%' (wrapped), '(saturated)' when it cannot separate."""
    name = f"cluster {group}" if grouping == "cluster" else group
    title = f"{name}: {members}" if members else name
    title = "\n".join(textwrap.wrap(title, 34))
    return title + ("\n(saturated)" if saturated else "")


def draw_breakdown(analysis: Analysis, grouping: str):
    """One panel per kind / cluster / test set: each algorithm's mean final score with its
    Student-t interval; a cluster's panel names the kinds its traces are."""
    plt = _plt()
    table = analysis.breakdowns[analysis.breakdowns["grouping"] == grouping]
    groups = list(dict.fromkeys(table["group"]))
    colours = styles(analysis.algorithms)
    fig, axes = plt.subplots(1, len(groups), figsize=(max(6.4, 2.3 * len(groups)), 3.9),
                             squeeze=False, sharey=True)
    for ax, group in zip(axes[0], groups):
        rows = table[table["group"] == group].set_index("algorithm").reindex(analysis.algorithms)
        values = rows["mean"].to_numpy(float)
        errors = np.vstack([values - rows["mean_lo"].to_numpy(float),
                            rows["mean_hi"].to_numpy(float) - values])
        x = np.arange(len(values))
        bars = ax.bar(x, values, color=[colours[n][0] for n in analysis.algorithms],
                      yerr=None if np.isnan(errors).all() else errors, capsize=3)
        ax.set_xticks([])
        first = rows.iloc[0]
        ax.set_title(panel_title(grouping, str(group), first["members"],
                                 bool(first["saturated"])), fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylim(*score_limits(table[["mean", "mean_lo", "mean_hi"]].to_numpy()))
    axes[0][0].set_ylabel("mean " + SCORE_AXIS, fontsize=8)
    fig.legend(bars.patches, analysis.algorithms, fontsize=8, loc="lower center",
               ncol=min(4, len(analysis.algorithms)), bbox_to_anchor=(0.5, -0.02))
    label = {"label": "ground-truth kind", "cluster": "cluster", "test_set": "test set"}[grouping]
    fig.suptitle(f"Final score per {label} (traces pooled across test sets), "
                 f"{_interval_note(analysis, '95% Student-t CIs')}; {analysis.runs_text()}",
                 fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def breakdown_figure(analysis: Analysis, grouping: str, stem: str | Path) -> list[Path] | None:
    """None when the runs record no such grouping."""
    table = analysis.breakdowns
    if table.empty or not (table["grouping"] == grouping).any():
        return None
    return save_figure(draw_breakdown(analysis, grouping), stem)


def all_figures(analysis: Analysis, out_dir: str | Path) -> dict[str, list[Path]]:
    """Every report figure under ``out_dir``; {name: [png, pdf]}."""
    out_dir = Path(out_dir)
    figures: dict[str, list[Path] | None] = {
        "interval_estimates": interval_estimates_figure(analysis, out_dir / "interval_estimates"),
        "probability_of_improvement": poi_figure(analysis, out_dir / "probability_of_improvement"),
        "performance_profiles": profiles_figure(analysis, out_dir / "performance_profiles"),
        "sample_efficiency": curves_figure(analysis, out_dir / "sample_efficiency"),
        "per_kind": breakdown_figure(analysis, "label", out_dir / "per_kind"),
        "per_cluster": breakdown_figure(analysis, "cluster", out_dir / "per_cluster"),
    }
    return {name: paths for name, paths in figures.items() if paths}


__all__ = [
    "PAPER_STYLES", "all_figures", "breakdown_figure", "curves_figure", "draw_breakdown",
    "draw_curves", "draw_interval_estimates", "draw_poi", "draw_profiles",
    "interval_estimates_figure", "panel_title", "poi_figure", "profiles_figure",
    "score_limits", "styles",
]
