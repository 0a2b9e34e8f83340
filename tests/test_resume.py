"""Exact resume: a job stopped at any moment and run again writes an eval.parquet
byte-identical to an uninterrupted run of the same seed, for every algorithm and sampler
(the environment's episodes in flight, the sampler, the learner signal, every RNG and
counter are checkpointed), with real SIGKILLs too."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from plume.harness.apps.train import run_job
from plume.harness.training.monitor import TrainingMonitor
from plume.runs.store import RunDirectory
from tests.conftest import TINY, conf_options, start_plume_train

ROOT = Path(__file__).resolve().parents[1]
SHORT = [o for o in TINY if not o.startswith(("algo.", "train."))] + [
    "logger=none", "train.total_steps=3072", "train.eval_points=3", "train.progress_every_s=0",
    "algo.hidden_sizes=[16,16]"]
ALGO_SHRINK = {"ppo": ["algo.n_steps=32"], "a2c": ["algo.n_steps=8"],
               "dqn": ["algo.learning_starts=128", "algo.buffer_size=2000"]}


class Killed(BaseException):
    """Stands for the process dying: nothing after the raise runs, like SIGKILL."""


def _run_killed_at(cfg, run_dir: Path, step: int, monkeypatch) -> None:
    """Run (or resume) the job and let it die at vector step ``step`` of its training."""
    real_step = TrainingMonitor.step

    def step_or_die(self, actions):
        if self.env_steps // self.num_envs + 1 == step:
            raise Killed
        return real_step(self, actions)

    with monkeypatch.context() as m:
        m.setattr(TrainingMonitor, "step", step_or_die)
        with pytest.raises(Killed):
            run_job(cfg, run_dir)


def _assert_resume_is_exact(cfg, tmp_path, monkeypatch, kills: list[int]) -> RunDirectory:
    run_job(cfg, tmp_path / "whole")
    for step in kills:
        _run_killed_at(cfg, tmp_path / "killed", step, monkeypatch)
    run_job(cfg, tmp_path / "killed")
    whole, killed = (tmp_path / d / "eval.parquet" for d in ("whole", "killed"))
    assert killed.read_bytes() == whole.read_bytes()
    run = RunDirectory(tmp_path / "killed")
    assert run.status()["state"] == "completed"
    return run


# The default suite resumes each algorithm with the samplers that keep the most state (a
# predictor and its optimiser, learner-signal scores, policy consultations, slopes, bins); the
# whole matrix runs with -m slow.
DEFAULT_RESUMES = {("ppo", "plume_dynamic"), ("a2c", "plr"), ("dqn", "genet"), ("ppo", "tscl"),
                   ("a2c", "cl2"), ("dqn", "uniform")}
ALGOS_SAMPLERS = [pytest.param(a, s, marks=() if (a, s) in DEFAULT_RESUMES
                               else pytest.mark.slow)
                  for a in ("ppo", "a2c", "dqn") for s in conf_options("sampler")]


@pytest.mark.parametrize("algo,sampler", ALGOS_SAMPLERS)
def test_every_algorithm_and_sampler_resumes_exactly(algo, sampler, compose_cfg, tmp_path,
                                                      monkeypatch):
    cfg = compose_cfg(*SHORT, f"algo={algo}", *ALGO_SHRINK[algo], f"sampler={sampler}")
    # 384 vector steps of 8 copies; evaluations (and checkpoints) every 128: die inside
    # the second and the third interval, at steps that differ per combination
    rng = np.random.default_rng(zlib.crc32(f"{algo}/{sampler}".encode()))
    kills = [int(rng.integers(130, 250)), int(rng.integers(260, 380))]
    run = _assert_resume_is_exact(cfg, tmp_path, monkeypatch, kills)
    assert [r["from_env_steps"] for r in run.status()["resumes"]] == [1024, 2048]


def test_a2c_with_the_critic_in_the_update_resumes_exactly(compose_cfg, tmp_path, monkeypatch):
    cfg = compose_cfg(*SHORT, "algo=a2c", *ALGO_SHRINK["a2c"], "algo.critic_in_update=true",
                      "sampler=plr")
    _assert_resume_is_exact(cfg, tmp_path, monkeypatch, kills=[200])


@pytest.mark.parametrize("env", ["abr", "cc", "lb"])
def test_every_environment_resumes_exactly_with_its_default_learner(env, compose_cfg,
                                                                     tmp_path, monkeypatch):
    shrink = {"abr": ["algo.n_steps=8", "algo.network=mlp"], "cc": ["algo.n_steps=8"],
              "lb": ["algo.n_steps=32", "algo.n_minibatches=4", "algo.n_epochs=2"]}[env]
    cfg = compose_cfg(*[o for o in SHORT if not o.startswith("env.test_sets")],
                      f"env={env}", "sampler=plume_dynamic", *shrink)
    _assert_resume_is_exact(cfg, tmp_path, monkeypatch, kills=[200])


def _wait_for(predicate, timeout_s: float) -> bool:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


# ~28 s; the exact-resume matrix above and tests/test_tune.py's killed study cover a kill and a
# rerun in the default suite: this one adds kills at random moments (inside a checkpoint write).
@pytest.mark.slow
def test_sigkill_at_random_moments_then_rerun_gives_the_uninterrupted_bytes(tmp_path):
    overrides = [*TINY, "logger=none", "sampler=plume_dynamic", "train.total_steps=16384",
                 "train.eval_points=4"]

    def start(root: Path) -> subprocess.Popen:
        return start_plume_train(overrides, root)

    whole = start(tmp_path / "whole")
    assert whole.wait(timeout=600) == 0, whole.stderr.read()[-2000:]
    (reference,) = tmp_path.glob("whole/default/*/seed=0/eval.parquet")
    killed_root = tmp_path / "killed"
    rng = np.random.default_rng(0)
    for _ in range(3):
        job = start(killed_root)
        run_dirs = lambda: list(killed_root.glob("default/*/seed=0"))
        # die at a random moment once training has started (a checkpoint write included:
        # any moment may fall inside one)
        assert _wait_for(lambda: run_dirs() and (run_dirs()[0] / "train.jsonl").exists(), 300)
        time.sleep(float(rng.uniform(0.0, 1.5)))
        job.send_signal(signal.SIGKILL)
        job.wait(timeout=60)
    (run_dir,) = killed_root.glob("default/*/seed=0")
    (run_dir / ".checkpoint.pt.99999.tmp").write_bytes(b"torn by a kill")  # a dead writer's
    final = start(killed_root)
    assert final.wait(timeout=600) == 0, final.stderr.read()[-2000:]
    assert (run_dir / "eval.parquet").read_bytes() == reference.read_bytes()
    assert not list(run_dir.glob(".*.tmp"))
    assert RunDirectory(run_dir).status()["state"] == "completed"
    assert os.path.getsize(run_dir / "checkpoint.pt") > 0


class _SimulatorLike:
    """State the way the simulators keep it: a stacked array, named views into it."""

    def __init__(self, traces) -> None:
        self.stacked = np.arange(6.0).reshape(2, 3)
        self.first, self.second = self.stacked
        self.flat = self.stacked.reshape(-1)
        self.traces = traces


def test_a_snapshot_keeps_views_as_views_and_refers_to_the_traces():
    from plume.runs import snapshot
    from plume.traces import load_tracebench

    traces = load_tracebench("balanced", "test").subset(range(4))
    state = _SimulatorLike(traces)
    for _ in range(2):  # a restored snapshot snapshots the same way (resumed twice)
        state = snapshot.loads(snapshot.dumps({"s": state}, traces), traces, {"s": state})["s"]
        assert state.traces is traces
        state.first += 10.0
        state.flat[-1] = -1.0
        np.testing.assert_array_equal(state.stacked[0], state.first)
        assert state.second[-1] == -1.0
    np.testing.assert_array_equal(state.stacked, [[20.0, 21.0, 22.0], [3.0, 4.0, -1.0]])
    other = load_tracebench("balanced", "test").subset(range(3))
    blob = snapshot.dumps({"s": state}, traces)
    restored = snapshot.loads(blob, other, {"s": state})["s"]
    assert restored.traces is other  # bound to the restarted job's traces
