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
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
import pandas as pd
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from plume.emulation.gap import METRICS, gap_markdown, gap_rows, lateness_note, per_trace_gaps
from plume.emulation.link import LATENESS_TOLERANCE_MS, Lateness
from plume.emulation.scenarios import EMULATIONS, Emulation, emulate
from plume.harness import sweep
from plume.harness.configdir import CONF_DIR
from plume.harness.errors import ConfigError
from plume.runs.errors import WriteFailed
from plume.runs.lifecycle import JobRecord, Outcome, run_lifecycle
from plume.runs.record import EVAL_TABLE, LINK_LATENESS
from plume.runs.store import RunDirectory, RunDirectoryLocked, discard_unused

log = logging.getLogger("plume")

TOP_KEYS = ("controller", "export", "mode", "exp_name", "seed", "overwrite", "emulation",
            "env", "algo", "paths")
LINKS = ("plume", "mahimahi")


@dataclass
class EmulationSection:
    """``emulation.*`` of ``conf/emulate.yaml`` (documented there)."""

    traces: int = 20
    parallel: int = 2
    chunks: int = 48
    mis: int = 400
    delay_ms: float = 40.0
    queue_packets: Any = None
    link: str = "plume"
    lateness_tolerance_ms: float = LATENESS_TOLERANCE_MS

    def __post_init__(self) -> None:
        for key in ("traces", "parallel", "chunks", "mis"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0, got {self.delay_ms}")
        if not 0 < self.lateness_tolerance_ms < math.inf:
            raise ValueError(f"lateness_tolerance_ms must be a number of milliseconds > 0, "
                             f"got {self.lateness_tolerance_ms}")
        if self.queue_packets is not None and (not isinstance(self.queue_packets, int)
                                               or self.queue_packets < 1):
            raise ValueError(f"queue_packets must be a whole number >= 1 or null, got "
                             f"{self.queue_packets!r}")
        if self.link not in LINKS:
            raise ValueError(f"link must be one of {', '.join(LINKS)}, got {self.link!r}")


@dataclass
class EmulationJob:
    """A checked ``plume-emulate`` config: what plays (``controller`` or ``export``), on
    which traces, how."""

    spec: Any
    params: Any
    settings: EmulationSection
    controller: str | None
    export: Path | None
    policy: str
    """A name for reports: the controller's, or what the export's contract names."""
    test_set: str
    traces: Any


def check_emulation(cfg: DictConfig) -> EmulationJob:
    """The checked job of a ``plume-emulate`` config, traces loaded; ConfigError naming the key
    for a mistake (before Hydra makes the run directory)."""
    from plume.harness.datasets import load_checked, test_set_name
    from plume.harness.schema import (
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
    if spec.name not in EMULATIONS:
        raise ConfigError(f"env={spec.name} has no emulation; emulated envs: "
                          f"{', '.join(EMULATIONS)}")
    EMULATIONS[spec.name].check(params)
    _check_machine(settings)
    controller, export, policy = _policy(cfg, spec, params)
    traces = load_checked(spec, env, env.dataset, "test", params)
    traces = traces.subset(list(range(min(settings.traces, len(traces)))))
    return EmulationJob(spec, params, settings, controller, export, policy,
                        test_set_name(spec, env.dataset), traces)


def _check_machine(settings: EmulationSection) -> None:
    """ConfigError with the one line that says what this machine or user lacks."""
    from plume.emulation.mahimahi import missing_tools
    from plume.emulation.netns import can_emulate

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

    from plume.deploy import load_controller

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
    hydra_cfg = HydraConfig.get()
    try:
        return run_emulation(cfg, Path(hydra_cfg.runtime.output_dir))
    except (ConfigError, RunDirectoryLocked) as err:  # one line, no traceback
        sweep.refuse("plume-emulate", err, hydra_cfg.mode)
    except WriteFailed as err:  # a full disk: one line, a failure
        sweep.failed_write("plume-emulate", err, hydra_cfg.mode)


_app = hydra.main(version_base="1.3", config_path=str(CONF_DIR),
                  config_name="emulate")(emulate_job)


def main() -> None:
    """``plume-emulate``: Hydra's app over ``conf/emulate.yaml``."""
    _app()
    sys.exit(sweep.exit_code())


def run_emulation(cfg: DictConfig, run_dir: Path) -> dict[str, Any] | None:
    """Emulate and simulate every trace of the job; write the run directory through the job
    lifecycle (checked first: a refused config leaves none; locked; a completed one is
    skipped unless ``overwrite``; a killed one reads ``interrupted``)."""
    from plume.emulation.netns import EmulationUnavailable

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
        return run_lifecycle(rundir, record, lambda tracker: _emulation(job, rundir))
    except EmulationUnavailable as err:  # the machine, not the code: one line
        raise ConfigError(str(err)) from None


def _emulation(job: EmulationJob, rundir: RunDirectory) -> Outcome:
    """The body of an emulation job: both modes, the gap, how late the links ran."""
    started = time.time()
    summary, lateness = _emulate_into(job, rundir)
    log.info("%d traces in %.0f s; gap (emulation - simulation):\n%s", len(job.traces),
             time.time() - started, pd.DataFrame(summary["gap"]).to_string(index=False))
    (log.warning if lateness["within_tolerance"] is False else log.info)(
        "%s", lateness_note(lateness))
    log.info("results: %s (eval.parquet, steps.parquet, gap.md)", rundir.path)
    return Outcome(summary, fields={LINK_LATENESS: lateness})


def _emulate_into(job: EmulationJob, rundir: RunDirectory
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both modes on every trace, the tables written into ``rundir``; the status summary and
    the links' lateness record."""
    from plume.deploy.export import export_controller

    export = job.export or export_controller(job.spec.name, job.params, job.controller,
                                             rundir.path / "export")
    with tempfile.TemporaryDirectory(prefix="plume-emulation-") as tmp:
        emulation: Emulation = EMULATIONS[job.spec.name](job.settings, job.traces, export,
                                                         Path(tmp))
        emulated, simulated, links = emulate(emulation, job.settings)
    lateness = link_lateness(links, [str(t) for t in job.traces.trace_ids],
                             job.settings.lateness_tolerance_ms)
    frame = pd.concat([emulation.eval_table(mode, records, job.test_set)
                       for mode, records in (("emulation", emulated),
                                             ("simulation", simulated))], ignore_index=True)
    rundir.write_table(EVAL_TABLE, frame)
    rundir.write_table("steps.parquet", pd.DataFrame(
        [{"mode": mode, "trace": i, "step": k, **record}
         for mode, records in (("emulation", emulated), ("simulation", simulated))
         for i, steps in enumerate(records) for k, record in enumerate(steps)]))
    metrics = METRICS[job.spec.name]
    summary = pd.DataFrame(gap_rows(frame, metrics))
    per_trace = per_trace_gaps(frame, metrics)
    summary.to_csv(rundir.path / "gap.csv", index=False)
    per_trace.to_csv(rundir.path / "gap_per_trace.csv", index=False)
    title = f"{job.policy} ({job.spec.name}, {job.test_set}, link={job.settings.link})"
    (rundir.path / "gap.md").write_text(gap_markdown(title, job.spec.score.name, summary,
                                                     per_trace, lateness))
    return ({"gap": summary.to_dict("records"), "traces": len(job.traces),
             "export": str(export)}, lateness)


def link_lateness(sessions: list[dict[str, Any] | None], trace_ids: list[str],
                  tolerance_ms: float) -> dict[str, Any]:
    """``status.json``'s ``link_lateness``: the packets of every session's two directions in
    one histogram (bins add: exact), judged against ``tolerance_ms`` (p99 within it), with the
    traces whose own link fell behind and those whose link reported nothing (Mahimahi's
    shells, a link that died): where any is unmeasured the verdict is null unless the
    measured ones already fell behind."""
    parts, late, unmeasured = [], [], []
    for trace_id, stats in zip(trace_ids, sessions):
        if not stats or "lateness" not in stats.get("down", {}):
            unmeasured.append(trace_id)
            continue
        both = [Lateness.from_json(stats[side]["lateness"]) for side in ("down", "up")]
        parts += both
        if Lateness.merged(both).summary(tolerance_ms)["within_tolerance"] is False:
            late.append(trace_id)
    record = {**Lateness.merged(parts).summary(tolerance_ms), "rule": "p99_ms <= tolerance_ms",
              "late_traces": late, "unmeasured_traces": unmeasured}
    if unmeasured and record["within_tolerance"] is not False:
        record["within_tolerance"] = None
    return record


if __name__ == "__main__":
    main()
