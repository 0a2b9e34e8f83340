"""``python -m experiments NAME --seeds auto``: seeds added in rounds until every comparison of
the figure is decided, by the group-sequential design of ``plume.report.sequential``.

A figure's comparisons are its groups' curves against their baseline curve (what each group's
report compares). Round 1 trains seeds 0-4 of every curve (and the controllers); after each
round every undecided comparison's statistic is computed from its two curves' completed runs
exactly as the group's report computes its verdict (``plume.report.analyse`` on those runs:
the same normalisation, tasks and per-run scores; Welch's t over all compared tasks, mapped to
z by its p-value) and compared with the look's boundary. The next round adds seeds only to the
curves of comparisons still undecided (a comparison involves its curve and the baseline); it
stops when all are decided or at the cap. Each look uses exactly the seeds ``0..n_k - 1`` of
both curves, so runs left on disk by an earlier command never enter a look early, and a
re-run replays the rounds from the runs on disk, training only what is missing.

This module is the design and its looks; the command that trains and draws the rounds is
``experiments.runner.run_auto`` (beside ``run``, whose job lists, ``experiments.jobs``, it picks
from).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from experiments.catalog import TRAINING_FIGURES, Figure, Group
from experiments.curves import RunRoles
from experiments.jobs import Job, figure_jobs
from plume.report import analyse, load_scores, scan_runs
from plume.report.inference import MIN_RUNS
from plume.report.sequential import (
    CONTINUE,
    REJECTED,
    Design,
    default_looks,
    z_from_p,
)

SEQUENTIAL_FILE = "sequential.json"
#: Seeds per curve at the last look unless ``--seeds-cap`` says otherwise.
DEFAULT_CAP = 20
#: Bootstrap repetitions of the analysis behind a statistic: the Welch test does not use them.
STATISTIC_REPS = 50


@dataclass(frozen=True)
class Comparison:
    """One verdict the design decides: ``curve`` against ``baseline`` in group ``group``."""

    group: str
    curve: str
    baseline: str

    @property
    def name(self) -> str:
        return f"{self.group}: {self.curve} vs {self.baseline}"

    def curves(self) -> set[tuple[str, str]]:
        return {(self.group, self.curve), (self.group, self.baseline)}


def figure_comparisons(figure: Figure) -> list[Comparison]:
    """Every curve of every group against the group's baseline."""
    return [Comparison(g.key, c.label, g.baseline) for g in figure.groups for c in g.curves
            if c.label != g.baseline]


def looks_of(cap: int, rounds: Sequence[int] | None = None) -> tuple[int, ...]:
    """The runs per side at each look: ``rounds`` up to the cap, the cap last (default 5, 10,
    15, ... up to the cap)."""
    if rounds is None:
        return default_looks(cap)
    kept = sorted({int(n) for n in rounds if int(n) < cap})
    return (*kept, cap)


def check_options(name: str, seeds: int | str | None, cap: int | None,
                  rounds: Sequence[int] | None, render_only: bool = False) -> str | None:
    """Why the command line's ``--seeds`` options cannot run for figure ``name`` (None: they
    can): ``--seeds-cap`` and ``--seeds-rounds`` belong to ``--seeds auto``, which needs a
    training figure and trains what its rounds lack."""
    if seeds != "auto":
        given = [o for o, v in (("--seeds-cap", cap), ("--seeds-rounds", rounds)) if v]
        return f"{' and '.join(given)} only with --seeds auto" if given else None
    cap = DEFAULT_CAP if cap is None else cap
    if render_only:
        return ("--seeds auto replays its rounds from the runs on disk and trains only what "
                "they lack; --render-only does not go with it")
    if name not in TRAINING_FIGURES:
        return (f"--seeds auto sizes the seeds of one training figure's comparisons; {name} "
                f"has none (choose one of {', '.join(TRAINING_FIGURES)})")
    if cap < MIN_RUNS:
        return f"--seeds-cap must be at least {MIN_RUNS} (the report's minimum per side)"
    if rounds is not None and min(rounds) < MIN_RUNS:
        return f"--seeds-rounds must start at {MIN_RUNS} runs per side or more"
    return None


