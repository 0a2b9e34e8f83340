"""Stable-Baselines3, unchanged, on Plume's environments and samplers (``plume.envs.sb3``).

The supported way is ``PlumeVecEnv`` over one batched env (one sampler sees every episode);
``DummyVecEnv`` of single copies sharing one sampler works too; with ``SubprocVecEnv`` every
worker trains its own copy of the sampler (checked below, so that it stays documented)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("stable_baselines3")

import cloudpickle  # an SB3 dependency
import torch
from stable_baselines3 import A2C, DQN, PPO
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

from plume.envs.abr import AbrParams
from plume.envs.registry import get_env
from plume.envs.sb3 import PlumeVecEnv, sb3_policy
from plume.harness.training.evaluation import Evaluator, evaluate_policy
from plume.sampling import PlumeDynamicSampler, UniformSampler

ROOT = Path(__file__).resolve().parents[1]
SPEC = get_env("tracebench")
PARAMS = SPEC.params()
FAST_DYNAMIC = {"warmup": 8, "recompute_every": 8, "train_every": 8, "n_step": 20,
                "batch_size": 8}
"""Plume-Dynamic on a schedule that recomputes its weights within a few dozen episodes."""
SPEC_MAX_CHUNKS = 99
"""The longest TraceBench episode (a test episode: start 0, 100 chunks)."""


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Small networks on 2 shared cores: one thread is much faster than contention."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module", autouse=True)
def sb3_logs_in_a_temporary_folder(tmp_path_factory):
    """SB3's ``learn`` makes an empty ``<tempdir>/SB3-<time>`` folder per call unless
    ``SB3_LOGDIR`` says where: there, the suite leaves none behind."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3_logs")))
        yield


@pytest.fixture(scope="module")
def traces():
    return SPEC.load_builtin("majority_fast", "train")


def dynamic_sampler(traces, seed: int = 0) -> PlumeDynamicSampler:
    """Plume-Dynamic with hand-made cluster inputs: one cluster per ground-truth kind, and
    each trace's throughput mean and spread as its features."""
    kinds = np.unique(traces.labels, return_inverse=True)[1]
    memberships = np.eye(kinds.max() + 1)[kinds]
    features = np.stack([traces.mean_bandwidth(), traces.bandwidth.std(axis=1)], axis=1)
    return PlumeDynamicSampler(len(traces), np.random.default_rng(seed), memberships, features,
                               **FAST_DYNAMIC)


def assert_sb3_got_our_episodes(model, sampler) -> None:
    episodes = list(model.ep_info_buffer)
    assert episodes, "SB3 recorded no episode"
    for episode in episodes:
        assert episode["r"] == episode["return_transformed"]
        assert episode["l"] == episode["length"] and 1 <= episode["l"] <= SPEC_MAX_CHUNKS
        assert episode["t"] > 0 and sampler.episodes[int(episode["trace"])] > 0
        assert episode["quality"] >= episode["l"]  # our fields survive: no Monitor overwrote
    assert sampler.episodes.sum() >= len(episodes)



def test_ppo_trains_through_the_adapter_without_a_monitor_and_moves_plume_dynamic(traces):
    sampler = dynamic_sampler(traces)
    initial_weights = sampler.cluster_weights()
    env = PlumeVecEnv(SPEC.make(traces, 32, sampler, mode="train", seed=0, params=PARAMS))
    assert not any(env.env_is_wrapped(Monitor))
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, n_epochs=1, seed=0)
    model.learn(32 * 32 * 5)
    assert model.num_timesteps == 32 * 32 * 5
    assert_sb3_got_our_episodes(model, sampler)
    assert sampler.history and sampler.train_rounds > 0
    assert not np.allclose(sampler.cluster_weights(), initial_weights)


