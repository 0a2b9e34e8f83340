"""Benchmark: Plume stages 1-2 (features, selection, k search) on the TraceBench train splits.

Run from the repository root::

    python benchmarks/bench_analysis.py [--repeats 3] [--no-reference]

Single-threaded on purpose: the thread-count variables are set before numpy is imported and,
where the OS allows, the process is pinned to one CPU. Prints

* stage 1 (extraction + impute), selection, k search and total wall time of
  ``plume.analysis.analyze`` with default settings on majority_fast/train (best and median of
  ``--repeats`` runs after a warm-up run that pays the imports), against the authors'
  figures for their tsfresh + sklearn pipeline on a machine like ours (about 7.4 s:
  extraction 0.9 s, 7-step selection 4.0 s, k = 3..8 search 2.1 s; 8 of 17 features kept,
  k = 4, clusters = the four kinds);
* when tsfresh is installed, tsfresh's ``extract_features`` on the same traces with the
  reference's settings, timed in this process (the extraction baseline);
* unless ``--no-reference``, the reference's selection and k search written plainly with
  sklearn (``GaussianMixture`` x 75 restarts, ``DecisionTreeClassifier`` x 75 per round,
  ``silhouette_score``) on the same features, timed in this process, and whether it keeps
  the same features and finds the same k and clusters;
* per dataset: kept features, k, silhouette per k, cluster sizes and the adjusted Rand index
  against the generating kinds.
"""

from __future__ import annotations


import single_thread  # noqa: F401,E402  (one thread; must precede numpy)

import argparse
import statistics
import time
import warnings

import numpy as np
import pandas as pd


_import_start = time.perf_counter()
import sklearn

from plume.analysis import (
    FEATURE_SETS,
    AnalysisSettings,
    adjusted_rand_index,
    analyze,
    compute_features,
    impute,
)
from plume.traces import DATASETS, load_tracebench

_import_end = time.perf_counter()

AUTHORS = {"features_s": 0.9, "selection_s": 4.0, "clustering_s": 2.1, "total_s": 7.4}
TARGET_S = 2.5
STAGES = [("features_s", "stage 1: extraction + impute"), ("selection_s", "selection (7 rounds)"),
          ("clustering_s", "k search (k = 3..8)"), ("total_s", "total")]


def short(name: str) -> str:
    return name.replace("throughput__", "")


# --------------------------------------------------------------------------------------
# Baselines timed in this process
# --------------------------------------------------------------------------------------


def tsfresh_extract(traces) -> tuple[float, pd.DataFrame] | None:
    """tsfresh's extract_features with the reference's settings (impute on), or None."""
    try:
        from tsfresh import extract_features
        from tsfresh.utilities.dataframe_functions import impute as ts_impute
    except ImportError:
        return None

    def truncated_mean(x, q):
        lower, upper = np.quantile(x, q), np.quantile(x, 1 - q)
        return np.mean(x[(x > lower) & (x < upper)])

    settings: dict = {}
    for calculator, params in FEATURE_SETS["tracebench"]:
        key = truncated_mean if calculator == "truncated_mean" else calculator
        if params:
            settings.setdefault(key, []).append(dict(params))
        else:
            settings[key] = None
    n, width = traces.bandwidth.shape
    table = pd.DataFrame({
        "id": np.repeat(np.arange(n), width),
        "time": np.tile(np.floor(traces.time[0] + 0.5), n),  # whole seconds, as the reference
        "throughput": traces.bandwidth.ravel(),
    })
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = extract_features(table, column_id="id", column_sort="time",
                               default_fc_parameters=settings, impute_function=ts_impute,
                               disable_progressbar=True, n_jobs=0).sort_index()
    return time.perf_counter() - start, out


def _sk_best_gmm(X, k, restarts=75):
    from sklearn.mixture import GaussianMixture

    best = None
    for seed in range(restarts):
        gmm = GaussianMixture(k, covariance_type="diag", init_params="k-means++", n_init=1,
                              max_iter=300, random_state=seed)
        labels = gmm.fit_predict(X)
        score = gmm.score(X)
        if best is None or score >= best[0]:  # ties: the later restart
            best = (score, labels)
    return best[1]


