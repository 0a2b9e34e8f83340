"""``plume-train``: train one DRL agent on one trace dataset with one trace sampler.

    plume-train env.dataset=majority_fast sampler=uniform seed=0 train.total_steps=200000
    plume-train -m sampler=uniform seed=0,1,2          # a sweep; re-running skips finished jobs

The job validates its whole config first, then writes the run directory of docs/ARCHITECTURE.md
(``plume.runs.store``), evaluates greedily on every test set at ``train.eval_points`` evenly
spaced points, and logs to W&B (offline by default) when ``logger=wandb``.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from plume.agents.base import NonFiniteTraining
from plume.harness.apps import sweep
from plume.harness.apps.entry import hydra_app
from plume.harness.config.preflight import check_train
from plume.harness.config.schema import ConfigError, JobConfig, ResolvedJob, resolve_job
from plume.harness.integrations.tracking import NullTracker, WandbTracker
from plume.harness.training.lockstep import SeedGroup
from plume.harness.training.runtime import ALONE, Alone, TrainingRun
from plume.runs.lifecycle import JobRecord, run_lifecycle
from plume.runs.store import RunDirectory, RunLogHandler, discard_unused

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
    return sweep.run_task("plume-train",
                          lambda run_dir: run_job(cfg, run_dir, choices, hydra_record=record),
                          hydra_cfg, refused=(NonFiniteTraining,))


_app = hydra_app("train", train_job)


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
        if inputs.job.train.seeds_in_process > 1:
            _check_seed_folder(Path(run_dir), inputs.job)
    except ConfigError:
        discard_unused(Path(run_dir))  # the folder Hydra made for a multirun job, if any
        raise
    if inputs.job.train.seeds_in_process > 1:
        return _run_seeds_together(cfg, inputs, Path(run_dir), choices, hydra_record or {})
    return _run_seed(cfg, inputs, Path(run_dir), choices, hydra_record or {})


def _run_seed(cfg: DictConfig, inputs, run_dir: Path, choices: dict[str, str] | None,
              hydra_record: dict[str, str], seat: Alone = ALONE):
    """The job lifecycle of one checked job in ``run_dir`` (``seat``: see TrainingRun)."""
    job = inputs.job
    resolved = resolve_job(cfg, job, choices)
    rundir = RunDirectory(run_dir)
    training = TrainingRun(inputs, rundir, resolved.fingerprint, seat)
    record = JobRecord(exp_name=job.exp_name, seed=job.seed, choices=resolved.choices,
                       config=resolved.yaml, overwrite=job.overwrite,
                       hydra=hydra_record, verb="train")
    return run_lifecycle(rundir, record, training.body, start=training.start,
                         tracker=lambda: _make_tracker(job, resolved, rundir.path))


def _run_seeds_together(cfg: DictConfig, inputs, run_dir: Path, choices: dict[str, str] | None,
                        hydra_record: dict[str, str]):
    """``train.seeds_in_process=K``: seeds seed .. seed+K-1, each the job it would be alone
    (its own lifecycle, lock and run directory ``<...>/seed=<s>`` beside this one) in a
    thread of its own, their learners trained together (``plume.harness.training.lockstep``).
    Returns the first seed's summary; the first seed's error, if any failed, is raised once
    all have ended."""
    first, count = inputs.job.seed, inputs.job.train.seeds_in_process
    group = SeedGroup(count)
    outcomes: list[Any] = [None] * count

    def seed_job(slot: int) -> None:
        seed = first + slot
        folder = run_dir.parent / f"seed={seed}"
        try:
            outcomes[slot] = _run_seed(
                OmegaConf.merge(cfg, {"seed": seed}),
                replace(inputs, job=replace(inputs.job, seed=seed)), folder, choices,
                seed_record(hydra_record, seed, folder), group.seat(slot, seed))
        except BaseException as err:  # noqa: BLE001 (reported below, once every seed ended)
            outcomes[slot] = err
        finally:
            group.leave(slot)

    threads = [threading.Thread(target=seed_job, args=(slot,), name=f"seed={first + slot}",
                                daemon=True) for slot in range(count)]
    log.info("training seeds %d-%d together in this process (train.seeds_in_process=%d)",
             first, first + count - 1, count)
    with seed_logs({t.name: run_dir.parent / t.name for t in threads}):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    if errors:
        raise errors[0]
    return outcomes[0]


class OnlyThreads(logging.Filter):
    """Passes the records logged by the threads named."""

    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.names = names

    def filter(self, record: logging.LogRecord) -> bool:
        return record.threadName in self.names


@contextlib.contextmanager
def seed_logs(folders: dict[str, Path]):
    """Each seed's log lines in its own run directory (``folders``: thread name -> run
    directory, the first seed first): Hydra's job log (the first seed's) keeps its thread's
    lines and the main thread's, and every other seed's thread writes a log of the same name
    and format beside it. Lines a seed's training step prints while another seed's thread
    trains their turn land in that thread's log, headed by their own ``seed=<s>``. Without a
    job log (``run_job`` called directly) none is made."""
    root = logging.getLogger()
    job_logs = [h for h in root.handlers if isinstance(h, RunLogHandler)]
    if not job_logs:
        yield
        return
    (first, *others), job_log = list(folders), job_logs[0]
    only_first = OnlyThreads({first, threading.main_thread().name})
    job_log.addFilter(only_first)
    added = []
    for thread in others:
        handler = RunLogHandler(folders[thread] / Path(job_log.baseFilename).name, delay=True)
        handler.setFormatter(job_log.formatter)
        handler.setLevel(job_log.level)
        handler.addFilter(OnlyThreads({thread}))
        root.addHandler(handler)
        added.append(handler)
    try:
        yield
    finally:
        job_log.removeFilter(only_first)
        for handler in added:
            root.removeHandler(handler)
            handler.close()


def _check_seed_folder(run_dir: Path, job: JobConfig) -> None:
    count = job.train.seeds_in_process
    if run_dir.name != f"seed={job.seed}":
        raise ConfigError(f"train.seeds_in_process={count} writes seed s into the folder "
                          f"seed=<s> beside the job's; {run_dir} is not named seed={job.seed} "
                          "(hydra.run.dir changed?)")


def seed_record(hydra_record: dict[str, str], seed: int, folder: Path) -> dict[str, str]:
    """Hydra's record of the job (``.hydra/``) as it would read for seed ``seed`` alone in
    ``folder``: its config's seed, the ``seed=`` override, the output directory."""
    if not hydra_record:
        return {}
    overrides = [o for o in OmegaConf.to_container(OmegaConf.create(
        hydra_record["overrides.yaml"])) if not o.startswith("seed=")] + [f"seed={seed}"]
    hydra_cfg = OmegaConf.create(hydra_record["hydra.yaml"])
    hydra_cfg.hydra.overrides.task = overrides
    hydra_cfg.hydra.runtime.output_dir = str(folder)
    config = OmegaConf.create(hydra_record["config.yaml"])
    config.seed = seed
    return {"config.yaml": OmegaConf.to_yaml(config), "hydra.yaml": OmegaConf.to_yaml(hydra_cfg),
            "overrides.yaml": OmegaConf.to_yaml(OmegaConf.create(overrides))}


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
        beside_others=job.train.seeds_in_process > 1,
    )


if __name__ == "__main__":
    main()
