"""TraceBench batched environment: hand-computed dynamics, a scalar reference, Gymnasium API."""

from __future__ import annotations

import math
from collections import deque

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from plume.envs import TraceBenchEnv, TraceBenchVecEnv, transform_reward
from plume.envs.replay import PayloadTables
from plume.sampling.base import SequentialSampler, TraceSampler, UniformSampler
from plume.traces.traceset import TraceSet

SPAN = transform_reward(6.0) + 2.0  # 3.4545: the observation's reward normaliser


# --------------------------------------------------------------------------- helpers
def make_traces(times, bandwidths, sizes, name="tiny") -> TraceSet:
    """A TraceSet from ragged lists; ``sizes`` is (n, n_chunks, 3)."""
    n = len(times)
    width = max(len(t) for t in times)
    time = np.zeros((n, width))
    bw = np.zeros((n, width))
    for i, (t, b) in enumerate(zip(times, bandwidths)):
        time[i, : len(t)] = t
        time[i, len(t):] = t[-1] + 1 + np.arange(width - len(t))  # padding, ignored
        bw[i, : len(b)] = b
    return TraceSet(
        name=name, series={"time": time, "bandwidth": bw}, lengths=[len(t) for t in times],
        chunks={"video_sizes": np.asarray(sizes, dtype=float)},
    )


def random_traces(rng, n, n_chunks, min_len=2, max_len=12, grid=False) -> TraceSet:
    """Random ragged traces with some dead (zero-throughput) slots. ``grid=True`` uses
    half-second slots, throughputs in {0, 0.25, ..., 2} and sizes in {0.5, 1, ..., 3} so that
    downloads and sleeps often end exactly on slot and period boundaries."""
    times, bws = [], []
    for _ in range(n):
        length = int(rng.integers(min_len, max_len + 1))
        if grid:
            times.append(0.5 * np.arange(length))
            bw = 0.25 * rng.integers(0, 9, length).astype(float)
        else:
            times.append(np.concatenate([[0.0], np.cumsum(rng.uniform(0.2, 2.0, length - 1))]))
            bw = rng.uniform(0.3, 8.0, length)
            bw[rng.random(length) < 0.15] = 0.0  # some dead slots
        bw[rng.integers(length)] = 2.0  # never dead throughout
        bws.append(bw)
    if grid:
        sizes = 0.5 * rng.integers(1, 7, (n, n_chunks, 3)).astype(float)
    else:
        sizes = np.array([1.0, 3.0, 6.0]) * rng.uniform(0.95, 1.05, (n, n_chunks, 3))
    return make_traces(times, bws, sizes, name="random")


