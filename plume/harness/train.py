"""``plume-train``: train one DRL agent on one trace dataset with one trace sampler.

    plume-train env.dataset=majority_fast sampler=uniform seed=0 train.total_steps=200000
    plume-train -m sampler=uniform seed=0,1,2          # a sweep; re-running skips finished jobs

The job validates its whole config first, then writes the run directory of docs/ARCHITECTURE.md
(``plume.harness.rundir``), evaluates greedily on every test set at ``train.eval_points`` evenly
spaced points, and logs to W&B (offline by default) when ``logger=wandb``.
"""

from __future__ import annotations

import logging
import math
import os
import platform
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import pandas as pd
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from plume import __version__
from plume.agents.base import NonFiniteTraining
from plume.harness import snapshot, sweep
from plume.harness.anchors import SCORE_FILE, controller_trace_scores, score_description
from plume.harness.consultation import PolicyConsultation
from plume.harness.datasets import make_env
from plume.harness.evaluation import Evaluator, eval_scores, sampler_weights
from plume.harness.monitor import TrainingMonitor
from plume.harness.preflight import JobInputs, check_train
from plume.harness.progress import Progress, format_clock  # noqa: F401 (format_clock: public here too)
from plume.harness.rundir import (
    COMPLETED,
    EVAL_TABLE,
    FAILED,
    RESOLVED_CONFIG,
    RUNNING,
    SAMPLER_TABLE,
    CorruptCheckpoint,
    RunDirectory,
    RunDirectoryLocked,
    discard_unused,
    effective_state,
)
from plume.harness.samplers import (
    EpisodeSignals,
    build_sampler,
    run_analysis,
    sampler_controllers,
)
from plume.harness.configdir import CONF_DIR
from plume.harness.schema import ConfigError, JobConfig, resolve_env_defaults
from plume.harness.seeding import spawn_streams, torch_seed
from plume.harness.tracking import NullTracker, WandbTracker

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


_app = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")(train_job)


def run_job(cfg: DictConfig, run_dir: Path, choices: dict[str, str] | None = None,
            hydra_record: dict[str, str] | None = None):
    """Validate, train, evaluate and record one job in ``run_dir``; returns its summary.

    A rejected config leaves no trace: the directory Hydra just made is removed and an
    existing one (a completed job typed again with a bad value) is not touched; Hydra's
    record (``hydra_record``: file name -> text, for ``.hydra/``) is written only after
    validation. One process at a time works in a run directory (RunDirectoryLocked
    otherwise)."""
    try:
        inputs = check_train(cfg)  # config, data, env package: before anything is written
    except ConfigError:
        discard_unused(Path(run_dir))  # the folder Hydra made for a multirun job, if any
        raise
    rundir = RunDirectory(run_dir)
    with rundir.lock():
        if hydra_record:
            rundir.write_hydra_record(hydra_record)
        if rundir.is_completed and not inputs.job.overwrite:
            log.info("skipping %s: already completed (overwrite=true to train it again)",
                     run_dir)
            return rundir.status().get("summary")
        return _run_locked(cfg, inputs, rundir, choices or {})


