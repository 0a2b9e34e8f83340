"""Paired comparisons (``plume.report.paired``): hand-computed values, the exact sign-flip test
enumerated by hand, and simulations of the paired tests' error rate and power against what
the report states."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plume.report.comparisons import compare, decide
from plume.report.inference import MEASURED_COVERAGE
from plume.report.paired import (
    EXACT_SIGN_FLIP_MAX,
    correlation,
    paired_difference,
    paired_power,
    paired_seeds_for_power,
    sign_flip_p,
    variance_ratio,
)
from plume.report.power import seeds_for_power

SIMS = 4000
DRIFT = 0.015  # about 3 binomial standard errors at 4,000 simulations


def correlated_pairs(rng, n, reps, shift=0.05, seed_sd=0.08, noise_sd=0.05):
    """Pairs sharing a seed effect: correlation seed_sd**2 / (seed_sd**2 + noise_sd**2)."""
    common = rng.normal(0, seed_sd, (n, reps))
    return (0.8 + shift + common + rng.normal(0, noise_sd, (n, reps)),
            0.8 + common + rng.normal(0, noise_sd, (n, reps)))


def test_the_paired_t_of_five_pairs_by_hand():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    y = x - np.array([0.5, 0.1, 0.3, 0.2, 0.4])
    diff, lo, hi, p = paired_difference(x, y)
    # d = .5 .1 .3 .2 .4: mean 0.3, sd sqrt(0.1 / 4) = 0.158114, se 0.070711, t = 4.242641
    # on 4 df: two-sided p = 0.013236; t(0.975, 4) = 2.776445, half-width 0.196324
    assert diff == pytest.approx(0.3)
    assert (lo, hi) == (pytest.approx(0.3 - 0.196324, abs=1e-6),
                        pytest.approx(0.3 + 0.196324, abs=1e-6))
    assert float(p) == pytest.approx(0.013236, abs=1e-6)
    # var(x) = 2.5; cov(x, d) = -0.1 / 4, so var(y) = 2.5 + 0.025 + 2 * 0.025 = 2.575: Welch
    # sees two spreads of about 1.6 where the pairs differ by 0.16
    assert variance_ratio(x, y) == pytest.approx(0.025 / 5.075)


def test_differences_without_spread_give_a_point_and_p_zero_or_one():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert paired_difference(x, x)[1:] == (0.0, 0.0, 1.0)
    diff, lo, hi, p = paired_difference(x + 0.5, x)  # exact in binary: no rounding spread
    assert diff == lo == hi == 0.5 and p == 0.0


def test_the_sign_flip_test_by_enumeration_by_hand():
    # d = 3, 1, 2: sums over the 8 sign patterns: 6, 4, 2, 0, 0, -2, -4, -6 (|.|: 6 4 2 0 0 2 4 6)
    # |sum| >= 6 in 2 of 8: p = 0.25
    assert sign_flip_p(np.array([3.0, 1.0, 2.0]), np.zeros(3)) == pytest.approx(0.25)
    # d = 1, -1, 1, -1, 0.5: every pattern reaches |0.5|: p = 1
    assert sign_flip_p(np.array([1.0, -1.0, 1.0, -1.0, 0.5]), np.zeros(5)) == 1.0
    # the smallest p of n pairs is 2 / 2**n: 0.0625 at 5, below 0.05 from 6 pairs on
    for n in (5, 6, 8):
        assert sign_flip_p(np.arange(1.0, n + 1), np.zeros(n)) == pytest.approx(2 / 2 ** n)
    assert np.isnan(sign_flip_p(np.ones(EXACT_SIGN_FLIP_MAX + 1), np.zeros(EXACT_SIGN_FLIP_MAX + 1)))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-5, 5, allow_nan=False).filter(lambda v: abs(v) > 1e-3),
                min_size=2, max_size=8))
def test_the_sign_flip_p_is_the_share_of_patterns_reaching_the_observed_sum(values):
    d = np.array(values)
    sums = [abs(np.dot(signs, d)) for signs in itertools.product((1, -1), repeat=len(d))]
    expected = np.mean([s >= abs(d.sum()) - 1e-9 for s in sums])
    assert sign_flip_p(d, np.zeros(len(d))) == pytest.approx(expected)


def test_correlation_needs_three_pairs_and_spread():
    assert np.isnan(correlation(np.array([1.0, 2.0]), np.array([2.0, 1.0])))
    assert np.isnan(correlation(np.ones(5), np.arange(5.0)))
    assert correlation(np.arange(5.0), 2 * np.arange(5.0) + 1) == pytest.approx(1.0)


@pytest.mark.parametrize("n", [5, 10])
def test_the_paired_interval_covers_as_the_report_states(n):
    x, y = correlated_pairs(np.random.default_rng(40 + n), n, SIMS)
    _, lo, hi, _ = paired_difference(x, y, axis=0)
    coverage = float(np.mean((lo <= 0.05) & (0.05 <= hi)))
    assert abs(coverage - 0.95) <= DRIFT
    assert coverage == pytest.approx(MEASURED_COVERAGE["paired_difference"][n], abs=DRIFT)


@pytest.mark.parametrize("n, rho", [(5, 0.72), (8, 0.72), (8, 0.0), (8, -0.5)])
def test_with_no_difference_the_paired_tests_reject_at_most_their_level(n, rho):
    """Correlated (and uncorrelated, and anti-correlated) pairs, no difference: the paired t
    and the sign-flip test reject at most 5 % (plus simulation error); Welch's test, which
    ignores the pairing, is far below its level when rho > 0 (the variance it assumes is
    too large) and above it when rho < 0."""
    rng = np.random.default_rng(n + int(10 * rho) + 100)
    cov = [[1.0, rho], [rho, 1.0]]
    draws = rng.multivariate_normal([0, 0], cov, size=(SIMS, n))  # (SIMS, n, 2)
    x, y = draws[..., 0].T, draws[..., 1].T
    paired = float(np.mean(paired_difference(x, y, axis=0)[3] < 0.05))
    flipped = float(np.mean(sign_flip_p(x, y, axis=0) < 0.05))
    assert paired <= 0.05 + DRIFT and abs(paired - 0.05) <= DRIFT  # exact for normal pairs
    assert flipped <= 0.05 + DRIFT
    if n == 5:
        assert flipped == 0.0  # its smallest p is 0.0625


@pytest.mark.parametrize("n, effect, sd_d", [(5, 1.0, 0.6), (8, 0.5, 0.6), (10, 0.3, 0.5)])
def test_with_a_difference_the_paired_t_has_the_power_the_formula_states(n, effect, sd_d):
    rng = np.random.default_rng(n)
    d = rng.normal(effect, sd_d, (n, 20_000))
    rejected = float(np.mean(paired_difference(d, np.zeros_like(d), axis=0)[3] < 0.05))
    assert rejected == pytest.approx(paired_power(effect, sd_d, n, 0.05), abs=0.012)


def test_pairing_needs_fewer_seeds_exactly_as_the_correlation_says():
    """sd_x = sd_y = 1 and rho = 0.75: sd_d = sqrt(2 - 1.5) = 0.707; at a difference of 0.5
    and 0.05 the paired t needs 18 pairs, Welch's test 64 per side."""
    sd_d = np.sqrt(2 - 2 * 0.75)
    assert paired_seeds_for_power(0.5, sd_d, 0.05) == 18
    assert seeds_for_power(0.5, 1.0, 1.0, 0.05) == 64
    assert paired_power(0.5, sd_d, 18, 0.05) >= 0.8 > paired_power(0.5, sd_d, 17, 0.05)