class ScalarTraceBench:
    """Straightforward per-copy simulator in the reference's loop style (ToyABREnv + wrapper),
    with the sleep drained across slots (``drain="full"``) or the reference's current-slot-only
    drain (``drain="current_slot"``). No noise (test mode)."""

    def __init__(self, traces: TraceSet, trace: int, start: int = 0, drain: str = "full",
                 max_buffer=15.0, chunk_seconds=2.0, quality_weight=1.0, rebuf_weight=6.0,
                 history_len=10):
        self.trace = trace
        length = int(traces.lengths[trace])
        self.time = traces.time[trace, :length].tolist()
        self.bw = traces.bandwidth[trace, :length].tolist()
        self.sizes = traces.chunks["video_sizes"][trace]  # numpy, for obs(); steps use floats
        self.drain, self.max_buffer, self.chunk_seconds = drain, max_buffer, chunk_seconds
        self.qw, self.rw = quality_weight, rebuf_weight
        self.ptr = start
        self.left = self.slot_len(start)
        self.vidx = start
        self.buffer = None
        self.hist = deque([np.zeros(5)] * history_len, maxlen=history_len)

    def slot_len(self, j):
        return 1.0 if j == len(self.time) - 1 else self.time[j + 1] - self.time[j]

    def advance(self):
        self.ptr = (self.ptr + 1) % len(self.time)
        self.left = self.slot_len(self.ptr)

    def obs(self):
        nxt = np.clip(self.sizes[self.vidx] / 6.0, 0, 1)
        return np.concatenate([np.concatenate(list(self.hist)), nxt]).astype(np.float32)

    def step(self, action):
        size = float(self.sizes[self.vidx, action])
        remaining, delay = size, 0.0
        while remaining > 1e-8:  # the reference's tolerance
            if self.left <= 0:
                self.advance()
            tp = self.bw[self.ptr]
            used = self.left if tp == 0 else min(self.left, remaining / tp)
            remaining -= tp * used
            self.left -= used
            delay += used
        if self.buffer is None:
            stall, self.buffer = 0.0, 0.0
        else:
            stall = min(max(delay - self.buffer, 0.0), 100.0)
        self.buffer = max(self.buffer - delay, 0.0) + self.chunk_seconds
        sleep = 0.0
        if self.buffer > self.max_buffer:
            sleep = self.buffer - self.max_buffer
            self.left -= sleep
            if self.drain == "full":
                while self.left < 0:
                    carry = self.left
                    self.advance()
                    self.left += carry
            self.buffer = self.max_buffer
        quality = [1.0, 3.0, 6.0][action]
        raw = self.qw * quality - self.rw * stall
        x = raw - 1.0
        rt = ((x > 0) - (x < 0)) * (math.sqrt(abs(x) + 1) - 1 + 0.001 * x)
        row = [quality / 6, size / 6, delay / 20, self.buffer / self.max_buffer, (rt + 2) / SPAN]
        self.hist.append(np.clip(row, 0, 1))
        self.vidx += 1
        done = self.vidx + 1 == len(self.sizes)
        return {"delay": delay, "stall": stall, "buffer": self.buffer, "raw": raw, "rt": rt,
                "done": done, "sleep": sleep}


class RecordingSampler(TraceSampler):
    """Uniform draws that remember every update call."""

    name = "recording"

    def __init__(self, n, rng):
        super().__init__(n, rng)
        self.calls = []

    def sample(self):
        return int(self.rng.integers(self.n_traces))

    def update(self, trace_index, rewards, **learner_stats):
        super().update(trace_index, rewards, **learner_stats)
        self.calls.append((trace_index, np.array(rewards), learner_stats))

    def probabilities(self):
        return np.full(self.n_traces, 1.0 / self.n_traces)


@pytest.fixture
def tiny():
    """Trace 0: 8 slots (0.5 s, last 1 s; period 4.5 s), two-level throughput.
    Trace 1: 3 slots of 1 s (period 3 s, 3.5 units per period). Every chunk is [1, 2, 4]."""
    return make_traces(
        times=[[0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5], [0, 1, 2]],
        bandwidths=[[4, 4, 4, 4, 2, 1, 2, 8], [1, 0.5, 2]],
        sizes=np.tile([1.0, 2.0, 4.0], (2, 12, 1)),
    )


# --------------------------------------------------------------------------- reward
def test_transform_reward_reference_values():
    assert transform_reward(1.0) == 0.0
    assert round(transform_reward(3.0), 4) == 0.7341
    assert round(transform_reward(6.0), 4) == 1.4545
    assert round(transform_reward(0.0), 4) == -0.4132
    assert isinstance(transform_reward(3), float)
    x = np.array([0.5, 2.0, 7.0])
    # Not odd: f(1 + x) + f(1 - x) = 0.002 |x| (the sign multiplies the linear term too).
    np.testing.assert_allclose(transform_reward(1 + x) + transform_reward(1 - x), 0.002 * x)
    np.testing.assert_allclose(transform_reward(np.array([1.0, 6.0])), [0.0, 1.4544897428])


