"""What a report concludes: aggregate scores with their intervals, and verdicts against the
baseline with their effect sizes.

A verdict ("better", "worse", "no significant difference") rests on a t-test of the
difference of mean normalised scores (each run's average over the scope's tasks; runs are the
replication unit), with Holm-Bonferroni over every verdict of the report. Its design follows
the runs: when the two sides are the same seeds (row i of each matrix is seed i, which the
report's seed policy guarantees), seed s of one method and seed s of the other are a pair
(same initialisation, same RNG streams, same test traces) and the test is the paired t
(``plume.report.paired``), with the seed-level correlation, the variance of the paired
estimate relative to Welch's and an exact sign-flip permutation test beside it; otherwise it
is Welch's t, whose interval has its nominal coverage at 5 runs (``plume.report.inference``).
Welch's p is kept in every row, so a reader sees what pairing changed. Each verdict
carries two effect sizes with their intervals: that difference (Welch t) and rliable's
probability of improvement (stratified bootstrap), flagged when its interval is degenerate.
Fewer than ``MIN_RUNS`` runs per side give point estimates and "too few runs", never a verdict.
Each tested verdict also states the power of its test at the observed difference and the seeds
per side that would reach 80 % (``plume.report.power``), at the Bonferroni level ALPHA / m, the
level of Holm's first step over the report's m verdicts (conservative for the later steps).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from plume.report.bootstrap import (
    aggregate_metrics,
    interval_estimates,
    iqm_and_median,
    poi_point,
    probability_of_improvement,
)
from plume.report.inference import (
    ALPHA,
    MIN_RUNS,
    enough_runs,
    holm,
    mean_interval,
    welch_difference,
)
from plume.report.paired import (
    EXACT_SIGN_FLIP_MAX,
    correlation,
    paired_difference,
    paired_power,
    paired_seeds_for_power,
    sign_flip_p,
    variance_ratio,
)
from plume.report.power import MAX_SEEDS, TARGET_POWER, seeds_for_power, welch_power

METRICS = ["IQM", "mean", "median", "optimality_gap"]
ALL_TASKS = "all tasks"
TOO_FEW = "too few runs"
NOT_SIGNIFICANT = "no significant difference"
COMPARISON_COLUMNS = [
    "algorithm", "baseline", "scope", "n_tasks", "n_runs", "n_runs_baseline", "diff",
    "diff_lo", "diff_hi", "p_value", "p_holm", "poi", "lo", "hi", "poi_degenerate",
    "ci_excludes_half", "verdict", "sd", "sd_baseline", "power_level", "power", "seeds_for_80",
    "power_note", "design", "correlation", "variance_ratio", "sd_diff", "p_welch",
    "p_sign_flip", "p_sign_flip_holm", "seeds_for_80_welch",
]
PAIRED = "paired"
WELCH = "welch"


# --------------------------------------------------------------------------- aggregates


def metric_intervals(matrix: np.ndarray, *, reps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of [IQM, mean, median, optimality gap] of one (runs, tasks) matrix: Student t
    for the two means over runs (mean score; gap = 1 - mean of min(score, 1)), rliable's
    stratified bootstrap for the two order statistics."""
    lo, hi = np.empty(4), np.empty(4)
    _, boot = interval_estimates({"m": matrix}, iqm_and_median, reps=reps, seed=seed)
    lo[[0, 2]], hi[[0, 2]] = boot["m"][0], boot["m"][1]
    _, lo[1], hi[1] = mean_interval(matrix.mean(axis=1))
    _, capped_lo, capped_hi = mean_interval(np.minimum(matrix, 1.0).mean(axis=1))
    lo[3], hi[3] = 1.0 - capped_hi, 1.0 - capped_lo
    return lo, hi


def aggregates_table(matrices: Mapping[str, np.ndarray], *, reps: int, seed: int
                     ) -> pd.DataFrame:
    """One row per algorithm, ranked by IQM: the four metrics, with intervals (``_lo``,
    ``_hi``) only when it has MIN_RUNS runs (NaN otherwise)."""
    rows = []
    for name, matrix in matrices.items():
        point = aggregate_metrics(matrix)
        lo = hi = np.full(4, np.nan)
        if enough_runs(matrix.shape[0]):
            lo, hi = metric_intervals(matrix, reps=reps, seed=seed)
        row: dict[str, Any] = {"algorithm": name, "n_runs": matrix.shape[0],
                               "n_tasks": matrix.shape[1]}
        for i, metric in enumerate(METRICS):
            row.update({metric: float(point[i]), f"{metric}_lo": float(lo[i]),
                        f"{metric}_hi": float(hi[i])})
        rows.append(row)
    table = pd.DataFrame(rows).sort_values(["IQM", "mean", "algorithm"],
                                           ascending=[False, False, True], kind="stable")
    table.insert(0, "rank", np.arange(1, len(table) + 1))
    return table.reset_index(drop=True)


