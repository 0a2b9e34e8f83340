"""A trace sampler's life in one training job, in one harness object.

The sampler draws for the environment and hears about finished episodes through it; everything
else the harness does for a sampler happens here: building it from the job (its data inputs
from the analysis, the traces or classic controllers), routing the algorithm's learner signal
to the episodes it scores (:class:`~plume.harness.training.samplers.EpisodeSignals`), consulting the
policy when the sampler asks (:class:`~plume.harness.training.consultation.PolicyConsultation`), the
weights logged at each evaluation and each recompute (``sampler.parquet``), and the state an
exact resume restores. What a sampler needs is its class's ``needs(config)``: nothing here
probes a sampler's attributes.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Callable

import numpy as np
import pandas as pd

from plume.harness.config.scored_controllers import sampler_controllers
from plume.harness.training.consultation import PolicyConsultation
from plume.harness.training.evaluation import Policy, sampler_weights
from plume.harness.training.samplers import EpisodeSignals, build_sampler
from plume.sampling import TraceSampler
from plume.traces import TraceSet

__all__ = ["SamplerSession"]


class SamplerSession:
    """One job's sampler, its learner signals, its policy consultations and its weight log.

    ``env_sampler`` is what the training environment draws from; ``after_step`` and
    ``updates_until`` turn the sampler's recomputes into ``sampler.parquet`` rows attributed
    to the learner update they happened in; ``weights_at`` adds the rows of an evaluation."""

    def __init__(self, sampler: TraceSampler, consultation: PolicyConsultation,
                 num_envs: int, labels: np.ndarray | None = None) -> None:
        self.sampler, self.consultation, self.labels = sampler, consultation, labels
        needs = type(sampler).needs(sampler.config)
        self._logs_updates = needs.weight_updates
        self.signals = EpisodeSignals(sampler, num_envs) if needs.learner_signal else None
        self.frames: list[pd.DataFrame] = []
        self.start_counting()

    @classmethod
    def build(cls, job, traces: TraceSet, analysis, rng: np.random.Generator,
              trace_scores: Callable[[str], np.ndarray]) -> SamplerSession:
        """The session of ``job`` (a validated JobConfig) on its training ``traces``."""
        spec, params = job.env_spec, job.env_params
        sampler = build_sampler(job.sampler_name, job.sampler, traces, rng, analysis,
                                sampler_controllers(spec, job.sampler_name, asdict(job.sampler)),
                                trace_scores)
        consultation = PolicyConsultation(sampler, spec, params, traces)
        return cls(sampler, consultation, job.env.n_envs, traces.labels)

    def start_counting(self) -> None:
        """Count draws and recomputes from the sampler's state now (once the environment and
        the agent exist: what they drew while being built is not training)."""
        self.draws_before = self.sampler.draws.copy()
        self.logged_recomputes = len(self._recomputes())
        self.recomputed_at: list[tuple[int, int]] = []  # (env step, recomputes so far)

    def _recomputes(self) -> list:
        return self.sampler.weight_updates() if self._logs_updates else []

    @property
    def env_sampler(self) -> TraceSampler:
        """What the training environment draws from: the sampler, or its deferred view while
        episode reports wait for the learner signal."""
        return self.sampler if self.signals is None else self.signals.deferred

    # ----------------------------------------------------------------- during training
    def after_step(self, env_steps: int) -> None:
        """Note the recomputes the sampler made during the step that ended at ``env_steps``."""
        recomputes = len(self._recomputes())
        if recomputes > (self.recomputed_at[-1][1] if self.recomputed_at
                         else self.logged_recomputes):
            self.recomputed_at.append((env_steps, recomputes))

    def updates_until(self, env_steps: int, progress: float) -> pd.DataFrame:
        """``sampler.parquet`` rows for the recomputes made up to ``env_steps`` not logged yet,
        attributed to the update that ended there (empty when none)."""
        rows = []
        while self.recomputed_at and self.recomputed_at[0][0] <= env_steps:
            _, upto = self.recomputed_at.pop(0)
            rows.append(self._recompute_rows(self.logged_recomputes, upto, env_steps, progress))
            self.logged_recomputes = upto
        frame = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
        if not frame.empty:
            self.frames.append(frame)
        return frame

    def _recompute_rows(self, logged: int, upto: int, env_steps: int,
                        progress: float) -> pd.DataFrame:
        history = self._recomputes()[:upto]
        clusters = self.sampler.clusters
        sizes = np.bincount(clusters) if clusters is not None else None
        return pd.DataFrame([
            {"grouping": "cluster_weight", "group": str(k), "weight": float(w),
             "draw_share": np.nan, "n_traces": int(sizes[k]) if sizes is not None else -1,
             "progress": progress, "env_steps": env_steps, "sampler_draws": int(draws)}
            for draws, weights in history[logged:] for k, w in enumerate(weights)])

    def next_stop(self, target: int) -> int:
        """Where ``learn`` should stop next on its way to ``target`` (a consultation)."""
        return self.consultation.next_stop(target)

    def consult_if_due(self, policy: Policy, env_steps: int,
                       total_steps: int) -> dict[str, Any] | None:
        """A round of policy consultation when one is due (never once the budget is spent:
        the policy is final); what to log, or None."""
        if self.consultation.due(env_steps) and env_steps < total_steps:
            return self.consultation.consult(policy, env_steps)
        return None

    # ----------------------------------------------------------------- evaluations
    def weights_at(self, progress: float, env_steps: int) -> pd.DataFrame:
        """Probability mass and share of the draws since the last evaluation, per ground-truth
        kind and per cluster (added to the log)."""
        weights = sampler_weights(self.sampler, self.labels, self.draws_before,
                                  progress=progress, env_steps=env_steps)
        self.draws_before = self.sampler.draws.copy()
        if not weights.empty:
            self.frames.append(weights)
        return weights

    def table(self) -> pd.DataFrame:
        """Every row logged so far (``sampler.parquet``)."""
        return pd.concat(self.frames, ignore_index=True)

    def summary(self) -> dict[str, Any]:
        """The consultations' count and cost, for a sampler that consults the policy."""
        if not self.consultation.every:
            return {}
        return {"sampler_rounds": self.consultation.rounds,
                "sampler_round_seconds": round(self.consultation.seconds, 2),
                "sampler_scoring_steps": self.consultation.steps}

    def scoring_steps(self) -> int | None:
        """Env steps spent so far playing the policy for the sampler; None for a sampler
        that never consults it (its runs' eval.parquet then has no such column)."""
        return self.consultation.steps if self.consultation.every else None

    # ----------------------------------------------------------------- resume
    def live(self) -> dict[str, Any]:
        """The objects an exact resume restores (the environment's snapshot holds them)."""
        return {"sampler": self.sampler, "signals": self.signals}

    def checkpoint(self) -> dict[str, Any]:
        state = {"sampler": self.sampler.state_dict(),  # readable without the snapshot
                 "consult_seconds": self.consultation.seconds}
        if self.consultation.every:
            state["consult_steps"] = self.consultation.steps
        return state

    def restore(self, sampler: TraceSampler, signals: EpisodeSignals | None,
                checkpoint: dict[str, Any], logged: pd.DataFrame | None) -> None:
        """Continue with the restored ``sampler`` and ``signals`` at the checkpoint's env step,
        the rows logged up to it kept (then :meth:`start_counting`, once the agent exists)."""
        self.sampler, self.signals = sampler, signals
        consultation = self.consultation
        self.consultation = PolicyConsultation(sampler, consultation.spec, consultation.params,
                                               consultation.traces, checkpoint["env_steps"])
        self.consultation.seconds = checkpoint.get("consult_seconds", 0.0)
        self.consultation.steps = int(checkpoint.get("consult_steps", 0))
        self.frames = [] if logged is None else [logged]
