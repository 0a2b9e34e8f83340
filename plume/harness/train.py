"""``plume-train``: train one DRL agent on one trace dataset with one trace sampler.

    plume-train env.dataset=majority_fast sampler=uniform seed=0 train.total_steps=200000
    plume-train -m sampler=uniform seed=0,1,2          # a sweep; re-running skips finished jobs

The job validates its whole config first, then writes the run directory of docs/ARCHITECTURE.md
(``plume.runs.store``), evaluates greedily on every test set at ``train.eval_points`` evenly
spaced points, and logs to W&B (offline by default) when ``logger=wandb``.
"""

from __future__ import annotations

import logging
import platform
import sys
import time
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import pandas as pd
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from plume import __version__
from plume.agents.base import NonFiniteTraining
from plume.harness import sweep
from plume.harness.anchors import SCORE_FILE, controller_trace_scores, score_description
from plume.harness.configdir import CONF_DIR
from plume.harness.datasets import VALIDATION, make_env
from plume.harness.evaluation import Evaluator
from plume.harness.loop import Schedule, TrainingLoop
from plume.harness.monitor import TrainingMonitor
from plume.harness.preflight import JobInputs, check_train
from plume.harness.progress import Progress, format_clock  # noqa: F401 (format_clock: public here too)
from plume.harness.sampler_session import SamplerSession
from plume.harness.samplers import run_analysis
from plume.harness.schema import ConfigError, JobConfig, ResolvedJob, resolve_job
from plume.harness.seeding import spawn_streams, torch_seed
from plume.harness.tracking import NullTracker, WandbTracker
from plume.runs import snapshot
from plume.runs.errors import WriteFailed
from plume.runs.lifecycle import JobRecord, Outcome, run_lifecycle
from plume.runs.record import COMPLETED, EVAL_TABLE, RUNNING, SAMPLER_TABLE, Broken, RunStatus
from plume.runs.store import CorruptCheckpoint, RunDirectory, RunDirectoryLocked, discard_unused

log = logging.getLogger("plume")


def main() -> None:
    """``plume-train``: Hydra's app over ``conf/train.yaml``; a sweep that refused or lost jobs
    ends with a non-zero exit status (the ``plume`` sweeper's verdict)."""
    _app()
    sys.exit(sweep.exit_code())


def train_job(cfg: DictConfig) -> dict[str, Any] | None:
    """One job, as Hydra's task function: a user's mistake is one line (exit status 2), or
    inside a sweep a JobRefused for the sweeper to report."""
    hydra_cfg = HydraConfig.get()
    choices = {
        group: choice
        for group, choice in hydra_cfg.runtime.choices.items()
        if not group.startswith("hydra") and choice is not None
    }
    record = {"config.yaml": OmegaConf.to_yaml(cfg),
              "hydra.yaml": OmegaConf.to_yaml(OmegaConf.create({"hydra": hydra_cfg})),
              "overrides.yaml": OmegaConf.to_yaml(OmegaConf.create(
                  list(hydra_cfg.overrides.task)))}
    try:
        return run_job(cfg, Path(hydra_cfg.runtime.output_dir), choices, hydra_record=record)
    except (ConfigError, RunDirectoryLocked, NonFiniteTraining) as err:  # one line
        sweep.refuse("plume-train", err, hydra_cfg.mode)
    except WriteFailed as err:  # a full disk: one line too, but a failure (exit status 1)
        sweep.failed_write("plume-train", err, hydra_cfg.mode)


_app = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")(train_job)


def run_job(cfg: DictConfig, run_dir: Path, choices: dict[str, str] | None = None,
            hydra_record: dict[str, str] | None = None):
    """Validate, train, evaluate and record one job in ``run_dir``; returns its summary.

    A rejected config leaves no trace: the directory Hydra just made is removed and an
    existing one (a completed job typed again with a bad value) is not touched; Hydra's
    record (``hydra_record``: file name -> text, for ``.hydra/``) is written only after
    validation. The rest is the run layer's job lifecycle (``plume.runs.lifecycle``): one
    process at a time (RunDirectoryLocked otherwise), a completed job skipped."""
    try:
        inputs = check_train(cfg)  # config, data, env package: before anything is written
    except ConfigError:
        discard_unused(Path(run_dir))  # the folder Hydra made for a multirun job, if any
        raise
    job = inputs.job
    resolved = resolve_job(cfg, job, choices)
    rundir = RunDirectory(run_dir)
    training = TrainingRun(inputs, rundir, resolved.fingerprint)
    record = JobRecord(exp_name=job.exp_name, seed=job.seed, choices=resolved.choices,
                       config=resolved.yaml, overwrite=job.overwrite,
                       hydra=hydra_record or {}, verb="train")
    return run_lifecycle(rundir, record, training.body, start=training.start,
                         tracker=lambda: _make_tracker(job, resolved, rundir.path))


