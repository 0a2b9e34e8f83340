"""Job lists of the paper figures, and the command that trains what is missing and draws them.

    python -m experiments fig9 --profile quick -j 2        # 27 plume-train jobs, then figures
    python -m experiments fig9 --dry-run                   # the jobs and which are done
    python -m experiments fig9 --render-only               # redraw from what is on disk

Every job is one ``plume-train experiment=<exp> <axis overrides> seed=<s> paths.root=<root>``
run (``python -m plume.harness.train``, the entry point of ``plume-train``), so its run
directory is the one ``plume-train`` would use by hand:
``<root>/<exp_name>/<axis overrides>/seed=<s>``. The experiment config (``conf/experiment/``)
holds the budgets; the sweep axes (training dataset, sampler, seed) live here, because seeds are
a sweep axis and the number of seeds is a property of the profile:

- ``paper``: the reference's budget (4e6 env steps, an evaluation every 5 %), seeds 0-3 (the
  reference aggregates seed indices 0-3).
- ``quick``: the ``<name>_quick`` experiment configs (smaller budgets), seeds 0-2.

Figures that share runs share jobs: fig10 draws fig9's plume_dynamic runs, fig8 reuses fig9's
majority_fast runs of uniform / plume_static / plume_dynamic and trains only trace_error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from plume.harness.train import format_clock

PROFILES = ("quick", "paper")
SEEDS = {"quick": 3, "paper": 4}
DATASETS = ("majority_fast", "balanced", "majority_slow")
# The paper's Fig. 9 scenarios: (training dataset, test set).
SCENARIOS = {
    "S1": ("majority_fast", "majority_slow"),
    "S2": ("balanced", "balanced"),
    "S3": ("majority_slow", "majority_fast"),
}
MAIN_SAMPLERS = ("uniform", "plume_static", "plume_dynamic")
FIG8_SAMPLERS = ("uniform", "trace_error", "plume_static", "plume_dynamic")
FIG10_DATASETS = ("majority_fast", "majority_slow")
FIGURES = ("quickstart", "fig7", "fig8", "fig9", "fig10", "fig12", "fig13")
NAMES = (*FIGURES, "all")
DESCRIPTIONS = {
    "quickstart": "uniform vs plume_static vs plume_dynamic on majority_fast + rliable report",
    "fig7": "TraceBench dataset composition (no training)",
    "fig8": "Majority Fast ablation: uniform, trace_error, plume_static, plume_dynamic",
    "fig9": "scenarios S1-S3: uniform vs plume_static vs plume_dynamic",
    "fig10": "Plume-Dynamic sampling weight per trace kind (fig9's plume_dynamic runs)",
    "fig12": "cluster scatter per TraceBench dataset (no training)",
    "fig13": "example TraceBench traces of each kind (no training)",
}


@dataclass(frozen=True)
class Job:
    """One plume-train run: an experiment config, its sweep-axis overrides and a seed."""

    experiment: str
    overrides: tuple[str, ...]
    seed: int

    def args(self, root: str | Path, extra: Sequence[str] = ()) -> list[str]:
        return [f"experiment={self.experiment}", *self.overrides, *extra, f"seed={self.seed}",
                f"paths.root={root}"]

    def axis(self, key: str) -> str | None:
        for override in self.overrides:
            name, _, value = override.partition("=")
            if name == key:
                return value
        return None


@dataclass
class PlannedJob:
    """A job with its full argument list, predicted run directory and current state."""

    job: Job
    args: list[str]
    run_dir: Path
    state: str | None = None  # status.json "state", None when the job never started
    log: Path | None = None
    result: dict = field(default_factory=dict)

    @property
    def completed(self) -> bool:
        return self.state == "completed"


def experiment(base: str, profile: str) -> str:
    """Name of the experiment config of ``base`` in ``profile``."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    return base if profile == "paper" else f"{base}_quick"