def _run_locked(cfg: DictConfig, inputs: JobInputs, rundir: RunDirectory,
                choices: dict[str, str]) -> dict[str, Any]:
    job = inputs.job
    resolve_env_defaults(cfg, job.env)
    fingerprint = _fingerprint(cfg)
    stale = rundir.remove_stale_temporaries()
    if stale:
        log.info("removed %d temporary file(s) a killed process left: %s", len(stale),
                 ", ".join(stale))
    previous = rundir.status()
    if previous is None and rundir.status_damaged:
        log.warning("%s: status.json is not a Plume status; the job starts afresh", rundir.path)
    resume = None if job.overwrite else _resumable(rundir, fingerprint)
    (rundir.path / RESOLVED_CONFIG).write_text(OmegaConf.to_yaml(cfg, resolve=True))
    resumes = list((previous or {}).get("resumes", [])) if resume is not None else []
    if resume is None:
        rundir.reset_train_log()
    else:
        log.info("resuming %s from its checkpoint at %s env steps", rundir.path,
                 f"{resume['env_steps']:,}")
        resumes.append({"at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        "from_env_steps": int(resume["env_steps"]),
                        "previous_state": effective_state(previous)})
    started = time.time()
    rundir.write_status(
        RUNNING, started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), error=None, traceback=None,
        host=socket.gethostname(), pid=os.getpid(), heartbeat=round(started, 3),
        versions=_versions(), exp_name=job.exp_name, seed=job.seed, choices=choices,
        command=" ".join(sys.argv), resumes=resumes,
    )
    tracker: NullTracker | WandbTracker = NullTracker()
    exit_code = 1
    try:
        tracker = _make_tracker(job, cfg, rundir.path, choices)
        summary = _train(inputs, rundir, tracker, fingerprint, resume)
        exit_code = 0
    except BaseException as err:
        rundir.write_status(FAILED, error=f"{type(err).__name__}: {err}",
                            traceback=traceback.format_exc(),
                            elapsed_s=round(time.time() - started, 3))
        raise
    finally:
        tracker.finish(exit_code)
    rundir.write_status(COMPLETED, finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        elapsed_s=round(time.time() - started, 3), wandb_run=tracker.location,
                        summary=summary)
    log.info("results: %s (status.json, train.jsonl, eval.parquet, sampler.parquet, "
             "checkpoint.pt)", rundir.path)
    if tracker.location:
        log.info("W&B offline run: %s  (upload: wandb sync %s)", tracker.location,
                 tracker.location)
    return summary


def _train(
    inputs: JobInputs, rundir: RunDirectory, tracker, fingerprint: str,
    resume: dict[str, Any] | None = None,
) -> dict[str, Any]:
    training = _Training(inputs, rundir, tracker, fingerprint)
    if resume is not None:
        try:
            training.resume(resume)
        except snapshot.StateRefused as err:
            log.warning("not resuming: %s: %s; training from the start", rundir.path, err)
            rundir.reset_train_log()
            resumes = (rundir.status() or {}).get("resumes", [])[:-1]
            rundir.write_status(RUNNING, resumes=resumes, checkpoint_refused=str(err))
            training = _Training(inputs, rundir, tracker, fingerprint)
    return training.run()


