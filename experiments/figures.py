"""The paper's simulation figures, drawn from run directories and datasets.

Every function reads files only (each run directory's ``config.yaml``, ``eval.parquet`` and
``sampler.parquet``; the TraceBench datasets; the cached stage 1-2 analyses) and writes PNG +
PDF through ``plume.report.figures.save_figure``. Every aggregate figure states how many runs
it pools. Statistics over training (the curves) are across seeds: the mean of the per-seed
values and the report's 95 % Student-t interval of that mean (none below 5 seeds); the report of
``plume.report.cli.build_report`` gives the end-of-training comparisons.

``render(name, runs, out, ...)`` draws figure ``name`` of ``experiments.runner`` into ``out``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

SAMPLER_ORDER = ("uniform", "trace_error", "plume_static", "plume_dynamic")
SAMPLER_LABELS = {
    "uniform": "Uniform (Random)",
    "trace_error": "Trace-Error",
    "plume_static": "Plume-Static",
    "plume_dynamic": "Plume-Dynamic",
}
# The reference's plotting styles (paper digest §8): colour, line style, marker.
SAMPLER_STYLES = {
    "uniform": ("#1b9e77", "--", "o"),
    "plume_dynamic": ("#D62728", "-", "v"),
    "plume_static": ("#a6761d", "-.", "d"),
    "trace_error": ("#7570b3", ":", "<"),
}
KIND_ORDER = ("fast_low-var", "fast_high-var", "slow_low-var", "slow_high-var")
KIND_LABELS = {
    "fast_low-var": "Fast, low variance",
    "fast_high-var": "Fast, high variance",
    "slow_low-var": "Slow, low variance",
    "slow_high-var": "Slow, high variance",
}
KIND_COLOURS = {
    "fast_low-var": "#1f77b4",
    "fast_high-var": "#17becf",
    "slow_low-var": "#d62728",
    "slow_high-var": "#ff7f0e",
}
DATASET_LABELS = {
    "majority_fast": "Majority Fast",
    "balanced": "Balanced",
    "majority_slow": "Majority Slow",
}
SUBSETS = {"all": "all traces", "slow": "slow traces"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, stem: Path) -> list[Path]:
    from plume.report.figures import save_figure

    return save_figure(fig, stem)


# --------------------------------------------------------------------------- run directories


@dataclass(frozen=True)
class RunInfo:
    """What a run directory says about itself (from its resolved ``config.yaml``)."""

    path: Path
    exp_name: str
    sampler: str
    dataset: str
    seed: int
    algo: str
    total_steps: int


def read_run(path: str | Path) -> RunInfo:
    import yaml

    path = Path(path)
    cfg = yaml.safe_load((path / "config.yaml").read_text())
    return RunInfo(
        path=path,
        exp_name=str(cfg["exp_name"]),
        sampler=str(cfg["sampler"]["name"]),
        dataset=Path(str(cfg["env"]["dataset"])).stem,
        seed=int(cfg["seed"]),
        algo=str(cfg["algo"]["name"]),
        total_steps=int(cfg["train"]["total_steps"]),
    )


def completed_runs(paths: Iterable[str | Path]) -> list[RunInfo]:
    """The completed run directories among ``paths``: each path is a run directory or a folder
    searched for ``*/status.json``."""
    found: dict[Path, None] = {}
    for path in map(Path, paths):
        candidates = [path] if (path / "status.json").is_file() else sorted(
            p.parent for p in path.rglob("status.json"))
        for candidate in candidates:
            try:
                state = json.loads((candidate / "status.json").read_text()).get("state")
            except (OSError, json.JSONDecodeError):
                continue
            if state == "completed" and (candidate / "eval.parquet").is_file():
                found[candidate] = None
    return [read_run(p) for p in found]


def qoe_table(runs: Sequence[RunInfo]) -> pd.DataFrame:
    """Per run, test set, evaluation point and subset (all / slow traces): the mean QoE per
    chunk (episode return / chunks) over the test set's traces."""
    frames = []
    for run in runs:
        frame = pd.read_parquet(run.path / "eval.parquet",
                                columns=["test_set", "label", "return", "length", "progress"])
        frame["qoe"] = frame["return"] / frame["length"]
        subsets = {"all": frame}
        if frame["label"].notna().any():
            subsets["slow"] = frame[frame["label"].astype(str).str.startswith("slow")]
        for subset, rows in subsets.items():
            means = rows.groupby(["test_set", "progress"], as_index=False)["qoe"].mean()
            frames.append(means.assign(subset=subset, sampler=run.sampler, train=run.dataset,
                                       seed=run.seed, run=str(run.path)))
    if not frames:
        return pd.DataFrame(columns=["test_set", "progress", "qoe", "subset", "sampler",
                                     "train", "seed", "run"])
    return pd.concat(frames, ignore_index=True)


