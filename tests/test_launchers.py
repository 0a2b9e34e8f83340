"""Sweeps through Hydra launchers (docs/ARCHITECTURE.md "Sweeps"): the launcher configs, the figure
command's multirun, failure handling, the progress line and job isolation in reused workers."""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

from experiments import runner
from plume.harness.training.seeding import JobIsolation
from tests.conftest import CONF_DIR, TINY, plume_train_env

# Hydra 1.3 warns that conf/hydra/launcher/<name>.yaml is matched to the plugin schema of the
# same name (the figure command silences it; pytest resets warning filters per test).
pytestmark = pytest.mark.filterwarnings(
    "ignore:(?s).*is validated against ConfigStore schema:UserWarning")
REPO = CONF_DIR.parent
JOB_OVERRIDES = [*TINY, "logger=none", "analysis.restarts=2", "analysis.selection.steps=1"]
PROBE = "+hydra.callbacks.probe._target_=tests.test_launchers.StateProbe"


def tiny_jobs(n: int, root: Path, *extra: tuple[str, ...]) -> list[runner.PlannedJob]:
    """``n`` tiny uniform-sampler jobs (seeds 0..n-1), planned under ``root``; ``extra[i]``
    adds overrides to job i."""
    jobs = [runner.Job("quickstart_quick", ("env.dataset=majority_fast", "sampler=uniform",
                                            *(extra[i] if i < len(extra) else ())), i)
            for i in range(n)]
    return runner.plan(jobs, root, JOB_OVERRIDES)


def states(planned) -> list[str | None]:
    return [json.loads((p.run_dir / "status.json").read_text())["state"] for p in planned]


# --- configs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,keys", [
    ("joblib", {"n_jobs", "batch_size", "timeout"}),
    ("submitit_local", {"submitit_folder", "timeout_min", "cpus_per_task"}),
    ("submitit_slurm", {"partition", "timeout_min", "cpus_per_task", "array_parallelism",
                        "max_num_timeout", "signal_delay_s", "setup", "additional_parameters"}),
    ("ray", {"ray"}),
])
def test_each_launcher_config_composes_with_its_documented_keys(compose_cfg, name, keys):
    text = (CONF_DIR / "hydra" / "launcher" / f"{name}.yaml").read_text()
    for key in keys:  # every key named in the issue is in the file, with a comment above it
        assert re.search(rf"#.*\n(\w+: .*\n)*{key}:", text), key
    if name == "ray":
        pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    launcher = compose_cfg(f"hydra/launcher={name}", hydra_cfg=True).hydra.launcher
    assert keys <= set(launcher) and launcher._target_.startswith("hydra_plugins.")


def test_slurm_keys_are_typed_by_the_plugin_schema(compose_cfg):
    cfg = compose_cfg("hydra/launcher=submitit_slurm", "hydra.launcher.partition=cpu",
                      "hydra.launcher.array_parallelism=8", hydra_cfg=True)
    assert (cfg.hydra.launcher.partition, cfg.hydra.launcher.array_parallelism) == ("cpu", 8)
    with pytest.raises(Exception, match="array_parallelism"):
        compose_cfg("hydra/launcher=submitit_slurm", "hydra.launcher.array_parallelism=many")


def test_launcher_overrides_default_to_joblib_with_the_jobs_flag(monkeypatch):
    assert runner.launcher_overrides([], 3)[:2] == ["hydra/launcher=joblib",
                                                    "hydra.launcher.n_jobs=3"]
    chosen = runner.launcher_overrides(["hydra/launcher=submitit_slurm",
                                        "hydra.launcher.partition=gpu"], 3)
    assert chosen[:2] == ["hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu"]
    assert not any("n_jobs" in o for o in chosen)
    mine = runner.launcher_overrides(["hydra/launcher=joblib", "hydra.launcher.n_jobs=5"], 3)
    assert [o for o in mine if "n_jobs" in o] == ["hydra.launcher.n_jobs=5"]
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == runner.JOBLIB_PLUGIN else real(name, *a))
    assert runner.launcher_overrides([], 3)[0] == "hydra/launcher=basic"


