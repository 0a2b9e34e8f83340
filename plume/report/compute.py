"""The compute view: what each method spent in environment steps, and the comparison at equal
compute.

A curriculum that scores training traces by playing the policy on them (Genet's rounds) spends
environment steps the training budget does not count. No-Regrets/SFL (NeurIPS 2024) and NCC
(RLC 2025) compare curricula at equal compute, charging each method for those rollouts. Here a
run's **total** at an evaluation is its training env steps plus its scoring steps so far (the
``scoring_steps`` column of ``eval.parquet``; 0 for a sampler that never consults the policy).
The **budget** is the smallest final total of any pooled run; each run is compared at its
latest evaluation whose total is within the budget, so a method is charged its scoring steps
on the evaluation grid (up to one evaluation interval more, never less). The per-run scores
there (the mean over the compared tasks) get the report's comparisons with the baseline
(paired t when the sides are the same seeds), Holm-corrected as their own family.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from plume.report.comparisons import comparisons_table

COMPUTE_COLUMNS = ["algorithm", "n_runs", "env_steps", "scoring_steps", "total_steps",
                   "scoring_share", "budget_progress", "budget_steps", "budget_score"]


@dataclass
class ComputeView:
    """Per algorithm what its runs spent (``table``) and the comparisons at equal compute
    (``comparisons``); both empty when no method spends scoring steps (``notes`` say why
    when they cannot be stated)."""

    table: pd.DataFrame
    comparisons: pd.DataFrame
    budget: float = float("nan")  # env steps, training plus scoring, every run is compared at
    notes: list[str] = field(default_factory=list)

    @property
    def scope(self) -> str:
        return budget_scope(self.budget)


def budget_scope(budget: float) -> str:
    """The scope name of the equal-compute comparisons: 'all tasks at 8,192 total env steps'."""
    return f"all tasks at {budget:,.0f} total env steps"


def run_steps(per_task: pd.DataFrame, tasks: Sequence[str], seeds: Sequence[int]
              ) -> pd.DataFrame:
    """One row per (algorithm, seed, progress) of ``per_task`` (one score per run, task and
    progress, with its env and scoring steps): the steps, their total and the mean score over
    ``tasks``."""
    rows = per_task[per_task["task"].isin(list(tasks)) & per_task["seed"].isin(list(seeds))]
    steps = (rows.groupby(["algorithm", "seed", "progress"], sort=True)
             .agg(env_steps=("env_steps", "median"), scoring_steps=("scoring_steps", "median"),
                  score=("score", "mean"))
             .reset_index())
    steps["total_steps"] = steps["env_steps"] + steps["scoring_steps"]
    return steps


def equal_compute(steps: pd.DataFrame, ranked: Sequence[str], baseline: str | None,
                  seeds: Sequence[int], *, reps: int, seed: int) -> ComputeView:
    """The compute table and the comparisons at the budget, from ``run_steps``' rows."""
    empty = comparisons_table({}, [], "", [], reps=reps, seed=seed)
    if steps.empty or not (steps["scoring_steps"] > 0).any():
        return ComputeView(pd.DataFrame(columns=COMPUTE_COLUMNS), empty)
    if steps["env_steps"].isna().any():
        return ComputeView(pd.DataFrame(columns=COMPUTE_COLUMNS), empty, notes=[
            ("Some method spends scoring steps, but some runs record no env_steps in "
             "eval.parquet (they predate it): no comparison at equal compute.")])
    final = steps.loc[steps.groupby(["algorithm", "seed"])["progress"].idxmax()]
    budget = float(final["total_steps"].min())
    within = steps[steps["total_steps"] <= budget]
    chosen = within.loc[within.groupby(["algorithm", "seed"])["progress"].idxmax()]
    if len(chosen) < len(final):
        return ComputeView(pd.DataFrame(columns=COMPUTE_COLUMNS), empty, budget, notes=[
            (f"Some run has no evaluation within {budget:,.0f} total env steps (the smallest "
             "final total): no comparison at equal compute.")])
    table = _compute_table(final, chosen, ranked)
    vectors = {name: chosen[chosen["algorithm"] == name].set_index("seed")["score"]
               .reindex(list(seeds)).to_numpy(float)[:, None] for name in ranked}
    if baseline is None or baseline not in vectors:
        return ComputeView(table, empty, budget)
    return ComputeView(table, comparisons_table(vectors, list(ranked), baseline,
                                                [budget_scope(budget)], reps=reps, seed=seed,
                                                paired=True), budget)


def _compute_table(final: pd.DataFrame, chosen: pd.DataFrame, ranked: Sequence[str]
                   ) -> pd.DataFrame:
    """Per algorithm, means over its runs: final steps, the share spent scoring, and where
    (progress, total, score) its runs stand at the budget."""
    rows = []
    for name in ranked:
        ends = final[final["algorithm"] == name]
        at = chosen[chosen["algorithm"] == name]
        total = float(ends["total_steps"].mean())
        rows.append({"algorithm": name, "n_runs": len(ends),
                     "env_steps": float(ends["env_steps"].mean()),
                     "scoring_steps": float(ends["scoring_steps"].mean()),
                     "total_steps": total,
                     "scoring_share": float(ends["scoring_steps"].mean()) / total if total
                     else np.nan,
                     "budget_progress": float(at["progress"].mean()),
                     "budget_steps": float(at["total_steps"].mean()),
                     "budget_score": float(at["score"].mean())})
    return pd.DataFrame(rows, columns=COMPUTE_COLUMNS)


__all__ = ["COMPUTE_COLUMNS", "ComputeView", "budget_scope", "equal_compute", "run_steps"]
