"""Stage 2: clustering traces on their (critical) features, and choosing the number of clusters.

Reference (digest §2.6-2.7): standardise the features (``sklearn.preprocessing.scale``:
population std), fit ``GaussianMixture(n_components=k, covariance_type="diag",
init_params="k-means++", n_init=1, max_iter=300)`` with ``random_state`` 0..74, keep the fit
with the highest mean log-likelihood (``gmm.score``); hard labels are its ``fit_predict``,
soft memberships its ``predict_proba``. The number of clusters is the k in a range with the
highest euclidean silhouette on the standardised features, a clustering whose smallest
cluster holds <= ``min_cluster_fraction`` of the traces scoring -1.

:func:`fit_gmm` runs exactly that EM (sklearn's formulas, k-means++ initialisation,
convergence test and tolerances) but fits all restarts together: the k-means++ seeds of every
restart are drawn in lockstep (the same points sklearn's ``kmeans_plusplus`` picks with
``RandomState(seed)``, checked index for index in the tests), and each EM step is one matrix
product for every restart still running, restarts leaving the batch as they converge. Per
restart it reproduces sklearn's iteration count and likelihood to ~1e-10 (summation order
differs), about 4-6x faster, so the reference's 75 restarts remain the default. When several
restarts reach the same optimum (likelihoods equal to ~1e-10, typical at small k) the one
kept may differ from sklearn's, with the same clustering up to a relabelling.

Ablations: ``method="kmeans"`` (sklearn ``KMeans``, hard one-hot memberships), a fixed k (no
search) and uniformly random hard labels with the chosen k (seeded).

Seeds: restart ``i`` of a fit with ``seed=s`` uses ``RandomState(s * restarts + i)``; with the
default ``seed=0`` that is the reference's 0..restarts-1. Ties (equal likelihoods, equal
silhouettes) go to the later restart / larger k, as the reference's stable sorts do.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

__all__ = [
    "REFERENCE_MIN_CLUSTER_FRACTION",
    "Clustering",
    "KSearch",
    "choose_k",
    "cluster",
    "fit_gmm",
    "fit_kmeans",
    "random_clustering",
    "silhouette",
    "standardize",
]

REFERENCE_MIN_CLUSTER_FRACTION = 1e-4
"""The reference's minimum-cluster guard (0.01% of traces). With its ``np.unique`` counts
(always >= 1) it can only fire on datasets of more than 10,000 traces, so it is inert on
TraceBench; Plume's default is 0.01 (see :func:`choose_k`)."""

Method = Literal["gmm", "kmeans"]

_BATCH_ELEMENTS = 2_000_000  # restarts are fitted in batches of at most this many n*k cells


def standardize(X: np.ndarray) -> np.ndarray:
    """Zero mean, unit population std per column, as ``sklearn.preprocessing.scale``.

    Constant columns become 0 (their std is taken as 1, as sklearn does).
    """
    from sklearn.preprocessing import scale

    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"features must be a 2-D (traces, features) array, got {X.shape}")
    return scale(X, with_mean=True)


@dataclass
class Clustering:
    """One clustering of n traces into k clusters.

    Attributes:
        labels: (n,) int hard labels in 0..k-1.
        memberships: (n, k) soft memberships (GMM posteriors; one-hot for k-means and
            random labels); rows sum to 1.
        k: number of clusters.
        method: "gmm", "kmeans" or "random".
        log_likelihood: mean per-trace log-likelihood of the chosen GMM (``gmm.score``);
            for k-means minus the mean squared distance to the centre; NaN for random labels.
        best_seed: RandomState seed of the restart kept (None for random labels).
        n_iter: EM / Lloyd iterations of the restart kept.
        converged: whether that restart met the tolerance before max_iter.
        params: the fitted model: GMM ``weights`` (k,), ``means`` (k, d), ``variances``
            (k, d); k-means ``centers`` (k, d).
        restart_scores: (restarts,) score of every restart (GMM log-likelihood).
        restart_n_iter: (restarts,) EM iterations of every restart (GMM).
    """

    labels: np.ndarray
    memberships: np.ndarray
    k: int
    method: str
    log_likelihood: float
    best_seed: int | None = None
    n_iter: int = 0
    converged: bool = True
    params: dict[str, np.ndarray] = field(default_factory=dict)
    restart_scores: np.ndarray | None = None
    restart_n_iter: np.ndarray | None = None

    @property
    def sizes(self) -> np.ndarray:
        """(k,) number of traces per cluster (hard labels; empty clusters count 0)."""
        return np.bincount(self.labels, minlength=self.k)


