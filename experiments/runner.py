"""The command that trains what the paper figures miss and draws them (their job lists:
``experiments.jobs``; the ``--seeds auto`` design: ``experiments.rounds``).

    python -m experiments fig9 --profile quick -j 2        # 27 plume-train jobs, then figures
    python -m experiments fig9 hydra/launcher=submitit_slurm hydra.launcher.partition=cpu
    python -m experiments fig9 --dry-run                   # the jobs and which are done
    python -m experiments fig9 --render-only               # redraw from what is on disk
    python -m experiments fig9 --seeds auto                # seeds in rounds (experiments/rounds.py)

Every job is one ``plume-train experiment=<exp> <axis overrides> seed=<s> paths.root=<root>``
run, so its run directory is the one ``plume-train`` would use by hand:
``<root>/<exp_name>/<axis overrides>/seed=<s>``. The experiment config (``conf/experiment/``)
holds the budgets; the sweep axes (training dataset, sampler, seed) live here, because seeds are
a sweep axis and the number of seeds is a property of the profile:

- ``paper``: the reference's budget (4e6 env steps, an evaluation every 5 %), seeds 0-4 (the
  reference aggregates seed indices 0-3; the report needs 5 runs per side for an interval or
  a verdict, ``plume.report.inference.MIN_RUNS``).
- ``quick``: the ``<name>_quick`` experiment configs (smaller budgets), seeds 0-4.

In both, a group of the catalog whose effect is small asks for more seeds (``Group.seeds``:
Fig. 9's PPO S2, PPO S3 and DQN S3 train seeds 0-9); ``--seeds N`` replaces every count, and
``--seeds auto`` adds seeds in rounds until each comparison is decided (``experiments.rounds``).

Figures that share runs share jobs: fig10 draws fig9's plume_dynamic runs, fig8 reuses fig9's
majority_fast runs of uniform / plume_static / plume_dynamic and trains only trace_error.

The jobs not yet completed are one Hydra multirun (docs/ARCHITECTURE.md, "Sweeps"): ``launch``
runs ``plume-train -m`` (``plume-eval -m``) with the ``plume`` sweeper on their override lists
(``hydra.sweeper.jobs``) and the launcher of ``conf/hydra/launcher/`` that the command line
chooses (joblib with ``-j`` workers by default). The same figure runs on a laptop, a SLURM
cluster or a Ray cluster by changing that one choice.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from experiments import rounds
from experiments.catalog import DESCRIPTIONS, FIGURES, PROFILES, TRAINING_FIGURES
from experiments.jobs import NAMES, Job, figure_jobs, groups_problem
from experiments.rounds import (
    SEQUENTIAL_FILE,
    decide_look,
    design_lines,
    figure_comparisons,
    final_decisions,
    look_statistics,
    looks_of,
    next_curves,
    round_jobs,
    round_line,
    round_record,
    summary_lines,
)
from hydra_plugins.plume_sweeper.plume_sweeper import job_names
from plume.agents import ALGORITHMS
from plume.agents.lockstep import lockstep_refusal
from plume.harness.config.configdir import plume_hydra
from plume.harness.config.preflight import check_controller
from plume.harness.config.schema import ConfigError, validate
from plume.harness.training.progress import format_clock
from plume.report.inference import ALPHA
from plume.report.sequential import CONTINUE, design
from plume.runs.record import (
    COMPLETED,
    FAILED,
    RUNNING,
    STATUS,
    TRAIN_LOG,
    Broken,
    RunStatus,
    read_status,
    run_state,
)

# conf/hydra/launcher/<name>.yaml has the name of the plugin's own schema, so Hydra 1.3 checks
# it against that schema (wanted) and warns that this matching is deprecated (noise) whenever
# ``plan`` composes a job with a launcher chosen.
warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/\w+' is validated against "
                        "ConfigStore schema", category=UserWarning)


@dataclass
class PlannedJob:
    """A job with its full argument list, predicted run directory and current state."""

    job: Job
    args: list[str]
    run_dir: Path
    state: str | None = None  # status.json "state", None when the job never started
    total_steps: int = 0  # train.total_steps, for the progress line
    kind: str = ""  # "<env>/<algo>" of a training job: runs of one kind train at one speed
    error: str | None = None  # why it did not complete, once launched
    together: bool = False  # its learner can be trained with other seeds in one process

    @property
    def completed(self) -> bool:
        return self.state == COMPLETED


def plan(jobs: Sequence[Job], root: str | Path, extra: Sequence[str] = (),
         hydra_overrides: Sequence[str] = ()) -> list[PlannedJob]:
    """Compose and validate every job's config as plume-train would (with the launcher's
    ``hydra_overrides``), predict its run directory and read its state; a bad override, a job
    key or a launcher key, fails here, before anything trains."""
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf


    checks = {"train": validate, "eval": check_controller}
    planned, composed = [], {}
    GlobalHydra.instance().clear()
    try:
        with plume_hydra():
            for job in jobs:
                args = job.args(root, extra)
                # The seeds of one configuration differ only in the seed, which is out of the
                # folder name but its last part: composed and checked once, not once per seed.
                key = (job.config, tuple(a for a in args if not a.startswith("seed=")))
                if key not in composed:
                    cfg = compose(job.config, overrides=[*hydra_overrides, *args],
                                  return_hydra_config=True)
                    composed[key] = (cfg, checks[job.config](cfg))
                cfg, checked = composed[key]
                cfg.seed = int([a for a in args if a.startswith("seed=")][-1].partition("=")[2])
                run_dir = Path(OmegaConf.select(cfg, "hydra.run.dir"))
                state = read_state(run_dir)
                if cfg.get("overwrite") and state == COMPLETED:
                    state = "overwrite"
                train = job.config == "train"
                steps = int(cfg.train.total_steps) if train else 0
                # the learner it trains (an env's default preset when the job names none)
                kind = f"{cfg.env.name}/{checked.algo_name}" if train else ""
                together = train and lockstep_refusal(ALGORITHMS[checked.algo_name],
                                                      checked.algo) is None
                planned.append(PlannedJob(job, args, run_dir, state, steps, kind,
                                          together=together))
    finally:
        GlobalHydra.instance().clear()
    return planned


def read_state(run_dir: Path) -> str | None:
    """The state to believe (``plume.runs.record.run_state``): None when the job never
    started, ``interrupted`` when its process is gone, ``broken`` when its status is damaged."""
    return run_state(run_dir)


def show(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# --- Launching: the pending jobs as one Hydra multirun -----------------------------------------

# The sweep's process has these and its workers inherit them (joblib, submitit, a local Ray
# instance): one BLAS/OpenMP thread per job, W&B quiet. A job's torch threads come from
# train.torch_threads.
WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "WANDB_SILENT": "true"}
JOBLIB_PLUGIN = "hydra_plugins.hydra_joblib_launcher"


def launcher_overrides(hydra_overrides: Sequence[str], workers: int) -> list[str]:
    """The Hydra overrides of the sweep: the user's ``hydra...`` overrides, plus joblib with
    ``workers`` jobs at a time when no launcher is chosen (Hydra's basic launcher, one job after
    another in the sweep's process, when the joblib plugin is not installed), and job logs to
    each run directory's ``train.log`` only and the launcher's own log off, so the console
    keeps the one progress line."""
    import importlib.util

    chosen = list(hydra_overrides)
    keys = [o.partition("=")[0].lstrip("+~") for o in chosen]
    if "hydra/launcher" not in keys:
        has_joblib = importlib.util.find_spec(JOBLIB_PLUGIN) is not None
        chosen.insert(0, "hydra/launcher=joblib" if has_joblib else "hydra/launcher=basic")
    if "hydra/launcher=joblib" in chosen and "hydra.launcher.n_jobs" not in keys:
        chosen.append(f"hydra.launcher.n_jobs={workers}")
    if not any(k.startswith(("hydra/job_logging", "hydra.job_logging")) for k in keys):
        chosen.append("hydra.job_logging.root.handlers=[file]")
    if not any(k.startswith(("hydra/hydra_logging", "hydra.hydra_logging")) for k in keys):
        chosen.append("hydra/hydra_logging=none")  # the launcher's own list of the jobs
    return chosen


def seed_packs(pending: Sequence[PlannedJob], width: int) -> list[list[PlannedJob]]:
    """``pending`` as the jobs one sweep launches: with ``width`` > 1, training jobs that
    differ only in their seed and whose learner can be trained with others, in runs of at most
    ``width`` consecutive seeds, one job each (``train.seeds_in_process``; each seed still
    writes its own run directory); every other job alone."""
    packs: list[list[PlannedJob]] = []
    last: dict[tuple[str, ...], list[PlannedJob]] = {}
    for item in pending:
        if width <= 1 or not item.together:
            packs.append([item])
            continue
        key = tuple(a for a in item.args if not a.startswith("seed="))
        pack = last.get(key)
        if pack and len(pack) < width and item.job.seed == pack[-1].job.seed + 1:
            pack.append(item)
        else:
            last[key] = [item]
            packs.append(last[key])
    return packs


def pack_args(pack: Sequence[PlannedJob]) -> list[str]:
    """The arguments of the one job that trains ``pack``'s seeds."""
    args = list(pack[0].args)
    return args if len(pack) == 1 else [*args, f"train.seeds_in_process={len(pack)}"]


def launch(pending: Sequence[PlannedJob], overrides: Sequence[str],
           stream: TextIO | None = None, progress_every_s: float = 30.0,
           seeds_in_process: int = 1) -> list[PlannedJob]:
    """Run ``pending`` as one ``plume-train -m`` (``plume-eval -m``) process, through the
    launcher that the Hydra ``overrides`` choose, and wait for it; an aggregate progress line
    is printed meanwhile. A figure's unfinished jobs need not be a cartesian product, so the
    ``plume`` sweeper is handed the explicit list (``hydra.sweeper.jobs``); its refusals and
    summary are the app's own, and the sweep's folder (where launchers keep their files, e.g.
    submitit's ``.submitit/``) is the first job's experiment folder. A failed job is reported
    and the others go on; ``seeds_in_process`` > 1 packs seeds (:func:`seed_packs`). Returns
    the jobs that did not complete (with ``error`` set)."""
    stream = stream or sys.stdout
    if not pending:
        return []
    config = pending[0].job.config
    if any(p.job.config != config for p in pending):
        raise ValueError("one multirun launches jobs of one config (plume-train or plume-eval)")
    packs = seed_packs(pending, seeds_in_process)
    packed = "" if len(packs) == len(pending) else (
        f" ({len(pending)} seeds, up to {seeds_in_process} trained together per process)")
    print(f"launching {len(packs)} job(s){packed}: {' '.join(overrides)}; each job logs to "
          f"<run dir>/train.log", file=stream, flush=True)
    with tempfile.TemporaryDirectory(prefix="plume-sweep-") as folder:
        jobs_file = Path(folder) / "jobs.json"
        jobs_file.write_text(json.dumps([pack_args(p) for p in packs]))
        with open(Path(folder) / "stderr.txt", "w+", errors="replace") as errors:
            with SweepProgress(pending, stream, progress_every_s):
                code = _run_sweep(sweep_command(config, overrides, jobs_file), errors)
            errors.seek(0)
            lines = errors.read().splitlines()
    return _failures(packs, APPS[config][1], lines, code, stream)


# The app of each job config: its module (run with this Python, as ``python -m``: the working
# directory is importable, as it is for the figure command) and its name in its own lines.
APPS = {"train": ("plume.harness.apps.train", "plume-train"),
        "eval": ("plume.harness.apps.evaluate", "plume-eval")}


def sweep_command(config: str, overrides: Sequence[str], jobs_file: Path) -> list[str]:
    """The command line of the sweep: the app in multirun mode, the ``plume`` sweeper on the
    jobs file, the launcher ``overrides``; jobs named after their config (``train``,
    ``eval``), as their logs (``<run dir>/train.log``) and cluster jobs are."""
    keys = [o.partition("=")[0].lstrip("+~") for o in overrides]
    name = [] if "hydra.job.name" in keys else [f"hydra.job.name={config}"]
    return [sys.executable, "-m", APPS[config][0], "-m", "hydra/sweeper=plume",
            f"hydra.sweeper.jobs={_override_value(str(jobs_file))}", *name, *overrides]


def _override_value(text: str) -> str:
    """``text`` as the value of a Hydra override: as is when it is a plain path, else quoted."""
    if re.fullmatch(r"[\w./-]+", text):
        return text
    return "'" + text.replace("'", "\\'") + "'"


def _run_sweep(command: list[str], errors: TextIO) -> int:
    """Run the sweep's process to its end, ``WORKER_ENV`` in its environment (its workers
    inherit it), its stderr into ``errors``; its exit status. Ctrl-C reaches it too: it is
    given time to stop its jobs before the interrupt goes on."""
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stderr=errors,
                               env={**os.environ, **WORKER_ENV})
    try:
        return process.wait()
    except BaseException:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        raise