def mean_and_ci(values: np.ndarray) -> tuple[float, float, float]:
    """Mean over seeds and the report's 95 % Student-t interval of it
    (``plume.report.inference``: coverage measured by simulation); NaN bounds below the
    report's minimum of runs, so no band or interval is drawn from too few seeds."""
    from plume.report.inference import enough_runs, mean_interval

    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    if not enough_runs(len(values)):
        return mean, float("nan"), float("nan")
    _, low, high = mean_interval(values)
    return mean, float(low), float(high)


def _ordered(samplers: Iterable[str]) -> list[str]:
    present = set(samplers)
    return [s for s in SAMPLER_ORDER if s in present] + sorted(present - set(SAMPLER_ORDER))


def _run_count_text(runs: Sequence[RunInfo]) -> str:
    per = pd.Series([r.sampler for r in runs]).value_counts()
    parts = ", ".join(f"{SAMPLER_LABELS.get(s, s)} {int(per[s])}" for s in _ordered(per.index))
    return f"n = {len(runs)} runs ({parts})"


def curves(ax, table: pd.DataFrame, train: str, test_set: str, subset: str) -> dict[str, int]:
    """Test QoE over training on one axis, one line per sampler (mean over seeds and 95 %
    Student-t band, none below 5 seeds); returns the number of seeds per sampler drawn."""
    rows = table[(table["train"] == train) & (table["test_set"] == test_set)
                 & (table["subset"] == subset) & (table["progress"] > 0)]  # the paper's x axis
    counts = {}
    for sampler in _ordered(rows["sampler"].unique()):
        mine = rows[rows["sampler"] == sampler]
        points = []
        for progress, at in mine.groupby("progress"):
            points.append((progress, *mean_and_ci(at["qoe"].to_numpy())))
        if not points:
            continue
        x, mean, low, high = map(np.asarray, zip(*points))
        colour, style, marker = SAMPLER_STYLES.get(sampler, (None, "-", "."))
        n = mine["seed"].nunique()
        counts[sampler] = n
        line, = ax.plot(100 * x, mean, linestyle=style, marker=marker, markersize=4,
                        color=colour, label=f"{SAMPLER_LABELS.get(sampler, sampler)} (n={n})")
        ax.fill_between(100 * x, low, high, color=line.get_color(), alpha=0.18, linewidth=0)
    ax.set_xlabel("training progress (%)")
    ax.grid(alpha=0.3)
    return counts


def curves_figure(runs: Sequence[RunInfo], panels: Sequence[tuple[str, str, str]],
                  stem: Path, title: str) -> list[Path]:
    """Columns = ``panels`` of (title, training dataset, test set); rows = all / slow traces."""
    plt = _plt()
    table = qoe_table(runs)
    fig, axes = plt.subplots(2, len(panels), figsize=(4.6 * len(panels), 7.2), squeeze=False,
                             sharex=True)
    for column, (name, train, test_set) in enumerate(panels):
        for row, subset in enumerate(SUBSETS):
            ax = axes[row][column]
            counts = curves(ax, table, train, test_set, subset)
            if row == 0:
                ax.set_title((f"{name}\n" if name else "")
                             + f"train {DATASET_LABELS.get(train, train)}, "
                             f"test {DATASET_LABELS.get(test_set, test_set)}", fontsize=10)
            if column == 0:
                ax.set_ylabel(f"test QoE per chunk, {SUBSETS[subset]}")
            if not counts:
                ax.text(0.5, 0.5, "no completed runs", ha="center", va="center",
                        transform=ax.transAxes, color="grey")
            elif row == 0 and column == 0:
                ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{title}\nmean over seeds, 95 % Student-t band over seeds (none below 5); "
                 f"{_run_count_text(runs)}",
                 fontsize=10)
    fig.tight_layout()
    return _save(fig, stem)