def figure_jobs(name: str, profile: str = "quick", n_seeds: int | None = None) -> list[Job]:
    """The plume-train jobs figure ``name`` needs in ``profile`` (n_seeds overrides the
    profile's seed count)."""
    if name not in NAMES:
        raise ValueError(f"unknown figure {name!r}; valid: {', '.join(NAMES)}")
    seeds = range(SEEDS[profile] if n_seeds is None else n_seeds)
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")

    def grid(base: str, datasets: Iterable[str], samplers: Iterable[str]) -> list[Job]:
        exp = experiment(base, profile)
        return [
            Job(exp, (f"env.dataset={dataset}", f"sampler={sampler}"), seed)
            for dataset in datasets for sampler in samplers for seed in seeds
        ]

    if name == "all":
        unique: dict[Job, None] = {}
        for figure in FIGURES:
            unique.update(dict.fromkeys(figure_jobs(figure, profile, n_seeds)))
        return list(unique)
    if name == "quickstart":
        return grid("quickstart", ["majority_fast"], MAIN_SAMPLERS)
    if name == "fig9":
        return grid("fig9", DATASETS, MAIN_SAMPLERS)
    if name == "fig10":
        return grid("fig9", FIG10_DATASETS, ["plume_dynamic"])
    if name == "fig8":
        # Same budgets as fig9 (conf/experiment/fig8.yaml inherits fig9.yaml): the three
        # samplers fig9 already trains on majority_fast are reused, trace_error is new.
        shared = [s for s in FIG8_SAMPLERS if s in MAIN_SAMPLERS]
        own = [s for s in FIG8_SAMPLERS if s not in MAIN_SAMPLERS]
        jobs = grid("fig9", ["majority_fast"], shared) + grid("fig8", ["majority_fast"], own)
        order = {s: i for i, s in enumerate(FIG8_SAMPLERS)}
        return sorted(jobs, key=lambda j: (order[j.axis("sampler")], j.seed))
    return []  # fig7, fig12, fig13 draw datasets only


def plan(jobs: Sequence[Job], root: str | Path, extra: Sequence[str] = ()) -> list[PlannedJob]:
    """Compose and validate every job's config as plume-train would, predict its run directory
    and read its state; a bad override fails here, before anything trains."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from plume.harness.schema import validate
    from plume.harness.train import CONF_DIR  # also registers the plume_dirname resolver

    planned = []
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            for job in jobs:
                args = job.args(root, extra)
                cfg = compose("train", overrides=args, return_hydra_config=True)
                validate(cfg)
                run_dir = Path(OmegaConf.select(cfg, "hydra.run.dir"))
                state = _read_state(run_dir)
                if cfg.get("overwrite") and state == "completed":
                    state = "overwrite"
                planned.append(PlannedJob(job, args, run_dir, state))
    finally:
        GlobalHydra.instance().clear()
    return planned


def _read_state(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / "status.json").read_text()).get("state")
    except (OSError, json.JSONDecodeError):
        return None


def _show(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _job_name(item: PlannedJob, root: Path) -> str:
    try:
        return item.run_dir.relative_to(root).as_posix()
    except ValueError:
        return item.run_dir.as_posix()


def train_env() -> dict[str, str]:
    """Environment of every plume-train subprocess: one thread per job, W&B quiet."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               WANDB_SILENT="true")
    return env


def execute(pending: Sequence[PlannedJob], workers: int, root: Path, log_dir: Path,
            stream: TextIO | None = None) -> list[PlannedJob]:
    """Run ``pending`` as plume-train subprocesses, ``workers`` at a time; one progress line
    per finished job. A failed job is reported and the others continue. Returns the failed."""
    stream = stream or sys.stdout
    failed: list[PlannedJob] = []
    if not pending:
        return failed
    env = train_env()
    started = time.time()
    procs: dict[int, subprocess.Popen] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def run_one(index: int, item: PlannedJob) -> PlannedJob:
        if stop.is_set():
            item.result = {"rc": None, "seconds": 0.0, "error": "not started (interrupted)"}
            return item
        begin = time.time()
        try:
            item.log = _log_path(log_dir, root, item.run_dir, index)
            item.log.parent.mkdir(parents=True, exist_ok=True)
            with open(item.log, "w") as handle:
                handle.write("$ plume-train " + " ".join(item.args) + "\n")
                handle.flush()
                proc = subprocess.Popen(
                    [sys.executable, "-m", "plume.harness.train", *item.args],
                    stdout=handle, stderr=subprocess.STDOUT, env=env,
                )
                with lock:
                    procs[index] = proc
                rc = proc.wait()
                with lock:
                    procs.pop(index, None)
        except OSError as err:  # could not write the log or start the process
            item.result = {"rc": None, "seconds": time.time() - begin,
                           "error": f"{type(err).__name__}: {err}"}
            return item
        item.state = _read_state(item.run_dir)
        item.result = {"rc": rc, "seconds": time.time() - begin}
        return item

    total = len(pending)
    done = 0
    print(f"training {total} job(s), {workers} at a time (OMP_NUM_THREADS=1 each); "
          f"logs under {_show(log_dir)}", file=stream, flush=True)
    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        futures = [pool.submit(run_one, i, item) for i, item in enumerate(pending)]
        for future in as_completed(futures):
            item = future.result()
            done += 1
            elapsed = time.time() - started
            eta = elapsed / done * (total - done)
            ok = item.result["rc"] == 0 and item.state == "completed"
            line = (f"[{done:>{len(str(total))}}/{total}] {'done  ' if ok else 'FAILED'} "
                    f"{item.result['seconds']:6.1f} s  {_job_name(item, root)} | "
                    f"elapsed {format_clock(elapsed)} | eta {format_clock(eta)}")
            if not ok:
                failed.append(item)
                line += f"\n    rc={item.result['rc']}: {_failure(item)}\n    log: {_show(item.log)}"
            print(line, file=stream, flush=True)
    except KeyboardInterrupt:
        stop.set()
        with lock:
            running = list(procs.values())
        for proc in running:  # only the subprocesses this runner started
            proc.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return failed


