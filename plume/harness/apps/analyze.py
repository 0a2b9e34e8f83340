"""``plume-analyze``: Plume stages 1-2 on one dataset split, printed, drawn and tabulated
(``assignments.csv``: each trace's cluster; ``contingency.csv``: kinds x clusters).

    plume-analyze env.dataset=majority_fast
    plume-analyze env.dataset=balanced analysis=kmeans
    plume-analyze env=abr                       # the synthetic Puffer-like sessions
    plume-analyze env=abr env.variant=pensieve env.dataset=path/to/cooked env.trace_format=cooked
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from plume.analysis import (
    adjusted_rand_index,
    analyze,
    assignment_table,
    contingency_table,
)
from plume.analysis.figures import (
    cluster_scatter,
)
from plume.harness.apps.entry import hydra_app
from plume.harness.config.preflight import check_analyze
from plume.harness.config.schema import ConfigError


def analyze_job(cfg: DictConfig) -> None:
    """One analysis, as Hydra's task function: a user's mistake is one line (exit status 2)."""
    out = Path(HydraConfig.get().runtime.output_dir)
    try:
        print(report(cfg, out))
    except ConfigError as err:  # the user's mistake: one line, no traceback
        print(f"plume-analyze: error: {err}", file=sys.stderr)
        sys.exit(2)


main = hydra_app("analyze", analyze_job)
"""``plume-analyze``: Hydra's app over ``conf/analyze.yaml``."""


def report(cfg: DictConfig, out: Path) -> str:
    """Run (or load from cache) the analysis of ``cfg``; write figure, tables and summary
    into ``out``."""

    _, _, settings, traces = check_analyze(cfg)
    out.mkdir(parents=True, exist_ok=True)
    result = analyze(traces, settings, cache_dir=Path(cfg.paths.cache))

    lines = [
        f"dataset {traces.name}: {len(traces)} traces, content hash {traces.content_hash[:16]}",
        f"candidate features: {result.features.shape[1]}; kept {len(result.kept)}"
        + ("" if settings.select else " (no selection: ablation)"),
    ]
    for rank, name in enumerate(result.top_features, 1):
        lines.append(f"  {rank:2d}. {name:<70} importance {result.importances[name]:.3f}")
    lines.append(f"clustering: {settings.method}, k = {result.k}"
                 + (" (fixed)" if settings.fixed_k else "")
                 + (", RANDOM labels (ablation)" if settings.random_labels else ""))
    if result.silhouettes:
        lines.append("silhouette per k (* chosen; x: smallest cluster <= "
                     f"{settings.min_cluster_fraction:.2%} of traces, not eligible):")
        for k, score in sorted(result.silhouettes.items()):
            raw = result.raw_silhouettes.get(k, score)
            mark = "*" if k == result.k else ("x" if score != raw else " ")
            lines.append(f"  k={k}: {raw:.4f} {mark}")
    lines.append("cluster sizes: " + ", ".join(
        f"{c}: {int(n)}" for c, n in enumerate(result.cluster_sizes)
    ))
    summary = {
        "dataset": traces.name, "k": result.k, "kept": result.kept,
        "silhouettes": {str(k): v for k, v in result.silhouettes.items()},
        "cluster_sizes": [int(n) for n in result.cluster_sizes],
    }
    if result.true_labels is not None:
        ari = adjusted_rand_index(result)
        summary["adjusted_rand_index"] = ari
        lines.append("ground-truth kinds x clusters:")
        lines.extend("  " + row for row in contingency_table(result).to_string().splitlines())
        lines.append(f"adjusted Rand index vs ground truth: {ari:.4f}")
    timing = ", ".join(f"{k} {v:.2f} s" for k, v in result.timings.items())
    lines.append("from cache" if result.from_cache else f"timings: {timing}")
    figure = cluster_scatter(result, out / "clusters")
    tables = _write_tables(result, out)
    summary["files"] = {"figure": figure[0].name,
                        **{name: path.name for name, path in tables.items()}}
    (out / "analysis.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines.append(f"figure: {figure[0]} (+ .pdf); summary: {out / 'analysis.json'}")
    lines.append(f"cluster of each trace: {tables['assignments']}"
                 + (f"; contingency table: {tables['contingency']}"
                    if "contingency" in tables else ""))
    return "\n".join(lines)


def _write_tables(result, out: Path) -> dict[str, Path]:
    """``assignments.csv`` and, with ground truth, ``contingency.csv`` (the table printed);
    a stale contingency table goes, so the folder never shows one of other labels."""

    files = {"assignments": out / "assignments.csv", "contingency": out / "contingency.csv"}
    assignment_table(result).to_csv(files["assignments"], index=False)
    if result.true_labels is None:
        files.pop("contingency").unlink(missing_ok=True)
    else:
        contingency_table(result).to_csv(files["contingency"])
    return files


if __name__ == "__main__":
    main()
