"""Environments: one package per environment, each registering an EnvSpec (registry.py)."""

from plume.envs.tracebench.env import TraceBenchEnv, TraceBenchVecEnv, transform_reward

__all__ = ["TraceBenchEnv", "TraceBenchVecEnv", "transform_reward"]
