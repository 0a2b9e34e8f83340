"""Greedy evaluation: every trace of every test set played once, all traces of a set stepped
as one batch (so an evaluation point costs about one episode of wall time per test set).

The environment is built and read only through its EnvSpec: ``make(..., mode="test")`` and
the episode fields and score the spec names. Learned policies and classic controllers are
evaluated by the same loop; :func:`evaluate_policy` is the public entry point for any policy
(e.g. an SB3 model through ``plume.envs.sb3.sb3_policy``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

from plume.envs.registry import EnvSpec, get_env
from plume.harness.config.datasets import make_env
from plume.sampling import TraceSampler
from plume.traces import TraceSet

Policy = Callable[[np.ndarray], np.ndarray]
"""A policy maps a batch of observations to a batch of actions. A classic controller that needs
the simulator's state beyond the observation (CC's oracle rate reads the link's bandwidth)
is instead an object with ``bind(env) -> Policy`` (EnvSpec.controllers): the evaluator binds it
to each test env before playing, and the env offers that state through public methods."""
MAX_EVAL_STEPS = 1_000_000
"""Batched steps after which an evaluation that has not finished every trace is an error."""


class Evaluator:
    """Holds one test-mode environment per test set and turns a policy into eval rows.

    ``clusters`` maps a test set to each of its traces' training cluster (from the stage 1-2
    analysis of the training set), recorded so results can be broken down by cluster."""

    def __init__(self, spec: EnvSpec, test_sets: dict[str, TraceSet], params: Any,
                 clusters: dict[str, np.ndarray] | None = None) -> None:
        self.spec = spec
        self.test_sets = test_sets
        self.clusters = clusters or {}
        self.envs = {
            name: make_env(spec, traces, None, None, mode="test", seed=None, params=params)
            for name, traces in test_sets.items()
        }

    def evaluate(self, policy: Policy, **columns) -> pd.DataFrame:
        """One row per (test set, trace) with the episode's fields and score; ``columns``
        (progress, env_steps, ...) are repeated on every row."""
        frames = [self.evaluate_set(name, policy).assign(**columns) for name in self.envs]
        return pd.concat(frames, ignore_index=True)

    def evaluate_set(self, name: str, policy: Policy) -> pd.DataFrame:
        """The rows of test set ``name`` alone (its test-mode env is reused)."""
        traces = self.test_sets[name]
        fields = [m.name for m in self.spec.episode_fields]
        episodes = play_every_trace_once(self.envs[name], policy, fields)
        return pd.DataFrame(
            {
                "test_set": name,
                "trace": np.arange(len(traces)),
                "trace_id": traces.trace_ids,
                "label": traces.labels if traces.labels is not None else None,
                "cluster": self.clusters.get(name, pd.NA),
                **self.spec.episode_columns(episodes),
            }
        )


def evaluate_policy(
    policy: Policy,
    env: str | EnvSpec,
    test_sets: dict[str, TraceSet],
    params: Any = None,
    clusters: dict[str, np.ndarray] | None = None,
    progress: float = 1.0,
    env_steps: int = 0,
) -> pd.DataFrame:
    """Play every trace of every test set once with ``policy``; the eval table ``plume-train``
    writes (``eval.parquet``: same columns, same values for the same policy).

    Args:
        policy: any callable ``obs batch (n, obs_dim) -> actions (n,)``, called with all the
            traces of a test set at once and expected to be greedy (deterministic) for a
            reproducible table; an SB3 model: ``plume.envs.sb3.sb3_policy(model)``.
        env: an environment name (``plume.envs.registry.get_env``) or its EnvSpec.
        test_sets: test-set name -> TraceSet (e.g. ``{"majority_slow":
            spec.load_builtin("majority_slow", "test")}``).
        params: the environment's parameters (``spec.params`` instance; default: its
            defaults). Use the training parameters: the score depends on them.
        clusters: test-set name -> each trace's training cluster (``TraceAnalysis.assign``),
            written to the ``cluster`` column (``<NA>`` without it).
        progress, env_steps: written to every row, as the harness does at each evaluation.

    Returns one row per (test set, trace): ``test_set``, ``trace``, ``trace_id``, ``label``,
    ``cluster``, the spec's episode fields, ``score``, ``progress``, ``env_steps``.
    :func:`eval_scores` gives the per-set means.
    """
    spec = env if isinstance(env, EnvSpec) else get_env(env)
    params = spec.params() if params is None else params
    evaluator = Evaluator(spec, test_sets, params, clusters)
    return evaluator.evaluate(policy, progress=progress, env_steps=env_steps)


def eval_scores(frame: pd.DataFrame) -> dict[str, float]:
    """Mean score and episode return, per test set and per ground-truth kind (what runs log
    and put in their summary)."""
    scores: dict[str, float] = {}
    for test_set, rows in frame.groupby("test_set"):
        scores[f"eval/{test_set}/return"] = float(rows["return"].mean())
        scores[f"eval/{test_set}/score"] = float(rows["score"].mean())
        if rows["label"].notna().all():
            for label, kind in rows.groupby("label"):
                scores[f"eval/{test_set}/{label}/score"] = float(kind["score"].mean())
    return scores


def play_every_trace_once(env, policy: Policy, fields: list[str]) -> dict[str, np.ndarray]:
    """Step a test-mode env until each copy finished one episode; ``fields`` of
    ``info["episode"]`` indexed by trace."""
    n = len(env.trace_set)
    if env.num_envs != n:
        raise ValueError(f"a test env needs one copy per trace ({n}), has {env.num_envs}")
    results = {key: np.full(n, np.nan) for key in fields}
    finished = np.zeros(n, dtype=bool)
    if hasattr(policy, "bind"):
        policy = policy.bind(env)
    obs, _ = env.reset()
    for _ in range(MAX_EVAL_STEPS):
        obs, _, terminated, truncated, info = env.step(policy(obs))
        if "_episode" in info:
            done = info["_episode"] & ~finished
            traces = info["episode"]["trace"][done]
            for key in fields:
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
