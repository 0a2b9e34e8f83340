"""Statistics of a report: normalisation, tasks, score matrices, and the analysis that puts
them together.

The protocol follows rliable's pitfalls (Agarwal et al. 2021; google-research/rliable
and its known issues) and states no more than the runs support:

* **Normalise per task, explicitly.** Each environment has one documented
  ``Normalisation(floor, ceiling, description)``; the text goes into the report.
* **Runs are the replication unit.** Test traces are averaged *within* (run, task) first, so a
  score matrix is ``(n_runs, n_tasks)`` with seeds on axis 0 and tasks on axis 1; traces never
  land on the runs axis (that makes CIs far too narrow).
* **Tasks are honestly separate** (``plume.report.tasks``): ground-truth kinds, else clusters,
  else test sets, pooled across test sets; saturated tasks are listed and left out of the
  comparisons. When the runs were trained on several datasets the dataset is part of the task.
* **Rectangular matrices, no NaN.** Missing seeds are either trimmed (keep the seeds common to
  every algorithm and task; the dropped seeds and the cells that lacked them are reported) or
  refused (``SeedMismatchError`` naming every cell and its missing seeds).
* **Intervals that cover** (``plume.report.inference``): Student t / Welch t for means and
  their differences, rliable's stratified bootstrap for IQM, median and probability of
  improvement with its measured coverage stated; none below ``MIN_RUNS`` runs per side.
* **Verdicts are corrected** for multiplicity (Holm-Bonferroni over one report) and carry
  their effect sizes (``plume.report.comparisons``).
* **Reproducible bootstrap.** Every rliable call is seeded (``plume.report.bootstrap``).

An "algorithm" is a value of the grouping key (default ``sampler``; ``config_key`` when several
configurations share a sampler; or several columns such as ``["algo", "sampler"]``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from plume.envs.registry import ENV_PACKAGES, get_env
from plume.report.bootstrap import (
    aggregate_metrics,
    interval_estimates,
    iqm,
    iqm_per_frame,
    performance_profiles,
    probability_of_improvement,
    seeded,
)
from plume.report.comparisons import (
    ALL_TASKS,
    METRICS,
    aggregates_table,
    comparisons_table,
    ranking_text,
    scopes,
    verdict_sentence,
)
from plume.report.compute import ComputeView, equal_compute, run_steps
from plume.report.inference import MIN_RUNS, enough_runs, mean_interval, too_few_text
from plume.report.runs import read_score_file
from plume.report.tail import run_cvars, worst_case
from plume.report.tasks import (
    RULE_TEXT,
    assign_tasks,
    complete_cells,
    composition,
    prefixes,
    saturated_tasks,
    task_table,
)

#: Bootstrap repetitions: tests use a few hundred; ``--paper`` uses 50000 for the aggregates.
DEFAULT_REPS = 2000
PAPER_AGGREGATE_REPS = 50_000


class ReportStatsError(ValueError):
    """The scores cannot be pooled as asked (unknown environment, baseline absent, ...)."""


class SeedMismatchError(ReportStatsError):
    """``seeds="refuse"`` and some (algorithm, task) cells lack seeds that others have."""


# --------------------------------------------------------------------------- normalisation


@dataclass(frozen=True)
class Normalisation:
    """Affine map of a raw per-task score to ``(score - floor) / (ceiling - floor)``:
    0 at ``floor``, 1 at ``ceiling``; ``score_name`` (the score's unit) names it in the text."""

    floor: float
    ceiling: float
    description: str
    score_name: str = "score"

    def __post_init__(self) -> None:
        if not self.ceiling > self.floor:
            raise ValueError(f"ceiling ({self.ceiling}) must exceed floor ({self.floor})")

    def __call__(self, values: Any) -> Any:
        return (values - self.floor) / (self.ceiling - self.floor)

    def text(self, env: str) -> str:
        return (f"`{env}`: normalised score = ({self.score_name} - {self.floor:g}) / "
                f"({self.ceiling:g} - {self.floor:g}). {self.description}")


def builtin_normalisation(env: str) -> Normalisation | None:
    """The fixed normalisation a built-in environment declares (its spec's ``anchors`` under
    default parameters, when both are fixed values), for runs that predate ``score.json``;
    None for an environment anchored on controllers or not built in (the report reads run
    directories and never imports a user's module)."""
    if env not in ENV_PACKAGES:
        return None
    spec = get_env(env)
    anchors = spec.anchors(spec.params())
    if anchors.controller_names():
        return None
    return Normalisation(float(anchors.floor), float(anchors.ceiling), anchors.description,
                         spec.score.unit)


@dataclass(frozen=True)
class RecordedNormalisation:
    """The normalisation runs wrote into their ``score.json``: floor and ceiling per test set
    (fixed values, or the mean score of a named classic controller on that test set)."""

    score_name: str
    description: str
    anchors: dict[str, tuple[float, float]]  # test set -> (floor, ceiling)

    def text(self, env: str) -> str:
        sets = "; ".join(f"{name}: floor {lo:.4g}, ceiling {hi:.4g}"
                         for name, (lo, hi) in sorted(self.anchors.items()))
        return (f"`{env}`: normalised score = ({self.score_name} - floor) / (ceiling - floor) "
                f"per test set ({sets}). {self.description}")


def normalise(scores: pd.DataFrame,
              normalisations: Mapping[str, Normalisation] | None = None) -> pd.DataFrame:
    """``scores`` (``load_scores``) with ``raw`` (the env's score) and ``score`` normalised.

    An environment in ``normalisations`` uses that fixed map. Otherwise every row uses the
    floor and ceiling its run recorded for its test set (``score.json``); rows of runs that
    predate the file fall back to :func:`builtin_normalisation`. Raises ``ReportStatsError``
    for a row with neither."""
    out = scores.copy()
    out["raw"] = out["score"].astype(float)
    raw = out["raw"].to_numpy()
    normalised = np.full(len(out), np.nan)
    floor = out["floor"].to_numpy(float) if "floor" in out else np.full(len(out), np.nan)
    ceiling = out["ceiling"].to_numpy(float) if "ceiling" in out else np.full(len(out), np.nan)
    envs = out["env"].astype(str).to_numpy()
    explicit = dict(normalisations or {})
    span = np.where(ceiling > floor, ceiling - floor, np.nan)
    for env in sorted(set(envs)):
        mask = envs == env
        if env in explicit:
            normalised[mask] = explicit[env](raw[mask])
            continue
        recorded = mask & np.isfinite(floor) & np.isfinite(ceiling)
        normalised[recorded] = ((raw - floor) / span)[recorded]
        legacy = mask & ~recorded
        if legacy.any():
            fixed = builtin_normalisation(env)
            if fixed is None:
                raise ReportStatsError(
                    f"runs of environment {env!r} record no normalisation (no score.json) and "
                    "its spec declares no fixed anchors; pass normalisations=")
            normalised[legacy] = fixed(raw[legacy])
    out["score"] = normalised
    return out


def normalisation_texts(frame: pd.DataFrame,
                        explicit: Mapping[str, Normalisation]) -> dict[str, Any]:
    """Per environment, the normalisation a report states: the explicit one, or what the
    pooled runs recorded (their anchors per test set and the spec's description)."""
    texts: dict[str, Any] = {}
    for env, rows in frame.groupby(frame["env"].astype(str)):
        if env in explicit:
            texts[env] = explicit[env]
            continue
        recorded = rows.dropna(subset=["floor", "ceiling"]) if "floor" in rows else rows.iloc[:0]
        if recorded.empty:
            texts[env] = builtin_normalisation(env)
            continue
        info = read_score_file(recorded["run_dir"].iloc[0])
        anchors = {t: (float(g["floor"].iloc[0]), float(g["ceiling"].iloc[0]))
                   for t, g in recorded.groupby("test_set")}
        texts[env] = RecordedNormalisation(
            score_name=(info.get("score") or {}).get("unit", "score"),
            description=(info.get("normalisation") or {}).get("description", ""),
            anchors=anchors)
    return texts


# --------------------------------------------------------------------------- score matrices


@dataclass
class ScoreMatrices:
    """Rectangular ``{algorithm: (n_runs, n_tasks[, n_progress])}`` matrices and how they
    were cut. Row i of every matrix is seed ``seeds[i]``; column j is task ``tasks[j]``."""

    matrices: dict[str, np.ndarray]
    tasks: list[str]
    seeds: list[int]
    progress: list[float] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    @property
    def n_runs(self) -> int:
        return len(self.seeds)


def score_matrices(table: pd.DataFrame, *, algorithms: Sequence[str] | None = None,
                   tasks: Sequence[str] | None = None, seeds: Sequence[int] | None = None,
                   progress: Sequence[float] | None = None) -> ScoreMatrices:
    """Matrices from a per-(run, task[, progress]) table with columns algorithm, task, seed,
    score (and progress when ``progress`` is given: then a third axis). The caller has
    already applied the seed policy (``seed_policy``); a missing cell here is an error."""
    algorithms = list(algorithms) if algorithms is not None else sorted(table["algorithm"].unique())
    tasks = list(tasks) if tasks is not None else sorted(table["task"].unique())
    seeds = list(seeds) if seeds is not None else sorted(int(s) for s in table["seed"].unique())
    keys = ["algorithm", "seed", "task"] + (["progress"] if progress is not None else [])
    shape = (len(seeds), len(tasks)) + ((len(progress),) if progress is not None else ())
    index = pd.MultiIndex.from_product(
        [seeds, tasks] + ([list(progress)] if progress is not None else []),
        names=keys[1:])
    matrices = {}
    for name in algorithms:
        rows = table[table["algorithm"] == name].set_index(keys[1:])["score"]
        values = rows.reindex(index).to_numpy(dtype=float)
        if np.isnan(values).any():
            raise ReportStatsError(f"{name}: {int(np.isnan(values).sum())} empty cell(s) in its "
                                   "score matrix after the seed policy (a bug)")
        matrices[name] = values.reshape(shape)
    return ScoreMatrices(matrices, tasks, seeds, list(progress or []))


def seed_policy(cells: pd.DataFrame, policy: str, *, group_label: str = "algorithm",
                why: Callable[[str, str, int], str] | None = None
                ) -> tuple[list[int], list[str], list[str]]:
    """Decide which seeds (and tasks) enter the matrices.

    ``cells``: one row per (algorithm, task, seed) that has a score. Returns (kept seeds,
    kept tasks, notes). ``trim`` keeps the seeds present in every (algorithm, task) cell and
    names what it dropped; ``refuse`` raises ``SeedMismatchError`` naming each cell and its
    missing seeds. A task that some algorithm never ran is dropped (trim) or refused.
    ``why(algorithm, task, seed)`` can explain a missing seed (e.g. "run failed: ...")."""
    if policy not in ("trim", "refuse"):
        raise ReportStatsError(f"seed policy must be 'trim' or 'refuse', got {policy!r}")
    algorithms = sorted(cells["algorithm"].unique())
    tasks = sorted(cells["task"].unique())
    have = {key: {int(s) for s in group["seed"]}
            for key, group in cells.groupby(["algorithm", "task"])}
    notes: list[str] = []
    missing_tasks = {t: [a for a in algorithms if (a, t) not in have] for t in tasks}
    missing_tasks = {t: a for t, a in missing_tasks.items() if a}
    if missing_tasks:
        text = "; ".join(f"task {t} has no run of {group_label} {', '.join(a)}"
                         for t, a in missing_tasks.items())
        if policy == "refuse" or len(missing_tasks) == len(tasks):
            raise SeedMismatchError(f"tasks differ between {group_label}s: {text}")
        notes.append(f"Dropped task(s) not run by every {group_label}: {text}.")
        tasks = [t for t in tasks if t not in missing_tasks]
    all_seeds = sorted(set().union(*(have[(a, t)] for a in algorithms for t in tasks)))
    missing = {(a, t): sorted(set(all_seeds) - have[(a, t)]) for a in algorithms for t in tasks}
    missing = {cell: seeds for cell, seeds in missing.items() if seeds}
    if not missing:
        return all_seeds, tasks, notes

    def describe(cell: tuple[str, str], seeds: list[int]) -> str:
        algorithm, task = cell
        parts = []
        for s in seeds:
            reason = why(algorithm, task, s) if why else ""
            parts.append(f"{s}" + (f" ({reason})" if reason else ""))
        return f"({algorithm}, {task}) lacks seed(s) {', '.join(parts)}"

    if policy == "refuse":
        lines = [describe(cell, seeds) for cell, seeds in missing.items()]
        raise SeedMismatchError(
            f"unequal seeds across {group_label}s and tasks (seeds found: {all_seeds}):\n  "
            + "\n  ".join(lines)
            + "\nre-run the missing jobs, or use seeds='trim' (--seeds trim) to keep only the "
            "seeds common to every cell")
    kept = [s for s in all_seeds if not any(s in seeds for seeds in missing.values())]
    if not kept:
        raise SeedMismatchError(
            f"no seed is common to every ({group_label}, task) cell: "
            + "; ".join(describe(cell, seeds) for cell, seeds in missing.items()))
    for s in sorted(set(all_seeds) - set(kept)):
        lacking = [cell for cell, seeds in missing.items() if s in seeds]
        reasons = [describe(cell, [s]) for cell in lacking]
        others = sorted(set(algorithms) - {a for a, _ in lacking})
        notes.append(
            f"Seed {s} dropped (trim): " + "; ".join(reasons)
            + (f"; its runs of {', '.join(others)} were set aside so every {group_label} "
               f"has the same seeds" if others else "") + ".")
    return kept, tasks, notes


# --------------------------------------------------------------------------- the analysis


@dataclass
class Analysis:
    """Everything a report states, as plain tables. Scores are normalised (see
    ``normalisations``); ``matrices`` hold the final-progress scores of the compared tasks."""

    group_by: list[str]
    group_label: str
    baseline: str | None
    algorithms: list[str]            # ranked by final IQM, best first
    tasks: list[str]                 # the compared tasks: the columns of every matrix
    task_info: pd.DataFrame          # every task: unit, test sets, role (compared/saturated)
    saturated: dict[str, float]      # saturated task -> the score every run has on it
    seeds: list[int]                 # rows of every matrix
    final_progress: float
    progress: list[float]            # the sample-efficiency grid
    matrices: dict[str, np.ndarray]  # {algorithm: (n_runs, n_tasks)} at final_progress
    cells: pd.DataFrame              # runs found / used per (algorithm, task)
    aggregates: pd.DataFrame
    poi: pd.DataFrame                # comparisons with the baseline: effect sizes, verdicts
    worst_case: pd.DataFrame         # per algorithm: mean over runs of each run's CVaR 10 %
    worst_case_poi: pd.DataFrame     # CVaR comparisons with the baseline (their own family)
    compute: ComputeView             # steps spent (scoring included), comparisons at equal compute
    profiles: pd.DataFrame
    curves: pd.DataFrame
    breakdowns: pd.DataFrame         # per test set / kind / cluster: mean with its interval
    task_scores: pd.DataFrame        # mean per (algorithm, task[, kind]) without intervals
    normalisations: dict[str, Any]  # env -> Normalisation or RecordedNormalisation (.text)
    notes: list[str]
    reps: dict[str, int]
    seed: int
    run_dirs: dict[str, list[str]]   # runs pooled per algorithm

    @property
    def n_runs(self) -> int:
        return len(self.seeds)

    @property
    def has_intervals(self) -> bool:
        """Whether the runs suffice (MIN_RUNS per side) for intervals and verdicts."""
        return enough_runs(self.n_runs)

    @property
    def n_verdicts(self) -> int:
        """How many verdicts the report states: the size of the Holm-Bonferroni family."""
        return int(self.poi["p_value"].notna().sum()) if not self.poi.empty else 0

    def runs_text(self) -> str:
        """"n = 5 runs per sampler" (what every figure states)."""
        return f"n = {self.n_runs} run{'s' if self.n_runs != 1 else ''} per {self.group_label}"

    def too_few_text(self) -> str:
        """'too few runs (3 per sampler; intervals and verdicts need 5, so 2 more)'."""
        return too_few_text(self.n_runs, self.group_label)

    def ranking_text(self) -> str:
        return ranking_text(self.aggregates)

    def answers(self) -> list[str]:
        return [verdict_sentence(row, self.n_verdicts)
                for row in self.poi.itertuples(index=False)]

    def worst_case_answers(self) -> list[str]:
        """The worst-case verdicts, Holm-corrected over their own family."""
        family = int(self.worst_case_poi["p_value"].notna().sum())
        return [verdict_sentence(row, family)
                for row in self.worst_case_poi.itertuples(index=False)]

    def equal_compute_answers(self) -> list[str]:
        """The verdicts at equal compute, Holm-corrected over their own family."""
        poi = self.compute.comparisons
        family = int(poi["p_value"].notna().sum())
        return [verdict_sentence(row, family) for row in poi.itertuples(index=False)]


def _pooled_rows(scores: pd.DataFrame, group_by: list[str],
                 norms: dict[str, Normalisation]) -> tuple[pd.DataFrame, list, list[str]]:
    """The normalised, usable rows with their algorithm and task, on the progress grid all
    runs share: ``(rows, common progress points, notes)``."""
    if scores.empty:
        raise ReportStatsError("no completed runs: nothing to pool")
    unknown = [c for c in group_by if c not in scores.columns]
    if unknown:
        raise ReportStatsError(f"cannot group by {unknown}: choose among {list(scores.columns)}")
    frame, notes = _usable_rows(normalise(scores, norms))
    frame = assign_tasks(frame.assign(algorithm=_algorithm_names(frame, group_by)))
    _check_unique_runs(frame, "/".join(group_by))
    frame, common, grid_notes = _common_progress(frame)
    return frame, common, notes + grid_notes


def analyse(
    scores: pd.DataFrame,
    *,
    group_by: str | Sequence[str] = "sampler",
    baseline: str | None = "uniform",
    seeds: str = "trim",
    reps: int = DEFAULT_REPS,
    aggregate_reps: int | None = None,
    seed: int = 0,
    normalisations: Mapping[str, Normalisation] | None = None,
    inventory: pd.DataFrame | None = None,
    taus: np.ndarray | None = None,
) -> Analysis:
    """The whole statistical content of a report from ``load_scores`` output.

    ``reps`` bootstrap repetitions for probability of improvement, profiles and curves;
    ``aggregate_reps`` (default ``reps``) for the IQM/median interval estimates; ``seed``
    seeds every bootstrap. ``inventory`` (``RunInventory.runs``) lets a trimmed seed be
    explained ("run failed: ..."). Raises ``ReportStatsError`` when nothing can be pooled, the
    baseline is absent, or (``seeds="refuse"``) seeds differ."""
    group_by = [group_by] if isinstance(group_by, str) else list(group_by)
    group_label = "/".join(group_by)
    norms = dict(normalisations or {})
    aggregate_reps = reps if aggregate_reps is None else aggregate_reps
    frame, common, notes = _pooled_rows(scores, group_by, norms)
    final = common[-1]

    per_task = _per_run_task(frame)
    at_final = per_task[per_task["progress"] == final]
    why = _why_missing(inventory, frame, group_by) if inventory is not None else None
    kept_seeds, tasks, seed_notes = seed_policy(at_final[["algorithm", "task", "seed"]], seeds,
                                                group_label=group_label, why=why)
    notes += seed_notes
    used = per_task[per_task["seed"].isin(kept_seeds) & per_task["task"].isin(tasks)]
    used_final = used[used["progress"] == final]
    cells = _cells(at_final, used_final)

    algorithms = sorted(used["algorithm"].unique())
    base = _match_baseline(baseline, algorithms, frame, group_by) if baseline else None
    saturated = saturated_tasks(used_final, tasks)
    compared = [t for t in tasks if t not in saturated] or tasks
    notes += _task_notes(saturated, compared, tasks)
    final_m = score_matrices(used_final, algorithms=algorithms, tasks=compared, seeds=kept_seeds)
    enough = enough_runs(final_m.n_runs)
    if not enough:
        notes.append(f"{too_few_text(final_m.n_runs, group_label).capitalize()}: the report "
                     "states point estimates only, no interval and no verdict.")

    aggregates = aggregates_table(final_m.matrices, reps=aggregate_reps, seed=seed)
    ranked = aggregates["algorithm"].tolist()
    matrices = {n: final_m.matrices[n] for n in ranked}
    poi = _baseline_comparisons(matrices, ranked, base, compared, reps, seed, notes)
    worst, worst_poi = worst_case(run_cvars(frame, final, compared, kept_seeds), ranked, base,
                                  kept_seeds, reps=reps, seed=seed)
    compute = equal_compute(run_steps(used, compared, kept_seeds), ranked, base, kept_seeds,
                            reps=reps, seed=seed)
    profiles = performance_profiles(matrices, _taus(matrices, taus), reps=reps, seed=seed,
                                    intervals=enough)
    curves = _curves(used, ranked, compared, kept_seeds, common, reps, seed)
    task_scores = pd.concat([_task_scores(used_final, ranked),
                             _within_test_sets(frame, ranked, kept_seeds, final)],
                            ignore_index=True)

    run_dirs = {name: sorted(used.loc[used["algorithm"] == name, "run_dir"].unique().tolist())
                for name in ranked}
    return Analysis(
        group_by=group_by, group_label=group_label, baseline=base, algorithms=ranked,
        tasks=compared, task_info=_task_info(frame, tasks, saturated), saturated=saturated,
        seeds=kept_seeds, final_progress=final, progress=common, matrices=matrices,
        cells=cells, aggregates=aggregates, poi=poi, worst_case=worst, worst_case_poi=worst_poi,
        compute=compute, profiles=profiles, curves=curves,
        breakdowns=_breakdowns(frame, ranked, kept_seeds, final), task_scores=task_scores,
        normalisations=normalisation_texts(frame, norms), notes=notes + compute.notes,
        reps={"aggregates": aggregate_reps, "poi": reps, "profiles": reps, "curves": reps},
        seed=seed, run_dirs=run_dirs,
    )


def _usable_rows(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Rows with a finite score and a recorded seed, and notes naming the runs left out."""
    notes = []
    bad = ~np.isfinite(frame["score"].to_numpy())
    if bad.any():
        runs = sorted(frame.loc[bad, "run_dir"].unique())
        notes.append(f"{int(bad.sum())} evaluation row(s) with a non-finite score were left out "
                     f"(runs: {', '.join(runs)}).")
        frame = frame[~bad]
    no_seed = frame["seed"].isna().to_numpy()
    if no_seed.any():
        runs = sorted(frame.loc[no_seed, "run_dir"].unique())
        notes.append(f"Run(s) without a recorded seed were left out: {', '.join(runs)}.")
        frame = frame[~no_seed]
        if frame.empty:
            raise ReportStatsError("no completed run records its seed (config.yaml `seed`)")
    return frame, notes


def _common_progress(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[float], list[str]]:
    """Rows at the evaluation points every pooled run has, those points, and a note when
    runs were evaluated at different points."""
    frame = frame.assign(progress=frame["progress"].round(6))
    grids = frame.groupby("run_dir")["progress"].agg(lambda p: frozenset(p.unique()))
    common = sorted(frozenset.intersection(*grids.tolist()))
    if not common:
        raise ReportStatsError("the pooled runs share no evaluation point (progress)")
    notes = []
    if len(set(grids.tolist())) > 1:
        notes.append(f"Runs were evaluated at different progress points; the curves use the "
                     f"{len(common)} points common to all.")
    return frame[frame["progress"].isin(common)], common, notes


def _per_run_task(frame: pd.DataFrame) -> pd.DataFrame:
    """Traces -> one score per (run, task, progress): runs are the replication unit. A cell
    whose run lacks some test set of the task is dropped (the seed policy then reports it)."""
    keys = ["algorithm", "run_dir", "seed", "task", "progress"]
    if "scoring_steps" not in frame:  # a score table built by hand: no sampler rollouts
        frame = frame.assign(scoring_steps=0.0)
    per_task = (frame.groupby(keys, sort=True)
                .agg(score=("score", "mean"), raw=("raw", "mean"),
                     env_steps=("env_steps", "median"),
                     scoring_steps=("scoring_steps", "median"), n_traces=("score", "size"),
                     n_test_sets=("test_set", "nunique"))
                .reset_index())
    per_task["seed"] = per_task["seed"].astype(int)
    return per_task[complete_cells(per_task, frame)]


def _task_notes(saturated: dict[str, float], compared: list[str], tasks: list[str]) -> list[str]:
    if not saturated:
        return []
    listed = ", ".join(f"{task} ({value:.3f})" for task, value in saturated.items())
    if len(compared) == len(tasks):
        return [(f"Every task is saturated ({listed}): every run of every algorithm scores "
                 "the same, so the comparisons below cannot separate the algorithms.")]
    return [(f"Saturated task(s) left out of the comparisons (every run of every algorithm "
             f"scores the same): {listed}.")]


def _taus(matrices: Mapping[str, np.ndarray], taus: np.ndarray | None) -> np.ndarray:
    """The profile thresholds: given, or 101 points spanning [0, 1] and every score."""
    if taus is not None:
        return np.asarray(taus)
    values = np.concatenate([m.ravel() for m in matrices.values()])
    low = min(0.0, np.floor(values.min() * 10) / 10)
    high = max(1.0, np.ceil(values.max() * 10) / 10)
    return np.linspace(low, high, 101)


def _baseline_comparisons(matrices: dict[str, np.ndarray], ranked: list[str],
                          base: str | None, tasks: list[str], reps: int, seed: int,
                          notes: list[str]) -> pd.DataFrame:
    """The comparisons with the baseline (empty without one, with a note when the baseline
    is the only algorithm)."""
    if base is None:
        return comparisons_table({}, [], "", tasks, reps=reps, seed=seed)
    if len(ranked) == 1:
        notes.append(f"Only the baseline {base} was pooled: no comparison.")
    # Row i of every matrix is seed seeds[i] (the seed policy): the two sides are pairs.
    return comparisons_table(matrices, ranked, base, tasks, reps=reps, seed=seed, paired=True)


def _task_info(frame: pd.DataFrame, tasks: list[str], saturated: dict[str, float]
               ) -> pd.DataFrame:
    info = task_table(frame)
    info = info[info["task"].isin(tasks)].reset_index(drop=True)
    info["role"] = ["saturated" if t in saturated else "compared" for t in info["task"]]
    info["saturated_at"] = info["task"].map(saturated)
    return info
def _algorithm_names(frame: pd.DataFrame, group_by: list[str]) -> pd.Series:
    parts = [frame[c].astype("string").fillna("?") for c in group_by]
    names = parts[0]
    for part in parts[1:]:
        names = names + "/" + part
    if "config_key" in group_by:
        short = _short_keys(sorted(frame["config_key"].astype(str).unique()))
        names = names.map(lambda n: "/".join(short.get(p, p) for p in n.split("/")))
    return names.astype(str)


def _split_overrides(key: str) -> list[str]:
    """Hydra's ``a=1,b=[x,y],c=2`` -> ['a=1', 'b=[x,y]', 'c=2'] (commas inside brackets kept)."""
    return [p for p in re.split(r",(?![^\[\]]*\])", key) if p]


def _short_keys(keys: list[str]) -> dict[str, str]:
    """Config keys with the overrides they all share removed ('sampler=uniform' instead of
    the whole folder name); unchanged when that would make two keys equal."""
    if len(keys) < 2:
        return {k: k for k in keys}
    tokens = {k: _split_overrides(k) for k in keys}
    shared = set.intersection(*(set(t) for t in tokens.values()))
    short = {k: ",".join(t for t in tokens[k] if t not in shared) or k for k in keys}
    return short if len(set(short.values())) == len(keys) else {k: k for k in keys}


def _check_unique_runs(frame: pd.DataFrame, group_label: str) -> None:
    runs = frame[["algorithm", "task", "seed", "run_dir", "config_key"]].drop_duplicates()
    counts = runs.groupby(["algorithm", "task", "seed"])["run_dir"].nunique()
    clashes = counts[counts > 1]
    if clashes.empty:
        return
    lines = []
    for algorithm, task, s in clashes.head(10).index:
        keys = runs[(runs["algorithm"] == algorithm) & (runs["task"] == task)
                    & (runs["seed"] == s)]["config_key"].tolist()
        lines.append(f"{group_label} {algorithm}, task {task}, seed {s}: {keys}")
    raise ReportStatsError(
        f"several configurations share a {group_label}, so their runs would be pooled as one "
        "algorithm:\n  " + "\n  ".join(lines)
        + "\ngroup them apart with group_by='config_key' (plume-report --group-by config_key), "
        "or report each configuration separately")


def _match_baseline(baseline: str, algorithms: list[str], frame: pd.DataFrame,
                    group_by: list[str]) -> str:
    if baseline in algorithms:
        return baseline
    if "config_key" in group_by:  # a run folder's full name: its (shortened) algorithm
        named = set(frame.loc[frame["config_key"].astype(str) == baseline, "algorithm"])
        if len(named) == 1:
            return named.pop()
    if group_by != ["sampler"]:
        hits = [a for a in algorithms
                if set(frame.loc[frame["algorithm"] == a, "sampler"].astype(str)) == {baseline}]
        if len(hits) == 1:
            return hits[0]
    raise ReportStatsError(
        f"baseline {baseline!r} is not among the pooled {'/'.join(group_by)} values; present: "
        + ", ".join(algorithms) + " (choose one with --baseline)")


def _why_missing(inventory: pd.DataFrame, frame: pd.DataFrame,
                 group_by: list[str]) -> Callable[[str, str, int], str]:
    """Explain a missing (algorithm, task, seed): a failed/unfinished run of that algorithm
    and seed, or a completed run that lacks that test set, or no run at all."""
    inv = inventory.copy()
    if any(column not in inv.columns for column in group_by):
        return lambda algorithm, task, s: ""
    inv["algorithm"] = _algorithm_names(inv, group_by)

    def why(algorithm: str, task: str, s: int) -> str:
        runs = inv[(inv["algorithm"] == algorithm) & (inv["seed"] == s)]
        if runs.empty:
            return "no run directory"
        other = runs[runs["state"] != "completed"]
        if not other.empty:
            run = other.iloc[0]
            error = f": {run['error']}" if isinstance(run["error"], str) and run["error"] else ""
            return f"run {run['state']}{_clip(error)}"
        return "its completed run lacks (some of) the test traces of this task"

    return why


def _clip(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cells(found: pd.DataFrame, used: pd.DataFrame) -> pd.DataFrame:
    f = found.groupby(["algorithm", "task"])["seed"].agg(
        runs_found="nunique", seeds_found=lambda s: " ".join(map(str, sorted(set(s)))))
    u = used.groupby(["algorithm", "task"])["seed"].agg(runs_used="nunique")
    cells = f.join(u, how="left").reset_index()
    cells["runs_used"] = cells["runs_used"].fillna(0).astype(int)
    return cells[["algorithm", "task", "runs_found", "runs_used", "seeds_found"]]


def _curves(used: pd.DataFrame, ranked: list[str], tasks: list[str], seeds: list[int],
            progress: list[float], reps: int, seed: int) -> pd.DataFrame:
    """IQM over progress, all tasks then each task when there are several; 95 % bootstrap
    bands only from MIN_RUNS runs (NaN otherwise)."""
    cube = score_matrices(used, algorithms=ranked, tasks=tasks, seeds=seeds, progress=progress)
    steps = used.groupby("progress")["env_steps"].median()
    rows = []
    for scope, columns in scopes(tasks):
        data = {name: cube.matrices[name][:, columns, :] for name in ranked}
        if enough_runs(len(seeds)):
            points, intervals = interval_estimates(data, iqm_per_frame, reps=reps, seed=seed)
        else:
            points = {name: iqm_per_frame(m) for name, m in data.items()}
            intervals = {name: np.full((2, len(progress)), np.nan) for name in data}
        for name in ranked:
            for i, p in enumerate(progress):
                rows.append({"algorithm": name, "scope": scope, "progress": p,
                             "env_steps": float(steps.get(p, np.nan)), "IQM": points[name][i],
                             "lo": intervals[name][0, i], "hi": intervals[name][1, i],
                             "n_runs": len(seeds), "n_tasks": len(columns)})
    return pd.DataFrame(rows)


#: Breakdowns: grouping -> what its groups are described by (first one recorded).
BREAKDOWNS = {"test_set": ("label", "cluster"), "label": ("cluster",), "cluster": ("label",)}
BREAKDOWN_COLUMNS = ["grouping", "group", "algorithm", "n_runs", "n_traces", "mean", "mean_lo",
                     "mean_hi", "saturated", "members"]


def _breakdowns(frame: pd.DataFrame, ranked: list[str], seeds: list[int],
                final: float) -> pd.DataFrame:
    """Final mean score per test set, per ground-truth kind and per cluster (each pooled
    across the test sets that hold it: one value per run), with a Student-t interval from
    MIN_RUNS runs, and what each group is made of ("slow_high-var 100 %")."""
    base = frame[(frame["progress"] == final) & frame["seed"].astype(int).isin(seeds)
                 & frame["algorithm"].isin(ranked)]
    tables = [_breakdown(base, grouping, members, ranked, seeds)
              for grouping, members in BREAKDOWNS.items() if base[grouping].notna().any()]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(
        columns=BREAKDOWN_COLUMNS)


def _breakdown(base: pd.DataFrame, grouping: str, members: tuple[str, ...],
               ranked: list[str], seeds: list[int]) -> pd.DataFrame:
    sub = base[base[grouping].notna()]
    sub = sub.assign(group=prefixes(sub) + sub[grouping].astype(str), seed=sub["seed"].astype(int))
    described = next((composition(sub, "group", m) for m in members if sub[m].notna().any()), {})
    per = (sub.groupby(["algorithm", "seed", "group"])
           .agg(score=("score", "mean"), n_traces=("score", "size"),
                n_test_sets=("test_set", "nunique"))
           .reset_index().rename(columns={"group": "task"}))
    per = per[complete_cells(per, sub.assign(task=sub["group"]))]
    rows = []
    for group, mine in per.groupby("task", sort=True):
        if len(mine) != len(ranked) * len(seeds):
            continue  # a group missing in some run: not comparable across runs
        flat = bool(saturated_tasks(mine, [group]))
        for name in ranked:
            runs = mine[mine["algorithm"] == name].sort_values("seed")
            mean, lo, hi = runs["score"].mean(), np.nan, np.nan
            if enough_runs(len(runs)):
                mean, lo, hi = mean_interval(runs["score"].to_numpy())
            rows.append({"grouping": grouping, "group": group, "algorithm": name,
                         "n_runs": len(runs), "n_traces": int(runs["n_traces"].iloc[0]),
                         "mean": float(mean), "mean_lo": float(lo), "mean_hi": float(hi),
                         "saturated": flat, "members": described.get(group, "")})
    return pd.DataFrame(rows, columns=BREAKDOWN_COLUMNS)


def _task_scores(used_final: pd.DataFrame, ranked: list[str]) -> pd.DataFrame:
    rows = []
    for (name, task), cell in used_final.groupby(["algorithm", "task"]):
        rows.append({
            "level": "task", "task": task, "group": "", "algorithm": name,
            "n_runs": len(cell), "mean": float(cell["score"].mean()),
            "std": float(cell["score"].std(ddof=1)) if len(cell) > 1 else np.nan,
            "raw_score": float(cell["raw"].mean()),
        })
    return _order(pd.DataFrame(rows), ranked)


def _within_test_sets(frame: pd.DataFrame, ranked: list[str], seeds: list[int],
                      final: float) -> pd.DataFrame:
    """Mean over runs per (test set, kind) and (test set, cluster), no intervals: where a
    pooled task's score comes from."""
    base = frame[(frame["progress"] == final) & frame["seed"].astype(int).isin(seeds)
                 & frame["algorithm"].isin(ranked)]
    base = base.assign(test_set_name=prefixes(base) + base["test_set"].astype(str))
    rows = []
    for grouping in ("label", "cluster"):
        sub = base[base[grouping].notna()]
        per = (sub.groupby(["algorithm", "seed", "test_set_name", grouping])
               .agg(score=("score", "mean"), raw=("raw", "mean")).reset_index())
        for (name, test_set, group), cell in per.groupby(["algorithm", "test_set_name",
                                                          grouping]):
            rows.append({
                "level": grouping, "task": test_set, "group": str(group), "algorithm": name,
                "n_runs": len(cell), "mean": float(cell["score"].mean()),
                "std": float(cell["score"].std(ddof=1)) if len(cell) > 1 else np.nan,
                "raw_score": float(cell["raw"].mean()),
            })
    return _order(pd.DataFrame(rows), ranked)


def _order(frame: pd.DataFrame, ranked: list[str]) -> pd.DataFrame:
    if frame.empty:
        return frame
    rank = {name: i for i, name in enumerate(ranked)}
    frame = frame.assign(_rank=frame["algorithm"].map(rank))
    frame = frame.sort_values(["level", "task", "group", "_rank"], kind="stable")
    return frame.drop(columns="_rank").reset_index(drop=True)


__all__ = [
    "ALL_TASKS",
    "DEFAULT_REPS",
    "METRICS",
    "MIN_RUNS",
    "PAPER_AGGREGATE_REPS",
    "RULE_TEXT",
    "Analysis",
    "Normalisation",
    "RecordedNormalisation",
    "ReportStatsError",
    "ScoreMatrices",
    "SeedMismatchError",
    "aggregate_metrics",
    "analyse",
    "builtin_normalisation",
    "interval_estimates",
    "iqm",
    "normalise",
    "performance_profiles",
    "probability_of_improvement",
    "score_matrices",
    "seed_policy",
    "seeded",
    "verdict_sentence",
]