class _Training:
    """One job's objects and schedule: evaluate at the configured progress points, log every
    update, checkpoint at every evaluation. The environment is reached only through its
    EnvSpec, the learner only through ``learn`` / ``act`` / ``state_dict``."""

    def __init__(self, inputs: JobInputs, rundir: RunDirectory, tracker,
                 fingerprint: str) -> None:
        import torch

        job = inputs.job
        self.job, self.rundir, self.tracker, self.fingerprint = job, rundir, tracker, fingerprint
        spec, params = job.env_spec, job.env_params
        streams = spawn_streams(job.seed)
        torch.set_num_threads(job.train.torch_threads)
        self.train_traces, test_sets = inputs.train_traces, inputs.test_sets
        self.evaluator = Evaluator(spec, test_sets, params)
        # Stage 1-2 runs for every sampler (cached per dataset and settings): Plume's samplers
        # use it, and every run's test traces are labelled with their training cluster.
        analysis = _analysis(job, self.train_traces)
        if analysis is not None:
            self.evaluator.clusters = {name: analysis.assign(t) for name, t in test_sets.items()}
        self.sampler = build_sampler(
            job.sampler_name, job.sampler_params, self.train_traces,
            np.random.default_rng(streams["sampler"]), analysis,
            sampler_controllers(spec, job.sampler_name, job.sampler_params),
            lambda name: controller_trace_scores(spec, params, self.train_traces, name,
                                                 Path(job.paths.cache)),
        )
        self.consultation = PolicyConsultation(self.sampler, spec, params, self.train_traces)
        self.signals = (EpisodeSignals(self.sampler, job.env.n_envs)
                        if type(self.sampler).needs_learner_signal(**job.sampler_params)
                        else None)
        self.env = make_env(
            spec, self.train_traces, job.env.n_envs,
            self.sampler if self.signals is None else self.signals.deferred,
            mode="train", seed=streams["env"], params=params,
        )
        self.torch_seed = torch_seed(streams["torch"])
        self._build_learner()
        rundir.write_json(SCORE_FILE, score_description(spec, params, self.evaluator,
                                                        Path(job.paths.cache)))
        self.points = [k / job.train.eval_points for k in range(1, job.train.eval_points + 1)]
        if job.train.eval_at_start:
            self.points.insert(0, 0.0)
        self.eval_frames: list[pd.DataFrame] = []
        self.sampler_frames: list[pd.DataFrame] = []
        self.draws_before = self.sampler.draws.copy()
        self.started = time.time()
        self.progress = Progress(job.train.total_steps, 0, job.train.progress_every_s,
                                 spec.score.unit)
        self.logged_recomputes = len(_recomputes(self.sampler))
        self.recomputed_at: list[tuple[int, int]] = []  # (env step, recomputes so far)
        log.info(
            "training %s on %s (%d traces) in env=%s with sampler=%s, %s env steps, seed %d -> %s",
            job.algo_name, self.train_traces.name, len(self.train_traces), spec.name,
            job.sampler_name, f"{job.train.total_steps:,}", job.seed, rundir.path,
        )

    def _build_learner(self) -> None:
        """The monitor around the training env and the algorithm stepping it."""
        from plume.agents import ALGORITHMS

        job = self.job
        self.monitor = TrainingMonitor(self.env, signals=self.signals, observer=self.after_step)
        self.agent = ALGORITHMS[job.algo_name](self.monitor, job.algo, seed=self.torch_seed,
                                               total_env_steps=job.train.total_steps)
        self.agent.track_learner_signal = self.signals is not None
        self.monitor.connect(self.agent.learner_signal)

    def _live(self) -> dict[str, Any]:
        """The objects an exact resume restores, as they are now."""
        return {"env": self.env, "sampler": self.sampler, "signals": self.signals,
                "episodes": self.agent.episode_state(), "last_return": self.monitor.last_return}

    def in_flight(self) -> snapshot.Encoded:
        """The running episodes, for an exact resume: the environment mid-episode (its
        arrays and RNG), the sampler, the learner-signal bookkeeping and the agent's view."""
        return snapshot.dumps(self._live(), self.train_traces)

    def resume(self, checkpoint: dict[str, Any]) -> None:
        """Continue exactly where the checkpoint was taken: the environment with its episodes
        in flight, the sampler, the agent, and the evaluations and training curve up to it.
        StateRefused when the checkpoint's state is not what this job builds."""
        restored = snapshot.loads(checkpoint.get("in_flight"), self.train_traces, self._live())
        self.env, self.sampler, self.signals = (restored["env"], restored["sampler"],
                                                restored["signals"])
        self.consultation = PolicyConsultation(self.sampler, self.job.env_spec,
                                               self.job.env_params, self.train_traces,
                                               checkpoint["env_steps"])
        self.consultation.seconds = checkpoint.get("consult_seconds", 0.0)
        self._build_learner()
        try:
            self.agent.load_state_dict(checkpoint["agent"])
            self.agent.load_episode_state(restored["episodes"])
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as err:
            raise snapshot.StateRefused(f"its agent state does not fit this job's "
                                        f"{self.job.algo_name} ({type(err).__name__}: "
                                        f"{str(err)[:200]})") from None
        self.monitor.last_return = restored["last_return"]
        done = checkpoint["progress"]
        self.points = [p for p in self.points if p > done]
        self.eval_frames = _rows_up_to(self.rundir, EVAL_TABLE, done)
        self.sampler_frames = _rows_up_to(self.rundir, SAMPLER_TABLE, done)
        self.rundir.truncate_train_log(checkpoint["env_steps"])
        self.draws_before = self.sampler.draws.copy()
        self.logged_recomputes = len(_recomputes(self.sampler))
        self.monitor.env_steps = int(checkpoint["env_steps"])
        self.progress.restart_clock(int(checkpoint["env_steps"]))

    def run(self) -> dict[str, Any]:
        """Train to each evaluation point in turn, evaluate there, and summarise."""
        total = self.job.train.total_steps
        for progress in self.points:
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
        summary = {
            "env_steps": env_steps,
            "train_seconds": round(time.time() - self.started, 2),
            "steps_per_s": round(self.progress.rate(env_steps), 1),
            **({"sampler_rounds": self.consultation.rounds,
                "sampler_round_seconds": round(self.consultation.seconds, 2)}
               if self.consultation.every else {}),
            **{k: round(v, 6) for k, v in eval_scores(self.eval_frames[-1]).items()},
        }
        self.tracker.summarise(summary)
        return summary

    def learn_to(self, target: int) -> None:
        """Train to env step ``target``, stopping for every round of a sampler that judges
        the policy (``plume.harness.consultation``)."""
        while True:
            self.log_records(self.agent.learn(self.consultation.next_stop(target)))
            env_steps = int(self.agent.env_steps)
            # no round once the budget is spent: the policy is final, no episode follows
            if self.consultation.due(env_steps) and env_steps < self.job.train.total_steps:
                record = self.consultation.consult(
                    lambda obs: self.agent.act(obs, deterministic=True), env_steps)
                self.tracker.log(record, step=env_steps)
            if env_steps >= target:  # learn rounds up to its update: it may pass a stop
                return

    def evaluate(self, progress: float, env_steps: int) -> None:
        started = time.time()
        frame = self.evaluator.evaluate(lambda obs: self.agent.act(obs, deterministic=True),
                                        progress=progress, env_steps=env_steps)
        self.eval_frames.append(frame)
        self.rundir.write_table(EVAL_TABLE, pd.concat(self.eval_frames, ignore_index=True))
        weights = sampler_weights(self.sampler, self.train_traces.labels, self.draws_before,
                                  progress=progress, env_steps=env_steps)
        self.draws_before = self.sampler.draws.copy()
        if not weights.empty:
            self._add_sampler_rows(weights)
        scores = eval_scores(frame)
        scores.update({f"sampler/{r.grouping}/{r.group}": r.weight for r in weights.itertuples()})
        scores["eval/seconds"] = time.time() - started
        self.tracker.log({"progress": progress, **scores}, step=env_steps)
        self.rundir.save_checkpoint({
            "agent": self.agent.state_dict(),
            "sampler": self.sampler.state_dict(),  # readable without the snapshot
            "in_flight": self.in_flight(),
            "env_steps": env_steps,
            "progress": progress,
            "seed": self.job.seed,
            "fingerprint": self.fingerprint,
            "consult_seconds": self.consultation.seconds,
        })
        self.progress.evaluated(env_steps, {k.split("/")[1]: v for k, v in scores.items()
                                            if k.count("/") == 2 and k.endswith("/score")})
        self.rundir.heartbeat()

    def after_step(self, env_steps: int) -> None:
        """After every training step: note sampler recomputes, print progress when due."""
        recomputes = len(_recomputes(self.sampler))
        if recomputes > (self.recomputed_at[-1][1] if self.recomputed_at
                         else self.logged_recomputes):
            self.recomputed_at.append((env_steps, recomputes))
        if self.progress.training(env_steps, self.monitor.last_return):
            self.rundir.heartbeat()

    def log_records(self, records: list[dict[str, Any]]) -> None:
        """The updates of one ``learn`` call: train.jsonl and the tracker, each update with the
        sampler weights recomputed during it (the learner signal still on its way first)."""
        self.monitor.deliver_signals()
        total = self.job.train.total_steps
        for metrics in records:
            env_steps = int(metrics["env_steps"])
            # The mean of trace indices over finished episodes means nothing: drop it.
            record = {k: _jsonable(v) for k, v in metrics.items()
                      if k not in ("charts/episode_trace", "wall_time")}
            record["time_s"] = round(metrics["wall_time"] - self.started, 3)
            self.rundir.append_train(record)
            weights = {}
            while self.recomputed_at and self.recomputed_at[0][0] <= env_steps:
                _, upto = self.recomputed_at.pop(0)
                rows = _new_recomputes(self.sampler, self.logged_recomputes, upto, env_steps,
                                       env_steps / total)
                self.logged_recomputes = upto
                if rows.empty:
                    continue
                self._add_sampler_rows(rows)
                weights.update({f"sampler/cluster_weight/{r.group}": r.weight
                                for r in rows.itertuples()})
            self.tracker.log({**record, **weights}, step=env_steps)

    def _add_sampler_rows(self, rows: pd.DataFrame) -> None:
        self.sampler_frames.append(rows)
        self.rundir.write_table(SAMPLER_TABLE, pd.concat(self.sampler_frames, ignore_index=True))