def _failures(packs: Sequence[Sequence[PlannedJob]], app: str, stderr: Sequence[str],
              code: int, stream: TextIO) -> list[PlannedJob]:
    """The jobs whose run directory does not say completed, each with its error: the text of
    ``status.json`` (the job's own record), else the sweep's line about the job (refused
    before or while running, failed), else why the sweep stopped: the last line it wrote when
    it ended without its summary (e.g. the launcher raised)."""
    said = _sweep_lines([pack_args(p) for p in packs], app, stderr)
    stopped = None
    if not any(line.startswith(f"{app}: sweep of ") for line in stderr):
        stopped = _last_line(stderr) or f"{app} exited with status {code}"
        print(f"the launcher stopped: {stopped}", file=stream)
    failed = []
    for pack, line in zip(packs, said):
        for item in pack:
            item.state = read_state(item.run_dir)
            if item.completed:
                continue
            item.error = (_status_error(item.run_dir) or line or stopped
                          or "the job did not complete")
            failed.append(item)
    return failed


def _sweep_lines(launched: Sequence[Sequence[str]], app: str,
                 stderr: Sequence[str]) -> list[str | None]:
    """Per launched job (its arguments), the reason of the sweep's ``<app>: refused|failed [<job>]: <reason>`` line
    about it (a refusal as ``JobRefused: <reason>``, the way a refused job's error reads)."""
    names = job_names(launched)
    found: list[str | None] = [None] * len(launched)
    for line in stderr:
        verb = next((v for v in ("refused", "failed") if line.startswith(f"{app}: {v}")), None)
        for i, name in enumerate(names if verb else ()):
            head = f"{app}: {verb} [{name}]: " if name else f"{app}: {verb}: "
            if found[i] is None and line.startswith(head):
                reason = TRACEBACK_NOTE.sub("", line[len(head):])
                found[i] = f"JobRefused: {reason}" if verb == "refused" else reason
                break
    return found


