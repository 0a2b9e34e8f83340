"""Stage 1a: Plume's candidate time-series features, for every trace at once.

The reference (digest §2.1-2.3) extracts a hand-picked set of tsfresh calculators from the
throughput series of each trace. This module computes the same features with the same
names, semantics and NaN behaviour as tsfresh 0.20/0.21, but vectorised across traces: one
numpy expression per feature over the padded ``(n, L)`` matrix of a :class:`TraceSet`, with
ragged traces handled through the ``lengths`` mask (masked sums, rows sorted with ``+inf``
padding so that order statistics of each row sit in its first ``length`` cells). The only
loop is in ``fft_aggregated``: one ``rfft`` call per *distinct* trace length (one call for
TraceBench), because a DFT's frequencies depend on the length.

Semantics, per calculator (``x`` = the first ``length`` samples of a trace, ``n`` its length):

* ``mean``: ``np.mean(x)``.
* ``quantile(q)``: ``np.quantile(x, q)`` (linear interpolation; numpy's own lerp is replicated
  so values are bit-identical on equal-length rows).
* ``truncated_mean(q)`` (the reference's custom calculator, 0 < q < 0.5): the mean of the
  values *strictly* between ``np.quantile(x, q)`` and ``np.quantile(x, 1 - q)``; NaN when none.
* ``fft_aggregated(aggtype)``: moments of ``abs(np.fft.rfft(x))`` seen as a distribution over
  the frequency index; ``centroid`` (used by Plume), ``variance``, ``skew`` and ``kurtosis``
  (the last two NaN when the variance is below 0.5, and tsfresh's kurtosis formula is kept
  as tsfresh writes it).
* ``ratio_beyond_r_sigma(r)``: fraction of samples with ``|x - mean| > r * std`` (population std).
* ``variation_coefficient``: ``std / mean``; NaN when the mean is exactly 0.
* ``mean_second_derivative_central``: ``(x[-1] - x[-2] - x[1] + x[0]) / (2 (n - 2))``; NaN
  when ``n <= 2``.
* ``change_quantiles(ql, qh, isabs, f_agg)``: the corridor ``[b_l, b_h]`` (closed, as
  ``pandas.qcut(..., include_lowest=True)`` builds it; its quantiles are computed as pandas
  does, through ``np.percentile(x, 100 q)``); ``f_agg`` (mean, median, std or var) of the
  (absolute) changes ``x[t+1] - x[t]`` whose both ends lie in the corridor; 0.0 when
  ``ql >= qh`` or no change qualifies.
* ``autocorrelation(lag)``: ``sum((x[t] - m)(x[t+lag] - m)) / ((n - lag) var(x))``; NaN when
  ``n < lag``, ``n == lag`` (0/0) or ``var(x)`` is within 1e-8 of 0 (``np.isclose``).
* Also available (tsfresh semantics): ``root_mean_square``, ``standard_deviation``,
  ``variance``, ``median``, ``minimum``, ``maximum``.

Names follow tsfresh: ``"<kind>__<calculator>"`` plus ``"__<key>_<value>"`` per parameter in
sorted key order, strings in double quotes (``throughput__quantile__q_0.05``,
``throughput__change_quantiles__f_agg_"mean"__isabs_True__qh_0.95__ql_0.05``).

The series is the throughput as sampled. The reference rounds times to whole seconds (toy)
before handing the table to tsfresh, which only sorts by time; the values and their order
are unchanged, so the time column plays no part here.

NaNs are left in place by :func:`compute_features` unless ``impute=True``; :func:`impute`
replaces them the way ``tsfresh.utilities.dataframe_functions.impute`` does (NaN -> column
median, +inf -> column max, -inf -> column min, over the finite values; columns without any
finite value -> 0). The analysis pipeline always imputes, as the reference does.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from plume.traces.traceset import TraceSet

__all__ = [
    "CALCULATORS",
    "CENTRAL_CALCULATORS",
    "CONSTANT_FEATURES",
    "FEATURE_SETS",
    "FeatureSpec",
    "calculator_of",
    "central_features",
    "compute_feature_matrix",
    "compute_features",
    "feature_name",
    "impute",
    "resolve_feature_set",
    "resample_forward",
    "spread_features",
]

_BLOCK_CELLS = 4_000_000  # padded cells featurised at once (bounds the temporaries' memory)

FeatureSpec = tuple[str, Mapping[str, Any]]
"""A candidate feature: (tsfresh calculator name, its parameters; ``{}`` when it has none)."""

CENTRAL_CALCULATORS = frozenset(
    {"mean", "truncated_mean", "quantile", "root_mean_square", "fft_aggregated"}
)
"""Calculators whose features describe central tendency (digest §2.5, toy list, which is the
puffer list plus root_mean_square); every other calculator describes spread."""

FEATURE_SETS: dict[str, list[FeatureSpec]] = {
    # controlled_abr/toy_abr_gym/trace_data/settings/potential_features.json: 17 features
    "tracebench": [
        ("mean", {}),
        ("quantile", {"q": 0.025}),
        ("quantile", {"q": 0.05}),
        ("quantile", {"q": 0.95}),
        ("quantile", {"q": 0.975}),
        ("fft_aggregated", {"aggtype": "centroid"}),
        ("ratio_beyond_r_sigma", {"r": 1}),
        ("ratio_beyond_r_sigma", {"r": 2.5}),
        ("variation_coefficient", {}),
        ("mean_second_derivative_central", {}),
        ("change_quantiles", {"ql": 0.05, "qh": 0.95, "isabs": True, "f_agg": "mean"}),
        ("autocorrelation", {"lag": 3}),
        ("autocorrelation", {"lag": 4}),
        ("autocorrelation", {"lag": 8}),
        ("truncated_mean", {"q": 0.05}),
        ("truncated_mean", {"q": 0.125}),
        ("truncated_mean", {"q": 0.25}),
    ],
    # puffer_abr/abr_gym/potential_features.json: 16 features
    "puffer": [
        ("mean", {}),
        ("quantile", {"q": 0.025}),
        ("quantile", {"q": 0.05}),
        ("quantile", {"q": 0.95}),
        ("fft_aggregated", {"aggtype": "centroid"}),
        ("ratio_beyond_r_sigma", {"r": 1}),
        ("ratio_beyond_r_sigma", {"r": 2.5}),
        ("variation_coefficient", {}),
        ("change_quantiles", {"ql": 0.05, "qh": 0.95, "isabs": True, "f_agg": "mean"}),
        ("change_quantiles", {"ql": 0.0125, "qh": 0.9875, "isabs": True, "f_agg": "mean"}),
        ("autocorrelation", {"lag": 3}),
        ("autocorrelation", {"lag": 4}),
        ("autocorrelation", {"lag": 8}),
        ("truncated_mean", {"q": 0.05}),
        ("truncated_mean", {"q": 0.125}),
        ("truncated_mean", {"q": 0.25}),
    ],
    # LB (job-size series): the paper's 8 critical LB features first (App. A.1), then the rest
    # of the TraceBench candidates, so that the selection has something to choose from.
    "lb": [
        ("autocorrelation", {"lag": 3}),
        ("change_quantiles", {"ql": 0.05, "qh": 0.95, "isabs": True, "f_agg": "mean"}),
        ("fft_aggregated", {"aggtype": "centroid"}),
        ("mean", {}),
        ("mean_second_derivative_central", {}),
        ("truncated_mean", {"q": 0.05}),
        ("truncated_mean", {"q": 0.125}),
        ("variation_coefficient", {}),
        ("quantile", {"q": 0.025}),
        ("quantile", {"q": 0.05}),
        ("quantile", {"q": 0.95}),
        ("quantile", {"q": 0.975}),
        ("ratio_beyond_r_sigma", {"r": 1}),
        ("ratio_beyond_r_sigma", {"r": 2.5}),
        ("autocorrelation", {"lag": 4}),
        ("autocorrelation", {"lag": 8}),
        ("truncated_mean", {"q": 0.25}),
    ],
}
"""Candidate feature lists of the reference (digest §2.1), by name.

