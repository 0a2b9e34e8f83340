"""The sim-to-emulation gap: emulation minus simulation on the same trace, averaged over the
traces, with a 95 % Student-t interval over the per-trace differences from ``MIN_TRACES``
traces on (none below). ``plume-emulate`` writes it; ``plume-report`` recomputes it from the
folders' tables."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["MIN_TRACES", "gap_rows", "per_trace_gaps"]

MIN_TRACES = 5


def per_trace_gaps(frame: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """One row per trace: emulation minus simulation of each metric (``frame`` has one row
    per mode and trace: columns ``mode``, ``trace_id`` and the metrics)."""
    pivot = frame.pivot(index="trace_id", columns="mode", values=list(metrics))
    return pd.DataFrame({m: pivot[(m, "emulation")] - pivot[(m, "simulation")]
                         for m in metrics}).reset_index()


def gap_rows(frame: pd.DataFrame, metrics: Sequence[str]) -> list[dict]:
    """Per metric: the means of both modes over the traces and the gap with its interval
    (NaN bounds below ``MIN_TRACES`` traces)."""
    gaps = per_trace_gaps(frame, metrics)
    rows = []
    for metric in metrics:
        diff = gaps[metric].to_numpy(float)
        n, mean = len(diff), float(np.mean(diff))
        half = (float(stats.t.ppf(0.975, n - 1) * diff.std(ddof=1) / np.sqrt(n))
                if n >= MIN_TRACES else np.nan)
        by_mode = frame.groupby("mode")[metric].mean()
        rows.append({"metric": metric, "simulation": float(by_mode["simulation"]),
                     "emulation": float(by_mode["emulation"]), "gap": mean,
                     "gap_lo": mean - half, "gap_hi": mean + half, "traces": n})
    return rows
