"""DRL algorithms and networks. They receive environments, never traces or samplers.

``ALGORITHMS`` is the registry the harness builds learners from (``algo.name`` in the config):
each entry is an :class:`~plume.agents.base.Algorithm` subclass, whose ``CONFIG`` dataclass
checks the ``algo`` section. Adding an algorithm = its module, its ``conf/algo/*.yaml`` and
one line here.
"""

from plume.agents.a2c import A2C, A2CConfig
from plume.agents.base import Algorithm
from plume.agents.dqn import DQN, DQNConfig
from plume.agents.networks import ActorCritic, mlp
from plume.agents.on_policy import compute_gae
from plume.agents.ppo import PPO, PPOConfig

ALGORITHMS: dict[str, type[Algorithm]] = {"ppo": PPO, "a2c": A2C, "dqn": DQN}

__all__ = ["A2C", "ALGORITHMS", "DQN", "PPO", "A2CConfig", "ActorCritic", "Algorithm",
           "DQNConfig", "PPOConfig", "compute_gae", "mlp"]
