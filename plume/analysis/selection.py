"""Stage 1b: iterative critical-feature selection (reference ``filter_features``, digest §2.4-2.5).

Starting from all F candidate features, ``steps`` rounds each

1. standardise the features still kept (population std, as ``sklearn.preprocessing.scale``),
2. cluster them with the GMM of :mod:`plume.analysis.clustering` at that round's k,
3. fit ``n_trees`` ``DecisionTreeClassifier(class_weight="balanced", random_state=i)`` to
   predict the cluster labels and average their (Gini impurity) ``feature_importances_``,
4. keep, separately within the central-tendency and the spread facet, the top features by
   importance: the round's budget ``n`` is split ``floor(n/2)`` central / ``ceil(n/2)``
   spread (``central_rounding="floor"``, the TraceBench code) or the other way round
   (``"ceil"``, the Puffer code). A facet with fewer features than its quota keeps them all
   and nothing carries over to the other facet.

Schedules (numpy ``linspace`` truncated to int, as the reference): cluster counts
``linspace(k_start, k_end, steps)``, budgets ``linspace(int(0.975 F), keep, steps)`` with
``keep = max(2, int(fraction F))``. TraceBench (F = 17): k = [3, 3, 4, 5, 5, 6, 7], budgets
[16, 14, 13, 12, 10, 9, 8]. Puffer (F = 16, fraction 0.4, 5 steps, central ceil): k =
[3, 4, 5, 6, 7], budgets [15, 12, 10, 8, 6].

After each round the kept columns are ordered as the reference leaves them (central by
decreasing importance, then spread by decreasing importance; ties keep the earlier column);
the order feeds the next round's trees, whose tie-breaking depends on column order.

The trees are the cost of the whole analysis (75 per round, about 2-3 ms each on 1000
traces). :func:`tree_importances` gives the same importances as fitting
``DecisionTreeClassifier(class_weight="balanced", random_state=i)`` on the float64 matrix
(checked to equality in the tests) with less overhead per tree: the balanced class weights
become the equivalent sample weights once, the data the float32 matrix the estimator would
make, one legacy generator is reseeded instead of built per tree, and the trees after the
first are grown by sklearn's own builder directly (private classes, used only after the
first tree built that way has been checked equal to the public estimator's; otherwise every
tree goes through the public estimator).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from plume.analysis.clustering import fit_gmm, standardize
from plume.analysis.features import CENTRAL_CALCULATORS, calculator_of

__all__ = [
    "SELECTION_PRESETS",
    "SelectionResult",
    "SelectionSettings",
    "SelectionStep",
    "select_features",
    "selection_schedule",
    "tree_importances",
]


@dataclass(frozen=True)
class SelectionSettings:
    """Settings of the iterative selection (defaults: the reference's TraceBench run).

    Attributes:
        fraction: share of the candidate features kept at the end (keep = max(2, int(f F))).
        steps: selection rounds.
        n_trees: decision trees per round (seeds ``seed * n_trees + i``).
        gmm_restarts: GMM restarts per round (the reference's 75).
        central_rounding: "floor" (TraceBench) or "ceil" (Puffer): how an odd budget is
            split, central getting floor(n/2) or ceil(n/2).
        k_start, k_end: the cluster-count schedule runs linearly from k_start to k_end.
    """

    fraction: float = 0.5
    steps: int = 7
    n_trees: int = 75
    gmm_restarts: int = 75
    central_rounding: Literal["floor", "ceil"] = "floor"
    k_start: int = 3
    k_end: int = 7

    def __post_init__(self) -> None:
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"selection fraction must lie in (0, 1], got {self.fraction}")
        if self.steps < 1:
            raise ValueError(f"selection steps must be >= 1, got {self.steps}")
        if self.n_trees < 1:
            raise ValueError(f"selection n_trees must be >= 1, got {self.n_trees}")
        if self.gmm_restarts < 1:
            raise ValueError(f"selection gmm_restarts must be >= 1, got {self.gmm_restarts}")
        if self.central_rounding not in ("floor", "ceil"):
            raise ValueError(
                f"central_rounding must be 'floor' or 'ceil', got {self.central_rounding!r}"
            )
        if not 2 <= self.k_start <= self.k_end:
            raise ValueError(
                f"need 2 <= k_start <= k_end, got k_start={self.k_start}, k_end={self.k_end}"
            )

    def to_dict(self) -> dict:
        return asdict(self)


SELECTION_PRESETS: dict[str, SelectionSettings] = {
    "tracebench": SelectionSettings(),
    "puffer": SelectionSettings(fraction=0.4, steps=5, central_rounding="ceil"),
}
"""The reference's settings per environment (digest §2.5)."""


def selection_schedule(n_features: int, settings: SelectionSettings
                       ) -> tuple[list[int], list[int], int]:
    """(cluster count per round, feature budget per round, final keep) for F features."""
    keep = max(2, int(settings.fraction * n_features))
    ks = np.linspace(settings.k_start, settings.k_end, num=settings.steps, endpoint=True,
                     dtype=np.int64)
    budgets = np.linspace(int(n_features * 0.975), keep, num=settings.steps, endpoint=True,
                          dtype=np.int64)
    return [int(k) for k in ks], [int(b) for b in budgets], keep


def _low_level_tree_builder():
    """sklearn's own tree builder without ``DecisionTreeClassifier.fit``'s per-call checks.

    Private sklearn classes (``sklearn.tree._tree`` etc.): returns None when they are not
    importable; :func:`tree_importances` also checks, on every call, that the first tree
    built this way equals the public estimator's before using it for the others.
    """
    try:
        from sklearn.tree._criterion import Gini
        from sklearn.tree._splitter import BestSplitter
        from sklearn.tree._tree import DepthFirstTreeBuilder, Tree
    except ImportError:  # pragma: no cover - depends on the sklearn version
        return None

    def importances(X32, y, weights, n_classes, state) -> np.ndarray:
        classes = np.array([n_classes], dtype=np.intp)
        splitter = BestSplitter(Gini(1, classes), X32.shape[1], 1, 0.0, state, None)
        tree = Tree(X32.shape[1], classes, 1)
        DepthFirstTreeBuilder(splitter, 2, 1, 0.0, np.iinfo(np.int32).max, 0.0).build(
            tree, X32, y, weights, None
        )
        return tree.compute_feature_importances()

    return importances


def tree_importances(X: np.ndarray, labels: np.ndarray, n_trees: int = 75,
                     seed: int = 0) -> np.ndarray:
    """Mean ``feature_importances_`` of ``n_trees`` balanced decision trees predicting labels.

    Same values as averaging ``DecisionTreeClassifier(class_weight="balanced",
    random_state=seed * n_trees + i).fit(X, labels).feature_importances_`` over i: the class
    weights are passed as the equivalent sample weights, the data as the float32 matrix
    the estimator would make, one legacy generator is reseeded instead of built per tree,
    and (after checking that it reproduces the public estimator's first tree exactly) the
    remaining trees are grown by sklearn's builder directly, skipping per-fit validation.
    """
    import sklearn
    from sklearn.tree import DecisionTreeClassifier
    from sklearn.utils.class_weight import compute_sample_weight

    X32 = np.ascontiguousarray(X, dtype=np.float32)
    labels = np.asarray(labels)
    weights = compute_sample_weight("balanced", labels)
    classes, encoded = np.unique(labels, return_inverse=True)
    y = np.ascontiguousarray(encoded.reshape(-1, 1), dtype=np.float64)
    state = np.random.RandomState()
    total = np.zeros(X32.shape[1])
    fast = _low_level_tree_builder()
    with sklearn.config_context(skip_parameter_validation=True, assume_finite=True):
        for i in range(n_trees):
            # reseeding one legacy generator gives the stream of RandomState(seed) without
            # building a generator per tree (a tree draws its splitter seed from it)
            state.seed(seed * n_trees + i)
            if fast is not None and i > 0:
                total += fast(X32, y, weights, len(classes), state)
                continue
            tree = DecisionTreeClassifier(random_state=state)
            tree.fit(X32, labels, sample_weight=weights, check_input=False)
            total += tree.feature_importances_
            if fast is not None:
                try:
                    state.seed(seed * n_trees + i)
                    same = np.array_equal(fast(X32, y, weights, len(classes), state),
                                          tree.feature_importances_)
                except Exception:  # noqa: BLE001 - any incompatibility: public path only
                    same = False
                fast = fast if same else None
    return total / n_trees


@dataclass
class SelectionStep:
    """One round: its k and budget, the features it scored and what it kept."""

    k: int
    budget: int
    central_quota: int
    spread_quota: int
    features: list[str]
    importances: dict[str, float]
    kept: list[str]


@dataclass
class SelectionResult:
    """Kept feature names (reference order) plus the per-round history."""

    kept: list[str]
    steps: list[SelectionStep] = field(default_factory=list)
    settings: SelectionSettings = field(default_factory=SelectionSettings)

    @property
    def final_importances(self) -> dict[str, float]:
        """Importances of the kept features in the last round that scored them."""
        if not self.steps:
            return {}
        last = self.steps[-1].importances
        return {name: last[name] for name in self.kept}

    def to_dict(self) -> dict:
        return {
            "kept": list(self.kept),
            "settings": self.settings.to_dict(),
            "steps": [asdict(step) for step in self.steps],
        }

    @classmethod
    def from_dict(cls, data: dict) -> SelectionResult:
        return cls(
            kept=list(data["kept"]),
            steps=[SelectionStep(**step) for step in data["steps"]],
            settings=SelectionSettings(**data["settings"]),
        )


def _top(names: list[str], scores: dict[str, float], quota: int) -> list[str]:
    # stable sort on decreasing importance: ties keep the earlier column (Python's sort with
    # reverse=True, as the reference, is stable too)
    return sorted(names, key=lambda name: -scores[name])[:quota]


def select_features(features: pd.DataFrame, settings: SelectionSettings = SelectionSettings(),
                    *, seed: int = 0) -> SelectionResult:
    """Run the iterative selection on a (traces x features) DataFrame without NaNs.

    ``seed`` shifts the GMM restarts and the tree seeds (0 = the reference's seeds).
    """
    if features.shape[1] == 0:
        raise ValueError("no features to select from")
    values = features.to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(values)):
        raise ValueError("features hold NaN or infinite values; impute them first")
    names = [str(c) for c in features.columns]
    column = {name: i for i, name in enumerate(names)}
    ks, budgets, _ = selection_schedule(len(names), settings)
    if features.shape[0] < max(ks):
        raise ValueError(
            f"the dataset has {features.shape[0]} traces, fewer than the {max(ks)} clusters "
            "of the selection schedule"
        )
    current = list(names)
    history: list[SelectionStep] = []
    for k, budget in zip(ks, budgets):
        central_quota = budget // 2 if settings.central_rounding == "floor" else (budget + 1) // 2
        spread_quota = budget - central_quota
        X = standardize(values[:, [column[name] for name in current]])
        labels = fit_gmm(X, k, restarts=settings.gmm_restarts, seed=seed).labels
        importance = tree_importances(X, labels, settings.n_trees, seed=seed)
        scores = {name: float(v) for name, v in zip(current, importance)}
        central = [n for n in current if calculator_of(n) in CENTRAL_CALCULATORS]
        spread = [n for n in current if calculator_of(n) not in CENTRAL_CALCULATORS]
        kept = _top(central, scores, central_quota) + _top(spread, scores, spread_quota)
        history.append(SelectionStep(k=k, budget=budget, central_quota=central_quota,
                                     spread_quota=spread_quota, features=list(current),
                                     importances=scores, kept=list(kept)))
        current = kept
    return SelectionResult(kept=current, steps=history, settings=settings)
