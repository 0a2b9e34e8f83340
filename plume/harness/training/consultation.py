"""Samplers that judge the current policy (Genet's gap to a rule-based baseline): the harness,
not the algorithm, evaluates the policy on the training traces the sampler names.

Every sampler has ``evaluation_every`` (env steps between rounds: its
``needs(config).policy_every``, 0 for none), ``evaluation_traces() -> trace indices`` and
``observe_policy(traces, scores)`` (no-ops on the TraceSampler base). For a sampler that
consults the policy, the training loop stops ``learn`` at every multiple of
``evaluation_every``, plays the greedy policy once on each named training trace in test mode
(the evaluator's loop, the env's score: exactly how the baseline's per-trace scores were
computed) and hands the scores to the sampler. The algorithm never sees traces, and the rounds
fall on the same env steps after a resume. The rounds' own env steps (``steps``: the lengths
of the episodes played) are the sampler's scoring cost, which the report adds to the training
steps to compare methods at equal compute.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from plume.envs.registry import EnvSpec
from plume.harness.training.evaluation import Evaluator, Policy
from plume.traces import TraceSet


class PolicyConsultation:
    """The rounds of one job: when they are due, what they cost, what the sampler chose."""

    def __init__(self, sampler, spec: EnvSpec, params: Any, traces: TraceSet,
                 env_steps: int = 0) -> None:
        self.sampler, self.spec, self.params, self.traces = sampler, spec, params, traces
        self.every = int(sampler.evaluation_every)
        self.rounds = self.round_of(env_steps)
        self.seconds = 0.0  # wall time of the rounds' evaluations
        self.steps = 0  # env steps of the rounds' evaluations (the episodes' lengths)

    def round_of(self, env_steps: int) -> int:
        return int(env_steps) // self.every if self.every else 0

    def next_stop(self, target: int) -> int:
        """Where ``learn`` should stop next on its way to ``target``."""
        return min(int(target), (self.rounds + 1) * self.every) if self.every else int(target)

    def due(self, env_steps: int) -> bool:
        return self.round_of(env_steps) > self.rounds

    def consult(self, policy: Policy, env_steps: int) -> dict[str, Any]:
        """One round: the policy's score on the sampler's traces, passed to the sampler;
        returns what to log."""
        started = time.time()
        indices = np.asarray(self.sampler.evaluation_traces(), dtype=np.int64)
        subset = self.traces.subset(indices, name=f"{self.traces.name}/consulted")
        evaluator = Evaluator(self.spec, {subset.name: subset}, self.params)
        played = evaluator.evaluate_set(subset.name, policy)
        scores = played["score"].to_numpy(np.float64)
        chosen = self.sampler.observe_policy(indices, scores)
        elapsed = time.time() - started
        self.seconds += elapsed
        self.steps += int(played["length"].sum())
        self.rounds = self.round_of(env_steps)
        return {"sampler/round": self.rounds, "sampler/round_traces": len(indices),
                "sampler/round_score": float(np.nanmean(scores)),
                "sampler/round_chosen": -1 if chosen is None else int(chosen),
                "sampler/round_seconds": elapsed, "sampler/scoring_steps": self.steps}