# --------------------------------------------------------------------------- hand-computed
def test_hand_computed_episode(tiny):
    env = TraceBenchVecEnv(tiny, mode="test")
    assert env.num_envs == 2
    obs, info = env.reset()
    np.testing.assert_array_equal(info["trace"], [0, 1])
    assert obs.shape == (2, 53) and obs.dtype == np.float32
    assert not obs[:, :50].any()  # history all zeros at reset
    np.testing.assert_allclose(obs[:, 50:], [[1 / 6, 2 / 6, 4 / 6]] * 2, rtol=1e-6)

    actions = np.array([[0, 2], [0, 2]] + [[0, 0]] * 7 + [[2, 0], [1, 0]])
    # Copy 0: eight 1-unit chunks at throughput 4 (0.25 s each), then one at throughput 2
    # (0.5 s, ending exactly at the 2.5 s slot boundary): the buffer reaches 15.75 and the
    # player sleeps 0.75 s, draining slot 5 entirely and 0.25 s of slot 6 (t = 3.25). The
    # 4-unit chunk then takes 0.25 s at 2 + 3.5 / 8 = 0.4375 s at 8; its sleep of 1.3125 s
    # wraps the trace (t = 5.25, 0.75 into the second period); the last chunk takes
    # 0.25 + 0.25 s at throughput 4.
    exp0 = {
        "delay": [0.25] * 8 + [0.5, 0.6875, 0.5],
        "stall": [0.0] * 11,
        "buffer": [2.0, 3.75, 5.5, 7.25, 9.0, 10.75, 12.5, 14.25, 15.0, 15.0, 15.0],
        "sleep": [0.0] * 8 + [0.75, 1.3125, 1.5],
        "time": [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 3.25, 5.25, 7.25],
        "raw": [1.0] * 9 + [6.0, 3.0],
    }
    # Copy 1: the first 4-unit chunk crosses the end of the trace (1 + 0.5 + 2 units in 3 s,
    # then 0.5 s into the second period): 3.5 s but no stall on the first chunk. The second
    # one wraps again (3.5 s against a 2 s buffer: 1.5 s stall, reward 6 - 9 = -3).
    exp1 = {
        "delay": [3.5, 3.5, 1.25, 0.5, 0.75, 1.5, 0.5, 0.5, 1.0, 1.25, 0.5],
        "stall": [0.0, 1.5] + [0.0] * 9,
        "buffer": [2.0, 2.0, 2.75, 4.25, 5.5, 6.0, 7.5, 9.0, 10.0, 10.75, 12.25],
        "sleep": [0.0] * 11,
        "time": [3.5, 7.0, 8.25, 8.75, 9.5, 11.0, 11.5, 12.0, 13.0, 14.25, 14.75],
        "raw": [6.0, -3.0] + [1.0] * 9,
    }
    rt_of = {1.0: 0.0, 3.0: math.sqrt(3.0) - 1.0 + 0.002, 6.0: math.sqrt(6.0) - 1.0 + 0.005,
             -3.0: -(math.sqrt(5.0) - 1.0 - 0.004)}
    for t, act in enumerate(actions):
        obs, rew, term, trunc, info = env.step(act)
        last = env.last_step()
        for c, exp in enumerate([exp0, exp1]):
            assert last["delay"][c] == pytest.approx(exp["delay"][t], abs=1e-12), (t, c)
            assert last["stall"][c] == pytest.approx(exp["stall"][t], abs=1e-12), (t, c)
            assert last["buffer"][c] == pytest.approx(exp["buffer"][t], abs=1e-12), (t, c)
            assert last["sleep"][c] == pytest.approx(exp["sleep"][t], abs=1e-12), (t, c)
            assert last["reward"][c] == pytest.approx(exp["raw"][t], abs=1e-12), (t, c)
            assert rew[c] == pytest.approx(rt_of[exp["raw"][t]], abs=1e-12), (t, c)
            if t < 10:  # the last step autoresets the position
                assert env.trace_time[c] == pytest.approx(exp["time"][t], abs=1e-12), (t, c)
        assert not trunc.any()
        if t == 2:  # observation after three steps: oldest row first
            rows = obs[1, :50].reshape(10, 5)
            assert not rows[:7].any()
            np.testing.assert_allclose(rows[7], [1, 4 / 6, 3.5 / 20, 2 / 15, 1.0], rtol=1e-6)
            np.testing.assert_allclose(
                rows[8], [1, 4 / 6, 3.5 / 20, 2 / 15, (2 + rt_of[-3.0]) / SPAN], rtol=1e-6)
            np.testing.assert_allclose(
                rows[9], [1 / 6, 1 / 6, 1.25 / 20, 2.75 / 15, 2 / SPAN], rtol=1e-6)
            np.testing.assert_allclose(obs[1, 50:], [1 / 6, 2 / 6, 4 / 6], rtol=1e-6)
            assert round(float(rows[8, 4]), 4) == round((2 - 1.232068) / 3.4544897, 4)
        if t < 10:
            assert not term.any() and "episode" not in info and "final_obs" not in info
    # Both copies end after 11 = n_chunks - 1 steps, and autoreset in the same step.
    assert term.all()
    np.testing.assert_array_equal(info["_episode"], [True, True])
    np.testing.assert_array_equal(info["_final_obs"], [True, True])
    ep = info["episode"]
    np.testing.assert_array_equal(ep["length"], [11, 11])
    np.testing.assert_array_equal(ep["trace"], [0, 1])
    np.testing.assert_allclose(ep["return"], [18.0, 12.0])
    np.testing.assert_allclose(ep["quality"], [18.0, 21.0])
    np.testing.assert_allclose(ep["stall"], [0.0, 1.5])
    np.testing.assert_allclose(
        ep["return_transformed"], [rt_of[6.0] + rt_of[3.0], rt_of[6.0] + rt_of[-3.0]])
    final = info["final_obs"]
    np.testing.assert_allclose(
        final[0, 45:50], [3 / 6, 2 / 6, 0.5 / 20, 1.0, (rt_of[3.0] + 2) / SPAN], rtol=1e-6)
    assert not obs[:, :50].any()  # the returned obs starts the new episode
    np.testing.assert_array_equal(info["trace"], [0, 1])
    np.testing.assert_allclose(env.trace_time, [0.0, 0.0])


