"""env=cc: the fluid Aurora simulator by hand and against the packet-level reference, the
classic controllers, the Gymnasium API and the harness end to end."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from gymnasium.utils.env_checker import check_env

from plume.envs.cc import CcParams
from plume.envs.cc.controllers import Aimd, ConstantRate, Cubic, Oracle
from plume.envs.cc.packet import Capacity, PacketLink
from plume.envs.cc.sim import CcEnv, CcVecEnv, LinkTables, rate_action
from plume.envs.registry import get_env
from plume.harness.apps.train import run_job
from plume.harness.config.schema import ConfigError, validate
from plume.harness.training.evaluation import evaluate_policy
from plume.sampling.base import UniformSampler
from plume.traces.cc import load_cc_dataset
from plume.traces.traceset import TraceSet
from tests.conftest import TINY


def links(*rows, name="links") -> TraceSet:
    """Constant links from (bandwidth pkt/s, one-way latency s, queue pkts, loss) rows."""
    bw, latency, queue, loss = (np.array(c, dtype=float) for c in zip(*rows))
    return TraceSet(name=name, constants={"bandwidth": bw, "latency": latency, "queue": queue,
                                          "loss": loss})


def series_link(time, bandwidth, period, latency=0.05, queue=1000.0, loss=0.0) -> TraceSet:
    return TraceSet(name="series", series={"time": [time], "bandwidth": [bandwidth]},
                    constants={"latency": [latency], "queue": [queue], "loss": [loss],
                               "period": [period]})


def fixed_start(share: float, **kwargs) -> dict:
    """Env arguments that start every episode at ``share`` x the bandwidth."""
    return {"init_rate_low": share, "init_rate_high": share, **kwargs}


class RecordingSampler(UniformSampler):
    """The uniform sampler, remembering every update call."""

    def __init__(self, n, rng):
        super().__init__(n, rng)
        self.calls = []

    def update(self, trace_index, rewards, **learner_stats):
        super().update(trace_index, rewards, **learner_stats)
        self.calls.append((trace_index, np.array(rewards)))


# --------------------------------------------------------------------------- by hand
def test_hand_computed_episode_on_a_constant_link():
    """bw 100 pkt/s, D 50 ms, K 5 (backlog <= 4), no loss, 6 sub-steps, start at 90 pkt/s.

    Warm-up: 2 MIs of 3D = 0.15 s at 90 < 100 pkt/s leave the queue empty (RTT 0.1 s).
    MI 1 (0.15 s) at 180 pkt/s: the backlog grows 80 pkt/s, reaches 4 at 0.05 s, then 8 of the
    27 packets sent overflow; delivered 15 -> 100 pkt/s; queueing delay rises 0 -> 40 ms in
    0.05 s then stays: mean 5/150 s, RTT 0.13333; halves 26.667 ms and 40 ms of queueing.
    MI 2 (0.5 x 0.13333 s) at 90 pkt/s: the backlog drains 4 -> 3.3333; RTT 0.13667.
    """
    env = CcVecEnv(links((100, 0.05, 5, 0.0)), mode="test", substeps=6, history=2,
                   episode_mis=2, **fixed_start(0.9))
    obs, info = env.reset()
    np.testing.assert_array_equal(obs, [[0, 1, 1, 0, 1, 1]])
    assert env.rate[0] == 90 and env.last_rtt[0] == pytest.approx(0.1)
    assert env.mi_duration[0] == pytest.approx(0.15) and env.episode_started[0]

    obs, reward, terminated, truncated, info = env.step(np.array([[40.0]]))  # a' = 1: x 2
    step = env.last_step()
    assert step["rate"][0] == pytest.approx(180.0)
    assert step["throughput"][0] == pytest.approx(100.0)
    assert step["loss"][0] == pytest.approx(8 / 27)
    assert step["latency"][0] == pytest.approx(0.1 + 1 / 30)
    assert step["inflation"][0] == pytest.approx((0.04 - 0.08 / 3) / 0.15)
    reward_1 = 0.001 * (1000 - 1000 * (0.1 + 1 / 30) - 2000 * 8 / 27)
    assert reward[0] == pytest.approx(reward_1)
    np.testing.assert_allclose(obs, [[0, 1, 1, 4 / 45, 1, 1.8]], rtol=1e-6)
    assert not terminated[0] and not truncated[0] and not env.episode_started[0]
    assert env.mi_duration[0] == pytest.approx(0.5 * (0.1 + 1 / 30))

    obs, reward, terminated, truncated, info = env.step(np.array([[-40.0]]))  # / (1 + 1)
    rtt_2 = 0.1 + (0.04 + 0.1 / 3) / 2
    assert env.last_step()["rate"][0] == pytest.approx(90.0)
    np.testing.assert_allclose(info["final_obs"], [[4 / 45, 1, 1.8, -0.05,
                                                    rtt_2 / (0.1 + 1 / 30), 0.9]], rtol=1e-6)
    reward_2 = 0.001 * (1000 - 1000 * rtt_2)
    assert reward[0] == pytest.approx(reward_2)
    assert truncated[0] and not terminated[0]  # a time limit, not a terminal state
    episode = info["episode"]
    assert episode["return"][0] == pytest.approx(reward_1 + reward_2)
    assert episode["return_transformed"][0] == pytest.approx(reward_1 + reward_2)
    assert episode["length"][0] == 2 and episode["l"][0] == 2
    assert episode["throughput"][0] == pytest.approx(100.0)
    assert episode["latency"][0] == pytest.approx((0.1 + 1 / 30 + rtt_2) / 2)
    assert episode["loss"][0] == pytest.approx(4 / 27)
    assert episode["utilisation"][0] == pytest.approx(1.0)
    np.testing.assert_array_equal(obs, [[0, 1, 1, 0, 1, 1]])  # the next episode's first
    assert env.episode_started[0] and env.rate[0] == 90


def test_warm_up_builds_the_queue_before_the_first_observation():
    """Start at 150 pkt/s on bw 100, K 5: in the first 3D = 0.15 s the backlog grows 50 pkt/s
    and is full (4) from 0.08 s; the second warm-up MI holds it and drops 1/3 of its
    packets at RTT 2D + 40 ms. The warm-up is not in the history."""
    env = CcVecEnv(links((100, 0.05, 5, 0.0)), mode="test", **fixed_start(1.5))
    obs, _ = env.reset()
    assert np.all(obs.reshape(-1, 3) == [0, 1, 1])
    assert env.last_loss[0] == pytest.approx(1 / 3)
    assert env.last_rtt[0] == pytest.approx(0.14)
    assert env.last_throughput[0] == pytest.approx(100.0)
    env.step(np.zeros((1, 1)))
    assert env.last_rtt[0] == pytest.approx(0.14)  # still full at the same rate


def test_bandwidth_changes_inside_a_sub_step_are_served_exactly():
    """bw 100 pkt/s on [0, 0.36), 300 on [0.36, 0.7), looping. After the 0.3 s warm-up at
    90 pkt/s the queue is empty; MI 1 (0.3 -> 0.45 s) at 1000 pkt/s is served 100 x 0.06 +
    300 x 0.09 = 33 packets (the change falls inside the third of 6 sub-steps). Its latency
    is checked against the packet reference's independent inverse of C."""
    traces = series_link([0.0, 0.36], [100.0, 300.0], period=0.7)
    env = CcVecEnv(traces, mode="test", substeps=6, **fixed_start(0.9))
    env.reset()
    env.step(rate_action(env.rate, [1000.0])[:, None])
    assert env.rate[0] == pytest.approx(1000.0)
    assert env.last_throughput[0] == pytest.approx(33 / 0.15)
    capacity = Capacity([100.0, 300.0], [0.0, 0.36], 0.7)
    times = 0.3 + 0.025 * np.arange(7)
    backlog = 25.0 * np.arange(7) - np.array([capacity.at(t) - capacity.at(0.3) for t in times])
    delay = np.array([capacity.time_of(capacity.at(t) + q) - t for t, q in zip(times, backlog)])
    assert delay[-1] == pytest.approx(0.63)  # 75 pkts to 0.7 s, 36 to 1.06 s, 6 more by 1.08
    expected = 0.1 + (delay.sum() - (delay[0] + delay[-1]) / 2) / 6
    assert env.last_rtt[0] == pytest.approx(expected)
    assert env.link_bandwidth[0] == 300.0  # now at 0.45 s


