"""Environments: one package per environment, each registering an EnvSpec (registry.py).

What an environment of one's own needs is importable from here: the contract (``EnvSpec``,
``Metric``, ``Score``, ``Anchors``) and the batched base class ``TraceVecEnv``."""

from plume.envs.registry import Anchors, EnvSpec, Metric, Score
from plume.envs.tracebench.env import TraceBenchEnv, TraceBenchVecEnv, transform_reward
from plume.envs.vector import TraceVecEnv

__all__ = ["Anchors", "EnvSpec", "Metric", "Score", "TraceBenchEnv", "TraceBenchVecEnv",
           "TraceVecEnv", "transform_reward"]
