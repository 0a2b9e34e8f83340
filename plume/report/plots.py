"""Report figures (matplotlib, Agg). Each is written as PNG and PDF by ``save_figure`` and its
title states how many runs it pools ("n = 5 runs per sampler").

Colours follow the paper's plotting code (reference/paper.md §8): Random/uniform #1b9e77
dashed, Plume-Dynamic #D62728, Plume-Static #a6761d, Trace-Error #7570b3; other samplers take
the remaining tab10 colours in rank order.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from plume.report.figures import save_figure
from plume.report.stats import METRICS, Analysis

PAPER_STYLES = {
    "uniform": ("#1b9e77", "--", "o"),
    "plume_dynamic": ("#D62728", "-", "v"),
    "plume_static": ("#a6761d", "-", "d"),
    "trace_error": ("#7570b3", "-", "<"),
}
_OTHER_COLOURS = ["#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
                  "#17becf", "#2ca02c", "#000000"]
_OTHER_MARKERS = "s^DPX*hp<>"
METRIC_LABELS = {"IQM": "IQM", "mean": "Mean", "median": "Median",
                 "optimality_gap": "Optimality gap"}


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


def _pooled(analysis: Analysis, n_tasks: int | None = None) -> str:
    tasks = len(analysis.tasks) if n_tasks is None else n_tasks
    return f"{analysis.runs_text()} x {tasks} task{'s' if tasks != 1 else ''}"


def interval_estimates_figure(analysis: Analysis, stem: str | Path) -> list[Path]:
    """IQM, mean, median and optimality gap of the final scores with 95 % CIs."""
    plt = _plt()
    table = analysis.aggregates
    names = table["algorithm"].tolist()[::-1]  # best at the top
    colours = styles(analysis.algorithms)
    fig, axes = plt.subplots(1, len(METRICS), figsize=(3.0 * len(METRICS), 0.45 * len(names) + 1.6),
                             sharey=True)
    for ax, metric in zip(axes, METRICS):
        for y, name in enumerate(names):
            row = table[table["algorithm"] == name].iloc[0]
            lo, hi = row[f"{metric}_lo"], row[f"{metric}_hi"]
            ax.barh(y, hi - lo, left=lo, height=0.6, color=colours[name][0], alpha=0.75)
            ax.plot([row[metric]] * 2, [y - 0.3, y + 0.3], color="black", linewidth=1.5)
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names)
        ax.set_title(METRIC_LABELS[metric] + (" (lower is better)" if metric == "optimality_gap"
                                              else ""), fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        ax.set_xlabel("normalised score")
    fig.suptitle(f"Final test score (progress {analysis.final_progress:.0%}), "
                 f"95% stratified bootstrap CIs; {_pooled(analysis)}", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, stem)


def poi_figure(analysis: Analysis, stem: str | Path) -> list[Path] | None:
    """P(algorithm > baseline) with 95 % CIs, all tasks and each task; None without pairs."""
    if analysis.poi.empty:
        return None
    plt = _plt()
    rows = analysis.poi.iloc[::-1].reset_index(drop=True)
    colours = styles(analysis.algorithms)
    fig, ax = plt.subplots(figsize=(6.4, 0.4 * len(rows) + 1.4))
    for y, row in rows.iterrows():
        bold = row["n_tasks"] == len(analysis.tasks)
        ax.barh(y, row["hi"] - row["lo"], left=row["lo"], height=0.6 if bold else 0.4,
                color=colours[row["algorithm"]][0], alpha=0.85 if bold else 0.5)
        ax.plot([row["poi"]] * 2, [y - 0.3, y + 0.3], color="black", linewidth=1.5)
        ax.plot([row["poi"]], [y], marker="D", markersize=5, color=colours[row["algorithm"]][0],
                markeredgecolor="black", zorder=3)
    ax.axvline(0.5, color="grey", linestyle=":", linewidth=1)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r.algorithm} vs {r.baseline}: {r.scope}" for r in rows.itertuples()],
                       fontsize=8)
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel(f"P(X > {analysis.baseline}) (probability of improvement; 0.5 = no difference)")
    ax.set_title(f"Probability of improvement over {analysis.baseline}, 95% CIs "
                 f"(independent bootstrap); {analysis.runs_text()}", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, stem)


def profiles_figure(analysis: Analysis, stem: str | Path) -> list[Path]:
    """Performance profiles: fraction of runs x tasks scoring above tau, 95 % CI bands."""
    plt = _plt()
    colours = styles(analysis.algorithms)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name in analysis.algorithms:
        rows = analysis.profiles[analysis.profiles["algorithm"] == name]
        colour, line, _ = colours[name]
        ax.plot(rows["tau"], rows["fraction"], color=colour, linestyle=line, label=name)
        ax.fill_between(rows["tau"], rows["lo"], rows["hi"], color=colour, alpha=0.2)
    ax.set_xlabel(r"normalised score $\tau$")
    ax.set_ylabel(r"fraction of (run, task) scores > $\tau$")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"Performance profiles (final scores); {_pooled(analysis)}", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, stem)


def curves_figure(analysis: Analysis, stem: str | Path) -> list[Path]:
    """Sample efficiency: IQM of the normalised test score over training, 95 % CI bands; one
    panel for all tasks and one per task."""
    plt = _plt()
    colours = styles(analysis.algorithms)
    scopes = list(dict.fromkeys(analysis.curves["scope"]))
    fig, axes = plt.subplots(1, len(scopes), figsize=(4.2 * len(scopes), 3.6), squeeze=False,
                             sharey=True)
    for ax, scope in zip(axes[0], scopes):
        for name in analysis.algorithms:
            rows = analysis.curves[(analysis.curves["scope"] == scope)
                                   & (analysis.curves["algorithm"] == name)]
            colour, line, marker = colours[name]
            x = 100 * rows["progress"].to_numpy()
            ax.plot(x, rows["IQM"], color=colour, linestyle=line, marker=marker, markersize=4,
                    label=name)
            ax.fill_between(x, rows["lo"], rows["hi"], color=colour, alpha=0.2)
        n_tasks = int(analysis.curves.loc[analysis.curves["scope"] == scope, "n_tasks"].iloc[0])
        ax.set_title(f"{scope} ({n_tasks} task{'s' if n_tasks != 1 else ''})", fontsize=9)
        ax.set_xlabel("training progress (%)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("IQM normalised test score")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Sample efficiency, 95% CIs; {analysis.runs_text()}", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, stem)


def breakdown_figure(analysis: Analysis, grouping: str, stem: str | Path) -> list[Path] | None:
    """Per-kind (``grouping="label"``) or per-cluster bars: IQM with 95 % CIs per algorithm;
    None when the runs record no such grouping."""
    table = analysis.breakdowns
    if table.empty or not (table["grouping"] == grouping).any():
        return None
    plt = _plt()
    table = table[table["grouping"] == grouping]
    groups = list(dict.fromkeys(table["group"]))
    colours = styles(analysis.algorithms)
    width = 0.8 / len(analysis.algorithms)
    fig, ax = plt.subplots(figsize=(max(6.4, 1.3 * len(groups) * max(1, len(analysis.algorithms)
                                                                      / 2)), 4.0))
    for i, name in enumerate(analysis.algorithms):
        rows = table[table["algorithm"] == name].set_index("group").reindex(groups)
        x = np.arange(len(groups)) + (i - (len(analysis.algorithms) - 1) / 2) * width
        values = rows["IQM"].to_numpy(dtype=float)
        errors = np.vstack([values - rows["IQM_lo"].to_numpy(float),
                            rows["IQM_hi"].to_numpy(float) - values])
        ax.bar(x, values, width=width, color=colours[name][0], label=name, yerr=errors,
               capsize=3, error_kw={"linewidth": 1})
    ax.set_xticks(np.arange(len(groups)))
    label = "ground-truth kind" if grouping == "label" else "cluster"
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_xlabel(label)
    ax.set_ylabel("IQM normalised test score")
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"Final score per {label}, 95% CIs; {analysis.runs_text()} "
                 f"(tasks: test sets holding the {label})", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, stem)


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
    "PAPER_STYLES", "all_figures", "breakdown_figure", "curves_figure",
    "interval_estimates_figure", "poi_figure", "profiles_figure", "styles",
]
