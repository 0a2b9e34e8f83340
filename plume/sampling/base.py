"""The TraceSampler contract: which trace an environment copy replays next.

The environment calls :meth:`TraceSampler.sample_many` whenever copies start new episodes and
:meth:`TraceSampler.update` when a training episode ends. The DRL algorithm never sees the
sampler: that is Plume's "no change to the DRL workflow".
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np


class TraceSampler(ABC):
    """Base class of all samplers; owns its random generator and per-trace counters.

    Subclasses implement :meth:`sample` (and, for speed, :meth:`sample_many`) and
    :meth:`probabilities`; stateful ones extend :meth:`update`, :meth:`state_dict` and
    :meth:`load_state_dict`. ``clusters`` is a per-trace cluster id, or None for samplers
    that do not group traces; the harness logs weights per cluster from it.

    Samplers must stay picklable and deep-copyable (no modules or open resources as
    attributes): a copy, e.g. the one each ``SubprocVecEnv`` worker receives, continues with
    the same draws and probabilities as the original.
    """

    name: str = "base"
    inputs: tuple[str, ...] = ()
    """Per-trace arrays the constructor needs after ``rng`` (e.g. ``memberships``)."""

    def __init__(self, n_traces: int, rng: np.random.Generator) -> None:
        if int(n_traces) < 1:
            raise ValueError(f"{type(self).__name__} needs at least one trace, got {n_traces}")
        self.n_traces = int(n_traces)
        self.rng = rng
        self.draws = np.zeros(self.n_traces, dtype=np.int64)
        self.episodes = np.zeros(self.n_traces, dtype=np.int64)
        self.clusters: np.ndarray | None = None

    @classmethod
    def needs_learner_signal(cls, **params: Any) -> bool:
        """Whether this sampler, built with ``params``, scores episodes with the algorithm's
        learner signal (``update(..., value_l1=..., positive_value_loss=...)``)."""
        return False

    @abstractmethod
    def sample(self) -> int:
        """Index of the trace the next episode replays."""

    def sample_many(self, count: int) -> np.ndarray:
        """``count`` independent draws; override with a vectorised version where possible."""
        return np.fromiter((self.sample() for _ in range(count)), dtype=np.int64, count=count)

    def update(self, trace_index: int, rewards: np.ndarray, **learner_stats: Any) -> None:
        """Record a finished training episode: its trace and per-step rewards."""
        self.episodes[trace_index] += 1

    @abstractmethod
    def probabilities(self) -> np.ndarray:
        """Current probability of drawing each trace, shape (n_traces,), summing to 1."""

    def state_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rng": self.rng.bit_generator.state,
            "draws": self.draws.copy(),
            "episodes": self.episodes.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("name") != self.name:
            raise ValueError(f"state of sampler {state.get('name')!r} given to {self.name!r}")
        self.rng.bit_generator.state = state["rng"]
        self.draws[:] = state["draws"]
        self.episodes[:] = state["episodes"]


class UniformSampler(TraceSampler):
    """Every trace equally likely: the "domain randomisation" default of Pensieve and Plume."""

    name = "uniform"

    def sample(self) -> int:
        index = int(self.rng.integers(self.n_traces))
        self.draws[index] += 1
        return index

    def sample_many(self, count: int) -> np.ndarray:
        indices = self.rng.integers(self.n_traces, size=count)
        np.add.at(self.draws, indices, 1)
        return indices

    def probabilities(self) -> np.ndarray:
        return np.full(self.n_traces, 1.0 / self.n_traces)


class SequentialSampler(TraceSampler):
    """Traces 0, 1, 2, ... in order, wrapping around: test mode plays every trace once."""

    name = "sequential"

    def __init__(self, n_traces: int, rng: np.random.Generator | None = None) -> None:
        super().__init__(n_traces, rng if rng is not None else np.random.default_rng(0))
        self._next = 0

    def sample(self) -> int:
        return int(self.sample_many(1)[0])

    def sample_many(self, count: int) -> np.ndarray:
        indices = (self._next + np.arange(count)) % self.n_traces
        self._next = int((self._next + count) % self.n_traces)
        np.add.at(self.draws, indices, 1)
        return indices

    def probabilities(self) -> np.ndarray:
        probs = np.zeros(self.n_traces)
        probs[self._next] = 1.0
        return probs

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "next": self._next}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._next = int(state["next"])
