"""Statistics of a report: normalisation, score matrices, rliable interval estimates.

The protocol follows rliable's pitfalls (Agarwal et al. 2021; reference/ecosystem.md §1.4,
§4.10):

* **Normalise per task, explicitly.** Each environment has one documented
  ``Normalisation(floor, ceiling, description)``; the text goes into the report.
* **Runs are the replication unit.** Test traces are averaged *within* (run, task) first, so a
  score matrix is ``(n_runs, n_tasks)`` with seeds on axis 0 and tasks on axis 1; traces never
  land on the runs axis (that makes CIs far too narrow).
* **Tasks** are the test sets of an environment: ``(env, test_set)``; when the pooled runs were
  trained on several datasets, the training dataset is part of the task (a seed trained on
  Majority Fast and one trained on Balanced are different tasks, not replications). Per-kind
  tasks ``(env, test_set, label)`` and per-cluster tasks give the breakdowns.
* **Rectangular matrices, no NaN.** Missing seeds are either trimmed (keep the seeds common to
  every algorithm and task; the dropped seeds and the cells that lacked them are reported) or
  refused (``SeedMismatchError`` naming every cell and its missing seeds).
* **Reproducible bootstrap.** rliable ignores ``random_state`` and draws from the global NumPy
  RNG, so every rliable call goes through ``seeded`` (seed right before the call, restore the
  caller's global state after), one call per algorithm: an algorithm's CI does not depend on
  which other algorithms are in the report.

An "algorithm" is a value of the grouping key (default ``sampler``; ``config_key`` when several
configurations share a sampler; or several columns such as ``["algo", "sampler"]``).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from plume.report.runs import read_score_file

#: Bootstrap repetitions: tests use a few hundred; ``--paper`` uses 50000 for the aggregates.
DEFAULT_REPS = 2000
PAPER_AGGREGATE_REPS = 50_000
METRICS = ["IQM", "mean", "median", "optimality_gap"]


class ReportStatsError(ValueError):
    """The scores cannot be pooled as asked (unknown environment, baseline absent, ...)."""


class SeedMismatchError(ReportStatsError):
    """``seeds="refuse"`` and some (algorithm, task) cells lack seeds that others have."""


# --------------------------------------------------------------------------- normalisation


@dataclass(frozen=True)
class Normalisation:
    """Affine map of a raw per-task score to ``(score - floor) / (ceiling - floor)``:
    0 at ``floor``, 1 at ``ceiling``."""

    floor: float
    ceiling: float
    description: str

    def __post_init__(self) -> None:
        if not self.ceiling > self.floor:
            raise ValueError(f"ceiling ({self.ceiling}) must exceed floor ({self.floor})")

    def __call__(self, values: Any) -> Any:
        return (values - self.floor) / (self.ceiling - self.floor)

    def text(self, env: str) -> str:
        return (f"`{env}`: normalised score = (QoE per chunk - {self.floor:g}) / "
                f"({self.ceiling:g} - {self.floor:g}). {self.description}")


TRACEBENCH = Normalisation(
    floor=1.0,
    ceiling=6.0,
    description=(
        "Floor 1.0 = a controller that always picks the lowest bitrate (1) and never stalls "
        "(QoE 1 per chunk); ceiling 6.0 = the highest bitrate (6) on every chunk with no stall "
        "(QoE 6 per chunk, the most any controller can get). So 0 = always-lowest-bitrate, "
        "1 = perfect; a score below 0 means the controller did worse than never leaving the "
        "lowest bitrate (each stall second costs 6). Assumes the default reward weights "
        "(quality_weight=1, rebuf_weight=6)."
    ),
)
#: Normalisation per environment name (``env.name`` of the run's config).
NORMALISATIONS: dict[str, Normalisation] = {"tracebench": TRACEBENCH}


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
    predate the file fall back to :data:`NORMALISATIONS`. Raises ``ReportStatsError`` for a row
    with neither."""
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
            if env not in NORMALISATIONS:
                raise ReportStatsError(
                    f"runs of environment {env!r} record no normalisation (no score.json) and "
                    f"none is built in (known: {sorted(NORMALISATIONS)}); pass normalisations=")
            normalised[legacy] = NORMALISATIONS[env](raw[legacy])
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
            texts[env] = NORMALISATIONS[env]
            continue
        info = read_score_file(recorded["run_dir"].iloc[0])
        anchors = {t: (float(g["floor"].iloc[0]), float(g["ceiling"].iloc[0]))
                   for t, g in recorded.groupby("test_set")}
        texts[env] = RecordedNormalisation(
            score_name=(info.get("score") or {}).get("unit", "score"),
            description=(info.get("normalisation") or {}).get("description", ""),
            anchors=anchors)
    return texts


