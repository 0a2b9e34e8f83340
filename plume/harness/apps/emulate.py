"""``plume-emulate``: a controller's test traces over real TCP or UDP, beside the simulator's.

    plume-emulate env=abr env.variant=pensieve controller=bba emulation.traces=20
    plume-emulate env=abr env.variant=pensieve export=runs/.../export emulation.parallel=4
    plume-emulate env=cc controller=aimd emulation.mis=400
    plume-emulate -m env=abr env.variant=pensieve controller=bba,robust_mpc,rate_based

Each test trace is one session in real time on its own emulated link (namespaces and link per
session, ``emulation.parallel`` at once). ABR: the trace's bandwidth drives the server-to-client
direction, ``emulation.delay_ms`` each way, a droptail queue of ``emulation.queue_packets``; CC:
each link tuple (bandwidth, one-way delay, queue, loss). The same controller plays the same
traces in the simulator. The run directory (``conf/emulate.yaml``: ``mode: emulation``) holds
``eval.parquet`` in the simulator's schema with a ``mode`` column (one row per mode and
trace), ``steps.parquet`` (every chunk or MI of both modes), ``gap.md`` / ``gap.csv`` /
``gap_per_trace.csv`` (emulation minus simulation per metric, mean over traces with a 95 %
Student-t interval, none from fewer than 5 traces), ``status.json`` and ``config.yaml``.

``status.json`` also says how late the links ran (``link_lateness``: every packet's actual minus
scheduled departure over all sessions, p50/p90/p99/max in ms, the fraction later than
``emulation.lateness_tolerance_ms``, and ``within_tolerance``: false when p99 exceeds it, i.e.
the machine was too busy for the link to keep its trace's schedule and the emulated numbers
are biased; null where a link reports none, as Mahimahi's shells). ``gap.md`` and
``plume-report`` show the same verdict beside the gap.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from plume.deploy import (
    load_controller,
)
from plume.emulation.job import EmulationJob, EmulationSection, run_emulation_body
from plume.emulation.mahimahi import missing_tools
from plume.emulation.netns import EmulationUnavailable, can_emulate
from plume.emulation.scenarios import scenario_class
from plume.harness.apps import sweep
from plume.harness.apps.entry import hydra_app
from plume.harness.config.datasets import load_checked, test_set_name
from plume.harness.config.errors import ConfigError
from plume.runs.lifecycle import JobRecord, run_lifecycle
from plume.runs.store import RunDirectory, discard_unused

log = logging.getLogger("plume")

TOP_KEYS = ("controller", "export", "mode", "exp_name", "seed", "overwrite", "emulation",
            "env", "algo", "paths")
def check_emulation(cfg: DictConfig) -> EmulationJob:
    """The checked job of a ``plume-emulate`` config, traces loaded; ConfigError naming the key
    for a mistake (before Hydra makes the run directory)."""
    from plume.harness.config.schema import (  # deferred: the schema loads torch (the algorithms)
        check_inside_root,
        check_top_keys,
        env_section,
        typed_section,
    )

    check_top_keys(cfg, TOP_KEYS)
    if cfg.get("mode") != "emulation":
        raise ConfigError(f"mode must be 'emulation' (it marks the run directory), got "
                          f"{cfg.get('mode')!r}")
    check_inside_root(str(cfg.paths.root), exp_name=str(cfg.get("exp_name")))
    env, spec, params = env_section(cfg.get("env"))
    settings = typed_section("emulation", EmulationSection, cfg.get("emulation"))
    try:
        scenario_class(spec).check(params)
    except ValueError as err:  # no emulation for this env or setting: the config's mistake
        raise ConfigError(str(err)) from None
    _check_machine(settings)
    controller, export, policy = _policy(cfg, spec, params)
    traces = load_checked(spec, env, env.dataset, "test", params)
    traces = traces.subset(list(range(min(settings.traces, len(traces)))))
    return EmulationJob(spec, params, settings, controller, export, policy,
                        test_set_name(spec, env.dataset), traces)


def _check_machine(settings: EmulationSection) -> None:
    """ConfigError with the one line that says what this machine or user lacks."""
    reason = can_emulate()
    if reason is None and settings.link == "mahimahi" and missing_tools():
        reason = (f"emulation.link=mahimahi needs {', '.join(missing_tools())} on the PATH "
                  "(Mahimahi installed setuid root)")
    if reason is not None:
        raise ConfigError(reason)


def _policy(cfg: DictConfig, spec, params) -> tuple[str | None, Path | None, str]:
    """``controller`` or ``export``, exactly one, checked against the env; and the policy's
    name for reports (the controller's, or the algorithm or rule the contract names)."""
    from dataclasses import asdict


    controller, export = cfg.get("controller"), cfg.get("export")
    if (controller is None) == (export is None):
        raise ConfigError("give controller=<name> or export=<folder> (one of them)")
    if controller is not None:
        if controller not in spec.controllers:
            raise ConfigError(f"controller={controller!r} is not a controller of env "
                              f"{spec.name!r}; valid choices: "
                              f"{', '.join(sorted(spec.controllers))}")
        return str(controller), None, str(controller)
    try:  # every check the runtime makes, before the run directory exists
        contract = load_controller(Path(str(export))).contract
    except (OSError, ValueError) as err:
        raise ConfigError(f"export={export}: {err}") from None
    made_for = contract["env"]
    if made_for["name"] != spec.name or (
            "variant" in made_for.get("params", {})
            and made_for["params"]["variant"] != asdict(params).get("variant")):
        raise ConfigError(f"export={export} was made for env={made_for['name']} "
                          f"{made_for.get('params', {}).get('variant', '')}; set env (and "
                          "env.variant) to match it")
    policy = contract["policy"]
    name = policy.get("controller") or f"{policy.get('algorithm', 'learned')} export"
    return None, Path(str(export)), name


def emulate_job(cfg: DictConfig) -> dict[str, Any] | None:
    """One emulation, as Hydra's task function (see ``train_job``)."""
    return sweep.run_task("plume-emulate", lambda run_dir: run_emulation(cfg, run_dir),
                          HydraConfig.get())


_app = hydra_app("emulate", emulate_job)


def main() -> None:
    """``plume-emulate``: Hydra's app over ``conf/emulate.yaml``."""
    _app()
    sys.exit(sweep.exit_code())


def run_emulation(cfg: DictConfig, run_dir: Path) -> dict[str, Any] | None:
    """Emulate and simulate every trace of the job; write the run directory through the job
    lifecycle (checked first: a refused config leaves none; locked; a completed one is
    skipped unless ``overwrite``; a killed one reads ``interrupted``)."""
    try:
        job = check_emulation(cfg)
    except ConfigError:
        discard_unused(run_dir)
        raise
    rundir = RunDirectory(run_dir)
    record = JobRecord(exp_name=str(cfg.exp_name), seed=int(cfg.seed),
                       choices={"env": job.spec.name, "policy": job.policy,
                                "mode": "emulation", "link": job.settings.link},
                       config=OmegaConf.to_yaml(cfg, resolve=True),
                       overwrite=bool(cfg.get("overwrite", False)), verb="emulate",
                       quiet=(EmulationUnavailable,))
    try:
        return run_lifecycle(rundir, record, lambda tracker: run_emulation_body(job, rundir))
    except EmulationUnavailable as err:  # the machine, not the code: one line
        raise ConfigError(str(err)) from None


if __name__ == "__main__":
    main()
