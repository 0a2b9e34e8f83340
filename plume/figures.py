"""How every Plume figure is saved (PNG and PDF, the same resolution and cropping), for each
layer that draws one: the analysis, the report, the experiments."""

from __future__ import annotations

from pathlib import Path

__all__ = ["save_figure"]


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