def test_a_comparison_row_says_which_design_it_used():
    rng = np.random.default_rng(3)
    x, y = correlated_pairs(rng, 6, 1, shift=0.03)
    x, y = x.reshape(6, 1), y.reshape(6, 1)
    paired = decide(_frame([compare(x, y, reps=50, seed=0, paired=True)]))
    welch = decide(_frame([compare(x, y, reps=50, seed=0, paired=False)]))
    p_row, w_row = paired.iloc[0], welch.iloc[0]
    assert p_row["design"] == "paired" and w_row["design"] == "welch"
    assert p_row["p_welch"] == pytest.approx(w_row["p_value"])  # Welch's p is in both rows
    assert p_row["p_value"] == pytest.approx(float(paired_difference(x[:, 0], y[:, 0])[3]))
    assert p_row["correlation"] == pytest.approx(correlation(x[:, 0], y[:, 0]))
    assert np.isnan(w_row["correlation"]) and np.isnan(w_row["p_sign_flip"])
    # unequal runs per side cannot pair, whatever the caller says
    assert compare(x, y[:5], reps=50, seed=0, paired=True)["design"] == "welch"


def _frame(rows):
    import pandas as pd

    return pd.DataFrame([{"algorithm": "a", "baseline": "b", "scope": "all", **r} for r in rows])
