"""The single-copy ``gymnasium.Env`` view of a batched trace-driven environment.

For interoperability (env_checker, SB3, code written for one environment), not for speed: it
is a batched env of one copy with ``autoreset`` off, so each step pays the batch's fixed cost.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from plume.sampling.base import TraceSampler
from plume.traces.traceset import TraceSet


class SingleCopyEnv(gym.Env):
    """One copy of ``vec`` (a batched env with ``last_step()``, ``trace_set``, ``sampler`` and
    a public ``autoreset`` flag). ``step`` returns the agent reward and Gymnasium's
    ``terminated`` / ``truncated``; ``info`` holds the step's ``last_step()`` components as
    floats and, on the final step, an ``episode`` dict. After an episode ends call
    ``reset()``. In test mode with the default sampler, successive ``reset()`` calls play
    traces 0, 1, 2, ... (``reset(seed=...)`` starts again at 0)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, vec) -> None:
        self.vec = vec
        vec.autoreset = False
        self.observation_space = vec.single_observation_space
        self.action_space = vec.single_action_space

    @property
    def trace_set(self) -> TraceSet:
        return self.vec.trace_set

    @property
    def sampler(self) -> TraceSampler:
        return self.vec.sampler

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.vec.reset(seed=seed, options=options)
        self._np_random = self.vec.np_random
        self._np_random_seed = self.vec.np_random_seed
        return obs[0], {"trace": int(info["trace"][0])}

    def step(self, action) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if isinstance(self.action_space, gym.spaces.Box):  # any real array of the right size
            action = np.asarray(action, dtype=self.action_space.dtype).reshape(
                self.action_space.shape)
        if not self.action_space.contains(action):
            raise ValueError(f"action must be in {self.action_space}, got {action!r}")
        obs, reward, terminated, truncated, infos = self.vec.step(np.asarray(action)[None])
        info: dict[str, Any] = {k: v[0].item() for k, v in self.vec.last_step().items()}
        if "episode" in infos:
            info["episode"] = {k: v[0].item() for k, v in infos["episode"].items()}
        return obs[0], float(reward[0]), bool(terminated[0]), bool(truncated[0]), info
