"""The report's intervals cover what they claim, measured by simulation.

Every number of ``MEASURED_COVERAGE`` (which the report prints beside its intervals) is
re-measured here from its stated distribution with the report's own code: the Student-t and
Welch functions, and rliable's stratified bootstrap through ``interval_estimates``. Many
simulated data sets are bootstrapped in one rliable call by putting each in its own task
column: rliable resamples the runs of every task independently, so each column gets exactly
the resampling a one-task report gets.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from plume.report.inference import (
    ALPHA,
    COVERAGE_REPETITIONS,
    MEASURED_COVERAGE,
    MIN_RUNS,
    holm,
    mean_interval,
    welch_difference,
)
from plume.report.stats import interval_estimates

SIMS = COVERAGE_REPETITIONS
#: A measured coverage must reproduce within this (about 3 binomial standard errors at
#: 4000 simulations and coverage 0.9; the simulations are seeded, so a pass is stable).
DRIFT = 0.015
#: A nominal 95 % interval must cover within 0.95 +- this on normal data.
NOMINAL = 0.015
BOOT_REPS = 1000


def covered(lo: np.ndarray, hi: np.ndarray, truth: float) -> float:
    return float(np.mean((lo <= truth) & (truth <= hi)))


def normal_runs(rng, n, mean=0.8, sd=0.05):
    return rng.normal(mean, sd, size=(n, SIMS))


def measure_t_mean(n: int, draw, truth: float, seed: int) -> float:
    _, lo, hi = mean_interval(draw(np.random.default_rng(seed), n), axis=0)
    return covered(lo, hi, truth)


def measure_welch(n: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    x, y = rng.normal(0.8, 0.05, (n, SIMS)), rng.normal(0.75, 0.10, (n, SIMS))
    _, lo, hi, _ = welch_difference(x, y, axis=0)
    return covered(lo, hi, 0.05)


def measure_bootstrap(n: int, func, seed: int) -> float:
    """Coverage of rliable's stratified percentile bootstrap of the mean or IQM, one task."""
    runs = normal_runs(np.random.default_rng(seed), n)
    _, intervals = interval_estimates({"sim": runs}, func, reps=BOOT_REPS, seed=seed)
    return covered(intervals["sim"][0], intervals["sim"][1], 0.8)


