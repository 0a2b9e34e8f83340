"""Trace samplers: the TraceSampler contract and its implementations."""

from plume.sampling.base import SequentialSampler, TraceSampler, UniformSampler
from plume.sampling.curriculum import DifficultyCurriculumSampler
from plume.sampling.genet import GenetSampler
from plume.sampling.peers import PrioritizedLevelReplaySampler, WorstCaseSampler
from plume.sampling.plume import (
    ClusterUniformSampler,
    EpsilonMixtureSampler,
    PlumeDynamicSampler,
    PlumeStaticSampler,
    TraceErrorSampler,
    TwoClassSampler,
)
from plume.sampling.progress import LearningProgressSampler
from plume.sampling.weights import cluster_weights_hard, cluster_weights_soft

SAMPLERS: dict[str, type[TraceSampler]] = {
    UniformSampler.name: UniformSampler,
    PlumeStaticSampler.name: PlumeStaticSampler,
    PlumeDynamicSampler.name: PlumeDynamicSampler,
    TraceErrorSampler.name: TraceErrorSampler,
    ClusterUniformSampler.name: ClusterUniformSampler,
    TwoClassSampler.name: TwoClassSampler,
    PrioritizedLevelReplaySampler.name: PrioritizedLevelReplaySampler,
    WorstCaseSampler.name: WorstCaseSampler,
    GenetSampler.name: GenetSampler,
    DifficultyCurriculumSampler.name: DifficultyCurriculumSampler,
    LearningProgressSampler.name: LearningProgressSampler,
}
"""Samplers selectable by name from a config (``sampler.name``)."""

__all__ = [
    "SAMPLERS",
    "ClusterUniformSampler",
    "DifficultyCurriculumSampler",
    "EpsilonMixtureSampler",
    "GenetSampler",
    "LearningProgressSampler",
    "PlumeDynamicSampler",
    "PlumeStaticSampler",
    "PrioritizedLevelReplaySampler",
    "SequentialSampler",
    "TraceErrorSampler",
    "TraceSampler",
    "TwoClassSampler",
    "UniformSampler",
    "WorstCaseSampler",
    "cluster_weights_hard",
    "cluster_weights_soft",
]