# --------------------------------------------------------------------------- fig10


def sampler_weight_table(runs: Sequence[RunInfo]) -> pd.DataFrame:
    """Per run and evaluation point: each ground-truth kind's probability mass and its
    relative weight (mass / the kind's share of the training traces; 1 = uniform)."""
    frames = []
    for run in runs:
        path = run.path / "sampler.parquet"
        if not path.is_file():
            continue
        frame = pd.read_parquet(path)
        frame = frame[frame["grouping"] == "label"].copy()
        if frame.empty:
            continue
        share = frame["n_traces"] / frame.groupby("progress")["n_traces"].transform("sum")
        frame["relative_weight"] = frame["weight"] / share
        frames.append(frame.assign(sampler=run.sampler, train=run.dataset, seed=run.seed))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def weights_figure(runs: Sequence[RunInfo], datasets: Sequence[str], stem: Path) -> list[Path]:
    """Paper Fig. 10: Plume-Dynamic's relative sampling weight per trace kind over training,
    one panel per training dataset (mean over seeds, 95 % Student-t band)."""
    plt = _plt()
    table = sampler_weight_table([r for r in runs if r.sampler == "plume_dynamic"])
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.2 * len(datasets), 4.0),
                             squeeze=False, sharey=True)
    used = 0
    for ax, dataset in zip(axes[0], datasets):
        rows = table[table["train"] == dataset] if not table.empty else table
        n = int(rows["seed"].nunique()) if not rows.empty else 0
        used += n
        for kind in [k for k in KIND_ORDER if not rows.empty and k in set(rows["group"])]:
            mine = rows[rows["group"] == kind]
            points = [(p, *mean_and_ci(at["relative_weight"].to_numpy()))
                      for p, at in mine.groupby("progress")]
            x, mean, low, high = map(np.asarray, zip(*points))
            ax.plot(100 * x, mean, marker="o", markersize=3, color=KIND_COLOURS[kind],
                    label=KIND_LABELS[kind])
            ax.fill_between(100 * x, low, high, color=KIND_COLOURS[kind], alpha=0.18,
                            linewidth=0)
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xlim(-2, 102)
        ax.set_title(f"trained on {DATASET_LABELS.get(dataset, dataset)} (n={n} seeds)",
                     fontsize=10)
        ax.set_xlabel("training progress (%)")
        ax.grid(alpha=0.3)
        if n == 0:
            ax.text(0.5, 0.5, "no completed runs", ha="center", va="center",
                    transform=ax.transAxes, color="grey")
    axes[0][0].set_ylabel("relative sampling weight (1 = uniform)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Plume-Dynamic: sampling weight per ground-truth kind (never seen by Plume); "
                 f"mean over seeds, 95 % Student-t band (none below 5); n = {used} runs",
                 fontsize=10)
    fig.tight_layout()
    return _save(fig, stem)


