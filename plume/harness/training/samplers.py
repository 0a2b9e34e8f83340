"""Build the configured trace sampler, with what it needs from the dataset and its analysis.

Samplers take plain arrays (``NEEDS.inputs`` of their class), each of a kind that
``plume.sampling.inputs.INPUT_KINDS`` declares with its source: Plume's stage 1-2 analysis
(cached per dataset content and settings, so a sweep analyses once), the traces themselves, or
the env's classic controllers scored on every training trace. Nothing here names a kind.

Samplers that score episodes with a learner signal (PLR's value-L1: the mean absolute GAE
advantage, or TD error, over an episode's steps) get it through :class:`EpisodeSignals`, which
keeps the DRL algorithm ignorant of traces: the environment reports finished episodes to
:class:`DeferredUpdates`, which holds them back; once the algorithm's ``learner_signal`` covers
an episode's steps, its scores are passed on with the report.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from plume.analysis import analyze
from plume.sampling import INPUT_KINDS, SAMPLERS, TraceSampler
from plume.traces import TraceSet


def run_analysis(traces: TraceSet, settings, cache_dir: str | Path):
    """Plume stages 1-2 on ``traces``, reusing the on-disk cache when it has the result."""
    import logging


    result = analyze(traces, settings, cache_dir=Path(cache_dir))
    logging.getLogger("plume").info(
        "stage 1-2 on %s: k=%d clusters of sizes %s, %d kept features (%s)",
        traces.name, result.k, result.cluster_sizes.tolist(), len(result.kept),
        "from cache" if result.from_cache else f"{sum(result.timings.values()):.1f} s",
    )
    return result


def build_sampler(
    name: str,
    config: Any,
    traces: TraceSet,
    rng: np.random.Generator,
    analysis=None,
    controllers: dict[str, list[str]] | None = None,
    trace_scores: Callable[[str], np.ndarray] | None = None,
) -> TraceSampler:
    """``SAMPLERS[name]`` built with ``config`` (its CONFIG instance, or its options as a
    mapping) for ``traces``; ``analysis`` (a TraceAnalysis) when it needs one; ``controllers``
    (:func:`sampler_controllers`) and ``trace_scores`` (a controller's score on each of
    ``traces``) when it takes controller scores."""
    cls = SAMPLERS[name]
    if isinstance(config, Mapping):
        config = cls.configure(**config)
    inputs: dict[str, Any] = {}
    for key in cls.needs(config).inputs:
        kind = INPUT_KINDS[key]
        if kind.source == "controllers":
            if trace_scores is None or not (controllers or {}).get(key):
                raise ValueError(f"sampler {name!r} needs classic controllers' scores ({key})")
            inputs[key] = np.nanmax([trace_scores(c) for c in controllers[key]], axis=0)
        elif kind.source == "traces":
            inputs[key] = kind.read(traces)
        elif analysis is None:
            raise ValueError(f"sampler {name!r} needs Plume's trace analysis ({key})")
        else:
            inputs[key] = kind.read(analysis)
    sampler = cls(len(traces), rng, config=config, **inputs)
    if sampler.clusters is None and analysis is not None:
        sampler.clusters = analysis.labels
    return sampler


class DeferredUpdates(TraceSampler):
    """The environment's view of a sampler whose episode reports wait for learner scores:
    draws go straight to ``sampler``; reports queue until :meth:`take` collects them."""

    def __init__(self, sampler: TraceSampler) -> None:
        # No super().__init__: counters and state live in the real sampler.
        self.sampler = sampler
        self.name = sampler.name
        self.n_traces = sampler.n_traces
        self.queued: list[tuple[int, np.ndarray]] = []

    def sample(self) -> int:
        return self.sampler.sample()

    def sample_many(self, count: int) -> np.ndarray:
        return self.sampler.sample_many(count)

    def update(self, trace_index: int, rewards: np.ndarray, **learner_stats: Any) -> None:
        self.queued.append((int(trace_index), np.asarray(rewards)))

    def probabilities(self) -> np.ndarray:
        return self.sampler.probabilities()

    def take(self) -> list[tuple[int, np.ndarray]]:
        """The reports queued since the last call, in the order the environment made them."""
        taken, self.queued = self.queued, []
        return taken


class EpisodeSignals:
    """Pairs finished training episodes with an algorithm's per-transition learner signal and
    delivers them to ``sampler`` with ``value_l1`` = mean |signal| and
    ``positive_value_loss`` = mean max(signal, 0) over the episode's steps.

    Give the environment ``deferred`` as its sampler; call :meth:`record_step` with each
    step's done mask (the environment reports finished copies in ascending order) and
    :meth:`deliver` with whatever ``learner_signal()`` returned: ``(T, num_envs)`` rows for the
    oldest recorded steps not scored yet (T may be 0 or lag behind the steps).
    """

    def __init__(self, sampler: TraceSampler, num_envs: int) -> None:
        self.sampler = sampler
        self.deferred = DeferredUpdates(sampler)
        self._unscored: deque[list[tuple[int, int, np.ndarray]]] = deque()
        self._abs = np.zeros(num_envs)
        self._positive = np.zeros(num_envs)
        self._steps = np.zeros(num_envs)

    @property
    def pending_steps(self) -> int:
        """Recorded steps whose signal has not arrived yet."""
        return len(self._unscored)

    def record_step(self, done: np.ndarray) -> None:
        ended = np.flatnonzero(done)
        reported = self.deferred.take()
        if len(ended) != len(reported):
            raise RuntimeError(f"{len(ended)} episodes ended but {len(reported)} were reported "
                               "to the sampler")
        self._unscored.append([(int(copy), trace, rewards)
                               for copy, (trace, rewards) in zip(ended, reported)])

    def restart(self) -> None:
        """The environment was reset: running episodes are dropped (never reported)."""
        if self._unscored:
            raise RuntimeError(f"environment reset with {len(self._unscored)} steps still "
                               "waiting for their learner signal")
        self._abs[:] = self._positive[:] = self._steps[:] = 0.0

    def deliver(self, signal: np.ndarray) -> int:
        """Score the oldest recorded steps with ``signal``; returns the episodes delivered."""
        signal = np.asarray(signal, dtype=np.float64)
        if signal.shape[0] > len(self._unscored):
            raise RuntimeError(f"the learner signal covers {signal.shape[0]} steps, only "
                               f"{len(self._unscored)} were recorded")
        delivered = 0
        for row in signal:
            self._abs += np.abs(row)
            self._positive += np.maximum(row, 0.0)
            self._steps += 1
            for copy, trace, rewards in self._unscored.popleft():
                steps = self._steps[copy]
                self.sampler.update(trace, rewards,
                                    value_l1=float(self._abs[copy] / steps),
                                    positive_value_loss=float(self._positive[copy] / steps))
                self._abs[copy] = self._positive[copy] = self._steps[copy] = 0.0
                delivered += 1
        return delivered


SignalSource = Callable[[], np.ndarray]