def _log_path(log_dir: Path, root: Path, run_dir: Path, index: int) -> Path:
    """``<log_dir>/<exp_name>/<overrides>/seed=<s>.log``, mirroring the run directory; a very
    long overrides folder name is shortened with a hash (file names stop at 255 bytes)."""
    import hashlib

    try:
        parts = list(run_dir.relative_to(root).parts)
    except ValueError:
        parts = [f"job-{index:03d}"]
    parts = [p if len(p) <= 200 else p[:180] + "-" + hashlib.sha1(p.encode()).hexdigest()[:12]
             for p in parts]
    path = log_dir.joinpath(*parts)
    return path.with_name(path.name + ".log")


def _failure(item: PlannedJob) -> str:
    if item.result.get("error"):
        return item.result["error"]
    try:
        status = json.loads((item.run_dir / "status.json").read_text())
        if status.get("error"):
            return str(status["error"]).splitlines()[0][:300]
    except (OSError, json.JSONDecodeError):
        pass
    if item.log and item.log.is_file():
        lines = [line.strip() for line in item.log.read_text().splitlines()
                 if line.strip() and "HYDRA_FULL_ERROR" not in line]
        errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception)\b", line)]
        if errors or lines:
            return (errors or lines)[-1][:300]
    return "no status.json and no output"


def run(name: str, profile: str = "quick", workers: int = 2, root: str | Path = "runs",
        out: str | Path = "reports", dry_run: bool = False, render_only: bool = False,
        overrides: Sequence[str] = (), n_seeds: int | None = None,
        report_options: dict | None = None, stream: TextIO | None = None) -> dict:
    """The whole command; returns counts, failures and the rendered artefacts."""
    stream = stream or sys.stdout
    root_path, out_path = Path(root), Path(out)
    figures = FIGURES if name == "all" else (name,)
    jobs = figure_jobs(name, profile, n_seeds)
    began = time.time()
    planned = plan(jobs, root, overrides)
    by_job = {p.job: p for p in planned}
    done = [p for p in planned if p.completed]
    pending = [p for p in planned if not p.completed]
    print(f"{name} ({DESCRIPTIONS.get(name, 'every figure')}), profile {profile}: "
          f"{len(planned)} job(s), {len(done)} already completed, {len(pending)} to train; "
          f"runs under {_show(root_path)}", file=stream, flush=True)
    if dry_run:
        for item in planned:
            print(f"  [{item.state or 'new'}] plume-train {' '.join(item.args)}\n"
                  f"      -> {_show(item.run_dir)}", file=stream)
        targets = ", ".join(_show(out_path / f) for f in figures)
        print(f"figures and reports would go to: {targets}", file=stream, flush=True)
        return {"jobs": planned, "completed": len(done), "pending": len(pending),
                "trained": 0, "failed": [], "artefacts": {}}
    failed: list[PlannedJob] = []
    trained = 0
    if pending and not render_only:
        failed = execute(pending, workers, root_path, out_path / name / "logs", stream)
        trained = len(pending) - len(failed)
        print(f"trained {trained}, skipped {len(done)} (already completed), "
              f"failed {len(failed)}; training took {format_clock(time.time() - began)}",
              file=stream, flush=True)
    elif render_only and pending:
        print(f"--render-only: {len(pending)} job(s) not completed are left out of the figures",
              file=stream, flush=True)

    from experiments import figures as draw

    artefacts: dict[str, dict] = {}
    for figure in figures:
        runs = [by_job[j].run_dir for j in figure_jobs(figure, profile, n_seeds)
                if _read_state(by_job[j].run_dir) == "completed"]
        wanted = len(figure_jobs(figure, profile, n_seeds))
        target = out_path / figure
        try:
            artefacts[figure] = draw.render(figure, runs, target, root=root_path,
                                            expected_runs=wanted,
                                            report_options=report_options or {})
        except Exception as err:  # noqa: BLE001  (one figure's failure must not hide the others)
            import traceback

            artefacts[figure] = {"error": f"{type(err).__name__}: {err}"}
            print(f"{figure}: rendering FAILED: {type(err).__name__}: {err}", file=stream)
            traceback.print_exc(file=stream)
            continue
        _print_artefacts(figure, artefacts[figure], wanted, len(runs), stream)
    print(f"finished {name} in {format_clock(time.time() - began)}", file=stream, flush=True)
    return {"jobs": planned, "completed": len(done), "pending": len(pending),
            "trained": trained, "failed": failed, "artefacts": artefacts}


