"""Build the configured trace sampler, with what it needs from the dataset and its analysis.

Samplers take plain arrays (``TraceSampler.inputs``): cluster ``memberships`` and trace
``features`` come from Plume's stage 1-2 analysis (cached per dataset content and settings, so
a sweep analyses once), ``mean_throughput`` from the traces themselves.

Samplers that score episodes with learner statistics (PLR's value-L1: the mean absolute GAE
advantage of an episode) get them through :class:`LearnerStatsBridge`, which keeps the DRL
algorithm ignorant of traces: the environment reports finished episodes to a stand-in sampler
that holds them back; after each rollout the bridge pairs them with the rollout's advantages
and passes them on with ``value_l1``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.vector import VectorWrapper

from plume.sampling import SAMPLERS, TraceSampler
from plume.traces import TraceSet

DATA_INPUTS = ("memberships", "features", "mean_throughput")
"""Constructor arguments a harness supplies from data, never from the config."""


def run_analysis(traces: TraceSet, settings, cache_dir: str | Path):
    """Plume stages 1-2 on ``traces``, reusing the on-disk cache when it has the result."""
    import logging

    from plume.analysis import analyze

    result = analyze(traces, settings, cache_dir=Path(cache_dir))
    logging.getLogger("plume").info(
        "stage 1-2 on %s: k=%d clusters of sizes %s, %d kept features (%s)",
        traces.name, result.k, result.cluster_sizes.tolist(), len(result.kept),
        "from cache" if result.from_cache else f"{sum(result.timings.values()):.1f} s",
    )
    return result


def build_sampler(
    name: str,
    params: dict[str, Any],
    traces: TraceSet,
    rng: np.random.Generator,
    analysis=None,
) -> TraceSampler:
    """``SAMPLERS[name]`` for ``traces``; ``analysis`` (a TraceAnalysis) when it needs one."""
    cls = SAMPLERS[name]
    inputs: dict[str, Any] = {}
    for key in getattr(cls, "inputs", ()):
        if key == "mean_throughput":
            inputs[key] = traces.mean_bandwidth()
        elif analysis is None:
            raise ValueError(f"sampler {name!r} needs Plume's trace analysis ({key})")
        elif key == "memberships":
            inputs[key] = analysis.memberships
        elif key == "features":
            inputs[key] = analysis.standardized
    sampler = cls(len(traces), rng, **inputs, **params)
    if sampler.clusters is None and analysis is not None:
        sampler.clusters = analysis.labels
    return sampler


class LearnerStatsBridge:
    """Delivers finished episodes to ``sampler`` with their learner scores (see module doc):
    ``value_l1`` = mean |advantage| and ``positive_value_loss`` = mean max(advantage, 0)
    over the episode's steps.

    Use: give the environment ``bridge.stand_in`` as its sampler, let the agent step
    ``bridge.wrap(env)``, and call ``bridge.flush(advantages)`` with each rollout's
    ``(n_steps, num_envs)`` advantages once they are computed.
    """

    def __init__(self, sampler: TraceSampler, num_envs: int) -> None:
        self.sampler = sampler
        self.stand_in = _DeferredSampler(sampler, self)
        self._reported: list[tuple[int, np.ndarray]] = []  # during the current env step
        self._steps: list[list[tuple[int, int, np.ndarray]]] = []  # (copy, trace, rewards)
        self._abs_advantage = np.zeros(num_envs)
        self._positive_advantage = np.zeros(num_envs)
        self._steps_in_episode = np.zeros(num_envs)

    def wrap(self, env) -> VectorWrapper:
        return _EpisodeRecorder(env, self)

    def _end_step(self, done: np.ndarray) -> None:
        ended = np.flatnonzero(done)
        if len(ended) != len(self._reported):
            raise RuntimeError(
                f"{len(ended)} episodes ended but {len(self._reported)} were reported to the sampler"
            )
        self._steps.append(
            [(int(copy), trace, rewards) for copy, (trace, rewards) in zip(ended, self._reported)]
        )
        self._reported = []

    def flush(self, advantages: np.ndarray) -> int:
        """Score and deliver the episodes that ended during the rollout; returns how many."""
        advantages = np.asarray(advantages, dtype=np.float64)
        if advantages.shape[0] != len(self._steps):
            raise RuntimeError(
                f"advantages cover {advantages.shape[0]} steps, the bridge recorded "
                f"{len(self._steps)}"
            )
        delivered = 0
        for t, ended in enumerate(self._steps):
            self._abs_advantage += np.abs(advantages[t])
            self._positive_advantage += np.maximum(advantages[t], 0.0)
            self._steps_in_episode += 1
            for copy, trace, rewards in ended:
                steps = self._steps_in_episode[copy]
                self.sampler.update(
                    trace,
                    rewards,
                    value_l1=float(self._abs_advantage[copy] / steps),
                    positive_value_loss=float(self._positive_advantage[copy] / steps),
                )
                self._abs_advantage[copy] = 0.0
                self._positive_advantage[copy] = 0.0
                self._steps_in_episode[copy] = 0
                delivered += 1
        self._steps = []
        return delivered


class _DeferredSampler(TraceSampler):
    """Draws from the real sampler; holds episode reports back for the bridge."""

    def __init__(self, sampler: TraceSampler, bridge: LearnerStatsBridge) -> None:
        # No super().__init__: counters and state live in the real sampler.
        self._inner = sampler
        self._bridge = bridge
        self.name = sampler.name

    def __getattr__(self, attr: str):
        return getattr(self._inner, attr)

    def sample(self) -> int:
        return self._inner.sample()

    def sample_many(self, count: int) -> np.ndarray:
        return self._inner.sample_many(count)

    def update(self, trace_index: int, rewards: np.ndarray, **learner_stats: Any) -> None:
        self._bridge._reported.append((int(trace_index), np.asarray(rewards)))

    def probabilities(self) -> np.ndarray:
        return self._inner.probabilities()


class _EpisodeRecorder(VectorWrapper):
    """Tells the bridge which copies finished at each step (the agent steps this)."""

    def __init__(self, env, bridge: LearnerStatsBridge) -> None:
        super().__init__(env)
        self._bridge = bridge

    def reset(self, **kwargs):
        self._bridge._reported = []
        return self.env.reset(**kwargs)

    def step(self, actions):
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        self._bridge._end_step(np.logical_or(terminated, truncated))
        return obs, rewards, terminated, truncated, infos
