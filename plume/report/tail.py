"""The worst-case view: how a method does on the test traces it handles worst.

A mean over test traces can hide a method that is excellent on most traces and bad on a few
(the slow traces a curriculum is meant to fix). No-Regrets/SFL (NeurIPS 2024) and NCC
(RLC 2025) report, beside the mean, the CVaR: the mean over the worst alpha of test cases.
Here each run's **CVaR** is the mean of its worst ``ceil(CVAR_FRACTION * n)`` normalised
per-trace scores over every test trace of the compared tasks at the final evaluation (the
empirical CVaR at level 10 %; the single worst trace when there are fewer than 10). Runs
stay the replication unit: the per-run CVaRs get the report's Student-t interval over runs
and the report's comparisons with the baseline (paired t when the sides are the same seeds),
Holm-corrected as their own family of verdicts, the worst-case question.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from plume.report.comparisons import comparisons_table
from plume.report.inference import enough_runs, mean_interval

#: The share of test traces the CVaR averages over (the worst 10 %).
CVAR_FRACTION = 0.10
#: The scope name of the worst-case comparisons.
WORST_SCOPE = f"worst {CVAR_FRACTION:.0%} of test traces"
WORST_CASE_COLUMNS = ["algorithm", "n_runs", "n_traces", "worst_traces", "cvar", "cvar_lo",
                      "cvar_hi", "mean"]


def cvar(values: np.ndarray, fraction: float = CVAR_FRACTION) -> float:
    """The mean of the worst ``ceil(fraction * n)`` of ``values`` (at least one)."""
    ordered = np.sort(np.asarray(values, dtype=float))
    return float(ordered[:worst_count(len(ordered), fraction)].mean())


def worst_count(n: int, fraction: float = CVAR_FRACTION) -> int:
    """How many of ``n`` traces the CVaR averages: ``ceil(fraction * n)``, at least 1."""
    return max(1, math.ceil(fraction * n - 1e-9))


def run_cvars(frame: pd.DataFrame, final: float, tasks: Sequence[str],
              seeds: Sequence[int]) -> pd.DataFrame:
    """One row per (algorithm, seed): its CVaR and mean over the per-trace normalised scores
    of ``frame`` (``analyse``'s pooled rows) at progress ``final`` on ``tasks``."""
    rows = frame[(frame["progress"] == final) & frame["task"].isin(list(tasks))
                 & frame["seed"].astype(int).isin(list(seeds))]
    grouped = rows.groupby(["algorithm", "seed"], sort=True)["score"]
    return (grouped.agg(cvar=cvar, mean="mean", n_traces="size")
            .reset_index().assign(seed=lambda t: t["seed"].astype(int)))


def worst_case(per_run: pd.DataFrame, ranked: Sequence[str], baseline: str | None,
               seeds: Sequence[int], *, reps: int, seed: int
               ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per algorithm: mean CVaR over runs with its t interval from MIN_RUNS runs; the
    comparisons of every algorithm's CVaR with the baseline's, decided as their own family)."""
    vectors = {name: per_run[per_run["algorithm"] == name].set_index("seed")
               .reindex(list(seeds)) for name in ranked}
    rows = []
    for name, runs in vectors.items():
        values = runs["cvar"].to_numpy(float)
        lo = hi = np.nan
        if enough_runs(len(values)):
            _, lo, hi = mean_interval(values)
        traces = int(runs["n_traces"].min())
        rows.append({"algorithm": name, "n_runs": len(values), "n_traces": traces,
                     "worst_traces": worst_count(traces), "cvar": float(values.mean()),
                     "cvar_lo": float(lo), "cvar_hi": float(hi),
                     "mean": float(runs["mean"].mean())})
    table = pd.DataFrame(rows, columns=WORST_CASE_COLUMNS)
    if baseline is None or baseline not in vectors:
        return table, comparisons_table({}, [], "", [WORST_SCOPE], reps=reps, seed=seed)
    matrices = {name: runs["cvar"].to_numpy(float)[:, None] for name, runs in vectors.items()}
    return table, comparisons_table(matrices, list(ranked), baseline, [WORST_SCOPE],
                                    reps=reps, seed=seed, paired=True)


__all__ = ["CVAR_FRACTION", "WORST_CASE_COLUMNS", "WORST_SCOPE", "cvar", "run_cvars",
           "worst_case", "worst_count"]