def ranking_text(aggregates: pd.DataFrame) -> str:
    """"a > b = c" by IQM point estimate ("=" for equal estimates)."""
    parts = [str(aggregates["algorithm"].iloc[0])]
    for i in range(1, len(aggregates)):
        same = np.isclose(aggregates["IQM"].iloc[i], aggregates["IQM"].iloc[i - 1],
                          rtol=0, atol=1e-12)
        parts.append(("= " if same else "> ") + str(aggregates["algorithm"].iloc[i]))
    return " ".join(parts)


# --------------------------------------------------------------------------- verdicts


def scopes(tasks: list[str]) -> list[tuple[str, list[int]]]:
    """("all tasks", every column) then one scope per task; a single task is its own scope."""
    if len(tasks) == 1:
        return [(tasks[0], [0])]
    return [(ALL_TASKS, list(range(len(tasks))))] + [(t, [j]) for j, t in enumerate(tasks)]


def compare(x: np.ndarray, y: np.ndarray, *, reps: int, seed: int,
            paired: bool = False) -> dict[str, Any]:
    """Effect sizes of (runs, tasks) matrices ``x`` over ``y``: difference of mean scores
    (interval and p of the design's test: paired t when ``paired``, the rows being the same
    seeds, else Welch's t; Welch's p always) and probability of improvement (bootstrap
    interval); points only, NaN intervals, below MIN_RUNS runs per side."""
    per_run_x, per_run_y = x.mean(axis=1), y.mean(axis=1)
    paired = paired and len(per_run_x) == len(per_run_y)
    row: dict[str, Any] = {
        "n_tasks": x.shape[1], "n_runs": len(per_run_x), "n_runs_baseline": len(per_run_y),
        "diff": float(per_run_x.mean() - per_run_y.mean()), "diff_lo": np.nan,
        "diff_hi": np.nan, "p_value": np.nan, "p_holm": np.nan, "lo": np.nan, "hi": np.nan,
        "poi_degenerate": False, "ci_excludes_half": False,
        "sd": _sd(per_run_x), "sd_baseline": _sd(per_run_y),
        "design": PAIRED if paired else WELCH, "correlation": np.nan,
        "variance_ratio": np.nan, "sd_diff": np.nan, "p_welch": np.nan, "p_sign_flip": np.nan,
    }
    if paired:
        row.update(correlation=correlation(per_run_x, per_run_y),
                   sd_diff=_sd(per_run_x - per_run_y))
    if not enough_runs(len(per_run_x), len(per_run_y)):
        return {**row, "poi": poi_point(x, y)}
    welch = welch_difference(per_run_x, per_run_y)
    diff, diff_lo, diff_hi, p = welch
    if paired:
        diff, diff_lo, diff_hi, p = paired_difference(per_run_x, per_run_y)
        row.update(variance_ratio=variance_ratio(per_run_x, per_run_y),
                   p_sign_flip=sign_flip_p(per_run_x, per_run_y))
    poi, lo, hi = probability_of_improvement(x, y, reps=reps, seed=seed)
    return {**row, "diff": float(diff), "diff_lo": float(diff_lo), "diff_hi": float(diff_hi),
            "p_value": float(p), "p_welch": float(welch[3]), "poi": poi, "lo": lo, "hi": hi,
            "poi_degenerate": bool(hi - lo < 1e-12), "ci_excludes_half": bool(lo > 0.5 or hi < 0.5)}


