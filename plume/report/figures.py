"""Figures. Every figure is written as PNG and PDF."""

from __future__ import annotations

from pathlib import Path


def save_figure(fig, stem: str | Path) -> list[Path]:
    """Write ``stem``.png and ``stem``.pdf, close the figure, return both paths."""
    import matplotlib.pyplot as plt

    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    for path in paths:
        fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return paths


def cluster_scatter(analysis, stem: str | Path, title: str | None = None) -> list[Path]:
    """The paper's Fig. 11-12: traces over the two most important kept features, coloured by
    cluster, marked by ground-truth kind when the dataset has one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first, second = (analysis.top_features + analysis.top_features)[:2]
    x = analysis.features[first].to_numpy()
    y = analysis.features[second].to_numpy()
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
                    x[member], y[member], s=10, alpha=0.7, color=colours(cluster % 10),
                    marker=markers[m % len(markers)],
                    label=f"cluster {cluster}" + (f" / {kind}" if kind is not None else ""),
                )
    ax.set_xlabel(_short(first))
    ax.set_ylabel(_short(second))
    ax.set_title(title or f"{analysis.dataset}: k={analysis.k}, {len(analysis.labels)} traces")
    ax.legend(fontsize=7, markerscale=1.5, loc="best")
    return save_figure(fig, stem)


def _short(feature: str) -> str:
    """``throughput__quantile__q_0.05`` -> ``quantile q_0.05``."""
    return " ".join(feature.split("__")[1:]) or feature


__all__ = ["cluster_scatter", "save_figure"]