def test_sleep_drains_across_slots_unlike_the_reference(tiny):
    """The reference drains the sleep from the current slot only; here the full sleep counts.
    After step 9 of the hand-computed episode the two disagree on the next download."""
    actions = [0] * 9 + [2]
    fixed = ScalarTraceBench(tiny, 0, drain="full")
    buggy = ScalarTraceBench(tiny, 0, drain="current_slot")
    for a in actions:
        f, b = fixed.step(a), buggy.step(a)
    assert f["delay"] == pytest.approx(0.6875)  # from t = 3.25: 0.25 s at 2, 0.4375 s at 8
    assert b["delay"] == pytest.approx(1.3125)  # the reference restarts at 2.5 (sleep lost)
    env = TraceBenchVecEnv(tiny, mode="test")
    env.reset()
    for a in actions:
        env.step(np.array([a, 0]))
    assert env.last_step()["delay"][0] == pytest.approx(f["delay"], abs=1e-12)


# --------------------------------------------------------------------------- modes
def test_test_mode_plays_trace_i_on_copy_i_and_all_finish_together():
    rng = np.random.default_rng(3)
    traces = random_traces(rng, 5, n_chunks=100, min_len=100, max_len=100)
    env = TraceBenchVecEnv(traces, mode="test")
    assert isinstance(env.sampler, SequentialSampler)
    _, info = env.reset()
    np.testing.assert_array_equal(info["trace"], np.arange(5))
    np.testing.assert_array_equal(env.current_traces, np.arange(5))
    with pytest.raises(ValueError):
        env.current_traces[0] = 3
    for step in range(1, 100):
        *_, term, _, info = env.step(rng.integers(0, 3, 5))
        assert term.all() == (step == 99) and term.any() == (step == 99)
    np.testing.assert_array_equal(info["episode"]["length"], [99] * 5)
    np.testing.assert_array_equal(info["episode"]["trace"], np.arange(5))
    # Fewer copies than traces: the next round continues the sequence, and reset restarts it.
    env3 = TraceBenchVecEnv(traces, 3, mode="test")
    _, info = env3.reset()
    np.testing.assert_array_equal(info["trace"], [0, 1, 2])
    for _ in range(99):
        *_, info = env3.step(np.zeros(3, dtype=int))
    np.testing.assert_array_equal(info["trace"], [3, 4, 0])
    _, info = env3.reset()
    np.testing.assert_array_equal(info["trace"], [0, 1, 2])


