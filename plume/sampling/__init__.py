"""Trace samplers: the TraceSampler contract and its implementations."""

from plume.sampling.base import SequentialSampler, TraceSampler, UniformSampler

SAMPLERS: dict[str, type[TraceSampler]] = {
    UniformSampler.name: UniformSampler,
}
"""Samplers selectable by name from a config (``sampler.name``)."""

__all__ = ["SAMPLERS", "SequentialSampler", "TraceSampler", "UniformSampler"]
