"""A group-sequential design for adding seeds in rounds until each comparison is decided.

Five seeds per side resolve only large differences (``plume.report.power``), and a fixed
larger count wastes runs on differences that five already settle. Looking at the data after
every round and stopping when a comparison is clear is valid only if the repeated looks are
paid for; this module pays with the error-spending approach of Lan & DeMets (1983), "Discrete
sequential boundaries for clinical trials", Biometrika 70(3), 659-663, with the
O'Brien-Fleming-type spending function, as set out in Jennison & Turnbull (2000), "Group
Sequential Methods with Applications to Clinical Trials" (Chapman & Hall/CRC), ch. 7 and 19:

* looks after ``n_1 < ... < n_K = cap`` runs per side; information fractions ``t_k = n_k / cap``;
* the error spent by look k: each side spends its ``alpha / 2`` by the O'Brien-Fleming-type
  function ``2 - 2 Phi(z_{alpha/4} / sqrt(t))`` (the symmetric two-sided design as Jennison &
  Turnbull tabulate it; the same function on |Z| at level alpha would spend more early and
  give 3.92, 2.77, 2.30, 2.04 below), so early looks spend almost nothing and the last look
  tests at close to the fixed-sample level;
* boundary ``c_k`` on ``|Z_k|`` makes the chance, under no difference, of first crossing at look
  k equal to ``alpha(t_k) - alpha(t_{k-1})``, computed from the canonical joint distribution
  (Z_k normal, independent increments, ``corr(Z_j, Z_k) = sqrt(n_j / n_k)``) by numerical
  integration of the density of the score statistic on a grid (Simpson's rule; Jennison &
  Turnbull ch. 19). For 4 equally spaced looks at 0.05 this gives the published 4.33, 2.96,
  2.36, 2.01.

A comparison's statistic at a look is the report's test of the difference of mean scores (the
paired t when the two sides are the same seeds, ``plume.report.paired``; Welch's t otherwise),
mapped to the normal scale through its two-sided p-value
(``z = sign(diff) * Phi^{-1}(1 - p / 2)``), so the heavier tails of t at 5 runs are accounted
for; the mean of n paired differences has independent increments too, so the same canonical
distribution holds. Several comparisons share the family-wise
error by Bonferroni: each gets a design at ``alpha / m`` (simple and valid whatever their
dependence, e.g. a shared baseline). At each look a comparison is **rejected** (a difference)
when ``|z| >= c_k``; otherwise it **continues**, and at the cap it ends with **no difference at
the cap**. A decided comparison takes no more seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as sps

from plume.report.inference import ALPHA, MIN_RUNS, welch_difference
from plume.report.paired import paired_difference

REJECTED = "rejected"
CONTINUE = "continue"
NO_DIFFERENCE = "no difference at the cap"
#: Grid points per look of the numerical integration (odd, for Simpson's rule): boundaries
#: agree with 4,001 points to better than 1e-4.
GRID = 1001
METHOD = ("Lan-DeMets alpha spending, O'Brien-Fleming-type function, boundaries from the "
          "canonical joint distribution by numerical integration (Lan & DeMets 1983, "
          "Biometrika 70(3); Jennison & Turnbull 2000); the paired t (same seeds) or Welch's t "
          "mapped to z by its p-value; "
          "Bonferroni alpha/m over the comparisons")


def obrien_fleming_spending(fraction, alpha: float = ALPHA):
    """Two-sided error spent by information fraction ``fraction``: each side spends its
    ``alpha / 2`` by 2 - 2 Phi(z_{alpha/4} / sqrt(t)), the two sides twice that."""
    fraction = np.asarray(fraction, dtype=float)
    return 4.0 * sps.norm.sf(sps.norm.isf(alpha / 4) / np.sqrt(fraction))


def default_looks(cap: int, every: int = MIN_RUNS) -> tuple[int, ...]:
    """5, 10, 15, ... up to ``cap`` runs per side, ``cap`` itself the last look."""
    if cap < MIN_RUNS:
        raise ValueError(f"the cap must be at least {MIN_RUNS} runs per side, got {cap}")
    return tuple(range(every, cap, every)) + (cap,)


def _simpson(low: float, high: float, points: int = GRID) -> tuple[np.ndarray, np.ndarray]:
    """Grid and Simpson weights on [low, high]."""
    grid = np.linspace(low, high, points)
    weights = np.ones(points)
    weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
    return grid, weights * (high - low) / (3 * (points - 1))


class _Canonical:
    """The score statistic S_k = Z_k sqrt(t_k) ~ N(drift t_k, t_k), independent increments:
    its sub-density on the continuation region, look after look."""

    def __init__(self, fractions: Sequence[float], drift: float = 0.0):
        self.fractions, self.drift = list(fractions), float(drift)
        self.grid = self.mass = None  # the previous look's grid and density x weights

    def crossing(self, look: int, c: float) -> float:
        """P(no crossing before ``look``, |Z_look| >= c)."""
        t = self.fractions[look]
        if look == 0:
            mean = self.drift * np.sqrt(t)
            return float(sps.norm.cdf(-c - mean) + sps.norm.sf(c - mean))
        step = t - self.fractions[look - 1]
        edge, sd = c * np.sqrt(t), np.sqrt(step)
        centre = self.grid + self.drift * step
        inside = sps.norm.cdf((edge - centre) / sd) - sps.norm.cdf((-edge - centre) / sd)
        return float(np.sum(self.mass * (1.0 - inside)))

    def advance(self, look: int, c: float) -> None:
        """Carry the sub-density past ``look`` with boundary ``c``."""
        t = self.fractions[look]
        edge = c * np.sqrt(t)
        grid, weights = _simpson(-edge, edge)
        if look == 0:
            density = sps.norm.pdf(grid, self.drift * t, np.sqrt(t))
        else:
            step = t - self.fractions[look - 1]
            shift = grid[:, None] - self.grid[None, :] - self.drift * step
            density = sps.norm.pdf(shift / np.sqrt(step)) / np.sqrt(step) @ self.mass
        self.grid, self.mass = grid, density * weights


@dataclass(frozen=True)
class Design:
    """Looks (runs per side), the cap, the family-wise ``alpha`` shared by ``comparisons``
    (Bonferroni: each at ``alpha / comparisons``) and the boundary on |z| at every look."""

    looks: tuple[int, ...]
    cap: int
    alpha: float
    comparisons: int
    boundaries: tuple[float, ...]
    spent: tuple[float, ...]  # cumulative error of one comparison by each look

    @property
    def level(self) -> float:
        return self.alpha / self.comparisons

    @property
    def fractions(self) -> tuple[float, ...]:
        return tuple(n / self.cap for n in self.looks)

    def decide(self, look: int, statistics: Mapping[str, float]) -> dict[str, str]:
        return decide(self, look, statistics)

    def as_dict(self) -> dict:
        return {"method": METHOD, "alpha": self.alpha, "comparisons": self.comparisons,
                "level_per_comparison": self.level, "cap": self.cap,
                "looks": [{"look": k + 1, "runs_per_side": n, "fraction": n / self.cap,
                           "boundary": b, "alpha_spent": s}
                          for k, (n, b, s) in enumerate(zip(self.looks, self.boundaries,
                                                            self.spent))]}


def design(rounds: Sequence[int], cap: int, alpha: float = ALPHA,
           comparisons: int = 1) -> Design:
    """The boundaries of looks after ``rounds`` runs per side (increasing, the last the
    ``cap``; information fractions n_k / cap), each comparison at ``alpha / comparisons``."""
    looks = tuple(int(n) for n in rounds)
    if not looks or list(looks) != sorted(set(looks)) or looks[-1] != cap:
        raise ValueError(f"rounds must increase and end at the cap {cap}, got {list(looks)}")
    if looks[0] < MIN_RUNS:
        raise ValueError(f"the first look needs at least {MIN_RUNS} runs per side")
    level = alpha / comparisons
    spent = obrien_fleming_spending(np.asarray(looks) / cap, level)
    canonical, boundaries = _Canonical([n / cap for n in looks]), []
    for look, target in enumerate(np.diff(spent, prepend=0.0)):
        boundaries.append(_boundary(canonical, look, float(target)))
        canonical.advance(look, boundaries[-1])
    return Design(looks, cap, alpha, comparisons, tuple(boundaries),
                  tuple(float(s) for s in spent))


def _boundary(canonical: _Canonical, look: int, target: float) -> float:
    """The |z| whose first crossing at ``look`` has probability ``target`` (no difference)."""
    if look == 0:
        return float(sps.norm.isf(target / 2))
    return float(optimize.brentq(lambda c: canonical.crossing(look, c) - target, 0.1, 40.0,
                                 xtol=1e-10))


def crossing_probabilities(plan: Design, drift: float) -> np.ndarray:
    """Per look, the chance that a comparison is first rejected there when E[Z_k] =
    ``drift * sqrt(t_k)`` (Welch's z for a difference d of sd-1 runs: drift = d sqrt(cap / 2))."""
    canonical = _Canonical(plan.fractions, drift)
    out = []
    for look, c in enumerate(plan.boundaries):
        out.append(canonical.crossing(look, c))
        canonical.advance(look, c)
    return np.asarray(out)


def design_power(plan: Design, drift: float) -> float:
    """The chance that a comparison with ``drift`` is rejected at some look."""
    return float(crossing_probabilities(plan, drift).sum())


def welch_z(x, y, axis: int = -1):
    """Welch's t of mean(x) - mean(y) on the normal scale through its two-sided p-value
    (runs along ``axis``): the statistic a look compares with its boundary."""
    diff, _, _, p = welch_difference(x, y, axis=axis)
    return np.sign(diff) * sps.norm.isf(np.asarray(p) / 2)


def paired_z(x, y, axis: int = -1):
    """:func:`welch_z` for pairs: the paired t of mean(x - y), row i of each side one seed."""
    diff, _, _, p = paired_difference(x, y, axis=axis)
    return np.sign(diff) * sps.norm.isf(np.asarray(p) / 2)


def z_from_p(diff: float, p: float) -> float:
    """``sign(diff) * Phi^{-1}(1 - p / 2)``: a report row's test as a look's statistic."""
    return float(np.sign(diff) * sps.norm.isf(p / 2)) if np.isfinite(p) else float("nan")


def decide(plan: Design, look: int, statistics: Mapping[str, float]) -> dict[str, str]:
    """Per comparison at ``look`` (1 = the first): ``rejected`` when |z| reaches the look's
    boundary, else ``continue``, or at the last look ``no difference at the cap`` (a missing
    statistic, NaN, never rejects)."""
    if not 1 <= look <= len(plan.looks):
        raise ValueError(f"look must be 1..{len(plan.looks)}, got {look}")
    boundary, last = plan.boundaries[look - 1], look == len(plan.looks)
    return {name: REJECTED if abs(z) >= boundary else (NO_DIFFERENCE if last else CONTINUE)
            for name, z in statistics.items()}


__all__ = [
    "CONTINUE", "METHOD", "NO_DIFFERENCE", "REJECTED", "Design", "crossing_probabilities",
    "decide", "default_looks", "design", "design_power", "obrien_fleming_spending", "paired_z",
    "welch_z", "z_from_p",
]