def next_curves(comparisons: Sequence[Comparison],
                decisions: Mapping[Comparison, str]) -> set[tuple[str, str]]:
    """The (group, curve label) pairs the next round adds seeds to: those of comparisons
    still undecided."""
    return {curve for c in comparisons if decisions.get(c, CONTINUE) == CONTINUE
            for curve in c.curves()}


def round_jobs(name: str, profile: str, seeds: range, curves: set[tuple[str, str]],
               controllers: bool) -> list[Job]:
    """The jobs of one round: ``seeds`` of ``curves``, and the figure's controllers when
    ``controllers`` (the first round)."""
    jobs = figure_jobs(name, profile, seeds.stop)
    chosen = [j for j in jobs if (j.config == "eval" and controllers) or (
        j.config == "train" and j.seed in seeds and (j.group, j.label) in curves)]
    return list(dict.fromkeys(chosen))


def pair_statistic(group: Group, comparison: Comparison, roles: RunRoles, n: int) -> dict:
    """The comparison's Welch test at a look of ``n`` runs per side, computed by the report
    (``analyse`` on the two curves' runs with seeds below ``n``): n, diff, p and z."""
    from experiments.curves import report_grouping

    pair = {run: role for run, role in roles.items()
            if role[0] == group.key and role[1] in (comparison.curve, comparison.baseline)}
    empty = {"n": 0, "diff": float("nan"), "p": float("nan"), "z": float("nan")}
    if not pair:
        return empty
    scores = load_scores(scan_runs(list(pair)))
    scores = scores[pd.to_numeric(scores["seed"], errors="coerce") < n]
    if scores.empty:
        return empty
    group_by, baseline = report_grouping(group, pair)
    analysis = analyse(scores, group_by=group_by, baseline=baseline, reps=STATISTIC_REPS)
    if analysis.poi.empty:
        return empty
    row = analysis.poi.iloc[0]  # the scope of every compared task
    return {"n": analysis.n_runs, "diff": float(row["diff"]), "p": float(row["p_value"]),
            "z": z_from_p(row["diff"], row["p_value"])}


def look_statistics(figure: Figure, comparisons: Sequence[Comparison], roles: RunRoles,
                    n: int) -> dict[Comparison, dict]:
    """``pair_statistic`` of each of ``comparisons`` at a look of ``n`` runs per side."""
    groups = {g.key: g for g in figure.groups}
    return {c: pair_statistic(groups[c.group], c, roles, n) for c in comparisons}


def decide_look(plan: Design, look: int, stats: Mapping[Comparison, dict]
                ) -> dict[Comparison, str]:
    """The design's decision for each comparison at ``look`` (1 = the first)."""
    decided = plan.decide(look, {c.name: s["z"] for c, s in stats.items()})
    return {c: decided[c.name] for c in stats}


def _direction(stat: dict) -> str:
    return "better" if stat["diff"] > 0 else "worse"


def round_line(look: int, plan: Design, stats: Mapping[Comparison, dict],
               decisions: Mapping[Comparison, str]) -> str:
    """One line: the look, its boundary, each comparison's z and decision."""
    parts = [f"{c.name} z = {s['z']:+.2f} (n = {s['n']}, diff {s['diff']:+.3f}): "
             + (f"{REJECTED}, {_direction(s)}" if decisions[c] == REJECTED else decisions[c])
             for c, s in stats.items()]
    return (f"round {look}/{len(plan.looks)} ({plan.looks[look - 1]} runs per side, boundary "
            f"|z| >= {plan.boundaries[look - 1]:.3f}): " + "; ".join(parts))


def design_lines(plan: Design, comparisons: Sequence[Comparison]) -> list[str]:
    """The design as printed by ``--dry-run`` and at the start of a run."""
    looks = [f"  look {k}: {n} runs per side, reject when |z| >= {b:.3f} (error spent by "
             f"then {s:.2g})" for k, (n, b, s) in enumerate(zip(plan.looks, plan.boundaries,
                                                                plan.spent), 1)]
    return [(f"sequential design: {len(comparisons)} comparison(s), family-wise error "
             f"{plan.alpha:g} split by Bonferroni (each at {plan.alpha:g}/{plan.comparisons} = "
             f"{plan.level:.4g}); Lan-DeMets O'Brien-Fleming-type alpha spending over n/"
             f"{plan.cap}; z = the paired t of the two curves' seeds 0..n-1 through its p-value"),
            *looks, "comparisons: " + "; ".join(c.name for c in comparisons)]