def weights_summary(runs: Sequence[RunInfo], datasets: Sequence[str]) -> str:
    """The final relative weight per kind, mean over seeds, per training dataset."""
    table = sampler_weight_table([r for r in runs if r.sampler == "plume_dynamic"])
    lines = ["Relative sampling weight at the end of training (1 = uniform), mean over seeds:",
             ""]
    if table.empty:
        return "\n".join(lines + ["no completed plume_dynamic runs"]) + "\n"
    lines += ["| trained on | n | " + " | ".join(KIND_LABELS[k] for k in KIND_ORDER) + " |",
              "|---|---|" + "---|" * len(KIND_ORDER)]
    for dataset in datasets:
        rows = table[table["train"] == dataset]
        if rows.empty:
            continue
        last = rows[rows["progress"] == rows["progress"].max()]
        means = last.groupby("group")["relative_weight"].mean()
        lines.append(f"| {DATASET_LABELS.get(dataset, dataset)} | {rows['seed'].nunique()} | "
                     + " | ".join(f"{means.get(k, np.nan):.2f}" for k in KIND_ORDER) + " |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- datasets


def _datasets():
    from plume.traces import DATASETS, load_tracebench

    return list(DATASETS), load_tracebench


def composition_figure(stem: Path) -> tuple[list[Path], pd.DataFrame]:
    """Paper Fig. 7: traces per kind in each dataset and split (stacked bars), the throughput
    distribution of each kind, and per-trace mean vs coefficient of variation."""
    plt = _plt()
    datasets, load = _datasets()
    counts = {}
    for dataset in datasets:
        for split in ("train", "test"):
            labels = pd.Series(load(dataset, split).labels)
            counts[(DATASET_LABELS.get(dataset, dataset), split)] = labels.value_counts()
    table = pd.DataFrame(counts).T.reindex(columns=list(KIND_ORDER)).fillna(0).astype(int)
    table.index.names = ["dataset", "split"]

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    x = np.arange(len(table))
    bottom = np.zeros(len(table))
    for kind in KIND_ORDER:
        ax.bar(x, table[kind], bottom=bottom, color=KIND_COLOURS[kind], label=KIND_LABELS[kind])
        bottom += table[kind].to_numpy()
    ax.set_xticks(x, [f"{d}\n({s})".replace(" ", "\n", 1) for d, s in table.index], fontsize=8)
    ax.set_ylabel("traces")
    ax.set_ylim(0, 1.3 * bottom.max())
    ax.set_title("traces per kind (train and test splits)", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", ncol=2)

    traces = load("balanced", "train")
    valid = np.arange(traces.bandwidth.shape[1])[None, :] < traces.lengths[:, None]
    bins = np.linspace(0, float(traces.bandwidth.max()), 60)
    for kind in KIND_ORDER:
        rows = traces.labels == kind
        samples = traces.bandwidth[rows][valid[rows]]
        axes[1].hist(samples, bins=bins, density=True, histtype="step", linewidth=1.5,
                     color=KIND_COLOURS[kind], label=f"{KIND_LABELS[kind]} ({rows.sum()})")
    axes[1].set_xlabel("throughput (per 1 s sample)")
    axes[1].set_ylabel("density")
    axes[1].set_title("throughput distribution per kind (Balanced, train)", fontsize=10)
    axes[1].legend(fontsize=7)

    means = traces.mean_bandwidth()
    stds = np.array([traces.bandwidth[i, : traces.lengths[i]].std()
                     for i in range(len(traces))])
    for kind in KIND_ORDER:
        rows = traces.labels == kind
        axes[2].scatter(means[rows], stds[rows] / means[rows], s=6, alpha=0.6,
                        color=KIND_COLOURS[kind], label=KIND_LABELS[kind])
    axes[2].set_xlabel("mean throughput of the trace")
    axes[2].set_ylabel("coefficient of variation")
    axes[2].set_title(f"per trace (Balanced, train, {len(traces)} traces)", fontsize=10)
    axes[2].legend(fontsize=7)
    fig.suptitle("TraceBench datasets: two-state Markov traces of four kinds", fontsize=11)
    fig.tight_layout()
    return _save(fig, stem), table


def example_traces_figure(stem: Path, per_kind: int = 3, dataset: str = "balanced") -> list[Path]:
    """Paper Fig. 13: example throughput traces of each kind, one panel per kind."""
    plt = _plt()
    _, load = _datasets()
    traces = load(dataset, "train")
    fig, axes = plt.subplots(1, len(KIND_ORDER), figsize=(16, 3.4), sharey=True)
    for ax, kind in zip(axes, KIND_ORDER):
        rows = np.flatnonzero(traces.labels == kind)[:per_kind]
        for i, row in enumerate(rows):
            n = traces.lengths[row]
            ax.step(traces.time[row, :n], traces.bandwidth[row, :n], where="post",
                    linewidth=1.0, alpha=0.85, label=str(traces.trace_ids[row]))
        ax.set_title(KIND_LABELS[kind], fontsize=10, color=KIND_COLOURS[kind])
        ax.set_xlabel("time (s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    axes[0].set_ylabel("throughput")
    fig.suptitle(f"Example TraceBench traces ({DATASET_LABELS.get(dataset, dataset)}, train; "
                 f"first {per_kind} of each kind)", fontsize=11)
    fig.tight_layout()
    return _save(fig, stem)


def analysis_settings():
    """The stage 1-2 settings training jobs use (conf/analysis/plume.yaml), so the figure
    shares their cache."""
    from omegaconf import OmegaConf

    from plume.harness.schema import analysis_settings as typed
    from plume.harness.train import CONF_DIR

    return typed(OmegaConf.load(CONF_DIR / "analysis" / "plume.yaml"))


def clusters_figure(stem: Path, cache_dir: Path, settings=None) -> tuple[list[Path], list]:
    """Paper Fig. 12: the Plume clustering of each TraceBench training split, drawn over the
    paper's axes (mean throughput vs coefficient of variation of each trace), coloured by
    cluster, marked by ground-truth kind. The clustering itself uses the kept features named
    under each panel."""
    from plume.analysis import adjusted_rand_index, analyze

    plt = _plt()
    datasets, load = _datasets()
    settings = settings or analysis_settings()
    markers = {k: m for k, m in zip(KIND_ORDER, "os^D")}
    cmap = plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.4 * len(datasets), 4.8),
                             squeeze=False)
    analyses = []
    for ax, dataset in zip(axes[0], datasets):
        traces = load(dataset, "train")
        result = analyze(traces, settings, cache_dir=cache_dir)
        analyses.append(result)
        mean = traces.mean_bandwidth()
        cv = np.array([traces.bandwidth[i, : traces.lengths[i]].std()
                       for i in range(len(traces))]) / mean
        for cluster in range(result.k):
            for kind in KIND_ORDER:
                member = (result.labels == cluster) & (traces.labels == kind)
                if member.any():
                    ax.scatter(mean[member], cv[member], s=8, alpha=0.7,
                               color=cmap(cluster % 10), marker=markers[kind])
        ax.set_xlabel("mean throughput of the trace")
        ax.set_ylabel("coefficient of variation")
        top = ", ".join(_short(f)[:28] for f in result.top_features[:2])
        ax.set_title(f"{DATASET_LABELS.get(dataset, dataset)}: k={result.k}, "
                     f"ARI {adjusted_rand_index(result):.3f}, {len(result.labels)} traces\n"
                     f"top kept features: {top}", fontsize=9)
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], linestyle="", marker=markers[k], color="grey",
                          label=KIND_LABELS[k]) for k in KIND_ORDER]
    axes[0][0].legend(handles=handles, fontsize=7, title="kind (colour = cluster)",
                      title_fontsize=7)
    fig.suptitle("Plume stages 1-2 on each TraceBench training split (ground truth never used)",
                 fontsize=11)
    fig.tight_layout()
    return _save(fig, stem), analyses


