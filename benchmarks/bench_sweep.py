"""Benchmark: a local sweep through the joblib launcher against the same jobs one after another.

Run from the repository root::

    python benchmarks/bench_sweep.py [--jobs 12] [--workers 2] [--steps 32768]

Both sides go through ``experiments.runner.launch``, the code path of ``python -m experiments``:
``--jobs`` tiny TraceBench jobs (uniform sampler, seeds 0..N-1, one test set, a 32-32 network)
handed to Hydra's basic launcher (one job after another in this process: no process start-up
at all) and then to the joblib launcher with ``--workers`` loky workers (their start-up and
imports included in the time). Each side trains into its own folder, so nothing is skipped. One
job is trained first to fill stage 1-2's cache, which both sides then share. Target: the joblib
sweep takes at most 0.6x the wall time of the sequential one on 2 cores. The load average is
printed first: other processes on those cores slow the parallel side most.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from pathlib import Path

import single_thread  # noqa: F401  (one BLAS thread per process; must precede numpy)

from experiments import runner

TARGET = 0.6


def job_overrides(steps: int, cache: Path) -> list[str]:
    return [f"train.total_steps={steps}", "train.eval_points=2", "train.progress_every_s=0",
            "env.n_envs=8", "env.test_sets=[majority_slow]", "algo.n_steps=64",
            "algo.hidden_sizes=[32,32]", "logger=none", f"paths.cache={cache}"]


def sweep(n_jobs: int, root: Path, overrides: list[str], launcher: list[str]) -> float:
    """Wall seconds of one sweep of ``n_jobs`` jobs under ``root``; fails loudly if a job did."""
    jobs = [runner.Job("quickstart_quick", ("env.dataset=majority_fast", "sampler=uniform"), s)
            for s in range(n_jobs)]
    planned = runner.plan(jobs, root, overrides)
    started = time.perf_counter()
    failed = runner.launch(planned, runner.launcher_overrides(launcher, 1), io.StringIO(),
                           progress_every_s=3600)
    seconds = time.perf_counter() - started
    if failed:
        raise SystemExit(f"{len(failed)} job(s) failed: {failed[0].error}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=32768, help="env steps per job")
    args = parser.parse_args()
    print("load average before: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        base = Path(tmp)
        overrides = job_overrides(args.steps, base / "cache")
        sweep(1, base / "warmup", overrides, ["hydra/launcher=basic"])
        sequential = sweep(args.jobs, base / "sequential", overrides, ["hydra/launcher=basic"])
        parallel = sweep(args.jobs, base / "joblib", overrides,
                         ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={args.workers}"])
    ratio = parallel / sequential
    print(f"{args.jobs} TraceBench jobs of {args.steps:,} env steps, {os.cpu_count()} CPUs")
    print(f"one after another (basic launcher): {sequential:7.1f} s")
    print(f"joblib launcher, {args.workers} workers:     {parallel:7.1f} s")
    verdict = "meets" if ratio <= TARGET else "misses"
    print(f"ratio {ratio:.2f} ({verdict} the target of at most {TARGET}x)")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
