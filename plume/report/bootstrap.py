"""The report's only door to rliable: aggregates, stratified bootstrap intervals, profiles.

Kept thin so a vendored bootstrap could replace rliable without touching the report. Two
rliable facts shape it (rliable 1.2, ``library.py``): its bootstrap ignores ``random_state``
and draws from the global NumPy RNG, so every call goes through ``seeded``; and it resamples
the runs of each task independently (tasks are strata), which is what a report with seeds on
axis 0 and tasks on axis 1 needs. One call per algorithm, so an algorithm's interval does not
depend on which other algorithms share the report.

At the run counts of a report these percentile intervals are short of 95 % (measured in
``plume.report.inference.MEASURED_COVERAGE``); the report uses them for the IQM, the median,
the probability of improvement, profiles and curves, and says so.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps


def seeded(call: Callable[..., Any], seed: int, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)`` right after ``np.random.seed(seed)``; the caller's global RNG
    state is restored afterwards. rliable's bootstrap ignores ``random_state`` and draws with
    ``np.random.choice`` (rliable 1.2, ``library.py``), so only seeding makes it reproducible."""
    state = np.random.get_state()
    try:
        np.random.seed(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # arch 7: random_state deprecated
            return call(*args, **kwargs)
    finally:
        np.random.set_state(state)


def interval_estimates(score_dict: Mapping[str, Any], func: Callable[..., np.ndarray], *,
                       reps: int, seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``rliable.library.get_interval_estimates`` (95 % percentile stratified bootstrap), one
    seeded call per key. A value that is a tuple of arrays uses rliable's
    ``StratifiedIndependentBootstrap`` (each array resampled on its own, e.g. for probability
    of improvement). Returns (point estimates, intervals of shape (2, n_outputs))."""
    from rliable import library

    points, intervals = {}, {}
    for key, value in score_dict.items():
        point, interval = seeded(library.get_interval_estimates, seed, {key: value}, func,
                                 reps=reps, confidence_interval_size=0.95)
        points[key] = np.atleast_1d(np.asarray(point[key], dtype=float))
        intervals[key] = np.asarray(interval[key], dtype=float).reshape(2, -1)
    return points, intervals


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean over all runs x tasks: ``scipy.stats.trim_mean(scores, 0.25)``."""
    return float(sps.trim_mean(np.asarray(scores, dtype=float), 0.25, axis=None))


def aggregate_metrics(scores: np.ndarray) -> np.ndarray:
    """[IQM, mean, median, optimality gap (gamma = 1, the normalised ceiling)] of a matrix."""
    from rliable import metrics

    return np.array([
        metrics.aggregate_iqm(scores),
        metrics.aggregate_mean(scores),
        metrics.aggregate_median(scores),
        metrics.aggregate_optimality_gap(scores, 1.0),
    ])


def iqm_and_median(scores: np.ndarray) -> np.ndarray:
    """[IQM, median]: the order statistics whose intervals come from the bootstrap."""
    from rliable import metrics

    return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_median(scores)])


def iqm_per_frame(scores: np.ndarray) -> np.ndarray:
    """IQM at each point of the last axis of a (runs, tasks, frames) array (as rliable's
    sample-efficiency example, vectorised: identical to ``aggregate_iqm(scores[..., i])``)."""
    return sps.trim_mean(scores.reshape(-1, scores.shape[-1]), 0.25, axis=0)


def poi_point(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) averaged over tasks, rliable's Mann-Whitney form, without an interval."""
    from rliable import metrics

    return float(metrics.probability_of_improvement(x, y))


def probability_of_improvement(x: np.ndarray, y: np.ndarray, *, reps: int,
                               seed: int) -> tuple[float, float, float]:
    """P(X > Y) averaged over tasks (rliable's Mann-Whitney form) with a 95 % CI from the
    stratified *independent* bootstrap (X and Y resampled separately; run counts may differ)."""
    from rliable import metrics

    points, intervals = interval_estimates(
        {"pair": (x, y)}, metrics.probability_of_improvement, reps=reps, seed=seed)
    return float(points["pair"][0]), float(intervals["pair"][0, 0]), float(intervals["pair"][1, 0])


def performance_profiles(matrices: Mapping[str, np.ndarray], taus: np.ndarray, *, reps: int,
                         seed: int, intervals: bool = True) -> pd.DataFrame:
    """Score distributions (fraction of runs x tasks with score > tau), one row per
    (algorithm, tau); 95 % bands from ``rliable.library.create_performance_profile`` when
    ``intervals``, NaN bands otherwise (too few runs for a band to mean anything)."""
    from rliable import library

    rows = []
    for name, matrix in matrices.items():
        if intervals:
            profile, cis = seeded(library.create_performance_profile, seed, {name: matrix},
                                  taus, reps=reps)
            fraction = np.asarray(profile[name], dtype=float)
            low, high = np.asarray(cis[name], dtype=float).reshape(2, -1)
        else:
            fraction = (matrix.reshape(-1, 1) > taus.reshape(1, -1)).mean(axis=0)
            low = high = np.full(len(taus), np.nan)
        rows += [{"algorithm": name, "tau": float(t), "fraction": float(p), "lo": float(lo),
                  "hi": float(hi)} for t, p, lo, hi in zip(taus, fraction, low, high)]
    return pd.DataFrame(rows, columns=["algorithm", "tau", "fraction", "lo", "hi"])


__all__ = [
    "aggregate_metrics", "interval_estimates", "iqm", "iqm_and_median", "iqm_per_frame",
    "performance_profiles", "poi_point", "probability_of_improvement", "seeded",
]