def _check_X(X: np.ndarray, k: int) -> np.ndarray:
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"features must be a 2-D (traces, features) array, got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("features hold NaN or infinite values; impute them first")
    if int(k) < 1:
        raise ValueError(f"the number of clusters must be >= 1, got {k}")
    if X.shape[0] < k:
        raise ValueError(
            f"cannot cluster {X.shape[0]} traces into {k} clusters: need at least as many "
            "traces as clusters"
        )
    return X


def _restart_seeds(seed: int, restarts: int) -> list[int]:
    if restarts < 1:
        raise ValueError(f"restarts must be >= 1, got {restarts}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    return [seed * restarts + i for i in range(restarts)]


# --------------------------------------------------------------------------------------
# Gaussian mixture (diagonal covariance), all restarts in one batch
# --------------------------------------------------------------------------------------


class _DiagGMMBatch:
    """EM for R diagonal GMMs on one X.

    Arrays are laid out (k, R, n): the weighted log-densities of every component of every
    restart come from one product ``W @ [X, X**2, 1].T`` (W folds means, precisions, log
    determinants and log weights), the M step is one product ``resp @ [X, X**2]``, and the
    reductions over components are elementwise operations on contiguous (R, n) blocks.
    The formulas are sklearn's (``_estimate_log_gaussian_prob``, ``_m_step`` with
    ``reg_covar``, ``10 * eps`` added to ``nk``), only regrouped.
    """

    def __init__(self, X: np.ndarray, reg_covar: float) -> None:
        self.n, self.d = X.shape
        self.X = X
        self.X2 = X * X
        self.aug_t = np.ascontiguousarray(np.hstack([X, self.X2, np.ones((self.n, 1))]).T)
        self.stats = np.hstack([X, self.X2])  # (n, 2d)
        self.reg_covar = reg_covar
        self.const = self.d * math.log(2 * math.pi)

    def weighted_log_prob(self, weights, means, prec_chol) -> np.ndarray:
        """log(w_j) + log N(x_i | mu_j, diag) for all components, restarts, rows: (k, R, n)."""
        R, k, d = means.shape
        precisions = prec_chol**2
        log_det = np.sum(np.log(prec_chol), axis=2)  # (R, k)
        offset = -0.5 * (self.const + np.sum(means**2 * precisions, axis=2)) + log_det
        offset += np.log(weights)
        W = np.concatenate(
            [means * precisions, -0.5 * precisions, offset[:, :, None]], axis=2
        )  # (R, k, 2d + 1)
        W = W.transpose(1, 0, 2).reshape(k * R, 2 * d + 1)
        return (W @ self.aug_t).reshape(k, R, self.n)

    @staticmethod
    def normalise(weighted: np.ndarray):
        """In place: weighted (k, R, n) becomes the responsibilities; returns log_prob_norm
        (R, n) (log-sum-exp over components)."""
        amax = weighted.max(axis=0)
        np.subtract(weighted, amax, out=weighted)
        np.exp(weighted, out=weighted)
        total = weighted.sum(axis=0)
        np.divide(weighted, total, out=weighted)
        np.log(total, out=total)
        total += amax
        return total

    def m_step(self, resp: np.ndarray):
        k, R, n = resp.shape
        flat = resp.reshape(k * R, n)
        nk = flat.sum(axis=1) + 10 * np.finfo(np.float64).eps  # (k * R,)
        moments = (flat @ self.stats) / nk[:, None]  # (k * R, 2d)
        means = moments[:, : self.d]
        covariances = moments[:, self.d :] - means**2 + self.reg_covar
        nk = nk.reshape(k, R).T  # (R, k)
        weights = nk / nk.sum(axis=1, keepdims=True)
        means = means.reshape(k, R, self.d).transpose(1, 0, 2)
        covariances = covariances.reshape(k, R, self.d).transpose(1, 0, 2)
        return weights, means, covariances

    def init_from_indices(self, indices: np.ndarray):
        """sklearn's ``_initialize`` from one-hot responsibilities at k-means++ seeds."""
        R, k = indices.shape
        nk = 1.0 + 10 * np.finfo(np.float64).eps  # each column of resp holds a single 1
        means = self.X[indices] / nk
        covariances = self.X2[indices] / nk - means**2 + self.reg_covar
        weights = np.full((R, k), nk / self.n)
        return weights, means, covariances


def _precision_cholesky(covariances: np.ndarray) -> np.ndarray:
    if np.any(covariances <= 0.0):
        raise ValueError(
            "Fitting the mixture model failed because some components have ill-defined "
            "empirical covariance; increase reg_covar or scale the input data"
        )
    return 1.0 / np.sqrt(covariances)


def _kmeanspp_indices(X: np.ndarray, k: int, seeds: list[int]) -> np.ndarray:
    """Indices of the k-means++ seeds that ``sklearn.cluster.kmeans_plusplus(X, k,
    random_state=RandomState(s))`` picks, for every s in ``seeds`` (uniform sample weights,
    ``2 + int(log k)`` local trials), computed for all seeds in lockstep.

    sklearn draws, per seed, one ``choice(n, p=uniform)`` (one double, mapped through the
    cdf) and then ``uniform(size=trials)`` per further centre; the legacy generator gives the
    same doubles when they are drawn in one ``random_sample`` call, which is what happens here.
    """
    from sklearn.utils.extmath import row_norms

    n = X.shape[0]
    R = len(seeds)
    norms = row_norms(X, squared=True)
    ones = np.ones(n)
    trials = 2 + int(np.log(k))
    state = np.random.RandomState()
    draws = np.empty((R, 1 + (k - 1) * trials))
    for r, s in enumerate(seeds):
        state.seed(s)  # same stream as RandomState(s), without building a new generator
        draws[r] = state.random_sample(draws.shape[1])
    p = ones / ones.sum()
    cdf = p.cumsum()
    cdf /= cdf[-1]
    rows = np.arange(R)
    indices = np.empty((R, k), dtype=np.int64)
    indices[:, 0] = cdf.searchsorted(draws[:, 0], side="right")
    first = indices[:, 0]
    closest = -2 * (X[first] @ X.T)
    closest += norms[first][:, None]
    closest += norms[None, :]
    np.maximum(closest, 0, out=closest)  # (R, n)
    potential = closest @ ones  # (R,)
    for c in range(1, k):
        rand_vals = draws[:, 1 + (c - 1) * trials : 1 + c * trials] * potential[:, None]
        cumulative = np.cumsum(closest, axis=1)
        # np.searchsorted(cumulative[r], rand_vals[r]) (side="left") for every row at once
        candidates = (cumulative[:, :, None] < rand_vals[:, None, :]).sum(axis=1)
        np.clip(candidates, None, n - 1, out=candidates)
        flat = candidates.ravel()
        dist = -2 * (X[flat] @ X.T)
        dist += norms[flat][:, None]
        dist += norms[None, :]
        np.maximum(dist, 0, out=dist)
        dist = np.minimum(closest[:, None, :], dist.reshape(R, trials, n))
        candidate_pot = dist @ ones  # (R, trials)
        best = np.argmin(candidate_pot, axis=1)
        potential = candidate_pot[rows, best]
        closest = dist[rows, best]
        indices[:, c] = candidates[rows, best]
    return indices


def fit_gmm(
    X: np.ndarray,
    k: int,
    *,
    restarts: int = 75,
    seed: int = 0,
    max_iter: int = 300,
    tol: float = 1e-3,
    reg_covar: float = 1e-6,
) -> Clustering:
    """Best of ``restarts`` diagonal GMMs with k-means++ initialisation (the reference's
    ``cluster``). ``X`` should already be standardised (see :func:`standardize`).

    Equivalent to fitting ``GaussianMixture(k, covariance_type="diag",
    init_params="k-means++", max_iter=max_iter, tol=tol, reg_covar=reg_covar,
    random_state=s)`` for every restart seed ``s`` and keeping the highest ``score(X)``
    (same initial seeds, same EM iterations; likelihoods agree to rounding).
    """
    X = _check_X(X, k)
    seeds = _restart_seeds(seed, restarts)
    model = _DiagGMMBatch(X, reg_covar)
    n = X.shape[0]
    R = len(seeds)
    per_call = max(1, 2 * _BATCH_ELEMENTS // (n * (2 + int(np.log(k)))))  # bounds memory
    indices = np.vstack([_kmeanspp_indices(X, k, seeds[i : i + per_call])
                         for i in range(0, R, per_call)])
    weights, means, covariances = model.init_from_indices(indices)
    prec_chol = _precision_cholesky(covariances)
    n_iter = np.zeros(R, dtype=np.int64)
    converged = np.zeros(R, dtype=bool)
    batch = max(1, _BATCH_ELEMENTS // (n * k))
    for start in range(0, R, batch):
        active = np.arange(start, min(R, start + batch))
        lower = np.full(len(active), -np.inf)
        for iteration in range(1, max_iter + 1):
            resp = model.weighted_log_prob(weights[active], means[active], prec_chol[active])
            log_prob_norm = model.normalise(resp)
            w, mu, cov = model.m_step(resp)
            weights[active], means[active] = w, mu
            prec_chol[active] = _precision_cholesky(cov)
            previous, lower = lower, log_prob_norm.mean(axis=1)
            n_iter[active] = iteration
            done = np.abs(lower - previous) < tol
            converged[active[done]] = True
            active, lower = active[~done], lower[~done]
            if len(active) == 0:
                break
    # gmm.score(X) of every restart: one more (batched) E step at the final parameters
    scores = np.empty(R)
    for start in range(0, R, batch):
        part = slice(start, min(R, start + batch))
        log_prob_norm = model.normalise(
            model.weighted_log_prob(weights[part], means[part], prec_chol[part])
        )
        scores[part] = log_prob_norm.mean(axis=1)
    best = R - 1 - int(np.argmax(scores[::-1]))  # ties: the later restart, as the reference
    resp = model.weighted_log_prob(
        weights[best : best + 1], means[best : best + 1], prec_chol[best : best + 1]
    )
    model.normalise(resp)
    memberships = np.ascontiguousarray(resp[:, 0, :].T)
    return Clustering(
        labels=np.argmax(memberships, axis=1).astype(np.int64),
        memberships=memberships,
        k=int(k),
        method="gmm",
        log_likelihood=float(scores[best]),
        best_seed=seeds[best],
        n_iter=int(n_iter[best]),
        converged=bool(converged[best]),
        params={
            "weights": weights[best].copy(),
            "means": means[best].copy(),
            "variances": 1.0 / prec_chol[best] ** 2,
        },
        restart_scores=scores,
        restart_n_iter=n_iter,
    )


def fit_kmeans(X: np.ndarray, k: int, *, restarts: int = 75, seed: int = 0,
               max_iter: int = 300) -> Clustering:
    """Ablation: sklearn ``KMeans`` (k-means++, ``restarts`` initialisations, best inertia)."""
    from sklearn.cluster import KMeans

    X = _check_X(X, k)
    _restart_seeds(seed, restarts)
    km = KMeans(n_clusters=k, init="k-means++", n_init=restarts, max_iter=max_iter,
                random_state=seed).fit(X)
    labels = km.labels_.astype(np.int64)
    return Clustering(
        labels=labels,
        memberships=np.eye(k)[labels],
        k=int(k),
        method="kmeans",
        log_likelihood=float(-km.inertia_ / X.shape[0]),
        best_seed=seed,
        n_iter=int(km.n_iter_),
        converged=bool(km.n_iter_ < max_iter),
        params={"centers": km.cluster_centers_.copy()},
    )


def random_clustering(n: int, k: int, seed: int = 0) -> Clustering:
    """Ablation: uniformly random hard labels in 0..k-1 (``default_rng(seed)``), one-hot
    memberships."""
    if n < k:
        raise ValueError(f"cannot split {n} traces into {k} clusters")
    labels = np.random.default_rng(seed).integers(0, k, size=n).astype(np.int64)
    return Clustering(labels=labels, memberships=np.eye(k)[labels], k=int(k), method="random",
                      log_likelihood=float("nan"))


def cluster(X: np.ndarray, k: int, *, method: Method = "gmm", restarts: int = 75,
            seed: int = 0) -> Clustering:
    """Cluster standardised features into k clusters with ``method`` ("gmm" or "kmeans")."""
    if method == "gmm":
        return fit_gmm(X, k, restarts=restarts, seed=seed)
    if method == "kmeans":
        return fit_kmeans(X, k, restarts=restarts, seed=seed)
    raise ValueError(f"unknown clustering method {method!r}; expected 'gmm' or 'kmeans'")


def silhouette(X: np.ndarray, labels: np.ndarray) -> float:
    """Mean euclidean silhouette (``sklearn.metrics.silhouette_score``); -1 when undefined
    (fewer than 2 non-empty clusters, or as many clusters as traces)."""
    from sklearn.metrics import silhouette_score

    n_labels = len(np.unique(labels))
    if n_labels < 2 or n_labels > len(labels) - 1:
        return -1.0
    return float(silhouette_score(X, labels, metric="euclidean"))


# --------------------------------------------------------------------------------------
# Choosing k
# --------------------------------------------------------------------------------------


@dataclass
class KSearch:
    """Result of :func:`choose_k`.

    Attributes:
        k: the chosen number of clusters.
        clustering: the clustering at k (random labels when ``random_labels``).
        scores: silhouette per candidate k after the minimum-size rule (-1 = rejected);
            empty when k was fixed.
        silhouettes: raw silhouette per candidate k (before the rule).
        min_sizes: smallest cluster size per candidate k.
        clusterings: every candidate's clustering, by k.
    """

    k: int
    clustering: Clustering
    scores: dict[int, float]
    silhouettes: dict[int, float]
    min_sizes: dict[int, int]
    clusterings: dict[int, Clustering]


def _k_candidates(k_range) -> list[int]:
    if isinstance(k_range, range):
        ks = list(k_range)
    else:
        try:
            lo, hi = (int(v) for v in k_range)
        except (TypeError, ValueError):
            raise ValueError(f"k_range must be (min_k, max_k) inclusive, got {k_range!r}")
        ks = list(range(lo, hi + 1))
    if not ks or min(ks) < 2:
        raise ValueError(f"k_range must hold cluster counts >= 2, got {k_range!r}")
    return ks


def choose_k(
    X: np.ndarray,
    k_range: tuple[int, int] | range = (3, 8),
    *,
    min_cluster_fraction: float = 0.01,
    method: Method = "gmm",
    restarts: int = 75,
    seed: int = 0,
    fixed_k: int | None = None,
    random_labels: bool = False,
    standardized: bool = False,
) -> KSearch:
    """Pick the number of clusters by euclidean silhouette on standardised features.

    For each k in ``k_range`` (inclusive bounds, reference TraceBench 3..8, Puffer 6..15),
    cluster with ``method`` and score the clustering by its silhouette; a clustering whose
    smallest cluster (empty clusters included) holds ``<= min_cluster_fraction * n`` traces
    scores -1. The highest score wins (ties: the larger k, as the reference's stable sort).

    ``min_cluster_fraction`` defaults to 0.01 (a cluster of 1% of the traces or less is
    rejected: Plume gives every cluster equal sampling mass, so a tiny cluster would be
    replayed out of all proportion). The reference's 0.0001
    (:data:`REFERENCE_MIN_CLUSTER_FRACTION`) never fires on fewer than 10,000 traces.

    Ablations: ``fixed_k`` skips the search; ``random_labels`` replaces the clustering at the
    chosen k by uniformly random labels (seeded by ``seed``).
    ``X`` is standardised here unless ``standardized=True``.
    """
    if not 0.0 <= min_cluster_fraction < 1.0:
        raise ValueError(f"min_cluster_fraction must lie in [0, 1), got {min_cluster_fraction}")
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"features must be a 2-D (traces, features) array, got {X.shape}")
    n = X.shape[0]
    ks = [int(fixed_k)] if fixed_k is not None else _k_candidates(k_range)
    if n < max(ks):
        what = f"fixed_k={fixed_k}" if fixed_k is not None else f"k_range {k_range!r}"
        raise ValueError(
            f"the dataset has {n} traces, fewer than the {max(ks)} clusters of {what}"
        )
    Xs = X if standardized else standardize(X)
    clusterings: dict[int, Clustering] = {}
    scores: dict[int, float] = {}
    sils: dict[int, float] = {}
    min_sizes: dict[int, int] = {}
    if fixed_k is not None:
        chosen = int(fixed_k)
        clusterings[chosen] = cluster(Xs, chosen, method=method, restarts=restarts, seed=seed)
    else:
        for k in ks:
            c = cluster(Xs, k, method=method, restarts=restarts, seed=seed)
            clusterings[k] = c
            sils[k] = silhouette(Xs, c.labels)
            min_sizes[k] = int(c.sizes.min())
            scores[k] = -1.0 if min_sizes[k] <= min_cluster_fraction * n else sils[k]
        best = max(scores.values())
        chosen = max(k for k, s in scores.items() if s == best)
        if best == -1.0:
            warnings.warn(
                f"no k in {ks} passes the minimum-cluster rule (smallest cluster > "
                f"{min_cluster_fraction} of {n} traces); using k={chosen}",
                RuntimeWarning,
                stacklevel=2,
            )
    result = clusterings[chosen]
    if random_labels:
        result = random_clustering(n, chosen, seed=seed)
    return KSearch(k=chosen, clustering=result, scores=scores, silhouettes=sils,
                   min_sizes=min_sizes, clusterings=clusterings)