def _short(feature: str) -> str:
    return " ".join(feature.split("__")[1:]) or feature


# --------------------------------------------------------------------------- rliable report


def report(runs: Sequence[RunInfo], out: Path, options: dict[str, Any]):
    """``plume.report.cli.build_report`` on ``runs`` (grouped by sampler, uniform baseline);
    None when there are no runs."""
    if not runs:
        return None
    from plume.report.cli import build_report

    settings = {"group_by": "sampler", "baseline": "uniform", **options}
    return build_report([r.path for r in runs], out, **settings)










def render(name: str, run_dirs: Sequence[str | Path], out: str | Path, *, root: str | Path,
           expected_runs: int = 0, report_options: dict | None = None) -> dict[str, Any]:
    """Draw figure ``name`` from ``run_dirs`` (the completed runs of its jobs) into ``out``;
    returns the artefacts written (and ``_summary``: a few lines to print)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    options = dict(report_options or {})
    runs = completed_runs(run_dirs)
    root = Path(root)
    artefacts: dict[str, Any] = {}
    if name == "fig7":
        artefacts["figure"], table = composition_figure(out / "fig7_datasets")
        (out / "composition.md").write_text("Traces per kind:\n\n" + _markdown(table.reset_index()))
        artefacts["table"] = out / "composition.md"
    elif name == "fig13":
        artefacts["figure"] = example_traces_figure(out / "fig13_example_traces")
    elif name == "fig12":
        artefacts["figure"], analyses = clusters_figure(out / "fig12_clusters",
                                                        root / ".cache" / "analysis")
        from plume.analysis import adjusted_rand_index

        lines = [f"{a.dataset}: k={a.k}, sizes {a.cluster_sizes.tolist()}, "
                 f"ARI vs kinds {adjusted_rand_index(a):.3f}" for a in analyses]
        (out / "clusters.txt").write_text("\n".join(lines) + "\n")
        artefacts["summary"] = out / "clusters.txt"
        artefacts["_summary"] = "\n".join(lines)
    elif name == "fig10":
        from experiments.runner import FIG10_DATASETS

        artefacts["figure"] = weights_figure(runs, FIG10_DATASETS, out / "fig10_weights")
        text = weights_summary(runs, FIG10_DATASETS)
        (out / "weights.md").write_text(text)
        artefacts["summary"] = out / "weights.md"
        artefacts["_summary"] = text
    elif name in ("quickstart", "fig8"):
        train = "majority_fast"
        test_sets = _test_sets(runs) or ["majority_fast", "balanced", "majority_slow"]
        panels = [("", train, t) for t in test_sets]
        title = ("Quickstart: uniform vs Plume on Majority Fast" if name == "quickstart"
                 else "Fig. 8: Majority Fast ablation")
        artefacts["figure"] = curves_figure(runs, panels, out / f"{name}_test_qoe",
                                            f"{title} ({_algo_text(runs)})")
        result = report(runs, out / "report", options)
        artefacts.update(_report_artefacts(result))
        test = "majority_slow" if "majority_slow" in test_sets else test_sets[0]
        text = [f"# {title}", "", f"Runs: {_run_count_text(runs)}; {_algo_text(runs)}.", "",
                "```", _scores_text(runs, train, test), "```", ""]
        if result is not None:  # the report's verdicts: its tasks, methods and minimum runs
            text += [f"Verdicts of the report (report/report.md; tasks: "
                     f"{', '.join(result.analysis.tasks)}):", "",
                     *[f"- {answer}" for answer in result.answers], ""]
        (out / "summary.md").write_text("\n".join(text))
        artefacts["summary"] = out / "summary.md"
        artefacts["_summary"] = "\n".join(text[2:])
    elif name == "fig9":
        from experiments.runner import SCENARIOS

        panels = [(s, train, test) for s, (train, test) in SCENARIOS.items()]
        artefacts["figure"] = curves_figure(runs, panels, out / "fig9_scenarios",
                                            f"Fig. 9: scenarios S1-S3 ({_algo_text(runs)})")
        results = {}
        for scenario, (train, test) in SCENARIOS.items():
            mine = [r for r in runs if r.dataset == train]
            results[scenario] = report(mine, out / scenario, options)
            for key, value in _report_artefacts(results[scenario]).items():
                artefacts[f"{scenario} {key}"] = value
        text = fig9_summary(runs, results, options)
        (out / "summary.md").write_text(text)
        artefacts["summary"] = out / "summary.md"
        artefacts["_summary"] = text
    else:
        raise ValueError(f"no figure called {name!r}")
    if expected_runs and len(runs) < expected_runs:
        artefacts["_summary"] = (f"NOTE: {len(runs)} of {expected_runs} runs are completed; "
                                 "the figure pools those only.\n"
                                 + artefacts.get("_summary", ""))
    return artefacts


def _markdown(frame: pd.DataFrame) -> str:
    """A pipe table (pandas' to_markdown needs tabulate)."""
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "---|" * len(frame.columns)
    rows = ["| " + " | ".join(map(str, row)) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows]) + "\n"