TRACEBACK_NOTE = re.compile(rf" \(traceback in .*/{re.escape(STATUS)}\)$")
HYDRA_HINT = "Set the environment variable HYDRA_FULL_ERROR=1"


def _last_line(stderr: Sequence[str]) -> str | None:
    """The last line of a stopped sweep's stderr that says something (Hydra's hint to set
    HYDRA_FULL_ERROR follows the error it printed)."""
    said = [line.strip() for line in stderr if line.strip()]
    said = [line for line in said if not line.startswith(HYDRA_HINT)]
    return said[-1] if said else None


def _status_error(run_dir: Path) -> str | None:
    status = read_status(run_dir)
    error = status.reason if isinstance(status, Broken) else status and status.error
    return str(error).splitlines()[0][:300] if error else None


# --- Progress: one aggregate line, read from the run directories -------------------------------


def sweep_eta(remaining_steps: Sequence[int], steps_per_s: float, workers: int) -> float:
    """Seconds until jobs with ``remaining_steps`` env steps each are done, every job training
    at ``steps_per_s`` on one of ``workers`` parallel workers: the work shared by the workers,
    but never less than the longest single job. 0 when nothing is left, nan while the rate is
    unknown; never negative."""
    left = [max(0, int(r)) for r in remaining_steps if r > 0]
    if not left:
        return 0.0
    if not steps_per_s > 0:
        return float("nan")
    lanes = max(1, min(int(workers), len(left)))
    return max(sum(left) / lanes, max(left)) / steps_per_s


