"""Trace samplers: the TraceSampler contract, its implementations and their registry.

One family per module: ``base`` (the contract, uniform, sequential), ``mixture`` (the
ε-mixture draw most samplers share), ``plume_static``, ``plume_dynamic`` (with Trace-Error),
``clusters`` (cluster-uniform, two-class), ``peers`` (PLR, worst-case), ``genet``,
``curriculum`` (CL2), ``progress`` (TSCL); ``inputs`` declares the kinds of per-trace array a
sampler can take, ``checks`` the argument checks they share (``plume.checks``) and
``registry`` the name -> class table (``register_sampler`` adds a user's own).
"""

from plume.sampling.base import (
    SAMPLER_INPUTS,
    ConfigField,
    NoConfig,
    SamplerNeeds,
    SequentialSampler,
    TraceSampler,
    UniformSampler,
)
from plume.sampling.clusters import ClusterUniformSampler, TwoClassSampler
from plume.sampling.curriculum import DifficultyCurriculumSampler
from plume.sampling.genet import GenetSampler
from plume.sampling.inputs import INPUT_KINDS, InputKind
from plume.sampling.mixture import EpsilonMixtureSampler
from plume.sampling.peers import PrioritizedLevelReplaySampler, WorstCaseSampler
from plume.sampling.plume_dynamic import PlumeDynamicSampler, TraceErrorSampler
from plume.sampling.plume_static import PlumeStaticSampler
from plume.sampling.progress import LearningProgressSampler
from plume.sampling.registry import (
    SAMPLERS,
    import_sampler_package,
    register_sampler,
    sampler_defaults,
)
from plume.sampling.weights import cluster_weights_hard, cluster_weights_soft

for _cls in (UniformSampler, PlumeStaticSampler, PlumeDynamicSampler, TraceErrorSampler,
             ClusterUniformSampler, TwoClassSampler, PrioritizedLevelReplaySampler,
             WorstCaseSampler, GenetSampler, DifficultyCurriculumSampler,
             LearningProgressSampler):
    register_sampler(_cls)
del _cls

__all__ = [
    "INPUT_KINDS",
    "SAMPLERS",
    "SAMPLER_INPUTS",
    "ClusterUniformSampler",
    "ConfigField",
    "DifficultyCurriculumSampler",
    "EpsilonMixtureSampler",
    "GenetSampler",
    "InputKind",
    "LearningProgressSampler",
    "NoConfig",
    "PlumeDynamicSampler",
    "PlumeStaticSampler",
    "PrioritizedLevelReplaySampler",
    "SamplerNeeds",
    "SequentialSampler",
    "TraceErrorSampler",
    "TraceSampler",
    "TwoClassSampler",
    "UniformSampler",
    "WorstCaseSampler",
    "cluster_weights_hard",
    "cluster_weights_soft",
    "import_sampler_package",
    "register_sampler",
    "sampler_defaults",
]