def _test_sets(runs: Sequence[RunInfo]) -> list[str]:
    order = {"majority_fast": 0, "balanced": 1, "majority_slow": 2}
    found: set[str] = set()
    for run in runs[:1]:
        found |= set(pd.read_parquet(run.path / "eval.parquet", columns=["test_set"])["test_set"])
    return sorted(found, key=lambda t: (order.get(t, 9), t))


def _algo_text(runs: Sequence[RunInfo]) -> str:
    if not runs:
        return "no runs"
    algos = sorted({r.algo.upper() for r in runs})
    steps = sorted({r.total_steps for r in runs})
    return f"{'/'.join(algos)}, {'/'.join(f'{s:,}' for s in steps)} env steps"


def _report_artefacts(result: Any) -> dict[str, Any]:
    """report.md and the PNGs of a ``ReportResult`` (nothing for None)."""
    if result is None:
        return {}
    return {"report": result.report,
            "report figures": [p for paths in result.figures.values() for p in paths
                               if Path(p).suffix == ".png"]}


def _scores_text(runs: Sequence[RunInfo], train: str, test_set: str) -> str:
    """Final test QoE per chunk per sampler (mean over seeds, 95 % Student-t interval)."""
    table = qoe_table([r for r in runs if r.dataset == train])
    if table.empty:
        return "no completed runs"
    lines = [(f"final test QoE per chunk, train {train}, test {test_set} "
              "(mean over seeds [95 % Student-t interval]):")]
    for subset, subset_text in SUBSETS.items():
        rows = table[(table["test_set"] == test_set) & (table["subset"] == subset)]
        if rows.empty:
            continue
        last = rows[rows["progress"] == rows["progress"].max()]
        parts = []
        for sampler in _ordered(last["sampler"].unique()):
            values = last[last["sampler"] == sampler]["qoe"].to_numpy()
            mean, low, high = mean_and_ci(values)
            interval = (f"[{low:.3f}, {high:.3f}]" if np.isfinite(low)
                        else "[too few runs for an interval]")
            parts.append(f"{SAMPLER_LABELS.get(sampler, sampler)} {mean:.3f} {interval} "
                         f"(n={len(values)})")
        lines.append(f"  {subset_text}: " + "; ".join(parts))
    return "\n".join(lines)


