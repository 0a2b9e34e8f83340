"""Behaviour tests for plume.analysis: features, selection, clustering, cached pipeline."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from plume.analysis import (
    CENTRAL_CALCULATORS,
    CONSTANT_FEATURES,
    FEATURE_SETS,
    AnalysisSettings,
    SelectionSettings,
    TraceAnalysis,
    adjusted_rand_index,
    analyze,
    cache_path,
    central_features,
    choose_k,
    compute_feature_matrix,
    compute_features,
    contingency_table,
    feature_name,
    fit_gmm,
    impute,
    random_clustering,
    select_features,
    selection_schedule,
    spread_features,
    standardize,
    tree_importances,
)
from plume.analysis.clustering import _kmeanspp_indices
from plume.traces import DATASETS, TraceSet, load_tracebench

REPO = Path(__file__).resolve().parents[1]

# Cheap settings for tests that only exercise plumbing, not the reference's numbers.
CHEAP = AnalysisSettings(selection=SelectionSettings(n_trees=5, gmm_restarts=4), restarts=4)


def one(calculator: str, series, **params) -> float:
    """A single feature of a single series."""
    x = np.asarray(series, dtype=float)
    _, matrix = compute_feature_matrix(x[None, :], np.array([len(x)]), [(calculator, params)])
    return float(matrix[0, 0])


def blobs(centers, sizes, scale=0.3, seed=0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(c, scale, size=(s, len(c))) for c, s in zip(centers, sizes)])
    y = np.repeat(np.arange(len(sizes)), sizes)
    return X, y


def ari(a, b) -> float:
    from sklearn.metrics import adjusted_rand_score

    return adjusted_rand_score(a, b)


# ---------------------------------------------------------------------------------------
# Features: values checkable by hand
# ---------------------------------------------------------------------------------------

X1234 = [1.0, 2.0, 3.0, 4.0]


def test_mean_and_linear_quantiles_by_hand():
    assert one("mean", X1234) == 2.5
    # np.quantile linear: position (n - 1) q in the sorted series
    assert one("quantile", X1234, q=0.05) == pytest.approx(1.15, abs=1e-15)  # 1 + 0.15
    assert one("quantile", X1234, q=0.025) == pytest.approx(1.075, abs=1e-15)
    assert one("quantile", X1234, q=0.95) == pytest.approx(3.85, abs=1e-15)  # 3 + 0.85
    assert one("quantile", [4.0, 1.0, 3.0, 2.0], q=0.95) == pytest.approx(3.85, abs=1e-15)
    assert one("quantile", X1234, q=1.0) == 4.0
    assert one("median", [5.0, 1.0, 3.0]) == 3.0


def test_truncated_mean_keeps_values_strictly_inside():
    # sorted [0, 1, 2, 3, 4, 100]: q=0.25 -> bounds at positions 1.25 and 3.75 -> (1.25, 3.75)
    series = [3.0, 100.0, 0.0, 2.0, 4.0, 1.0]
    assert one("truncated_mean", series, q=0.25) == 2.5  # mean of {2, 3}
    # q=0.05 -> bounds 0.25 and 4 + 0.75 * 96 = 76: {1, 2, 3, 4}
    assert one("truncated_mean", series, q=0.05) == 2.5
    # a value equal to a bound is excluded: [1, 2, 3] with q=0.25 -> (1.5, 2.5) -> {2}
    assert one("truncated_mean", [1.0, 2.0, 3.0], q=0.25) == 2.0
    assert math.isnan(one("truncated_mean", [3.0, 3.0, 3.0], q=0.25))  # nothing inside
    with pytest.raises(ValueError, match="0 < q < 0.5"):
        one("truncated_mean", X1234, q=0.5)


def test_spread_features_by_hand():
    std = math.sqrt(1.25)  # population std of 1, 2, 3, 4
    assert one("variation_coefficient", X1234) == pytest.approx(std / 2.5, rel=1e-15)
    assert math.isnan(one("variation_coefficient", [1.0, -1.0]))  # mean 0
    # |x - 2.5| = 1.5, 0.5, 0.5, 1.5 against 1 * 1.118 and 2.5 * 1.118
    assert one("ratio_beyond_r_sigma", X1234, r=1) == 0.5
    assert one("ratio_beyond_r_sigma", X1234, r=2.5) == 0.0
    assert one("ratio_beyond_r_sigma", [0.0] * 9 + [10.0], r=2.5) == 0.1
    # (x[-1] - x[-2] - x[1] + x[0]) / (2 (n - 2)); squares have second difference 2
    assert one("mean_second_derivative_central", [1.0, 4.0, 9.0, 16.0]) == 1.0
    assert one("mean_second_derivative_central", X1234) == 0.0
    assert math.isnan(one("mean_second_derivative_central", [1.0, 2.0]))
    assert one("standard_deviation", X1234) == pytest.approx(std, rel=1e-15)
    assert one("root_mean_square", [3.0, 4.0]) == pytest.approx(math.sqrt(12.5), rel=1e-15)


def test_change_quantiles_corridor_by_hand():
    # sorted [0..5]: corridor [0.25, 4.75] (ql 0.05, qh 0.95) holds 1, 2, 3, 4;
    # changes with both ends inside: 1->4, 4->2, 2->3
    series = [0.0, 5.0, 1.0, 4.0, 2.0, 3.0]
    params = {"ql": 0.05, "qh": 0.95, "f_agg": "mean"}
    assert one("change_quantiles", series, isabs=True, **params) == 2.0  # (3 + 2 + 1) / 3
    assert one("change_quantiles", series, isabs=False, **params) == pytest.approx(2 / 3)
    assert one("change_quantiles", series, isabs=True, ql=0.05, qh=0.95,
               f_agg="var") == pytest.approx(2 / 3)
    # closed corridor: [0, 1, ..., 20] with ql=0.05 puts the bound exactly on 1, kept
    assert one("change_quantiles", np.arange(21.0), isabs=True, **params) == 1.0
    assert one("change_quantiles", X1234, isabs=True, ql=0.9, qh=0.1, f_agg="mean") == 0.0
    assert one("change_quantiles", [7.0, 7.0, 7.0], isabs=True, **params) == 0.0


def test_autocorrelation_and_fft_centroid_by_hand():
    # mean 2.5, var 1.25: lag 1 sum = 0.75 - 0.25 + 0.75 over (3 * 1.25)
    assert one("autocorrelation", X1234, lag=1) == pytest.approx(1 / 3, rel=1e-15)
    assert one("autocorrelation", X1234, lag=3) == pytest.approx(-1.8, rel=1e-15)
    assert math.isnan(one("autocorrelation", X1234, lag=4))  # n == lag: 0 / 0
    assert math.isnan(one("autocorrelation", X1234, lag=5))  # n < lag
    assert math.isnan(one("autocorrelation", [2.0, 2.0, 2.0, 2.0], lag=1))  # var 0
    # |rfft([1, 2, 3, 4])| = [10, 2 sqrt 2, 2]: centroid (2 sqrt 2 + 4) / (12 + 2 sqrt 2)
    expected = (4 + 2 * math.sqrt(2)) / (12 + 2 * math.sqrt(2))
    assert one("fft_aggregated", X1234, aggtype="centroid") == pytest.approx(expected, rel=1e-14)
    assert one("fft_aggregated", [5.0, 5.0, 5.0], aggtype="centroid") == 0.0


def test_names_follow_tsfresh_and_sets_have_the_reference_sizes():
    assert feature_name("quantile", {"q": 0.05}) == "throughput__quantile__q_0.05"
    assert (feature_name("change_quantiles", {"ql": 0.05, "qh": 0.95, "isabs": True,
                                              "f_agg": "mean"})
            == 'throughput__change_quantiles__f_agg_"mean"__isabs_True__qh_0.95__ql_0.05')
    assert (feature_name("fft_aggregated", {"aggtype": "centroid"})
            == 'throughput__fft_aggregated__aggtype_"centroid"')
    assert feature_name("ratio_beyond_r_sigma", {"r": 1}) == "throughput__ratio_beyond_r_sigma__r_1"
    assert feature_name("mean") == "throughput__mean"
    for set_name, (size, n_central) in {"tracebench": (17, 9), "puffer": (16, 8)}.items():
        names = [feature_name(c, p) for c, p in FEATURE_SETS[set_name]]
        assert len(names) == len(set(names)) == size
        assert len(central_features(names)) == n_central
        assert len(spread_features(names)) == size - n_central
    assert "root_mean_square" in CENTRAL_CALCULATORS
    assert central_features(["a__root_mean_square", "a__autocorrelation__lag_3"]) == [
        "a__root_mean_square"
    ]


def test_ragged_traces_equal_each_trace_alone():
    rng = np.random.default_rng(3)
    n, width = 40, 37
    lengths = rng.integers(1, width + 1, size=n)
    lengths[:3] = [1, 2, width]
    values = rng.gamma(2.0, 1.5, size=(n, width))
    values[3:8] = np.round(values[3:8])  # ties
    values[8:10] = 4.0  # constant rows
    garbage = np.where(np.arange(width)[None, :] >= lengths[:, None], 1e9, values)
    specs = FEATURE_SETS["tracebench"] + FEATURE_SETS["puffer"][9:10] + [
        ("median", {}), ("maximum", {}), ("minimum", {}), ("variance", {}),
        ("fft_aggregated", {"aggtype": "variance"}), ("fft_aggregated", {"aggtype": "skew"}),
        ("fft_aggregated", {"aggtype": "kurtosis"}),
        ("change_quantiles", {"ql": 0.1, "qh": 0.8, "isabs": False, "f_agg": "median"}),
    ]
    _, together = compute_feature_matrix(garbage, lengths, specs)
    for i in range(n):
        _, alone = compute_feature_matrix(values[i : i + 1, : lengths[i]], lengths[i : i + 1], specs)
        np.testing.assert_allclose(together[i], alone[0], rtol=1e-12, atol=0, equal_nan=True)


def test_blocks_of_rows_give_the_same_values(monkeypatch):
    import plume.analysis.features as features_module

    rng = np.random.default_rng(8)
    lengths = rng.integers(2, 200, size=50)
    values = rng.gamma(2.0, 1.0, size=(50, 200))
    _, whole = compute_feature_matrix(values, lengths, "puffer")
    monkeypatch.setattr(features_module, "_BLOCK_CELLS", 500)  # many small blocks
    _, blocks = compute_feature_matrix(values, lengths, "puffer")
    np.testing.assert_allclose(blocks, whole, rtol=1e-12, equal_nan=True)


def test_impute_follows_tsfresh():
    frame = pd.DataFrame({
        "a": [1.0, np.nan, 3.0, np.inf, -np.inf, 10.0],
        "b": [np.nan] * 6,
        "c": [2.0] * 6,
    })
    with pytest.warns(RuntimeWarning, match="finite"):
        out = impute(frame)
    assert out["a"].tolist() == [1.0, 3.0, 3.0, 10.0, 1.0, 10.0]  # median of {1, 3, 10}
    assert out["b"].tolist() == [0.0] * 6
    assert out["c"].tolist() == [2.0] * 6
    assert np.isnan(frame.loc[1, "a"])  # the input is not modified


def test_compute_features_frame_and_errors():
    traces = load_tracebench("balanced", "train").subset(range(10))
    frame = compute_features(traces)
    assert frame.shape == (10, 17)
    assert list(frame.index) == list(traces.trace_ids)
    assert list(frame.columns) == [feature_name(c, p) for c, p in FEATURE_SETS["tracebench"]]
    custom = compute_features(traces, [("mean", {}), ("autocorrelation", {"lag": 2})])
    np.testing.assert_array_equal(custom["throughput__mean"], frame["throughput__mean"])
    with pytest.raises(ValueError, match="unknown feature set"):
        compute_features(traces, "nope")
    with pytest.raises(ValueError, match="unknown feature calculator"):
        compute_features(traces, [("no_such_feature", {})])
    with pytest.raises(ValueError, match="bad parameters"):
        compute_features(traces, [("quantile", {"p": 0.1})])


def test_constant_features_are_the_raw_tuples_and_cluster_planted_links():
    """CC's link tuples (paper §3.4): the raw constants are the features, ``period`` is not a
    feature, and three planted link regimes come back as three clusters."""
    rng = np.random.default_rng(0)
    centres = np.array([[100.0, 0.05, 10.0], [300.0, 0.2, 40.0], [800.0, 0.4, 5.0]])
    kind = np.repeat(np.arange(3), 40)
    values = centres[kind] * rng.uniform(0.95, 1.05, size=(120, 3))
    traces = TraceSet(name="links", series={}, constants={
        "bandwidth": values[:, 0], "latency": values[:, 1], "queue": values[:, 2],
        "period": np.full(120, 7.0)}, labels=np.array(["a", "b", "c"])[kind])
    frame = compute_features(traces, CONSTANT_FEATURES)
    assert list(frame.columns) == ["constant__bandwidth", "constant__latency", "constant__queue"]
    np.testing.assert_array_equal(frame["constant__latency"], values[:, 1])
    result = analyze(traces, AnalysisSettings(feature_set=CONSTANT_FEATURES, select=False,
                                              k_range=(2, 5), restarts=5))
    assert result.kept == list(frame.columns)
    assert result.k == 3 and adjusted_rand_index(result.labels, kind) == 1.0
    with pytest.raises(ValueError, match="no constants channel"):
        compute_features(load_tracebench("balanced", "train").subset(range(3)), "constants")


# ---------------------------------------------------------------------------------------
# Features: equal to tsfresh's own calculators
# ---------------------------------------------------------------------------------------


def _tsfresh_features(values, lengths, specs) -> pd.DataFrame:
    from tsfresh import extract_features

    def truncated_mean(x, q):  # the reference's custom calculator
        lower, upper = np.quantile(x, q), np.quantile(x, 1 - q)
        return np.mean(x[(x > lower) & (x < upper)])

    settings: dict = {}
    for calculator, params in specs:
        key = truncated_mean if calculator == "truncated_mean" else calculator
        if params:
            settings.setdefault(key, []).append(dict(params))
        else:
            settings[key] = None
    long = pd.DataFrame({
        "id": np.repeat(np.arange(len(lengths)), lengths),
        # the reference's times: rounded to whole seconds, order unchanged
        "time": np.concatenate([np.round(np.arange(n) * 100 / 99) for n in lengths]),
        "throughput": np.concatenate([values[i, :n] for i, n in enumerate(lengths)]),
    })
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = extract_features(long, column_id="id", column_sort="time",
                               default_fc_parameters=settings, disable_progressbar=True,
                               n_jobs=0)
    return out.sort_index()


@pytest.mark.parametrize("set_name", ["tracebench", "puffer"])
def test_every_feature_equals_tsfresh(set_name):
    pytest.importorskip("tsfresh")
    traces = load_tracebench("majority_fast", "train").subset(range(0, 1000, 20))  # 50
    rng = np.random.default_rng(11)
    lengths = rng.integers(2, 60, size=30)
    lengths[:2] = [2, 3]
    ragged = rng.gamma(2.0, 2.0, size=(30, 60))
    ragged[2:8] = np.round(ragged[2:8])  # ties and repeated values
    ragged[8:10] = 5.0  # constant: NaN autocorrelation and truncated mean
    width = max(traces.bandwidth.shape[1], 60)
    values = np.zeros((80, width))
    values[:50, : traces.bandwidth.shape[1]] = traces.bandwidth
    values[50:, :60] = ragged
    all_lengths = np.concatenate([traces.lengths, lengths])
    specs = FEATURE_SETS[set_name]
    names, ours = compute_feature_matrix(values, all_lengths, specs)
    theirs = _tsfresh_features(values, all_lengths, specs)
    assert sorted(theirs.columns) == sorted(names)
    theirs = theirs[names].to_numpy()
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-300, equal_nan=True)
    assert np.isnan(ours).any()  # the NaN cases were exercised


def test_impute_equals_tsfresh_impute():
    pytest.importorskip("tsfresh")
    from tsfresh.utilities.dataframe_functions import impute as ts_impute

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(20, 4)), columns=list("abcd"))
    frame.iloc[[1, 5], 0] = np.nan
    frame.iloc[2, 1] = np.inf
    frame.iloc[3, 2] = -np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = ts_impute(frame.copy())
    pd.testing.assert_frame_equal(impute(frame), expected)


# ---------------------------------------------------------------------------------------
# Clustering
# ---------------------------------------------------------------------------------------


def test_gmm_reproduces_sklearn_restart_by_restart():
    from sklearn.cluster import kmeans_plusplus
    from sklearn.mixture import GaussianMixture

    X, _ = blobs([[0, 0, 0], [2, 0, 1], [0, 3, 0], [1, 1, 1]], [60, 50, 40, 30], scale=0.6)
    X = standardize(X)
    for k in (3, 4, 5):
        seeds = list(range(8))
        indices = _kmeanspp_indices(X, k, seeds)
        for s in seeds:
            expected = kmeans_plusplus(X, k, random_state=np.random.RandomState(s))[1]
            np.testing.assert_array_equal(indices[s], expected)
        ours = fit_gmm(X, k, restarts=8)
        scores = []
        for s in seeds:
            gmm = GaussianMixture(k, covariance_type="diag", init_params="k-means++",
                                  max_iter=300, random_state=s).fit(X)
            scores.append(gmm.score(X))
            if s == ours.best_seed:
                assert ours.n_iter == gmm.n_iter_
                assert ari(gmm.predict(X), ours.labels) == 1.0
                np.testing.assert_allclose(ours.memberships, gmm.predict_proba(X), atol=1e-8)
        np.testing.assert_allclose(ours.restart_scores, scores, rtol=1e-9)
        assert ours.log_likelihood == pytest.approx(max(scores), rel=1e-9)
        np.testing.assert_allclose(ours.memberships.sum(axis=1), 1.0)


def test_choose_k_recovers_planted_clusters():
    centers = [[0, 0], [6, 0], [0, 6], [6, 6], [3, 12]]
    X, y = blobs(centers, [80, 60, 70, 50, 40], scale=0.5, seed=1)
    search = choose_k(X, (2, 7), restarts=10)
    assert search.k == 5
    assert ari(search.clustering.labels, y) == 1.0
    assert set(search.scores) == set(range(2, 8))
    assert search.scores[5] == max(search.scores.values())
    assert search.clustering.sizes.sum() == len(y)


def test_min_cluster_rule_rejects_tiny_clusters():
    X, _ = blobs([[0, 0], [6, 0], [0, 6], [-8, -8]], [150, 150, 150, 3], scale=0.5, seed=2)
    lax = choose_k(X, (3, 4), restarts=10, min_cluster_fraction=0.0)
    strict = choose_k(X, (3, 4), restarts=10, min_cluster_fraction=0.01)
    assert lax.min_sizes[4] == 3  # k=4 gives the 3 far points their own cluster
    assert lax.k == 4 and lax.scores[4] == lax.silhouettes[4] > lax.scores[3]
    assert strict.scores[4] == -1.0  # 3 <= 0.01 * 453
    assert strict.k == 3
    with pytest.raises(ValueError, match="min_cluster_fraction"):
        choose_k(X, (3, 4), min_cluster_fraction=1.5)


def test_ablation_modes():
    X, y = blobs([[0, 0], [5, 0], [0, 5]], [100, 100, 100], scale=0.5, seed=4)
    km = choose_k(X, (2, 5), method="kmeans", restarts=5)
    assert km.k == 3 and km.clustering.method == "kmeans"
    assert ari(km.clustering.labels, y) == 1.0
    np.testing.assert_array_equal(km.clustering.memberships.argmax(axis=1), km.clustering.labels)
    fixed = choose_k(X, (2, 5), fixed_k=4, restarts=5)
    assert fixed.k == 4 and fixed.scores == {} and list(fixed.clusterings) == [4]
    rand = choose_k(X, (2, 5), random_labels=True, restarts=5, seed=7)
    assert rand.k == 3 and rand.clustering.method == "random"
    again = choose_k(X, (2, 5), random_labels=True, restarts=5, seed=7)
    np.testing.assert_array_equal(rand.clustering.labels, again.clustering.labels)
    other = random_clustering(300, 3, seed=8)
    assert not np.array_equal(other.labels, rand.clustering.labels)
    assert abs(ari(rand.clustering.labels, y)) < 0.05
    assert np.all(np.bincount(rand.clustering.labels, minlength=3) > 60)
    with pytest.raises(ValueError, match="unknown clustering method"):
        choose_k(X, (2, 3), method="dbscan")


def test_too_few_traces_fail_with_counts():
    X = np.random.default_rng(0).normal(size=(5, 2))
    with pytest.raises(ValueError, match=r"5 traces.*8 clusters"):
        choose_k(X, (3, 8))
    with pytest.raises(ValueError, match=r"5 traces into 6 clusters"):
        fit_gmm(X, 6)
    traces = load_tracebench("balanced", "train").subset(range(6))
    with pytest.raises(ValueError, match=r"has 6 traces, fewer than the 8 clusters"):
        analyze(traces)


# ---------------------------------------------------------------------------------------
# Selection
# ---------------------------------------------------------------------------------------


def test_schedules_match_the_reference():
    assert selection_schedule(17, SelectionSettings()) == (
        [3, 3, 4, 5, 5, 6, 7], [16, 14, 13, 12, 10, 9, 8], 8)
    puffer = SelectionSettings(fraction=0.4, steps=5, central_rounding="ceil")
    assert selection_schedule(16, puffer) == ([3, 4, 5, 6, 7], [15, 12, 10, 8, 6], 6)
    assert selection_schedule(3, SelectionSettings())[2] == 2  # floor of 2 features


def test_tree_importances_equal_sklearn_average():
    from sklearn.tree import DecisionTreeClassifier

    X, y = blobs([[0, 0, 0, 0], [3, 0, 0, 0], [0, 3, 0, 0]], [40, 30, 20], scale=1.0)
    y = np.where(y == 2, 5, y)  # label values need not be 0..k-1
    ours = tree_importances(X, y, n_trees=6, seed=1)
    expected = np.mean([
        DecisionTreeClassifier(class_weight="balanced", random_state=6 + i)
        .fit(X, y).feature_importances_ for i in range(6)
    ], axis=0)
    np.testing.assert_allclose(ours, expected, rtol=1e-12, atol=1e-15)


def test_selection_keeps_the_separating_features_and_drops_noise():
    rng = np.random.default_rng(0)
    n = 300
    level, spread = np.repeat([0, 1, 2], n // 3), np.tile([0, 1], n // 2)  # 6 planted groups
    frame = pd.DataFrame({
        "x__mean": level * 4.0 + rng.normal(0, 0.3, n),  # central, separates
        "x__quantile__q_0.05": rng.normal(size=n),
        "x__quantile__q_0.95": rng.normal(size=n),
        "x__truncated_mean__q_0.25": rng.normal(size=n),
        "x__variation_coefficient": spread * 4.0 + rng.normal(0, 0.3, n),  # spread, separates
        "x__autocorrelation__lag_3": rng.normal(size=n),
        "x__autocorrelation__lag_4": rng.normal(size=n),
        "x__ratio_beyond_r_sigma__r_1": rng.normal(size=n),
    })
    result = select_features(frame, SelectionSettings(steps=3, n_trees=10, gmm_restarts=5))
    signal = ("x__mean", "x__variation_coefficient")
    assert len(result.kept) == 4  # keep = int(0.5 * 8), split 2 central + 2 spread
    assert set(signal) <= set(result.kept)
    assert len(set(frame.columns) - set(result.kept)) == 4  # 4 of the 6 noise columns dropped
    last = result.steps[-1].importances
    assert min(last[name] for name in signal) > max(
        v for name, v in last.items() if name not in signal)
    assert [step.k for step in result.steps] == [3, 5, 7]
    assert [step.budget for step in result.steps] == [7, 5, 4]
    assert [(s.central_quota, s.spread_quota) for s in result.steps] == [(3, 4), (2, 3), (2, 2)]
    for step in result.steps:
        assert len(step.kept) <= step.budget and set(step.kept) <= set(step.features)


def test_facet_without_enough_features_does_not_carry_over():
    rng = np.random.default_rng(6)
    frame = pd.DataFrame({
        "x__mean": np.repeat([0.0, 5.0, 10.0], 40) + rng.normal(0, 0.2, 120),
        **{f"x__autocorrelation__lag_{i}": rng.normal(size=120) for i in range(1, 6)},
    })
    result = select_features(frame, SelectionSettings(steps=2, n_trees=4, gmm_restarts=3))
    # budgets [5, 3]: central quota 2 then 1 but only one central feature exists
    assert result.steps[0].kept.count("x__mean") == 1
    assert len(result.steps[0].kept) == 1 + 3
    assert len(result.kept) == 1 + 2


# ---------------------------------------------------------------------------------------
# Pipeline: settings, persistence, cache, bad input
# ---------------------------------------------------------------------------------------


def test_settings_key_is_stable_and_round_trips():
    a = AnalysisSettings()
    assert a.key() == AnalysisSettings().key()
    assert len(a.key()) == 16
    assert AnalysisSettings(seed=1).key() != a.key()
    assert AnalysisSettings(selection=SelectionSettings(n_trees=10)).key() != a.key()
    custom = AnalysisSettings(feature_set=[("mean", {}), ("quantile", {"q": 0.1})])
    assert AnalysisSettings.from_dict(json.loads(json.dumps(custom.to_dict()))) == custom
    assert AnalysisSettings.from_dict(a.to_dict()) == a
    puffer = AnalysisSettings.preset("puffer")
    assert puffer.k_range == (6, 15) and puffer.selection.central_rounding == "ceil"
    with pytest.raises(ValueError, match="k_range"):
        AnalysisSettings(k_range=(5, 3))
    with pytest.raises(ValueError, match="unknown feature set"):
        AnalysisSettings(feature_set="nope")


def test_save_load_round_trip(tmp_path):
    traces = load_tracebench("balanced", "train").subset(range(0, 1000, 10))
    result = analyze(traces, CHEAP)
    npz, js = result.save(tmp_path / "run")
    assert npz.is_file() and js.is_file()
    with np.load(npz, allow_pickle=False) as data:  # no pickled objects inside
        assert data["labels"].shape == (100,)
    back = TraceAnalysis.load(tmp_path / "run.json")
    assert back.settings == result.settings and back.kept == result.kept
    np.testing.assert_array_equal(back.labels, result.labels)
    np.testing.assert_array_equal(back.memberships, result.memberships)
    pd.testing.assert_frame_equal(back.features, result.features)
    assert back.silhouettes == result.silhouettes and back.importances == result.importances
    assert back.selection.kept == result.selection.kept
    assert [s.importances for s in back.selection.steps] == \
        [s.importances for s in result.selection.steps]
    assert not any(tmp_path.glob("*.tmp"))


_CACHE_SCRIPT = textwrap.dedent("""
    import json, sys
    from plume.analysis import AnalysisSettings, SelectionSettings, analyze
    from plume.traces import load_tracebench
    traces = load_tracebench("balanced", "train").subset(range(0, 1000, 8))
    settings = AnalysisSettings(selection=SelectionSettings(n_trees=5, gmm_restarts=4),
                                restarts=4)
    result = analyze(traces, settings, cache_dir=sys.argv[1])
    print(json.dumps({"from_cache": result.from_cache, "k": result.k,
                      "labels": result.labels.tolist(), "key": settings.key()}))