Order = the column order the reference's selection saw: its settings-file order, except that
``truncated_mean`` (a custom function, swapped into the settings dict by deleting and
re-inserting its key) comes last. The order only matters for exact ties (tree tie-breaking,
equal importances)."""


# --------------------------------------------------------------------------------------
# Names and facets
# --------------------------------------------------------------------------------------


def _format_value(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


def feature_name(calculator: str, params: Mapping[str, Any] | None = None,
                 kind: str = "throughput") -> str:
    """tsfresh's column name for ``calculator`` with ``params`` on series ``kind``."""
    name = f"{kind}__{calculator}"
    if params:
        name += "__" + "__".join(f"{k}_{_format_value(params[k])}" for k in sorted(params))
    return name


def calculator_of(name: str) -> str:
    """The calculator part of a feature name (``"throughput__quantile__q_0.05"`` -> quantile)."""
    parts = name.split("__")
    if len(parts) < 2:
        raise ValueError(f"{name!r} is not a feature name of the form '<kind>__<calculator>...'")
    return parts[1]


def central_features(names: Iterable[str]) -> list[str]:
    """The names (in the given order) whose calculator is a central-tendency one."""
    return [n for n in names if calculator_of(n) in CENTRAL_CALCULATORS]


def spread_features(names: Iterable[str]) -> list[str]:
    """The names (in the given order) whose calculator describes spread (all the others)."""
    return [n for n in names if calculator_of(n) not in CENTRAL_CALCULATORS]


