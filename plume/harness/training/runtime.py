"""The training runtime of one checked plume-train job: what it runs inside the job lifecycle
(``plume.runs.lifecycle``). :class:`TrainingRun` decides, under the directory's lock, whether
the job resumes from its checkpoint, then builds the training loop and its collaborators (the
evaluator, the analysis, the sampler session, the environment, the monitor and the agent) from
the typed job and runs it. Nothing here reads the Hydra config: the job is validated and
resolved before it gets here.
"""

from __future__ import annotations

import logging
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from plume import __version__
from plume.harness.config.datasets import VALIDATION, make_env
from plume.harness.config.preflight import JobInputs
from plume.harness.config.schema import ConfigError, JobConfig
from plume.harness.training.anchors import SCORE_FILE, controller_trace_scores, score_description
from plume.harness.training.evaluation import Evaluator
from plume.harness.training.loop import Schedule, TrainingLoop
from plume.harness.training.monitor import TrainingMonitor
from plume.harness.training.progress import Progress
from plume.harness.training.sampler_session import SamplerSession
from plume.harness.training.samplers import run_analysis
from plume.harness.training.seeding import spawn_streams, torch_seed
from plume.runs import snapshot
from plume.runs.lifecycle import Outcome
from plume.runs.record import COMPLETED, EVAL_TABLE, RUNNING, SAMPLER_TABLE, Broken, RunStatus
from plume.runs.store import CorruptCheckpoint, RunDirectory
from plume.sampling.inputs import INPUT_KINDS

log = logging.getLogger("plume")


@dataclass(frozen=True)
class Alone:
    """Where a job's loop sits: alone in its process (its agent as built, a progress bar on a
    terminal), or, as :class:`~plume.harness.training.lockstep.GroupSeat`, one seed of a
    SeedGroup (``label`` then names the seed on its progress lines)."""

    label: str = ""

    def __call__(self, agent: Any) -> Any:
        return agent


ALONE = Alone()


class TrainingRun:
    """plume-train's part of the lifecycle: whether to resume (decided under the lock, before
    ``running`` is written) and the training itself."""

    def __init__(self, inputs: JobInputs, rundir: RunDirectory, fingerprint: str,
                 seat: Alone = ALONE) -> None:
        self.inputs, self.rundir, self.fingerprint = inputs, rundir, fingerprint
        self.seat = seat
        self.resume: dict[str, Any] | None = None

    def start(self, previous: RunStatus | Broken | None) -> dict[str, Any]:
        """The running record's ``versions`` and ``resumes``; the checkpoint to resume from:
        an unfinished job's (a status that is not even a JSON object starts afresh)."""
        unfinished = previous is not None and previous.state != COMPLETED and not (
            isinstance(previous, Broken) and not previous.is_object)
        resume = None if self.inputs.job.overwrite or not unfinished else _resumable(
            self.rundir, self.fingerprint)
        self.resume = resume
        if resume is None:
            self.rundir.reset_train_log()
            return {"versions": _versions(), "resumes": []}
        log.info("resuming %s from its checkpoint at %s env steps", self.rundir.path,
                 f"{resume['env_steps']:,}")
        earlier = previous.resumes if isinstance(previous, RunStatus) else []
        resumes = [*earlier, {"at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                              "from_env_steps": int(resume["env_steps"]),
                              "previous_state": previous.effective_state()}]
        return {"versions": _versions(), "resumes": resumes, "checkpoint_refused": None}

    def body(self, tracker) -> Outcome:
        job = self.inputs.job
        summary = _train(self.inputs, self.rundir, tracker, self.fingerprint, self.resume,
                         self.seat)
        paused = summary.get("paused_at") is not None
        if paused:
            log.info("paused at progress %g (train.stop_at=%g): the same command with a larger "
                     "train.stop_at resumes it from its checkpoint", summary["paused_at"],
                     job.train.stop_at)
        log.info("results: %s (status.json, train.jsonl, eval.parquet, sampler.parquet, "
                 "checkpoint.pt)", self.rundir.path)
        if tracker.location:
            log.info("W&B offline run: %s  (upload: wandb sync %s)", tracker.location,
                     tracker.location)
        return Outcome(summary, paused=paused)


