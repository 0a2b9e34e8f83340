"""Run directories that cannot lie: atomic files, corrupt checkpoints never trusted, dead jobs
shown as interrupted and resumed, one process per job, rejected configs leave no trace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from plume.harness.apps.train import run_job
from plume.report.runs import scan_runs
from plume.runs.record import HEARTBEAT_STALE_S, INTERRUPTED, RUNNING, effective_state
from plume.runs.store import CorruptCheckpoint, RunDirectory, RunDirectoryLocked, _atomic_write
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[1]


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_failed_write_leaves_neither_the_file_nor_its_temporary(tmp_path):
    def half_then_crash(tmp: Path) -> None:
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        _atomic_write(tmp_path / "eval.parquet", half_then_crash)
    assert list(tmp_path.iterdir()) == []


def test_running_with_a_dead_pid_or_a_stale_heartbeat_reads_as_interrupted():
    import socket

    here = {"state": RUNNING, "host": socket.gethostname()}
    assert effective_state({**here, "pid": os.getpid(), "heartbeat": time.time()}) == RUNNING
    assert effective_state({**here, "pid": _dead_pid()}) == INTERRUPTED
    elsewhere = {"state": RUNNING, "host": "another-node", "pid": 1}
    assert effective_state({**elsewhere, "heartbeat": time.time()}) == RUNNING
    stale = time.time() - HEARTBEAT_STALE_S - 1
    assert effective_state({**elsewhere, "heartbeat": stale}) == INTERRUPTED
    assert effective_state({"state": "completed"}) == "completed"
    assert effective_state(None) is None


def test_a_corrupt_checkpoint_is_reported_and_the_job_trains_from_the_start(
        compose_cfg, tmp_path, caplog):
    cfg = compose_cfg(*TINY, "logger=none")
    run_job(cfg, tmp_path)
    run = RunDirectory(tmp_path)
    expected = run.read_table("eval.parquet")
    blob = (tmp_path / "checkpoint.pt").read_bytes()
    (tmp_path / "checkpoint.pt").write_bytes(blob[: len(blob) // 2])  # torn by a kill
    with pytest.raises(CorruptCheckpoint, match="checkpoint.pt: unreadable checkpoint"):
        run.load_checkpoint()
    run.write_status("failed", error="killed")
    with caplog.at_level("WARNING", logger="plume"):
        run_job(cfg, tmp_path)
    assert "not resuming" in caplog.text and "unreadable checkpoint" in caplog.text
    assert run.status()["state"] == "completed" and run.status()["resumes"] == []
    assert run.read_table("eval.parquet").equals(expected)
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_job_whose_process_died_is_listed_interrupted_and_resumed(compose_cfg, tmp_path):
    cfg = compose_cfg(*TINY, "logger=none")
    job = tmp_path / "sweep" / "job" / "seed=0"
    run_job(cfg, job)
    run = RunDirectory(job)
    checkpoint = run.load_checkpoint()
    checkpoint["progress"], checkpoint["env_steps"] = 0.5, 1024
    # pretend the job died right after its middle evaluation: keep only what existed then
    run.write_table("eval.parquet", run.read_table("eval.parquet").query("progress <= 0.5"))
    run.save_checkpoint({**checkpoint, "agent": _agent_at_half(compose_cfg, tmp_path)})
    run.write_status(RUNNING, pid=_dead_pid(), summary=None)
    (listed,) = scan_runs([tmp_path / "sweep"]).runs.itertuples()
    assert listed.state == INTERRUPTED
    run_job(cfg, job)
    status = run.status()
    assert status["state"] == "completed"
    assert [(r["from_env_steps"], r["previous_state"]) for r in status["resumes"]] == [
        (1024, INTERRUPTED)]


def _agent_at_half(compose_cfg, tmp_path):
    """The agent state of the same job stopped at its middle evaluation (1024 env steps)."""
    half = tmp_path / "half"
    run_job(compose_cfg(*TINY, "logger=none", "train.total_steps=1024", "train.eval_points=1"),
            half)
    return RunDirectory(half).load_checkpoint()["agent"]


def test_a_second_process_on_the_same_job_is_refused(compose_cfg, tmp_path):
    cfg = compose_cfg(*TINY, "logger=none")
    with RunDirectory(tmp_path).lock():
        with pytest.raises(RunDirectoryLocked, match="already running"):
            run_job(cfg, tmp_path)
    assert RunDirectory(tmp_path).status() is None  # the refused process wrote nothing


def _plume_train(*overrides: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "plume.harness.apps.train", *overrides],
                          cwd=cwd, capture_output=True, text=True, timeout=600)


def test_a_rejected_config_prints_one_line_creates_nothing_and_leaves_a_finished_job(tmp_path):
    common = [*TINY, "logger=none", f"paths.root={tmp_path}"]
    done = _plume_train(*common, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    (run_dir,) = tmp_path.glob("default/*/seed=0")
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    bad = _plume_train(*common, "logger=wandb", "logger.mode=bogus", cwd=ROOT)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "logger.mode" in bad.stderr
    assert "Traceback" not in bad.stderr
    record = {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before
    # the same mistake in a sweep is refused by the sweeper before the job is launched
    swept = _plume_train("-m", *common, "logger=wandb", "logger.mode=bogus", cwd=ROOT)
    assert swept.returncode == 2 and "logger.mode" in swept.stderr
    assert "Traceback" not in swept.stderr
    assert {p.relative_to(run_dir): p.read_bytes()
            for p in run_dir.rglob("*") if p.is_file()} == record  # .hydra/ included
    assert not (tmp_path / "default" / "multirun.yaml").exists()  # no job of it ran
    new = _plume_train(*common, "sampler=plume_dynamic", "sampler.alpha=1.5", cwd=ROOT)
    assert new.returncode == 2 and "alpha must be in [0, 1]" in new.stderr
    assert sorted(p.name for p in (tmp_path / "default").iterdir()) == [run_dir.parent.name]
    assert json.loads((run_dir / "status.json").read_text())["state"] == "completed"
