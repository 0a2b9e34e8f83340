"""``plume-export <run dir> [--out DIR]``: a trained (or classic) controller leaves the run.

For a ``plume-train`` run: the run's config is checked and its data loaded exactly as the job
did (``preflight.check_train``), the learner is rebuilt and loaded from ``checkpoint.pt`` (read
as data), its greedy policy plays every trace of every test set once while each observation
it sees is recorded, and ``plume.deploy.export.export_policy`` writes TorchScript, ONNX and
``contract.json`` after checking the three agree on those observations. For a ``plume-eval``
run (a classic controller) the contract names the rule. The run directory lists its exports
(``exports.json``, with parity results) and, when the run logs to W&B, the files are logged
as an artifact of a W&B run of job type ``export`` in the run's group.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from plume import __version__
from plume.deploy.contract import (
    write_contract,
)
from plume.deploy.export import (
    contract_for,
)
from plume.harness.config.datasets import make_env
from plume.harness.config.errors import ConfigError
from plume.harness.integrations.tracking import WandbTracker
from plume.harness.training.evaluation import play_every_trace_once
from plume.runs.errors import os_error, write_failed
from plume.runs.record import CHECKPOINT, RESOLVED_CONFIG, run_state
from plume.runs.store import CorruptCheckpoint, RunDirectory

log = logging.getLogger("plume")

MAX_RECORDED_STEPS = 200_000
"""Observations kept for the parity check; longer test sets are subsampled evenly."""


def _source(run_dir: Path, traces: dict[str, Any]) -> dict[str, Any]:
    config = (run_dir / RESOLVED_CONFIG).read_bytes()
    return {"run_dir": str(run_dir.resolve()), "status": run_state(run_dir),
            "config_sha256": hashlib.sha256(config).hexdigest(),
            "trace_data": {name: t.content_hash for name, t in traces.items()},
            "plume_version": __version__, "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S")}


def record_observations(spec, params, test_sets, act) -> np.ndarray:
    """Every observation ``act`` sees while playing each test trace once (greedy, test mode),
    at most ``MAX_RECORDED_STEPS`` rows (evenly subsampled beyond)."""
    seen: list[np.ndarray] = []

    def recording(obs: np.ndarray) -> np.ndarray:
        seen.append(np.array(obs, dtype=np.float32))
        return act(obs)

    for traces in test_sets.values():
        env = make_env(spec, traces, None, None, mode="test", seed=None, params=params)
        play_every_trace_once(env, recording, [spec.episode_fields[0].name])
    rows = np.concatenate(seen)
    if len(rows) > MAX_RECORDED_STEPS:
        rows = rows[np.linspace(0, len(rows) - 1, MAX_RECORDED_STEPS).astype(np.int64)]
    return rows


def _export_learned(cfg, rundir: RunDirectory, folder: Path) -> dict[str, Any]:
    """Stage the run's learned controller into ``folder``: the learner rebuilt as the job
    built it and loaded from its checkpoint, which must be this configuration's."""
    from plume.agents import ALGORITHMS  # deferred: torch loads only when a learner is built
    from plume.deploy.export import (  # deferred: torch loads only when a learner is built
        contract_for,
        stage_policy,
    )
    from plume.harness.config.preflight import (
        check_train,  # deferred: the schema loads torch (the algorithms)
    )

    inputs = check_train(cfg)
    job = inputs.job
    if not rundir.has_checkpoint:
        raise ConfigError(f"{rundir.path}: no checkpoint.pt to export (has the job run?)")
    checkpoint = rundir.load_checkpoint()
    _check_fingerprint(cfg, rundir, checkpoint)
    # The learner as the job built it (same copies: DQN keeps n-step windows per copy).
    probe = make_env(job.env_spec, inputs.train_traces, job.env.n_envs, None, mode="train",
                     seed=0, params=job.env_params)
    agent = ALGORITHMS[job.algo_name](probe, job.algo, seed=0,
                                      total_env_steps=job.train.total_steps)
    agent.load_state_dict(checkpoint["agent"])
    state = run_state(rundir.path)
    if state != "completed":
        log.warning("the run is %s: exporting its last checkpoint (%s env steps)", state,
                    f"{int(checkpoint.get('env_steps', 0)):,}")
    observations = record_observations(job.env_spec, job.env_params, inputs.test_sets,
                                       lambda obs: agent.act(obs, deterministic=True))
    traces = {"train": inputs.train_traces, **inputs.test_sets}
    source = {**_source(rundir.path, traces),
              "env_steps": int(checkpoint.get("env_steps", 0)), "seed": job.seed,
              "fingerprint": checkpoint["fingerprint"]}
    policy = {"algorithm": job.algo_name, "network": getattr(job.algo, "network", None)}
    contract = contract_for(job.env_spec, job.env_params, policy, source)
    parity = stage_policy(agent.greedy_policy(), observations, contract, folder)
    log.info("parity on %d recorded test steps: outputs within %s; %d tied steps",
             parity["steps"], parity["tolerance"], parity["ties"])
    return {"kind": "model", "algorithm": job.algo_name, "parity": parity}


def _check_fingerprint(cfg, rundir: RunDirectory, checkpoint: dict[str, Any]) -> None:
    """ConfigError unless the checkpoint was trained by this run's configuration (training
    resumes only from such a checkpoint; an export must not name another job's weights)."""
    from plume.harness.config.schema import (
        config_fingerprint,  # deferred: the schema loads torch (the algorithms)
    )

    expected, found = config_fingerprint(cfg), checkpoint.get("fingerprint")
    if found != expected:
        raise ConfigError(f"{rundir.path / CHECKPOINT}: trained by another configuration "
                          f"(fingerprint {found}, this run's config.yaml gives {expected}); "
                          "export the run directory that made it")


