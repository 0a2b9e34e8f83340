"""The training loop of one job, given its collaborators: it builds none of them.

The loop owns the schedule: ``learn`` up to each evaluation point (stopping for the sampler's
policy consultations), evaluate greedily there, write ``eval.parquet``, ``sampler.parquet``
and the checkpoint, and log every update to ``train.jsonl`` and the tracker. It reaches the
environment only through the monitor the algorithm steps, the learner only through ``learn`` /
``act`` / ``state_dict``, and the sampler only through its :class:`SamplerSession`.
``plume.harness.apps.train`` builds the collaborators from a job's config (and restores them from a
checkpoint); a test builds them from small pieces of its own.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from plume.harness.training.evaluation import Evaluator, eval_scores
from plume.harness.training.monitor import TrainingMonitor
from plume.harness.training.progress import Progress
from plume.harness.training.sampler_session import SamplerSession
from plume.runs import snapshot
from plume.runs.record import EVAL_TABLE, SAMPLER_TABLE
from plume.runs.store import RunDirectory
from plume.traces import TraceSet

__all__ = ["Schedule", "TrainingLoop"]

log = logging.getLogger("plume")


@dataclass
class Schedule:
    """The budget, the progress points to evaluate at (fractions of it, in order), what
    every checkpoint records besides the state (the job's seed and config fingerprint), and
    ``stop_at``: the job pauses after its first evaluation at or past this progress (1: never),
    to be resumed from that evaluation's checkpoint by a later run with a larger one."""

    total_steps: int
    points: list[float]
    checkpoint_fields: dict[str, Any] = field(default_factory=dict)
    stop_at: float = 1.0

    @classmethod
    def evenly(cls, total_steps: int, eval_points: int, at_start: bool = False,
               stop_at: float = 1.0, **checkpoint_fields: Any) -> Schedule:
        points = [k / eval_points for k in range(1, eval_points + 1)]
        return cls(total_steps, [0.0, *points] if at_start else points, checkpoint_fields,
                   stop_at)


class TrainingLoop:
    """Train, evaluate, log and checkpoint one job (see the module docstring)."""

    def __init__(self, agent, monitor: TrainingMonitor, evaluator: Evaluator,
                 session: SamplerSession, traces: TraceSet, rundir: RunDirectory, tracker,
                 schedule: Schedule, progress: Progress,
                 eval_frames: list[pd.DataFrame] | None = None) -> None:
        self.agent, self.monitor, self.evaluator = agent, monitor, evaluator
        self.session, self.traces, self.rundir, self.tracker = session, traces, rundir, tracker
        self.schedule, self.progress = schedule, progress
        self.eval_frames = list(eval_frames or [])
        self.evaluated = max((float(f["progress"].max()) for f in self.eval_frames
                              if not f.empty), default=-1.0)  # the last progress evaluated
        self.started = time.time()
        monitor.observe(self.after_step)

    def run(self) -> dict[str, Any]:
        """Train to each evaluation point in turn, evaluate there, and summarise; the summary
        has ``paused_at`` (the last progress evaluated) when ``stop_at`` ended the job early."""
        total = self.schedule.total_steps
        paused_at = None
        for progress in self.schedule.points:
            if self.evaluated >= self.schedule.stop_at - 1e-9:  # a rung typed as 0.3 = 3/10
                paused_at = self.evaluated
                break
            target = math.ceil(progress * total)
            if 0 < progress < 1 and target <= self.agent.env_steps:
                log.info("no evaluation at progress %g: the learner's last update already "
                         "passed env step %s (%s); evaluations stay on distinct env steps",
                         progress, f"{target:,}", f"{int(self.agent.env_steps):,}")
                continue
            if progress > 0:
                self.learn_to(target)
            if self.agent.env_steps >= total:  # the budget is spent: this is the final one
                self.evaluate(1.0, int(self.agent.env_steps))
                break
            self.evaluate(progress, int(self.agent.env_steps))
        env_steps = int(self.agent.env_steps)
        self.progress.close()
        last = self.eval_frames[-1]
        summary = {
            "env_steps": env_steps,
            "train_seconds": round(time.time() - self.started, 2),
            "steps_per_s": round(self.progress.rate(env_steps), 1),
            **self.session.summary(),
            **{k: round(v, 6) for k, v in eval_scores(
                last[last["progress"] == last["progress"].max()]).items()},
            **({} if paused_at is None else {"paused_at": paused_at}),
        }
        self.tracker.summarise(summary)
        return summary

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        return self.agent.act(obs, deterministic=True)

    def learn_to(self, target: int) -> None:
        """Train to env step ``target``, stopping for every round of a sampler that judges
        the policy (``plume.harness.training.consultation``)."""
        while True:
            self.log_records(self.agent.learn(self.session.next_stop(target)))
            env_steps = int(self.agent.env_steps)
            record = self.session.consult_if_due(self.greedy, env_steps,
                                                 self.schedule.total_steps)
            if record is not None:
                self.tracker.log(record, step=env_steps)
            if env_steps >= target:  # learn rounds up to its update: it may pass a stop
                return

    def evaluate(self, progress: float, env_steps: int) -> None:
        """Every test set at ``progress``: eval.parquet, the sampler's weights, the tracker,
        then the checkpoint."""
        started = time.time()
        frame = self.evaluator.evaluate(self.greedy, progress=progress, env_steps=env_steps)
        scoring = self.session.scoring_steps()
        if scoring is not None:  # the sampler's rollouts so far: compute beside env_steps
            frame["scoring_steps"] = scoring
        self.eval_frames.append(frame)
        self.evaluated = progress
        self.rundir.write_table(EVAL_TABLE, pd.concat(self.eval_frames, ignore_index=True))
        weights = self.session.weights_at(progress, env_steps)
        if not weights.empty:
            self.rundir.write_table(SAMPLER_TABLE, self.session.table())
        scores = eval_scores(frame)
        scores.update({f"sampler/{r.grouping}/{r.group}": r.weight for r in weights.itertuples()})
        scores["eval/seconds"] = time.time() - started
        self.tracker.log({"progress": progress, **scores}, step=env_steps)
        self.checkpoint(progress, env_steps)
        self.progress.evaluated(env_steps, {k.split("/")[1]: v for k, v in scores.items()
                                            if k.count("/") == 2 and k.endswith("/score")})

    def live(self) -> dict[str, Any]:
        """The objects an exact resume restores, as they are now."""
        session = self.session.live()
        return {"env": self.monitor.env, "sampler": session["sampler"],
                "signals": session["signals"], "episodes": self.agent.episode_state(),
                "last_return": self.monitor.last_return}

    def checkpoint(self, progress: float, env_steps: int) -> None:
        """The agent, the sampler, the episodes in flight and where the schedule stands."""
        self.rundir.save_checkpoint({
            "agent": self.agent.state_dict(),
            "in_flight": snapshot.dumps(self.live(), self.traces),
            "env_steps": env_steps,
            "progress": progress,
            **self.schedule.checkpoint_fields,
            **self.session.checkpoint(),  # the sampler's state and its rounds' costs
        })

    def after_step(self, env_steps: int) -> None:
        """After every training step: note sampler recomputes, print progress when due."""
        self.session.after_step(env_steps)
        self.progress.training(env_steps, self.monitor.last_return)

    def log_records(self, records: list[dict[str, Any]]) -> None:
        """The updates of one ``learn`` call: train.jsonl and the tracker, each update with the
        sampler weights recomputed during it (the learner signal still on its way first)."""
        self.monitor.deliver_signals()
        total = self.schedule.total_steps
        for metrics in records:
            env_steps = int(metrics["env_steps"])
            # The mean of trace indices over finished episodes means nothing: drop it.
            record = {k: _jsonable(v) for k, v in metrics.items()
                      if k not in ("charts/episode_trace", "wall_time")}
            record["time_s"] = round(metrics["wall_time"] - self.started, 3)
            self.rundir.append_train(record)
            rows = self.session.updates_until(env_steps, env_steps / total)
            if not rows.empty:
                self.rundir.write_table(SAMPLER_TABLE, self.session.table())
            weights = {f"sampler/cluster_weight/{r.group}": r.weight for r in rows.itertuples()}
            self.tracker.log({**record, **weights}, step=env_steps)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (np.floating, float)):
        return float(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    return value