def last_record(path: Path) -> dict | None:
    """The last complete line of a jsonl file (None if there is none yet), read from its end."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 8192))
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return json.loads(line)
        except ValueError:
            continue  # a line still being written, or cut by the seek
    return None


class SweepProgress:
    """While a sweep runs, one aggregate progress line: jobs finished / failed / running, env
    steps trained (the last ``train.jsonl`` record of each run directory) and an ETA from the
    running jobs' own steps/s over the workers seen running at once. Reads files only, so it
    works for every launcher whose jobs write where this process can read. Rewritten in place
    on a terminal; elsewhere a new line whenever a job starts or ends and every ``every_s``
    seconds."""

    def __init__(self, items: Sequence[PlannedJob], stream: TextIO, every_s: float = 30.0):
        self.items, self.stream, self.every_s = list(items), stream, every_s
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.started = time.time()
        self.peak_running = 0
        self.rate = 0.0  # env steps/s of one job, the last one measured
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sweep-progress", daemon=True)

    def __enter__(self) -> None:
        self.started = time.time()
        self._thread.start()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._print(self.line(), final=True)

    def _loop(self) -> None:
        shown, last = None, time.time()
        while not self._stop.wait(1.0 if self.tty else min(1.0, self.every_s)):
            line = self.line()
            finished = line.split("|", 1)[0]
            if self.tty or finished != shown or time.time() - last >= self.every_s:
                self._print(line)
                shown, last = finished, time.time()

    def _print(self, line: str, final: bool = False) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K" + line + ("\n" if final else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def line(self) -> str:
        """The current line (also its own test seam)."""
        states = [read_state(item.run_dir) for item in self.items]
        done = sum(state == COMPLETED for state in states)
        failed = sum(state == FAILED for state in states)
        running = [i for i, state in enumerate(states) if state == RUNNING]
        self.peak_running = max(self.peak_running, len(running))
        steps, rates, remaining = 0, [], []
        for item, state in zip(self.items, states):
            record = last_record(item.run_dir / TRAIN_LOG) if state else None
            trained = item.total_steps if state == COMPLETED else int(
                (record or {}).get("env_steps", 0))
            steps += min(trained, item.total_steps)
            if state not in (COMPLETED, FAILED):
                remaining.append(item.total_steps - trained)
            if state == RUNNING and record and record.get("time_s", 0) > 0:
                rates.append(record["env_steps"] / record["time_s"])
        self.rate = sum(rates) / len(rates) if rates else self.rate
        eta = sweep_eta(remaining, self.rate, self.peak_running)
        total = sum(item.total_steps for item in self.items)
        width = len(str(len(self.items)))
        return (f"[{done:>{width}}/{len(self.items)}] jobs done, {failed} failed, "
                f"{len(running)} running | {steps:,}/{total:,} env steps | "
                f"elapsed {format_clock(time.time() - self.started)} | eta {format_clock(eta)}")


def print_plan(planned: Sequence[PlannedJob], stream: TextIO, workers: int) -> None:
    """``--dry-run``: every job with its state and run directory, then the runtime estimate."""
    for item in planned:
        command = "plume-train" if item.job.config == "train" else "plume-eval"
        print(f"  [{item.state or 'new'}] {command} {' '.join(item.args)}\n"
              f"      -> {show(item.run_dir)}", file=stream)
    pending = [p for p in planned if not p.completed]
    print(estimated_runtime(pending, planned, workers), file=stream, flush=True)


def train_pending(planned: Sequence[PlannedJob], sweep: Sequence[str], stream: TextIO,
                  progress_every_s: float, seeds_in_process: int = 1) -> list[PlannedJob]:
    """Launch the jobs of ``planned`` not yet completed, the controllers first (seconds
    each), say which failed and what was trained; returns the failed ones."""
    began = time.time()
    pending = [p for p in planned if not p.completed]
    failed: list[PlannedJob] = []
    for config in ("eval", "train"):
        batch = [p for p in pending if p.job.config == config]
        failed += launch(batch, sweep, stream, progress_every_s, seeds_in_process)
    for item in failed:
        print(f"FAILED {show(item.run_dir)}: {item.error}\n"
              f"    {STATUS} and train.log in that directory", file=stream)
    print(f"trained {len(pending) - len(failed)}, skipped {len(planned) - len(pending)} "
          f"(already completed), failed {len(failed)}; training took "
          f"{format_clock(time.time() - began)}", file=stream, flush=True)
    return failed


def completed_roles(planned: Iterable[PlannedJob]) -> dict[Path, tuple[str, str]]:
    """The completed runs among ``planned`` with their (group, curve label): what a figure
    draws."""
    return {p.run_dir: (p.job.group, p.job.label) for p in planned
            if read_state(p.run_dir) == COMPLETED}


DEFAULT_STEPS_PER_S = 8_000.0
"""Env steps/s of one job while two run at once on 2 cores (the 5-seed quickstart: 9.0M steps
of 15 PPO jobs in 9 min 22 s with 2 joblib workers); used when no completed run can be read."""


def estimated_runtime(pending: Sequence[PlannedJob], planned: Sequence[PlannedJob],
                      workers: int) -> str:
    """One line: the pending jobs' env steps over the per-job rate measured by the completed
    runs' status.json (``summary.steps_per_s``, evaluations included): the median of the same
    experiment's runs, else of the same env and algorithm's (an LB PPO run trains 10x slower
    than a CC A2C run), else ``DEFAULT_STEPS_PER_S``; ``workers`` at a time. Controller
    evaluations (seconds each) are not counted."""
    train = [p for p in pending if p.total_steps > 0]
    if not train:
        return "estimated runtime: nothing to train"
    by_experiment: dict[Path, list[float]] = {}
    by_kind: dict[str, list[float]] = {}
    for item in planned:
        status = read_status(item.run_dir) if item.completed else None
        rate = (status.summary or {}).get("steps_per_s") if isinstance(status, RunStatus) else None
        if rate:
            by_experiment.setdefault(item.run_dir.parent.parent, []).append(float(rate))
            by_kind.setdefault(item.kind, []).append(float(rate))

    def rate_of(item: PlannedJob) -> float:
        rates = by_experiment.get(item.run_dir.parent.parent) or by_kind.get(item.kind)
        return statistics.median(rates) if rates else DEFAULT_STEPS_PER_S

    seconds = [p.total_steps / rate_of(p) for p in train]
    lanes = max(1, min(workers, len(train)))
    steps = sum(p.total_steps for p in train)
    rates = sorted({round(rate_of(p)) for p in train})
    rate_text = f"{rates[0]:,}" if len(rates) == 1 else f"{rates[0]:,}-{rates[-1]:,}"
    measured = sum(map(len, by_kind.values()))
    if not measured:
        source = "no completed run to measure: the quickstart's rate on 2 cores"
    elif len(by_experiment) == 1:
        source = f"the median of {measured} completed run(s) here"
    else:
        source = (f"medians of {measured} completed runs here, per experiment, else per env "
                  f"and algorithm, else {DEFAULT_STEPS_PER_S:,.0f}")
    return (f"estimated runtime: {format_clock(max(sum(seconds) / lanes, max(seconds)))} for "
            f"{len(train)} job(s), {steps:,} env steps at {rate_text} steps/s per job "
            f"({source}), {lanes} at a time; figures and reports add about a minute")


def run(name: str, profile: str = "quick", workers: int = 2, root: str | Path = "runs",
        out: str | Path = "reports", dry_run: bool = False, render_only: bool = False,
        overrides: Sequence[str] = (), n_seeds: int | None = None,
        report_options: dict | None = None, stream: TextIO | None = None,
        hydra_overrides: Sequence[str] = (), progress_every_s: float = 30.0,
        groups: Sequence[str] | None = None, seeds_in_process: int = 1) -> dict:
    """The whole command; returns counts, failures and the rendered artefacts.
    ``hydra_overrides`` (``hydra/launcher=...``, ``hydra.launcher.*``) choose the launcher;
    ``workers`` is joblib's ``n_jobs`` unless they set it; ``groups``: train and draw only
    those groups of the figure; ``seeds_in_process``: see :func:`seed_packs`."""
    stream = stream or sys.stdout
    sweep = launcher_overrides(hydra_overrides, workers)
    root_path, out_path = Path(root), Path(out)
    figures = FIGURES if name == "all" else (name,)
    jobs = figure_jobs(name, profile, n_seeds, groups)
    began = time.time()
    planned = plan(jobs, root, overrides, sweep)
    by_job = {p.job: p for p in planned}
    done = [p for p in planned if p.completed]
    pending = [p for p in planned if not p.completed]
    part = f", groups {', '.join(groups)}" if groups else ""
    print(f"{name} ({DESCRIPTIONS.get(name, 'every figure')}){part}, profile {profile}: "
          f"{len(planned)} job(s), {len(done)} already completed, {len(pending)} to train; "
          f"runs under {show(root_path)}", file=stream, flush=True)
    if dry_run:
        print_plan(planned, stream, workers)
        targets = ", ".join(show(out_path / f) for f in figures)
        print(f"launcher overrides: {' '.join(sweep)}\n"
              f"figures and reports would go to: {targets}", file=stream, flush=True)
        return {"jobs": planned, "completed": len(done), "pending": len(pending),
                "trained": 0, "failed": [], "artefacts": {}}
    failed: list[PlannedJob] = []
    trained = 0
    if pending and not render_only:
        failed = train_pending(planned, sweep, stream, progress_every_s, seeds_in_process)
        trained = len(pending) - len(failed)
    elif render_only and pending:
        print(f"--render-only: {len(pending)} job(s) not completed are left out of the figures",
              file=stream, flush=True)

    from experiments import figures as draw

    artefacts: dict[str, dict] = {}
    cache_dir = next((o.partition("=")[2] for o in overrides if o.startswith("paths.cache=")),
                     None)  # where the jobs keep their analyses
    for figure in figures:
        mine = figure_jobs(figure, profile, n_seeds, groups)
        roles = completed_roles(by_job[j] for j in mine)
        target = out_path / figure
        try:
            artefacts[figure] = draw.render(figure, roles, target, expected_runs=len(mine),
                                            report_options=report_options or {},
                                            cache_dir=cache_dir, groups=groups)
        except Exception as err:  # noqa: BLE001  (one figure's failure must not hide the others)
            import traceback

            artefacts[figure] = {"error": f"{type(err).__name__}: {err}"}
            print(f"{figure}: rendering FAILED: {type(err).__name__}: {err}", file=stream)
            traceback.print_exc(file=stream)
            continue
        print_artefacts(figure, artefacts[figure], len(mine), len(roles), stream)
    print(f"finished {name} in {format_clock(time.time() - began)}", file=stream, flush=True)
    return {"jobs": planned, "completed": len(done), "pending": len(pending),
            "trained": trained, "failed": failed, "artefacts": artefacts}


def print_artefacts(figure: str, artefacts: dict, wanted: int, have: int,
                     stream: TextIO) -> None:
    counts = f" from {have}/{wanted} completed runs" if wanted else ""
    print(f"{figure}{counts}:", file=stream)
    for key, value in artefacts.items():
        if key.startswith("_"):
            continue
        paths = value if isinstance(value, (list, tuple)) else [value]
        shown = [show(Path(p)) for p in paths if isinstance(p, (str, Path))]
        if shown:
            print(f"  {key}: {', '.join(shown)}", file=stream)
    text = artefacts.get("_summary")
    if text:
        print("  " + "\n  ".join(text.strip().splitlines()), file=stream)
    stream.flush()


def run_auto(name: str, profile: str = "quick", workers: int = 2, root: str | Path = "runs",
             out: str | Path = "reports", *, cap: int = 20, rounds: Sequence[int] | None = None,
             dry_run: bool = False, overrides: Sequence[str] = (),
             report_options: dict | None = None, hydra_overrides: Sequence[str] = (),
             stream: TextIO | None = None, progress_every_s: float = 30.0,
             seeds_in_process: int = 1) -> dict:
    """The whole ``--seeds auto`` command (its design and looks: ``experiments.rounds``);
    returns what :func:`run` returns, plus the record of the rounds (``sequential``)."""
    stream = stream or sys.stdout
    figure, began = TRAINING_FIGURES[name], time.time()
    comparisons = figure_comparisons(figure)
    scheme = design(looks_of(cap, rounds), cap, ALPHA, len(comparisons))
    sweep = launcher_overrides(hydra_overrides, workers)
    print("\n".join(design_lines(scheme, comparisons)), file=stream, flush=True)
    decisions = {c: CONTINUE for c in comparisons}
    record: dict = {"figure": name, "profile": profile, "design": scheme.as_dict(),
                    "comparisons": [c.name for c in comparisons], "rounds": [], "stopped": ""}
    planned_all: dict[Path, PlannedJob] = {}
    failed: list[PlannedJob] = []
    previous = 0
    for look, n in enumerate(scheme.looks, 1):
        seeds = range(previous, n)
        curves = next_curves(comparisons, decisions)
        jobs = round_jobs(name, profile, seeds, curves, look == 1)
        planned = plan(jobs, root, overrides, sweep)
        print(f"round {look}: seeds {seeds.start}-{seeds.stop - 1} of {len(planned)} job(s), "
              f"{sum(p.completed for p in planned)} already completed; runs under "
              f"{show(Path(root))}", file=stream, flush=True)
        if dry_run:
            print_plan(planned, stream, workers)
            return {"jobs": planned, "completed": sum(p.completed for p in planned),
                    "pending": sum(not p.completed for p in planned), "trained": 0,
                    "failed": [], "artefacts": {}, "sequential": record}
        failed = train_pending(planned, sweep, stream, progress_every_s, seeds_in_process)
        planned_all.update({p.run_dir: p for p in planned})
        if failed:
            record["stopped"] = (f"Stopped in round {look}: {len(failed)} job(s) failed; a "
                                 "re-run retries them and replays the rounds from the runs")
            break
        undecided = [c for c in comparisons if decisions[c] == CONTINUE]
        stats = look_statistics(figure, undecided, completed_roles(planned_all.values()), n)
        now = decide_look(scheme, look, stats)
        decisions.update(now)
        print(round_line(look, scheme, stats, now), file=stream, flush=True)
        record["rounds"].append(round_record(look, seeds, len(planned), scheme, stats, now))
        previous = n
        if CONTINUE not in decisions.values():
            record["stopped"] = (f"Every comparison decided after round {look} ({n} runs per "
                                 f"side at most; cap {cap})")
            break
    artefacts = _finish_rounds(name, planned_all, record, Path(out), report_options, overrides,
                               stream)
    print(f"finished {name} in {format_clock(time.time() - began)}", file=stream, flush=True)
    done = [p for p in planned_all.values() if p.completed]
    return {"jobs": list(planned_all.values()), "completed": len(done),
            "pending": len(planned_all) - len(done), "trained": len(done), "failed": failed,
            "artefacts": {name: artefacts}, "sequential": record}


def _finish_rounds(name: str, planned: Mapping[Path, PlannedJob], record: dict, out: Path,
                   report_options: dict | None, overrides: Sequence[str], stream: TextIO) -> dict:
    """Draw the figure from every completed run of the rounds, then write the record into
    ``sequential.json`` and a section of ``summary.md``."""
    from experiments import figures as draw

    roles = completed_roles(planned.values())
    target = out / name
    cache_dir = next((o.partition("=")[2] for o in overrides if o.startswith("paths.cache=")),
                     None)
    try:
        artefacts = draw.render(name, roles, target, expected_runs=len(planned),
                                report_options=report_options or {}, cache_dir=cache_dir)
    except Exception as err:  # noqa: BLE001  (the record is written whatever the figure does)
        artefacts = {"error": f"{type(err).__name__}: {err}"}
        print(f"{name}: rendering FAILED: {artefacts['error']}", file=stream)
    target.mkdir(parents=True, exist_ok=True)
    record["decisions"] = final_decisions(record)
    (target / SEQUENTIAL_FILE).write_text(json.dumps(record, indent=2) + "\n")
    summary = target / "summary.md"
    fresh = "error" not in artefacts and summary.is_file()  # else one of an earlier command
    text = summary.read_text() if fresh else f"# {name}\n"
    summary.write_text(text.rstrip("\n") + "\n\n" + "\n".join(summary_lines(record)))
    artefacts["sequential"] = target / SEQUENTIAL_FILE
    artefacts["summary"] = summary
    if "error" not in artefacts:
        print_artefacts(name, artefacts, len(planned), len(roles), stream)
    return artefacts


def _seeds_option(text: str) -> int | str:
    """``--seeds``: a number of seeds (>= 1) or ``auto``."""
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a number >= 1 or auto, got {text!r}")
    return int(text)


def _groups_option(text: str) -> list[str]:
    """``--groups``: group keys separated by commas, e.g. ``abr,cc,lb``."""
    keys = [k.strip() for k in text.split(",")]
    if not all(keys):
        raise argparse.ArgumentTypeError(f"group keys separated by commas, got {text!r}")
    return keys


def _rounds_option(text: str) -> list[int]:
    """``--seeds-rounds``: increasing runs per side, e.g. ``5,10,20``."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"numbers separated by commas, got {text!r}") from None
    if values != sorted(set(values)):
        raise argparse.ArgumentTypeError(f"must increase, got {text!r}")
    return values


