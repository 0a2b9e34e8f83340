"""Batched numpy simulators with the Gymnasium vector API, and single-copy views."""

from plume.envs.tracebench import TraceBenchEnv, TraceBenchVecEnv, transform_reward

__all__ = ["TraceBenchEnv", "TraceBenchVecEnv", "transform_reward"]
