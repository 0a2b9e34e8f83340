"""Greedy evaluation: every trace of every test set played once, all traces of a set stepped
as one batch (so an evaluation point costs about one episode of wall time per test set)."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from plume.envs import TraceBenchVecEnv
from plume.sampling import TraceSampler
from plume.traces import TraceSet

Policy = Callable[[np.ndarray], np.ndarray]
EPISODE_FIELDS = ("return", "return_transformed", "quality", "stall", "length")


class Evaluator:
    """Holds one test-mode environment per test set and turns a policy into eval rows.

    ``clusters`` maps a test set to each of its traces' training cluster (from the stage 1-2
    analysis of the training set), recorded so results can be broken down by cluster."""

    def __init__(self, test_sets: dict[str, TraceSet],
                 clusters: dict[str, np.ndarray] | None = None, **env_kwargs) -> None:
        self.test_sets = test_sets
        self.clusters = clusters or {}
        self.envs = {
            name: TraceBenchVecEnv(traces, mode="test", **env_kwargs)
            for name, traces in test_sets.items()
        }

    def evaluate(self, policy: Policy, **columns) -> pd.DataFrame:
        """One row per (test set, trace) with the episode's return and its components;
        ``columns`` (progress, env_steps, ...) are repeated on every row."""
        frames = []
        for name, env in self.envs.items():
            traces = self.test_sets[name]
            results = play_every_trace_once(env, policy)
            frame = pd.DataFrame(
                {
                    "test_set": name,
                    "trace": np.arange(len(traces)),
                    "trace_id": traces.trace_ids,
                    "label": traces.labels if traces.labels is not None else None,
                    "cluster": self.clusters.get(name, pd.NA),
                    **results,
                }
            )
            frames.append(frame.assign(**columns))
        return pd.concat(frames, ignore_index=True)


def play_every_trace_once(env: TraceBenchVecEnv, policy: Policy) -> dict[str, np.ndarray]:
    """Step a test-mode env until each copy finished one episode; results indexed by trace."""
    n = len(env.trace_set)
    if env.num_envs != n:
        raise ValueError(f"a test env needs one copy per trace ({n}), has {env.num_envs}")
    results = {key: np.full(n, np.nan) for key in EPISODE_FIELDS}
    finished = np.zeros(n, dtype=bool)
    obs, _ = env.reset()
    for _ in range(4 * int(env.trace_set.lengths.max()) + 8):
        obs, _, terminated, truncated, info = env.step(policy(obs))
        if "_episode" in info:
            done = info["_episode"] & ~finished
            traces = info["episode"]["trace"][done]
            for key in EPISODE_FIELDS:
                results[key][traces] = info["episode"][key][done]
            finished[traces] = True
        if finished.all():
            return results
    raise RuntimeError(f"evaluation did not finish: {int((~finished).sum())} traces still running")


def sampler_weights(sampler: TraceSampler, labels: np.ndarray | None, draws_before: np.ndarray,
                    **columns) -> pd.DataFrame:
    """Probability mass and share of recent draws per ground-truth kind and per cluster."""
    probs = sampler.probabilities()
    recent = sampler.draws - draws_before
    total = max(int(recent.sum()), 1)
    rows = []
    groupings = {"label": labels, "cluster": sampler.clusters}
    for grouping, groups in groupings.items():
        if groups is None:
            continue
        groups = np.asarray(groups)
        for group in np.unique(groups):
            member = groups == group
            rows.append(
                {
                    "grouping": grouping,
                    "group": str(group),
                    "weight": float(probs[member].sum()),
                    "draw_share": float(recent[member].sum() / total),
                    "n_traces": int(member.sum()),
                    **columns,
                }
            )
    return pd.DataFrame(rows)