def _parser() -> argparse.ArgumentParser:
    """The command line of ``python -m experiments``."""
    parser = argparse.ArgumentParser(
        prog="python -m experiments",
        description="Train what a paper figure needs (skipping completed jobs), then draw it.",
    )
    parser.add_argument("name", choices=NAMES, help="; ".join(
        f"{k}: {v}" for k, v in DESCRIPTIONS.items()) + "; all: every figure")
    parser.add_argument("--profile", choices=PROFILES, default="quick",
                        help="quick: <exp>_quick configs, 5 seeds (default); paper: the "
                             "reference's budget (4e6 env steps, every 5%%), 5 seeds; both "
                             "10 where an effect is small (fig9: PPO S2, S3; DQN S3)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="hydra/launcher=joblib|submitit_local|submitit_slurm|ray and "
                             "hydra.launcher.* keys choose how the jobs run (conf/hydra/"
                             "launcher/); any other KEY=VALUE is a job override (--override)")
    parser.add_argument("-j", "--jobs", type=int, default=2,
                        help="jobs at a time with the joblib launcher (its n_jobs; default 2)")
    parser.add_argument("--root", default="runs", help="paths.root of every job (runs)")
    parser.add_argument("--out", default="reports", help="figures go to OUT/NAME (reports)")
    parser.add_argument("--dry-run", action="store_true", help="print the jobs and stop")
    parser.add_argument("--render-only", action="store_true",
                        help="train nothing; draw from the completed runs")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="extra plume-train override for every job (repeatable); keys "
                             "that change training also change the run directories")
    parser.add_argument("--seeds", type=_seeds_option, default=None,
                        help="number of seeds (0..N-1) instead of the profile's and the "
                             "groups'; auto: add seeds in rounds until each comparison is "
                             "decided (a group-sequential design, experiments/rounds.py)")
    parser.add_argument("--seeds-cap", type=int, default=None, metavar="N",
                        help="--seeds auto: at most N seeds per curve, the last look (20)")
    parser.add_argument("--seeds-rounds", type=_rounds_option, default=None, metavar="N,N,...",
                        help="--seeds auto: runs per side at each look (5,10,15,... to the cap)")
    parser.add_argument("--groups", type=_groups_option, default=None, metavar="KEY,...",
                        help="train and draw only these groups of the figure, e.g. peers "
                             "--groups abr,cc,lb (a report per group; the figure's table "
                             "holds those groups only)")
    parser.add_argument("--reps", type=int, default=None,
                        help="bootstrap repetitions of the rliable report (report default)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the report bootstrap")
    parser.add_argument("--seeds-in-process", type=int, default=1, metavar="K",
                        help="train up to K consecutive seeds of one curve in one process "
                             "(train.seeds_in_process; PPO and A2C with network=mlp, each "
                             "seed its own run directory; README, 'Many seeds in one "
                             "process'); 1: one seed per process (default)")
    parser.add_argument("--progress-every", type=float, default=30.0, metavar="SECONDS",
                        help="seconds between progress lines when not on a terminal (30)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_intermixed_args(argv)
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException


    if args.jobs < 1:
        parser.error("-j must be >= 1")
    if args.seeds_in_process < 1:
        parser.error("--seeds-in-process must be >= 1")
    auto = args.seeds == "auto"
    if why := rounds.check_options(args.name, args.seeds, args.seeds_cap, args.seeds_rounds,
                                   args.render_only):
        parser.error(why)
    if args.groups is not None:
        if auto:
            parser.error("--groups does not go with --seeds auto, whose rounds decide every "
                         "comparison of the figure")
        if why := groups_problem(args.name, args.groups):
            parser.error(f"--groups: {why}")
    if any("=" not in o for o in args.overrides):
        parser.error("overrides are KEY=VALUE, e.g. hydra/launcher=submitit_slurm")
    report_options = {k: v for k, v in {"reps": args.reps, "seed": args.seed}.items()
                      if v is not None}
    sweep = [o for o in args.overrides if o.lstrip("+~").startswith("hydra")]
    jobs = [*args.override, *(o for o in args.overrides if o not in sweep)]
    try:
        result = run_auto(
            args.name, args.profile, args.jobs, args.root, args.out,
            cap=args.seeds_cap or rounds.DEFAULT_CAP,
            rounds=args.seeds_rounds, dry_run=args.dry_run, overrides=jobs,
            report_options=report_options, hydra_overrides=sweep,
            progress_every_s=args.progress_every,
            seeds_in_process=args.seeds_in_process) if auto else run(
            args.name, args.profile, args.jobs, args.root, args.out, dry_run=args.dry_run,
            render_only=args.render_only, overrides=jobs, n_seeds=args.seeds,
            report_options=report_options, hydra_overrides=sweep,
            progress_every_s=args.progress_every, groups=args.groups,
            seeds_in_process=args.seeds_in_process)
    except (HydraException, OmegaConfBaseException, ConfigError) as err:  # the user's mistake
        message = " ".join(str(err).split())
        print(f"python -m experiments: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; completed jobs are kept, a re-run trains the rest "
              "(interrupted ones resume from their checkpoints)", file=sys.stderr)
        return 130
    broken = [f for f, a in result["artefacts"].items() if "error" in a]
    return 1 if result["failed"] or broken else 0