def sklearn_reference(features: pd.DataFrame) -> dict:
    """The reference algorithm, written plainly with sklearn estimators (digest §2.4-2.7)."""
    from sklearn.metrics import silhouette_score
    from sklearn.preprocessing import scale
    from sklearn.tree import DecisionTreeClassifier

    from plume.analysis import CENTRAL_CALCULATORS, calculator_of

    start = time.perf_counter()
    names = list(features.columns)
    F = len(names)
    keep = max(2, int(0.5 * F))
    current = list(names)
    for k, budget in zip(np.linspace(3, 7, 7, dtype=np.int64),
                         np.linspace(int(F * 0.975), keep, 7, dtype=np.int64)):
        X = scale(features[current].to_numpy())
        labels = _sk_best_gmm(scale(X), int(k))
        importance = np.mean([
            DecisionTreeClassifier(random_state=s, class_weight="balanced")
            .fit(X, labels).feature_importances_ for s in range(75)
        ], axis=0)
        score = dict(zip(current, importance))
        central = [c for c in current if calculator_of(c) in CENTRAL_CALCULATORS]
        spread = [c for c in current if calculator_of(c) not in CENTRAL_CALCULATORS]
        central.sort(key=score.__getitem__, reverse=True)  # stable: ties keep column order
        spread.sort(key=score.__getitem__, reverse=True)
        current = central[: budget // 2] + spread[: (budget + 1) // 2]
    selection_s = time.perf_counter() - start
    start = time.perf_counter()
    X = scale(features[current].to_numpy())
    results = []
    for k in range(3, 9):
        labels = _sk_best_gmm(X, k)
        sil = silhouette_score(X, labels, metric="euclidean")
        if np.unique(labels, return_counts=True)[1].min() <= 0.0001 * len(X):
            sil = -1.0
        results.append((sil, k, labels))
    sil, k, labels = max(results, key=lambda r: (r[0], r[1]))  # ties: the larger k
    return {"kept": current, "k": k, "labels": labels, "selection_s": selection_s,
            "clustering_s": time.perf_counter() - start,
            "silhouettes": {kk: s for s, kk, _ in results}}


# --------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-reference", action="store_true",
                        help="skip the plain-sklearn reference pipeline (about 6 s)")
    args = parser.parse_args()

    pinned = single_thread.pin_to_one_cpu()

    settings = AnalysisSettings()
    traces = {name: load_tracebench(name, "train") for name in DATASETS}
    mf = traces["majority_fast"]
    start = time.perf_counter()
    analyze(mf, settings)  # warm-up: lazy sklearn imports, first allocations
    warm = time.perf_counter() - start
    runs = [analyze(mf, settings).timings for _ in range(args.repeats)]

    print(f"Plume stages 1-2 on TraceBench majority_fast/train ({len(mf)} traces x "
          f"{mf.bandwidth.shape[1]} samples), default settings, 1 thread, pinned: {pinned}")
    print(f"numpy {np.__version__}, pandas {pd.__version__}, scikit-learn {sklearn.__version__}; "
          f"GMM restarts {settings.restarts} (selection {settings.selection.gmm_restarts}), "
          f"trees {settings.selection.n_trees}, min_cluster_fraction "
          f"{settings.min_cluster_fraction}")
    print(f"imports {_import_end - _import_start:.2f} s, warm-up run {warm:.2f} s (not counted)")
    print()
    print(f"{'stage':<30} {'best s':>8} {'median s':>9} {'authors s':>10} {'speed-up':>9}")
    for key, label in STAGES:
        values = [r[key] for r in runs]
        best = min(values)
        print(f"{label:<30} {best:>8.3f} {statistics.median(values):>9.3f} "
              f"{AUTHORS[key]:>10.1f} {AUTHORS[key] / best:>8.1f}x")
    best_total = min(r["total_s"] for r in runs)
    print(f"target <= {TARGET_S} s total: {'met' if best_total <= TARGET_S else 'NOT met'} "
          f"(best {best_total:.2f} s, median "
          f"{statistics.median(r['total_s'] for r in runs):.2f} s)")

    ts = tsfresh_extract(mf)
    start = time.perf_counter()
    for _ in range(5):
        impute(compute_features(mf))
    extraction = (time.perf_counter() - start) / 5
    print()
    if ts is None:
        print("tsfresh not installed: extraction baseline skipped (pip install tsfresh)")
    else:
        import tsfresh

        seconds, frame = ts
        mine = impute(compute_features(mf))
        worst = float(np.max(np.abs(frame[mine.columns].to_numpy() - mine.to_numpy())
                             / np.maximum(np.abs(mine.to_numpy()), 1e-300)))
        print(f"tsfresh {tsfresh.__version__} extract_features (same traces, reference settings, "
              f"impute): {seconds:.3f} s")
        print(f"plume compute_features + impute: {extraction:.4f} s -> "
              f"{seconds / extraction:.0f}x faster; max relative difference {worst:.1e}")

    if not args.no_reference:
        features = impute(compute_features(mf))
        ref = sklearn_reference(features)
        mine = analyze(mf, AnalysisSettings(min_cluster_fraction=0.0001))
        same = ref["kept"] == mine.kept
        agreement = adjusted_rand_index(mine.labels, ref["labels"])
        ref_total = ref["selection_s"] + ref["clustering_s"] + (ts[0] if ts else 0.0)
        print()
        print("reference algorithm with plain sklearn estimators, same features, this process:")
        print(f"  selection {ref['selection_s']:.2f} s, k search {ref['clustering_s']:.2f} s"
              + (f", + tsfresh {ts[0]:.2f} s = {ref_total:.2f} s" if ts else "")
              + f" -> plume {ref_total / best_total:.1f}x faster")
        print(f"  same kept features (same order): {same}; k {ref['k']} vs {mine.k}; "
              f"ARI between the two clusterings {agreement:.4f}")
        print("  silhouettes (reference | plume, min fraction 0.0001): "
              + ", ".join(f"k={k}: {ref['silhouettes'][k]:.4f} | {mine.silhouettes[k]:.4f}"
                          for k in sorted(ref["silhouettes"])))

    print()
    for name, trace_set in traces.items():
        result = analyze(trace_set, settings)
        print(f"{name}: k = {result.k}, ARI vs kinds = {adjusted_rand_index(result):.4f}, "
              f"{len(result.kept)} of {result.features.shape[1]} features kept, "
              f"total {result.timings['total_s']:.2f} s")
        print(f"  kept: {[short(n) for n in result.kept]}")
        print("  silhouette per k (rule applied | raw): "
              + ", ".join(f"{k}: {result.silhouettes[k]:.4f} | {result.raw_silhouettes[k]:.4f}"
                          for k in sorted(result.silhouettes)))
        print(f"  cluster sizes: {result.cluster_sizes.tolist()}; two most important: "
              f"{[short(n) for n in result.top_features[:2]]}")


if __name__ == "__main__":
    main()
