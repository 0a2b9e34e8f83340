"""TraceBench: Plume's controlled ABR environment (simulator in env.py)."""

from plume.envs.tracebench.env import TraceBenchEnv, TraceBenchVecEnv, transform_reward

__all__ = ["TraceBenchEnv", "TraceBenchVecEnv", "transform_reward"]