def decide(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with Holm-adjusted p-values over every tested row (the design's test, and the
    sign-flip test as its own family) and the verdicts."""
    rows = rows.copy()
    tested = rows["p_value"].notna().to_numpy()
    rows.loc[tested, "p_holm"] = holm(rows.loc[tested, "p_value"].to_numpy(float))
    flipped = rows["p_sign_flip"].notna().to_numpy()
    rows["p_sign_flip_holm"] = np.nan
    rows.loc[flipped, "p_sign_flip_holm"] = holm(rows.loc[flipped, "p_sign_flip"].to_numpy(float))
    significant = tested & (rows["p_holm"].to_numpy(float) < ALPHA)
    better = rows["diff"].to_numpy(float) > 0
    rows["verdict"] = np.where(~tested, TOO_FEW, np.where(
        significant, np.where(better, "better", "worse"), NOT_SIGNIFICANT))
    level = ALPHA / max(1, int(tested.sum()))
    power = [power_at(row, level) for row in rows.itertuples(index=False)]
    rows["power_level"] = level
    rows["power"], rows["seeds_for_80"], rows["power_note"], rows["seeds_for_80_welch"] = (
        [p[0] for p in power], [p[1] for p in power], [p[2] for p in power],
        [p[3] for p in power])
    return rows


def _sd(values: np.ndarray) -> float:
    """Run-to-run standard deviation (n - 1 in the denominator); NaN from one run."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")


def power_at(row: Any, level: float) -> tuple[float, float, str, float]:
    """(power at the observed difference, seeds per side for TARGET_POWER, why either is not
    computed or "", seeds per side Welch's test would need) of one comparison row, for its
    design's test at ``level``."""
    if not enough_runs(row.n_runs, row.n_runs_baseline):
        return np.nan, np.nan, (f"not computed: {TOO_FEW} ({row.n_runs} and "
                                f"{row.n_runs_baseline}; {MIN_RUNS} per side needed)"), np.nan
    if row.diff == 0:
        return np.nan, np.nan, "not computed: the observed difference is 0", np.nan
    spread = row.sd_diff > 0 if row.design == PAIRED else (row.sd > 0 or row.sd_baseline > 0)
    welch = (seeds_for_power(row.diff, row.sd, row.sd_baseline, level, least=MIN_RUNS)
             if row.sd > 0 or row.sd_baseline > 0 else None)
    welch_seeds = float(welch) if welch is not None else np.nan
    if not spread:
        what = ("no spread in the paired differences" if row.design == PAIRED
                else "no run-to-run spread on either side")
        return np.nan, np.nan, f"not computed: {what}", welch_seeds
    if row.design == PAIRED:
        power = paired_power(row.diff, row.sd_diff, row.n_runs, level)
        seeds = paired_seeds_for_power(row.diff, row.sd_diff, level, least=MIN_RUNS)
    else:
        power = welch_power(row.diff, row.sd, row.sd_baseline, row.n_runs,
                            row.n_runs_baseline, level)
        seeds = welch
    if seeds is None:
        return (power, np.nan, f"more than {MAX_SEEDS} seeds per side for {TARGET_POWER:.0%}",
                welch_seeds)
    return power, float(seeds), "", welch_seeds


def comparisons_table(matrices: Mapping[str, np.ndarray], ranked: list[str], baseline: str,
                      tasks: list[str], *, reps: int, seed: int,
                      paired: bool = False) -> pd.DataFrame:
    """Every algorithm but the baseline against it, on all tasks and on each task; ``paired``
    when row i of every matrix is the same seed."""
    rows = []
    for name in ranked:
        if name == baseline:
            continue
        for scope, columns in scopes(tasks):
            effect = compare(matrices[name][:, columns], matrices[baseline][:, columns],
                             reps=reps, seed=seed, paired=paired)
            rows.append({"algorithm": name, "baseline": baseline, "scope": scope, **effect})
    if not rows:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    return decide(pd.DataFrame(rows))[COMPARISON_COLUMNS]


def _signed(value: float) -> str:
    return f"{value:+.3f}"


def poi_text(row: Any) -> str:
    """'PoI 0.96 [0.84, 1.00]', with what a degenerate interval means."""
    if np.isnan(row.lo):
        return f"PoI {row.poi:.2f}"
    text = f"PoI {row.poi:.2f} [{row.lo:.2f}, {row.hi:.2f}]"
    if row.poi_degenerate:
        how = ("every run beats every baseline run" if row.poi == 1 else
               "every baseline run beats every run" if row.poi == 0 else "every pair ties")
        text += (f" (degenerate: {how}, so the bootstrap interval is a point and shows no "
                 "uncertainty)")
    return text