@pytest.mark.parametrize("algo", [DQN, A2C], ids=["dqn", "a2c"])
def test_dqn_and_a2c_train_through_the_adapter(traces, algo):
    sampler = UniformSampler(len(traces), np.random.default_rng(1))
    env = PlumeVecEnv(SPEC.make(traces, 16, sampler, mode="train", seed=1, params=PARAMS))
    kwargs = {"learning_starts": 0, "buffer_size": 4096, "batch_size": 32} if algo is DQN else {}
    model = algo("MlpPolicy", env, seed=1, **kwargs).learn(16 * 110)
    assert model.num_timesteps >= 16 * 110
    assert_sb3_got_our_episodes(model, sampler)


def twin_envs(which: str, n: int, seed: int):
    """The same batched env twice (same seed): one to step raw, one through the adapter."""
    if which == "tracebench":
        spec, traces, params = SPEC, SPEC.load_builtin("majority_fast", "train"), PARAMS
    else:  # gelato, cut at 25 chunks: truncations as well as terminations
        spec = get_env("abr")
        traces = spec.load_builtin("puffer_synthetic", "train").subset(range(12))
        params = AbrParams(max_steps=25)
    return [spec.make(traces, n, None, mode="train", seed=seed, params=params)
            for _ in range(2)]


@pytest.mark.parametrize("which", ["tracebench", "abr"])
def test_the_adapter_follows_sb3_step_conventions(which):
    raw, inner = twin_envs(which, n=6, seed=3)
    env = PlumeVecEnv(inner)
    assert env.seed(3) == [3] * 6
    raw_obs, raw_info = raw.reset(seed=3)
    np.testing.assert_array_equal(env.reset(), raw_obs)
    assert [info["trace"] for info in env.reset_infos] == raw_info["trace"].tolist()
    rng = np.random.default_rng(0)
    seen = {"terminated": 0, "truncated": 0}
    for _ in range(110):
        actions = rng.integers(0, env.action_space.n, env.num_envs)
        obs, rewards, dones, infos = env.step(actions)
        raw_obs, raw_rewards, terminated, truncated, raw_infos = raw.step(actions)
        np.testing.assert_array_equal(obs, raw_obs)
        np.testing.assert_array_equal(rewards, raw_rewards)
        np.testing.assert_array_equal(dones, terminated | truncated)
        assert len(infos) == env.num_envs
        for i, info in enumerate(infos):
            if not dones[i]:
                assert info == {}
                continue
            np.testing.assert_array_equal(info["terminal_observation"], raw_infos["final_obs"][i])
            assert info["TimeLimit.truncated"] == bool(truncated[i] and not terminated[i])
            episode = dict(info["episode"])
            assert 0 < episode.pop("t") < 60  # wall clock: the twins differ
            assert episode == {key: values[i].item() for key, values in
                               raw_infos["episode"].items() if key != "t"}
            assert {"r", "l", "return", "trace"} <= set(episode)
            seen["truncated" if info["TimeLimit.truncated"] else "terminated"] += 1
    # TraceBench episodes end with the video; gelato's 300-chunk videos outlast max_steps.
    assert seen["terminated" if which == "tracebench" else "truncated"] > 0


def test_per_copy_access_acts_on_the_one_batched_env(traces):
    sampler = UniformSampler(len(traces), np.random.default_rng(0))
    batched = SPEC.make(traces, 4, sampler, mode="train", seed=0, params=PARAMS)
    env = PlumeVecEnv(batched)
    assert env.get_attr("sampler") == [sampler] * 4 and env.get_attr("mode", [1, 2]) == [
        "train", "train"]
    assert env.has_attr("trace_set") and not env.has_attr("no_such_attribute")
    env.set_attr("quality_weight", 2.0)
    assert batched.quality_weight == 2.0
    with pytest.raises(ValueError, match="all of them"):
        env.set_attr("quality_weight", 1.0, indices=[0])
    with pytest.raises(ValueError, match="same reset options"):
        env.set_options([{"a": 1}, {}, {}, {}])
    env.set_options({"ignored": True})
    env.reset()
    steps = env.env_method("last_step", indices=[0, 3])
    assert len(steps) == 2 and steps[0] is steps[1] and set(steps[0]) >= {"delay", "stall"}
    assert env.env_is_wrapped(Monitor) == [False] * 4
    with pytest.raises(IndexError):
        env.get_attr("mode", indices=[4])


