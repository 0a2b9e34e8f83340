"""An emulation job without Hydra: a checked :class:`EmulationJob` (what plays, on which traces,
how: ``emulation.*`` as :class:`EmulationSection`) played in both modes into a run directory
(``eval.parquet`` with a ``mode`` column, ``steps.parquet``, ``gap.md`` / ``gap.csv`` /
``gap_per_trace.csv``) with the links' lateness (:func:`link_lateness`). ``plume-emulate``
(``plume.harness.apps.emulate``) checks the config and hands :func:`run_emulation_body` to the run
layer's job lifecycle.
"""

from __future__ import annotations

import logging
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from plume.deploy.export import export_controller
from plume.emulation.gap import gap_markdown, gap_rows, lateness_note, per_trace_gaps
from plume.emulation.link import LATENESS_TOLERANCE_MS, Lateness
from plume.emulation.scenarios import Emulation, emulate, scenario_class
from plume.runs.lifecycle import Outcome
from plume.runs.record import EVAL_TABLE, LINK_LATENESS
from plume.runs.store import RunDirectory

log = logging.getLogger("plume")

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


def emulate_into(job: EmulationJob, rundir: RunDirectory
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both modes on every trace, the tables written into ``rundir``; the status summary and
    the links' lateness record."""
    export = job.export or export_controller(job.spec.name, job.params, job.controller,
                                             rundir.path / "export")
    with tempfile.TemporaryDirectory(prefix="plume-emulation-") as tmp:
        emulation: Emulation = scenario_class(job.spec)(job.settings, job.traces, export,
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
    metrics = job.spec.emulation.metrics
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


def run_emulation_body(job: EmulationJob, rundir: RunDirectory) -> Outcome:
    """The body of an emulation job (its lifecycle is the caller's): both modes written into
    ``rundir``, the gap, how late the links ran."""
    started = time.time()
    summary, lateness = emulate_into(job, rundir)
    log.info("%d traces in %.0f s; gap (emulation - simulation):\n%s", len(job.traces),
             time.time() - started, pd.DataFrame(summary["gap"]).to_string(index=False))
    (log.warning if lateness["within_tolerance"] is False else log.info)(
        "%s", lateness_note(lateness))
    log.info("results: %s (eval.parquet, steps.parquet, gap.md)", rundir.path)
    return Outcome(summary, fields={LINK_LATENESS: lateness})
