"""Reports: tables, statistics and figures from run directories and analyses.

Only this layer knows rliable and plotting styles. It reads run directories (files), never
the tracker:

    from plume.report import build_report
    result = build_report(["runs/quickstart"], "reports/quickstart", baseline="uniform")
    result.poi            # probability of improvement of each sampler over the baseline
    result.report         # reports/quickstart/report.md

or, step by step: ``scan_runs`` -> ``load_scores`` -> ``analyse`` -> ``plots.all_figures``.
"""

from plume.report.cli import ReportResult, build_report
from plume.report.runs import RunInventory, RunScanError, load_scores, scan_runs
from plume.report.stats import (
    NORMALISATIONS,
    Analysis,
    Normalisation,
    ReportStatsError,
    SeedMismatchError,
    analyse,
    normalise,
)

__all__ = [
    "NORMALISATIONS",
    "Analysis",
    "Normalisation",
    "ReportResult",
    "ReportStatsError",
    "RunInventory",
    "RunScanError",
    "SeedMismatchError",
    "analyse",
    "build_report",
    "load_scores",
    "normalise",
    "scan_runs",
]