def test_sb3_rejects_the_batched_env_itself_and_the_adapter_says_what_to_use(traces):
    batched = SPEC.make(traces, 4, None, mode="train", seed=0, params=PARAMS)
    with pytest.raises(ValueError, match="not a Gymnasium environment"):
        PPO("MlpPolicy", batched)  # what a user sees today; the fix is PlumeVecEnv(batched)
    single = SPEC.single(traces, None, seed=0, params=PARAMS)
    with pytest.raises(TypeError, match="DummyVecEnv"):
        PlumeVecEnv(single)
    with pytest.raises(TypeError, match="already an SB3 VecEnv"):
        PlumeVecEnv(PlumeVecEnv(batched))


def test_dummy_vec_env_of_single_copies_shares_one_sampler_and_one_trace_table(traces):
    sampler = UniformSampler(len(traces), np.random.default_rng(2))
    copies = [SPEC.single(traces, sampler, mode="train", seed=i, params=PARAMS)
              for i in range(8)]
    assert all(c.vec.payload_tables is copies[0].vec.payload_tables for c in copies)
    assert all(c.sampler is sampler for c in copies)
    model = PPO("MlpPolicy", DummyVecEnv([lambda c=c: c for c in copies]), n_steps=128,
                batch_size=256, n_epochs=1, seed=2).learn(8 * 128)
    assert_sb3_got_our_episodes(model, sampler)
    assert sampler.episodes.sum() == len(model.ep_info_buffer)  # every copy reported to it


def test_subprocess_workers_each_train_their_own_copy_of_the_sampler(traces):
    sampler = dynamic_sampler(traces.subset(range(40)))
    subset = traces.subset(range(40))
    make = [lambda i=i: SPEC.single(subset, sampler, mode="train", seed=i, params=PARAMS)
            for i in range(2)]
    # spawn / forkserver would send the env factory, sampler included, pickled:
    assert cloudpickle.loads(cloudpickle.dumps(make[0]))().sampler is not sampler
    env = SubprocVecEnv(make, start_method="fork")
    try:
        PPO("MlpPolicy", env, n_steps=128, batch_size=64, n_epochs=1, seed=0).learn(256)
        workers = env.get_attr("sampler")  # pickled back from each worker
    finally:
        env.close()
    assert all(isinstance(w, PlumeDynamicSampler) and w.episodes.sum() > 0 for w in workers)
    assert sampler.episodes.sum() == 0  # the parent's sampler saw none of those episodes


def test_evaluate_policy_scores_an_sb3_model_on_plume_test_sets(traces):
    env = PlumeVecEnv(SPEC.make(traces, 8, None, mode="train", seed=0, params=PARAMS))
    model = PPO("MlpPolicy", env, n_steps=16, batch_size=64, n_epochs=1, seed=0).learn(128)
    slow = SPEC.load_builtin("majority_slow", "test")
    test_sets = {"slow": slow.subset(range(20), name="slow"),
                 "fast": traces.subset(range(5), name="fast")}
    frame = evaluate_policy(sb3_policy(model), "tracebench", test_sets, env_steps=128)
    expected = Evaluator(SPEC, test_sets, PARAMS).evaluate(sb3_policy(model), progress=1.0,
                                                           env_steps=128)
    pd.testing.assert_frame_equal(frame, expected)
    assert len(frame) == 25 and frame["score"].between(-100, 6).all()
    assert (frame["length"] == SPEC_MAX_CHUNKS).all() and set(frame["env_steps"]) == {128}


def test_the_example_script_trains_evaluates_and_reports():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "sb3_tracebench.py"), "--steps", "2048",
         "--n-envs", "16"], check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "trained 2,048 env steps" in out and "greedy evaluation" in out
    for test_set in SPEC.builtin_test_sets("majority_fast"):
        assert test_set in out
    assert "sampler plume_dynamic:" in out and "cluster" in out