def poi_per_column(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """rliable's probability of improvement of each task column on its own (ties count 1/2)."""
    greater = (x[:, None, :] > y[None, :, :]).mean(axis=(0, 1))
    ties = (x[:, None, :] == y[None, :, :]).mean(axis=(0, 1))
    return greater + 0.5 * ties


def measure_poi(n: int, shift: float, seed: int) -> float:
    rng = np.random.default_rng(seed)
    x, y = rng.normal(shift, 1.0, (n, SIMS)), rng.normal(0.0, 1.0, (n, SIMS))
    _, intervals = interval_estimates({"sim": (x, y)}, poi_per_column, reps=BOOT_REPS, seed=seed)
    return covered(intervals["sim"][0], intervals["sim"][1], sps.norm.cdf(shift / np.sqrt(2)))


def iqm_per_column(runs: np.ndarray) -> np.ndarray:
    return sps.trim_mean(runs, 0.25, axis=0)


def mean_per_column(runs: np.ndarray) -> np.ndarray:
    return runs.mean(axis=0)


# --------------------------------------------------------------------------- nominal coverage


@pytest.mark.parametrize("n", [MIN_RUNS, 10])
def test_student_t_interval_of_a_mean_has_its_nominal_coverage(n):
    coverage = measure_t_mean(n, normal_runs, 0.8, seed=n)
    assert abs(coverage - 0.95) <= NOMINAL
    assert coverage == pytest.approx(MEASURED_COVERAGE["t_mean_normal"][n], abs=DRIFT)


@pytest.mark.parametrize("n", [MIN_RUNS, 10])
def test_student_t_on_skewed_scores_covers_as_the_report_states(n):
    coverage = measure_t_mean(n, lambda rng, k: rng.beta(2, 5, (k, SIMS)), 2 / 7, seed=10 + n)
    assert coverage == pytest.approx(MEASURED_COVERAGE["t_mean_skewed"][n], abs=DRIFT)
    assert coverage > 0.92  # a little short of 95 % on skewed data, never far


@pytest.mark.parametrize("n", [MIN_RUNS, 10])
def test_welch_interval_of_a_difference_has_its_nominal_coverage(n):
    coverage = measure_welch(n, seed=20 + n)
    assert abs(coverage - 0.95) <= NOMINAL
    assert coverage == pytest.approx(MEASURED_COVERAGE["welch_difference"][n], abs=DRIFT)


@pytest.mark.parametrize("n", [3, MIN_RUNS, 10])
def test_percentile_bootstrap_of_a_mean_undercovers_at_small_n(n):
    """Why the report does not use it for means: measured, not assumed."""
    coverage = measure_bootstrap(n, mean_per_column, seed=30 + n)
    assert coverage == pytest.approx(MEASURED_COVERAGE["percentile_bootstrap_mean"][n],
                                     abs=DRIFT)
    assert coverage < 0.95 - 2 * NOMINAL


# --------------------------------------------------------------------------- stated shortfalls


@pytest.mark.parametrize("n", [MIN_RUNS, 10])
def test_stratified_bootstrap_of_the_iqm_covers_as_the_report_states(n):
    coverage = measure_bootstrap(n, iqm_per_column, seed=40 + n)
    assert coverage == pytest.approx(MEASURED_COVERAGE["bootstrap_iqm"][n], abs=DRIFT)


@pytest.mark.parametrize("n", [MIN_RUNS, 10])
@pytest.mark.parametrize("shift, key", [(1.0, "bootstrap_poi"),
                                        (2.0, "bootstrap_poi_large_effect")])
def test_bootstrap_of_the_probability_of_improvement_covers_as_the_report_states(n, shift, key):
    coverage = measure_poi(n, shift, seed=50 + n + int(10 * shift))
    assert coverage == pytest.approx(MEASURED_COVERAGE[key][n], abs=DRIFT)


def test_the_simulation_bootstraps_each_column_as_rliable_does_one_task():
    """The batched statistics equal rliable's per task, and one column of the batched call
    gets the interval a report's one-task call gets (up to bootstrap noise)."""
    from rliable import metrics

    rng = np.random.default_rng(7)
    x, y = rng.normal(0.3, 1, (10, 3)), rng.normal(0, 1, (10, 3))
    for j in range(3):
        assert poi_per_column(x, y)[j] == pytest.approx(
            metrics.probability_of_improvement(x[:, [j]], y[:, [j]]))
        assert iqm_per_column(x)[j] == pytest.approx(metrics.aggregate_iqm(x[:, [j]]))
    batched = interval_estimates({"s": x}, mean_per_column, reps=20_000, seed=1)[1]["s"]
    for j in range(3):
        alone = interval_estimates({"s": x[:, [j]]}, lambda m: np.array(
            [metrics.aggregate_mean(m)]), reps=20_000, seed=2)[1]["s"][:, 0]
        assert np.allclose(batched[:, j], alone, atol=0.03)  # sd of the runs is 1


# --------------------------------------------------------------------------- verdicts


def test_holm_matches_a_hand_computed_example():
    adjusted = holm(np.array([0.01, 0.04, 0.03, 0.005]))
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 -> 0.02, 0.03, 0.06, 0.04 -> monotone
    assert np.allclose(adjusted, [0.03, 0.06, 0.06, 0.02])
    assert holm(np.array([0.5, 0.9])).max() == 1.0


def test_holm_keeps_the_family_wise_error_of_null_verdicts_at_alpha():
    """Six true-null comparisons of 5 vs 5 runs per report: without correction a report claims
    some difference about 26 % of the time; with Holm at most ALPHA."""
    rng = np.random.default_rng(60)
    m = 6
    x, y = rng.normal(0.8, 0.05, (MIN_RUNS, SIMS, m)), rng.normal(0.8, 0.05, (MIN_RUNS, SIMS, m))
    p = welch_difference(x, y, axis=0)[3]
    raw = np.mean((p < ALPHA).any(axis=-1))
    corrected = np.mean((holm(p) < ALPHA).any(axis=-1))
    assert raw > 0.2
    assert corrected <= ALPHA + NOMINAL


def test_welch_detects_a_real_difference_at_five_runs():
    rng = np.random.default_rng(61)
    # a difference of four run-to-run standard deviations, at Holm's strictest threshold of
    # six verdicts
    x, y = rng.normal(0.88, 0.02, (MIN_RUNS, SIMS)), rng.normal(0.80, 0.02, (MIN_RUNS, SIMS))
    p = welch_difference(x, y, axis=0)[3]
    assert np.mean(p < ALPHA / 6) > 0.9


def test_constant_samples_give_zero_width_intervals_not_nan():
    ones, zeros = np.ones(5), np.zeros(5)
    assert mean_interval(ones) == (1.0, 1.0, 1.0)
    diff, lo, hi, p = welch_difference(ones, ones)
    assert (diff, lo, hi, p) == (0.0, 0.0, 0.0, 1.0)
    assert welch_difference(ones, zeros)[3] == 0.0