def _analysis(job: JobConfig, traces):
    """Plume stages 1-2 on the training traces (cached). A dataset with too few traces for the
    cluster-count range fails for samplers that need clusters (naming the setting to change)
    and is skipped, with a log line, for those that do not."""
    from plume.sampling import SAMPLERS

    inputs = set(getattr(SAMPLERS[job.sampler_name], "inputs", ()))
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


def _recomputes(sampler) -> list:
    """Plume-Dynamic's ``history`` of ``(draws, cluster weights)``; [] for other samplers."""
    return getattr(sampler, "history", None) or []


def _new_recomputes(sampler, logged: int, upto: int, env_steps: int,
                    progress: float) -> pd.DataFrame:
    """Rows for the cluster weights the sampler recomputed after the first ``logged`` ones, up
    to the first ``upto``, attributed to the update that ended at ``env_steps``."""
    history = _recomputes(sampler)[:upto]
    sizes = np.bincount(sampler.clusters) if sampler.clusters is not None else None
    rows = [
        {
            "grouping": "cluster_weight",
            "group": str(k),
            "weight": float(w),
            "draw_share": np.nan,
            "n_traces": int(sizes[k]) if sizes is not None else -1,
            "progress": progress,
            "env_steps": env_steps,
            "sampler_draws": int(draws),
        }
        for draws, weights in history[logged:]
        for k, w in enumerate(weights)
    ]
    return pd.DataFrame(rows)