def _train(
    inputs: JobInputs, rundir: RunDirectory, tracker, fingerprint: str,
    resume: dict[str, Any] | None = None, seat: Alone = ALONE,
) -> dict[str, Any]:
    loop, torch_seed_ = build_loop(inputs, rundir, tracker, fingerprint, seat)
    if resume is not None:
        try:
            loop = resumed_loop(loop, inputs.job, torch_seed_, resume, seat)
        except snapshot.StateRefused as err:
            log.warning("not resuming: %s: %s; training from the start", rundir.path, err)
            rundir.reset_train_log()
            rundir.write_status(RUNNING, resumes=rundir.status().resumes[:-1],
                                checkpoint_refused=str(err))
            loop, _ = build_loop(inputs, rundir, tracker, fingerprint, seat)
    return loop.run()


def build_loop(inputs: JobInputs, rundir: RunDirectory, tracker, fingerprint: str,
               seat: Alone = ALONE) -> tuple[TrainingLoop, int]:
    """The training loop of a job and its collaborators, built from its config: the
    evaluator, the analysis (stage 1-2 runs for every sampler, cached per dataset and
    settings: Plume's samplers use it, and every run's test traces are labelled with their
    training cluster), the sampler session, the environment, the monitor and the agent.
    ``seat``: alone, or a seed of a SeedGroup. Returns the loop and the agent's torch seed (a
    resume rebuilds the agent with it)."""
    import torch

    job = inputs.job
    spec, params = job.env_spec, job.env_params
    streams = spawn_streams(job.seed)
    torch.set_num_threads(job.train.torch_threads)
    traces, test_sets = inputs.train_traces, inputs.test_sets
    evaluator = Evaluator(spec, test_sets, params)
    analysis = _analysis(job, traces)
    if analysis is not None:
        evaluator.clusters = {name: analysis.assign(t) for name, t in test_sets.items()}
    session = SamplerSession.build(
        job, traces, analysis, np.random.default_rng(streams["sampler"]),
        lambda name: controller_trace_scores(spec, params, traces, name, Path(job.paths.cache)))
    env = make_env(spec, traces, job.env.n_envs, session.env_sampler, mode="train",
                   seed=streams["env"], params=params)
    if job.train.crn:
        env.key_draws_by_visit()
    seed = torch_seed(streams["torch"])
    monitor, agent = _learner(job, env, session, seed, seat)
    rundir.write_json(SCORE_FILE, score_description(spec, params, evaluator,
                                                    Path(job.paths.cache)))
    schedule = Schedule.evenly(job.train.total_steps, job.train.eval_points,
                               job.train.eval_at_start, job.train.stop_at, seed=job.seed,
                               fingerprint=fingerprint)
    progress = Progress(job.train.total_steps, 0, job.train.progress_every_s, spec.score.unit,
                        label=seat.label)
    session.start_counting()
    if job.train.validation > 0:
        log.info("train.validation=%g: evaluating on %d held-out training traces (test set "
                 "'validation'); env.test_sets is ignored, no test set is read",
                 job.train.validation, len(test_sets[VALIDATION]))
    log.info(
        "training %s on %s (%d traces) in env=%s with sampler=%s, %s env steps, seed %d -> %s",
        job.algo_name, traces.name, len(traces), spec.name, job.sampler_name,
        f"{job.train.total_steps:,}", job.seed, rundir.path,
    )
    return TrainingLoop(agent, monitor, evaluator, session, traces, rundir, tracker, schedule,
                        progress), seed


def _learner(job: JobConfig, env, session: SamplerSession, seed: int, seat: Alone):
    """The monitor around the training env and the algorithm stepping it (as ``seat`` seats
    it)."""
    from plume.agents import ALGORITHMS  # deferred: torch loads only when a learner is built

    monitor = TrainingMonitor(env, signals=session.signals)
    agent = ALGORITHMS[job.algo_name](monitor, job.algo, seed=seed,
                                      total_env_steps=job.train.total_steps)
    agent.track_learner_signal = session.signals is not None
    monitor.connect(agent.learner_signal)
    return monitor, seat(agent)


