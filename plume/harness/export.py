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
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from plume import __version__
from plume.harness.errors import ConfigError
from plume.harness.rundir import RESOLVED_CONFIG, CorruptCheckpoint, RunDirectory

log = logging.getLogger("plume")

MAX_RECORDED_STEPS = 200_000
"""Observations kept for the parity check; longer test sets are subsampled evenly."""


def _source(run_dir: Path, rundir: RunDirectory, traces: dict[str, Any]) -> dict[str, Any]:
    config = (run_dir / RESOLVED_CONFIG).read_bytes()
    status = rundir.status() or {}
    return {"run_dir": str(run_dir.resolve()), "status": status.get("state"),
            "config_sha256": hashlib.sha256(config).hexdigest(),
            "trace_data": {name: t.content_hash for name, t in traces.items()},
            "plume_version": __version__, "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S")}


def record_observations(spec, params, test_sets, act) -> np.ndarray:
    """Every observation ``act`` sees while playing each test trace once (greedy, test mode),
    at most ``MAX_RECORDED_STEPS`` rows (evenly subsampled beyond)."""
    from plume.harness.datasets import make_env
    from plume.harness.evaluation import play_every_trace_once

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


def _export_learned(cfg, rundir: RunDirectory, out: Path) -> dict[str, Any]:
    from plume.agents import ALGORITHMS
    from plume.deploy.export import contract_for, export_policy
    from plume.harness.datasets import make_env
    from plume.harness.preflight import check_train

    inputs = check_train(cfg)
    job = inputs.job
    if not rundir.has_checkpoint:
        raise ConfigError(f"{rundir.path}: no checkpoint.pt to export (has the job run?)")
    # The learner as the job built it (same copies: DQN keeps n-step windows per copy).
    probe = make_env(job.env_spec, inputs.train_traces, job.env.n_envs, None, mode="train",
                     seed=0, params=job.env_params)
    agent = ALGORITHMS[job.algo_name](probe, job.algo, seed=0,
                                      total_env_steps=job.train.total_steps)
    checkpoint = rundir.load_checkpoint()
    agent.load_state_dict(checkpoint["agent"])
    state = (rundir.status() or {}).get("state")
    if state != "completed":
        log.warning("the run is %s: exporting its last checkpoint (%s env steps)", state,
                    f"{int(checkpoint.get('env_steps', 0)):,}")
    observations = record_observations(job.env_spec, job.env_params, inputs.test_sets,
                                       lambda obs: agent.act(obs, deterministic=True))
    traces = {"train": inputs.train_traces, **inputs.test_sets}
    source = {**_source(rundir.path, rundir, traces),
              "env_steps": int(checkpoint.get("env_steps", 0)), "seed": job.seed}
    policy = {"algorithm": job.algo_name, "network": getattr(job.algo, "network", None)}
    contract = contract_for(job.env_spec, job.env_params, policy, source)
    parity = export_policy(agent.greedy_policy(), observations, contract, out)
    log.info("parity on %d recorded test steps: outputs within %s; %d tied steps",
             parity["steps"], parity["tolerance"], parity["ties"])
    return {"kind": "model", "algorithm": job.algo_name, "parity": parity}


def _export_rule(cfg, rundir: RunDirectory, out: Path) -> dict[str, Any]:
    from plume.deploy.export import contract_for, export_rule
    from plume.harness.preflight import check_eval

    _, spec, params, name, test_sets = check_eval(cfg)
    contract = contract_for(spec, params, {"kind": "rule", "controller": name},
                            _source(rundir.path, rundir, test_sets))
    export_rule(contract, out)
    return {"kind": "rule", "controller": name}


def export_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Export the controller of ``run_dir`` into ``out`` (default ``<run_dir>/export``) and
    record it in the run directory; ConfigError (one line) for a run that cannot be
    exported, ``plume.deploy.export.ParityError`` when the formats disagree."""
    run_dir = Path(run_dir)
    config = run_dir / RESOLVED_CONFIG
    if not config.is_file():
        raise ConfigError(f"{run_dir}: not a run directory (no {RESOLVED_CONFIG})")
    cfg = OmegaConf.load(config)
    out = Path(out) if out is not None else run_dir / "export"
    rundir = RunDirectory(run_dir)
    started = time.time()
    export = _export_rule if cfg.get("controller") else _export_learned
    entry = export(cfg, rundir, out)
    entry = {"path": str(out.resolve()), "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
             "seconds": round(time.time() - started, 2), **entry}
    rundir.record_export(entry)
    _log_artifact(cfg, run_dir, out)
    return out


def _log_artifact(cfg, run_dir: Path, out: Path) -> None:
    """The export as a W&B artifact, when the run logs to W&B (its mode: offline files are
    synced later, online ones upload now)."""
    logger = cfg.get("logger") or {}
    if logger.get("name") != "wandb" or logger.get("mode") == "disabled":
        return
    from plume.harness.tracking import WandbTracker

    tracker = WandbTracker(run_dir=run_dir, mode=str(logger.get("mode", "offline")),
                           project=str(logger.get("project", "plume")),
                           entity=logger.get("entity"), group=str(cfg.get("exp_name")),
                           job_type="export", name=f"{run_dir.name}-export", tags=["export"],
                           config={"run_dir": str(run_dir)})
    try:
        tracker.log_artifact(out, name=f"controller-{run_dir.name}", kind="controller")
    finally:
        tracker.finish()


def main(argv: list[str] | None = None) -> None:
    """``plume-export RUN_DIR [--out DIR]``: exit 0 on success, 2 for a run that cannot be
    exported (one line), 1 when the exported formats disagree."""
    from plume.deploy.export import ParityError

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
    except (ConfigError, CorruptCheckpoint) as err:
        print(f"plume-export: {err}", file=sys.stderr)
        sys.exit(2)
    except ParityError as err:
        print(f"plume-export: parity check failed: {err}", file=sys.stderr)
        sys.exit(1)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


if __name__ == "__main__":
    main()