def _export_rule(cfg, rundir: RunDirectory, folder: Path) -> dict[str, Any]:
    from plume.harness.config.preflight import (
        check_eval,  # deferred: the schema loads torch (the algorithms)
    )

    _, spec, params, name, test_sets = check_eval(cfg)
    write_contract(folder, contract_for(spec, params, {"kind": "rule", "controller": name},
                                        _source(rundir.path, test_sets)))
    return {"kind": "rule", "controller": name}


def export_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Export the controller of ``run_dir`` into ``out`` (default ``<run_dir>/export``) and
    record it in the run directory; ConfigError or DestinationError (one line) for a run or a
    destination that cannot be used, ``plume.deploy.export.ParityError`` when the formats
    disagree. Everything is staged first: a failure leaves ``out`` and the run as they were."""
    from plume.deploy.export import (  # deferred: torch loads only when a learner is built
        check_destination,
        install,
        run_identity,
        staging,
    )

    run_dir = Path(run_dir)
    config = run_dir / RESOLVED_CONFIG
    if not config.is_file():
        raise ConfigError(f"{run_dir}: not a run directory (no {RESOLVED_CONFIG})")
    cfg = OmegaConf.load(config)
    out = Path(out) if out is not None else run_dir / "export"
    identity = run_identity(hashlib.sha256(config.read_bytes()).hexdigest())
    check_destination(out, identity, run_dir=run_dir)
    rundir = RunDirectory(run_dir)
    started = time.time()
    export = _export_rule if cfg.get("controller") else _export_learned
    with staging(out) as folder:
        entry = export(cfg, rundir, folder)
        _log_artifact(cfg, run_dir, folder)
        install(folder, out)
    entry = {"path": str(out.resolve()), "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
             "seconds": round(time.time() - started, 2), **entry}
    rundir.record_export(entry)
    return out


def artifact_name(cfg, run_dir: Path) -> str:
    """The export's W&B artifact name: ``controller-<experiment>-<overrides>-<seed folder>``
    in the characters W&B accepts (letters, digits, ``-``, ``_``, ``.``; ``seed=0`` becomes
    ``seed_0``), at most W&B's 128, with a hash of the unchanged path so that two runs never
    share one artifact."""
    run = f"{cfg.get('exp_name')}/{run_dir.parent.name}/{run_dir.name}"
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", run.replace("/", "-"))
    digest = hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:8]
    return f"controller-{safe[:100]}-{digest}"


def _log_artifact(cfg, run_dir: Path, folder: Path) -> None:
    """The staged export as a W&B artifact, when the run logs to W&B (its mode: offline files
    are synced later, online ones upload now). A failure leaves no offline run behind."""
    logger = cfg.get("logger") or {}
    if logger.get("name") != "wandb" or logger.get("mode") == "disabled":
        return

    mode = str(logger.get("mode", "offline"))
    tracker = None
    try:
        tracker = WandbTracker(run_dir=run_dir, mode=mode,
                               project=str(logger.get("project", "plume")),
                               entity=logger.get("entity"), group=str(cfg.get("exp_name")),
                               job_type="export", name=f"{run_dir.name}-export",
                               tags=["export"], config={"run_dir": str(run_dir)})
        tracker.log_artifact(folder, name=artifact_name(cfg, run_dir), kind="controller")
    except Exception as err:
        if tracker is not None:
            tracker.finish(1)
            if mode == "offline" and tracker.location:
                shutil.rmtree(tracker.location, ignore_errors=True)  # the run this call made
        raise ConfigError(f"W&B could not log the export as an artifact ({err}); nothing "
                          "was exported") from None
    tracker.finish()


def main(argv: list[str] | None = None) -> None:
    """``plume-export RUN_DIR [--out DIR]``: exit 0 on success, 2 for a run or destination
    that cannot be used (one line, nothing written), 1 when the exported formats disagree."""
    from plume.deploy.export import (  # deferred: torch loads only when a learner is built
        DestinationError,
        ParityError,
    )

    parser = argparse.ArgumentParser(prog="plume-export", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a plume-train or plume-eval run directory")
    parser.add_argument("--out", help="export folder (default: <run_dir>/export)")
    args = parser.parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[plume-export] %(message)s"))
    log.addHandler(handler)  # for this command only: a caller's logging is left as it was
    level = log.level
    log.setLevel(logging.INFO)
    try:
        out = export_run(args.run_dir, args.out)
        log.info("exported %s -> %s", args.run_dir, out)
    except (ConfigError, CorruptCheckpoint, DestinationError) as err:
        print(f"plume-export: {err}", file=sys.stderr)
        sys.exit(2)
    except ParityError as err:  # before Exception: a ParityError is a RuntimeError
        print(f"plume-export: parity check failed: {err}", file=sys.stderr)
        sys.exit(1)
    except Exception as err:  # a full disk, a folder that became read-only: nothing installed
        refused = os_error(err)  # torch's writers wrap the OSError in a RuntimeError
        if refused is None:
            raise
        where = refused.filename or args.out or Path(args.run_dir) / "export"
        print(f"plume-export: {write_failed(where, refused)}", file=sys.stderr)
        sys.exit(2)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


if __name__ == "__main__":
    main()
