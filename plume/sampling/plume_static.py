"""Plume-Static (``plume_static``): every cluster gets the same total probability (the
paper's Eq. 2), mixed with ε-uniform draws.

Takes plain arrays (``memberships``: ``(n_traces, K)`` soft or one-hot, or 1-D integer labels),
so it works without ``plume.analysis`` and without the harness.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from plume.checks import boolean, fail, fraction
from plume.sampling.base import SamplerNeeds
from plume.sampling.mixture import EpsilonMixtureSampler
from plume.sampling.weights import (
    as_labels,
    as_memberships,
    cluster_weights_hard,
    cluster_weights_soft,
    normalise_pools,
)

__all__ = ["PlumeStaticConfig", "PlumeStaticSampler"]


@dataclass
class PlumeStaticConfig:
    """Plume-Static's options (defaults: the reference's TraceBench code)."""

    hard: bool = False
    """False (the reference's TraceBench ``get_dist_weights``) redistributes the cluster masses
    through the soft memberships; True (its Puffer ``get_cluster_weights``) uses each trace's
    argmax label and spreads each cluster's mass uniformly over its traces."""
    epsilon: float = 0.1
    """Probability that a draw is uniform over all traces instead (reference 0.10)."""
    pools: Optional[list[float]] = None
    """Cluster masses instead of equal ones (a static prior, e.g. ecosystem §4.3), one per
    cluster, normalised; None: equal."""

    def __post_init__(self) -> None:
        self.hard = boolean("hard", self.hard)
        self.epsilon = fraction("epsilon", self.epsilon)
        if self.pools is not None:
            self.pools = [float(v) for v in self.pools]
            if not (all(math.isfinite(v) and v >= 0 for v in self.pools) and sum(self.pools) > 0):
                fail("pools", self.pools, "finite, >= 0 and not all 0")


class PlumeStaticSampler(EpsilonMixtureSampler):
    """Plume-Static: every cluster gets the same total probability (Eq. 2), ε-uniform mixed.

    ``memberships``: ``(n_traces, K)`` soft memberships (GMM posteriors) or one-hot rows, or 1-D
    integer labels; options: :class:`PlumeStaticConfig` (``pools`` must have one mass per
    cluster). ``clusters`` is the argmax label of each trace; :meth:`cluster_weights` the pools.
    """

    name = "plume_static"
    CONFIG = PlumeStaticConfig
    NEEDS = SamplerNeeds(inputs=("memberships",))

    def __init__(self, n_traces: int, rng: np.random.Generator, memberships: np.ndarray,
                 config: PlumeStaticConfig | None = None, **options: Any) -> None:
        super().__init__(n_traces, rng, config, **options)
        self.memberships = as_memberships(memberships, self.n_traces)
        self.n_clusters = self.memberships.shape[1]
        self.clusters = np.argmax(self.memberships, axis=1)
        self._pools = normalise_pools(self.config.pools, self.n_clusters)
        if self.config.hard:
            as_labels(self.clusters, self.n_clusters)  # every cluster must win some argmax
            self.set_prioritised(cluster_weights_hard(self.clusters, self._pools))
        else:
            self.set_prioritised(cluster_weights_soft(self.memberships, self._pools))

    def cluster_weights(self) -> np.ndarray:
        """Target mass per cluster of the prioritised distribution, shape ``(K,)``."""
        return self._pools.copy()