def _fingerprint(cfg: DictConfig) -> str:
    """Hash of everything that decides what a job trains (not where or how it logs)."""
    import hashlib

    keys = ["env", "algo", "sampler", "analysis", "seed", "train.total_steps", "train.eval_points",
            "train.eval_at_start"]
    def resolved(key: str) -> Any:  # in place: a sampler key may read ${train.total_steps}
        node = OmegaConf.select(cfg, key)
        return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node

    chosen = {key: resolved(key) for key in keys}
    return hashlib.sha256(repr(sorted(chosen.items())).encode()).hexdigest()[:16]


def _resumable(rundir: RunDirectory, fingerprint: str) -> dict[str, Any] | None:
    """The checkpoint of an interrupted or failed run of the same job, if there is one.

    A resumed job keeps its evaluations and training curve up to the checkpoint and continues
    the agent, sampler and simulator-noise streams from it; episodes that were in flight
    when it stopped are started afresh."""
    status = rundir.status()
    if status is None or status.get("state") == COMPLETED or not rundir.has_checkpoint:
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


def _rows_up_to(rundir: RunDirectory, table: str, progress: float) -> list[pd.DataFrame]:
    if not (rundir.path / table).is_file():
        return []
    frame = rundir.read_table(table)
    return [frame[frame["progress"] <= progress]]


def _jsonable(value: Any) -> Any:
    if isinstance(value, (np.floating, float)):
        return float(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    return value


def _make_tracker(job: JobConfig, cfg: DictConfig, run_dir: Path, choices: dict[str, str]):
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
        tags=[f"{group}:{choice}" for group, choice in sorted(choices.items())]
        + list(job.logger.tags),
        config=OmegaConf.to_container(cfg, resolve=True),
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
