"""``train.seeds_in_process=K``: one job trains seeds s .. s+K-1 together and writes K
ordinary run directories, each what that seed alone writes (the same files, the same config
but for the key itself, the same evaluations to float rounding); every seed resumes exactly
after a kill, also when the kill left the seeds' checkpoints at different evaluations; what
cannot be trained together is refused in one line before anything is written."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from plume.harness.apps.train import run_job
from plume.harness.config.schema import ConfigError
from plume.harness.training.monitor import TrainingMonitor
from plume.runs.store import RunDirectory
from tests.conftest import TINY, start_plume_train

ROOT = Path(__file__).resolve().parents[1]
JOB = [*[o for o in TINY if not o.startswith("env.test_sets")], "env=cc", "algo.n_steps=8",
       "logger=none", "train.total_steps=3072", "train.eval_points=3", "sampler=plume_dynamic"]


def _files(run_dir: Path) -> set[str]:
    return {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()}


def _losses(run_dir: Path) -> pd.DataFrame:
    rows = [json.loads(line) for line in (run_dir / "train.jsonl").read_text().splitlines()]
    return pd.DataFrame(rows)[["env_steps", "updates", "losses/policy_loss",
                               "losses/value_loss", "charts/episodes"]]


def test_three_seeds_in_one_process_write_the_run_directories_of_three_single_runs(
        compose_cfg, tmp_path):
    run_job(compose_cfg(*JOB, "seed=4", "train.seeds_in_process=3"), tmp_path / "k3" / "seed=4")
    alone = tmp_path / "alone" / "seed=5"
    run_job(compose_cfg(*JOB, "seed=5"), alone)
    together = {s: tmp_path / "k3" / f"seed={s}" for s in (4, 5, 6)}
    for seed, run_dir in together.items():
        status = RunDirectory(run_dir).status()
        assert status["state"] == "completed" and status["seed"] == seed
        assert _files(run_dir) == _files(alone)
    config = (together[5] / "config.yaml").read_text()
    assert config.replace("seeds_in_process: 3", "seeds_in_process: 1") == \
        (alone / "config.yaml").read_text()
    mine, theirs = _losses(together[5]), _losses(alone)
    assert mine[["env_steps", "updates", "charts/episodes"]].equals(
        theirs[["env_steps", "updates", "charts/episodes"]])
    pd.testing.assert_frame_equal(mine.head(3), theirs.head(3), rtol=1e-4, atol=1e-6)
    evals = [pd.read_parquet(d / "eval.parquet") for d in (together[5], alone)]
    assert list(evals[0].columns) == list(evals[1].columns)
    assert evals[0]["env_steps"].tolist() == evals[1]["env_steps"].tolist()
    pd.testing.assert_series_equal(evals[0]["score"], evals[1]["score"], rtol=1e-3, atol=1e-3)
    # the seeds are different runs: a group that trained one seed three times could not pass
    assert not _losses(together[4])["losses/policy_loss"].equals(
        _losses(together[6])["losses/policy_loss"])
    # a second run of the same command finds all three completed and trains nothing
    before = {s: (d / "eval.parquet").stat().st_mtime_ns for s, d in together.items()}
    run_job(compose_cfg(*JOB, "seed=4", "train.seeds_in_process=3"), tmp_path / "k3" / "seed=4")
    assert {s: (d / "eval.parquet").stat().st_mtime_ns for s, d in together.items()} == before


class Killed(BaseException):
    """Stands for the process dying: nothing after the raise runs, like SIGKILL."""


def test_seeds_killed_at_different_evaluations_resume_exactly(compose_cfg, tmp_path,
                                                              monkeypatch):
    """The process dies after the first evaluation's checkpoints, and seed 2's is lost: on
    the rerun seed 2 trains alone from the start while seeds 0 and 1 wait at their
    checkpoint, then all three go on together, and each ends with the bytes of the
    uninterrupted run."""
    cfg = compose_cfg(*JOB, "seed=0", "train.seeds_in_process=3")
    run_job(cfg, tmp_path / "whole" / "seed=0")
    real_step = TrainingMonitor.step
    started = time.monotonic()

    def step_or_die(self, actions):
        if self.env_steps >= 1_400:  # past the first evaluation (1,024 env steps)
            raise Killed
        return real_step(self, actions)

    with monkeypatch.context() as m:
        m.setattr(TrainingMonitor, "step", step_or_die)
        with pytest.raises(Killed):
            run_job(cfg, tmp_path / "killed" / "seed=0")
    assert time.monotonic() - started < 300
    checkpoints = {s: RunDirectory(tmp_path / "killed" / f"seed={s}").has_checkpoint
                   for s in range(3)}
    assert all(checkpoints.values())
    (tmp_path / "killed" / "seed=2" / "checkpoint.pt").unlink()  # seed 2 lost its checkpoint
    run_job(cfg, tmp_path / "killed" / "seed=0")
    for seed in range(3):
        whole, killed = (tmp_path / d / f"seed={seed}" / "eval.parquet"
                         for d in ("whole", "killed"))
        assert killed.read_bytes() == whole.read_bytes(), seed
    resumes = [RunDirectory(tmp_path / "killed" / f"seed={s}").status()["resumes"]
               for s in range(3)]
    assert [r[0]["from_env_steps"] if r else None for r in resumes] == [1024, 1024, None]


def test_a_sigkilled_group_resumes_every_seed_exactly(tmp_path):
    """A real SIGKILL once every seed has a checkpoint (possibly inside the next
    evaluation's writes, leaving the seeds at different evaluations)."""
    overrides = [*JOB, "train.total_steps=8192", "train.eval_points=4",
                 "train.seeds_in_process=3"]

    def start(root: Path) -> subprocess.Popen:
        return start_plume_train(overrides, root)

    whole = start(tmp_path / "whole")
    assert whole.wait(timeout=600) == 0, whole.stderr.read()[-2000:]
    job = start(tmp_path / "killed")
    deadline = time.time() + 300
    while time.time() < deadline and len(list(tmp_path.glob("killed/**/checkpoint.pt"))) < 3:
        time.sleep(0.05)
    assert job.poll() is None, "the job ended before the kill: raise train.total_steps"
    job.send_signal(signal.SIGKILL)
    job.wait(timeout=60)
    assert {RunDirectory(d).status()["state"] for d in tmp_path.glob("killed/**/seed=*")} \
        == {"running"}  # killed: no seed recorded an end
    final = start(tmp_path / "killed")
    assert final.wait(timeout=600) == 0, final.stderr.read()[-2000:]
    for reference in tmp_path.glob("whole/**/eval.parquet"):
        resumed = tmp_path / "killed" / reference.relative_to(tmp_path / "whole")
        assert resumed.read_bytes() == reference.read_bytes(), reference
        assert RunDirectory(resumed.parent).status()["resumes"], "every seed resumed"
    for seed in range(3):  # each seed's own log and Hydra's record, as a job alone has them
        (log,) = tmp_path.glob(f"killed/**/seed={seed}/train.log")
        overrides = (log.parent / ".hydra" / "overrides.yaml").read_text().splitlines()
        assert f"- seed={seed}" in overrides and "- train.seeds_in_process=3" in overrides
        assert f"output_dir: {log.parent}" in (log.parent / ".hydra" / "hydra.yaml").read_text()
        evaluations = [line for line in log.read_text().splitlines() if "[eval]" in line]
        assert evaluations and all(f"seed={seed} [eval]" in line for line in evaluations)


@pytest.mark.parametrize("override, message", [
    ("algo=dqn", "DQN is not an actor-critic trained here together"),
    ("algo.network=gelato", "algo.network=gelato is not supported"),
])
def test_what_cannot_be_trained_together_is_refused_before_anything_is_written(
        override, message, compose_cfg, tmp_path):
    job = [o for o in JOB if not (o.startswith("algo.") and override == "algo=dqn")]
    cfg = compose_cfg(*job, override, "train.seeds_in_process=2")
    with pytest.raises(ConfigError, match=message):
        run_job(cfg, tmp_path / "seed=0")
    assert not (tmp_path / "seed=0").exists() and not (tmp_path / "seed=1").exists()


def test_each_seed_of_a_group_logs_its_own_offline_wandb_run(compose_cfg, tmp_path):
    run_job(compose_cfg(*[o for o in JOB if o != "logger=none"], "logger=wandb",
                        "train.seeds_in_process=2"), tmp_path / "seed=0")
    for seed in (0, 1):
        status = RunDirectory(tmp_path / f"seed={seed}").status()
        assert status["state"] == "completed"
        (offline,) = (tmp_path / f"seed={seed}" / "wandb").glob("offline-run-*")
        assert status["wandb_run"] == str(offline) and list(offline.glob("run-*.wandb"))


def test_the_group_needs_the_seed_folder_layout(compose_cfg, tmp_path):
    with pytest.raises(ConfigError, match="is not named seed=0"):
        run_job(compose_cfg(*JOB, "train.seeds_in_process=2"), tmp_path / "mine")
