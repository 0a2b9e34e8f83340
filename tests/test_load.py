"""Load: a sweep of 200 tiny jobs through the joblib launcher on one root runs every job
exactly once, leaves no temporary file, and the report pools all 200 runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import plume_train_env

ROOT = Path(__file__).resolve().parents[1]
JOBS = 200


@pytest.mark.slow
def test_two_hundred_jobs_through_joblib_run_once_each_and_pool_in_the_report(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    from plume.report import build_report

    root = tmp_path / "runs"
    command = [sys.executable, "-m", "plume.harness.apps.train", "-m", "hydra/launcher=joblib",
               "hydra.launcher.n_jobs=2", f"seed=range({JOBS // 2})",
               "sampler=uniform,plume_static",
               "train.total_steps=256", "train.eval_points=1", "train.eval_at_start=false",
               "train.progress_every_s=0", "env.n_envs=8", "algo.n_steps=32",
               "algo.hidden_sizes=[16]", "env.test_sets=[majority_slow]", "logger=none",
               f"paths.root={root}", f"paths.cache={tmp_path / 'cache'}",
               "hydra.job_logging.root.handlers=[file]"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          env=plume_train_env(), timeout=3600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"plume-train: sweep of {JOBS} job(s): {JOBS} completed, 0 refused, 0 failed")
    statuses = [json.loads(p.read_text()) for p in root.rglob("status.json")]
    assert len(statuses) == JOBS
    assert all(s["state"] == "completed" and s["resumes"] == [] for s in statuses)
    by_job = sorted((s["choices"]["sampler"], s["seed"]) for s in statuses)
    assert by_job == sorted((sampler, seed) for sampler in ("plume_static", "uniform")
                            for seed in range(JOBS // 2))  # each job exactly once
    for status in root.rglob("status.json"):  # one training curve per job, never appended to
        steps = [json.loads(line)["env_steps"]
                 for line in (status.parent / "train.jsonl").read_text().splitlines()]
        assert steps == sorted(set(steps))
    assert not [p for p in root.rglob("*") if p.name.endswith(".tmp")]
    result = build_report(root / "default", tmp_path / "report", figures=False, reps=200)
    assert f"Pooled **{JOBS} completed runs**" in result.report.read_text()
