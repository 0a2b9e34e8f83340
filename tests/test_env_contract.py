"""The environment contract: the registry, the ported TraceBench reproducing its recorded
results exactly, and the harness reaching environments only through their EnvSpec."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from plume.envs.registry import ENV_PACKAGES, EnvSpec, get_env
from plume.harness.apps.train import run_job
from plume.harness.config.schema import ConfigError, validate
from tests.conftest import TINY

REFERENCE = Path(__file__).parent / "data" / "tracebench_reference"


def test_every_registered_env_has_a_consistent_spec():
    for name in ENV_PACKAGES:
        spec = get_env(name)
        assert isinstance(spec, EnvSpec) and spec.name == name
        assert spec.datasets and spec.trace_formats
        assert {"return", "length"} <= {m.name for m in spec.episode_fields}
        anchors = spec.anchors(spec.params())
        for controller in anchors.controller_names():
            assert controller in spec.controllers, (name, controller)
    with pytest.raises(ValueError, match="valid choices: abr, cc, lb, tracebench"):
        get_env("nosuchenv")


@pytest.mark.parametrize("name", sorted(ENV_PACKAGES))
def test_every_spec_builds_a_checked_single_copy_view_and_a_test_batch(name):
    import warnings

    from gymnasium.utils.env_checker import check_env

    spec = get_env(name)
    params = spec.params()
    dataset = spec.default_dataset(params)
    traces = spec.load_builtin(dataset, "test").subset(range(4))
    spec.check_channels(traces, params, dataset)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # unbounded Box warnings (Pensieve state)
        check_env(spec.single(traces, mode="train", seed=0, params=params), skip_render_check=True)
    batch = spec.make(traces, None, None, mode="test", seed=None, params=params)
    assert batch.num_envs == 4 and batch.metadata["autoreset_mode"].name == "SAME_STEP"


def test_the_ported_harness_reproduces_the_recorded_tracebench_run_exactly(compose_cfg, tmp_path):
    """Recorded before the environment contract existed (tests/data/tracebench_reference/
    record.py): PPO + Plume-Dynamic on majority_fast, seed 3. Every eval and sampler row must
    match bit for bit; the new ``score`` column is the QoE per chunk."""
    cfg = compose_cfg(*TINY, "sampler=plume_dynamic", "sampler.recompute_every=8",
                      "train.total_steps=3072", "seed=3", "logger=none")
    run_job(cfg, tmp_path)
    for table in ("eval.parquet", "sampler.parquet"):
        expected = pd.read_parquet(REFERENCE / table)
        got = pd.read_parquet(tmp_path / table)
        pd.testing.assert_frame_equal(got[expected.columns], expected, check_exact=True)
    got = pd.read_parquet(tmp_path / "eval.parquet")
    np.testing.assert_array_equal(got["score"], got["return"] / got["length"])
    score = json.loads((tmp_path / "score.json").read_text())
    assert score["score"]["name"] == "qoe_per_chunk"
    assert score["normalisation"]["test_sets"] == {"majority_slow": {"floor": 1.0, "ceiling": 6.0}}


def test_env_params_are_checked_by_the_spec(compose_cfg):
    job = validate(compose_cfg("env.rebuf_weight=4.0"))
    assert job.env_params.rebuf_weight == 4.0 and job.env.test_sets == [
        "majority_fast", "balanced", "majority_slow"]
    with pytest.raises(ConfigError, match="env.foo"):
        validate(compose_cfg("+env.foo=1"))
    with pytest.raises(ConfigError, match="env=.nosuchenv. is not known"):
        validate(compose_cfg("env.name=nosuchenv"))


def test_analysis_nulls_take_the_environment_defaults(compose_cfg):
    job = validate(compose_cfg())
    assert (job.analysis.feature_set, job.analysis.k_range, job.analysis.channel,
            job.analysis.resample_s) == ("tracebench", (3, 8), "bandwidth", 0.0)
    assert validate(compose_cfg("analysis.k_range=[2,4]")).analysis.k_range == (2, 4)


def test_a_controller_run_is_stored_like_a_learned_one_and_reported_beside_it(
        compose_cfg, tmp_path):
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra

    from plume.harness.apps.evaluate import run_controller
    from plume.harness.config.configdir import plume_hydra
    from plume.report import build_report

    run_job(compose_cfg(*TINY, "logger=none"), tmp_path / "learned" / "seed=0")
    GlobalHydra.instance().clear()
    with plume_hydra():
        cfg = compose("eval", overrides=["controller=always_highest",
                                         "env.test_sets=[majority_slow]"])
    run_dir = tmp_path / "controllers" / "seed=0"
    summary = run_controller(cfg, run_dir)
    frame = pd.read_parquet(run_dir / "eval.parquet")
    assert len(frame) == 1000 and set(frame["progress"]) == {1.0}
    assert summary["eval/majority_slow/score"] == pytest.approx(frame["score"].mean())
    assert json.loads((run_dir / "status.json").read_text())["state"] == "completed"

    result = build_report(tmp_path, tmp_path / "report", figures=False, reps=200)
    table = result.tables["controllers"]
    row = table[table["controller"] == "always_highest"].iloc[0]
    assert row["raw"] == pytest.approx(frame["score"].mean(), abs=1e-4)
    assert row["normalised"] == pytest.approx((row["raw"] - 1.0) / 5.0, abs=1e-3)
    assert "always_highest" not in result.analysis.algorithms  # never pooled with seeds
    assert "Classic controllers" in result.report.read_text()
    with pytest.raises(ConfigError, match="valid choices: always_highest, always_lowest"):
        with plume_hydra():
            run_controller(compose("eval", overrides=["controller=bba"]), tmp_path / "x")
    GlobalHydra.instance().clear()
