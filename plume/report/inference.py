"""Which intervals and verdicts a report may state, by which method, and how well they cover.

A report has 3-10 runs per side. At those counts the percentile bootstrap of a mean covers far
less than its nominal 95 % (measured: 74 % at n = 3, where it is close to the min-max range of
the runs, 83 % at n = 5), so:

* a **mean** over runs (each run's average over the tasks: runs are independent, tasks are
  not) gets a Student-t interval;
* a **difference of means** (the effect size of every verdict) gets a paired t interval when
  the two sides are the same seeds (``plume.report.paired``), a Welch t interval otherwise, and
  the verdict is that t-test, corrected over all verdicts of one report by Holm-Bonferroni;
* order statistics (IQM, median) and the probability of improvement keep rliable's stratified
  bootstrap, whose shortfall at small n is measured and printed beside them;
* nothing gets an interval or a verdict from fewer than ``MIN_RUNS`` runs per side.

``MEASURED_COVERAGE`` holds what simulation measured for every method; the report prints it
and ``tests/test_report_stats.py`` re-measures every entry, so the report's claims are tested.
"""

from __future__ import annotations

import numpy as np
from scipy import stats as sps

#: Fewest runs per side for any interval or verdict. The design's first convention said 3;
#: at 3 runs a bootstrap interval is about the min-max of the runs and a probability of
#: improvement is 1.00 [1.00, 1.00] whenever the three runs are ordered, so reports require 5.
MIN_RUNS = 5
CONFIDENCE = 0.95
#: Family-wise error rate of the verdicts of one report (Holm-Bonferroni).
ALPHA = 0.05

#: Coverage of a nominal 95 % interval, measured by simulation: method -> {runs per side:
#: coverage}. ``COVERAGE_SETUP`` says from which distribution and how many repetitions.
MEASURED_COVERAGE: dict[str, dict[int, float]] = {
    "t_mean_normal": {5: 0.951, 10: 0.947},
    "t_mean_skewed": {5: 0.927, 10: 0.942},
    "welch_difference": {5: 0.954, 10: 0.949},
    "paired_difference": {5: 0.947, 10: 0.945},
    "percentile_bootstrap_mean": {3: 0.741, 5: 0.834, 10: 0.901},
    "bootstrap_iqm": {5: 0.901, 10: 0.933},
    "bootstrap_poi": {5: 0.888, 10: 0.927},
    "bootstrap_poi_large_effect": {5: 0.617, 10: 0.850},
}
COVERAGE_REPETITIONS = 4000
COVERAGE_SETUP: dict[str, str] = {
    "t_mean_normal": "runs ~ Normal(0.8, 0.05)",
    "t_mean_skewed": "runs ~ Beta(2, 5), skewed",
    "welch_difference": "Normal(0.8, 0.05) vs Normal(0.75, 0.10), unequal spread",
    "paired_difference": ("pairs sharing a Normal(0, 0.08) seed effect, each side "
                          "+ Normal(0, 0.05): correlation 0.72"),
    "percentile_bootstrap_mean": "runs ~ Normal(0.8, 0.05)",
    "bootstrap_iqm": "one task, runs ~ Normal(0.8, 0.05)",
    "bootstrap_poi": "one task, Normal(1, 1) vs Normal(0, 1): true PoI 0.76",
    "bootstrap_poi_large_effect": "one task, Normal(2, 1) vs Normal(0, 1): true PoI 0.92",
}


def mean_interval(values: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, lo, hi): the Student-t interval of the mean along ``axis`` (the runs).

    Exact for normal runs at any n; measured 93 % for a skewed Beta at n = 5. A constant
    sample gives a zero-width interval (there is no spread to estimate)."""
    values = np.asarray(values, dtype=float)
    n = values.shape[axis]
    mean = values.mean(axis=axis)
    half = sps.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * values.std(axis=axis, ddof=1) / np.sqrt(n)
    return mean, mean - half, mean + half


def welch_difference(x: np.ndarray, y: np.ndarray, axis: int = 0
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(mean(x) - mean(y), lo, hi, two-sided p) by Welch's t (unequal variances, runs along
    ``axis``). Zero spread on both sides gives p = 1 for equal means and 0 otherwise."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    nx, ny = x.shape[axis], y.shape[axis]
    vx, vy = x.var(axis=axis, ddof=1) / nx, y.var(axis=axis, ddof=1) / ny
    diff = x.mean(axis=axis) - y.mean(axis=axis)
    se = np.sqrt(vx + vy)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = (vx + vy) ** 2 / (vx ** 2 / (nx - 1) + vy ** 2 / (ny - 1))
        t = diff / se
    df = np.where(se > 0, df, 1.0)
    p = np.where(se > 0, 2 * sps.t.sf(np.abs(t), df), np.where(diff == 0, 1.0, 0.0))
    half = sps.t.ppf(0.5 + CONFIDENCE / 2, df) * se
    return diff, diff - half, diff + half, p


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values along the last axis: rejecting where the adjusted
    value is below ALPHA keeps the chance of any false verdict among them at most ALPHA."""
    p = np.asarray(p_values, dtype=float)
    m = p.shape[-1]
    if m == 0:
        return p.copy()
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1) * (m - np.arange(m))
    ranked = np.minimum(np.maximum.accumulate(ranked, axis=-1), 1.0)
    adjusted = np.empty_like(ranked)
    np.put_along_axis(adjusted, order, ranked, axis=-1)
    return adjusted


def enough_runs(*counts: int) -> bool:
    """True when every side has at least MIN_RUNS runs."""
    return min(counts) >= MIN_RUNS


def too_few_text(n_runs: int, unit: str = "side") -> str:
    """'too few runs (3 per side; intervals and verdicts need 5, so 2 more)'."""
    more = MIN_RUNS - n_runs
    return (f"too few runs ({n_runs} per {unit}; intervals and verdicts need {MIN_RUNS}, "
            f"so {more} more)")


def coverage_text(method: str) -> str:
    """'0.90 at n = 5, 0.93 at n = 10 (one task, runs ~ Normal(0.8, 0.05))': the measured
    coverage of a nominal 95 % interval of ``method``."""
    measured = ", ".join(f"{c:.2f} at n = {n}" for n, c in MEASURED_COVERAGE[method].items())
    return f"{measured} ({COVERAGE_SETUP[method]})"


__all__ = [
    "ALPHA", "CONFIDENCE", "COVERAGE_REPETITIONS", "COVERAGE_SETUP", "MEASURED_COVERAGE",
    "MIN_RUNS", "coverage_text", "enough_runs", "holm", "mean_interval", "too_few_text",
    "welch_difference",
]
