"""Balance without prioritising: samplers that give fixed groups of traces equal mass.

* :class:`ClusterUniformSampler` (``cluster_uniform``): a cluster uniformly, then a trace
  uniformly inside it (ecosystem §4.2); no ε.
* :class:`TwoClassSampler` (``two_class``): the paper's naive "2-Class Equal Weighted" split on
  mean throughput.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from plume.checks import finite, fraction
from plume.sampling.base import NoConfig, SamplerNeeds
from plume.sampling.mixture import EpsilonMixtureSampler
from plume.sampling.weights import as_labels, as_memberships, cluster_weights_hard

__all__ = ["ClusterUniformSampler", "TwoClassConfig", "TwoClassSampler"]


class ClusterUniformSampler(EpsilonMixtureSampler):
    """A cluster uniformly at random, then a trace uniformly inside it (no ε, no options).

    The "balance the skew, do not prioritise" ablation of Plume's stage 3 (ecosystem §4.2).
    Hard labels: a soft ``memberships`` matrix is reduced to its argmax; 1-D labels are accepted.
    Every cluster must own at least one trace.
    """

    name = "cluster_uniform"
    CONFIG = NoConfig
    NEEDS = SamplerNeeds(inputs=("memberships",))

    def __init__(self, n_traces: int, rng: np.random.Generator, memberships: np.ndarray,
                 config: NoConfig | None = None) -> None:
        super().__init__(n_traces, rng, config)
        dist = as_memberships(memberships, self.n_traces)
        self.n_clusters = dist.shape[1]
        self.clusters = np.argmax(dist, axis=1)
        as_labels(self.clusters, self.n_clusters)
        self.set_prioritised(cluster_weights_hard(self.clusters))

    def uniform_share(self) -> float:
        return 0.0

    def cluster_weights(self) -> np.ndarray:
        return np.full(self.n_clusters, 1.0 / self.n_clusters)


@dataclass
class TwoClassConfig:
    """Options of the 2-Class Equal Weighted baseline."""

    threshold: Optional[float] = None
    """Mean throughput at or below which a trace is in group 0; None: the median, so the split
    is about even whatever the units. The reference's 0.9822872859924906 is in Puffer
    delivery-rate units and means nothing elsewhere; give it to reproduce Puffer."""
    epsilon: float = 0.1
    """Probability that a draw is uniform over all traces instead."""

    def __post_init__(self) -> None:
        if self.threshold is not None:
            self.threshold = finite("threshold", self.threshold)
        self.epsilon = fraction("epsilon", self.epsilon)


class TwoClassSampler(EpsilonMixtureSampler):
    """The paper's "2-Class Equal Weighted" baseline (reference ``naive_weighted``, Puffer only).

    Traces whose mean throughput is ``<= threshold`` form group 0, the others group 1; each
    group gets half the prioritised mass, uniform inside it; then ε-uniform mixing. Raises
    ValueError when a group would be empty (e.g. more than half the traces tie at the maximum):
    whether a threshold splits the traces is a property of the data.
    """

    name = "two_class"
    CONFIG = TwoClassConfig
    NEEDS = SamplerNeeds(inputs=("mean_throughput",))

    def __init__(self, n_traces: int, rng: np.random.Generator, mean_throughput: np.ndarray,
                 config: TwoClassConfig | None = None, **options: Any) -> None:
        super().__init__(n_traces, rng, config, **options)
        tput = np.array(mean_throughput, dtype=np.float64, copy=True).reshape(-1)
        if tput.shape != (self.n_traces,):
            raise ValueError(
                f"mean_throughput has {tput.size} values but the sampler covers {self.n_traces} traces"
            )
        if not np.all(np.isfinite(tput)):
            raise ValueError(f"mean_throughput has a non-finite value at trace "
                             f"{int(np.flatnonzero(~np.isfinite(tput))[0])}")
        threshold = self.config.threshold
        self.threshold = float(np.median(tput)) if threshold is None else threshold
        self.clusters = (tput > self.threshold).astype(np.int64)
        sizes = np.bincount(self.clusters, minlength=2)
        if np.any(sizes == 0):
            raise ValueError(
                f"threshold {self.threshold} leaves a group empty "
                f"({int(sizes[0])} traces <= threshold, {int(sizes[1])} above)"
            )
        self.n_clusters = 2
        self.set_prioritised(cluster_weights_hard(self.clusters))

    def cluster_weights(self) -> np.ndarray:
        return np.array([0.5, 0.5])