def test_train_mode_starts_lengths_noise_and_sampler_updates():
    rng = np.random.default_rng(4)
    traces = random_traces(rng, 7, n_chunks=100, min_len=100, max_len=100)
    sampler = RecordingSampler(7, np.random.default_rng(0))
    n = 6
    env = TraceBenchVecEnv(traces, n, sampler, mode="train", seed=1)
    obs, info = env.reset()
    assert (obs[:, :50] == 0).all()
    per_copy = [[] for _ in range(n)]
    lengths, finished = [], []
    for _ in range(400):
        before = env.trace_time
        traces_before = env.current_traces.copy()
        obs, rew, term, _trunc, info = env.step(rng.integers(0, 3, n))
        last = env.last_step()
        np.testing.assert_array_equal(last["trace"], traces_before)
        # Delay noise in [0.95, 1.05] that does not move the trace position.
        for c in np.flatnonzero(~term):
            t = env.trace_time[c]
            noiseless = t - last["sleep"][c] - before[c]
            assert 0.95 - 1e-9 <= last["delay"][c] / noiseless <= 1.05 + 1e-9
        assert (last["buffer"] <= 15.0 * 1.02 + 1e-12).all()
        capped = last["sleep"] > 0
        assert (np.abs(last["buffer"][capped] - 15.0) <= 15.0 * 0.02 + 1e-12).all()
        for c in range(n):
            per_copy[c].append(rew[c])
        if "episode" in info:
            for c in np.flatnonzero(info["_episode"]):
                ep_len = int(info["episode"]["length"][c])
                lengths.append(ep_len)
                rewards = np.array(per_copy[c])
                assert len(rewards) == ep_len
                assert info["episode"]["return_transformed"][c] == pytest.approx(rewards.sum())
                finished.append((int(info["episode"]["trace"][c]), rewards))
                per_copy[c] = []
                # The returned obs is the new episode's first one; final_obs the old last one.
                assert not obs[c, :50].any()
                assert info["final_obs"][c, :50].any()
    assert len(lengths) >= 15
    assert set(lengths) <= set(range(90, 100)) and len(set(lengths)) > 3
    assert len(sampler.calls) == len(finished)
    for (trace, rewards, stats), (exp_trace, exp_rewards) in zip(sampler.calls, finished):
        assert trace == exp_trace and stats == {}
        np.testing.assert_allclose(rewards, exp_rewards, rtol=0, atol=0)
        assert rewards.dtype == np.float64
    np.testing.assert_array_equal(sampler.episodes, np.bincount([t for t, *_ in finished],
                                                                minlength=7))


def test_test_mode_never_updates_the_sampler(tiny):
    sampler = RecordingSampler(2, np.random.default_rng(0))
    env = TraceBenchVecEnv(tiny, 4, sampler, mode="test")
    env.reset()
    for _ in range(30):
        env.step(np.ones(4, dtype=int))
    assert sampler.calls == []


def test_seeding_is_deterministic_and_reset_reseeds():
    traces = random_traces(np.random.default_rng(5), 9, n_chunks=40, min_len=30, max_len=40)
    acts = np.random.default_rng(0).integers(0, 3, (120, 8))

    def rollout(env, seed=None):
        out = [env.reset(seed=seed)[0]]
        for a in acts:
            obs, rew, *_ = env.step(a)
            out += [obs, rew]
        return out

    a = rollout(TraceBenchVecEnv(traces, 8, min_trace_len=30, seed=11))
    b = rollout(TraceBenchVecEnv(traces, 8, min_trace_len=30, seed=np.random.SeedSequence(11)))
    env = TraceBenchVecEnv(traces, 8, min_trace_len=30, seed=99)
    c = rollout(env)
    d = rollout(env, seed=11)
    for x, y, z in zip(a, b, d):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)
    assert any(not np.array_equal(x, z) for x, z in zip(a, c))
    ss = np.random.SeedSequence(3)
    TraceBenchVecEnv(traces, 2, seed=ss)
    assert ss.n_children_spawned == 0  # a SeedSequence passed in is not mutated