# --------------------------------------------------------------------------- rliable wrapper


def seeded(call: Callable[..., Any], seed: int, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)`` right after ``np.random.seed(seed)``; the caller's global RNG
    state is restored afterwards. rliable's bootstrap ignores ``random_state`` and draws with
    ``np.random.choice`` (ecosystem.md §1.4), so this is the only way to make it reproducible."""
    state = np.random.get_state()
    try:
        np.random.seed(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # arch 7: random_state deprecated
            return call(*args, **kwargs)
    finally:
        np.random.set_state(state)


def interval_estimates(score_dict: Mapping[str, Any], func: Callable[..., np.ndarray], *,
                       reps: int, seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``rliable.library.get_interval_estimates`` (95 % percentile stratified bootstrap), one
    seeded call per key. A value that is a tuple of arrays uses rliable's
    ``StratifiedIndependentBootstrap`` (each array resampled on its own, e.g. for probability
    of improvement). Returns (point estimates, intervals of shape (2, n_outputs))."""
    from rliable import library

    points, intervals = {}, {}
    for key, value in score_dict.items():
        point, interval = seeded(library.get_interval_estimates, seed, {key: value}, func,
                                 reps=reps, confidence_interval_size=0.95)
        points[key] = np.atleast_1d(np.asarray(point[key], dtype=float))
        intervals[key] = np.asarray(interval[key], dtype=float).reshape(2, -1)
    return points, intervals


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean over all runs x tasks: ``scipy.stats.trim_mean(scores, 0.25)``."""
    return float(sps.trim_mean(np.asarray(scores, dtype=float), 0.25, axis=None))


def aggregate_metrics(scores: np.ndarray) -> np.ndarray:
    """[IQM, mean, median, optimality gap (gamma = 1, the normalised ceiling)] of a matrix."""
    from rliable import metrics

    return np.array([
        metrics.aggregate_iqm(scores),
        metrics.aggregate_mean(scores),
        metrics.aggregate_median(scores),
        metrics.aggregate_optimality_gap(scores, 1.0),
    ])


def _iqm_and_mean(scores: np.ndarray) -> np.ndarray:
    from rliable import metrics

    return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_mean(scores)])


def _iqm_per_frame(scores: np.ndarray) -> np.ndarray:
    """IQM at each point of the last axis of a (runs, tasks, frames) array (as rliable's
    sample-efficiency example, vectorised: identical to ``aggregate_iqm(scores[..., i])``)."""
    return sps.trim_mean(scores.reshape(-1, scores.shape[-1]), 0.25, axis=0)


def probability_of_improvement(x: np.ndarray, y: np.ndarray, *, reps: int,
                               seed: int) -> tuple[float, float, float]:
    """P(X > Y) averaged over tasks (rliable's Mann-Whitney form) with a 95 % CI from the
    stratified *independent* bootstrap (X and Y resampled separately; run counts may differ)."""
    from rliable import metrics

    points, intervals = interval_estimates(
        {"pair": (x, y)}, metrics.probability_of_improvement, reps=reps, seed=seed)
    return float(points["pair"][0]), float(intervals["pair"][0, 0]), float(intervals["pair"][1, 0])


def performance_profiles(matrices: Mapping[str, np.ndarray], taus: np.ndarray, *, reps: int,
                         seed: int) -> pd.DataFrame:
    """Score distributions (fraction of runs x tasks with score > tau) with 95 % CIs, via
    ``rliable.library.create_performance_profile``; one row per (algorithm, tau)."""
    from rliable import library

    rows = []
    for name, matrix in matrices.items():
        profile, cis = seeded(library.create_performance_profile, seed, {name: matrix}, taus,
                              reps=reps)
        low, high = np.asarray(cis[name]).reshape(2, -1)
        rows += [{"algorithm": name, "tau": float(t), "fraction": float(p), "lo": float(lo),
                  "hi": float(hi)} for t, p, lo, hi in zip(taus, profile[name], low, high)]
    return pd.DataFrame(rows, columns=["algorithm", "tau", "fraction", "lo", "hi"])


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
    ``normalisations``); ``matrices`` hold the final-progress scores."""

    group_by: list[str]
    group_label: str
    baseline: str | None
    algorithms: list[str]            # ranked by final IQM, best first
    tasks: list[str]
    task_info: pd.DataFrame          # task, env, dataset, test_set
    seeds: list[int]                 # rows of every matrix
    final_progress: float
    progress: list[float]            # the sample-efficiency grid
    matrices: dict[str, np.ndarray]  # {algorithm: (n_runs, n_tasks)} at final_progress
    cells: pd.DataFrame              # runs found / used per (algorithm, task)
    aggregates: pd.DataFrame
    poi: pd.DataFrame
    profiles: pd.DataFrame
    curves: pd.DataFrame
    breakdowns: pd.DataFrame         # per kind / per cluster: IQM and mean with CIs
    task_scores: pd.DataFrame        # mean per (algorithm, task[, kind]) without bootstrap
    normalisations: dict[str, Any]  # env -> Normalisation or RecordedNormalisation (.text)
    notes: list[str]
    reps: dict[str, int]
    seed: int
    run_dirs: dict[str, list[str]]   # runs pooled per algorithm

    @property
    def n_runs(self) -> int:
        return len(self.seeds)

    def runs_text(self) -> str:
        """"n = 5 runs per sampler" (what every figure states)."""
        return f"n = {self.n_runs} run{'s' if self.n_runs != 1 else ''} per {self.group_label}"

    def ranking_text(self) -> str:
        return ranking_text(self.aggregates)

    def answers(self) -> list[str]:
        return [poi_sentence(row, self.baseline) for row in self.poi.itertuples(index=False)]


def ranking_text(aggregates: pd.DataFrame) -> str:
    """"a > b = c" by IQM point estimate ("=" for equal estimates)."""
    parts = [str(aggregates["algorithm"].iloc[0])]
    for i in range(1, len(aggregates)):
        same = np.isclose(aggregates["IQM"].iloc[i], aggregates["IQM"].iloc[i - 1],
                          rtol=0, atol=1e-12)
        parts.append(("= " if same else "> ") + str(aggregates["algorithm"].iloc[i]))
    return " ".join(parts)


def poi_sentence(row: Any, baseline: str | None) -> str:
    """"X beats uniform on <task>: PoI 0.93 [0.81, 1.00]; the CI excludes 0.5." and its
    negative forms."""
    stats = f"PoI {row.poi:.2f} [{row.lo:.2f}, {row.hi:.2f}]"
    if row.lo > 0.5:
        return f"{row.algorithm} beats {baseline} on {row.scope}: {stats}; the CI excludes 0.5."
    if row.hi < 0.5:
        return (f"{row.algorithm} does not beat {baseline} on {row.scope} ({baseline} is "
                f"better): {stats}; the CI excludes 0.5.")
    return (f"{row.algorithm} does not clearly beat {baseline} on {row.scope}: {stats}; the CI "
            "includes 0.5 (no significant difference).")


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

    ``reps`` bootstrap repetitions for probability of improvement, profiles, curves and
    breakdowns; ``aggregate_reps`` (default ``reps``) for the IQM/mean/median/optimality-gap
    interval estimates; ``seed`` seeds every bootstrap. ``inventory`` (``RunInventory.runs``)
    lets a trimmed seed be explained ("run failed: ..."). Raises ``ReportStatsError`` when
    nothing can be pooled, the baseline is absent, or (``seeds="refuse"``) seeds differ."""
    if scores.empty:
        raise ReportStatsError("no completed runs: nothing to pool")
    group_by = [group_by] if isinstance(group_by, str) else list(group_by)
    unknown = [c for c in group_by if c not in scores.columns]
    if unknown:
        raise ReportStatsError(f"cannot group by {unknown}: choose among {list(scores.columns)}")
    group_label = "/".join(group_by)
    norms = dict(normalisations or {})
    aggregate_reps = reps if aggregate_reps is None else aggregate_reps
    notes: list[str] = []

    frame = normalise(scores, norms)
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
    frame = frame.assign(algorithm=_algorithm_names(frame, group_by))
    frame = frame.assign(task=_task_names(frame))
    task_info = (frame[["task", "env", "dataset", "test_set"]].drop_duplicates("task")
                 .sort_values("task").reset_index(drop=True))
    _check_unique_runs(frame, group_label)

    # progress grid common to every pooled run
    frame = frame.assign(progress=frame["progress"].round(6))
    grids = frame.groupby("run_dir")["progress"].agg(lambda p: frozenset(p.unique()))
    common = sorted(frozenset.intersection(*grids.tolist()))
    if not common:
        raise ReportStatsError("the pooled runs share no evaluation point (progress)")
    if len(set(grids.tolist())) > 1:
        notes.append(f"Runs were evaluated at different progress points; the curves use the "
                     f"{len(common)} points common to all.")
    final = common[-1]
    frame = frame[frame["progress"].isin(common)]

    # traces -> one score per (run, task, progress): runs are the replication unit
    keys = ["algorithm", "run_dir", "seed", "task", "progress"]
    per_task = (frame.groupby(keys, sort=True)
                .agg(score=("score", "mean"), raw=("raw", "mean"), env_steps=("env_steps", "median"),
                     n_traces=("score", "size"))
                .reset_index())
    per_task["seed"] = per_task["seed"].astype(int)
    at_final = per_task[per_task["progress"] == final]

    why = _why_missing(inventory, frame, group_by) if inventory is not None else None
    kept_seeds, tasks, seed_notes = seed_policy(at_final[["algorithm", "task", "seed"]], seeds,
                                                group_label=group_label, why=why)
    notes += seed_notes
    used = per_task[per_task["seed"].isin(kept_seeds) & per_task["task"].isin(tasks)]
    used_final = used[used["progress"] == final]
    cells = _cells(at_final, used_final)
    task_info = task_info[task_info["task"].isin(tasks)].reset_index(drop=True)

    algorithms = sorted(used["algorithm"].unique())
    base = _match_baseline(baseline, algorithms, frame, group_by) if baseline else None
    final_m = score_matrices(used_final, algorithms=algorithms, tasks=tasks, seeds=kept_seeds)
    if final_m.n_runs < 2:
        notes.append("Only one run per algorithm: every bootstrap CI collapses to a point.")

    # aggregates, ranked by IQM
    points, intervals = interval_estimates(final_m.matrices, aggregate_metrics,
                                           reps=aggregate_reps, seed=seed)
    agg_rows = []
    for name in algorithms:
        row: dict[str, Any] = {"algorithm": name, "n_runs": final_m.n_runs, "n_tasks": len(tasks)}
        for i, metric in enumerate(METRICS):
            row[metric] = float(points[name][i])
            row[f"{metric}_lo"] = float(intervals[name][0, i])
            row[f"{metric}_hi"] = float(intervals[name][1, i])
        agg_rows.append(row)
    aggregates = pd.DataFrame(agg_rows)
    aggregates = aggregates.sort_values(["IQM", "mean", "algorithm"],
                                        ascending=[False, False, True], kind="stable")
    aggregates.insert(0, "rank", np.arange(1, len(aggregates) + 1))
    aggregates = aggregates.reset_index(drop=True)
    ranked = aggregates["algorithm"].tolist()

    # probability of improvement over the baseline: all tasks, then each task
    scopes = _scopes(tasks)
    poi_rows = []
    if base is not None:
        if len(algorithms) == 1:
            notes.append(f"Only the baseline {base} was pooled: no probability of improvement.")
        for name in ranked:
            if name == base:
                continue
            for scope, columns in scopes:
                x = final_m.matrices[name][:, columns]
                y = final_m.matrices[base][:, columns]
                p, lo, hi = probability_of_improvement(x, y, reps=reps, seed=seed)
                poi_rows.append({
                    "algorithm": name, "baseline": base, "scope": scope, "n_tasks": len(columns),
                    "n_runs": x.shape[0], "n_runs_baseline": y.shape[0], "poi": p, "lo": lo,
                    "hi": hi, "ci_excludes_half": bool(lo > 0.5 or hi < 0.5),
                    "verdict": "better" if lo > 0.5 else "worse" if hi < 0.5 else "no difference",
                })
    poi = pd.DataFrame(poi_rows, columns=[
        "algorithm", "baseline", "scope", "n_tasks", "n_runs", "n_runs_baseline", "poi", "lo",
        "hi", "ci_excludes_half", "verdict"])

    # performance profiles
    if taus is None:
        values = np.concatenate([m.ravel() for m in final_m.matrices.values()])
        low = min(0.0, np.floor(values.min() * 10) / 10)
        high = max(1.0, np.ceil(values.max() * 10) / 10)
        taus = np.linspace(low, high, 101)
    profiles = performance_profiles({n: final_m.matrices[n] for n in ranked}, np.asarray(taus),
                                    reps=reps, seed=seed)

    curves = _curves(used, ranked, tasks, kept_seeds, common, reps, seed)
    breakdowns, kind_scores = _breakdowns(frame, ranked, tasks, kept_seeds, final, reps, seed)
    task_scores = pd.concat([_task_scores(used_final, ranked, tasks), kind_scores],
                            ignore_index=True)

    run_dirs = {name: sorted(used.loc[used["algorithm"] == name, "run_dir"].unique().tolist())
                for name in ranked}
    return Analysis(
        group_by=group_by, group_label=group_label, baseline=base, algorithms=ranked,
        tasks=tasks, task_info=task_info, seeds=kept_seeds, final_progress=final,
        progress=common, matrices={n: final_m.matrices[n] for n in ranked}, cells=cells,
        aggregates=aggregates, poi=poi, profiles=profiles, curves=curves,
        breakdowns=breakdowns, task_scores=task_scores,
        normalisations=normalisation_texts(frame, norms), notes=notes,
        reps={"aggregates": aggregate_reps, "poi": reps, "profiles": reps, "curves": reps,
              "breakdowns": reps},
        seed=seed, run_dirs=run_dirs,
    )


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


def _task_names(frame: pd.DataFrame) -> pd.Series:
    env = frame["env"].astype("string").fillna("?")
    dataset = frame["dataset"].astype("string").fillna("?")
    name = frame["test_set"].astype(str)
    if dataset.nunique() > 1:
        name = dataset + "->" + name
    if env.nunique() > 1:
        name = env + ":" + name
    return name.astype(str)


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
        return "its completed run has no scores for this task"

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
    """IQM over progress with 95 % CIs: all tasks, then each task when there are several."""
    cube = score_matrices(used, algorithms=ranked, tasks=tasks, seeds=seeds, progress=progress)
    steps = used.groupby("progress")["env_steps"].median()
    scopes = _scopes(tasks)
    rows = []
    for scope, columns in scopes:
        data = {name: cube.matrices[name][:, columns, :] for name in ranked}
        points, intervals = interval_estimates(data, _iqm_per_frame, reps=reps, seed=seed)
        for name in ranked:
            for i, p in enumerate(progress):
                rows.append({"algorithm": name, "scope": scope, "progress": p,
                             "env_steps": float(steps.get(p, np.nan)), "IQM": points[name][i],
                             "lo": intervals[name][0, i], "hi": intervals[name][1, i],
                             "n_runs": len(seeds), "n_tasks": len(columns)})
    return pd.DataFrame(rows)


ALL_TASKS = "all tasks"


def _scopes(tasks: list[str]) -> list[tuple[str, list[int]]]:
    """("all tasks", every column) then one scope per task; a single task is its own scope."""
    if len(tasks) == 1:
        return [(tasks[0], [0])]
    return [(ALL_TASKS, list(range(len(tasks))))] + [(t, [j]) for j, t in enumerate(tasks)]


def _breakdowns(frame: pd.DataFrame, ranked: list[str], tasks: list[str], seeds: list[int],
                final: float, reps: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per ground-truth kind (and per cluster when recorded): tasks (env, test_set, kind);
    for each kind the matrix is (runs, test sets holding that kind)."""
    rows, score_rows = [], []
    base = frame[(frame["progress"] == final) & frame["task"].isin(tasks)
                 & frame["seed"].astype(int).isin(seeds)]
    for grouping in ("label", "cluster"):
        if base[grouping].isna().all():
            continue
        sub = base[base[grouping].notna()]
        per = (sub.groupby(["algorithm", "run_dir", "seed", "task", grouping])
               .agg(score=("score", "mean"), raw=("raw", "mean"), n_traces=("score", "size"))
               .reset_index())
        per["seed"] = per["seed"].astype(int)
        for group in sorted(per[grouping].astype(str).unique()):
            mine = per[per[grouping] == group]
            group_tasks = sorted(t for t in mine["task"].unique())
            complete = mine.groupby(["algorithm", "task"])["seed"].nunique()
            if len(complete) != len(ranked) * len(group_tasks) or (complete != len(seeds)).any():
                continue  # a kind missing in some run's test set: not a rectangular matrix
            m = score_matrices(mine, algorithms=ranked, tasks=group_tasks, seeds=seeds)
            points, intervals = interval_estimates(m.matrices, _iqm_and_mean, reps=reps, seed=seed)
            for name in ranked:
                rows.append({
                    "grouping": grouping, "group": group, "algorithm": name,
                    "n_runs": len(seeds), "n_tasks": len(group_tasks),
                    "n_traces": int(mine.loc[mine["algorithm"] == name, "n_traces"].sum()
                                    // len(seeds)),
                    "IQM": points[name][0], "IQM_lo": intervals[name][0, 0],
                    "IQM_hi": intervals[name][1, 0], "mean": points[name][1],
                    "mean_lo": intervals[name][0, 1], "mean_hi": intervals[name][1, 1],
                })
            for (name, task), cell in mine.groupby(["algorithm", "task"]):
                score_rows.append({
                    "level": grouping, "task": task, "group": group, "algorithm": name,
                    "n_runs": len(cell), "mean": float(cell["score"].mean()),
                    "std": float(cell["score"].std(ddof=1)) if len(cell) > 1 else np.nan,
                    "raw_qoe_per_chunk": float(cell["raw"].mean()),
                })
    return pd.DataFrame(rows), _order(pd.DataFrame(score_rows), ranked)


def _task_scores(used_final: pd.DataFrame, ranked: list[str], tasks: list[str]) -> pd.DataFrame:
    rows = []
    for (name, task), cell in used_final.groupby(["algorithm", "task"]):
        rows.append({
            "level": "task", "task": task, "group": "", "algorithm": name,
            "n_runs": len(cell), "mean": float(cell["score"].mean()),
            "std": float(cell["score"].std(ddof=1)) if len(cell) > 1 else np.nan,
            "raw_qoe_per_chunk": float(cell["raw"].mean()),
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
    "DEFAULT_REPS",
    "METRICS",
    "NORMALISATIONS",
    "RecordedNormalisation",
    "PAPER_AGGREGATE_REPS",
    "TRACEBENCH",
    "Analysis",
    "Normalisation",
    "ReportStatsError",
    "ScoreMatrices",
    "SeedMismatchError",
    "aggregate_metrics",
    "analyse",
    "interval_estimates",
    "iqm",
    "normalise",
    "performance_profiles",
    "poi_sentence",
    "probability_of_improvement",
    "score_matrices",
    "seed_policy",
    "seeded",
]
