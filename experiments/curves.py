"""Training figures of ``experiments.catalog``: test-score curves per group, the classic
controllers beside them, one rliable report per group and a ``summary.md`` answering the claim.

Scores are the environment's score normalised per test set by the anchors every run records in
``score.json`` (0 = the floor, 1 = the ceiling: TraceBench always-lowest and highest-bitrate-
without-stalls, ABR always-lowest and RobustMPC, CC and LB the named controllers), so every
environment reads on the same axis. A curve is the mean over seeds of each run's mean over the
test traces, with the report's 95 % Student-t band over seeds (none below 5 seeds); a classic
controller is a horizontal line at its own mean. Reads run directories only.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.catalog import Figure, Group
from plume.figures import save_figure
from plume.runs.record import RunStatus, read_status

RunRoles = Mapping[Path, tuple[str, str]]
"""A completed run directory -> (its group's key, its curve label or controller name)."""


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend (figures are files)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


STYLES = ("-", "--", "-.", ":")
MARKERS = "ovds^<>"


def mean_and_ci(values: np.ndarray) -> tuple[float, float, float]:
    """Mean over seeds and the report's 95 % Student-t interval of it
    (``plume.report.inference``: coverage measured by simulation); NaN bounds below the
    report's minimum of runs, so no band or interval is drawn from too few seeds."""
    from plume.report.inference import enough_runs, mean_interval  # deferred: rliable and matplotlib load only for a report

    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    if not enough_runs(len(values)):
        return mean, float("nan"), float("nan")
    _, low, high = mean_interval(values)
    return mean, float(low), float(high)


def score_table(roles: RunRoles) -> pd.DataFrame:
    """Per run, evaluation point, test set and subset (``all``, or ``hard``: the group's hard
    labels): the mean raw and normalised score over the test traces, with the run's role."""
    from plume.report.runs import load_scores, scan_runs  # deferred: rliable and matplotlib load only for a report

    if not roles:
        return pd.DataFrame()
    scores = load_scores(scan_runs(list(roles)))
    scores["normalised"] = (scores["score"] - scores["floor"]) / (
        scores["ceiling"] - scores["floor"])
    scores["group"] = scores["run_dir"].map(lambda r: roles[Path(r)][0])
    scores["curve"] = scores["run_dir"].map(lambda r: roles[Path(r)][1])
    return scores


def subset_means(scores: pd.DataFrame, group: Group) -> pd.DataFrame:
    """``scores`` of one group reduced to one row per (run, progress, test set, subset)."""
    mine = scores[scores["group"] == group.key]
    if group.test_set is not None:
        mine = mine[mine["test_set"] == group.test_set]
    subsets = {"all": mine}
    if group.hard is not None:
        hard = mine[mine["label"].fillna("").str.startswith(group.hard)]
        if not hard.empty:
            subsets["hard"] = hard
    keys = ["curve", "algo", "seed", "run_dir", "test_set", "progress"]
    frames = [rows.groupby(keys, as_index=False, dropna=False)[["score", "normalised"]].mean()
              .assign(subset=name) for name, rows in subsets.items()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def subset_title(group: Group, subset: str) -> str:
    return "all traces" if subset == "all" else f"{group.hard} traces"


def _draw_panel(ax, rows: pd.DataFrame, group: Group) -> dict[str, int]:
    """Curves and controller lines on one axis; returns seeds per curve drawn."""
    learned = rows[rows["algo"] != "controller"]
    counts = {}
    for index, curve in enumerate(c.label for c in group.curves):
        mine = learned[(learned["curve"] == curve) & (learned["progress"] > 0)]
        if mine.empty:
            continue
        points = [(p, *mean_and_ci(at["normalised"].to_numpy()))
                  for p, at in mine.groupby("progress")]
        x, mean, low, high = map(np.asarray, zip(*points))
        counts[curve] = int(mine["seed"].nunique())
        line, = ax.plot(100 * x, mean, linestyle=STYLES[index % 4], color=f"C{index}",
                        marker=MARKERS[index % len(MARKERS)], markersize=4,
                        label=f"{curve} (n={counts[curve]})")
        ax.fill_between(100 * x, low, high, color=line.get_color(), alpha=0.18, linewidth=0)
    controllers = rows[rows["algo"] == "controller"]
    for index, (name, at) in enumerate(controllers.groupby("curve")):
        ax.axhline(at["normalised"].mean(), color="grey", linewidth=1.0,
                   linestyle=STYLES[index % 4], label=f"{name} (controller)")
    ax.set_xlabel("training progress (%)")
    ax.set_xlim(0, 102)
    ax.grid(alpha=0.3)
    return counts


def curves_figure(figure: Figure, scores: pd.DataFrame, stem: Path) -> list[Path]:
    """Columns = (group, test set) pairs; rows = all traces / the group's hard traces. The
    y axis is the normalised score, always showing its anchors 0 and 1."""
    plt = pyplot()
    columns, runs = [], 0
    for group in figure.groups:
        table = subset_means(scores, group) if not scores.empty else pd.DataFrame()
        sets = sorted(table["test_set"].unique()) if not table.empty else [group.test_set]
        columns += [(group, test_set, table) for test_set in sets]
        if not table.empty:  # a run is drawn on each of its test sets: count it once
            learned = table[(table["algo"] != "controller") & (table["progress"] > 0)]
            runs += learned["run_dir"].nunique()
    rows = 2 if any(g.hard for g in figure.groups) else 1
    fig, axes = plt.subplots(rows, len(columns), figsize=(4.4 * len(columns), 3.6 * rows + 0.6),
                             squeeze=False, sharex=True)
    for column, (group, test_set, table) in enumerate(columns):
        for row, subset in enumerate(("all", "hard")[:rows]):
            ax = axes[row][column]
            if subset != "all" and not group.hard:  # this env has no trace kinds to single out
                ax.axis("off")
                ax.text(0.5, 0.5, "no hard-trace panel\n(the env's traces have no kinds)",
                        ha="center", va="center", transform=ax.transAxes, color="grey")
                axes[0][column].tick_params(labelbottom=True)  # sharex hid them above
                continue
            here = (table[(table["test_set"] == test_set) & (table["subset"] == subset)]
                    if not table.empty else table)
            counts = _draw_panel(ax, here, group) if not here.empty else {}
            if row == 0:
                ax.set_title(f"{group.title}\ntest {test_set}", fontsize=9)
            ax.set_ylabel(f"normalised test score, {subset_title(group, subset)}", fontsize=8)
            low, high = ax.get_ylim() if counts else (0.0, 1.0)
            ax.set_ylim(min(low, -0.05), max(high, 1.05))  # the anchors stay in view
            if not counts:
                ax.text(0.5, 0.5, "no completed runs", ha="center", va="center",
                        transform=ax.transAxes, color="grey")
            elif row == 0:
                ax.legend(fontsize=6, loc="best")
    fig.suptitle(f"{figure.title}\nscore normalised per test set (0 = floor, 1 = ceiling "
                 "anchor); mean over seeds, 95 % Student-t band over seeds (none below 5); "
                 f"{runs} learned runs", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, stem)


def report_grouping(group: Group, roles: RunRoles) -> tuple[str, str]:
    """``(group_by, baseline)`` for the group's report: by sampler when the curves differ in
    their sampler only; otherwise by run folder, the baseline curve's folder name."""
    samplers = [_sampler(c) for c in group.curves]
    rest = {tuple(o for o in c.overrides if not o.startswith("sampler")) for c in group.curves}
    if len(set(samplers)) == len(samplers) and len(rest) == 1:
        return "sampler", _sampler(group.curve(group.baseline))
    folders = {run.parent.name for run, (key, curve) in roles.items()
               if key == group.key and curve == group.baseline}
    return "config_key", (folders.pop() if len(folders) == 1 else group.baseline)


def _sampler(curve) -> str:
    return next((o.partition("=")[2] for o in curve.overrides if o.startswith("sampler=")), "")


def group_report(group: Group, roles: RunRoles, out: Path, options: Mapping[str, Any]):
    """The rliable report of ``group``'s runs (its controllers listed beside them); None
    without learned runs."""
    from plume.report import build_report  # deferred: rliable and matplotlib load only for a report

    runs = [run for run, (key, _) in roles.items() if key == group.key]
    if all(roles[r][1] in group.controllers for r in runs):
        return None
    group_by, baseline = report_grouping(group, roles)
    return build_report(runs, out, **{"group_by": group_by, "baseline": baseline, **options})


def final_scores_text(group: Group, scores: pd.DataFrame) -> list[str]:
    """Final normalised and raw score per curve and subset: mean over seeds [95 % Student-t],
    n; controllers' means after."""
    table = subset_means(scores, group) if not scores.empty else pd.DataFrame()
    if table.empty:
        return ["no completed runs"]
    lines = []
    for (test_set, subset), rows in table.groupby(["test_set", "subset"], sort=True):
        learned = rows[rows["algo"] != "controller"]
        last = learned[learned["progress"] == learned["progress"].max()]
        parts = []
        for curve in (c.label for c in group.curves):
            mine = last[last["curve"] == curve]
            if mine.empty:
                continue
            mean, low, high = mean_and_ci(mine["normalised"].to_numpy())
            raw = mine["score"].mean()
            interval = (f"[{low:.3f}, {high:.3f}]" if np.isfinite(low)
                        else "[too few runs for an interval]")
            parts.append(f"{curve} {mean:.3f} {interval} (raw {raw:.4g}, n={len(mine)})")
        controllers = rows[rows["algo"] == "controller"].groupby("curve")
        parts += [f"{name} {at['normalised'].mean():.3f} (raw {at['score'].mean():.4g}, "
                  "controller)" for name, at in controllers]
        lines.append(f"test {test_set}, {subset_title(group, subset)}: " + "; ".join(parts))
    return lines


def comparison_table(figure: Figure, scores: pd.DataFrame, results: Mapping[str, Any],
                     roles: RunRoles) -> list[str]:
    """Markdown: a row per curve, a column per group: the final normalised score (each run's
    mean over the group's test sets; mean over seeds [95 % Student-t], n), the probability of
    improvement over the group's baseline from its report, and the wall time the sampler's own
    policy evaluations took (Genet's rounds)."""
    labels = list(dict.fromkeys(c.label for g in figure.groups for c in g.curves))
    header = "| sampler | " + " | ".join(g.title for g in figure.groups) + " |"
    lines = [header, "|---|" + "---|" * len(figure.groups)]
    for label in labels:
        cells = []
        for group in figure.groups:
            if label not in {c.label for c in group.curves}:
                cells.append("")
                continue
            cells.append(_table_cell(group, label, scores, results.get(group.key), roles))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def _table_cell(group: Group, label: str, scores: pd.DataFrame, result, roles) -> str:
    table = subset_means(scores, group) if not scores.empty else pd.DataFrame()
    mine = table[(table["curve"] == label) & (table["subset"] == "all")] if len(table) else table
    if mine.empty:
        return "no runs"
    last = mine[mine["progress"] == mine["progress"].max()]
    per_run = last.groupby("run_dir")["normalised"].mean()  # a run's mean over its test sets
    mean, low, high = mean_and_ci(per_run.to_numpy())
    text = (f"{mean:.3f} [{low:.3f}, {high:.3f}]" if np.isfinite(low) else f"{mean:.3f}") + (
        f" (n={len(per_run)})")
    if result is not None and label != group.baseline:
        from plume.report.comparisons import poi_text  # deferred: rliable and matplotlib load only for a report

        rows = result.poi[(result.poi["scope"] == "all tasks")
                          & (result.poi["algorithm"] == _sampler(group.curve(label)))]
        if not rows.empty:
            text += f"; {poi_text(rows.iloc[0])}"
            if rows.iloc[0].verdict in ("better", "worse"):
                text += f", **{rows.iloc[0].verdict}**"
    cost = [_round_seconds(run) for run, (key, curve) in roles.items()
            if key == group.key and curve == label]
    cost = [c for c in cost if c]
    if cost:
        text += f"; its policy evaluations {np.mean(cost):.0f} s per run"
    return text


def _round_seconds(run: Path) -> float:
    status = read_status(run)
    summary = (status.summary if isinstance(status, RunStatus) else None) or {}
    return float(summary.get("sampler_round_seconds") or 0.0)


def render_training(figure: Figure, roles: RunRoles, out: Path,
                    options: Mapping[str, Any]) -> dict[str, Any]:
    """The figure, one report per group and ``summary.md``; returns the artefacts."""
    scores = score_table(roles)
    artefacts: dict[str, Any] = {"figure": curves_figure(figure, scores, out / figure.stem)}
    text = [f"# {figure.title}", "", f"The paper's claim: {figure.claim}.", ""]
    results = {}
    for group in figure.groups:
        text += [f"## {group.title}", ""]
        single = len(figure.groups) == 1
        result = group_report(group, roles, out / ("report" if single else group.key), options)
        results[group.key] = result
        if result is not None:
            artefacts[f"{group.key} report"] = result.report
            if report_grouping(group, roles)[0] == "config_key":
                folders = {label: run.parent.name for run, (key, label) in roles.items()
                           if key == group.key and label not in group.controllers}
                text += ["The report names each curve by its run folder: " + "; ".join(
                    f"{label} = `{folders[label]}`" for label in
                    (c.label for c in group.curves) if label in folders) + ".", ""]
            where = result.report.relative_to(out).as_posix()
            tasks = ", ".join(result.analysis.tasks)
            text += [f"Verdicts (rliable report {where}; tasks: {tasks}):", "",
                     *[f"- {answer}" for answer in result.answers], ""]
        heading = ("Final normalised score (mean over seeds [95 % Student-t interval]; raw = "
                   "the env's score):")
        text += [heading, "", "```", *final_scores_text(group, scores), "```", ""]
    if figure.table:
        text[4:4] = ["## Every sampler in every environment", "",
                     ("Final normalised score (all test traces; mean over seeds [95 % Student-t "
                     "interval], n); probability of improvement (PoI) over Random with its "
                     "95 % bootstrap interval and the report's verdict where there is one "
                     "(Welch t, Holm-adjusted within each environment's report)."), "",
                     *comparison_table(figure, scores, results, roles), ""]
    (out / "summary.md").write_text("\n".join(text))
    artefacts["summary"] = out / "summary.md"
    artefacts["_summary"] = "\n".join(text[2:])
    return artefacts
