"""Plume stages 1-2 end to end, cached: features -> critical features -> clusters.

``analyze(traces, settings)`` computes the candidate features of every trace, imputes them
(tsfresh's rule), drops constant columns (noted in the result), selects the critical
features (optional), standardises them, and clusters the traces with the number of clusters
chosen by silhouette. The result, a :class:`TraceAnalysis`, holds everything stage 3 and the
reports need (hard labels, soft memberships, k, silhouettes, cluster sizes, importances) and
is saved as ``.npz`` + ``.json`` (no pickles).

Caching: with ``cache_dir``, the result lives at
``cache_dir/<content_hash[:16]>-<settings.key()>.{npz,json}``. Both files are written to a
temporary name in the same directory and moved into place with ``os.replace``, the ``.npz``
first and the ``.json`` (the commit marker) last, so jobs of a sweep can share one cache
directory: a reader either finds a complete result or none, and concurrent writers of the
same key write the same content.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from plume.analysis.clustering import choose_k, standardize
from plume.analysis.features import (
    CONSTANT_FEATURES,
    compute_features,
    impute,
    resolve_feature_set,
)
from plume.analysis.selection import (
    SELECTION_PRESETS,
    SelectionResult,
    SelectionSettings,
    select_features,
    tree_importances,
)
from plume.traces.traceset import TraceSet

__all__ = [
    "ANALYSIS_FORMAT_VERSION",
    "AnalysisSettings",
    "TraceAnalysis",
    "adjusted_rand_index",
    "analyze",
    "assignment_table",
    "cache_path",
    "contingency_table",
]

ANALYSIS_FORMAT_VERSION = 1
"""Bumped whenever the meaning of a stored analysis changes; part of every settings key."""


def _freeze_feature_set(feature_set) -> str | tuple:
    if isinstance(feature_set, str):
        return feature_set
    specs = resolve_feature_set(feature_set)
    return tuple((calc, tuple(sorted(dict(params).items()))) for calc, params in specs)


@dataclass(frozen=True)
class AnalysisSettings:
    """Everything that determines a stage 1-2 result (its cache key).

    Attributes:
        feature_set: name in ``FEATURE_SETS`` ("tracebench", "puffer"), ``"constants"`` (the
            traces' per-trace constants: CC's link tuples) or a sequence of
            ``(calculator, params)`` specs.
        select: run the iterative selection; False = cluster on all candidate features
            (the "no selection" ablation).
        selection: settings of the selection.
        method: stage-2 clustering, "gmm" (Plume) or "kmeans" (ablation).
        k_range: inclusive (min, max) cluster counts searched (reference: TraceBench 3-8,
            Puffer 6-15, CC 4-9, LB 3-8).
        fixed_k: use this k, no search (ablation).
        random_labels: replace the clustering by uniformly random labels with the same k
            (ablation).
        restarts: GMM (or k-means) restarts of the stage-2 clustering (reference 75).
        min_cluster_fraction: a clustering whose smallest cluster holds <= this share of the
            traces scores -1 (reference 0.0001, inert below 10,000 traces; see choose_k).
        seed: shifts every restart and tree seed (0 = the reference's seeds).
        channel: the series channel featurised ("bandwidth": ABR's throughput).
        resample_s: featurise on a grid of this many seconds (forward fill, at most
            ``MAX_RESAMPLE_SECONDS`` per trace; the reference's Puffer rule, 0.5 s), so traces
            with mixed sampling intervals get comparable features; 0 = the raw samples
            (TraceBench, whose grid is regular).
    """

    feature_set: str | tuple = "tracebench"
    select: bool = True
    selection: SelectionSettings = field(default_factory=SelectionSettings)
    method: Literal["gmm", "kmeans"] = "gmm"
    k_range: tuple[int, int] = (3, 8)
    fixed_k: int | None = None
    random_labels: bool = False
    restarts: int = 75
    min_cluster_fraction: float = 0.01
    seed: int = 0
    channel: str = "bandwidth"
    resample_s: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "feature_set", _freeze_feature_set(self.feature_set))
        if isinstance(self.feature_set, str) and self.feature_set != CONSTANT_FEATURES:
            resolve_feature_set(self.feature_set)  # fails early on an unknown name
        if not isinstance(self.selection, SelectionSettings):
            raise TypeError(f"selection must be a SelectionSettings, got {self.selection!r}")
        if self.method not in ("gmm", "kmeans"):
            raise ValueError(f"method must be 'gmm' or 'kmeans', got {self.method!r}")
        try:
            lo, hi = (int(v) for v in self.k_range)
        except (TypeError, ValueError):
            raise ValueError(f"k_range must be (min_k, max_k), got {self.k_range!r}")
        if not 2 <= lo <= hi:
            raise ValueError(f"k_range must satisfy 2 <= min_k <= max_k, got {self.k_range!r}")
        object.__setattr__(self, "k_range", (lo, hi))
        if self.fixed_k is not None:
            if int(self.fixed_k) < 2:
                raise ValueError(f"fixed_k must be >= 2, got {self.fixed_k}")
            object.__setattr__(self, "fixed_k", int(self.fixed_k))
        if self.restarts < 1:
            raise ValueError(f"restarts must be >= 1, got {self.restarts}")
        if not 0.0 <= self.min_cluster_fraction < 1.0:
            raise ValueError(
                f"min_cluster_fraction must lie in [0, 1), got {self.min_cluster_fraction}"
            )
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
        if not (self.resample_s >= 0 and np.isfinite(self.resample_s)):
            raise ValueError(f"resample_s must be >= 0 seconds (0 = raw samples), "
                             f"got {self.resample_s}")

    @classmethod
    def preset(cls, env: str, **overrides: Any) -> AnalysisSettings:
        """The reference's settings for "tracebench" or "puffer", with overrides."""
        presets = {
            "tracebench": {"feature_set": "tracebench",
                           "selection": SELECTION_PRESETS["tracebench"], "k_range": (3, 8)},
            "puffer": {"feature_set": "puffer", "selection": SELECTION_PRESETS["puffer"],
                       "k_range": (6, 15)},
        }
        if env not in presets:
            raise ValueError(f"no analysis preset for {env!r}; expected one of {sorted(presets)}")
        return cls(**{**presets[env], **overrides})

    @property
    def max_k(self) -> int:
        """The largest cluster count any stage of this analysis fits."""
        ks = [self.fixed_k if self.fixed_k is not None else self.k_range[1]]
        if self.select:
            ks.append(self.selection.k_end)
        return max(ks)

    def to_dict(self) -> dict:
        data = asdict(self)
        if not isinstance(self.feature_set, str):
            data["feature_set"] = [[calc, dict(params)] for calc, params in self.feature_set]
        data["k_range"] = list(self.k_range)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> AnalysisSettings:
        data = dict(data)
        data["selection"] = SelectionSettings(**data["selection"])
        data["k_range"] = tuple(data["k_range"])
        if not isinstance(data["feature_set"], str):
            data["feature_set"] = [(calc, params) for calc, params in data["feature_set"]]
        return cls(**data)

    def key(self) -> str:
        """Stable 16-hex-digit hash of the settings (and of the storage format version)."""
        payload = json.dumps(
            {"format": ANALYSIS_FORMAT_VERSION, "settings": self.to_dict()},
            sort_keys=True, separators=(",", ":"),
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass
class TraceAnalysis:
    """Stage 1-2 result for one TraceSet under one AnalysisSettings.

    Attributes:
        content_hash: ``TraceSet.content_hash`` of the traces analysed.
        settings: the settings used.
        dataset: the TraceSet's name (informational).
        trace_ids: (n,) trace identifiers, row order of every per-trace array.
        features: all candidate features (imputed), rows = traces, columns = names.
        kept: names of the features clustered on (critical features).
        standardized: (n, len(kept)) the standardised kept features.
        labels: (n,) hard cluster labels in 0..k-1.
        memberships: (n, k) soft memberships (GMM posteriors; one-hot for the ablations).
        k: number of clusters.
        silhouettes: score per candidate k after the minimum-cluster rule (-1 = rejected);
            empty when k was fixed.
        raw_silhouettes: silhouette per candidate k before the rule.
        cluster_sizes: (k,) traces per cluster.
        importances: importance of each kept feature: from the selection's last round when
            selecting, else from trees fit on the final labels. Sorted, most important first.
        log_likelihood: mean per-trace log-likelihood of the final GMM (NaN for ablations
            without one).
        selection: the selection history (None when ``select`` is False).
        notes: what the pipeline changed about the input (imputed NaNs, dropped columns).
        timings: seconds per stage (features, selection, clustering, total).
        true_labels: (n,) ground-truth kinds when the TraceSet has them (never used).
        from_cache: True when this object was loaded from a cache instead of computed.
    """

    content_hash: str
    settings: AnalysisSettings
    dataset: str
    trace_ids: np.ndarray
    features: pd.DataFrame
    kept: list[str]
    standardized: np.ndarray
    labels: np.ndarray
    memberships: np.ndarray
    k: int
    silhouettes: dict[int, float]
    raw_silhouettes: dict[int, float]
    cluster_sizes: np.ndarray
    importances: dict[str, float]
    log_likelihood: float
    selection: SelectionResult | None
    notes: list[str]
    timings: dict[str, float]
    true_labels: np.ndarray | None = None
    from_cache: bool = False

    def __repr__(self) -> str:
        return (
            f"TraceAnalysis({self.dataset!r}, n={len(self.labels)}, k={self.k}, "
            f"kept={len(self.kept)}/{self.features.shape[1]}, hash={self.content_hash[:12]})"
        )

    @property
    def top_features(self) -> list[str]:
        """Kept features by decreasing importance (the first two make the usual scatter)."""
        return sorted(self.importances, key=lambda name: -self.importances[name])

    def assign(self, traces: TraceSet) -> np.ndarray:
        """Cluster of each trace of another split (e.g. a test set): the nearest cluster
        centroid in this analysis's standardised kept-feature space (training statistics).
        It lets results on held-out traces be broken down by the training clusters."""
        new = impute(_features(traces, self.settings))[self.kept].to_numpy()
        train = self.features[self.kept].to_numpy(dtype=np.float64)
        std = train.std(axis=0)
        z = (new - train.mean(axis=0)) / np.where(std > 0, std, 1.0)
        centroids = np.full((self.k, len(self.kept)), np.inf)
        for cluster in np.unique(self.labels):
            centroids[cluster] = self.standardized[self.labels == cluster].mean(axis=0)
        distances = ((z[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
        return np.argmin(distances, axis=1)

    # ---------------------------------------------------------------- persistence

    def save(self, path: str | Path) -> tuple[Path, Path]:
        """Write ``<path>.npz`` and ``<path>.json`` atomically; returns both paths."""
        stem = Path(path)
        if stem.suffix in (".npz", ".json"):
            stem = stem.with_suffix("")
        stem.parent.mkdir(parents=True, exist_ok=True)
        arrays = {
            "features": self.features.to_numpy(dtype=np.float64),
            "standardized": self.standardized,
            "labels": self.labels,
            "memberships": self.memberships,
            "cluster_sizes": self.cluster_sizes,
            "trace_ids": np.asarray(self.trace_ids, dtype=str),
        }
        if self.true_labels is not None:
            arrays["true_labels"] = np.asarray(self.true_labels, dtype=str)
        header = {
            "format_version": ANALYSIS_FORMAT_VERSION,
            "content_hash": self.content_hash,
            "settings": self.settings.to_dict(),
            "settings_key": self.settings.key(),
            "dataset": self.dataset,
            "feature_names": [str(c) for c in self.features.columns],
            "kept": list(self.kept),
            "k": int(self.k),
            "silhouettes": {str(k): float(v) for k, v in self.silhouettes.items()},
            "raw_silhouettes": {str(k): float(v) for k, v in self.raw_silhouettes.items()},
            "importances": {k: float(v) for k, v in self.importances.items()},
            "log_likelihood": None if not np.isfinite(self.log_likelihood)
            else float(self.log_likelihood),
            "selection": None if self.selection is None else self.selection.to_dict(),
            "notes": list(self.notes),
            "timings": {k: float(v) for k, v in self.timings.items()},
        }
        npz_path, json_path = stem.with_name(stem.name + ".npz"), stem.with_name(stem.name + ".json")
        _atomic_write(npz_path, lambda fh: np.savez(fh, **arrays))
        _atomic_write(json_path, lambda fh: fh.write(json.dumps(header, indent=1).encode()))
        return npz_path, json_path

    @classmethod
    def load(cls, path: str | Path) -> TraceAnalysis:
        """Read a result written by :meth:`save` (``path`` with or without suffix)."""
        stem = Path(path)
        if stem.suffix in (".npz", ".json"):
            stem = stem.with_suffix("")
        npz_path, json_path = stem.with_name(stem.name + ".npz"), stem.with_name(stem.name + ".json")
        if not json_path.is_file() or not npz_path.is_file():
            raise FileNotFoundError(f"no stored TraceAnalysis at {stem} (.npz + .json)")
        header = json.loads(json_path.read_text())
        if header.get("format_version") != ANALYSIS_FORMAT_VERSION:
            raise ValueError(
                f"{json_path}: analysis format {header.get('format_version')} is not supported "
                f"(expected {ANALYSIS_FORMAT_VERSION})"
            )
        with np.load(npz_path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
        trace_ids = arrays["trace_ids"]
        features = pd.DataFrame(arrays["features"], columns=header["feature_names"],
                                index=pd.Index(trace_ids, name="id"))
        ll = header["log_likelihood"]
        return cls(
            content_hash=header["content_hash"],
            settings=AnalysisSettings.from_dict(header["settings"]),
            dataset=header["dataset"],
            trace_ids=trace_ids,
            features=features,
            kept=list(header["kept"]),
            standardized=arrays["standardized"],
            labels=arrays["labels"],
            memberships=arrays["memberships"],
            k=int(header["k"]),
            silhouettes={int(k): v for k, v in header["silhouettes"].items()},
            raw_silhouettes={int(k): v for k, v in header["raw_silhouettes"].items()},
            cluster_sizes=arrays["cluster_sizes"],
            importances=dict(header["importances"]),
            log_likelihood=float("nan") if ll is None else float(ll),
            selection=None if header["selection"] is None
            else SelectionResult.from_dict(header["selection"]),
            notes=list(header["notes"]),
            timings=dict(header["timings"]),
            true_labels=arrays.get("true_labels"),
        )


def _atomic_write(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def cache_path(cache_dir: str | Path, traces: TraceSet, settings: AnalysisSettings) -> Path:
    """The cache stem ``cache_dir/<content_hash[:16]>-<settings key>`` (add .npz / .json)."""
    return Path(cache_dir) / f"{traces.content_hash[:16]}-{settings.key()}"


def analyze(traces: TraceSet, settings: AnalysisSettings = AnalysisSettings(),
            cache_dir: str | Path | None = None) -> TraceAnalysis:
    """Plume stages 1-2 on ``traces``; reuses / writes ``cache_dir`` when given.

    Concurrent callers on one cache (the jobs of a sweep) compute each analysis once: the
    first takes a lock on its cache entry, the others wait for it and load the result."""
    if not isinstance(settings, AnalysisSettings):
        raise TypeError(f"settings must be an AnalysisSettings, got {type(settings).__name__}")
    if cache_dir is None:
        return _compute(traces, settings)
    stem = cache_path(cache_dir, traces, settings)
    cached = _load_cached(stem, traces, settings)
    if cached is not None:
        return cached
    stem.parent.mkdir(parents=True, exist_ok=True)
    with open(stem.with_name(stem.name + ".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        cached = _load_cached(stem, traces, settings)  # computed while this one waited?
        if cached is not None:
            return cached
        result = _compute(traces, settings)
        result.save(stem)
    return result


def _load_cached(stem: Path, traces: TraceSet, settings: AnalysisSettings):
    """The cached analysis at ``stem`` when it is readable and matches; None otherwise."""
    if not stem.with_name(stem.name + ".json").is_file():
        return None
    start = time.perf_counter()
    try:
        cached = TraceAnalysis.load(stem)
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as err:
        warnings.warn(f"ignoring unreadable cached analysis {stem}: {err}", RuntimeWarning,
                      stacklevel=3)
        return None
    if cached.content_hash != traces.content_hash or cached.settings != settings:
        return None
    cached.from_cache = True
    cached.timings["load_s"] = time.perf_counter() - start
    return cached


def _features(traces: TraceSet, settings: AnalysisSettings):
    """Candidate features of the settings' channel, resampled when the settings say so."""
    return compute_features(traces, settings.feature_set, channel=settings.channel,
                            resample_s=settings.resample_s)


def _usable_features(traces: TraceSet, settings: AnalysisSettings,
                     notes: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """Stage 1's candidate features (non-finite values imputed as tsfresh does) and the
    names of those not constant across the traces; what was changed goes to ``notes``."""
    n = len(traces)
    raw = _features(traces, settings)
    values = raw.to_numpy()
    for name, bad in zip(raw.columns, (~np.isfinite(values)).sum(axis=0)):
        if bad:
            notes.append(f"imputed {bad} non-finite value(s) of {name} (tsfresh's impute)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        features = impute(raw)
    values = features.to_numpy()
    constant = np.all(values == values[:1], axis=0)
    usable = [name for name, c in zip(features.columns, constant) if not c]
    if constant.any():
        dropped = [name for name, c in zip(features.columns, constant) if c]
        notes.append(f"dropped {len(dropped)} constant feature(s) (same value for all "
                     f"{n} traces): {dropped}")
    if not usable:
        raise ValueError(
            f"every candidate feature is constant across the {n} traces of {traces.name!r}; "
            "there is nothing to cluster on"
        )
    return features, usable


def _compute(traces: TraceSet, settings: AnalysisSettings) -> TraceAnalysis:
    n = len(traces)
    if n < settings.max_k:
        raise ValueError(
            f"TraceSet {traces.name!r} has {n} traces, fewer than the {settings.max_k} clusters "
            f"the analysis fits (k_range={settings.k_range}, fixed_k={settings.fixed_k}"
            + (f", selection k_end={settings.selection.k_end}" if settings.select else "")
            + ")"
        )
    notes: list[str] = []
    timings: dict[str, float] = {}
    start = time.perf_counter()
    features, usable = _usable_features(traces, settings, notes)
    timings["features_s"] = time.perf_counter() - start

    t = time.perf_counter()
    selection = None
    if settings.select and len(usable) > 2:
        selection = select_features(features[usable], settings.selection, seed=settings.seed)
        kept = list(selection.kept)
    else:
        if settings.select:
            notes.append(f"selection skipped: only {len(usable)} non-constant feature(s)")
        kept = usable
    timings["selection_s"] = time.perf_counter() - t

    t = time.perf_counter()
    X = standardize(features[kept].to_numpy())
    search = choose_k(
        X, settings.k_range, min_cluster_fraction=settings.min_cluster_fraction,
        method=settings.method, restarts=settings.restarts, seed=settings.seed,
        fixed_k=settings.fixed_k, random_labels=settings.random_labels, standardized=True,
    )
    timings["clustering_s"] = time.perf_counter() - t
    clustering = search.clustering

    if selection is not None:
        importances = selection.final_importances
    else:
        t = time.perf_counter()
        values = tree_importances(X, clustering.labels, settings.selection.n_trees,
                                  seed=settings.seed)
        importances = dict(zip(kept, (float(v) for v in values)))
        timings["importances_s"] = time.perf_counter() - t
    importances = dict(sorted(importances.items(), key=lambda item: -item[1]))
    timings["total_s"] = time.perf_counter() - start

    return TraceAnalysis(
        content_hash=traces.content_hash,
        settings=settings,
        dataset=traces.name,
        trace_ids=np.asarray(traces.trace_ids),
        features=features,
        kept=kept,
        standardized=X,
        labels=clustering.labels,
        memberships=clustering.memberships,
        k=search.k,
        silhouettes=dict(search.scores),
        raw_silhouettes=dict(search.silhouettes),
        cluster_sizes=clustering.sizes,
        importances=importances,
        log_likelihood=clustering.log_likelihood,
        selection=selection,
        notes=notes,
        timings=timings,
        true_labels=None if traces.labels is None else np.asarray(traces.labels),
    )


# --------------------------------------------------------------------------------------
# Comparing with ground truth
# --------------------------------------------------------------------------------------


def _labels_and_truth(labels, truth) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(labels, TraceAnalysis):
        if truth is None:
            truth = labels.true_labels
        labels = labels.labels
    if truth is None:
        raise ValueError("no ground-truth labels: pass them, or analyse a TraceSet with labels")
    labels, truth = np.asarray(labels), np.asarray(truth)
    if labels.shape != truth.shape:
        raise ValueError(f"labels {labels.shape} and truth {truth.shape} differ in shape")
    return labels, truth


def adjusted_rand_index(labels: TraceAnalysis | Sequence, truth: Sequence | None = None) -> float:
    """``sklearn.metrics.adjusted_rand_score(truth, labels)``; a TraceAnalysis brings its
    own ground truth."""
    from sklearn.metrics import adjusted_rand_score

    labels, truth = _labels_and_truth(labels, truth)
    return float(adjusted_rand_score(truth, labels))


def contingency_table(labels: TraceAnalysis | Sequence,
                      truth: Sequence | None = None) -> pd.DataFrame:
    """Traces per (ground-truth kind, cluster): ``pandas.crosstab`` with margins."""
    labels, truth = _labels_and_truth(labels, truth)
    return pd.crosstab(pd.Series(truth, name="kind"), pd.Series(labels, name="cluster"),
                       margins=True, margins_name="total")


def assignment_table(result: TraceAnalysis) -> pd.DataFrame:
    """Where each trace landed, so a user can look up their own traces: one row per trace in
    the analysed order with ``trace_id``, the hard ``cluster`` (the argmax of the
    memberships), ``p_0 .. p_{k-1}`` (the soft memberships the samplers get; rows sum to 1)
    and, when the dataset has ground truth, its ``label``."""
    memberships = np.asarray(result.memberships, dtype=np.float64)
    table = pd.DataFrame({"trace_id": np.asarray(result.trace_ids, dtype=str),
                          "cluster": np.asarray(result.labels, dtype=np.int64)})
    for j in range(memberships.shape[1]):
        table[f"p_{j}"] = memberships[:, j]
    if result.true_labels is not None:
        table["label"] = np.asarray(result.true_labels, dtype=str)
    return table