# --------------------------------------------------------------------------------------
# Vectorised calculators
# --------------------------------------------------------------------------------------


class _Rows:
    """Padded rows plus lazily computed shared statistics (mean, variance, sorted rows)."""

    def __init__(self, values: np.ndarray, lengths: np.ndarray) -> None:
        self.n = lengths
        self.nf = lengths.astype(np.float64)
        self.width = values.shape[1]
        self.valid = np.arange(self.width)[None, :] < lengths[:, None]
        self.x = values
        self.xz = np.where(self.valid, values, 0.0)
        self._cache: dict[str, np.ndarray] = {}

    def _get(self, key: str, make: Callable[[], np.ndarray]) -> np.ndarray:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @property
    def mean(self) -> np.ndarray:
        return self._get("mean", lambda: self.xz.sum(axis=1) / self.nf)

    @property
    def dev(self) -> np.ndarray:
        """x - mean on valid cells, 0 on padding."""
        return self._get("dev", lambda: np.where(self.valid, self.x - self.mean[:, None], 0.0))

    @property
    def var(self) -> np.ndarray:
        return self._get("var", lambda: (self.dev * self.dev).sum(axis=1) / self.nf)

    @property
    def std(self) -> np.ndarray:
        return self._get("std", lambda: np.sqrt(self.var))

    @property
    def sorted(self) -> np.ndarray:
        """Each row sorted ascending, padding (+inf) last."""
        return self._get("sorted", lambda: np.sort(np.where(self.valid, self.x, np.inf), axis=1))

    def quantile(self, q: float) -> np.ndarray:
        """``np.quantile(row[:n], q)`` for every row, replicating numpy's linear method."""
        return self._get(f"quantile{q!r}", lambda: _sorted_quantile(self.sorted, self.n, q))

    def fft_abs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """[(row indices, abs(rfft) of those rows)] per distinct length."""

        def make():
            groups = []
            for length in np.unique(self.n):
                rows = np.flatnonzero(self.n == length)
                groups.append((rows, np.abs(np.fft.rfft(self.x[rows, :length], axis=1))))
            return groups

        return self._get("fft", make)