def _number(value: float) -> float | None:
    """JSON has no NaN or infinity: None for those."""
    return float(value) if np.isfinite(value) else None


def round_record(look: int, seeds: range, jobs: int, plan: Design,
                 stats: Mapping[Comparison, dict], decisions: Mapping[Comparison, str]) -> dict:
    """What ``sequential.json`` keeps of one round: its seeds, ``jobs`` planned, the boundary
    and each comparison's statistic and decision."""
    return {"look": look, "runs_per_side": seeds.stop, "seeds": [seeds.start, seeds.stop - 1],
            "jobs": jobs, "boundary": plan.boundaries[look - 1],
            "statistics": [{"comparison": c.name, "group": c.group, "curve": c.curve,
                            "baseline": c.baseline, "n": s["n"], "diff": _number(s["diff"]),
                            "p": _number(s["p"]), "z": _number(s["z"]),
                            "decision": decisions[c],
                            "direction": _direction(s) if decisions[c] == REJECTED else None}
                           for c, s in stats.items()]}


def final_decisions(record: dict) -> dict[str, dict]:
    """Each comparison's last decision in ``record`` with the look that made it."""
    final: dict[str, dict] = {}
    for entry in record["rounds"]:
        for stat in entry["statistics"]:
            final[stat["comparison"]] = {"decision": stat["decision"],
                                         "direction": stat["direction"], "look": entry["look"],
                                         "runs_per_side": entry["runs_per_side"],
                                         "z": stat["z"]}
    return final


def summary_lines(record: dict) -> list[str]:
    """The section ``summary.md`` gets: the design, every round, the decisions, how to read
    them beside the group reports."""
    plan = record["design"]
    lines = ["## Sequential seeds (--seeds auto)", "",
             (f"Design: {plan['method']}. Family-wise error {plan['alpha']:g} over "
              f"{plan['comparisons']} comparison(s), each at {plan['level_per_comparison']:.4g};"
              f" looks after n runs per side, information fraction n / {plan['cap']}. "
              "'rejected' = a difference (better or worse than the baseline), decided at "
              "that look; 'continue' = the next round adds seeds to both curves; 'no "
              "difference at the cap' = not rejected by the last look. "
              f"{record['stopped']}."), "",
             "| look | runs per side | boundary on abs(z) | error spent by then, one comparison |",
             "|---:|---:|---:|---:|"]
    lines += [f"| {k['look']} | {k['runs_per_side']} | {k['boundary']:.3f} | "
              f"{k['alpha_spent']:.2g} |" for k in plan["looks"]]
    lines += ["", ("| round | runs per side | comparison | difference of means | z (paired t) | "
                   "decision |"), "|---:|---:|---|---:|---:|---|"]
    for entry in record["rounds"]:
        for s in entry["statistics"]:
            diff = "" if s["diff"] is None else f"{s['diff']:+.3f}"
            z = "" if s["z"] is None else f"{s['z']:+.2f}"
            decision = s["decision"] + (f", {s['direction']}" if s["direction"] else "")
            lines.append(f"| {entry['look']} | {s['n']} | {s['comparison']} | {diff} | {z} | "
                         f"{decision} |")
    lines += ["", "Decisions:", ""]
    lines += [f"- {name}: {d['decision']}" + (f", {d['direction']}" if d["direction"] else "")
              + f" (round {d['look']}, {d['runs_per_side']} runs per side)"
              for name, d in final_decisions(record).items()]
    return lines + ["", ("Each decision uses all seeds of its two curves up to its look. The "
                         "group reports above pool the seeds every curve of a group has (the "
                         "others are trimmed, with a note), and their Holm-corrected verdicts "
                         "are fixed-sample tests on seeds the design chose: read them as "
                         "descriptions; the decisions here carry the design's error bound."), ""]
