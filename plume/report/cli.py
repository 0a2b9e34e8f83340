"""``plume-report``: the command line of the report builder (``plume.report.builder``).

    plume-report runs/quickstart --out reports/quickstart
    plume-report runs/a runs/b/seed=3 --out reports/ab --group-by config_key --seeds refuse
    plume-report runs/fig9 --out reports/fig9 --paper      # 50000 bootstrap reps for aggregates
    plume-report runs/emulation --out reports/emulation    # plume-emulate runs alone
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from plume.report.builder import ReportError, build_emulation_report, build_report
from plume.report.stats import DEFAULT_REPS, PAPER_AGGREGATE_REPS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="plume-report",
        description="Pool Plume run directories with rliable: report.md, tables, figures.")
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="sweep roots and/or run directories (folders with status.json)")
    parser.add_argument("--out", required=True, help="output folder for the report")
    parser.add_argument("--group-by", default="sampler",
                        help="what an algorithm is: sampler (default), config_key, or "
                             "comma-separated columns such as algo,sampler")
    parser.add_argument("--baseline", default="uniform",
                        help="what the others are compared against: a sampler (default "
                             "uniform) or, with --group-by config_key, a run folder's name "
                             "(e.g. 'algo.per=false,sampler=uniform'); 'none' to skip")
    parser.add_argument("--seeds", choices=["trim", "refuse"], default="trim",
                        help="unequal seeds: keep the common ones (trim, default) or stop")
    parser.add_argument("--reps", type=int, default=None,
                        help=f"bootstrap repetitions (default {DEFAULT_REPS})")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--paper", action="store_true",
                        help=f"{PAPER_AGGREGATE_REPS} repetitions for the aggregate estimates")
    parser.add_argument("--no-figures", action="store_true", help="tables and report.md only")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    group_by = [g.strip() for g in args.group_by.split(",") if g.strip()]
    baseline = None if args.baseline.lower() in ("none", "") else args.baseline
    try:
        result = build_report(
            args.paths, args.out, group_by=group_by[0] if len(group_by) == 1 else group_by,
            baseline=baseline, seeds=args.seeds, reps=args.reps, seed=args.seed,
            paper=args.paper, figures=not args.no_figures)
    except ReportError as err:
        try:  # a folder of plume-emulate results alone still reports
            report = build_emulation_report(args.paths, args.out,
                                            figures=not args.no_figures)
        except ReportError:
            print(f"plume-report: error: {err}", file=sys.stderr)
            return 2
        print(f"emulation only (no completed runs): report: {report}")
        return 0
    print(result.summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())

