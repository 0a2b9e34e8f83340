"""``plume-train``: train one DRL agent on one trace dataset with one trace sampler.

    plume-train env.dataset=majority_fast sampler=uniform seed=0 train.total_steps=200000
    plume-train -m sampler=uniform seed=0,1,2          # a sweep; re-running skips finished jobs

The job validates its whole config first, then writes the run directory of docs/ARCHITECTURE.md
(``plume.runs.store``), evaluates greedily on every test set at ``train.eval_points`` evenly
spaced points, and logs to W&B (offline by default) when ``logger=wandb``.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from plume.agents.base import NonFiniteTraining
from plume.harness.apps import sweep
from plume.harness.apps.entry import hydra_app
from plume.harness.apps.together import check_seed_folder, run_together, seed_record
from plume.harness.config.preflight import check_train
from plume.harness.config.schema import ConfigError, JobConfig, ResolvedJob, resolve_job
from plume.harness.integrations.tracking import NullTracker, WandbTracker
from plume.harness.training.runtime import ALONE, Alone, TrainingRun
from plume.runs.lifecycle import JobRecord, run_lifecycle
from plume.runs.store import RunDirectory, discard_unused

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
            check_seed_folder(Path(run_dir), inputs.job)
    except ConfigError:
        discard_unused(Path(run_dir))  # the folder Hydra made for a multirun job, if any
        raise
    count, record = inputs.job.train.seeds_in_process, hydra_record or {}
    if count == 1:
        return _run_seed(cfg, inputs, Path(run_dir), choices, record)

    def run_seed(seed: int, folder: Path, seat):
        return _run_seed(OmegaConf.merge(cfg, {"seed": seed}),
                         replace(inputs, job=replace(inputs.job, seed=seed)), folder, choices,
                         seed_record(record, seed, folder), seat)

    return run_together(inputs.job.seed, count, Path(run_dir), run_seed)


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
