"""``plume-eval``: a classic controller of an environment, evaluated by the same loop as a
learned policy and stored as a run directory that reports read like any other.

    plume-eval env=abr controller=bba
    plume-eval -m env=abr controller=bba,rate_based,robust_mpc,bola_v1
    plume-eval env=abr env.variant=pensieve env.dataset=path/to/cooked env.trace_format=cooked \
        controller=robust_mpc

Controllers are deterministic and test mode has no noise, so one evaluation (progress 1.0) is
the whole result; ``config.yaml`` names the controller, so a report lists it beside the
learned runs (as a reference, never pooled into their bootstrap statistics).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from plume.harness.apps import sweep
from plume.harness.apps.entry import hydra_app
from plume.harness.config.preflight import check_eval
from plume.harness.config.schema import ConfigError, resolve_eval
from plume.harness.training.anchors import SCORE_FILE, score_description
from plume.harness.training.evaluation import Evaluator, eval_scores
from plume.runs.lifecycle import JobRecord, Outcome, run_lifecycle
from plume.runs.record import EVAL_TABLE
from plume.runs.store import RunDirectory, discard_unused

log = logging.getLogger("plume")


def main() -> None:
    """``plume-eval``: Hydra's app over ``conf/eval.yaml``; a sweep that refused or lost jobs
    ends with a non-zero exit status."""
    _app()
    sys.exit(sweep.exit_code())


def eval_job(cfg: DictConfig) -> dict[str, Any] | None:
    """One controller evaluation, as Hydra's task function (see ``train_job``)."""
    return sweep.run_task("plume-eval", lambda run_dir: run_controller(cfg, run_dir),
                          HydraConfig.get())


_app = hydra_app("eval", eval_job)


def run_controller(cfg: DictConfig, run_dir: Path) -> dict[str, Any] | None:
    """Evaluate ``cfg.controller`` on every test set of ``cfg.env``; write the run directory
    (checked first: a refused config leaves none) through the job lifecycle
    (``plume.runs.lifecycle``: locked, skipped when completed, ``interrupted`` once killed)."""
    try:
        env, spec, params, name, test_sets = check_eval(cfg)
    except ConfigError:
        discard_unused(Path(run_dir))  # the folder Hydra made for a multirun job, if any
        raise
    resolved = resolve_eval(cfg, env, spec, name)
    rundir = RunDirectory(run_dir)
    record = JobRecord(exp_name=str(cfg.exp_name), seed=int(cfg.seed), choices=resolved.choices,
                       config=resolved.yaml, overwrite=bool(cfg.get("overwrite", False)),
                       verb="evaluate")

    def evaluate(tracker) -> Outcome:
        evaluator = Evaluator(spec, test_sets, params)
        frame = evaluator.evaluate(spec.controllers[name](params), progress=1.0, env_steps=0)
        rundir.write_table(EVAL_TABLE, frame)
        rundir.write_json(SCORE_FILE, score_description(spec, params, evaluator,
                                                        Path(cfg.paths.cache)))
        summary = eval_scores(frame)
        for test_set in evaluator.test_sets:
            log.info("%s %s: %.4f %s", name, test_set, summary[f"eval/{test_set}/score"],
                     spec.score.unit)
        log.info("results: %s (status.json, eval.parquet, score.json)", run_dir)
        return Outcome(summary)

    return run_lifecycle(rundir, record, evaluate)


if __name__ == "__main__":
    main()
