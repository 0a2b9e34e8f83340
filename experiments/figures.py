"""The paper's figures, drawn from run directories and datasets.

Every function reads files only (each run directory's ``config.yaml``, ``eval.parquet`` and
``sampler.parquet``; the datasets; the cached stage 1-2 analyses) and writes PNG + PDF through
``plume.figures.save_figure``. Every aggregate figure states how many runs it pools.
The training figures of ``experiments.catalog`` are drawn by ``experiments.curves``; this module
draws the rest (datasets, clusters, Plume-Dynamic's weights) and dispatches.

``render(name, roles, out, ...)`` draws figure ``name`` of ``experiments.runner`` into ``out``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.catalog import DATASET_LABELS
from experiments.curves import mean_and_ci, pyplot
from plume.analysis import (
    adjusted_rand_index,
    analyze,
)
from plume.analysis.figures import (
    cluster_scatter,
)
from plume.envs.registry import get_env
from plume.figures import save_figure
from plume.harness.config.configdir import CONF_DIR
from plume.runs.record import (
    COMPLETED,
    EVAL_TABLE,
    RESOLVED_CONFIG,
    SAMPLER_TABLE,
    STATUS,
    run_state,
)
from plume.traces import DATASETS, load_tracebench

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
    cfg = yaml.safe_load((path / RESOLVED_CONFIG).read_text())
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
        candidates = [path] if (path / STATUS).is_file() else sorted(
            p.parent for p in path.rglob(STATUS))
        for candidate in candidates:
            if run_state(candidate) == COMPLETED and (candidate / EVAL_TABLE).is_file():
                found[candidate] = None
    return [read_run(p) for p in found]


# --------------------------------------------------------------------------- fig10


def sampler_weight_table(runs: Sequence[RunInfo]) -> pd.DataFrame:
    """Per run and evaluation point: each ground-truth kind's probability mass and its
    relative weight (mass / the kind's share of the training traces; 1 = uniform)."""
    frames = []
    for run in runs:
        path = run.path / SAMPLER_TABLE
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
    plt = pyplot()
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
    return save_figure(fig, stem)


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
    return list(DATASETS), load_tracebench


def composition_figure(stem: Path) -> tuple[list[Path], pd.DataFrame]:
    """Paper Fig. 7: traces per kind in each dataset and split (stacked bars), the throughput
    distribution of each kind, and per-trace mean vs coefficient of variation."""
    plt = pyplot()
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
    return save_figure(fig, stem), table


def example_traces_figure(stem: Path, per_kind: int = 3, dataset: str = "balanced") -> list[Path]:
    """Paper Fig. 13: example throughput traces of each kind, one panel per kind."""
    plt = pyplot()
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
    return save_figure(fig, stem)


def analysis_settings():
    """The stage 1-2 settings training jobs use (conf/analysis/plume.yaml), so the figure
    shares their cache."""
    from omegaconf import OmegaConf

    from plume.harness.config.schema import (
        analysis_settings as typed,  # deferred: the schema loads torch (the algorithms)
    )

    return typed(OmegaConf.load(CONF_DIR / "analysis" / "plume.yaml"))


def clusters_figure(stem: Path, cache_dir: Path, settings=None) -> tuple[list[Path], list]:
    """Paper Fig. 12: the Plume clustering of each TraceBench training split, drawn over the
    paper's axes (mean throughput vs coefficient of variation of each trace), coloured by
    cluster, marked by ground-truth kind. The clustering itself uses the kept features named
    under each panel."""

    plt = pyplot()
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
    return save_figure(fig, stem), analyses


def _short(feature: str) -> str:
    return " ".join(feature.split("__")[1:]) or feature


# --------------------------------------------------------------------------- fig11


ENV_CLUSTERS = (("fig11a", "abr"), ("fig11b", "cc"), ("fig11c", "lb"))
"""Paper Fig. 11a-c: the environment of each panel; its default training dataset is used."""


def env_clusters(out: Path, cache_dir: Path) -> tuple[dict[str, list[Path]], list[str]]:
    """Paper Fig. 11a-c: Plume's stage 1-2 on the default training traces of ABR, CC and LB
    (with each env's own analysis settings), drawn over the two most important kept features;
    returns the figures and one summary line per env."""
    from omegaconf import OmegaConf

    from plume.harness.config.schema import (
        analysis_settings,  # deferred: the schema loads torch (the algorithms)
    )

    base = OmegaConf.load(_conf_dir() / "analysis" / "plume.yaml")
    figures, lines = {}, []
    for stem, name in ENV_CLUSTERS:
        spec = get_env(name)
        dataset = spec.default_dataset(spec.params())
        traces = spec.load_builtin(dataset, "train")
        result = analyze(traces, analysis_settings(base, spec.analysis_for(dataset)),
                         cache_dir=cache_dir)
        ari = (f", ARI vs the generator's kinds {adjusted_rand_index(result):.3f}"
               if result.true_labels is not None else "")
        figures[stem] = cluster_scatter(
            result, out / f"{stem}_{name}_clusters",
            title=f"{name}: {dataset}/train, k={result.k}, {len(result.labels)} traces{ari}")
        top = ", ".join(_short(f) for f in result.top_features[:2])
        lines.append(f"{stem} {name} ({dataset}/train, {len(result.labels)} traces): k={result.k}, "
                     f"sizes {result.cluster_sizes.tolist()}{ari}; axes: {top}")
    return figures, lines


def _conf_dir() -> Path:
    return Path(CONF_DIR)


def analysis_cache() -> Path:
    """``paths.cache`` of conf/paths/default.yaml: the cache the training jobs fill, so the
    cluster figures reuse their analyses."""
    from omegaconf import OmegaConf

    return Path(OmegaConf.load(_conf_dir() / "paths" / "default.yaml").cache)


def render(name: str, roles: Mapping[Path, tuple[str, str]], out: str | Path, *,
           expected_runs: int = 0, report_options: dict | None = None,
           cache_dir: str | Path | None = None,
           groups: Sequence[str] | None = None) -> dict[str, Any]:
    """Draw figure ``name`` into ``out`` from ``roles`` (its completed run directories, each
    with its group and curve label); the cluster figures read and fill the analysis cache
    ``cache_dir`` (default: the jobs' ``paths.cache``); ``groups``: only those groups of a
    training figure. Returns the artefacts written (and ``_summary``: a few lines to
    print)."""
    from experiments.catalog import FIG10_DATASETS, TRAINING_FIGURES
    from experiments.curves import render_training

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    artefacts: dict[str, Any] = {}
    if name in TRAINING_FIGURES:
        artefacts = render_training(TRAINING_FIGURES[name].only(groups), roles, out,
                                    report_options or {})
    elif name == "fig7":
        artefacts["figure"], table = composition_figure(out / "fig7_datasets")
        (out / "composition.md").write_text("Traces per kind:\n\n" + _markdown(table.reset_index()))
        artefacts["table"] = out / "composition.md"
    elif name == "fig13":
        artefacts["figure"] = example_traces_figure(out / "fig13_example_traces")
    elif name in ("fig11", "fig12"):
        if name == "fig11":
            figures, lines = env_clusters(out, Path(cache_dir or analysis_cache()))
            artefacts.update(figures)
        else:

            artefacts["figure"], analyses = clusters_figure(out / "fig12_clusters",
                                                            Path(cache_dir or analysis_cache()))
            lines = [f"{a.dataset}: k={a.k}, sizes {a.cluster_sizes.tolist()}, "
                     f"ARI vs kinds {adjusted_rand_index(a):.3f}" for a in analyses]
        (out / "clusters.txt").write_text("\n".join(lines) + "\n")
        artefacts["summary"] = out / "clusters.txt"
        artefacts["_summary"] = "\n".join(lines)
    elif name == "fig10":
        runs = completed_runs(roles)
        artefacts["figure"] = weights_figure(runs, FIG10_DATASETS, out / "fig10_weights")
        text = weights_summary(runs, FIG10_DATASETS)
        (out / "weights.md").write_text(text)
        artefacts["summary"] = out / "weights.md"
        artefacts["_summary"] = text
    else:
        raise ValueError(f"no figure called {name!r}")
    if expected_runs and len(roles) < expected_runs:
        artefacts["_summary"] = (f"NOTE: {len(roles)} of {expected_runs} runs are completed; "
                                 "the figure pools those only.\n"
                                 + artefacts.get("_summary", ""))
    return artefacts


def _markdown(frame: pd.DataFrame) -> str:
    """A pipe table (pandas' to_markdown needs tabulate)."""
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "---|" * len(frame.columns)
    rows = ["| " + " | ".join(map(str, row)) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows]) + "\n"
