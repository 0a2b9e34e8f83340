"""Reports: tables, statistics and figures from run directories and analyses.

Only this layer knows rliable and plotting styles. It reads run directories (files), never
the tracker:

    from plume.report import build_report
    result = build_report(["runs/quickstart"], "reports/quickstart", baseline="uniform")
    result.poi            # each sampler vs the baseline: difference of means, PoI, verdict
    result.report         # reports/quickstart/report.md

or, step by step: ``scan_runs`` -> ``load_scores`` -> ``analyse`` -> ``plots.all_figures``.
No interval and no verdict is stated from fewer than ``MIN_RUNS`` (5) runs per side; the
methods and their measured coverage live in ``plume.report.inference``, the choice of tasks
in ``plume.report.tasks``.
"""

from plume.report.builder import ReportResult, build_report
from plume.report.inference import MIN_RUNS
from plume.report.runs import RunInventory, RunScanError, load_scores, scan_runs
from plume.report.stats import (
    Analysis,
    Normalisation,
    ReportStatsError,
    SeedMismatchError,
    analyse,
    builtin_normalisation,
    normalise,
)

__all__ = [
    "MIN_RUNS",
    "Analysis",
    "Normalisation",
    "ReportResult",
    "ReportStatsError",
    "RunInventory",
    "RunScanError",
    "SeedMismatchError",
    "analyse",
    "build_report",
    "builtin_normalisation",
    "load_scores",
    "normalise",
    "scan_runs",
]
