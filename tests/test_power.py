"""The power of a verdict's Welch test and the seeds it needs (``plume.report.power``): known
values checked by an independent calculation and by simulation, its monotonicity, and the
two numbers every comparison row of a report carries."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from plume.report.comparisons import comparisons_table, verdict_sentence
from plume.report.power import seeds_for_power, welch_df, welch_power


def test_five_seeds_per_side_have_power_029_at_one_standard_deviation():
    """Equal sds and n: Welch-Satterthwaite df = 2n - 2, the pooled t's, so the noncentral t
    by hand with that df is the same number."""
    n, alpha = 5, 0.05
    df, ncp = 2 * n - 2, 1.0 / np.sqrt(2.0 / n)
    critical = sps.t.isf(alpha / 2, df)
    by_hand = sps.nct.sf(critical, df, ncp) + sps.nct.cdf(-critical, df, ncp)
    assert welch_df(1.0, 1.0, n, n) == pytest.approx(df)
    assert welch_power(1.0, 1.0, 1.0, n) == pytest.approx(by_hand, rel=1e-12)
    assert welch_power(1.0, 1.0, 1.0, n) == pytest.approx(0.2863, abs=5e-4)


def test_the_stated_power_against_simulated_t_tests():
    """200,000 experiments of 5 vs 5 normal runs a standard deviation apart: the pooled t-test
    rejects as often as stated (within 4 standard errors); Welch's own test a little less
    often, by the gap the module documents (0.266 vs 0.286 with 400,000)."""
    rng = np.random.default_rng(20240501)
    reps, n = 200_000, 5
    x, y = rng.normal(1.0, 1.0, (reps, n)), rng.normal(0.0, 1.0, (reps, n))
    stated = welch_power(1.0, 1.0, 1.0, n)
    pooled = (sps.ttest_ind(x, y, axis=1).pvalue < 0.05).mean()
    error = np.sqrt(stated * (1 - stated) / reps)
    assert abs(pooled - stated) < 4 * error, (pooled, stated, error)
    welch = (sps.ttest_ind(x, y, axis=1, equal_var=False).pvalue < 0.05).mean()
    assert 0.0 < stated - welch < 0.03, (welch, stated)


def test_unequal_spread_against_simulated_welch_tests():
    """sds 1 and 2, 10 runs each, a difference of 1.5: simulated Welch power within 0.01."""
    rng = np.random.default_rng(7)
    reps, n = 100_000, 10
    x, y = rng.normal(1.5, 1.0, (reps, n)), rng.normal(0.0, 2.0, (reps, n))
    simulated = (sps.ttest_ind(x, y, axis=1, equal_var=False).pvalue < 0.05).mean()
    assert welch_df(1.0, 2.0, n, n) == pytest.approx((0.1 + 0.4) ** 2 / (
        0.1 ** 2 / 9 + 0.4 ** 2 / 9))
    assert welch_power(1.5, 1.0, 2.0, n) == pytest.approx(simulated, abs=0.01)


def test_seventeen_seeds_per_side_reach_80_percent_at_one_standard_deviation():
    assert seeds_for_power(1.0, 1.0, 1.0) == 17
    assert welch_power(1.0, 1.0, 1.0, 16) < 0.8 <= welch_power(1.0, 1.0, 1.0, 17)
    assert seeds_for_power(-1.0, 1.0, 1.0) == 17  # two-sided: the sign does not matter
    assert seeds_for_power(10.0, 1.0, 1.0) == 2 and seeds_for_power(10.0, 1.0, 1.0, least=5) == 5
    assert seeds_for_power(0.01, 1.0, 1.0, most=1000) is None  # ~157,000 needed
    # a stricter level needs more seeds
    assert seeds_for_power(1.0, 1.0, 1.0, alpha=0.005) > 17


def test_large_effects_give_power_one_not_nan():
    """scipy's noncentral t gives NaN for the far tail at large noncentrality."""
    values = welch_power(np.linspace(0, 100, 201)[:, None], 0.01, 0.02,
                         np.arange(2, 40)[None, :], alpha=0.005)
    assert not np.isnan(values).any()
    assert welch_power(0.2, 0.01, 0.01, 5, alpha=0.005) == 1.0


