"""DRL algorithms and networks. They receive environments, never traces or samplers."""

from plume.agents.networks import ActorCritic, mlp
from plume.agents.ppo import PPO, PPOConfig, compute_gae

__all__ = ["PPO", "ActorCritic", "PPOConfig", "compute_gae", "mlp"]