def verdict_sentence(row: Any, n_verdicts: int) -> str:
    """The answer for one comparison row, its verdict first and its effect sizes after."""
    subject = f"{row.algorithm} vs {row.baseline} on {row.scope}"
    if row.verdict == TOO_FEW:
        return (f"{subject}: no verdict, {TOO_FEW} ({row.n_runs} and {row.n_runs_baseline}; "
                f"{MIN_RUNS} per side needed). Point estimates only: difference of means "
                f"{_signed(row.diff)}, {poi_text(row)}; power not computed ({TOO_FEW}).")
    head = {"better": f"{row.algorithm} beats {row.baseline} on {row.scope}",
            "worse": f"{row.algorithm} is worse than {row.baseline} on {row.scope}"}.get(
        row.verdict, f"{subject}: {NOT_SIGNIFICANT}")
    return (f"{head}: difference of means {_signed(row.diff)} [{_signed(row.diff_lo)}, "
            f"{_signed(row.diff_hi)}] (normalised score, 95 % {TEST_NAMES[row.design]}), "
            f"Holm-adjusted p = {row.p_holm:.2g} over {n_verdicts} "
            f"verdict{'s' if n_verdicts != 1 else ''}; {design_text(row)}; {poi_text(row)}; "
            f"{power_text(row, n_verdicts)}.")


TEST_NAMES = {PAIRED: "paired t", WELCH: "Welch t"}
#: Below this seed-level correlation pairing is said to gain nothing.
WEAK_CORRELATION = 0.1


def design_text(row: Any) -> str:
    """Which test the verdict used and why, and for a paired one what pairing changed."""
    if row.design != PAIRED:
        return "unpaired (Welch): the two sides are not the same seeds"
    ratio = (f", the paired estimate's variance {row.variance_ratio:.2f} x Welch's"
             if not np.isnan(row.variance_ratio) else "")
    text = (f"paired by seed ({row.n_runs} pairs: the same seeds on both sides): seed-level "
            f"correlation {row.correlation:.2f}{ratio} (Welch p = {row.p_welch:.2g})")
    if np.isnan(row.correlation) or row.correlation < WEAK_CORRELATION:
        text += ", so pairing gains nothing here: the seeds' outcomes do not correlate"
    return text + "; " + sign_flip_text(row)


def sign_flip_text(row: Any) -> str:
    """'exact sign-flip p = 0.0625, Holm 0.12 (its smallest possible p with 5 pairs is
    0.0625)', or why it is absent."""
    if row.n_runs > EXACT_SIGN_FLIP_MAX:
        return f"no sign-flip test beyond {EXACT_SIGN_FLIP_MAX} pairs"
    floor = 2.0 / 2 ** row.n_runs
    text = f"exact sign-flip p = {row.p_sign_flip:.2g}, Holm {row.p_sign_flip_holm:.2g}"
    if floor >= ALPHA:
        text += (f" (it cannot reach {ALPHA:g} with {row.n_runs} pairs: its smallest p is "
                 f"{floor:.2g})")
    return text


def power_text(row: Any, n_verdicts: int) -> str:
    """'power at the observed difference 0.29 (two-sided paired t at 0.05/10 = 0.005,
    conservative: Bonferroni level), 9 seeds per side for 80 % (Welch's test: 17)', or why it
    is not computed."""
    if np.isnan(row.power):
        return f"power {row.power_note}"
    seeds = (f"{int(row.seeds_for_80)} seeds per side for {TARGET_POWER:.0%}"
             if not np.isnan(row.seeds_for_80) else row.power_note)
    if row.design == PAIRED:
        seeds += (f" (Welch's test: {int(row.seeds_for_80_welch)})"
                  if not np.isnan(row.seeds_for_80_welch) else " (Welch's test: more)")
    test = "paired t" if row.design == PAIRED else "Welch"
    return (f"power at the observed difference {row.power:.2f} (two-sided "
            f"{test} at {ALPHA:g}/{n_verdicts} = {row.power_level:.2g}, "
            f"conservative: Bonferroni level), {seeds}")


__all__ = [
    "ALL_TASKS", "COMPARISON_COLUMNS", "METRICS", "NOT_SIGNIFICANT", "PAIRED", "TEST_NAMES",
    "TOO_FEW", "WELCH", "aggregates_table", "compare", "comparisons_table", "decide",
    "design_text", "metric_intervals", "poi_text", "power_at", "power_text", "ranking_text",
    "scopes", "sign_flip_text", "verdict_sentence",
]