sds = st.floats(0.05, 5.0)
effects = st.floats(0.0, 5.0)
levels = st.sampled_from([0.05, 0.01, 0.005, 0.05 / 12])


@settings(max_examples=60, deadline=None)
@given(effects, sds, sds, st.integers(2, 60), levels)
def test_power_grows_with_the_runs(effect, sd_x, sd_y, n, alpha):
    assert (welch_power(effect, sd_x, sd_y, n + 1, alpha=alpha) + 1e-12
            >= welch_power(effect, sd_x, sd_y, n, alpha=alpha))


@settings(max_examples=60, deadline=None)
@given(effects, st.floats(0.0, 2.0), sds, sds, st.integers(2, 40), levels)
def test_power_grows_with_the_size_of_the_effect_and_ignores_its_sign(effect, more, sd_x,
                                                                      sd_y, n, alpha):
    power = welch_power(effect, sd_x, sd_y, n, alpha=alpha)
    assert welch_power(effect + more, sd_x, sd_y, n, alpha=alpha) + 1e-12 >= power
    assert welch_power(-effect, sd_x, sd_y, n, alpha=alpha) == pytest.approx(power)


@settings(max_examples=40, deadline=None)
@given(sds, sds, st.integers(2, 60), st.integers(2, 60), levels)
def test_power_at_no_effect_is_the_level(sd_x, sd_y, n_x, n_y, alpha):
    assert welch_power(0.0, sd_x, sd_y, n_x, n_y, alpha) == pytest.approx(alpha, rel=1e-6)


# --------------------------------------------------------------------------- in the report


def _row(x: np.ndarray, y: np.ndarray):
    """The comparison row of one task, as the report reads it (a named tuple)."""
    table = comparisons_table({"a": x, "base": y}, ["a", "base"], "base", ["t"], reps=50,
                              seed=0)
    return next(table.itertuples(index=False))


def test_a_comparison_row_states_its_power_at_the_bonferroni_level():
    rng = np.random.default_rng(3)
    x, y = rng.normal(0.6, 0.1, (5, 1)), rng.normal(0.5, 0.1, (5, 1))
    row = _row(x, y)
    assert row.power_level == 0.05  # one verdict: m = 1
    assert row.sd == pytest.approx(x.std(ddof=1)) and row.n_runs == 5
    assert row.power == pytest.approx(welch_power(row.diff, x.std(ddof=1), y.std(ddof=1),
                                                  5, 5, 0.05))
    assert row.seeds_for_80 == seeds_for_power(row.diff, x.std(ddof=1), y.std(ddof=1), 0.05,
                                               least=5)
    assert row.power_note == ""
    sentence = verdict_sentence(row, 1)
    assert (f"power at the observed difference {row.power:.2f} (two-sided Welch at "
            "0.05/1 = 0.05, conservative: Bonferroni level), "
            f"{int(row.seeds_for_80)} seeds per side for 80%.") in sentence


def test_power_is_not_computed_without_a_difference_or_with_too_few_runs():
    same = np.array([[0.1], [0.2], [0.3], [0.4], [0.5]])
    row = _row(same, same[::-1])
    assert np.isnan(row.power) and np.isnan(row.seeds_for_80)
    assert row.power_note == "not computed: the observed difference is 0"
    assert verdict_sentence(row, 1).endswith("power not computed: the observed difference is 0.")
    few = _row(same[:3] + 1, same[:3])
    assert few.verdict == "too few runs" and np.isnan(few.power)
    assert few.power_note == "not computed: too few runs (3 and 3; 5 per side needed)"
    assert "power not computed (too few runs)" in verdict_sentence(few, 0)
    flat = _row(np.full((5, 1), 0.6), np.full((5, 1), 0.5))
    assert flat.power_note == "not computed: no run-to-run spread on either side"
