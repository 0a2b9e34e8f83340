"""The report builder: scan run directories, pool them with rliable, write a report.

Writes into ``out``:

* ``report.md``: the answer per sampler and scope (a verdict only from 5 runs per side, Holm-
  corrected, beside its effect sizes: difference of means and probability of improvement with
  their intervals), the method of every interval with its measured coverage, which tasks were
  compared and why, what was pooled (runs per cell, normalisation, seeds dropped and why), the
  failed and unfinished runs (listed, never pooled), classic controllers, exports and
  emulation runs beside them (each with its link's lateness, and a warning naming the runs
  whose emulated link fell behind its schedule), tables, figure links;
* ``tables/<name>.csv`` (full precision), ``.md`` and ``.tex`` (booktabs);
* ``figures/<name>.png`` and ``.pdf``.

``build_report(paths, out, **options) -> ReportResult``; ``plume-report`` (``report.cli``)
is its command line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from plume.report.comparisons import METRICS, PAIRED, TEST_NAMES, TOO_FEW
from plume.report.emulation import gap_figure, lateness_warnings, read_emulations
from plume.report.inference import (
    ALPHA,
    COVERAGE_REPETITIONS,
    MEASURED_COVERAGE,
    MIN_RUNS,
    coverage_text,
)
from plume.report.power import TARGET_POWER
from plume.report.runs import (
    CONTROLLER,
    RunInventory,
    RunScanError,
    exports_table,
    load_scores,
    scan_runs,
)
from plume.report.stats import (
    DEFAULT_REPS,
    PAPER_AGGREGATE_REPS,
    RULE_TEXT,
    Analysis,
    Normalisation,
    ReportStatsError,
    analyse,
    normalise,
)
from plume.report.tables import code_span, md_escape, plain_text, to_markdown, write_table
from plume.report.tail import WORST_SCOPE

ReportError = (RunScanError, ReportStatsError)


@dataclass
class ReportResult:
    """What ``build_report`` wrote and computed."""

    out: Path
    report: Path                                  # report.md
    inventory: RunInventory
    analysis: Analysis
    tables: dict[str, pd.DataFrame]               # raw numbers, as in tables/<name>.csv
    table_files: dict[str, list[Path]]            # name -> [csv, md, tex]
    figures: dict[str, list[Path]] = field(default_factory=dict)  # name -> [png, pdf]
    answers: list[str] = field(default_factory=list)
    summary: str = ""

    @property
    def poi(self) -> pd.DataFrame:
        """Probability of improvement over the baseline (algorithm, scope, poi, lo, hi, ...)."""
        return self.analysis.poi

    @property
    def ranking(self) -> list[str]:
        """Algorithms by final IQM, best first."""
        return list(self.analysis.algorithms)


def build_report(
    paths: str | Path | Sequence[str | Path],
    out: str | Path,
    *,
    group_by: str | Sequence[str] = "sampler",
    baseline: str | None = "uniform",
    seeds: str = "trim",
    reps: int | None = None,
    seed: int = 0,
    paper: bool = False,
    figures: bool = True,
    normalisations: Mapping[str, Normalisation] | None = None,
) -> ReportResult:
    """Scan ``paths`` (sweep roots and/or run directories), pool the completed runs and write
    ``report.md``, ``tables/`` and ``figures/`` under ``out``.

    ``group_by``: what an "algorithm" is (``sampler``, ``config_key``, or several columns);
    ``baseline``: the sampler others are compared with (None: no probability of improvement);
    ``seeds``: ``trim`` or ``refuse`` unequal seeds; ``reps``: bootstrap repetitions (default
    2000); ``paper``: 50000 repetitions for the aggregate interval estimates; ``seed``: the
    bootstrap seed (same inputs and options -> identical tables).
    Raises ``RunScanError``/``ReportStatsError`` (both ``ValueError``) with a message that
    says what is wrong: no run directory, no completed run, baseline absent, seeds differ."""
    out = Path(out)
    if isinstance(paths, (str, Path)):
        paths = [paths]
    inventory = scan_runs(paths)
    if inventory.completed.empty:
        raise ReportStatsError(
            f"no completed runs among the {len(inventory)} run directories found under "
            + ", ".join(map(str, paths)) + f" (states: {inventory.counts()})"
            + _excluded_text(inventory.excluded))
    reps = DEFAULT_REPS if reps is None else int(reps)
    scores = load_scores(inventory)
    is_controller = (scores["algo"] == CONTROLLER).to_numpy()
    if is_controller.all():
        raise ReportStatsError(
            "only classic-controller runs (plume-eval) were found: a report compares learned "
            "runs (plume-train) and lists controllers beside them")
    references = controller_table(scores[is_controller], normalisations)
    analysis = analyse(
        scores[~is_controller], group_by=group_by, baseline=baseline, seeds=seeds, reps=reps,
        aggregate_reps=PAPER_AGGREGATE_REPS if paper else reps, seed=seed,
        normalisations=normalisations, inventory=inventory.runs,
    )
    out.mkdir(parents=True, exist_ok=True)
    tables = _tables(inventory, analysis)
    if not references.empty:
        tables["controllers"] = references
    tables.update(_emulation_tables(paths))
    table_files = {name: write_table(frame, out / "tables" / name, display=_display(name, frame))
                   for name, frame in tables.items()}
    figure_files: dict[str, list[Path]] = {}
    if figures:
        from plume.report.plots import all_figures

        figure_files = all_figures(analysis, out / "figures")
        figure_files.update(_emulation_figure(tables, out))
    answers = analysis.answers()
    report = out / "report.md"
    report.write_text(_report_markdown(paths, inventory, analysis, tables, table_files,
                                       figure_files, out, paper))
    summary = _summary(inventory, analysis, answers, report)
    return ReportResult(out, report, inventory, analysis, tables, table_files, figure_files,
                        answers, summary)


def _emulation_tables(paths: Sequence[str | Path]) -> dict[str, pd.DataFrame]:
    """``emulation_gap`` and ``emulation_per_trace`` when plume-emulate runs are among
    ``paths`` (none otherwise)."""
    gaps, per_trace = read_emulations(paths)
    return {} if gaps.empty else {"emulation_gap": gaps, "emulation_per_trace": per_trace}


def _emulation_figure(tables: dict[str, pd.DataFrame], out: Path) -> dict[str, list[Path]]:
    per_trace = tables.get("emulation_per_trace")
    if per_trace is None or per_trace.empty:
        return {}
    return {"emulation_gap": [gap_figure(per_trace, out / "figures" / "emulation_gap.png")]}


def _emulation_lines(gaps: pd.DataFrame, figure: Path | None = None,
                     out: Path | None = None) -> list[str]:
    lines = ["## Simulation and emulation (plume-emulate)", "",
             ("Each controller on the same test traces in the simulator and over real TCP/UDP "
              "(emulated links): means over the traces and the gap, emulation minus "
              "simulation, with a 95% Student-t interval over the per-trace differences (none "
              "from fewer than 5 traces); score is the env's score. Per trace: "
              "tables/emulation_per_trace.csv. Link lateness: the p99 of how late the emulated "
              "link sent its packets (actual minus scheduled departure; above its tolerance "
              "the link fell behind its trace and the run's numbers are biased)."), "",
             to_markdown(_display("emulation_gap", gaps)), ""]
    behind, unknown = lateness_warnings(gaps)
    if behind:
        lines += [(f"**Warning: the emulated link fell behind its schedule in {len(behind)} "
                   "run(s)** (the machine was too busy): their emulation numbers and gaps are "
                   "biased, not exact; rerun them on an idle machine."), "",
                  *[f"- {md_escape(line)}" for line in behind], ""]
    if unknown:
        lines += [(f"Link lateness was not measured in {len(unknown)} run(s) (Mahimahi's "
                   "shells, or a run from before it was recorded): not known to be exact."),
                  "", *[f"- {md_escape(line)}" for line in unknown], ""]
    if figure is not None:
        lines += [f"![per-trace gaps]({_rel(figure, out)})", ""]
    return lines


def _lateness_cell(p99: Any, tolerance: Any, within: Any) -> str:
    """'0.21', '4.31 > 1: BEHIND' (the link fell behind), '0.21, not all links measured' or
    'not measured'."""
    if p99 is None or pd.isna(p99):
        return "not measured"
    if within is None or pd.isna(within):
        return f"{p99:.2f}, not all links measured"
    return f"{p99:.2f}" if within else f"{p99:.2f} > {tolerance:g}: BEHIND"


def build_emulation_report(paths: Sequence[str | Path], out: str | Path,
                           figures: bool = True) -> Path:
    """``report.md`` with the emulation section alone, for paths holding only
    ``plume-emulate`` run directories; ReportStatsError when there are none either."""
    tables = _emulation_tables(paths)
    if not tables:
        raise ReportStatsError("no run directories and no plume-emulate runs under "
                               + ", ".join(map(str, paths)))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        write_table(frame, out / "tables" / name, display=_display(name, frame))
    figure = _emulation_figure(tables, out).get("emulation_gap") if figures else None
    report = out / "report.md"
    report.write_text("\n".join(["# Plume report", "", *_emulation_lines(
        tables["emulation_gap"], figure[0] if figure else None, out)]))
    return report


# --------------------------------------------------------------------------- tables


def controller_table(scores: pd.DataFrame,
                     normalisations: Mapping[str, Normalisation] | None) -> pd.DataFrame:
    """Per classic controller and test set: mean raw and normalised score over the traces."""
    if scores.empty:
        return pd.DataFrame()
    frame = normalise(scores, normalisations)
    return (frame.groupby(["sampler", "env", "dataset", "test_set"], as_index=False, dropna=False)
            .agg(raw=("raw", "mean"), normalised=("score", "mean"), traces=("trace", "size"))
            .rename(columns={"sampler": "controller"}).round(4))


def _tables(inventory: RunInventory, analysis: Analysis) -> dict[str, pd.DataFrame]:
    runs = inventory.runs[["state", "exp_name", "env", "dataset", "algo", "sampler", "seed",
                           "config_key", "elapsed", "error", "run_dir"]].copy()
    runs["error"] = runs["error"].map(lambda e: _clip(e) if isinstance(e, str) else "")
    tables = {
        "aggregates": analysis.aggregates,
        "probability_of_improvement": analysis.poi,
        "worst_case": analysis.worst_case,
        "worst_case_comparisons": analysis.worst_case_poi,
        "compute": analysis.compute.table,
        "equal_compute_comparisons": analysis.compute.comparisons,
        "cells": analysis.cells,
        "task_scores": analysis.task_scores,
        "breakdowns": analysis.breakdowns,
        "sample_efficiency": analysis.curves,
        "profiles": analysis.profiles,
        "runs": runs,
        "exports": exports_table(inventory),
    }
    return {name: frame for name, frame in tables.items() if not frame.empty}


def _ci(frame: pd.DataFrame, point: str, lo: str, hi: str, fmt: str = ".3f") -> pd.Series:
    """'0.897 [0.896, 0.899]', or the point alone where there is no interval."""
    cells = [f"{p:{fmt}}" if np.isnan(a) else f"{p:{fmt}} [{a:{fmt}}, {b:{fmt}}]"
             for p, a, b in zip(frame[point], frame[lo], frame[hi])]
    return pd.Series(cells, index=frame.index, dtype=object)


#: Table header of each aggregate metric: its interval's method.
METRIC_HEADERS = {"IQM": "IQM [95% bootstrap]", "mean": "mean [95% t]",
                  "median": "median [95% bootstrap]", "optimality_gap": "optimality gap [95% t]"}


#: Table headers of a comparison's power (plume.report.power) and of the seeds it needs.
POWER_HEADERS = ("power at the observed difference (the design's test; conservative: "
                 "Bonferroni level)", f"seeds per side for {TARGET_POWER:.0%} power")


def _display(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """The human-readable form of a table (estimates with their CIs in one cell, the method
    in the header)."""
    if name == "aggregates":
        shown = frame[["rank", "algorithm", "n_runs", "n_tasks"]].copy()
        for metric in METRICS:
            shown[METRIC_HEADERS[metric]] = _ci(frame, metric, f"{metric}_lo", f"{metric}_hi")
        return shown
    if name == "probability_of_improvement":
        shown = frame[["algorithm", "baseline", "scope", "n_runs", "n_runs_baseline"]].copy()
        shown["design"] = frame["design"].map(TEST_NAMES)
        shown["difference of means [95% t of the design]"] = _ci(frame, "diff", "diff_lo",
                                                                 "diff_hi", "+.3f")
        shown["Holm-adjusted p"] = _p(frame["p_holm"])
        shown["Welch p"] = _p(frame["p_welch"])
        shown["seed-level correlation"] = _p(frame["correlation"], ".2f")
        shown["variance / Welch's"] = _p(frame["variance_ratio"], ".2f")
        shown["sign-flip p (Holm)"] = [
            "" if np.isnan(p) else f"{p:.2g} ({h:.2g})"
            for p, h in zip(frame["p_sign_flip"], frame["p_sign_flip_holm"])]
        poi = _ci(frame, "poi", "lo", "hi")
        shown["P(X > baseline) [95% bootstrap]"] = poi.where(~frame["poi_degenerate"].astype(
            bool), poi + " degenerate")
        shown["verdict"] = frame["verdict"]
        shown[POWER_HEADERS[0]] = [
            note if np.isnan(power) else f"{power:.2f} at {level:.2g}"
            for power, level, note in zip(frame["power"], frame["power_level"],
                                          frame["power_note"])]
        shown[POWER_HEADERS[1]] = [
            f"{seeds:.0f}" if not np.isnan(seeds) else note
            for seeds, note in zip(frame["seeds_for_80"], frame["power_note"])]
        return shown
    if name == "emulation_gap":
        shown = frame[["policy", "env", "link", "metric", "traces"]].copy()
        for column in ("simulation", "emulation"):
            shown[column] = frame[column].map(lambda v: "" if pd.isna(v) else f"{v:.3f}")
        shown["gap [95% t]"] = _ci(frame, "gap", "gap_lo", "gap_hi", "+.3f").where(
            frame["gap"].notna(), "")
        shown["problem"] = frame["problem"].fillna("")
        shown["link lateness p99 (ms)"] = [
            _lateness_cell(p99, tolerance, within) for p99, tolerance, within in zip(
                frame["link_p99_ms"], frame["link_tolerance_ms"], frame["link_within_tolerance"])]
        return shown
    if name == "exports":
        shown = frame.drop(columns=["run_dir"]).copy()
        for column in ("max_diff_torchscript", "max_diff_onnx"):
            shown[column] = frame[column].map(
                lambda v: "" if pd.isna(v) else f"{v:.1e}").astype(object)
        return shown.fillna("")
    if name == "breakdowns":
        shown = frame[["grouping", "group", "members", "algorithm", "n_runs", "n_traces"]].copy()
        shown["mean [95% t]"] = _ci(frame, "mean", "mean_lo", "mean_hi")
        shown["saturated"] = frame["saturated"].map({True: "yes", False: ""})
        return shown
    if name == "sample_efficiency":
        shown = frame[["scope", "algorithm", "progress", "n_runs"]].copy()
        shown["progress"] = [f"{p:.0%}" for p in frame["progress"]]
        shown["IQM [95% bootstrap]"] = _ci(frame, "IQM", "lo", "hi")
        return shown
    if name == "profiles":  # 101 thresholds per algorithm: every 10th in the md/tex form
        taus = sorted(frame["tau"].unique())[::10]
        shown = frame[frame["tau"].isin(taus)].copy()
        shown["fraction [95% bootstrap]"] = _ci(shown, "fraction", "lo", "hi")
        return shown[["algorithm", "tau", "fraction [95% bootstrap]"]]
    return frame


def _clip(text: str, limit: int = 160) -> str:
    """``text`` on one line (``plain_text``), cut to ``limit`` characters."""
    text = plain_text(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _excluded_text(excluded: pd.DataFrame) -> str:
    if excluded.empty:
        return ""
    lines = [f"\n  {r.state}: {plain_text(r.run_dir)}"
             + (f" ({_clip(r.error)})" if isinstance(r.error, str) and r.error else "")
             for r in excluded.itertuples()]
    return "".join(lines[:20]) + ("\n  ..." if len(lines) > 20 else "")


def _rel(path: Path, out: Path) -> str:
    return path.relative_to(out).as_posix()


def _report_markdown(paths, inventory: RunInventory, analysis: Analysis,
                     tables: dict[str, pd.DataFrame], table_files: dict[str, list[Path]],
                     figures: dict[str, list[Path]], out: Path, paper: bool) -> str:
    a = analysis
    counts = inventory.counts()
    n_pooled = sum(len(v) for v in a.run_dirs.values())
    lines = [
        "# Plume report",
        "",
        f"Pooled **{n_pooled} completed runs** ({len(a.algorithms)} {a.group_label} value(s) x "
        f"{a.n_runs} seed(s); {len(a.tasks)} compared task(s)) out of {len(inventory)} run "
        f"directories found under " + ", ".join(code_span(p) for p in paths) + ". "
        + ", ".join(f"{v} {k}" for k, v in counts.items()) + ".",
        "",
        f"Grouping: {code_span(a.group_label)}; baseline: {code_span(a.baseline)}; seeds: "
        f"{plain_text(a.runs_text())} "
        f"(seeds {', '.join(map(str, a.seeds))}); final scores at progress "
        f"{a.final_progress:.0%}; bootstrap seed {a.seed}" + (" (--paper)" if paper else "")
        + ". Every interval's method and measured coverage: see Methods.",
        "",
        *_answer_lines(a),
        "## Aggregate scores (final, normalised, compared tasks)",
        "",
        to_markdown(_display("aggregates", a.aggregates)),
        *_methods_lines(a),
        *_task_lines(a),
        "## What was pooled",
        "",
        "Normalisation:",
        "",
        *[_normalisation_line(env, norm) for env, norm in a.normalisations.items()],
        "",
        "Runs per cell (found / used):",
        "",
        to_markdown(a.cells),
    ]
    if a.notes:
        lines += ["Notes:", ""] + [f"- {md_escape(note)}" for note in a.notes] + [""]
    lines += _excluded_lines(inventory.excluded)
    if "controllers" in tables:
        lines += ["## Classic controllers (plume-eval; deterministic references, not pooled)",
                  "", ("Mean over the test traces of each test set: the env's raw score and "
                       "the same normalisation as above."), "",
                  to_markdown(tables["controllers"])]
    if "emulation_gap" in tables:
        figure = figures.get("emulation_gap")
        lines += _emulation_lines(tables["emulation_gap"], figure[0] if figure else None, out)
    if "exports" in tables:
        lines += ["## Exported controllers (plume-export)", "",
                  ("TorchScript and ONNX checked against PyTorch on the run's own test "
                   "observations: steps compared, near-tied steps, largest output difference "
                   "per format."), "", to_markdown(_display("exports", tables["exports"]))]
    lines += ["## Comparisons with the baseline", ""]
    lines += ([to_markdown(_display("probability_of_improvement", a.poi))] if not a.poi.empty
              else ["None computed.", ""])
    lines += _worst_case_lines(a) + _compute_lines(a)
    lines += [("## Scores per task, and per kind and cluster within each test set (mean over "
              "runs, no interval)"), "", to_markdown(a.task_scores)]
    if not a.breakdowns.empty:
        lines += ["## Per test set, kind and cluster (mean with 95% Student-t interval)", "",
                  ("Each group pools its traces from every test set that holds it (one value "
                   "per run); `members` is what its test traces are made of."), "",
                  to_markdown(_display("breakdowns", a.breakdowns))]
    lines += _curve_lines(a) + _file_lines(figures, table_files, out)
    return "\n".join(lines) + "\n"


def _normalisation_line(env: str, norm: Any) -> str:
    """A list item: the environment as code, then its normalisation text escaped (it quotes
    the score unit and description from the runs' score.json)."""
    text, head = norm.text(env), f"`{env}`: "
    if text.startswith(head):
        return f"- {code_span(env)}: {md_escape(text[len(head):])}"
    return f"- {md_escape(text)}"


def _p(values: pd.Series, spec: str = ".2g") -> pd.Series:
    """A column of numbers as text, blank where there is none."""
    return values.map(lambda v: "" if np.isnan(v) else format(v, spec)).astype(object)


def _design_phrase(a: Analysis) -> str:
    """Which t-test the report's verdicts used: the paired one where the sides are the same
    seeds, Welch's otherwise."""
    designs = set(a.poi["design"]) if not a.poi.empty else set()
    if designs == {PAIRED}:
        return "the paired t-test (both sides are the same seeds)"
    if designs and PAIRED not in designs:
        return "Welch's t-test (the sides are not the same seeds)"
    return "the paired t-test where the two sides are the same seeds, else Welch's t-test"


def _answer_lines(a: Analysis) -> list[str]:
    """The verdicts (or why there are none), then the ranking."""
    lines = ["## Answer", ""]
    if not a.has_intervals:
        more = MIN_RUNS - a.n_runs
        lines += [(f"**No verdict: {a.too_few_text()}.** Run {more} more seed(s) of every "
                  f"{a.group_label} (e.g. `seed='range({MIN_RUNS})'`); until then the numbers "
                  "below are point estimates, not evidence of a difference."), ""]
    elif not a.poi.empty:
        lines += [(f"Verdicts: {_design_phrase(a)} of the difference of mean normalised "
                  f"scores, Holm-Bonferroni over the {a.n_verdicts} verdicts below "
                  f"(family-wise error {ALPHA:.0%}); each carries that difference with its "
                  "95 % t interval and the probability of improvement (PoI) with its "
                  "bootstrap interval. "
                  f"Tasks: see Tasks ({len(a.tasks)} compared)."), ""]
    if a.poi.empty:
        lines.append(f"No comparison: baseline {code_span(a.baseline)} "
                     + ("not set." if a.baseline is None else "is the only algorithm pooled."))
    # the sentences quote names, which runs.py admits only without markup characters
    lines += [f"- {plain_text(sentence)}" for sentence in a.answers()]
    best = a.aggregates.iloc[0]
    interval = ("" if np.isnan(best["IQM_lo"]) else
                f" [{best['IQM_lo']:.3f}, {best['IQM_hi']:.3f}]")
    lines += ["", plain_text("Ranking by final IQM (point estimates, not a verdict): "
                             + a.ranking_text() + f" (first: {best['algorithm']}, IQM "
                             f"{best['IQM']:.3f}{interval})."), ""]
    return lines


def _worst_case_lines(a: Analysis) -> list[str]:
    """Each method's CVaR of the worst 10 % of test traces, and its verdicts."""
    if a.worst_case.empty:
        return []
    shown = a.worst_case[["algorithm", "n_runs", "n_traces", "worst_traces"]].copy()
    shown["CVaR [95% t over runs]"] = _ci(a.worst_case, "cvar", "cvar_lo", "cvar_hi")
    shown["mean over all traces"] = a.worst_case["mean"].map(lambda v: f"{v:.3f}")
    lines = [f"## Worst case: {WORST_SCOPE} (CVaR, normalised)", "",
             ("Each run's mean over its worst test traces (the `worst_traces` lowest of "
              "`n_traces`, every compared task pooled, final evaluation), then the report's "
              "interval over runs; the verdicts below are Holm-corrected as their own "
              "family."), "", to_markdown(shown)]
    lines += [f"- {plain_text(sentence)}" for sentence in a.worst_case_answers()]
    return lines + [""]


def _compute_lines(a: Analysis) -> list[str]:
    """What each method spent in env steps, scoring rollouts included, and its verdicts at
    equal compute; nothing when no method spends scoring steps."""
    table = a.compute.table
    if table.empty:
        return []
    shown = table[["algorithm", "n_runs"]].copy()
    for column, title in (("env_steps", "training env steps"),
                          ("scoring_steps", "scoring env steps"), ("total_steps", "total at the end")):
        shown[title] = table[column].map(lambda v: f"{v:,.0f}")
    shown["scoring share"] = table["scoring_share"].map(lambda v: f"{v:.1%}")
    shown["compared at: progress"] = table["budget_progress"].map(lambda v: f"{v:.2f}")
    shown["total there"] = table["budget_steps"].map(lambda v: f"{v:,.0f}")
    shown["mean score there"] = table["budget_score"].map(lambda v: f"{v:.3f}")
    lines = ["## Compute: env steps spent, scoring rollouts included", "",
             ("Means over each method's runs at the final evaluation: the training env steps "
              "and the env steps its sampler spent playing the policy on training traces to "
              f"score them. At equal compute ({a.compute.budget:,.0f} total env steps, the "
              "smallest final total of any run), each run is compared at its latest "
              "evaluation within that total (the evaluation grid charges a method up to one "
              "evaluation interval more than it spent); the verdicts below are "
              "Holm-corrected as their own family."), "", to_markdown(shown)]
    lines += [f"- {plain_text(sentence)}" for sentence in a.equal_compute_answers()]
    return lines + [""]


def _methods_lines(a: Analysis) -> list[str]:
    """How every interval and verdict of the report is computed, with the coverage of each
    nominal 95 % interval measured by simulation (plume.report.inference.MEASURED_COVERAGE,
    re-measured by the tests)."""
    reps = a.reps
    at_three = MEASURED_COVERAGE["percentile_bootstrap_mean"][3]
    at_five = MEASURED_COVERAGE["percentile_bootstrap_mean"][MIN_RUNS]
    state = ("intervals and verdicts stated" if a.has_intervals
             else f"{a.too_few_text()}: point estimates only")
    family = (f"all {a.n_verdicts} verdicts of this report" if a.n_verdicts
              else "the verdicts of a report (none here)")
    return [
        "## Methods",
        "",
        (f"Coverage below is of a nominal 95 % interval, measured by simulation "
        f"({COVERAGE_REPETITIONS} repetitions each)."),
        "",
        (f"- **Minimum runs**: no interval and no verdict from fewer than {MIN_RUNS} runs per "
         f"side (the earlier convention was 3: at 3 runs a percentile bootstrap interval of a "
         f"mean is about the min-max range of the runs and covers {at_three:.2f}, and a PoI "
         "is 1.00 [1.00, 1.00] whenever the runs are ordered). This report: "
         f"{a.runs_text()}, {state}."),
        ("- **Runs are the replication unit**: test traces are averaged within each run and "
         "task first; a run's score on several tasks is its average over them."),
        ("- **Mean, optimality gap, per-group means**: Student-t interval over runs; coverage "
         f"{coverage_text('t_mean_normal')}; {coverage_text('t_mean_skewed')}. (A percentile "
         f"bootstrap would cover {at_five:.2f} at n = {MIN_RUNS}.)"),
        ("- **Difference of means** (the effect size of every verdict, normalised score): "
         "when the two sides are the same seeds (row i of each is seed i, sharing its "
         "initialisation and RNG streams), the paired t interval of the per-seed differences, "
         f"coverage {coverage_text('paired_difference')}; otherwise the Welch t interval, "
         f"coverage {coverage_text('welch_difference')}. A paired row also gives the "
         "seed-level correlation of the two sides' scores, the variance of the paired "
         "estimate over Welch's (below 1: pairing helped), Welch's p, and an exact sign-flip "
         "permutation test (every sign pattern of the differences; free of normality, but "
         "its smallest p is 2/2^n: 0.0625 at 5 pairs), Holm-corrected as its own family."),
        (f"- **Verdicts**: {_design_phrase(a)} of that difference, Holm-Bonferroni over {family} "
         f"(family-wise error {ALPHA:.2f}): 'better' or 'worse' when the Holm-adjusted "
         f"p < {ALPHA}, else 'no significant difference'; '{TOO_FEW}' below {MIN_RUNS} runs "
         "per side."),
        (f"- **Power** of each verdict's test at the observed difference, at level {ALPHA}/m "
         f"with m = {a.n_verdicts or 'the number of verdicts'} (the level of Holm's first "
         "step; conservative: Bonferroni level): for the paired t, the noncentral t with "
         "n - 1 degrees of freedom and the observed spread of the per-seed differences "
         "(exact for normal differences); for Welch's test, the noncentral t with "
         "Welch-Satterthwaite degrees of freedom and the two sides' run-to-run standard "
         "deviations (within 0.02 of Welch's test simulated, slightly above it at 5 runs per "
         f"side); and the fewest seeds per side (at least {MIN_RUNS}) that reach "
         f"{TARGET_POWER:.0%} at that difference and level. A planning number: it says what "
         "these seeds could detect, not whether the difference is real; not computed when the "
         f"difference is 0 or a side has fewer than {MIN_RUNS} runs."),
        ("- **Worst case (CVaR)**: each run's mean over its worst 10 % of test traces "
         "(the ceil(10 %) lowest normalised per-trace scores, compared tasks pooled), then the "
         "Student-t interval over runs and the same tests against the baseline as above, "
         "Holm-Bonferroni over their own family."),
        *_compute_method(a),
        (f"- **IQM and median**: rliable's stratified percentile bootstrap "
         f"({reps['aggregates']} reps), short of 95 % at these run counts: coverage "
         f"{coverage_text('bootstrap_iqm')}."),
        (f"- **Probability of improvement (PoI)**: rliable's stratified independent bootstrap "
         f"({reps['poi']} reps); coverage {coverage_text('bootstrap_poi')}, and for a large "
         f"effect {coverage_text('bootstrap_poi_large_effect')}. When every run of one side "
         "beats every run of the other the interval is a single point (marked degenerate): "
         "it shows no uncertainty; read the difference of means instead."),
        (f"- **Performance profiles and sample-efficiency curves**: rliable's stratified "
         f"bootstrap bands ({reps['profiles']} reps), with the same shortfall; none below "
         f"{MIN_RUNS} runs."),
        "",
    ]


def _compute_method(a: Analysis) -> list[str]:
    if a.compute.table.empty:
        return []
    return [("- **Equal compute**: a run's total is its training env steps plus its sampler's "
             "scoring env steps; the budget is the smallest final total of any run, and each "
             "run's mean normalised score over the compared tasks is taken at its latest "
             "evaluation within the budget, then the same tests against the baseline as "
             "above, Holm-Bonferroni over their own family.")]


def _task_lines(a: Analysis) -> list[str]:
    lines = ["## Tasks", "", RULE_TEXT, ""]
    for row in a.task_info.itertuples():
        role = ("compared" if row.role == "compared" else
                f"saturated (every run scores {row.saturated_at:.3f}), left out")
        lines.append(f"- {code_span(row.task)}: {row.unit} of env {code_span(row.env)}, trained on "
                     f"{code_span(row.dataset)}, traces from test set(s) {md_escape(row.test_sets)}: "
                     f"{role}")
    return lines + [""]


def _excluded_lines(excluded: pd.DataFrame) -> list[str]:
    """The table of failed, unfinished and broken runs (their error clipped; every cell
    escaped by ``to_markdown``)."""
    lines = ["## Failed and unfinished runs (listed, not pooled)", ""]
    if excluded.empty:
        return lines + ["None.", ""]
    shown = excluded[["state", "sampler", "seed", "config_key", "error", "run_dir"]].copy()
    shown["error"] = shown["error"].map(lambda e: _clip(e) if isinstance(e, str) else "")
    return lines + [to_markdown(shown)]


def _curve_lines(a: Analysis) -> list[str]:
    curve = a.curves[a.curves["n_tasks"] == len(a.tasks)]
    pivot = curve.pivot(index="progress", columns="algorithm", values="IQM")[a.algorithms]
    pivot.index = [f"{p:.0%}" for p in pivot.index]
    return ["## Sample efficiency (IQM over the compared tasks)", "",
            to_markdown(pivot.reset_index(names="progress"))]


def _file_lines(figures: dict[str, list[Path]], table_files: dict[str, list[Path]],
                out: Path) -> list[str]:
    lines = ["## Figures", ""]
    if not figures:
        lines += ["Not drawn (figures=False).", ""]
    for name, files in figures.items():
        png = next(p for p in files if p.suffix == ".png")
        pdf = next((p for p in files if p.suffix == ".pdf"), None)
        lines.append(f"- {name.replace('_', ' ')}: [{_rel(png, out)}]({_rel(png, out)})"
                     + (f" ([pdf]({_rel(pdf, out)}))" if pdf else ""))
    lines += ["", "## Tables", ""]
    for name, files in table_files.items():
        lines.append(f"- {name}: " + ", ".join(f"[{p.suffix[1:]}]({_rel(p, out)})"
                                               for p in files))
    return lines


def _summary(inventory: RunInventory, analysis: Analysis, answers: list[str],
             report: Path) -> str:
    excluded = inventory.excluded
    lines = [
        (f"pooled {sum(len(v) for v in analysis.run_dirs.values())} completed runs "
         f"({analysis.runs_text()}, {len(analysis.tasks)} compared task(s)); "
         f"{len(excluded)} failed/unfinished run(s) listed, not pooled"),
        "ranking by final IQM (point estimates): " + analysis.ranking_text(),
        *([] if analysis.has_intervals else [f"no verdict: {analysis.too_few_text()}"]),
        *answers[: 2 * max(1, len(analysis.algorithms))],
        *[f"note: {n}" for n in analysis.notes],
        f"report: {report}",
    ]
    return "\n".join(plain_text(line) for line in lines)  # no run text may drive the terminal


__all__ = ["ReportError", "ReportResult", "build_emulation_report", "build_report",
           "controller_table"]