def _sorted_quantile(sorted_rows: np.ndarray, n: np.ndarray, q: float) -> np.ndarray:
    """numpy's 'linear' quantile (H&F 7) on rows whose first n[i] cells are sorted values."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile q must lie in [0, 1], got {q}")
    q = np.float64(q)
    virtual = (n - 1).astype(np.float64) * q
    previous = np.floor(virtual)
    gamma = virtual - previous
    prev_idx = previous.astype(np.int64)
    above = virtual >= n - 1
    prev_idx = np.where(above, n - 1, prev_idx)
    next_idx = np.where(above, n - 1, prev_idx + 1)
    rows = np.arange(sorted_rows.shape[0])
    a = sorted_rows[rows, prev_idx]
    b = sorted_rows[rows, next_idx]
    # numpy's _lerp: a + (b - a) t, or b - (b - a)(1 - t) where t >= 0.5
    diff = b - a
    return np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)


def _pandas_q(q: float) -> float:
    """The quantile pandas actually evaluates for ``q`` (it calls np.percentile(x, q * 100))."""
    return float(np.true_divide(np.float64(q) * 100.0, 100))


def _masked_mean(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    count = mask.sum(axis=1)
    total = np.where(mask, values, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _calc_mean(r: _Rows) -> np.ndarray:
    return r.mean


def _calc_root_mean_square(r: _Rows) -> np.ndarray:
    return np.sqrt((r.xz * r.xz).sum(axis=1) / r.nf)


def _calc_standard_deviation(r: _Rows) -> np.ndarray:
    return r.std


def _calc_variance(r: _Rows) -> np.ndarray:
    return r.var


def _calc_median(r: _Rows) -> np.ndarray:
    return r.quantile(0.5)


def _calc_minimum(r: _Rows) -> np.ndarray:
    return r.sorted[:, 0]


def _calc_maximum(r: _Rows) -> np.ndarray:
    return r.sorted[np.arange(len(r.n)), r.n - 1]


def _calc_quantile(r: _Rows, q: float) -> np.ndarray:
    return r.quantile(q)


def _calc_truncated_mean(r: _Rows, q: float) -> np.ndarray:
    if not 0 < q < 0.5:
        raise ValueError(f"truncated_mean is only defined for 0 < q < 0.5, got q={q}")
    lower = r.quantile(q)
    upper = r.quantile(1 - q)
    inside = r.valid & (r.x > lower[:, None]) & (r.x < upper[:, None])
    return _masked_mean(r.x, inside)


def _spectral_moment(spectrum: np.ndarray, index: np.ndarray, total: np.ndarray,
                     k: int) -> np.ndarray:
    """tsfresh's non-centred moment ``y . index**k / sum(y)`` of every row's spectrum."""
    return spectrum.dot(index**k) / total


def _calc_fft_aggregated(r: _Rows, aggtype: str) -> np.ndarray:
    if aggtype not in ("centroid", "variance", "skew", "kurtosis"):
        raise ValueError(
            f'fft_aggregated aggtype must be "centroid", "variance", "skew" or "kurtosis", '
            f"got {aggtype!r}"
        )
    out = np.empty(len(r.n))
    for rows, spectrum in r.fft_abs():
        index = np.arange(spectrum.shape[1], dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            total = spectrum.sum(axis=1)
            moment = partial(_spectral_moment, spectrum, index, total)
            centroid = moment(1)
            if aggtype == "centroid":
                value = centroid
            else:
                variance = moment(2) - centroid**2
                if aggtype == "variance":
                    value = variance
                elif aggtype == "skew":
                    value = (moment(3) - 3 * centroid * variance - centroid**3) / variance**1.5
                else:  # tsfresh's kurtosis, its formula kept verbatim (note the "- 3 * centroid")
                    value = (
                        moment(4) - 4 * centroid * moment(3) + 6 * moment(2) * centroid**2
                        - 3 * centroid
                    ) / variance**2
                if aggtype in ("skew", "kurtosis"):
                    value = np.where(variance < 0.5, np.nan, value)
        out[rows] = value
    return out


def _calc_ratio_beyond_r_sigma(r: _Rows, r_: float) -> np.ndarray:
    beyond = r.valid & (np.abs(r.x - r.mean[:, None]) > r_ * r.std[:, None])
    return beyond.sum(axis=1) / r.nf


def _calc_variation_coefficient(r: _Rows) -> np.ndarray:
    mean = r.mean
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(mean == 0, np.nan, r.std / mean)


def _calc_mean_second_derivative_central(r: _Rows) -> np.ndarray:
    rows = np.arange(len(r.n))
    n = r.n
    last = r.x[rows, n - 1]
    before_last = r.x[rows, np.maximum(n - 2, 0)]
    second = r.x[:, 1] if r.width > 1 else np.zeros(len(n))
    with np.errstate(invalid="ignore", divide="ignore"):
        value = (last - before_last - second + r.x[:, 0]) / (2 * (n - 2))
    return np.where(n > 2, value, np.nan)


def _calc_change_quantiles(r: _Rows, ql: float, qh: float, isabs: bool,
                           f_agg: str) -> np.ndarray:
    if f_agg not in ("mean", "median", "std", "var"):
        raise ValueError(f'change_quantiles f_agg must be "mean", "median", "std" or "var", '
                         f"got {f_agg!r}")
    if ql >= qh:
        return np.zeros(len(r.n))
    lower = _sorted_quantile(r.sorted, r.n, _pandas_q(ql))[:, None]
    upper = _sorted_quantile(r.sorted, r.n, _pandas_q(qh))[:, None]
    x = r.x
    # pandas.qcut(x, [ql, qh]) with include_lowest: bin 0 is (lower, upper] plus x == lower
    inside = r.valid & (((x > lower) & (x <= upper)) | (x == lower))
    both = inside[:, 1:] & inside[:, :-1]
    change = x[:, 1:] - x[:, :-1]
    if isabs:
        change = np.abs(change)
    count = both.sum(axis=1)
    if f_agg == "mean":
        value = _masked_mean(change, both)
    elif f_agg in ("std", "var"):
        mean = _masked_mean(change, both)
        dev = np.where(both, change - mean[:, None], 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            value = (dev * dev).sum(axis=1) / count
        if f_agg == "std":
            value = np.sqrt(value)
    elif change.shape[1] == 0:  # single-sample series: no change at all
        value = np.zeros(len(r.n))
    else:  # median over the qualifying changes
        ranked = np.sort(np.where(both, change, np.inf), axis=1)
        value = _sorted_quantile(ranked, np.maximum(count, 1), 0.5)
    return np.where(count > 0, value, 0.0)


def _calc_autocorrelation(r: _Rows, lag: int) -> np.ndarray:
    lag = int(lag)
    n = r.n
    if lag >= r.width:
        products = np.zeros(len(n))
    else:
        dev = r.dev  # zero on padding, so pairs reaching past a row's end add nothing
        products = (dev[:, : r.width - lag] * dev[:, lag:]).sum(axis=1)
    var = r.var
    with np.errstate(invalid="ignore", divide="ignore"):
        value = products / ((n - lag) * var)
    return np.where((n < lag) | (n == lag) | np.isclose(var, 0), np.nan, value)


CALCULATORS: dict[str, Callable[..., np.ndarray]] = {
    "mean": _calc_mean,
    "quantile": _calc_quantile,
    "truncated_mean": _calc_truncated_mean,
    "fft_aggregated": _calc_fft_aggregated,
    "ratio_beyond_r_sigma": lambda r, r_: _calc_ratio_beyond_r_sigma(r, r_),
    "variation_coefficient": _calc_variation_coefficient,
    "mean_second_derivative_central": _calc_mean_second_derivative_central,
    "change_quantiles": _calc_change_quantiles,
    "autocorrelation": _calc_autocorrelation,
    "root_mean_square": _calc_root_mean_square,
    "standard_deviation": _calc_standard_deviation,
    "variance": _calc_variance,
    "median": _calc_median,
    "minimum": _calc_minimum,
    "maximum": _calc_maximum,
}
"""Vectorised calculators by tsfresh name: ``f(rows, **params) -> (n,) array``."""


def _call(calculator: str, rows: _Rows, params: Mapping[str, Any]) -> np.ndarray:
    if calculator not in CALCULATORS:
        raise ValueError(
            f"unknown feature calculator {calculator!r}; available: {sorted(CALCULATORS)}"
        )
    params = dict(params)
    if calculator == "ratio_beyond_r_sigma":
        if set(params) != {"r"}:
            raise ValueError(f"ratio_beyond_r_sigma takes one parameter 'r', got {params}")
        return CALCULATORS[calculator](rows, params["r"])
    try:
        return CALCULATORS[calculator](rows, **params)
    except TypeError as err:
        raise ValueError(f"bad parameters {params} for feature calculator {calculator!r}: {err}")


CONSTANT_FEATURES = "constants"
"""The feature set of traces that are parameter tuples, not series (CC's link tuples: paper
§3.4, "the raw tuple is used as the features"): one feature per ``constants`` channel of the
TraceSet (except ``period``, which only says how a series loops), its raw value."""


def constant_features(traces: TraceSet) -> pd.DataFrame:
    """The :data:`CONSTANT_FEATURES` of ``traces``: rows = traces by id, one column per
    constants channel (``constant__<channel>``)."""
    channels = [c for c in traces.constants if c != "period"]
    if not channels:
        raise ValueError(f"TraceSet {traces.name!r} has no constants channel to use as "
                         f"features; it has {', '.join(traces.channel_names) or 'none'}")
    return pd.DataFrame({f"constant__{c}": np.asarray(traces.constants[c], dtype=np.float64)
                         for c in channels},
                        index=pd.Index(traces.trace_ids, name="id"))


def resolve_feature_set(feature_set: str | Sequence[FeatureSpec]) -> list[FeatureSpec]:
    """A feature-set name (key of FEATURE_SETS) or a list of specs -> a checked list of specs."""
    if isinstance(feature_set, str):
        if feature_set not in FEATURE_SETS:
            raise ValueError(
                f"unknown feature set {feature_set!r}; expected one of {sorted(FEATURE_SETS)} "
                "or a list of (calculator, params) pairs"
            )
        return list(FEATURE_SETS[feature_set])
    specs: list[FeatureSpec] = []
    for spec in feature_set:
        if isinstance(spec, str):
            spec = (spec, {})
        try:
            calculator, params = spec
        except (TypeError, ValueError):
            raise ValueError(f"a feature spec must be (calculator, params), got {spec!r}")
        if calculator not in CALCULATORS:
            raise ValueError(
                f"unknown feature calculator {calculator!r}; available: {sorted(CALCULATORS)}"
            )
        specs.append((calculator, dict(params or {})))
    if not specs:
        raise ValueError("the feature set is empty")
    names = [feature_name(c, p) for c, p in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"the feature set names a feature twice: {names}")
    return specs


def compute_feature_matrix(
    values: np.ndarray,
    lengths: np.ndarray,
    feature_set: str | Sequence[FeatureSpec] = "tracebench",
    kind: str = "throughput",
) -> tuple[list[str], np.ndarray]:
    """Features of padded series: ``values`` (n, L), ``lengths`` (n,) -> (names, (n, F) array).

    Cells of ``values`` beyond a row's length are ignored; the valid ones must be finite.
    """
    values = np.asarray(values, dtype=np.float64)
    lengths = np.asarray(lengths, dtype=np.int64)
    if values.ndim != 2 or lengths.shape != (values.shape[0],):
        raise ValueError(
            f"values must be (n, L) and lengths (n,), got {values.shape} and {lengths.shape}"
        )
    if values.shape[0] == 0:
        raise ValueError("no series to featurise")
    if lengths.min() < 1 or lengths.max() > values.shape[1]:
        raise ValueError(
            f"every length must lie in [1, {values.shape[1]}], got "
            f"[{lengths.min()}, {lengths.max()}]"
        )
    specs = resolve_feature_set(feature_set)
    valid = np.arange(values.shape[1])[None, :] < lengths[:, None]
    finite = np.isfinite(values) | ~valid
    if not finite.all():
        bad = int(np.argmax(~finite.all(axis=1)))
        raise ValueError(f"series {bad} holds a non-finite value")
    names = [feature_name(c, p, kind) for c, p in specs]
    # Rows are processed in blocks of similar length (sorted by length, each block trimmed
    # to its longest row) so that the padded temporaries stay bounded on long, ragged sets;
    # a set like TraceBench is a single block.
    order = np.argsort(lengths, kind="stable")
    sorted_lengths = lengths[order]
    n = len(order)
    matrix = np.empty((n, len(specs)))
    start = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        while start < n:
            # the most rows whose padded block (rows x longest row) fits in _BLOCK_CELLS
            cost = np.arange(1, n - start + 1) * sorted_lengths[start:]
            stop = start + max(1, int(np.searchsorted(cost, _BLOCK_CELLS, side="right")))
            rows_idx = order[start:stop]
            width = int(sorted_lengths[stop - 1])
            block = _Rows(values[rows_idx, :width], lengths[rows_idx])
            matrix[rows_idx] = np.column_stack([_call(c, block, p) for c, p in specs])
            start = stop
    return names, matrix


def compute_features(
    traces: TraceSet,
    feature_set: str | Sequence[FeatureSpec] = "tracebench",
    *,
    impute: bool = False,
    kind: str = "throughput",
    channel: str = "bandwidth",
    resample_s: float = 0.0,
) -> pd.DataFrame:
    """Candidate features of every trace: a DataFrame (rows = traces by id, columns = names).

    ``channel`` names the series featurised; ``resample_s`` > 0 first puts every trace on a
    grid of that step (:func:`resample_forward`), 0 keeps the raw samples.

    ``feature_set`` is a key of :data:`FEATURE_SETS` or a list of ``(calculator, params)``.
    NaNs are kept (as tsfresh without an impute function) unless ``impute=True``.
    :data:`CONSTANT_FEATURES` takes the per-trace constants instead of ``channel``.
    """
    if feature_set == CONSTANT_FEATURES:
        return constant_features(traces)
    if channel not in traces.series:
        raise ValueError(f"TraceSet {traces.name!r} has no series channel {channel!r} to "
                         f"featurise; it has {', '.join(traces.channel_names) or 'none'}")
    values, lengths = traces.series[channel], traces.lengths
    if resample_s:
        values, lengths = resample_forward(traces.time, values, lengths, resample_s)
    names, matrix = compute_feature_matrix(values, lengths, feature_set, kind)
    frame = pd.DataFrame(matrix, columns=names, index=pd.Index(traces.trace_ids, name="id"))
    return _impute(frame) if impute else frame


MAX_RESAMPLE_SECONDS = 10_000.0
"""The authors' ``chunk_traces`` (sagar-pa/plume) featurises at most 10,000 s of a trace."""