# --------------------------------------------------------------------------- scalar reference
@pytest.mark.parametrize(
    "kind", ["irregular", "boundaries", "long"],
)
def test_batched_equals_per_copy_scalar_reference(kind):
    """16 copies, random actions, three episodes each, against the scalar loop. "long" traces
    (300-700 slots) exceed the bucket cap, so the search takes several halving steps."""
    rng = np.random.default_rng(7)
    n_traces, n_envs, n_chunks = 21, 16, 25
    grid = kind == "boundaries"
    lengths = {"min_len": 300, "max_len": 700} if kind == "long" else {}
    traces = random_traces(rng, n_traces, n_chunks=n_chunks, grid=grid, **lengths)
    env = TraceBenchVecEnv(traces, n_envs, mode="test")
    order = SequentialSampler(n_traces)
    obs, info = env.reset()
    refs = [ScalarTraceBench(traces, int(t)) for t in order.sample_many(n_envs)]
    np.testing.assert_array_equal(info["trace"], np.arange(n_envs))
    np.testing.assert_allclose(obs, np.stack([r.obs() for r in refs]), atol=1e-6)
    periods = traces.time[np.arange(n_traces), traces.lengths - 1] + 1.0
    seen = {"sleep": 0, "stall": 0, "wrap": 0, "autoreset": 0}
    for _ in range(3 * (n_chunks - 1) + 5):
        actions = rng.integers(0, 3, n_envs)
        obs, rew, term, _trunc, info = env.step(actions)
        last = env.last_step()
        out = [r.step(int(a)) for r, a in zip(refs, actions)]
        for key, got in [("delay", last["delay"]), ("stall", last["stall"]),
                         ("buffer", last["buffer"]), ("raw", last["reward"]), ("rt", rew)]:
            np.testing.assert_allclose(got, [o[key] for o in out], rtol=0, atol=1e-9)
        seen["sleep"] += int((last["sleep"] > 0).sum())
        seen["stall"] += int((last["stall"] > 0).sum())
        seen["wrap"] += int((env.trace_time > periods[last["trace"]]).sum())
        if grid:  # positions exactly on slot boundaries
            seen["on_boundary"] = seen.get("on_boundary", 0) + int(
                (np.abs(env.trace_time * 2 - np.round(env.trace_time * 2)) < 1e-9).sum())
        ref_obs = np.stack([r.obs() for r in refs])
        done = np.array([o["done"] for o in out])
        seen["autoreset"] += int(done.sum())
        np.testing.assert_array_equal(term, done)
        if done.any():
            np.testing.assert_allclose(info["final_obs"], ref_obs, atol=1e-6)
            new = iter(order.sample_many(int(done.sum())))
            refs = [ScalarTraceBench(traces, int(next(new))) if d else r
                    for r, d in zip(refs, done)]
            np.testing.assert_array_equal(info["trace"], [r.trace for r in refs])
            ref_obs = np.stack([r.obs() for r in refs])
        np.testing.assert_allclose(obs, ref_obs, atol=1e-6)
    if kind == "long":
        assert len(PayloadTables(traces).payload_steps) >= 3 and seen["autoreset"] > 0
    else:  # sleeps, stalls, wrap-arounds, resets (and exact boundaries) all occur
        assert min(seen.values()) >= 5, seen


def test_dead_slots_and_chunks_ending_on_whole_periods():
    """Zero throughput at the start and end of the trace, and chunk sizes that are whole
    multiples of the payload per period (the download ends exactly at a period boundary)."""
    traces = make_traces(
        times=[[0, 1, 2, 3], [0, 0.5, 1.5]],
        bandwidths=[[0, 2, 0, 0], [3, 0, 1]],  # 2 units per 4 s period; 2.5 per 2.5 s
        sizes=np.tile([2.0, 4.0, 5.0], (2, 20, 1)),
    )
    env = TraceBenchVecEnv(traces, mode="test")
    env.reset()
    refs = [ScalarTraceBench(traces, 0), ScalarTraceBench(traces, 1)]
    delays = []
    for a in [0, 1, 2, 0, 1, 0, 2, 2, 1, 0, 0, 1, 2, 0, 1, 1, 0, 2]:  # 18 of 19 steps
        obs, rew, *_ = env.step(np.array([a, a]))
        out = [r.step(a) for r in refs]
        last = env.last_step()
        for key, got in [("delay", last["delay"]), ("buffer", last["buffer"]), ("rt", rew)]:
            np.testing.assert_allclose(got, [o[key] for o in out], rtol=0, atol=1e-9)
        np.testing.assert_allclose(obs, np.stack([r.obs() for r in refs]), atol=1e-6)
        delays.append(last["delay"][0])
    assert delays[0] == pytest.approx(2.0)  # 1 s of dead slot, then 2 units at throughput 2
    assert np.isfinite(delays).all()