def fig9_summary(runs: Sequence[RunInfo], results: dict[str, Any],
                 options: dict[str, Any]) -> str:
    """Plain-language summary of Fig. 9: the S1 question first (does Plume-Dynamic beat uniform
    on slow traces when trained on Majority Fast and tested on Majority Slow?), then every
    scenario's numbers."""
    from experiments.runner import SCENARIOS

    lines = ["# Fig. 9 summary", "",
             f"Runs: {_run_count_text(runs)}; {_algo_text(runs)}. The paper trained an Ape-X DQN "
             "for 4e6 env steps; these runs train PPO" + (
                 " with a smaller budget (quick profile)" if runs and max(
                     r.total_steps for r in runs) < 4_000_000 else "") + ".", ""]
    for scenario, (train, test) in SCENARIOS.items():
        mine = [r for r in runs if r.dataset == train]
        lines += [f"## {scenario}: train {DATASET_LABELS[train]}, test {DATASET_LABELS[test]}", ""]
        if not mine:
            lines += ["No completed runs.", ""]
            continue
        result = results.get(scenario)
        if result is not None:
            from plume.report.comparisons import verdict_sentence

            verdicts = result.poi
            for row in verdicts[verdicts["scope"] == "all tasks"].itertuples(index=False):
                lines.append(f"- {verdict_sentence(row, len(verdicts))}")
            lines.append(f"- rliable report (tasks: {', '.join(result.analysis.tasks)}): "
                         f"{result.report.relative_to(result.out.parent).as_posix()}")
        lines += ["", "```", _scores_text(mine, train, test), "```", ""]
    return "\n".join(lines)
