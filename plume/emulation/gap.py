"""The sim-to-emulation gap: emulation minus simulation on the same trace, averaged over the
traces, with a 95 % Student-t interval over the per-trace differences from ``MIN_TRACES``
traces on (none below). ``plume-emulate`` writes it; ``plume-report`` recomputes it from the
run directories' ``eval.parquet``. Beside it, :func:`lateness_note` says whether the emulated
links kept their schedule (``status.json``'s ``link_lateness``): a gap measured on a link
that fell behind is biased by the machine, not the simulator's error alone."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from plume.envs.registry import ENV_PACKAGES, get_env

__all__ = ["MIN_TRACES", "gap_markdown", "gap_metrics", "gap_rows", "lateness_note",
           "per_trace_gaps"]

MIN_TRACES = 5


def gap_metrics(env: str) -> tuple[str, ...]:
    """The columns of an emulation's eval.parquet that the gap compares for the built-in
    environment ``env`` (its ``EnvSpec.emulation.metrics``, ``score`` first: the env's score);
    none for an environment that is not built in or has no emulation."""
    if env not in ENV_PACKAGES or get_env(env).emulation is None:
        return ()
    return get_env(env).emulation.metrics


def per_trace_gaps(frame: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """One row per trace: emulation minus simulation of each metric (``frame`` has one row
    per mode and trace: columns ``mode``, ``trace_id`` and the metrics)."""
    pivot = frame.pivot(index="trace_id", columns="mode", values=list(metrics))
    return pd.DataFrame({m: pivot[(m, "emulation")] - pivot[(m, "simulation")]
                         for m in metrics}).reset_index()


def gap_rows(frame: pd.DataFrame, metrics: Sequence[str]) -> list[dict]:
    """Per metric: the means of both modes over the traces and the gap with its interval
    (NaN bounds below ``MIN_TRACES`` traces)."""
    gaps = per_trace_gaps(frame, metrics)
    rows = []
    for metric in metrics:
        diff = gaps[metric].to_numpy(float)
        n, mean = len(diff), float(np.mean(diff))
        half = (float(stats.t.ppf(0.975, n - 1) * diff.std(ddof=1) / np.sqrt(n))
                if n >= MIN_TRACES else np.nan)
        by_mode = frame.groupby("mode")[metric].mean()
        rows.append({"metric": metric, "simulation": float(by_mode["simulation"]),
                     "emulation": float(by_mode["emulation"]), "gap": mean,
                     "gap_lo": mean - half, "gap_hi": mean + half, "traces": n})
    return rows


def lateness_note(record: dict[str, Any] | None) -> str:
    """One sentence on a run's ``link_lateness`` record: the numbers and the verdict."""
    if not record or not record.get("count"):
        return "Link lateness: not measured (this link reports none), so not known to be exact."
    numbers = (f"p50 {record['p50_ms']:.2f} ms, p90 {record['p90_ms']:.2f} ms, p99 "
               f"{record['p99_ms']:.2f} ms, max {record['max_ms']:.2f} ms over "
               f"{record['count']} packets, {record['late_fraction']:.1%} later than "
               f"{record['tolerance_ms']:g} ms")
    if record.get("within_tolerance") is False:
        traces = record.get("late_traces") or []
        return (f"WARNING: the emulated link fell behind its schedule ({numbers}; p99 above "
                f"the tolerance, in {len(traces)} trace(s)): the machine was too busy, the "
                "emulated numbers and the gap are biased, not exact.")
    if record.get("within_tolerance") is None:
        return f"Link lateness: {numbers}; some links reported none, so not known to be exact."
    return f"Link lateness (actual minus scheduled departure): {numbers}: within tolerance."


def gap_markdown(title: str, score_name: str, summary: pd.DataFrame,
                 per_trace: pd.DataFrame, lateness: dict[str, Any] | None = None) -> str:
    """``gap.md``: the summary table, the links' lateness, then emulation minus simulation
    per trace."""
    lines = [f"# Sim-to-emulation gap: {title}", "",
             f"Emulation minus simulation, mean over {int(summary['traces'][0])} traces with a "
             f"95 % Student-t interval over traces (none from fewer than {MIN_TRACES}); score "
             f"is {score_name}.", "", lateness_note(lateness), "",
             "| metric | simulation | emulation | gap [95% t] |", "|---|---:|---:|---:|"]
    for row in summary.itertuples():
        interval = "" if np.isnan(row.gap_lo) else f" [{row.gap_lo:+.3f}, {row.gap_hi:+.3f}]"
        lines.append(f"| {row.metric} | {row.simulation:.3f} | {row.emulation:.3f} | "
                     f"{row.gap:+.3f}{interval} |")
    lines += ["", "Per trace (emulation minus simulation):", "",
              "| trace | " + " | ".join(per_trace.columns[1:]) + " |",
              "|---|" + "---:|" * (len(per_trace.columns) - 1)]
    for row in per_trace.itertuples(index=False):
        lines.append(f"| {row[0]} | " + " | ".join(f"{v:+.3f}" for v in row[1:]) + " |")
    return "\n".join(lines) + "\n"
