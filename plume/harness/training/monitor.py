"""The harness's view into training while the algorithm steps the environment.

The algorithm only sees a Gymnasium vector env; the harness wraps the training env in
:class:`TrainingMonitor` to count environment steps, keep the latest training return for
progress lines, notify an observer after every step (sampler recomputes, progress output on
long ``learn`` calls) and, for samplers that want a learner signal, route the algorithm's
``learner_signal()`` to the episodes it scores (:class:`~plume.harness.training.samplers.EpisodeSignals`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from gymnasium.vector import VectorWrapper

from plume.harness.training.samplers import EpisodeSignals


class TrainingMonitor(VectorWrapper):
    """Wraps the training env the algorithm steps (see the module docstring).

    ``env_steps`` starts at ``env_steps`` (a resumed job's count) and grows by ``num_envs``
    per ``step``; ``observer(env_steps)`` runs after each step. With ``signals``, call
    :meth:`connect` with the algorithm's ``learner_signal`` before training: the signal is
    polled before every step and by :meth:`deliver_signals`.
    """

    def __init__(self, env, env_steps: int = 0, signals: EpisodeSignals | None = None,
                 observer: Callable[[int], None] | None = None) -> None:
        super().__init__(env)
        self.env_steps = int(env_steps)
        self.signals = signals
        self.observer = observer
        self.last_return: float | None = None
        self._signal_source: Callable[[], np.ndarray] | None = None

    def observe(self, observer: Callable[[int], None]) -> None:
        """Call ``observer(env_steps)`` after every step (the training loop's progress)."""
        self.observer = observer

    def connect(self, learner_signal: Callable[[], np.ndarray]) -> None:
        self._signal_source = learner_signal

    def deliver_signals(self) -> int:
        """Pass the learner signal that arrived so far to the sampler; episodes delivered."""
        if self.signals is None:
            return 0
        if self._signal_source is None:
            raise RuntimeError("TrainingMonitor.connect(agent.learner_signal) was not called")
        return self.signals.deliver(self._signal_source())

    def reset(self, **kwargs):
        if self.signals is not None:
            self.deliver_signals()
            self.signals.restart()
        return self.env.reset(**kwargs)

    def step(self, actions):
        self.deliver_signals()
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        self.env_steps += self.num_envs
        done = np.logical_or(terminated, truncated)
        if self.signals is not None:
            self.signals.record_step(done)
        if "_episode" in infos and done.any():
            self.last_return = float(np.mean(infos["episode"]["return"][infos["_episode"]]))
        if self.observer is not None:
            self.observer(self.env_steps)
        return obs, rewards, terminated, truncated, infos
