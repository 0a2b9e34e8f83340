"""Plume's samplers inside the harness: analysis wiring, cluster-weight logging, PLR's learner
statistics, and plume-analyze."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from plume.agents import PPO, PPOConfig
from plume.envs import TraceBenchVecEnv
from plume.harness.apps.analyze import report
from plume.harness.apps.train import run_job
from plume.harness.config.schema import ConfigError
from plume.harness.training.monitor import TrainingMonitor
from plume.harness.training.samplers import EpisodeSignals
from plume.runs.store import RunDirectory
from plume.sampling import TraceSampler, UniformSampler
from plume.traces import load_tracebench
from tests.conftest import TINY


def _tiny(tmp_path, *extra):
    """TINY (its stage 1-2 cache shared by the session) without a tracker."""
    return [*TINY, "logger=none", *extra]


def test_plume_static_gives_each_cluster_equal_mass(compose_cfg, tmp_path):
    run_job(compose_cfg(*_tiny(tmp_path, "sampler=plume_static")), tmp_path / "run")
    weights = RunDirectory(tmp_path / "run").read_table("sampler.parquet")
    final = weights[(weights["progress"] == 1.0) & (weights["grouping"] == "cluster")]
    assert len(final) == 4
    # (1 - eps) / k per cluster plus eps times the cluster's share of traces
    sizes = final["n_traces"].to_numpy() / 1000
    np.testing.assert_allclose(final["weight"], 0.9 / 4 + 0.1 * sizes, atol=1e-9)
    assert sorted(final["n_traces"]) == [125, 125, 375, 375]


def test_plume_dynamic_logs_every_recompute_and_checkpoints_its_state(compose_cfg, tmp_path):
    cfg = compose_cfg(*_tiny(tmp_path, "sampler=plume_dynamic", "sampler.warmup=8",
                             "sampler.recompute_every=8", "sampler.train_every=4",
                             "train.total_steps=4096"))
    run_job(cfg, tmp_path / "run")
    run = RunDirectory(tmp_path / "run")
    weights = run.read_table("sampler.parquet")
    recomputes = weights[weights["grouping"] == "cluster_weight"]
    assert len(recomputes) > 0 and len(recomputes) % 4 == 0
    for _, one in recomputes.groupby("sampler_draws"):
        assert one["weight"].sum() == pytest.approx(1.0)
    state = run.load_checkpoint()["sampler"]
    assert state["name"] == "plume_dynamic" and len(state["history"]) == len(recomputes) // 4


def test_the_analysis_is_computed_once_and_shared(compose_cfg, tmp_path):
    for seed in (0, 1):
        run_job(compose_cfg(*_tiny(tmp_path, "sampler=cluster_uniform", f"seed={seed}",
                                   f"paths.cache={tmp_path / 'cache'}")), tmp_path / f"run{seed}")
    cached = sorted((tmp_path / "cache").iterdir())
    assert [p.suffix for p in cached] == [".json", ".lock", ".npz"]  # one entry, its lock


def test_an_ablation_is_a_config_choice(compose_cfg, tmp_path):
    run_job(compose_cfg(*_tiny(tmp_path, "sampler=plume_static", "analysis=fixed_k",
                               "analysis.fixed_k=2")), tmp_path / "run")
    weights = RunDirectory(tmp_path / "run").read_table("sampler.parquet")
    assert sorted(weights.loc[weights["grouping"] == "cluster", "group"].unique()) == ["0", "1"]


class _Recorder(TraceSampler):
    name = "recorder"

    def __init__(self, n_traces, rng):
        super().__init__(n_traces, rng)
        self.reports = []
        self._uniform = UniformSampler(n_traces, rng)

    def sample(self):
        return self._uniform.sample()

    def sample_many(self, count):
        return self._uniform.sample_many(count)

    def update(self, trace_index, rewards, **learner_stats):
        super().update(trace_index, rewards)
        self.reports.append((trace_index, np.asarray(rewards), learner_stats))

    def probabilities(self):
        return self._uniform.probabilities()


def test_episode_signals_score_each_episode_with_its_mean_absolute_advantage():
    torch.set_num_threads(1)
    traces = load_tracebench("majority_slow", "train")
    sampler = _Recorder(len(traces), np.random.default_rng(0))
    signals = EpisodeSignals(sampler, num_envs=4)
    env = TraceBenchVecEnv(traces, 4, signals.deferred, mode="train", seed=0)
    monitor = TrainingMonitor(env, signals=signals)
    agent = PPO(monitor, PPOConfig(n_steps=256, hidden_sizes=(16,)), seed=0)
    given = []
    agent.track_learner_signal = True
    monitor.connect(lambda: given.append(agent.learner_signal()) or given[-1])
    agent.learn(1024)  # one rollout of 256 steps per copy
    assert sampler.reports == [] and signals.pending_steps == 256  # no scores yet
    assert monitor.deliver_signals() == len(sampler.reports) > 0
    seen = {"advantages": np.concatenate(given), "dones": agent.rollouts.dones}
    assert seen["advantages"].shape == (256, 4) and signals.pending_steps == 0
    dones = seen["dones"]
    assert len(sampler.reports) == int(dones.sum()) >= 4
    # every copy's first episode lies inside the rollout: score it by hand
    for copy in range(4):
        end = int(np.flatnonzero(dones[:, copy])[0])
        expected = np.abs(seen["advantages"][: end + 1, copy]).mean()
        matching = [stats["value_l1"] for _, rewards, stats in sampler.reports
                    if len(rewards) == end + 1]
        assert any(v == pytest.approx(expected, rel=1e-6) for v in matching)  # float32
    for _, rewards, stats in sampler.reports:
        assert 90 <= len(rewards) <= 99
        assert stats["positive_value_loss"] <= stats["value_l1"]


def test_plr_in_the_harness_gets_learner_scores_not_the_proxy(compose_cfg, tmp_path):
    run_job(compose_cfg(*_tiny(tmp_path, "sampler=plr", "train.total_steps=4096")),
            tmp_path / "run")
    state = RunDirectory(tmp_path / "run").load_checkpoint()["sampler"]
    assert state["proxy_scores"] == 0 and int(np.sum(state["episodes"])) > 0


def test_plume_analyze_reports_clusters_against_ground_truth(compose_cfg_analyze, tmp_path):
    cfg = compose_cfg_analyze(f"paths.root={tmp_path}", "env.dataset=balanced")
    text = report(cfg, tmp_path / "out")
    assert "adjusted Rand index vs ground truth: 1.0000" in text
    assert "k=4" in text and "*" in text
    assert (tmp_path / "out" / "clusters.png").stat().st_size > 10_000
    assert (tmp_path / "out" / "clusters.pdf").is_file()
    assert '"k": 4' in (tmp_path / "out" / "analysis.json").read_text()


def test_a_sampler_given_bad_input_is_refused_at_validation(compose_cfg, tmp_path):
    for bad, message in [("sampler.alpha=1.5", r"alpha must be in \[0, 1\], got 1.5"),
                         ("sampler.epsilon=-0.1", r"epsilon must be in \[0, 1\], got -0.1")]:
        cfg = compose_cfg(*_tiny(tmp_path, "sampler=plume_dynamic", bad))
        with pytest.raises(ConfigError, match=r"sampler=plume_dynamic: " + message):
            run_job(cfg, tmp_path / "run")
        assert not (tmp_path / "run").exists()  # no run directory, no analysis, no data