def resample_forward(time: np.ndarray, values: np.ndarray, lengths: np.ndarray,
                     step: float) -> tuple[np.ndarray, np.ndarray]:
    """Values on the grid ``0, step, 2 step, ...`` (forward convention: a grid point takes the
    sample in force there), covering each trace's samples up to ``MAX_RESAMPLE_SECONDS``.

    Returns the padded (n, G) grid values and the (n,) grid lengths. Unlike the reference
    (which rounds each sample time to the grid and drops a random prefix with the unseeded
    global RNG), every trace is resampled from its start, deterministically."""
    n = len(lengths)
    rows = np.arange(n)
    start = time[:, 0]
    span = np.minimum(time[rows, lengths - 1] - start, MAX_RESAMPLE_SECONDS)
    grid_lengths = np.floor(span / step + 1e-9).astype(np.int64) + 1
    width = int(grid_lengths.max())
    grid = np.arange(width) * step
    out = np.zeros((n, width))
    for i in range(n):  # one searchsorted per trace: fast enough for stage 1 (done once)
        points = grid[: grid_lengths[i]]
        slot = np.searchsorted(time[i, : lengths[i]] - start[i], points + 1e-9, side="right") - 1
        out[i, : grid_lengths[i]] = values[i, slot]
    return out, grid_lengths