def resumed_loop(loop: TrainingLoop, job: JobConfig, seed: int, checkpoint: dict[str, Any],
                 seat: Alone = ALONE) -> TrainingLoop:
    """``loop`` continued exactly where ``checkpoint`` was taken: the environment with its
    episodes in flight, the sampler, the agent, and the evaluations and training curve up to
    it. StateRefused when the checkpoint's state is not what this job builds."""
    restored = snapshot.loads(checkpoint.get("in_flight"), loop.traces, loop.live())
    rundir, session, done = loop.rundir, loop.session, checkpoint["progress"]
    env_steps = int(checkpoint["env_steps"])
    session.restore(restored["sampler"], restored["signals"], checkpoint,
                    _rows_up_to(rundir, SAMPLER_TABLE, done))
    monitor, agent = _learner(job, restored["env"], session, seed, seat)
    try:
        agent.load_state_dict(checkpoint["agent"])
        agent.load_episode_state(restored["episodes"])
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as err:
        raise snapshot.StateRefused(f"its agent state does not fit this job's "
                                    f"{job.algo_name} ({type(err).__name__}: "
                                    f"{str(err)[:200]})") from None
    monitor.last_return = restored["last_return"]
    rundir.truncate_train_log(env_steps)
    session.start_counting()
    monitor.env_steps = env_steps
    loop.progress.restart_clock(env_steps)
    schedule = Schedule(loop.schedule.total_steps,
                        [p for p in loop.schedule.points if p > done],
                        loop.schedule.checkpoint_fields, loop.schedule.stop_at)
    evaluations = _rows_up_to(rundir, EVAL_TABLE, done)
    return TrainingLoop(agent, monitor, loop.evaluator, session, loop.traces, rundir,
                        loop.tracker, schedule, loop.progress,
                        [] if evaluations is None else [evaluations])


def _analysis(job: JobConfig, traces):
    """Plume stages 1-2 on the training traces (cached). A dataset with too few traces for the
    cluster-count range fails for samplers that need clusters (naming the setting to change)
    and is skipped, with a log line, for those that do not."""
    from plume.sampling import SAMPLERS  # deferred: the sampler registry loads every sampler module

    inputs = set(SAMPLERS[job.sampler_name].needs(job.sampler).inputs)
    needs = any(INPUT_KINDS[kind].source == "analysis" for kind in inputs)
    if len(traces) < job.analysis.max_k:
        message = (f"{traces.name} has {len(traces)} training traces, fewer than the "
                   f"{job.analysis.max_k} clusters the analysis fits")
        if needs:
            raise ConfigError(f"{message}: sampler {job.sampler_name} needs clusters; lower "
                              f"analysis.k_range and analysis.selection.k_end (e.g. "
                              f"[2,{max(2, len(traces) - 1)}]) or give more traces")
        log.info("stage 1-2 skipped: %s (test traces get no cluster label)", message)
        return None
    return run_analysis(traces, job.analysis, job.paths.cache)


def _resumable(rundir: RunDirectory, fingerprint: str) -> dict[str, Any] | None:
    """The checkpoint of an unfinished run of the same job, if there is one.

    A resumed job keeps its evaluations and training curve up to the checkpoint and continues
    the agent, sampler and simulator-noise streams from it; episodes that were in flight
    when it stopped are started afresh."""
    if not rundir.has_checkpoint:
        return None
    try:
        checkpoint = rundir.load_checkpoint()
    except CorruptCheckpoint as err:
        log.warning("not resuming: %s; training from the start", err)
        return None
    if checkpoint.get("fingerprint") != fingerprint:
        log.info("not resuming %s: its checkpoint belongs to another configuration", rundir.path)
        return None
    return checkpoint


def _rows_up_to(rundir: RunDirectory, table: str, progress: float) -> pd.DataFrame | None:
    """The rows of ``table`` logged up to ``progress`` (None when the run has no such table)."""
    if not (rundir.path / table).is_file():
        return None
    frame = rundir.read_table(table)
    return frame[frame["progress"] <= progress]


def _versions() -> dict[str, str]:
    import torch

    return {
        "plume": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
    }
