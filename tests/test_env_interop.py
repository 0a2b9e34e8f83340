"""What Gymnasium / SB3 tooling needs from Plume's environments, checked without SB3:
Gymnasium's episode-statistics keys beside ours, trace tables shared by every env over one
TraceSet, and ``evaluate_policy`` writing the harness's eval table."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pandas as pd
import pytest

from plume.envs.abr import AbrParams
from plume.envs.registry import get_env
from plume.envs.vector import GYMNASIUM_EPISODE_KEYS
from plume.harness.training.evaluation import Evaluator, evaluate_policy


@pytest.fixture(scope="module")
def tracebench():
    spec = get_env("tracebench")
    return spec, spec.load_builtin("majority_fast", "train").subset(range(40))


@pytest.fixture(scope="module")
def puffer():
    spec = get_env("abr")
    return spec, spec.load_builtin("puffer_synthetic", "train").subset(range(12))


def play(env, steps: int, seed: int = 0):
    """Random actions for ``steps`` batched steps; yields (rewards so far per copy, infos)."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    totals = np.zeros(env.num_envs)
    for _ in range(steps):
        _, rewards, terminated, truncated, infos = env.step(
            rng.integers(0, env.single_action_space.n, env.num_envs))
        totals += rewards
        yield totals.copy(), terminated | truncated, infos
        totals[terminated | truncated] = 0.0


@pytest.mark.parametrize("which", ["tracebench", "puffer"])
def test_finished_episodes_carry_gymnasium_keys_beside_ours(which, request):
    spec, traces = request.getfixturevalue(which)
    params = AbrParams(max_steps=30) if which == "puffer" else spec.params()
    created = time.perf_counter()
    env = spec.make(traces, 6, None, mode="train", seed=1, params=params)
    finished = 0
    for totals, done, infos in play(env, 130):
        if not done.any():
            assert "episode" not in infos
            continue
        episode, mask = infos["episode"], infos["_episode"]
        np.testing.assert_array_equal(mask, done)
        assert set(GYMNASIUM_EPISODE_KEYS) <= set(episode)
        # r: the sum of the rewards step returned (the transformed reward), not the raw QoE.
        np.testing.assert_allclose(episode["r"][mask], totals[mask], rtol=1e-12)
        np.testing.assert_array_equal(episode["r"], episode["return_transformed"])
        np.testing.assert_array_equal(episode["l"], episode["length"])
        assert not np.array_equal(episode["r"][mask], episode["return"][mask])
        elapsed = time.perf_counter() - created
        assert np.all((episode["t"][mask] > 0) & (episode["t"][mask] <= elapsed))
        assert np.all(episode["t"][mask] == np.round(episode["t"][mask], 6))
        assert not episode["t"][~mask].any() and not episode["r"][~mask].any()
        finished += int(mask.sum())
    assert finished >= 6


def test_a_single_copy_reports_the_same_keys_as_floats(tracebench):
    spec, traces = tracebench
    env = spec.single(traces, None, mode="test", seed=0, params=spec.params())
    env.reset(seed=0)
    total, steps, done = 0.0, 0, False
    while not done:
        _, reward, terminated, truncated, info = env.step(1)
        total, steps, done = total + reward, steps + 1, terminated or truncated
    episode = info["episode"]
    assert episode["r"] == pytest.approx(total) and episode["r"] == episode["return_transformed"]
    assert episode["l"] == steps == episode["length"] and isinstance(episode["t"], float)


@pytest.mark.parametrize("which", ["tracebench", "puffer"])
def test_every_env_over_one_trace_set_shares_its_read_only_tables(which, request):
    spec, traces = request.getfixturevalue(which)
    params = spec.params()
    first = spec.single(traces, None, mode="train", seed=0, params=params)
    batched = spec.make(traces, 4, None, mode="test", seed=None, params=params)
    tables = first.vec.payload_tables
    assert batched.payload_tables is tables
    assert spec.single(traces, None, seed=1, params=params).vec.payload_tables is tables
    other = traces.subset(range(len(traces) - 1))
    assert spec.make(other, 2, None, mode="train", seed=0, params=params).payload_tables \
        is not tables
    with pytest.raises(ValueError, match="read-only"):
        tables.slot[0, 0] = 1.0


def test_sixty_four_single_copies_cost_little_more_than_one(tracebench):
    """The user's report: each copy rebuilt the tables (64 copies: +556 MiB on the full set)."""
    spec, _ = tracebench
    traces = spec.load_builtin("majority_fast", "train")  # all 1000 traces
    params = spec.params()
    spec.single(traces, None, seed=0, params=params)  # builds the shared tables
    tracemalloc.start()
    try:
        envs = [spec.single(traces, None, seed=i, params=params) for i in range(64)]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(envs) == 64 and held < 16 * 2**20  # about 0.1 MiB per copy; one table: 8.7 MiB


def test_evaluate_policy_writes_the_harness_eval_table(tracebench):
    spec, traces = tracebench
    test_sets = {"small": traces.subset(range(10), name="small")}
    lowest = spec.controllers["always_lowest"](spec.params())
    frame = evaluate_policy(lowest, "tracebench", test_sets, env_steps=7)
    expected = Evaluator(spec, test_sets, spec.params()).evaluate(lowest, progress=1.0,
                                                                  env_steps=7)
    pd.testing.assert_frame_equal(frame, expected)
    assert list(frame.columns) == ["test_set", "trace", "trace_id", "label", "cluster",
                                   *(m.name for m in spec.episode_fields), "score",
                                   "progress", "env_steps"]
    np.testing.assert_array_equal(frame["score"], 1.0)  # the lowest bitrate never stalls
    clusters = {"small": np.arange(10) % 2}
    with_clusters = evaluate_policy(lowest, spec, test_sets, clusters=clusters, progress=0.5)
    np.testing.assert_array_equal(with_clusters["cluster"], clusters["small"])
    assert set(with_clusters["progress"]) == {0.5}