def test_rate_update_and_clip_follow_aurora():
    env = CcVecEnv(links((500, 0.05, 10, 0.0)).subset([0, 0, 0, 0]), mode="test",
                   **fixed_start(0.8))
    env.reset()
    env.step(np.array([[4.0], [-4.0], [1e12], [-1e12]]))
    np.testing.assert_allclose(env.rate, [400 * 1.1, 400 / 1.1, 1000, 40])
    np.testing.assert_allclose(rate_action([100.0, 100.0], [150.0, 50.0]), [20.0, -40.0])


# --------------------------------------------------------------------------- fidelity
def _ramps(n: int) -> np.ndarray:
    """Rate ramps: 20 MIs each of +10 %, -10 %, +20 %, -15 % per MI, repeated."""
    return np.array([[4.0, -4.0, 8.0, -6.0][(i // 20) % 4] for i in range(n)])


def _fluid_means(traces: TraceSet, actions: np.ndarray):
    """Mean per-MI throughput and RTT of the fluid model, starting at 0.9 x bandwidth."""
    env = CcVecEnv(traces, mode="test", episode_mis=len(actions), **fixed_start(0.9))
    env.reset()
    thr, rtt = [], []
    for a in actions:
        env.step(np.full((len(traces), 1), a))
        thr.append(env.last_throughput.copy())
        rtt.append(env.last_rtt.copy())
    return np.mean(thr, axis=0), np.mean(rtt, axis=0)


def test_fluid_model_matches_the_packet_level_reference_within_3_percent():
    constant = links((300, 0.1, 20, 0.0), (150, 0.05, 5, 0.01), (450, 0.25, 40, 0.02),
                     (120, 0.2, 2, 0.0), (800, 0.03, 60, 0.005), (60, 0.4, 10, 0.0))
    series = load_cc_dataset("cc_series", "test")
    series = series.subset([i for i, k in enumerate(series.labels) if k in ("stable", "step")
                            ][::40])
    actions = _ramps(400)
    for traces in (constant, series):
        n = len(traces)
        c = traces.constants
        if traces.series:
            caps = [Capacity(list(traces.bandwidth[i, :traces.lengths[i]]),
                             list(traces.time[i, :traces.lengths[i]]), c["period"][i])
                    for i in range(n)]
        else:
            caps = [Capacity(b) for b in c["bandwidth"]]
        fluid_thr, fluid_rtt = _fluid_means(traces, actions)
        for i, cap in enumerate(caps):
            packet = PacketLink(cap, c["latency"][i], c["queue"][i], c["loss"][i],
                                rate=0.9 * cap.bandwidth_at(0.0), seed=i)
            packet.reset()
            mis = [packet.step(a) for a in actions]
            thr = np.mean([mi.throughput for mi in mis])
            rtt = np.mean([mi.latency for mi in mis])
            assert fluid_thr[i] == pytest.approx(thr, rel=0.03), (traces.name, i)
            assert fluid_rtt[i] == pytest.approx(rtt, rel=0.03), (traces.name, i)
    assert traces.series and len(traces) >= 2  # a time-varying link was among them


def test_packet_reference_reproduces_the_hand_computed_warm_up():
    """The packet sim on the warm-up link of the hand test: full backlog of 4 packets."""
    packet = PacketLink(Capacity(100.0), 0.05, 5, 0.0, rate=150.0)
    packet.reset()
    assert packet.backlog(packet.now) == pytest.approx(4.0, abs=1.0)
    mi = packet.step(0.0)
    assert mi.latency == pytest.approx(0.14, abs=0.011)  # 2D + 3..4 packets queued
    assert mi.loss == pytest.approx(1 / 3, abs=0.1)


# --------------------------------------------------------------------------- controllers
def _play(env: CcVecEnv, controller, steps: int) -> dict[str, np.ndarray]:
    """Copy 0's rate, loss and MI duration of every MI, and the window decided before it."""
    policy = controller.bind(env)
    obs, _ = env.reset()
    out = {"rate": [], "loss": [], "duration": [], "window": []}
    for _ in range(steps):
        action = policy(obs)
        out["window"].append(policy.window[0] if hasattr(policy, "window") else np.nan)
        obs, *_ = env.step(action)
        step = env.last_step()
        for key in ("rate", "loss", "duration"):
            out[key].append(step[key][0])
    return {key: np.array(values) for key, values in out.items()}


def test_oracle_beats_a_constant_rate_at_half_the_bandwidth():
    traces = links((300, 0.08, 20, 0.01))
    spec = get_env("cc")
    oracle = evaluate_policy(Oracle(), spec, {"link": traces})
    half = evaluate_policy(ConstantRate(150.0), spec, {"link": traces})
    assert oracle["score"][0] > half["score"][0]
    assert oracle["utilisation"][0] > 0.98 and half["utilisation"][0] < 0.51
    np.testing.assert_allclose(_play(CcVecEnv(traces, mode="test"), Oracle(), 5)["rate"], 300)


@pytest.mark.parametrize("controller, factor", [(Aimd(), 0.5), (Cubic(), 0.7)])
def test_aimd_and_cubic_cut_their_rate_after_a_loss(controller, factor):
    """No random loss: slow start overshoots 300 pkt/s, the queue overflows, the window is
    cut by the rule's factor right after, and the rate falls with it."""
    env = CcVecEnv(links((300, 0.05, 10, 0.0)), mode="test", **fixed_start(0.5))
    run = _play(env, controller, 120)
    window, rate, loss = run["window"], run["rate"], run["loss"]
    cuts = np.flatnonzero(window[1:] < window[:-1])
    assert cuts.size, "the controller never cut its window"
    cut = cuts[0]  # the decision before MI cut + 1 lowered the window
    assert window[cut + 1] == pytest.approx(factor * window[cut])
    assert loss[cut] > 0  # the MI before the cut overflowed
    assert rate[cut + 1] < factor * rate[cut] * 1.05
    assert rate[: cut + 1].max() > 300.0  # slow start overshot the link


def test_window_rules_cut_once_a_whole_packet_is_lost_on_a_random_loss_link():
    """Loss 0.05 %, no congestion (bw 1000 = the rate clip): every MI reports loss 5e-4,
    yet AIMD cuts only once the expected lost packets add up to one."""
    env = CcVecEnv(links((1000, 0.05, 50, 0.0005)), mode="test", **fixed_start(0.1))
    run = _play(env, Aimd(), 200)
    np.testing.assert_allclose(run["loss"], 0.0005)  # the expected loss of every MI
    lost = np.cumsum(run["loss"] * run["rate"] * run["duration"])
    crossed = int(np.argmax(lost >= 1.0))
    assert lost[-1] >= 1.0 and crossed > 10
    window = run["window"]
    assert np.all(window[1: crossed + 1] >= window[:crossed])  # no cut before
    assert window[crossed + 1] == pytest.approx(0.5 * window[crossed])


def test_every_controller_runs_through_the_evaluator_on_both_datasets():
    spec = get_env("cc")
    params = CcParams(episode_mis=50)
    for dataset in ("aurora", "cc_series"):
        traces = spec.load_builtin(dataset, "test").subset(range(0, 300, 30))
        scores = {name: evaluate_policy(build(params), spec, {dataset: traces}, params)
                  for name, build in spec.controllers.items()}
        for frame in scores.values():
            assert np.all(frame["length"] == 50) and np.isfinite(frame["score"]).all()
        assert scores["oracle"]["score"].mean() > scores["constant_rate"]["score"].mean()


# --------------------------------------------------------------------------- API
def test_single_copy_view_passes_the_env_checker():
    for traces in (load_cc_dataset("aurora", "train").subset(range(3)),
                   load_cc_dataset("cc_series", "train").subset([0, 700, 999])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # Aurora's unnormalised Box spaces
            check_env(CcEnv(traces, mode="train", seed=0), skip_render_check=True)
    env = CcEnv(traces, mode="test", history=25, episode_mis=3)
    obs, info = env.reset()
    assert obs.shape == (75,) and info == {"trace": 0}
    for _ in range(3):
        obs, reward, terminated, truncated, info = env.step(np.array([1.0], np.float32))
        assert reward == pytest.approx(info["reward"]) and obs.shape == (75,)
    assert truncated and not terminated and info["episode"]["length"] == 3
    assert set(info) >= {"rate", "throughput", "latency", "loss", "reward", "episode"}


def test_train_mode_autoreset_episode_fields_and_sampler_updates():
    traces = load_cc_dataset("cc_series", "train").subset(range(0, 1000, 100))
    sampler = RecordingSampler(len(traces), np.random.default_rng(0))
    n, length = 6, 7
    env = CcVecEnv(traces, n, sampler, mode="train", seed=3, episode_mis=length,
                   reward_scale=2.0)
    obs, _ = env.reset()
    shares = env.rate / env.link_bandwidth  # above 1.5 only where the 40 pkt/s floor binds
    assert np.all((shares >= 0.3 - 1e-12) & ((shares <= 1.5 + 1e-12) | (env.rate == 40)))
    assert np.ptp(shares) > 0.1
    rng = np.random.default_rng(1)
    raw, finished = [[] for _ in range(n)], []
    for t in range(3 * length):
        obs, reward, terminated, truncated, info = env.step(rng.normal(0, 5, (n, 1)))
        step = env.last_step()
        np.testing.assert_allclose(reward, 2.0 * step["reward"])
        assert not terminated.any() and obs.dtype == np.float32
        assert env.single_observation_space.contains(obs[0])
        for c in range(n):
            raw[c].append(step["reward"][c])
        assert truncated.all() == ((t + 1) % length == 0) and truncated.all() == truncated.any()
        np.testing.assert_array_equal(env.episode_started, truncated)
        if truncated.any():
            ep = info["episode"]
            for c in range(n):
                assert ep["return"][c] == pytest.approx(sum(raw[c]))
                assert ep["return_transformed"][c] == pytest.approx(2 * sum(raw[c]))
                assert ep["r"][c] == ep["return_transformed"][c] and ep["l"][c] == length
                finished.append((int(ep["trace"][c]), 2 * np.array(raw[c])))
                raw[c] = []
            assert np.all(obs.reshape(n, -1, 3) == [0, 1, 1])
            assert info["_final_obs"].all() and (info["final_obs"][:, -3:] != [0, 1, 1]).any()
            assert np.all((ep["utilisation"] > 0) & (ep["utilisation"] <= 1 + 1e-9))
    assert len(sampler.calls) == len(finished) == 3 * n
    for (trace, rewards), (expected_trace, expected) in zip(sampler.calls, finished):
        assert trace == expected_trace
        np.testing.assert_allclose(rewards, expected)


def test_test_mode_is_deterministic_and_plays_trace_i_on_copy_i():
    traces = load_cc_dataset("aurora", "test").subset(range(20))
    runs = []
    for seed in (0, 1):
        env = CcVecEnv(traces, mode="test", seed=seed, episode_mis=5)
        _, info = env.reset()
        np.testing.assert_array_equal(info["trace"], np.arange(20))
        share = 0.3 + 1.2 * LinkTables.shared(traces).test_share
        np.testing.assert_allclose(
            env.rate, np.clip(share * traces.constants["bandwidth"], 40.0, 1000.0))
        for _ in range(5):
            *_, info = env.step(np.ones((20, 1)))
        runs.append(info["episode"]["return"])
    np.testing.assert_array_equal(*runs)
    # A trace keeps its initial rate in another subset or order.
    again = CcVecEnv(traces.subset([5, 0]), mode="test")
    again.reset()
    full = CcVecEnv(traces, mode="test")
    full.reset()
    np.testing.assert_array_equal(again.rate, full.rate[[5, 0]])


def test_train_mode_seeding_and_series_start_offsets():
    traces = load_cc_dataset("cc_series", "train").subset(range(10))
    a, b = (CcVecEnv(traces, 32, mode="train", seed=5) for _ in range(2))
    np.testing.assert_array_equal(a.reset()[0], b.reset()[0])
    a.step(np.zeros((32, 1)))
    b.step(np.zeros((32, 1)))
    np.testing.assert_array_equal(a.rate, b.rate)
    np.testing.assert_array_equal(a.last_rtt, b.last_rtt)
    other = CcVecEnv(traces, 32, mode="train", seed=6)
    other.reset()
    assert not np.array_equal(other.rate, a.rate)
    # Random start samples: copies on the same (jittered) trace see different bandwidths.
    frame = pd.DataFrame({"trace": a.current_traces, "bandwidth": a.link_bandwidth})
    assert frame.groupby("trace")["bandwidth"].nunique().max() > 1


def test_bad_input_raises():
    good = links((100, 0.05, 5, 0.0))
    with pytest.raises(ValueError, match="needs a one-way latency > 0"):
        CcVecEnv(links((100, 0.0, 5, 0.0)), mode="test")
    with pytest.raises(ValueError, match="no queue channel"):
        CcVecEnv(TraceSet(name="x", constants={"bandwidth": [1.0], "latency": [0.1],
                                               "loss": [0.0]}), mode="test")
    with pytest.raises(ValueError, match="'latency' must be a per-trace constant"):
        CcVecEnv(TraceSet(name="x", series={"time": [[0, 1]], "bandwidth": [[1, 2]],
                                            "latency": [[0.1, 0.1]]},
                          constants={"queue": [5.0], "loss": [0.0]}), mode="test")
    with pytest.raises(ValueError, match="substeps must be even"):
        CcVecEnv(good, mode="test", substeps=5)
    with pytest.raises(ValueError, match="min_rate 500 exceeds"):
        CcVecEnv(good, mode="test", min_rate=500, max_rate=100)
    env = CcVecEnv(good, mode="test")
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(np.zeros((1, 1)))
    env.reset()
    with pytest.raises(ValueError, match="actions must have shape"):
        env.step(np.zeros((2, 1)))
    with pytest.raises(ValueError, match="finite"):
        env.step(np.array([[np.nan]]))
    with pytest.raises(ValueError, match="env.substeps must be even"):
        CcParams(substeps=3)
    with pytest.raises(ValueError, match="env.init_rate_low"):
        CcParams(init_rate_low=2.0)


# --------------------------------------------------------------------------- harness
CC_TINY = [o for o in TINY if not o.startswith("env.test_sets")] + [
    "env=cc", "logger=none", "sampler=uniform"]


def test_the_config_composes_with_the_aurora_preset_and_checks_its_keys(compose_cfg):
    job = validate(compose_cfg("env=cc"))
    assert job.env.n_envs == 16 and job.env.test_sets == ["aurora"]
    assert job.algo_name == "a2c" and job.algo.gamma == 0.975
    assert (job.analysis.feature_set, job.analysis.k_range, job.analysis.select) == (
        "constants", (4, 9), False)
    with pytest.raises(ConfigError, match="env.substeps must be even"):
        validate(compose_cfg("env=cc", "env.substeps=3"))
    with pytest.raises(ConfigError, match="env.nope"):
        validate(compose_cfg("env=cc", "+env.nope=1"))


def test_a_training_run_writes_eval_rows_with_the_reward_per_mi(compose_cfg, tmp_path):
    import json

    run_job(compose_cfg(*CC_TINY), tmp_path)
    frame = pd.read_parquet(tmp_path / "eval.parquet")
    assert set(frame["test_set"]) == {"aurora"} and len(frame) == 300 * 3
    np.testing.assert_allclose(frame["score"], frame["return"] / frame["length"])
    assert np.all(frame["length"] == 400)
    assert frame[["throughput", "latency", "loss", "utilisation"]].notna().all().all()
    score = json.loads((tmp_path / "score.json").read_text())
    assert score["score"]["name"] == "reward_per_mi"
    anchors = score["normalisation"]["test_sets"]["aurora"]
    assert anchors["floor"] < anchors["ceiling"]