class TrainingRun:
    """plume-train's part of the lifecycle: whether to resume (decided under the lock, before
    ``running`` is written) and the training itself."""

    def __init__(self, inputs: JobInputs, rundir: RunDirectory, fingerprint: str) -> None:
        self.inputs, self.rundir, self.fingerprint = inputs, rundir, fingerprint
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
        summary = _train(self.inputs, self.rundir, tracker, self.fingerprint, self.resume)
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
    resume: dict[str, Any] | None = None,
) -> dict[str, Any]:
    loop, torch_seed_ = build_loop(inputs, rundir, tracker, fingerprint)
    if resume is not None:
        try:
            loop = resumed_loop(loop, inputs.job, torch_seed_, resume)
        except snapshot.StateRefused as err:
            log.warning("not resuming: %s: %s; training from the start", rundir.path, err)
            rundir.reset_train_log()
            rundir.write_status(RUNNING, resumes=rundir.status().resumes[:-1],
                                checkpoint_refused=str(err))
            loop, _ = build_loop(inputs, rundir, tracker, fingerprint)
    return loop.run()


def build_loop(inputs: JobInputs, rundir: RunDirectory, tracker,
               fingerprint: str) -> tuple[TrainingLoop, int]:
    """The training loop of a job and its collaborators, built from its config: the
    evaluator, the analysis (stage 1-2 runs for every sampler, cached per dataset and
    settings: Plume's samplers use it, and every run's test traces are labelled with their
    training cluster), the sampler session, the environment, the monitor and the agent.
    Returns the loop and the agent's torch seed (a resume rebuilds the agent with it)."""
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
    seed = torch_seed(streams["torch"])
    monitor, agent = _learner(job, env, session, seed)
    rundir.write_json(SCORE_FILE, score_description(spec, params, evaluator,
                                                    Path(job.paths.cache)))
    schedule = Schedule.evenly(job.train.total_steps, job.train.eval_points,
                               job.train.eval_at_start, job.train.stop_at, seed=job.seed,
                               fingerprint=fingerprint)
    progress = Progress(job.train.total_steps, 0, job.train.progress_every_s, spec.score.unit)
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


def _learner(job: JobConfig, env, session: SamplerSession, seed: int):
    """The monitor around the training env and the algorithm stepping it."""
    from plume.agents import ALGORITHMS  # deferred: torch loads only when a learner is built

    monitor = TrainingMonitor(env, signals=session.signals)
    agent = ALGORITHMS[job.algo_name](monitor, job.algo, seed=seed,
                                      total_env_steps=job.train.total_steps)
    agent.track_learner_signal = session.signals is not None
    monitor.connect(agent.learner_signal)
    return monitor, agent


def resumed_loop(loop: TrainingLoop, job: JobConfig, seed: int,
                 checkpoint: dict[str, Any]) -> TrainingLoop:
    """``loop`` continued exactly where ``checkpoint`` was taken: the environment with its
    episodes in flight, the sampler, the agent, and the evaluations and training curve up to
    it. StateRefused when the checkpoint's state is not what this job builds."""
    restored = snapshot.loads(checkpoint.get("in_flight"), loop.traces, loop.live())
    rundir, session, done = loop.rundir, loop.session, checkpoint["progress"]
    env_steps = int(checkpoint["env_steps"])
    session.restore(restored["sampler"], restored["signals"], checkpoint,
                    _rows_up_to(rundir, SAMPLER_TABLE, done))
    monitor, agent = _learner(job, restored["env"], session, seed)
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
    needs = bool({"memberships", "features"} & inputs)
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


def _make_tracker(job: JobConfig, resolved: ResolvedJob, run_dir: Path):
    if job.logger.name == "none":
        return NullTracker()
    return WandbTracker(
        run_dir=run_dir,
        mode=job.logger.mode,
        project=job.logger.project,
        entity=job.logger.entity,
        group=job.exp_name,
        job_type=job.sampler_name,
        name=f"{job.exp_name}/{run_dir.parent.name}/{run_dir.name}",
        tags=[f"{group}:{choice}" for group, choice in sorted(resolved.choices.items())]
        + list(job.logger.tags),
        config=resolved.wandb_config,
    )


def _versions() -> dict[str, str]:
    import torch

    return {
        "plume": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
    }


if __name__ == "__main__":
    main()