# --------------------------------------------------------------------------- Gymnasium API
def test_single_env_passes_env_checker(tiny):
    for mode in ("train", "test"):
        env = TraceBenchEnv(tiny, mode=mode, seed=0, min_trace_len=8)
        check_env(env, skip_render_check=True)
    traces = random_traces(np.random.default_rng(8), 30, n_chunks=20, min_len=15, max_len=20)
    env = TraceBenchEnv(traces, min_trace_len=15)
    firsts = {}
    for seed in range(6):
        obs, info = env.reset(seed=seed)
        again, info2 = env.reset(seed=seed)
        np.testing.assert_array_equal(obs, again)
        assert info == info2
        firsts[seed] = info["trace"]
    assert len(set(firsts.values())) > 1  # the trace choice follows the seed
    obs, info = env.reset(seed=1)
    total, done, steps = 0.0, False, 0
    while not done:
        obs, r, done, _trunc, step_info = env.step(2)
        total += r
        steps += 1
    assert step_info["episode"]["length"] == steps
    assert step_info["episode"]["return_transformed"] == pytest.approx(total)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    # Test mode: successive resets walk through the traces; a seeded reset starts again.
    env = TraceBenchEnv(traces, mode="test")
    assert [env.reset()[1]["trace"] for _ in range(3)] == [0, 1, 2]
    assert env.reset(seed=0)[1]["trace"] == 0


def test_vector_api_autoreset_metadata_and_fresh_arrays(tiny):
    env = TraceBenchVecEnv(tiny, 3, mode="train", seed=0, min_trace_len=8)
    assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    assert isinstance(env, gym.vector.VectorEnv)
    assert env.observation_space.shape == (3, 53) and env.single_action_space.n == 3
    assert env.trace_set is tiny
    obs0, _ = env.reset()
    obs1, rew1, *_ = env.step(env.action_space.sample())
    obs2, rew2, *_ = env.step(env.action_space.sample())
    assert not np.shares_memory(obs0, obs1) and not np.shares_memory(obs1, obs2)
    assert not np.shares_memory(rew1, rew2)
    assert obs2 in env.observation_space


# --------------------------------------------------------------------------- errors
def test_bad_input_raises(tiny):
    with pytest.raises(ValueError, match="mode"):
        TraceBenchVecEnv(tiny, 2, mode="eval")
    with pytest.raises(ValueError, match="n_envs"):
        TraceBenchVecEnv(tiny, 0)
    with pytest.raises(ValueError, match="n_envs"):
        TraceBenchVecEnv(tiny)  # required in train mode
    bare = TraceSet("bare", dict(tiny.series), tiny.lengths)
    with pytest.raises(ValueError, match="video_sizes"):
        TraceBenchVecEnv(bare, 2)
    for bad in [np.ones((2, 12, 2)), np.ones((2, 12)), np.ones((2, 1, 3)), -np.ones((2, 12, 3))]:
        broken = TraceSet("broken", dict(tiny.series), tiny.lengths,
                          chunks={"video_sizes": bad})
        with pytest.raises(ValueError, match="video_sizes|chunks"):
            TraceBenchVecEnv(broken, 2)
    with pytest.raises(ValueError, match="sampler covers"):
        TraceBenchVecEnv(tiny, 2, UniformSampler(5, np.random.default_rng(0)))
    with pytest.raises(ValueError, match="max_buffer"):
        TraceBenchVecEnv(tiny, 2, max_buffer=0.0)
    env = TraceBenchVecEnv(tiny, 2, mode="test")
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(2, dtype=int))
    env.reset()
    with pytest.raises(ValueError, match="actions"):
        env.step(np.array([0, 3]))
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(3, dtype=int))
    with pytest.raises(ValueError, match="integer"):
        env.step(np.array([0.5, 1.0]))