def _print_artefacts(figure: str, artefacts: dict, wanted: int, have: int,
                     stream: TextIO) -> None:
    counts = f" from {have}/{wanted} completed runs" if wanted else ""
    print(f"{figure}{counts}:", file=stream)
    for key, value in artefacts.items():
        if key.startswith("_"):
            continue
        paths = value if isinstance(value, (list, tuple)) else [value]
        shown = [_show(Path(p)) for p in paths if isinstance(p, (str, Path))]
        if shown:
            print(f"  {key}: {', '.join(shown)}", file=stream)
    text = artefacts.get("_summary")
    if text:
        print("  " + "\n  ".join(text.strip().splitlines()), file=stream)
    stream.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m experiments",
        description="Train what a paper figure needs (skipping completed jobs), then draw it.",
    )
    parser.add_argument("name", choices=NAMES, help="; ".join(
        f"{k}: {v}" for k, v in DESCRIPTIONS.items()) + "; all: every figure")
    parser.add_argument("--profile", choices=PROFILES, default="quick",
                        help="quick: <exp>_quick configs, 3 seeds (default); paper: the "
                             "reference's budget (4e6 env steps, every 5%%), 4 seeds")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="parallel plume-train jobs")
    parser.add_argument("--root", default="runs", help="paths.root of every job (runs)")
    parser.add_argument("--out", default="reports", help="figures go to OUT/NAME (reports)")
    parser.add_argument("--dry-run", action="store_true", help="print the jobs and stop")
    parser.add_argument("--render-only", action="store_true",
                        help="train nothing; draw from the completed runs")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="extra plume-train override for every job (repeatable); keys "
                             "that change training also change the run directories")
    parser.add_argument("--seeds", type=int, default=None,
                        help="number of seeds (0..N-1) instead of the profile's")
    parser.add_argument("--reps", type=int, default=None,
                        help="bootstrap repetitions of the rliable report (report default)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the report bootstrap")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("-j must be >= 1")
    if args.seeds is not None and args.seeds < 1:
        parser.error("--seeds must be >= 1")
    report_options = {k: v for k, v in {"reps": args.reps, "seed": args.seed}.items()
                      if v is not None}
    try:
        result = run(args.name, args.profile, args.jobs, args.root, args.out,
                     dry_run=args.dry_run, render_only=args.render_only,
                     overrides=args.override, n_seeds=args.seeds,
                     report_options=report_options)
    except KeyboardInterrupt:
        print("interrupted; completed jobs are kept, a re-run trains the rest "
              "(interrupted ones resume from their checkpoints)", file=sys.stderr)
        return 130
    broken = [f for f, a in result["artefacts"].items() if "error" in a]
    return 1 if result["failed"] or broken else 0
