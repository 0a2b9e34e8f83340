"""Per-trace sampling weights from cluster structure (reference ``trace_utils.py``, digest §2.8).

Pure functions of plain arrays: they never modify their inputs (the reference divides the
caller's ``class_weights`` in place) and raise ``ValueError`` with a precise message on bad input
instead of dividing by zero.

* :func:`cluster_weights_hard` (reference ``get_cluster_weights``): cluster ``k`` receives the
  total mass ``pool_k`` (uniform pools: ``1/K``), spread uniformly over its traces.
* :func:`cluster_weights_soft` (reference ``get_dist_weights``): soft memberships ``dist``
  (``n x K``); ``prop_k = sum_i dist[i,k] / sum_{i,j} dist[i,j]``, ``adjustment_k = pool_k /
  prop_k``, ``w_i ∝ sum_k dist[i,k] adjustment_k``. Attributing each trace's weight to clusters
  in proportion to ``dist[i,k] adjustment_k``, the mass that flows through cluster ``k`` is
  exactly ``pool_k`` (see :func:`cluster_mass_soft`). With one-hot memberships it equals
  :func:`cluster_weights_hard`.

The reference's optional ``max_pool_inflation`` clipping is never used there and is omitted.

Cluster ids are the integers ``0 .. K-1``: in hard labels ``K`` is ``len(pools)`` when pools are
given, else ``max(labels) + 1``; every cluster in that range must have at least one trace.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "as_labels",
    "as_memberships",
    "cluster_mass_soft",
    "cluster_weights_hard",
    "cluster_weights_soft",
    "finite_scores",
    "hard_labels",
    "minmax_scale",
    "normalise_pools",
]


def normalise_pools(pools: np.ndarray | None, n_clusters: int) -> np.ndarray:
    """A fresh copy of ``pools`` scaled to sum to 1 (uniform ``1/K`` when None).

    Raises ValueError unless pools has shape ``(n_clusters,)``, is finite and non-negative and has
    a positive sum.
    """
    if pools is None:
        return np.full(n_clusters, 1.0 / n_clusters)
    arr = np.array(pools, dtype=np.float64, copy=True)
    if arr.shape != (n_clusters,):
        raise ValueError(f"pools must have shape ({n_clusters},) (one per cluster), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"pools must be finite, got {arr.tolist()}")
    if np.any(arr < 0):
        raise ValueError(f"pools must be non-negative, got {arr.tolist()}")
    total = arr.sum()
    if not total > 0:
        raise ValueError(f"pools must sum to a positive value, got {arr.tolist()} (sum {total})")
    arr /= total
    return arr


def as_labels(labels: np.ndarray, n_clusters: int | None = None) -> tuple[np.ndarray, int]:
    """Validated integer labels (a new int64 array) and the number of clusters ``K``.

    Labels must be integers in ``[0, K)`` with ``K = n_clusters`` or ``max(labels) + 1``, and
    every cluster must own at least one trace.
    """
    raw = np.asarray(labels)
    if raw.ndim != 1 or raw.size == 0:
        raise ValueError(f"labels must be a non-empty 1-D array, got shape {raw.shape}")
    if raw.dtype.kind == "f":
        if not np.all(np.isfinite(raw)) or np.any(raw != np.round(raw)):
            raise ValueError("labels must be integer cluster ids")
    elif raw.dtype.kind not in "iub":
        raise ValueError(f"labels must be integer cluster ids, got dtype {raw.dtype}")
    lab = raw.astype(np.int64)  # astype copies: the caller's array is never touched
    if lab.min() < 0:
        raise ValueError(f"labels must be >= 0, got {int(lab.min())}")
    k = int(lab.max()) + 1 if n_clusters is None else int(n_clusters)
    if lab.max() >= k:
        raise ValueError(f"label {int(lab.max())} is out of range for {k} clusters")
    counts = np.bincount(lab, minlength=k)
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise ValueError(
            f"cluster(s) {empty.tolist()} have no traces (labels cover {k} clusters); "
            "remove or renumber empty clusters"
        )
    return lab, k


def as_memberships(memberships: np.ndarray, n_traces: int | None = None) -> np.ndarray:
    """A validated float64 copy of a membership matrix, shape ``(n_traces, K)``.

    Accepts soft memberships (e.g. GMM posteriors) or hard one-hot rows; a 1-D array of integer
    labels is converted to one-hot. Entries must be finite and non-negative, every row and every
    column must have positive mass, and there must be at least as many traces as clusters.
    """
    arr = np.asarray(memberships)
    if arr.ndim == 1:
        lab, k = as_labels(arr)
        out = np.zeros((lab.size, k))
        out[np.arange(lab.size), lab] = 1.0
    elif arr.ndim == 2:
        out = np.array(arr, dtype=np.float64, copy=True)
    else:
        raise ValueError(f"memberships must be (n_traces, n_clusters) or 1-D labels, got {arr.shape}")
    n, k = out.shape
    if n_traces is not None and n != n_traces:
        raise ValueError(f"memberships has {n} rows but the sampler covers {n_traces} traces")
    if k < 1 or n < 1:
        raise ValueError(f"memberships must have at least one trace and one cluster, got {out.shape}")
    if n < k:
        raise ValueError(f"fewer traces ({n}) than clusters ({k})")
    if not np.all(np.isfinite(out)):
        bad = np.argwhere(~np.isfinite(out))[0]
        raise ValueError(f"memberships has a non-finite entry at (trace {bad[0]}, cluster {bad[1]})")
    if np.any(out < 0):
        bad = np.argwhere(out < 0)[0]
        raise ValueError(f"memberships has a negative entry at (trace {bad[0]}, cluster {bad[1]})")
    col = out.sum(axis=0)
    if np.any(col <= 0):
        raise ValueError(
            f"cluster(s) {np.flatnonzero(col <= 0).tolist()} have zero membership mass (empty)"
        )
    row = out.sum(axis=1)
    if np.any(row <= 0):
        raise ValueError(f"trace(s) {np.flatnonzero(row <= 0)[:10].tolist()} belong to no cluster")
    return out


def cluster_weights_hard(labels: np.ndarray, pools: np.ndarray | None = None) -> np.ndarray:
    """Trace probabilities (sum 1) giving cluster ``k`` the mass ``pool_k``, uniform inside it.

    ``labels``: (n,) integer cluster ids in ``[0, K)``; ``pools``: (K,) non-negative cluster
    masses, normalised here (default uniform: every cluster gets ``1/K``).
    """
    k_given = None if pools is None else np.asarray(pools).reshape(-1).shape[0]
    lab, k = as_labels(labels, k_given)
    pool = normalise_pools(pools, k)
    counts = np.bincount(lab, minlength=k)
    weights = (pool / counts)[lab]
    return weights / weights.sum()


def cluster_weights_soft(memberships: np.ndarray, pools: np.ndarray | None = None) -> np.ndarray:
    """Trace probabilities (sum 1) from soft memberships; cluster ``k`` carries mass ``pool_k``.

    ``memberships``: (n, K) non-negative (rows need not sum to 1; the reference does not
    normalise them either); ``pools``: (K,) non-negative cluster masses (default uniform).
    """
    dist = as_memberships(memberships)
    pool = normalise_pools(pools, dist.shape[1])
    col = dist.sum(axis=0)
    prop = col / col.sum()
    weights = dist @ (pool / prop)
    return weights / weights.sum()


def cluster_mass_soft(probabilities: np.ndarray, memberships: np.ndarray,
                      pools: np.ndarray | None = None) -> np.ndarray:
    """Mass flowing through each cluster when ``probabilities`` came from these memberships/pools.

    Each trace's probability is split over clusters in proportion to ``dist[i,k] *
    adjustment_k`` (its contributions in :func:`cluster_weights_soft`). For probabilities
    produced by ``cluster_weights_soft(memberships, pools)`` the result equals the normalised
    pools. With one-hot memberships it is simply the probability summed per cluster.
    """
    dist = as_memberships(memberships)
    pool = normalise_pools(pools, dist.shape[1])
    col = dist.sum(axis=0)
    contrib = dist * (pool / (col / col.sum()))
    share = contrib / contrib.sum(axis=1, keepdims=True).clip(min=np.finfo(float).tiny)
    return np.asarray(probabilities, dtype=np.float64) @ share


def minmax_scale(values: np.ndarray, low: float = 1.0, high: float = 10.0) -> np.ndarray:
    """Affine map of ``values`` onto ``[low, high]`` (sklearn ``minmax_scale`` semantics).

    All-equal values map to ``low`` (sklearn treats a zero range as 1), a new array is returned.
    """
    arr = np.asarray(values, dtype=np.float64)
    lo, hi = arr.min(), arr.max()
    span = hi - lo
    if span <= 0:
        return np.full(arr.shape, float(low))
    return low + (arr - lo) * ((high - low) / span)


def hard_labels(memberships: np.ndarray, n_traces: int) -> tuple[np.ndarray, int]:
    """Hard cluster labels and K: 1-D labels via :func:`as_labels`; a membership matrix via
    its argmax with K = its columns (a soft cluster that wins no trace's argmax is kept,
    empty: rejecting it would stop a run over a property of the clustering)."""
    raw = np.asarray(memberships)
    if raw.ndim == 1:
        labels, k = as_labels(raw)
        if labels.size != n_traces:
            raise ValueError(f"memberships has {labels.size} labels but the sampler covers "
                             f"{n_traces} traces")
        return labels, k
    dist = as_memberships(raw, n_traces)
    return np.argmax(dist, axis=1).astype(np.int64), dist.shape[1]


def finite_scores(name: str, values: np.ndarray, size: int,
                  traces: np.ndarray | None = None) -> np.ndarray:
    """A float64 copy of ``values`` (``size`` of them); a non-finite one names its trace
    (``traces[i]`` when given, else its index)."""
    arr = np.array(values, dtype=np.float64, copy=True).reshape(-1)
    if arr.shape != (size,):
        raise ValueError(f"{name} has {arr.size} values, expected {size}")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        trace = int(bad[0]) if traces is None else int(traces[bad[0]])
        raise ValueError(f"{name} has a non-finite value ({arr[bad[0]]}) at trace {trace}")
    return arr