def impute(features: pd.DataFrame) -> pd.DataFrame:
    """tsfresh's ``impute`` on a copy: per column, NaN -> median, +inf -> max, -inf -> min.

    The statistics are over the column's finite values; a column with none becomes 0
    (tsfresh warns in that case; so does this function).
    """
    return _impute(features)


def _impute(features: pd.DataFrame) -> pd.DataFrame:
    values = features.to_numpy(dtype=np.float64, copy=True)
    if values.size == 0:
        return features.astype(np.float64)
    finite = np.isfinite(values)
    empty = ~finite.any(axis=0)
    if empty.any():
        warnings.warn(
            f"the columns {list(features.columns[empty])} did not have any finite values; "
            "filling them with zeros",
            RuntimeWarning,
            stacklevel=3,
        )
    masked = np.ma.masked_array(values, mask=~finite)
    masked.data[:, empty] = 0.0
    masked.mask[:, empty] = False
    col_max = np.ma.max(masked, axis=0).filled(0.0)
    col_min = np.ma.min(masked, axis=0).filled(0.0)
    col_median = np.ma.median(masked, axis=0).filled(0.0)
    out = np.where(np.isposinf(values), col_max, values)
    out = np.where(np.isneginf(out), col_min, out)
    out = np.where(np.isnan(out), col_median, out)
    out[:, empty] = 0.0
    return pd.DataFrame(out, index=features.index, columns=features.columns)
