"""The analysis's own figure: the traces in the space of the features that separate their
clusters (the paper's Fig. 11-12), drawn by ``plume-analyze`` and the experiments."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from plume.figures import save_figure

__all__ = ["cluster_scatter"]


def cluster_scatter(analysis, stem: str | Path, title: str | None = None) -> list[Path]:
    """The paper's Fig. 11-12: traces over the two most important kept features, coloured by
    cluster, marked by ground-truth kind when the dataset has one (a feature with few levels
    jittered by 1.5 % of its range, said on the axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first, second = (analysis.top_features + analysis.top_features)[:2]
    raw_x, raw_y = (analysis.features[f].to_numpy(np.float64) for f in (first, second))
    x, y = _spread(raw_x, seed=0), _spread(raw_y, seed=1)
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    markers = "os^Dvp*hX<>"
    kinds = (
        sorted(set(analysis.true_labels.tolist())) if analysis.true_labels is not None else [None]
    )
    colours = plt.get_cmap("tab10")
    for cluster in range(analysis.k):
        for m, kind in enumerate(kinds):
            member = analysis.labels == cluster
            if kind is not None:
                member &= analysis.true_labels == kind
            if member.any():
                ax.scatter(
                    x[member], y[member], s=8, alpha=0.6, color=colours(cluster % 10),
                    marker=markers[m % len(markers)],
                    label=f"cluster {cluster}" + (f" / {kind}" if kind is not None else ""),
                )
    def label(name: str, raw: np.ndarray, drawn: np.ndarray) -> str:
        return _short(name) + ("" if drawn is raw else " (jittered by 1.5 % of its range)")

    ax.set_xlabel(label(first, raw_x, x))
    ax.set_ylabel(label(second, raw_y, y))
    ax.set_title(title or f"{analysis.dataset}: k={analysis.k}, {len(analysis.labels)} traces")
    ax.legend(fontsize=7, markerscale=1.5, loc="best")
    return save_figure(fig, stem)


def _spread(values: np.ndarray, seed: int, levels: int = 20) -> np.ndarray:
    """A feature on a grid of a few levels (CC's link tuples) drawn with a seeded jitter of 1.5 %
    of its range, so traces on the same grid point do not hide each other's clusters."""
    span = float(np.ptp(values)) if values.size else 0.0
    if np.unique(values).size > levels or span == 0:
        return values
    return values + np.random.default_rng(seed).uniform(-0.015, 0.015, values.size) * span


def _short(feature: str) -> str:
    """``throughput__quantile__q_0.05`` -> ``quantile q_0.05``."""
    return " ".join(feature.split("__")[1:]) or feature