def test_dry_run_shows_the_launcher_and_a_bad_launcher_key_is_one_line(tmp_path, capsys):
    root = ["--root", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]
    assert runner.main(["fig10", "--dry-run", *root, "hydra/launcher=submitit_slurm",
                        "hydra.launcher.partition=cpu", "train.total_steps=4096"]) == 0
    printed = capsys.readouterr().out
    assert "launcher overrides: hydra/launcher=submitit_slurm hydra.launcher.partition=cpu" in printed
    # a plain KEY=VALUE is a job override: on each of the 10 jobs (2 datasets x 5 seeds)
    assert printed.count("train.total_steps=4096 seed=") == 10
    assert runner.main(["fig10", "--dry-run", *root, "hydra.launcher.partitionn=cpu"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "partitionn" in error[0]


# --- progress -----------------------------------------------------------------------------------


def test_sweep_eta_shares_work_over_workers_and_is_never_negative():
    assert runner.sweep_eta([100, 100, 100, 100], 10.0, workers=2) == 20.0
    assert runner.sweep_eta([100, 100, 100, 100], 10.0, workers=4) == 10.0
    # One job left: more workers do not make it faster.
    assert runner.sweep_eta([100], 10.0, workers=4) == 10.0
    assert runner.sweep_eta([300, 10, 10], 10.0, workers=3) == 30.0
    assert runner.sweep_eta([-50, 0], 10.0, workers=2) == 0.0  # overshoot: done, not negative
    assert math.isnan(runner.sweep_eta([100], 0.0, workers=2))


def _fake_run(run_dir: Path, state: str | None, steps: int = 0, time_s: float = 0.0) -> None:
    run_dir.mkdir(parents=True)
    if state:
        (run_dir / "status.json").write_text(json.dumps({"state": state}))
    if steps:
        records = [{"env_steps": s, "time_s": time_s * s / steps} for s in (steps // 2, steps)]
        (run_dir / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records)
                                             + '{"env_steps": 99')  # a line being written


def test_progress_line_counts_jobs_and_env_steps_from_the_run_directories(tmp_path):
    jobs = [runner.PlannedJob(runner.Job("e", (), i), [], tmp_path / f"j{i}", total_steps=1000)
            for i in range(4)]
    _fake_run(jobs[0].run_dir, "completed", 1000, 10.0)
    _fake_run(jobs[1].run_dir, "failed", 200, 2.0)
    _fake_run(jobs[2].run_dir, "running", 500, 5.0)  # 100 steps/s
    _fake_run(jobs[3].run_dir, None)
    line = runner.SweepProgress(jobs, stream=None).line()
    assert line.startswith("[1/4] jobs done, 1 failed, 1 running | 1,700/4,000 env steps")
    # 500 + 1000 steps left at 100 steps/s on the one worker seen running: 15 s
    assert line.endswith("eta 0:00:15")


# --- job isolation ------------------------------------------------------------------------------


def _fingerprints() -> dict[str, str]:
    """Digests of Python's, NumPy's and torch's global RNG states."""
    import torch

    def digest(value) -> str:
        return hashlib.sha256(repr(value).encode()).hexdigest()[:16]

    return {"python": digest(random.getstate()),
            "numpy": digest([a.tolist() if hasattr(a, "tolist") else a
                             for a in np.random.get_state()]),
            "torch": digest(torch.get_rng_state().tolist())}


def _module_state() -> dict[str, str]:
    """A digest of every module-level dict/list/set of the loaded plume modules (object
    addresses stripped, so two processes compare)."""
    out = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("plume") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, (dict, list, set)) and not attr.startswith("__"):
                text = re.sub(r" at 0x[0-9a-f]+", "", repr(value))
                out[f"{name}.{attr}"] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return out


class StateProbe(Callback):
    """Records what a job starts with and runs with (probe.json in its run directory), then
    leaves the process dirty the way a careless job could: global RNGs advanced, torch on 3
    threads, a W&B run open. The next job in the same worker must not notice."""

    def on_job_start(self, config, **kwargs):
        import torch

        wandb = sys.modules.get("wandb")
        self._write(config, pid=os.getpid(), rngs=_fingerprints(),
                    threads_at_start=torch.get_num_threads(),
                    wandb_open_at_start=getattr(wandb, "run", None) is not None)

    def on_job_end(self, config, job_return, **kwargs):
        import torch
        import wandb

        self._write(config, threads_in_job=torch.get_num_threads(), modules=_module_state())
        random.random(), np.random.random(), torch.rand(3)
        torch.set_num_threads(3)
        wandb.init(mode="offline", dir=config.hydra.runtime.output_dir, project="leak",
                   settings=wandb.Settings(console="off"))

    @staticmethod
    def _write(config, **values):
        path = Path(config.hydra.runtime.output_dir) / "probe.json"
        old = json.loads(path.read_text()) if path.is_file() else {}
        path.write_text(json.dumps({**old, **values}))


def _results(run_dir: Path) -> tuple[list[dict], list[float]]:
    """The learning curve (timings dropped) and the evaluation scores of a run."""
    curve = [{k: v for k, v in json.loads(line).items()
              if not (k.startswith("perf/") or k == "time_s")}
             for line in (run_dir / "train.jsonl").read_text().splitlines()]
    return curve, pd.read_parquet(run_dir / "eval.parquet")["score"].tolist()


def test_jobs_in_a_reused_joblib_worker_match_jobs_in_fresh_processes(tmp_path):
    reused = tiny_jobs(3, tmp_path / "reused")
    failed = runner.launch(reused, runner.launcher_overrides(
        ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2", PROBE], 2), progress_every_s=60)
    assert failed == []
    in_worker = [json.loads((p.run_dir / "probe.json").read_text()) for p in reused]
    pids = [p["pid"] for p in in_worker]
    assert len(set(pids)) < len(pids) and os.getpid() not in pids  # a loky worker ran two jobs
    assert len({json.dumps(p["rngs"]) for p in in_worker}) == 3  # each seed its own streams
    # the jobs that started in a worker an earlier job had left dirty, each against a fresh
    # plume-train process of the same job
    second = [i for i, p in enumerate(in_worker) if p["pid"] in pids[:i]]
    fresh = tiny_jobs(3, tmp_path / "fresh")
    for i in second:
        subprocess.run([sys.executable, "-m", "plume.harness.apps.train", *fresh[i].args, PROBE],
                       cwd=REPO, env=plume_train_env(), check=True, capture_output=True)
        in_fresh = json.loads((fresh[i].run_dir / "probe.json").read_text())
        assert in_worker[i]["rngs"] == in_fresh["rngs"]  # seeded from the job seed
        assert in_worker[i]["threads_at_start"] == in_fresh["threads_at_start"] == 1
        assert in_worker[i]["threads_in_job"] == in_fresh["threads_in_job"] == 1
        assert not in_worker[i]["wandb_open_at_start"] and not in_fresh["wandb_open_at_start"]
        shared = in_worker[i]["modules"].keys() & in_fresh["modules"].keys()
        assert len(shared) > 20
        assert {k: in_worker[i]["modules"][k] for k in shared} == {
            k: in_fresh["modules"][k] for k in shared}
        assert _results(reused[i].run_dir) == _results(fresh[i].run_dir)


def test_job_isolation_seeds_global_rngs_and_sets_threads():
    import torch

    before = torch.get_num_threads()
    cfg = OmegaConf.create({"seed": 7, "train": {"torch_threads": 2}})
    try:
        JobIsolation().on_job_start(cfg)
        first = _fingerprints()
        assert torch.get_num_threads() == 2
        random.random(), np.random.random(), torch.rand(1)
        JobIsolation().on_job_start(cfg)
        assert _fingerprints() == first
        JobIsolation().on_job_start(OmegaConf.create({"seed": 8}))
        assert _fingerprints() != first
    finally:
        torch.set_num_threads(before)


# --- launchers end to end -----------------------------------------------------------------------


# ~16 s: submitit's local executor end to end; the SLURM test below checks what the submitit
# plugin makes of its keys, and joblib runs every figure test in the default suite.
@pytest.mark.slow
def test_a_submitit_local_sweep_of_two_jobs_completes(tmp_path):
    planned = tiny_jobs(2, tmp_path / "runs")
    failed = runner.launch(planned, runner.launcher_overrides(["hydra/launcher=submitit_local"],
                                                              2), progress_every_s=60)
    assert failed == [] and states(planned) == ["completed", "completed"]
    pids = {json.loads((p.run_dir / "status.json").read_text())["pid"] for p in planned}
    assert len(pids) == 2 and os.getpid() not in pids  # one fresh process per job
    assert list((tmp_path / "runs" / "quickstart_quick" / ".submitit").glob("*/*_result.pkl"))


def test_a_planted_failure_fails_alone_and_the_command_exits_non_zero(tmp_path, capsys,
                                                                      monkeypatch):
    # Job 1 passes validation but fails at run time (gelato network on TraceBench observations).
    planned_jobs = [p.job for p in tiny_jobs(3, tmp_path / "plan", (), ("algo.network=gelato",))]
    monkeypatch.setattr(runner, "figure_jobs", lambda *a, **k: planned_jobs)
    from experiments import figures

    monkeypatch.setattr(figures, "render", lambda *a, **k: {})
    argv = ["quickstart", "-j", "2", "--root", str(tmp_path / "runs"), "--out",
            str(tmp_path / "out"), *[f"--override={o}" for o in JOB_OVERRIDES]]
    assert runner.main(argv) == 1
    printed = capsys.readouterr().out
    assert "trained 2, skipped 0 (already completed), failed 1" in printed
    assert re.search(r"FAILED .*algo.network=gelato.*seed=1: JobRefused: .*gelato", printed)
    # refused before its run directory existed: no folder, so the progress line (read from
    # the run directories) counts it as not done rather than failed
    assert "[2/3] jobs done, 0 failed, 0 running" in printed
    planned = runner.plan(planned_jobs, tmp_path / "runs", JOB_OVERRIDES)
    assert [p.run_dir.exists() for p in planned] == [True, False, True]
    assert states([planned[0], planned[2]]) == ["completed", "completed"]
    assert runner.main(argv) == 1  # a re-run trains only the failed job again
    assert "3 job(s), 2 already completed, 1 to train" in capsys.readouterr().out


@pytest.mark.slow
def test_the_ray_launcher_runs_jobs_on_a_local_ray_instance(tmp_path, monkeypatch):
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    ray = pytest.importorskip("ray")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # no token written into the home folder
    planned = tiny_jobs(2, tmp_path / "runs")
    try:
        failed = runner.launch(planned, runner.launcher_overrides(
            ["hydra/launcher=ray", "hydra.launcher.ray.init.num_cpus=2"], 2), progress_every_s=60)
    finally:
        ray.shutdown()
    assert failed == [] and states(planned) == ["completed", "completed"]


class Unfinished:
    """A submitted SLURM job that the cluster killed."""

    def results(self):
        raise RuntimeError("job 42_0 was killed by SLURM")


class FakeSlurm(Callback):
    """In the sweep's process, before its launcher starts: submitit's SLURM executor appends
    the sbatch script it would submit to ``scripts`` (a JSON list) instead of calling sbatch,
    and every job it returns was killed by SLURM."""

    def __init__(self, scripts: str):
        self.scripts = Path(scripts)

    def on_multirun_start(self, config, **kwargs):
        from submitit.slurm import slurm

        def submit(executor, delayed):
            params = {**executor.parameters, "map_count": len(delayed)}
            script = slurm._make_sbatch_string(command="python -m submitit.core._submit x",
                                               folder=executor.folder, **params)
            old = json.loads(self.scripts.read_text()) if self.scripts.is_file() else []
            self.scripts.write_text(json.dumps([*old, script]))
            return [Unfinished() for _ in delayed]

        slurm.SlurmExecutor.affinity = classmethod(lambda cls: 1)  # "srun"
        slurm.SlurmExecutor._internal_process_submissions = submit


def test_the_slurm_launcher_turns_its_keys_into_one_sbatch_array(tmp_path, capsys):
    """Without a cluster: the sbatch script the jobs would be submitted with, then a launcher
    that stops (as when SLURM kills a job) leaves the jobs reported as not completed."""
    written = tmp_path / "scripts.json"
    planned = tiny_jobs(2, tmp_path / "runs")
    failed = runner.launch(planned, runner.launcher_overrides([
        "hydra/launcher=submitit_slurm", "hydra.launcher.partition=cpu",
        "hydra.launcher.timeout_min=90", "hydra.launcher.array_parallelism=8",
        "+hydra.launcher.additional_parameters.requeue=true",
        "+hydra.callbacks.fake_slurm._target_=tests.test_launchers.FakeSlurm",
        f"+hydra.callbacks.fake_slurm.scripts={written}"], 2), progress_every_s=60)
    scripts = json.loads(written.read_text())
    [script] = scripts
    for line in ("--partition=cpu", "--time=90", "--cpus-per-task=1", "--array=0-1%2",
                 "--requeue", "--signal=USR2@120"):
        assert f"#SBATCH {line}" in script, line
    assert [f.error for f in failed] == ["RuntimeError: job 42_0 was killed by SLURM"] * 2
    assert "the launcher stopped: RuntimeError: job 42_0 was killed by SLURM" in (
        capsys.readouterr().out)
