"""Emulation results in reports: the run directories ``plume-emulate`` writes (``mode:
emulation`` in config.yaml), read as data, shown as simulation and emulation side by side with
the gap per controller and metric, per trace, and as a figure.

The gap (``plume.emulation.gap``) is emulation minus simulation on the same trace, averaged
over traces, with a 95 % Student-t interval over the per-trace differences from 5 traces on
(none below: never an interval from fewer than 5).

Each run also carries its links' lateness (``status.json``'s ``link_lateness``): the ``link_*``
columns, and :func:`lateness_warnings` names every run whose link fell behind its schedule
(p99 lateness above the tolerance: biased numbers) or reported no lateness (not known to be
exact), so that no such run reads as exact; the figure draws such runs as their own strip.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from plume.emulation.gap import gap_metrics, gap_rows, per_trace_gaps
from plume.report.runs import COMPLETED, EMULATION, EVAL, LINK_LATENESS, find_run_dirs, read_run

__all__ = ["find_emulations", "gap_figure", "lateness_warnings", "read_emulations"]

LINK_COLUMNS = ["link_p99_ms", "link_max_ms", "link_late_fraction", "link_tolerance_ms",
                "link_within_tolerance"]
"""The run's ``link_lateness`` beside every row: ``link_within_tolerance`` is True, False (the
link fell behind: biased) or None (not measured, or a run from before it was recorded)."""
GAP_COLUMNS = ["run_dir", "env", "policy", "link", "metric", "simulation", "emulation", "gap",
               "gap_lo", "gap_hi", "traces", "problem", *LINK_COLUMNS]
PER_TRACE_COLUMNS = ["run_dir", "env", "policy", "trace_id", "metric", "gap",
                     "link_within_tolerance"]
BEHIND = " (link behind)"
"""Suffix of a policy's strip in the figure for runs whose link fell behind."""


def find_emulations(paths: Sequence[str | Path]) -> list[Path]:
    """Every emulation run directory at or under ``paths`` (any state)."""
    try:
        run_dirs = find_run_dirs(paths)
    except ValueError:  # a path that does not exist: the report says so elsewhere
        return []
    return [d for d in run_dirs if read_run(d).config.get("mode") == EMULATION]


def _read_one(run_dir: Path) -> tuple[list[dict], list[dict]]:
    """(gap rows, per-trace rows) of one emulation run; one row with its ``problem`` when it
    did not complete or its table is not what plume-emulate writes."""
    files = read_run(run_dir)
    config, choices = files.config, files.status.get("choices", {})
    lateness = files.status.get(LINK_LATENESS) or {}
    head = {"run_dir": str(run_dir), "env": config.get("env"),
            "policy": choices.get("policy"),
            "link": choices.get("link"),
            **{column: lateness.get(column.removeprefix("link_")) for column in LINK_COLUMNS}}
    try:
        if files.state != COMPLETED:
            why = files.problem or files.status.get("error")
            raise ValueError(f"state {files.state}" + (f": {why}" if why else ""))
        frame = pd.read_parquet(run_dir / EVAL)
        metrics = [m for m in gap_metrics(head["env"]) if m in frame.columns]
        if set(frame["mode"]) != {"emulation", "simulation"} or not metrics:
            raise ValueError(f"{EVAL} needs both modes and the env's gap metrics")
        rows = gap_rows(frame, metrics)
        per_trace = per_trace_gaps(frame, metrics).melt(
            id_vars="trace_id", var_name="metric", value_name="gap")
    except (OSError, ValueError, KeyError, TypeError) as err:
        return [{**head, "problem": f"{type(err).__name__}: {err}"[:200]}], []
    return ([{**head, **row} for row in rows],
            [{**head, **row} for row in per_trace.to_dict("records")])


def read_emulations(paths: Sequence[str | Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(gap per run and metric, gap per run, trace and metric); an unusable run is one row of
    the first with its ``problem``."""
    gaps, per_trace = [], []
    for run_dir in find_emulations(paths):
        rows, traces = _read_one(run_dir)
        gaps += rows
        per_trace += traces
    return (pd.DataFrame(gaps, columns=GAP_COLUMNS),
            pd.DataFrame(per_trace, columns=PER_TRACE_COLUMNS))


def lateness_warnings(gaps: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(runs whose link fell behind, runs with no lateness measured): one line each naming the
    run, its policy and env, and the numbers."""
    behind, unknown = [], []
    runs = gaps.drop_duplicates("run_dir") if not gaps.empty else gaps
    for row in runs.itertuples():
        name = f"{row.run_dir} ({row.policy}, {row.env}, link={row.link})"
        verdict = _verdict(row.link_within_tolerance)
        if verdict is False:
            behind.append(f"{name}: p99 lateness {row.link_p99_ms:.2f} ms > "
                          f"{row.link_tolerance_ms:g} ms, max {row.link_max_ms:.2f} ms, "
                          f"{row.link_late_fraction:.1%} of packets later than the tolerance")
        elif verdict is None and not isinstance(row.problem, str):
            unknown.append(name)
    return behind, unknown


def _verdict(value) -> bool | None:
    """``link_within_tolerance`` from a table cell (numpy booleans, None or NaN when absent)."""
    return None if value is None or pd.isna(value) else bool(value)


def gap_figure(per_trace: pd.DataFrame, out: Path) -> Path | None:
    """Per environment (a row) and metric (a panel), each controller's per-trace gaps as a
    strip with their mean (zero: the simulator agreed): where the simulator is off, for which
    traces, and by how much."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if per_trace.empty:
        return None
    per_trace = per_trace.assign(policy=[
        f"{policy}{BEHIND}" if _verdict(within) is False else policy
        for policy, within in zip(per_trace["policy"], per_trace["link_within_tolerance"])])
    envs = list(dict.fromkeys(per_trace["env"]))
    width = max(len(set(per_trace.loc[per_trace["env"] == e, "metric"])) for e in envs)
    fig, axes = plt.subplots(len(envs), width, figsize=(3.2 * width, 2.6 * len(envs)),
                             squeeze=False)
    for row, env in zip(axes, envs):
        rows = per_trace[per_trace["env"] == env]
        metrics = list(dict.fromkeys(rows["metric"]))
        for ax in row[len(metrics):]:
            ax.set_visible(False)
        for ax, metric in zip(row, metrics):
            _strips(ax, rows[rows["metric"] == metric], f"{env}: {metric}")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def _strips(ax, rows: pd.DataFrame, title: str) -> None:
    policies = list(dict.fromkeys(rows["policy"]))
    for y, policy in enumerate(policies):
        values = rows.loc[rows["policy"] == policy, "gap"].dropna().to_numpy(float)
        if len(values):
            ax.scatter(values, [y] * len(values), s=12, alpha=0.6)
            ax.plot([values.mean()] * 2, [y - 0.3, y + 0.3], color="black")
    ax.axvline(0.0, color="grey", linewidth=0.8)
    ax.set_yticks(range(len(policies)), policies)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("emulation - simulation")
