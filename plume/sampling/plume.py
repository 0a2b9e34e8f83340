"""Former home of Plume's samplers, kept so that ``from plume.sampling.plume import ...`` still
works: each now lives in the module named for what it holds (``mixture``, ``plume_static``,
``plume_dynamic``, ``clusters``)."""

from plume.sampling.clusters import ClusterUniformSampler, TwoClassSampler
from plume.sampling.mixture import EpsilonMixtureSampler
from plume.sampling.plume_dynamic import (
    PlumeDynamicSampler,
    TraceErrorSampler,
    standardise_features,
)
from plume.sampling.plume_static import PlumeStaticSampler

__all__ = [
    "ClusterUniformSampler",
    "EpsilonMixtureSampler",
    "PlumeDynamicSampler",
    "PlumeStaticSampler",
    "TraceErrorSampler",
    "TwoClassSampler",
    "standardise_features",
]
