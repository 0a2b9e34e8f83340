"""What the harness gives curriculum samplers (Genet, CL2): classic controllers' scores on every
training trace, resolved from the env's defaults or the sampler's config and refused where the
env has none; and the rounds in which it evaluates the policy for the sampler."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from plume.envs.registry import get_env
from plume.envs.tracebench import RateBased
from plume.harness.apps.train import run_job
from plume.harness.config.scored_controllers import sampler_controllers
from plume.harness.training.anchors import controller_trace_scores
from plume.harness.training.evaluation import evaluate_policy
from plume.traces import load_tracebench
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "custom_env"


def test_the_baseline_and_reference_come_from_the_env_unless_the_sampler_names_them():
    abr, cc, lb = get_env("abr"), get_env("cc"), get_env("lb")
    assert sampler_controllers(abr, "genet", {}) == {"baseline_scores": ["robust_mpc"]}
    assert sampler_controllers(abr, "genet", {"baseline": "bba"}) == {"baseline_scores": ["bba"]}
    assert sampler_controllers(cc, "cl2", {}) == {"baseline_scores": ["cubic"],
                                                  "reference_scores": ["oracle"]}
    # no oracle: the best classic controller on each trace
    assert sampler_controllers(lb, "cl2", {})["reference_scores"] == sorted(lb.controllers)
    assert sampler_controllers(lb, "cl2", {"reference": ["random", "round_robin"]})[
        "reference_scores"] == ["random", "round_robin"]
    assert sampler_controllers(lb, "plume_dynamic", {}) == {}


def test_a_sampler_that_needs_a_baseline_is_refused_where_there_is_none(compose_cfg):
    bare = dataclasses.replace(get_env("cc"), controllers={}, baseline_controller=None,
                               oracle_controller=None)
    with pytest.raises(ValueError, match="sampler=genet measures the policy against classic "
                                         "controllers; env 'cc' has none"):
        sampler_controllers(bare, "genet", {})
    unnamed = dataclasses.replace(get_env("cc"), baseline_controller=None)
    with pytest.raises(ValueError, match="names no default baseline controller: set "
                                         "sampler.baseline to one of constant_rate"):
        sampler_controllers(unnamed, "cl2", {})
    with pytest.raises(ValueError, match="'bbr' is not a controller of env 'cc'"):
        sampler_controllers(get_env("cc"), "genet", {"baseline": "bbr"})


@pytest.mark.parametrize("sampler", ["genet", "cl2"])
def test_plume_train_refuses_them_for_a_user_env_without_controllers(tmp_path, sampler):
    """examples/custom_env's link_share env has no classic controller: the job stops at
    validation with one line, before any run directory exists."""
    command = [sys.executable, "-m", "plume.harness.apps.train",
               f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]", "env=link_share",
               f"sampler={sampler}", "logger=none", f"paths.root={tmp_path}"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode != 0
    assert (f"sampler={sampler} measures the policy against classic controllers; env "
            "'link_share' has none") in done.stderr
    assert "Traceback" not in done.stderr and not list(tmp_path.rglob("status.json"))


def test_controller_trace_scores_are_the_evaluator_s_and_are_cached(tmp_path, monkeypatch):
    spec = get_env("tracebench")
    traces = load_tracebench("majority_slow", "test").subset(np.arange(0, 250, 25), name="ten")
    scores = controller_trace_scores(spec, spec.params(), traces, "always_highest", tmp_path)
    frame = evaluate_policy(spec.controllers["always_highest"](spec.params()), spec,
                            {"ten": traces})
    np.testing.assert_array_equal(scores, frame["score"].to_numpy())
    monkeypatch.setattr("plume.harness.training.anchors.Evaluator", None)  # a second evaluation fails
    np.testing.assert_array_equal(
        controller_trace_scores(spec, spec.params(), traces, "always_highest", tmp_path), scores)


def test_the_rate_based_rule_picks_the_highest_bitrate_under_the_harmonic_mean():
    obs = np.zeros((3, 53), dtype=np.float32)
    rows = obs[:, :50].reshape(3, 10, 5)
    # copy 0: last 5 chunks of size 3 downloaded in 1 s (3 Mbit/s) and one of 6 in 0.5 s
    rows[0, 5:, 1], rows[0, 5:, 2] = 3 / 6, 1 / 20
    rows[0, 9, 1], rows[0, 9, 2] = 6 / 6, 0.5 / 20
    # copy 1: 2 Mbit/s throughout; copy 2: nothing downloaded yet
    rows[1, :, 1], rows[1, :, 2] = 1 / 6, 0.5 / 20
    # harmonic mean of copy 0: 5 / (4/3 + 1/12) = 3.53 -> bitrate 3 (index 1)
    np.testing.assert_array_equal(RateBased().act(obs), [1, 0, 0])


def test_genet_rounds_run_at_their_env_steps_and_are_logged(compose_cfg, tmp_path):
    cfg = compose_cfg(*TINY, "logger=none", "sampler=genet", "sampler.rounds=3",
                      "train.total_steps=4096", "sampler.traces_per_cluster=2")
    run_job(cfg, tmp_path / "run")
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    summary = status["summary"]
    # rounds every 4096 // 4 = 1024 env steps, inside the budget: at 1024, 2048 and 3072
    assert summary["sampler_rounds"] == 3 and summary["sampler_round_seconds"] > 0
    evaluations = pd.read_parquet(tmp_path / "run" / "eval.parquet")
    assert evaluations["score"].notna().all()
    # each round plays 2 traces of each of TraceBench's 4 clusters from chunk 0: 8 x 99 steps
    assert summary["sampler_scoring_steps"] == 3 * 8 * 99
    by_progress = evaluations.groupby("progress")["scoring_steps"].agg(["min", "max"])
    assert by_progress["min"].tolist() == by_progress["max"].tolist() == [0, 2 * 792, 3 * 792]


def _train_on(env: str, sampler: str, compose_cfg, run_dir: Path) -> dict:
    shrink = {"abr": ["algo.n_steps=8", "algo.network=mlp"], "cc": ["algo.n_steps=8"],
              "lb": ["algo.n_steps=32", "algo.n_minibatches=4", "algo.n_epochs=2"]}[env]
    extra = ["sampler.rounds=3"] if sampler == "genet" else []
    cfg = compose_cfg(f"env={env}", f"sampler={sampler}", "train.total_steps=4096",
                      "train.eval_points=2", "train.progress_every_s=0", "env.n_envs=8",
                      "logger=none", *shrink, *extra)
    run_job(cfg, run_dir)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "completed"
    assert pd.read_parquet(run_dir / "eval.parquet")["score"].notna().all()
    weights = pd.read_parquet(run_dir / "sampler.parquet")
    assert np.isclose(weights[weights["grouping"] == "cluster"].groupby("progress")[
        "weight"].sum(), 1.0).all()
    return status["summary"]


@pytest.mark.parametrize("sampler", ["genet", "cl2", "tscl"])
def test_each_curriculum_sampler_trains_on_cc(sampler, compose_cfg, tmp_path):
    summary = _train_on("cc", sampler, compose_cfg, tmp_path / "run")
    assert summary.get("sampler_rounds") == (3 if sampler == "genet" else None)


@pytest.mark.slow  # the controllers' scores on 1000 ABR sessions / LB job sequences: ~45 s each
@pytest.mark.parametrize("env", ["abr", "lb"])
@pytest.mark.parametrize("sampler", ["genet", "cl2", "tscl"])
def test_each_curriculum_sampler_trains_on_abr_and_lb(env, sampler, compose_cfg, tmp_path):
    _train_on(env, sampler, compose_cfg, tmp_path / "run")


def test_rounds_between_updates_never_stall_the_schedule(compose_cfg, tmp_path):
    """A2C updates every 512 env steps here, Genet's rounds fall every 204: updates pass
    several round steps at once, and the last one passes the budget (no round there)."""
    cfg = compose_cfg(*TINY, "logger=none", "algo=a2c", "sampler=genet")
    run_job(cfg, tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "status.json").read_text())["summary"]
    assert summary["env_steps"] == 2048
    # rounds at the updates ending on 512, 1024 and 1536 env steps (204 x 2, 5 and 7)
    assert summary["sampler_rounds"] == 7
