"""TSCL-style learning-progress sampling over Plume's clusters (``tscl``).

Teacher-Student Curriculum Learning (Matiisen, Oliver, Cohen, Schulman, arXiv 2017 / IEEE TNNLS
2019), its "Window" teacher with Boltzmann exploration, with a Plume cluster as the task: the
learning progress of a cluster is the slope of a least-squares line through the scores of its
last ``window`` episodes, and clusters whose score is changing fastest (up or down: forgetting
counts, as in the paper's ``|slope|``) are trained on most.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from plume.checks import FieldError, fraction, integer, positive
from plume.sampling.base import SamplerNeeds
from plume.sampling.checks import valid_trace
from plume.sampling.mixture import EpsilonMixtureSampler
from plume.sampling.weights import hard_labels

__all__ = ["LearningProgressConfig", "LearningProgressSampler", "window_slope"]


def window_slope(points: Any) -> float:
    """Least-squares slope of ``(x, y)`` pairs (nan with fewer than 2 points or constant x)."""
    xy = np.asarray(list(points), dtype=np.float64).reshape(-1, 2)
    if xy.shape[0] < 2:
        return math.nan
    dx = xy[:, 0] - xy[:, 0].mean()
    denom = float(dx @ dx)
    if not denom > 0:
        return math.nan
    return float(dx @ (xy[:, 1] - xy[:, 1].mean())) / denom


@dataclass
class LearningProgressConfig:
    """TSCL's options (its Window teacher with Boltzmann exploration)."""

    window: int = 20
    """Episodes per cluster in the regression window (the paper's window K), >= 2."""
    temperature: float = 0.2
    """Relative Boltzmann temperature (> 0): slopes are divided by the largest one first."""
    epsilon: float = 0.1
    """Uniform floor over traces: every trace keeps probability >= epsilon / n_traces."""
    min_episodes: int = 2
    """Clusters with fewer episodes in their window (>= 2: a slope needs two points) are
    explored first; at most ``window``."""

    def __post_init__(self) -> None:
        self.window = integer("window", self.window, 2)
        self.temperature = positive("temperature", self.temperature)
        self.epsilon = fraction("epsilon", self.epsilon)
        self.min_episodes = integer("min_episodes", self.min_episodes, 2)
        if self.min_episodes > self.window:
            raise FieldError("min_episodes", f"({self.min_episodes}) must be <= window "
                                             f"({self.window}), or no cluster ever leaves "
                                             "exploration")


class LearningProgressSampler(EpsilonMixtureSampler):
    """Sample clusters by the absolute learning progress of their recent episodes.

    Each finished training episode (:meth:`update`) scores ``mean(rewards)``, the per-step
    mean, so that short and long traces are comparable; the pair ``(k, score)``, ``k`` = how
    many episodes of that cluster came before, joins the cluster's window (the last ``window``
    pairs). Cluster priority is ``|slope|`` of that window (:meth:`slopes`).

    Cluster mass (:meth:`cluster_probabilities`): while some non-empty cluster has fewer than
    ``min_episodes`` points it has infinite priority, so those clusters share all the mass
    equally (each is explored before any is exploited). Otherwise mass ∝
    ``exp(|slope_k| / (temperature · s))`` with ``s = max_k |slope_k|``, which makes the
    temperature unit-free (all slopes zero: equal masses). A cluster is uniform inside; the
    trace distribution is then mixed with ``epsilon`` uniform over traces, so every trace keeps
    probability ``>= epsilon / n_traces``. ``p`` is recomputed after every update.

    ``memberships``: ``(n_traces, K)`` soft or one-hot (argmax is the cluster) or 1-D labels.
    Episodes with no rewards carry no score; they are counted in ``skipped_episodes``.
    """

    name = "tscl"
    CONFIG = LearningProgressConfig
    NEEDS = SamplerNeeds(inputs=("memberships",))

    def __init__(self, n_traces: int, rng: np.random.Generator, memberships: np.ndarray,
                 config: LearningProgressConfig | None = None, **options: Any) -> None:
        super().__init__(n_traces, rng, config, **options)
        self.clusters, self.n_clusters = hard_labels(memberships, self.n_traces)
        self.cluster_sizes = np.bincount(self.clusters, minlength=self.n_clusters)
        self.cluster_episodes = np.zeros(self.n_clusters, dtype=np.int64)
        self.windows = [deque(maxlen=self.config.window) for _ in range(self.n_clusters)]
        self.skipped_episodes = 0
        self._refresh()

    # -- priorities -----------------------------------------------------------------------------
    def slopes(self) -> np.ndarray:
        """Least-squares slope of each cluster's window, shape (K,); nan below min_episodes."""
        return np.array([window_slope(w) if len(w) >= self.config.min_episodes else math.nan
                         for w in self.windows])

    def cluster_probabilities(self) -> np.ndarray:
        """Mass of each cluster in the prioritised distribution (before ε), shape (K,)."""
        alive = self.cluster_sizes > 0
        counts = np.array([len(w) for w in self.windows])
        explore = alive & (counts < self.config.min_episodes)
        if explore.any():
            return explore / explore.sum()
        progress = np.abs(self.slopes())
        scale = progress[alive].max()
        if not scale > 0:
            return alive / alive.sum()
        logits = np.where(alive, progress / (self.config.temperature * scale), -np.inf)
        mass = np.exp(logits - logits[alive].max())  # exp(-inf) = 0 for empty clusters
        return mass / mass.sum()

    def _refresh(self) -> None:
        mass = self.cluster_probabilities()
        sizes = np.maximum(self.cluster_sizes, 1)  # empty clusters have zero mass anyway
        self.set_prioritised((mass / sizes)[self.clusters])

    # -- episodes -------------------------------------------------------------------------------
    def update(self, trace_index: int, rewards: np.ndarray, **learner_stats: Any) -> None:
        """Add the episode's per-step mean reward to its cluster's window, then recompute p."""
        trace = valid_trace(trace_index, self.n_traces)
        r = np.asarray(rewards, dtype=np.float64).reshape(-1)
        if r.size and not np.all(np.isfinite(r)):
            raise ValueError(f"episode on trace {trace} has non-finite rewards")
        super().update(trace, r)
        if r.size == 0:
            self.skipped_episodes += 1
            return
        k = self.clusters[trace]
        self.windows[k].append((int(self.cluster_episodes[k]), float(r.mean())))
        self.cluster_episodes[k] += 1
        self._refresh()

    # -- persistence ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "windows": [list(w) for w in self.windows],
            "cluster_episodes": self.cluster_episodes.copy(),
            "skipped_episodes": self.skipped_episodes,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("name") != self.name:
            raise ValueError(f"state of sampler {state.get('name')!r} given to {self.name!r}")
        windows = state["windows"]
        if len(windows) != self.n_clusters:
            raise ValueError(f"state has {len(windows)} clusters, this sampler {self.n_clusters}")
        if any(len(w) > self.config.window for w in windows):
            raise ValueError(f"state has windows longer than window={self.config.window}")
        super().load_state_dict(state)
        self.windows = [deque(((int(k), float(s)) for k, s in w), maxlen=self.config.window)
                        for w in windows]
        self.cluster_episodes[:] = state["cluster_episodes"]
        self.skipped_episodes = int(state["skipped_episodes"])
        self._refresh()
