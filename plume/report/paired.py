"""Paired comparisons: seed s of one method against seed s of the other.

Seed s of every method starts from the same network initialisation and the same RNG streams
(``plume.harness.training.seeding``), and every method is scored on the same test traces, so
a report's two sides are pairs, not two independent samples. Where seed-level outcomes
correlate (a lucky initialisation stays lucky), the difference of a pair varies less than the
difference of two independent runs: ``var(d) = sd_x**2 + sd_y**2 - 2 rho sd_x sd_y``, and at
equal n the paired estimate's variance is that over Welch's ``sd_x**2 + sd_y**2``
(:func:`variance_ratio`). Where they do not correlate the ratio is about 1 and the paired test
only gives up degrees of freedom (n - 1 instead of about 2n - 2).

* **Paired t** (the verdict's test when the two sides are the same seeds): the mean of the
  per-seed differences with its Student-t interval and two-sided p, df n - 1; exact for
  normal differences at any n.
* **Exact sign-flip permutation test** (beside it, free of the normality assumption): with no
  difference, a pair's two runs are exchangeable, so each of the 2**n sign patterns of the
  differences is equally likely; p is the share of them whose |sum| reaches the observed one.
  Its smallest p is 2 / 2**n (0.0625 at 5 pairs, 0.0078 at 8): at 5 pairs it can never reject
  at 0.05, which the report says rather than hides. Computed exactly up to
  ``EXACT_SIGN_FLIP_MAX`` pairs.
* **Power** of the paired t: noncentral t with df n - 1 and noncentrality
  ``effect sqrt(n) / sd_d``, exact for normal differences (no Welch approximation involved).
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy import stats as sps

from plume.report.inference import ALPHA, CONFIDENCE
from plume.report.power import MAX_SEEDS, TARGET_POWER, smallest_n

#: Most pairs for which the sign-flip test enumerates every pattern (2**16 = 65,536 sums per
#: comparison); beyond it the paired t stands alone and the report says so.
EXACT_SIGN_FLIP_MAX = 16


def paired_difference(x: np.ndarray, y: np.ndarray, axis: int = 0
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(mean(x - y), lo, hi, two-sided p) by the paired t-test, row i of ``x`` and of ``y``
    one pair (runs along ``axis``). Differences without spread give a zero-width interval
    and p = 1 for a zero mean, 0 otherwise."""
    d = np.asarray(x, dtype=float) - np.asarray(y, dtype=float)
    n = d.shape[axis]
    diff = d.mean(axis=axis)
    se = d.std(axis=axis, ddof=1) / np.sqrt(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = diff / se
    p = np.where(se > 0, 2 * sps.t.sf(np.abs(t), n - 1), np.where(diff == 0, 1.0, 0.0))
    half = sps.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * se
    return diff, diff - half, diff + half, p


def sign_patterns(n: int) -> np.ndarray:
    """Every one of the 2**n sign vectors of length n, as rows of +1 / -1."""
    return np.array(list(itertools.product((1.0, -1.0), repeat=n)))


def sign_flip_p(x: np.ndarray, y: np.ndarray, axis: int = 0) -> np.ndarray:
    """Two-sided p of the exact sign-flip permutation test of the mean paired difference
    (pairs along ``axis``); NaN beyond ``EXACT_SIGN_FLIP_MAX`` pairs."""
    d = np.moveaxis(np.asarray(x, dtype=float) - np.asarray(y, dtype=float), axis, -1)
    n = d.shape[-1]
    if n > EXACT_SIGN_FLIP_MAX:
        return np.full(d.shape[:-1], np.nan)
    sums = np.abs(d @ sign_patterns(n).T)  # (..., 2**n); the identity pattern is the first
    observed = sums[..., :1]
    reach = sums >= observed * (1 - 1e-12) - 1e-15  # ties by rounding count as reaching
    p = reach.mean(axis=-1)
    return float(p) if np.ndim(p) == 0 else p


def correlation(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation of the per-seed scores of the two sides; NaN when either has no
    spread (or fewer than 3 pairs: a correlation of 2 points is +-1 by construction)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3 or np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def variance_ratio(x: np.ndarray, y: np.ndarray) -> float:
    """Variance of the paired estimate of the difference over Welch's, at these runs:
    ``var(x - y) / (var(x) + var(y))`` (below 1: pairing helps); NaN without spread."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    unpaired = np.var(x, ddof=1) + np.var(y, ddof=1)
    return float(np.var(x - y, ddof=1) / unpaired) if unpaired > 0 else float("nan")


def paired_power(effect, sd_d, n, alpha: float = ALPHA):
    """Power of the two-sided paired t-test at level ``alpha`` with ``n`` pairs whose
    differences have mean ``effect`` and standard deviation ``sd_d`` (noncentral t, df
    n - 1; exact for normal differences). Broadcasts; ``alpha`` at effect 0."""
    n = np.asarray(n, dtype=float)
    df = n - 1
    critical = sps.t.isf(alpha / 2, df)
    ncp = np.abs(np.asarray(effect, dtype=float)) * np.sqrt(n) / np.asarray(sd_d, dtype=float)
    upper = sps.nct.sf(critical, df, ncp)
    upper = np.where(np.isnan(upper), 1.0 - sps.nct.cdf(critical, df, ncp), upper)
    lower = np.nan_to_num(sps.nct.cdf(-critical, df, ncp), nan=0.0)
    power = np.clip(upper + lower, 0.0, 1.0)
    return float(power) if np.ndim(power) == 0 else power


def paired_seeds_for_power(effect: float, sd_d: float, alpha: float = ALPHA,
                           target: float = TARGET_POWER, least: int = 2,
                           most: int = MAX_SEEDS) -> int | None:
    """The fewest pairs (seeds per side), at least ``least``, whose paired t at ``alpha`` has
    ``target`` power at ``effect``; None when even ``most`` do not."""
    return smallest_n(lambda n: paired_power(effect, sd_d, n, alpha) >= target,
                      least=least, most=most)


__all__ = [
    "EXACT_SIGN_FLIP_MAX", "correlation", "paired_difference", "paired_power",
    "paired_seeds_for_power", "sign_flip_p", "sign_patterns", "variance_ratio",
]