""")


def test_cache_is_shared_across_processes(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-c", _CACHE_SCRIPT, str(tmp_path)]
    # two jobs at once: one computes under the entry's lock, the other waits and loads it
    writers = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                text=True) for _ in range(2)]
    outputs = [w.communicate(timeout=120) for w in writers]
    for writer, (out, err) in zip(writers, outputs):
        assert writer.returncode == 0, err
    first = [json.loads(out) for out, _ in outputs]
    assert first[0]["labels"] == first[1]["labels"]
    assert sorted(f["from_cache"] for f in first) == [False, True]
    files = sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".lock")
    assert len(files) == 2 and files[0].endswith(".json") and files[1].endswith(".npz")
    mtimes = {p: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    reader = subprocess.run(cmd, capture_output=True, env=env, text=True, timeout=120,
                            check=False)
    assert reader.returncode == 0, reader.stderr
    second = json.loads(reader.stdout)
    assert second["from_cache"] is True  # loaded, not recomputed
    assert second["labels"] == first[0]["labels"]
    assert {p: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == mtimes  # not rewritten
    # the parent process finds the same entry under the same key
    traces = load_tracebench("balanced", "train").subset(range(0, 1000, 8))
    assert cache_path(tmp_path, traces, CHEAP).name.endswith(second["key"])
    local = analyze(traces, CHEAP, cache_dir=tmp_path)
    assert local.from_cache and "load_s" in local.timings


def test_nan_and_constant_features_are_imputed_and_dropped():
    # 60 traces, each constant at one of three levels: the spread features are constant
    # (or NaN everywhere) across traces, the level features separate the three groups
    levels = np.repeat([1.0, 5.0, 10.0], 20)
    bandwidth = np.repeat(levels[:, None], 30, axis=1)
    time = np.repeat(np.arange(30.0)[None, :], 60, axis=0)
    traces = TraceSet("constant-levels", {"time": time, "bandwidth": bandwidth}, np.full(60, 30),
                      labels=np.repeat(["low", "mid", "high"], 20))
    result = analyze(traces, AnalysisSettings(select=False, k_range=(2, 4), restarts=3))
    notes = " ".join(result.notes)
    assert "imputed 60 non-finite value(s) of throughput__autocorrelation__lag_3" in notes
    assert "dropped" in notes and "throughput__variation_coefficient" in notes
    assert "throughput__mean" in result.kept
    assert "throughput__autocorrelation__lag_3" not in result.kept
    assert np.all(np.isfinite(result.features.to_numpy()))
    assert result.k == 3 and adjusted_rand_index(result) == 1.0
    flat = TraceSet("flat", {"time": time, "bandwidth": np.ones_like(bandwidth)}, np.full(60, 30))
    with pytest.raises(ValueError, match="every candidate feature is constant"):
        analyze(flat, AnalysisSettings(select=False, k_range=(2, 3), restarts=2))


def test_no_selection_and_random_label_ablations_run():
    traces = load_tracebench("majority_slow", "train").subset(range(0, 1000, 5))
    plain = analyze(traces, AnalysisSettings(select=False, restarts=5,
                                             selection=SelectionSettings(n_trees=5)))
    assert plain.selection is None and len(plain.kept) == 17
    assert set(plain.importances) == set(plain.kept)
    random = analyze(traces, AnalysisSettings(random_labels=True, fixed_k=4, restarts=3,
                                              selection=SelectionSettings(n_trees=4,
                                                                          gmm_restarts=3)))
    assert random.k == 4 and random.silhouettes == {}
    assert adjusted_rand_index(random) < 0.1


def test_helpers_against_ground_truth():
    labels = np.array([0, 0, 1, 1, 2, 2])
    truth = np.array(["a", "a", "b", "b", "c", "c"])
    assert adjusted_rand_index(labels, truth) == 1.0
    table = contingency_table(labels, truth)
    assert table.loc["a", 0] == 2 and table.loc["total", "total"] == 6
    with pytest.raises(ValueError, match="ground-truth"):
        adjusted_rand_index(labels)


# ---------------------------------------------------------------------------------------
# Acceptance: the default pipeline recovers the four TraceBench kinds
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dataset", [pytest.param(d, marks=() if i == 0 else pytest.mark.slow)
                                     for i, d in enumerate(DATASETS)])
def test_default_pipeline_recovers_the_four_kinds(dataset):
    traces = load_tracebench(dataset, "train")
    result = analyze(traces)
    assert result.k == 4
    assert len(result.kept) == 8  # 8 of 17, as the reference
    assert len(central_features(result.kept)) == 4
    assert adjusted_rand_index(result) >= 0.95
    table = contingency_table(result).drop(index="total", columns="total")
    assert (table.gt(0).sum(axis=1) == 1).all()  # every kind within one cluster

