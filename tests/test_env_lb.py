"""Load-balancing env: hand-computed episodes, the Park reference, controllers, the harness."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest
from gymnasium.utils.env_checker import check_env

from plume.envs.lb import SPEC, LbParams, LbVecEnv
from plume.envs.lb.controllers import (
    EarliestFinish,
    JoinShortestQueue,
    LeastWorkLeft,
    PowerOfTwo,
    RandomServer,
    RoundRobin,
    argmin_faster,
)
from plume.envs.lb.reference import ReferenceLoadBalance
from plume.traces.lb import PARK_RATES, generate_lb_mixed, generate_park
from plume.traces.traceset import TraceSet
from tests.conftest import TINY

TWO = (1.0, 0.5)  # two servers: hand computations stay short


def job_traces(gaps: list[list[float]], sizes: list[list[float]], name="jobs") -> TraceSet:
    """A TraceSet of ragged job sequences."""
    width = max(len(g) for g in gaps)
    pad = lambda rows: np.array([list(r) + [0.0] * (width - len(r)) for r in rows])
    return TraceSet(name=name, series={"interarrival": pad(gaps), "job_size": pad(sizes)},
                    lengths=[len(g) for g in gaps])


def reference(traces: TraceSet, i: int, rates=PARK_RATES) -> ReferenceLoadBalance:
    n = traces.lengths[i]
    return ReferenceLoadBalance(traces.series["interarrival"][i, :n],
                                traces.series["job_size"][i, :n], rates)


def play(env: LbVecEnv, actions):
    """Step ``env`` with each row of ``actions``; (observations, rewards, infos) per step."""
    out = []
    for a in actions:
        obs, rewards, terminated, truncated, info = env.step(np.asarray(a))
        assert not truncated.any()
        out.append((obs, rewards, terminated, info))
    return out


# --------------------------------------------------------------------------- by hand
def test_a_hand_computed_episode():
    """Jobs (arrival, size) = (2, 4), (3, 3), (3, 2), (7, 5) on rates (1, 0.5), servers
    0, 1, 0, 0. Finishes: 2+4 = 6, 3+int(3/0.5) = 9, queued behind job 0: 6+2 = 8, queued
    behind job 2: 8+5 = 13. Jobs in the system: 1 on [2, 3]; none of [3, 3]; on [3, 7] job 0
    until 6 plus jobs 1 and 2 throughout, 3 + 4 + 4 = 11; the drain from 7: job 1 for 2,
    job 2 for 1, job 3 for 6 = 9. JCTs 4, 6, 5, 6: mean 5.25, their sum the return 21."""
    traces = job_traces([[2, 1, 0, 4]], [[4, 3, 2, 5]])
    env = LbVecEnv(traces, mode="test", service_rates=TWO)
    obs, _ = env.reset()
    np.testing.assert_array_equal(obs, [[0, 0, 4]])
    steps = play(env, [[0], [1], [0], [0]])
    assert [float(s[1][0]) for s in steps] == [-1.0, 0.0, -11.0, -9.0]
    # loads at t = 3: job 0 running (6 - 3); at t = 3 again: plus job 1 running (9 - 3);
    # at t = 7: job 2 running (8 - 7), job 1 (9 - 7); then the drained final observation
    np.testing.assert_array_equal([s[0][0] for s in steps[:3]],
                                  [[3, 0, 3], [3, 6, 2], [1, 2, 5]])
    final = steps[-1][3]
    np.testing.assert_array_equal(final["final_obs"], [[0, 0, 0]])
    episode = {k: float(v[0]) for k, v in final["episode"].items()}
    assert episode["return"] == -21.0 and episode["length"] == 4
    assert episode["mean_jct"] == 5.25
    assert episode["mean_wait"] == (0 + 0 + 3 + 1) / 4  # jobs 2 and 3 queue for 3 and 1
    assert episode["max_queue"] == 2.0
    assert episode["return_transformed"] == -21.0 and episode["r"] == -21.0


def test_completions_come_before_arrivals_on_ties():
    """Jobs at t = 0 (size 3), 0 (size 4), 6 (size 2) on rates (1, 0.5), servers 1, 1, 0:
    job 0 ends at 6 exactly when job 2 arrives, so job 1 is *running* then (load
    14 - 6 = 8 time units), not queued (which would show its size, 4)."""
    traces = job_traces([[0, 0, 6]], [[3, 4, 2]])
    env = LbVecEnv(traces, mode="test", service_rates=TWO)
    env.reset()
    steps = play(env, [[1], [1], [0]])
    np.testing.assert_array_equal(steps[1][0], [[0, 8, 2]])
    assert [float(s[1][0]) for s in steps] == [0.0, -12.0, -10.0]
    ref = reference(traces, 0, TWO)
    ref.reset()
    ref_steps = [ref.step(a) for a in (1, 1, 0)]
    np.testing.assert_array_equal(ref_steps[1][0], [0, 8, 2])
    assert ref.completion_times().tolist() == [6.0, 14.0, 2.0]


def test_scales_apply_to_what_step_returns_only():
    traces = generate_park(3, 4, n_jobs=40)
    actions = np.random.default_rng(2).integers(0, 10, (40, 3))
    raw = LbVecEnv(traces, mode="test")
    scaled = LbVecEnv(traces, mode="test", reward_scale=1e-3, obs_scale=1e-3)
    raw.reset()
    scaled.reset()
    refs = [reference(traces, i) for i in range(3)]
    for i, a in enumerate(actions):
        obs, rew, done, _, info = scaled.step(a)
        _, raw_rew, _, _, raw_info = raw.step(a)
        ref_obs = np.stack([r.step(int(x))[0] for r, x in zip(refs, a)])
        assert np.array_equal(rew, raw_rew * 1e-3)
        expected = (ref_obs * 1e-3).astype(np.float32)
        assert np.array_equal(info["final_obs"] if done.any() else obs, expected)
    assert np.allclose(info["episode"]["return_transformed"], raw_info["episode"]["return"] * 1e-3)
    np.testing.assert_array_equal(info["episode"]["return"], raw_info["episode"]["return"])
    assert scaled.single_observation_space.high[0] == np.float32(500.0)


# --------------------------------------------------------------------------- reference
def compare_with_reference(traces: TraceSet, policy, rates=PARK_RATES, episodes: int = 2):
    """Play every copy ``episodes`` times against per-copy references; assert exact
    rewards, observations, final observations and episode returns."""
    env = LbVecEnv(traces, mode="test", service_rates=rates)
    obs, info = env.reset()
    refs = [reference(traces, int(t), rates) for t in info["trace"]]
    np.testing.assert_array_equal(obs, np.stack([r.reset() for r in refs]).astype(np.float32))
    finished = np.zeros(env.num_envs, dtype=int)
    rng = np.random.default_rng(0)
    while finished.min() < episodes:
        actions = policy(env, rng)
        obs, rewards, done, _, info = env.step(actions)
        out = [r.step(int(a)) for r, a in zip(refs, actions)]
        np.testing.assert_array_equal(rewards, [o[1] for o in out])
        expected = np.stack([o[0] for o in out]).astype(np.float32)
        np.testing.assert_array_equal(obs[~done], expected[~done])
        for i in np.flatnonzero(done):
            assert out[i][2]
            np.testing.assert_array_equal(info["final_obs"][i], expected[i])
            jct = refs[i].completion_times()
            assert info["episode"]["return"][i] == -jct.sum()
            assert info["episode"]["mean_jct"][i] == pytest.approx(jct.mean(), rel=1e-12)
            refs[i] = reference(traces, int(info["trace"][i]), rates)
            np.testing.assert_array_equal(obs[i], refs[i].reset().astype(np.float32))
            finished[i] += 1
    return env


def uniform(env, rng):
    return rng.integers(0, env.n_servers, env.num_envs)


def test_vectorised_env_matches_park_reference_exactly():
    park = generate_park(6, 3, n_jobs=150)
    mixed = generate_lb_mixed(10, 9, dict.fromkeys(["batch", "bursty", "bimodal"], 1.0),
                              n_jobs=120)
    compare_with_reference(park, uniform)
    compare_with_reference(mixed, lambda env, rng: np.where(
        rng.random(env.num_envs) < 0.5, uniform(env, rng),
        argmin_faster(env.work_left(), env.service_rates)))
    # ragged lengths, zero sizes (zero service time), simultaneous arrivals, 2 servers
    rng = np.random.default_rng(5)
    lengths = [1, 2, 7, 30, 55]
    ragged = job_traces([rng.integers(0, 4, n).tolist() for n in lengths],
                        [(rng.integers(0, 6, n) * rng.integers(0, 2, n)).tolist()
                         for n in lengths])
    compare_with_reference(ragged, lambda env, rng: rng.integers(0, 2, env.num_envs), TWO,
                           episodes=3)


def test_the_ring_grows_instead_of_dropping_jobs():
    traces = generate_park(3, 8, n_jobs=300)
    env = compare_with_reference(traces, lambda env, rng: np.array([0, 9, 0]), episodes=1)
    assert env.ring_capacity >= 256  # about 290 jobs wait at the slowest server


# --------------------------------------------------------------------------- controllers
def state_after(gaps, sizes, actions, rates, n_copies=1) -> LbVecEnv:
    """A test env of ``n_copies`` copies of one trace after ``actions``."""
    traces = job_traces([gaps] * n_copies, [sizes] * n_copies)
    env = LbVecEnv(traces, mode="test", service_rates=rates)
    env.reset()
    for a in actions:
        env.step(np.full(n_copies, a))
    return env


def test_controller_rules_on_a_hand_made_state():
    """Rates (0.5, 1, 2); three jobs at t = 0 of sizes 10, 12, 30, one per server (finishing
    at 20, 12, 15); at t = 10 a job of size 40 arrives. Work left (10, 2, 5): LWL -> 1.
    Finish there 10 + 80, 2 + 40, 5 + 20: earliest-finish -> 2. One job everywhere: JSQ's tie
    goes to the fastest server, 2. Round robin: job 3 -> 3 mod 3 = 0."""
    env = state_after([0, 0, 0, 10], [10, 12, 30, 40], [0, 1, 2], (0.5, 1.0, 2.0))
    np.testing.assert_array_equal(env.work_left(), [[10, 2, 5]])
    np.testing.assert_array_equal(env.service_times(), [[80, 40, 20]])
    np.testing.assert_array_equal(env.queue_lengths(), [[1, 1, 1]])
    picks = {c.__name__: c().bind(env)(np.zeros((1, 4))).tolist()
             for c in (LeastWorkLeft, EarliestFinish, JoinShortestQueue, RoundRobin)}
    assert picks == {"LeastWorkLeft": [1], "EarliestFinish": [2], "JoinShortestQueue": [2],
                     "RoundRobin": [0]}


def test_ties_go_to_the_faster_server_then_the_lower_index():
    rates = np.array([0.5, 2.0, 1.0, 2.0])
    values = np.array([[1, 1, 1, 1], [3, 2, 2, 5], [0, 4, 0, 4]])
    assert argmin_faster(values, rates).tolist() == [1, 1, 2]


def test_power_of_two_takes_the_shorter_of_two_uniform_choices():
    """Queues (0, 3, 3): JSQ(2) takes server 0 whenever it is drawn (2 of the 3 pairs), else
    the 1-2 tie goes to the faster server 2; it never takes server 1."""
    env = state_after([0] * 7, [100] * 7, [1, 1, 1, 2, 2, 2], (0.5, 1.0, 2.0), n_copies=3000)
    np.testing.assert_array_equal(env.queue_lengths()[0], [0, 3, 3])
    obs = np.zeros((3000, 4))
    picks = PowerOfTwo(seed=1).bind(env)(obs)
    assert set(picks.tolist()) == {0, 2}
    assert (picks == 0).mean() == pytest.approx(2 / 3, abs=0.03)
    np.testing.assert_array_equal(PowerOfTwo(seed=1).bind(env)(obs), picks)  # reseeded


def test_random_is_uniform_and_reproducible_per_bind():
    env = state_after([0], [5], [], PARK_RATES, n_copies=5000)
    policy = RandomServer().bind(env)
    first = policy(np.zeros((5000, 11)))
    assert np.bincount(first, minlength=10).min() > 400
    assert not np.array_equal(policy(np.zeros((5000, 11))), first)  # a stream, not a constant
    np.testing.assert_array_equal(RandomServer().bind(env)(np.zeros((5000, 11))), first)


def test_least_work_left_beats_random_by_an_order_of_magnitude():
    """Park's defaults, 1000 jobs, give mean JCTs near 790 (least work left) and 14,500
    (random). A job's JCT is at least its service time on the fastest server, which bounds
    any simulator from below; a simulator that never queues would put random close to it."""
    from plume.harness.training.evaluation import evaluate_policy

    traces = generate_park(16, 42, n_jobs=1000)
    params = LbParams()
    jct = {name: evaluate_policy(SPEC.controllers[name](params), SPEC, {"park": traces},
                                 params)["mean_jct"].mean()
           for name in ("least_work_left", "random", "join_shortest_queue", "round_robin")}
    floor = np.floor(traces.series["job_size"] / max(PARK_RATES)).mean()
    assert floor < jct["least_work_left"] < 1000
    assert jct["random"] > 10 * jct["least_work_left"] and jct["round_robin"] > 5000
    assert jct["least_work_left"] < jct["join_shortest_queue"] < 1.5 * jct["least_work_left"]


# --------------------------------------------------------------------------- Gymnasium API
def test_the_single_copy_view_passes_gymnasiums_checker():
    traces = generate_park(4, 0, n_jobs=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        check_env(SPEC.single(traces, mode="train", seed=0, params=LbParams()),
                  skip_render_check=True)
    env = SPEC.single(traces, mode="test", params=LbParams())
    env.reset()
    _, reward, terminated, _, info = env.step(9)
    assert info["server"] == 9.0 and info["finish"] == info["arrival"] + info["size"] // 1.05
    assert reward == info["reward"] * 1e-3 and not terminated


def test_autoreset_reports_consistent_episodes_and_updates_the_sampler():
    traces = job_traces([[3, 0, 5], [1] * 9, [2, 2]], [[100, 50, 7], [30] * 9, [400, 1]])
    env = LbVecEnv(traces, 4, mode="train", seed=3, reward_scale=0.01, obs_scale=0.1)
    obs, info = env.reset()
    sums = np.zeros(4)
    ended = 0
    rng = np.random.default_rng(1)
    for _ in range(60):
        trace_before = info["trace"].copy()
        obs, rewards, done, _, info = env.step(rng.integers(0, 10, 4))
        sums += rewards
        if done.any():
            ep = info["episode"]
            assert np.array_equal(info["_episode"], done)
            np.testing.assert_array_equal(ep["trace"][done], trace_before[done])
            np.testing.assert_array_equal(ep["length"][done], traces.lengths[trace_before[done]])
            np.testing.assert_allclose(ep["return_transformed"][done], sums[done])
            np.testing.assert_allclose(ep["return"][done] * 0.01, sums[done])
            np.testing.assert_allclose(ep["mean_jct"][done],
                                       -ep["return"][done] / ep["length"][done])
            assert np.all(ep["mean_wait"][done] <= ep["mean_jct"][done])
            assert np.all(ep["return"][~done] == 0) and np.all(info["final_obs"][done] == 0)
            first = traces.series["job_size"][info["trace"][done], 0] * 0.1
            np.testing.assert_array_equal(obs[done, :10], 0)
            np.testing.assert_array_equal(obs[done, 10], first.astype(np.float32))
            sums[done] = 0
            ended += int(done.sum())
    assert ended >= 20 and env.sampler.episodes.sum() == ended
    with pytest.raises(ValueError, match=r"actions must lie in \[0, 9\]"):
        env.step(np.full(4, 10))


# --------------------------------------------------------------------------- spec, checks
def test_params_and_traces_are_checked_with_clear_errors():
    with pytest.raises(ValueError, match="env.reward_scale must be a positive number"):
        LbParams(reward_scale=0.0)
    with pytest.raises(ValueError, match="env.obs_scale"):
        LbParams(obs_scale=float("inf"))
    with pytest.raises(ValueError, match="at least 2 positive rates"):
        LbParams(service_rates=[1.0])
    wide = TraceSet("wide", series={"interarrival": [[1.0, 2.0, 7.5]],
                                    "job_size": [[3.0, 4.0, 0.5]]},
                    lengths=[2])  # padding past the length is never read
    assert LbVecEnv(wide, mode="test").reset()[0].tolist() == [[0.0] * 10 + [3.0]]
    fractional = job_traces([[1, 2.5]], [[3, 4]])
    with pytest.raises(ValueError, match="trace '0' has a non-integer interarrival"):
        LbVecEnv(fractional, mode="test")
    bandwidth = TraceSet("abr", series={"time": [[0.0, 1.0]], "bandwidth": [[1.0, 2.0]]})
    with pytest.raises(ValueError, match="needs channel.*interarrival, job_size.*CSV files"):
        SPEC.check_channels(bandwidth, LbParams(), "x")


def test_the_spec_scores_negative_mean_jct_between_random_and_lwl():
    episodes = {"mean_jct": np.array([5.25, 800.0]), "return": np.array([-21.0, -8e5]),
                "return_transformed": np.zeros(2), "mean_wait": np.ones(2),
                "max_queue": np.ones(2), "length": np.array([4, 1000])}
    columns = SPEC.episode_columns(episodes)
    np.testing.assert_array_equal(columns["score"], [-5.25, -800.0])
    anchors = SPEC.anchors(LbParams())
    assert (anchors.floor, anchors.ceiling) == ("random", "least_work_left")
    assert SPEC.builtin_test_sets("lb_mixed") == ["lb_mixed", "park"]
    assert SPEC.default_dataset(LbParams()) == "lb_mixed" and SPEC.algo_preset == "ppo_lb"


def test_the_lb_feature_set_holds_the_papers_features(compose_cfg):
    from plume.analysis.features import FEATURE_SETS, compute_features
    from plume.harness.config.schema import validate

    job = validate(compose_cfg("env=lb"))
    assert (job.analysis.feature_set, job.analysis.channel, job.analysis.k_range) == (
        "lb", "job_size", (3, 8))
    assert job.env.n_envs == 16 and job.algo_name == "ppo" and job.env_params == LbParams()
    paper = [("autocorrelation", {"lag": 3}), ("mean", {}), ("variation_coefficient", {}),
             ("fft_aggregated", {"aggtype": "centroid"}), ("truncated_mean", {"q": 0.05}),
             ("truncated_mean", {"q": 0.125}), ("mean_second_derivative_central", {}),
             ("change_quantiles", {"ql": 0.05, "qh": 0.95, "isabs": True, "f_agg": "mean"})]
    assert all(f in FEATURE_SETS["lb"] for f in paper)
    assert all(f in FEATURE_SETS["lb"] for f in FEATURE_SETS["tracebench"])
    features = compute_features(generate_lb_mixed(20, 0, n_jobs=100), "lb", channel="job_size")
    assert features.shape == (20, len(FEATURE_SETS["lb"]))


def test_a_csv_folder_is_a_dataset_the_harness_checks_and_replays(compose_cfg, tmp_path):
    from plume.harness.config.datasets import load_checked
    from plume.harness.config.schema import validate
    from plume.traces.lb import write_lb_csv

    source = generate_park(30, 1, n_jobs=25)
    for i, tid in enumerate(source.trace_ids):
        write_lb_csv(tmp_path / "jobs" / f"{tid.replace('/', '_')}.csv",
                     source.series["interarrival"][i], source.series["job_size"][i])
    job = validate(compose_cfg("env=lb", f"env.dataset={tmp_path / 'jobs'}",
                               "env.trace_format=csv"))
    assert job.env.test_sets == [str(tmp_path / "jobs")]
    train = load_checked(SPEC, job.env, job.env.dataset, "train", job.env_params)
    test = load_checked(SPEC, job.env, job.env.dataset, "test", job.env_params)
    assert len(train) + len(test) == 30 and set(train.lengths.tolist()) == {25}
    compare_with_reference(test, uniform, episodes=1)


def test_a_training_run_on_lb_writes_its_score(compose_cfg, tmp_path):
    from plume.harness.apps.train import run_job

    overrides = [o for o in TINY if not o.startswith("env.test_sets")] + [
        "env=lb", "env.test_sets=[park]", "sampler=uniform", "logger=none",
        "algo.n_minibatches=4", "algo.n_epochs=2", "analysis.restarts=2",
        "analysis.selection.n_trees=3", "analysis.selection.gmm_restarts=2"]
    run_job(compose_cfg(*overrides), tmp_path)
    frame = pd.read_parquet(tmp_path / "eval.parquet")
    assert set(frame["test_set"]) == {"park"} and len(frame) == 250 * frame["progress"].nunique()
    np.testing.assert_allclose(frame["score"], -frame["mean_jct"])
    np.testing.assert_allclose(frame["mean_jct"], -frame["return"] / frame["length"])
    assert set(frame["length"]) == {650}
    score = json.loads((tmp_path / "score.json").read_text())
    assert score["score"]["name"] == "neg_mean_jct"
    anchors = score["normalisation"]["test_sets"]["park"]
    assert anchors["floor"] < -5000 < -1000 < anchors["ceiling"]
    assert json.loads((tmp_path / "status.json").read_text())["state"] == "completed"
