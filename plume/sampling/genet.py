"""Genet's curriculum (Xia et al., SIGCOMM 2022) as a :class:`TraceSampler` over a fixed trace set.

Genet trains on a distribution over environment configurations and, every round, adds the
configuration where the RL policy trails a rule-based baseline the most (found by Bayesian
optimisation over a trace generator's parameters). Here the "configurations" are the clusters
Plume finds in a fixed trace set (the cluster analogue): the policy and the baseline are
compared per cluster on a few of its traces, and the cluster with the largest gap becomes a new
mixture component. Re-implemented from the paper's description; no code is copied.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from plume.checks import fail, fraction, integer, real
from plume.sampling.base import ConfigField, SamplerNeeds
from plume.sampling.checks import controller
from plume.sampling.mixture import EpsilonMixtureSampler
from plume.sampling.weights import finite_scores, hard_labels

__all__ = ["GenetConfig", "GenetSampler"]

UNIFORM = -1
"""Cluster id of component 0: uniform over all traces (Genet's original distribution)."""


@dataclass
class GenetConfig:
    """Genet's options (``conf/sampler/genet.yaml`` repeats them: a test reads that file)."""

    budget_steps: int
    """The run's env-step budget (the config gives ``${train.total_steps}``); the rounds are
    spaced ``budget_steps // (rounds + 1)`` steps apart."""
    baseline: Optional[str] = None
    """The rule-based controller scored per trace (provenance); None: the env's default."""
    rounds: int = 9
    """Curriculum rounds inside the training budget."""
    traces_per_cluster: int = 4
    """Traces per cluster the policy is evaluated on each round."""
    new_weight: float = 0.3
    """Weight of a newly added component, in (0, 1) (the others are scaled by 1 - it)."""
    epsilon: float = 0.1
    """Uniform floor: every trace keeps probability >= epsilon / n_traces."""

    def __post_init__(self) -> None:
        self.baseline = controller("baseline", self.baseline)
        self.budget_steps = integer("budget_steps", self.budget_steps, 1)
        self.rounds = integer("rounds", self.rounds, 1)
        self.traces_per_cluster = integer("traces_per_cluster", self.traces_per_cluster, 1)
        self.new_weight = real("new_weight", self.new_weight)
        if not 0.0 < self.new_weight < 1.0:
            fail("new_weight", self.new_weight, "in (0, 1)")
        self.epsilon = fraction("epsilon", self.epsilon)


class GenetSampler(EpsilonMixtureSampler):
    """Genet's gap-to-baseline curriculum over the clusters of a fixed trace set.

    The prioritised distribution is a mixture of components ``(cluster, weight)``: component 0
    is uniform over all traces with weight 1; each round that finds a positive gap appends the
    chosen cluster (uniform over its traces) with weight ``new_weight`` and multiplies every
    earlier weight by ``1 − new_weight`` (Genet's 0.7/0.3 re-weighting; a cluster chosen twice
    is two components). Draws come from ``(1 − ε)·p + ε·uniform``.

    Protocol (the harness evaluates the policy; the sampler never sees traces or the policy):

    * ``evaluation_every`` (``needs(config).policy_every``): env steps between rounds,
      ``budget_steps // (rounds + 1)`` (>= 1), so that ``rounds`` rounds fall inside the
      budget (at ``r · evaluation_every``, r = 1..rounds). The sampler itself does not stop
      after ``rounds`` rounds.
    * :meth:`evaluation_traces`: the training traces to evaluate now (up to
      ``traces_per_cluster`` per cluster, drawn with ``self.rng``, so calling it changes later
      draws). The harness scores the current policy on each (greedy, test mode, one episode per
      trace) with the score function that produced ``baseline_scores``.
    * :meth:`observe_policy`: hand those scores back; the sampler picks the cluster with the
      largest ``mean(baseline) − mean(policy)`` and, if that gap is positive, adds it.

    ``memberships``: (n, K) soft/one-hot memberships (argmax gives ``clusters``) or 1-D integer
    labels. ``baseline_scores``: (n,) score of the rule-based controller ``baseline`` (its name,
    for provenance; None = the environment's default) on every training trace, higher is better.
    Logs: ``rounds_done``, ``gap_history`` (per round, a (K,) array, nan where a cluster was not
    evaluated), ``chosen_history`` (cluster or None), :meth:`cluster_weights`, ``components``.
    :meth:`update` only keeps the base counters.
    """

    name = "genet"
    CONFIG = GenetConfig
    NEEDS = SamplerNeeds(inputs=("memberships", "baseline_scores"),
                         policy_every=1)  # the cadence comes from the config: see needs()
    baseline = ConfigField()

    def __init__(self, n_traces: int, rng: np.random.Generator, memberships: np.ndarray,
                 baseline_scores: np.ndarray, config: GenetConfig | None = None,
                 **options: Any) -> None:
        super().__init__(n_traces, rng, config, **options)
        self.clusters, self.n_clusters = hard_labels(memberships, self.n_traces)
        self.baseline_scores = finite_scores("baseline_scores", baseline_scores, self.n_traces)
        self._sizes = np.bincount(self.clusters, minlength=self.n_clusters)

        self.components: list[tuple[int, float]] = [(UNIFORM, 1.0)]
        self.rounds_done = 0
        self.gap_history: list[np.ndarray] = []
        self.chosen_history: list[int | None] = []

    @classmethod
    def needs(cls, config: GenetConfig) -> SamplerNeeds:
        """A round every ``budget_steps // (rounds + 1)`` env steps (at least 1)."""
        every = max(1, config.budget_steps // (config.rounds + 1))
        return dataclasses.replace(cls.NEEDS, policy_every=every)

    # -- distribution ---------------------------------------------------------------------------
    def _mixture(self) -> np.ndarray:
        """Per-trace ``sum_c weight_c · component_c`` of the current components."""
        p = np.zeros(self.n_traces)
        for cluster, weight in self.components:
            if cluster == UNIFORM:
                p += weight / self.n_traces
            else:
                member = self.clusters == cluster
                p[member] += weight / self._sizes[cluster]
        return p

    def cluster_weights(self) -> np.ndarray:
        """(K,) mass of each cluster in the prioritised distribution (before ε mixing)."""
        return np.bincount(self.clusters, weights=self._prio, minlength=self.n_clusters)

    def _add_component(self, cluster: int) -> None:
        keep = 1.0 - self.config.new_weight
        self.components = [(c, w * keep) for c, w in self.components]
        self.components.append((int(cluster), self.config.new_weight))
        self.set_prioritised(self._mixture())

    # -- evaluation protocol --------------------------------------------------------------------
    def evaluation_traces(self) -> np.ndarray:
        """Sorted int64 trace indices to evaluate the policy on: per cluster, all its traces or
        ``traces_per_cluster`` of them drawn without replacement (with ``self.rng``)."""
        picked = []
        for cluster in range(self.n_clusters):
            members = np.flatnonzero(self.clusters == cluster)
            if members.size > self.config.traces_per_cluster:
                members = self.rng.choice(members, self.config.traces_per_cluster, replace=False)
            picked.append(members)
        return np.sort(np.concatenate(picked)).astype(np.int64)

    def _gaps(self, traces: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """(K,) mean baseline score minus mean policy score per cluster; nan if not evaluated."""
        labels = self.clusters[traces]
        k = self.n_clusters
        counts = np.bincount(labels, minlength=k).astype(np.float64)
        base = np.bincount(labels, weights=self.baseline_scores[traces], minlength=k)
        policy = np.bincount(labels, weights=scores, minlength=k)
        gaps = np.full(k, np.nan)
        seen = counts > 0
        gaps[seen] = base[seen] / counts[seen] - policy[seen] / counts[seen]
        return gaps

    def observe_policy(self, traces: np.ndarray, scores: np.ndarray) -> int | None:
        """One curriculum round from the policy's ``scores`` on ``traces`` (training indices).

        Adds the cluster with the largest positive gap (ties: lowest index) and returns it;
        returns None and changes nothing when no gap is positive (Genet only adds
        configurations where the policy is worse than the baseline). Every call is a round in
        the histories.
        """
        idx = np.asarray(traces)
        if idx.ndim != 1 or idx.size == 0:
            raise ValueError(f"traces must be a non-empty 1-D array, got shape {idx.shape}")
        if idx.dtype.kind not in "iu":
            raise ValueError(f"traces must be integer trace indices, got dtype {idx.dtype}")
        if idx.min() < 0 or idx.max() >= self.n_traces:
            raise ValueError(f"trace indices must be in [0, {self.n_traces}), got {idx.tolist()}")
        idx = idx.astype(np.int64)
        policy = finite_scores("scores", scores, idx.size, traces=idx)
        gaps = self._gaps(idx, policy)
        best = int(np.argmax(np.where(np.isnan(gaps), -np.inf, gaps)))  # first max: lowest id
        chosen = best if gaps[best] > 0 else None
        if chosen is not None:
            self._add_component(chosen)
        self.rounds_done += 1
        self.gap_history.append(gaps)
        self.chosen_history.append(chosen)
        return chosen

    # -- persistence ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "n_clusters": self.n_clusters,
            "components": [(int(c), float(w)) for c, w in self.components],
            "rounds_done": self.rounds_done,
            "gap_history": [g.copy() for g in self.gap_history],
            "chosen_history": list(self.chosen_history),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("name") != self.name:
            raise ValueError(f"state of sampler {state.get('name')!r} given to {self.name!r}")
        if int(state["n_clusters"]) != self.n_clusters:
            raise ValueError(
                f"state is for {state['n_clusters']} clusters, this sampler has {self.n_clusters}"
            )
        super().load_state_dict(state)
        self.components = [(int(c), float(w)) for c, w in state["components"]]
        self.rounds_done = int(state["rounds_done"])
        self.gap_history = [np.array(g, dtype=np.float64) for g in state["gap_history"]]
        self.chosen_history = [None if c is None else int(c) for c in state["chosen_history"]]
