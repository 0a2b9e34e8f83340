"""Batched ABR simulator (plume.envs.abr.sim): hand-computed episodes, literal scalar
references of Pensieve's sim/env.py and of Plume's Puffer env, Gymnasium API, conventions."""

from __future__ import annotations

import math
from collections import deque

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from plume.envs.abr.sim import (
    EPISODE_FIELDS,
    AbrEnv,
    AbrVecEnv,
    symmetric_sqrt_clip,
)
from plume.envs.abr.video import BITRATES_KBPS, VIDEO_SIZES
from plume.sampling.base import SequentialSampler, TraceSampler
from plume.traces.traceset import TraceSet


# --------------------------------------------------------------------------- helpers
def puffer_traces(times, bandwidths, sizes, ssim, ids=None, period=None, name="puffer"):
    """A Puffer-style TraceSet from ragged lists: ``sizes`` / ``ssim`` are per-trace
    (len, 10) arrays (MB, dB), padded with ones past each trace's length."""
    n = len(times)
    width = max(len(t) for t in times)
    time, bw = np.zeros((n, width)), np.zeros((n, width))
    cs, sd = np.ones((n, width, 10)), np.ones((n, width, 10))
    for i, (t, b, s, q) in enumerate(zip(times, bandwidths, sizes, ssim)):
        time[i, : len(t)] = t
        time[i, len(t):] = t[-1] + 1 + np.arange(width - len(t))  # padding, ignored
        bw[i, : len(b)] = b
        cs[i, : len(t)] = s
        sd[i, : len(t)] = q
    return TraceSet(name=name, series={"time": time, "bandwidth": bw},
                    lengths=[len(t) for t in times], chunks={"chunk_sizes": cs, "ssim_db": sd},
                    constants={} if period is None else {"period": np.asarray(period, float)},
                    trace_ids=ids)


def random_puffer(rng, n, min_len, max_len, grid=False, period=False):
    """Random Puffer traces. Short slots (0.2-1 s) so that episodes wrap around the trace;
    fast and slow slots so that both stalls and buffer-cap skips occur; some dead slots.
    ``grid=True``: half-second slots, throughputs in multiples of 1 Mbit/s (0.125 MB/s) and
    sizes in multiples of 0.25 MB, so downloads often end exactly on slot boundaries."""
    times, bws, sizes, ssims, periods = [], [], [], [], []
    for _ in range(n):
        length = int(rng.integers(min_len, max_len + 1))
        if grid:
            times.append(0.5 * np.arange(length))
            bw = float(rng.integers(1, 3)) * rng.integers(0, 9, length)  # Mbit/s
            size = 0.25 * rng.integers(1, 9, (length, 10)).astype(float)
        else:
            times.append(np.concatenate([[0.0], np.cumsum(rng.uniform(0.2, 1.0, length - 1))]))
            bw = rng.uniform(0.5, 25.0, length) * (rng.random() + 0.2)
            bw[rng.random(length) < 0.1] = 0.0
            size = rng.uniform(0.05, 2.5, (length, 10))
        bw[rng.integers(length)] = 8.0  # never dead throughout
        bws.append(bw)
        sizes.append(np.sort(size, axis=1))
        ssims.append(np.sort(rng.uniform(-2.0, 24.0, (length, 10)), axis=1))
        periods.append(times[-1][-1] + rng.uniform(0.3, 2.0))
    return puffer_traces(times, bws, sizes, ssims, period=periods if period else None)


def cooked_to_traceset(cooked, name="cooked"):
    """Pensieve cooked traces (t, bw), backward convention (bw[i] on (t[i-1], t[i]], t[0] = 0,
    looping with period t[-1]), as the loader converts them: forward slot j = ptr j + 1."""
    n = len(cooked)
    width = max(len(t) for t, _ in cooked) - 1
    time, bw = np.zeros((n, width)), np.zeros((n, width))
    for i, (t, b) in enumerate(cooked):
        m = len(t) - 1
        time[i, :m] = t[:-1]
        time[i, m:] = t[-1] + 1 + np.arange(width - m)
        bw[i, :m] = b[1:]
    return TraceSet(name=name, series={"time": time, "bandwidth": bw},
                    lengths=[len(t) - 1 for t, _ in cooked],
                    constants={"period": np.array([t[-1] for t, _ in cooked])})


def random_cooked(rng, n, fast_share=0.5):
    cooked = []
    for _ in range(n):
        length = int(rng.integers(3, 25))
        t = np.concatenate([[0.0], np.cumsum(rng.uniform(0.3, 3.0, length - 1))])
        fast = rng.random() < fast_share
        bw = rng.uniform(5.0, 40.0, length) if fast else rng.uniform(0.2, 6.0, length)
        bw[rng.random(length) < 0.15] = 0.0
        bw[1 + rng.integers(length - 1)] = 3.0  # some throughput in every period
        cooked.append((t, bw))
    return cooked


class RecordingSampler(TraceSampler):
    """Uniform draws that log every update and draw, in order."""

    name = "recording"

    def __init__(self, n, rng):
        super().__init__(n, rng)
        self.calls, self.events = [], []

    def sample(self):
        return int(self.rng.integers(self.n_traces))

    def sample_many(self, count):
        self.events.append(("sample", count))
        return self.rng.integers(self.n_traces, size=count)

    def update(self, trace_index, rewards, **learner_stats):
        super().update(trace_index, rewards, **learner_stats)
        self.calls.append((trace_index, np.array(rewards), learner_stats))
        self.events.append(("update", trace_index))

    def probabilities(self):
        return np.full(self.n_traces, 1.0 / self.n_traces)


def rt_of(r):
    """The agent reward, written out: sign(r)(sqrt(|r|+1) - 1 + 0.001 r), clipped to +-5."""
    r = float(r)
    sign = (r > 0) - (r < 0)
    return min(max(sign * (math.sqrt(abs(r) + 1) - 1 + 0.001 * r), -5.0), 5.0)


# --------------------------------------------------------------------------- scalar references
class ScalarPensieve:
    """Pensieve's ``sim/env.py`` ``get_video_chunk`` + its agent's state update, literally
    (hongzimao/pensieve), on the ORIGINAL backward-convention cooked arrays: ``ptr`` and
    ``last_time``, strict ``>`` download test, wrap to ptr = 1 / last_time = 0, the sleep drained
    over the same walk in full. ``clock`` is the unwrapped trace time, for comparison."""

    def __init__(self, cooked, ptr, n_chunks=48, cap_ms=60000.0, rtt=80.0, chunk_ms=4000.0,
                 rebuf_penalty=4.3, smooth_penalty=1.0):
        self.t, self.bw = [float(x) for x in cooked[0]], [float(x) for x in cooked[1]]
        self.ptr, self.last_time = ptr, self.t[ptr - 1]
        self.clock = self.last_time
        self.n_chunks, self.cap_ms, self.rtt, self.chunk_ms = n_chunks, cap_ms, rtt, chunk_ms
        self.rebuf_penalty, self.smooth_penalty = rebuf_penalty, smooth_penalty
        self.buffer, self.counter, self.last_br = 0.0, 0, BITRATES_KBPS[1]
        self.state = np.zeros((6, 8))
        self.state[4, :6] = VIDEO_SIZES[:, 0] / 1e6

    def _advance(self):
        self.ptr += 1
        if self.ptr >= len(self.bw):
            self.ptr, self.last_time = 1, 0.0

    def step(self, q, noise=1.0):
        size = float(VIDEO_SIZES[q, self.counter % 49])
        delay, sent = 0.0, 0.0
        while True:
            throughput = self.bw[self.ptr] * 1e6 / 8.0
            duration = self.t[self.ptr] - self.last_time
            payload = throughput * duration * 0.95
            if sent + payload > size:
                frac = (size - sent) / throughput / 0.95
                delay += frac
                self.last_time += frac
                break
            sent += payload
            delay += duration
            self.last_time = self.t[self.ptr]
            self._advance()
        self.clock += delay
        delay = (delay * 1000.0 + self.rtt) * float(noise)
        rebuf = max(delay - self.buffer, 0.0)
        self.buffer = max(self.buffer - delay, 0.0) + self.chunk_ms
        full_sleep = 0.0
        if self.buffer > self.cap_ms:
            sleep = math.ceil((self.buffer - self.cap_ms) / 500.0) * 500.0
            full_sleep = sleep
            self.buffer -= sleep
            self.clock += sleep / 1000.0
            while True:
                duration = self.t[self.ptr] - self.last_time
                if duration > sleep / 1000.0:
                    self.last_time += sleep / 1000.0
                    break
                sleep -= duration * 1000.0
                self.last_time = self.t[self.ptr]
                self._advance()
        br = BITRATES_KBPS[q]
        reward = (br / 1000.0 - self.rebuf_penalty * rebuf / 1000.0
                  - self.smooth_penalty * abs(br - self.last_br) / 1000.0)
        self.last_br = br
        self.counter += 1
        remain = self.n_chunks - self.counter
        state = np.roll(self.state, -1, axis=1)  # Pensieve's agent: every row rolled
        state[0, -1] = br / float(max(BITRATES_KBPS))
        state[1, -1] = self.buffer / 1000.0 / 10.0
        state[2, -1] = size / delay / 1000.0
        state[3, -1] = delay / 1000.0 / 10.0
        state[4, :6] = VIDEO_SIZES[:, self.counter % 49] / 1e6
        state[5, -1] = min(remain, self.n_chunks) / float(self.n_chunks)
        self.state = state
        return {"delay_ms": delay, "rebuf": rebuf / 1000.0, "buffer": self.buffer / 1000.0,
                "sleep": full_sleep / 1000.0, "reward": reward,
                "done": self.counter >= self.n_chunks}

    def obs(self):
        """The state as AbrVecEnv reports it: row 4, columns 6-7 (which Pensieve's network
        never reads) hold lagged level-0 sizes after the roll; here they are compared as 0."""
        state = self.state.copy()
        state[4, 6:] = 0.0
        return state.reshape(-1)


class ScalarPuffer:
    """Plume's Puffer env (``ABRSimEnv`` + ``ABRWrapper``) in its loop style: network pointer
    and slot time left (forward convention), the ``while size > 1e-8`` download loop, the
    buffer cap setting the slot's time left to 0. Noise factors are passed in per step."""

    def __init__(self, traces, trace, start, max_buffer=15.0, chunk_seconds=2.002,
                 weights=(1.0, 100.0, 1.0), history_len=10):
        length = int(traces.lengths[trace])
        self.trace, self.length = trace, length
        self.time = traces.time[trace, :length].tolist()
        self.bw = (traces.bandwidth[trace, :length] / 8.0).tolist()  # MB/s
        period = (traces.constants["period"][trace] if "period" in traces.constants
                  else self.time[-1] + 1.0)
        self.durations = [b - a for a, b in zip(self.time, self.time[1:])]
        self.durations.append(period - self.time[-1])
        self.sizes = traces.chunks["chunk_sizes"][trace]
        self.ssim = traces.chunks["ssim_db"][trace]
        self.max_buffer, self.chunk_seconds, self.w = max_buffer, chunk_seconds, weights
        self.ptr, self.left, self.vidx = start, self.durations[start], start
        self.clock = self.time[start]
        self.first, self.buffer, self.prev = True, 0.0, 0.0
        self.history_len = history_len
        self.hist = deque([np.zeros(5)] * history_len, maxlen=history_len)
        self.stalls = deque([0.0] * 3 * history_len, maxlen=3 * history_len)

    def step(self, action, delay_noise=1.0, buffer_noise=1.0):
        size = float(self.sizes[self.vidx, action])
        remaining, delay = size, 0.0
        while remaining > 1e-8:
            if self.left <= 0:
                self.ptr = (self.ptr + 1) % self.length
                self.left = self.durations[self.ptr]
            tp = self.bw[self.ptr]
            used = self.left if tp == 0 else min(self.left, remaining / tp)
            remaining -= tp * used
            self.left -= used
            delay += used
        self.clock += delay
        delay *= float(delay_noise)
        stall = 0.0 if self.first else min(max(delay - self.buffer, 0.0), 20.0)
        self.buffer = max(self.buffer - delay, 0.0) + self.chunk_seconds
        skip = 0.0
        if self.buffer > self.max_buffer:
            skip, self.left = self.left, 0.0  # the reference: network_time_left = 0
            self.clock += skip
            self.buffer = self.max_buffer * float(buffer_noise)
        q = float(self.ssim[self.vidx, action])
        change = 0.0 if self.first else abs(q - self.prev)
        raw = self.w[0] * q - self.w[1] * stall - self.w[2] * change
        rt = rt_of(raw)
        self.prev, self.first = q, False
        self.hist.append(np.clip([q / 25, size / 3, delay / 20, self.buffer / self.max_buffer,
                                  (rt + 5) / 10], 0, 1))
        self.stalls.append(stall)
        self.vidx += 1
        return {"delay": delay, "stall": stall, "buffer": self.buffer, "sleep": skip,
                "raw": raw, "rt": rt, "quality": q, "change": change,
                "done": self.vidx + 5 == self.length}

    def obs(self):
        m = np.zeros((self.history_len, 26))
        m[:, :5] = np.array(self.hist)
        m[:, 5] = np.minimum(np.array(self.stalls).reshape(-1, 3).sum(axis=1) / 3.0, 1.0)
        rows = slice(self.vidx, self.vidx + 5)
        m[:5, 6:16] = np.clip(self.sizes[rows] / 3.0, 0, 1)
        m[:5, 16:26] = np.clip(self.ssim[rows] / 25.0, 0, 1)
        return m.reshape(-1)


# --------------------------------------------------------------------------- constants
def test_reward_transform_reference_values():
    assert symmetric_sqrt_clip(10.0) == pytest.approx(2.3266, abs=1e-4)  # digest: 2.33
    assert symmetric_sqrt_clip(20.0) == pytest.approx(3.6026, abs=1e-4)  # digest: 3.60
    assert symmetric_sqrt_clip(-35.0) == pytest.approx(-4.965, abs=1e-12)  # digest: -4.97
    assert symmetric_sqrt_clip(0.0) == 0.0
    assert symmetric_sqrt_clip(-36.0) == -5.0 and symmetric_sqrt_clip(1e4) == 5.0
    assert isinstance(symmetric_sqrt_clip(3), float)
    x = np.array([0.5, 2.0, 7.0])  # not odd: f(x) + f(-x) = 0.002 x
    np.testing.assert_allclose(symmetric_sqrt_clip(x) + symmetric_sqrt_clip(-x), 0.002 * x)


def test_video_table_matches_the_digest():
    assert VIDEO_SIZES.shape == (6, 49) and not VIDEO_SIZES.flags.writeable
    kbps = VIDEO_SIZES.mean(axis=1) * 8 / 4 / 1000
    np.testing.assert_array_equal(np.round(kbps), [302, 750, 1197, 1843, 2838, 4279])
    assert (VIDEO_SIZES[0].min(), VIDEO_SIZES[0].max()) == (111155, 181901)
    assert (VIDEO_SIZES[5].min(), VIDEO_SIZES[5].max()) == (1433658, 2395588)
    assert (np.diff(VIDEO_SIZES, axis=0) > 0).all()  # sizes grow with the level
    # The last chunk (never played in a 48-chunk episode) is the smallest at levels 1-5 and
    # well below the mean at level 0.
    assert (VIDEO_SIZES[1:, 48] < VIDEO_SIZES[1:, :48].min(axis=1)).all()
    assert VIDEO_SIZES[0, 48] < 0.8 * VIDEO_SIZES[0, :48].mean()
    assert set(EPISODE_FIELDS) >= {"return", "return_transformed", "length", "trace",
                                   "quality", "stall", "change", "first_return",
                                   "video_seconds"}


# --------------------------------------------------------------------------- hand-computed
@pytest.fixture
def gelato_tiny():
    """Two 12-chunk traces on 1-s slots (period 12 s). Trace 0: 8 Mbit/s = 1 MB/s in slots
    0-5, then 1.6 Mbit/s = 0.2 MB/s. Trace 1: 1 MB/s throughout. Every chunk k has sizes
    0.25 (j + 1) MB and SSIM 5 + j + k dB at encoding j."""
    j = np.arange(10)
    sizes = np.tile(0.25 * (j + 1), (12, 1))
    ssim = 5.0 + j[None, :] + np.arange(12)[:, None]
    t = np.arange(12.0)
    return puffer_traces([t, t], [[8.0] * 6 + [1.6] * 6, [8.0] * 12], [sizes, sizes],
                         [ssim, ssim])


def test_gelato_hand_computed_episode(gelato_tiny):
    env = AbrVecEnv(gelato_tiny, mode="test", min_chunks=12, max_buffer=6.0)
    assert env.num_envs == 2 and env.obs_layout == (10, 26) and env.n_levels == 10
    obs, info = env.reset()
    assert obs.shape == (2, 260) and obs.dtype == np.float32
    m = obs.reshape(2, 10, 26)
    j = np.arange(10)
    assert not m[:, :, :6].any() and not m[:, 5:, 6:].any()
    for r in range(5):  # look-ahead = chunks 0..4
        np.testing.assert_allclose(m[:, r, 6:16], [0.25 * (j + 1) / 3] * 2, rtol=1e-6)
        np.testing.assert_allclose(m[:, r, 16:], [(5 + j + r) / 25] * 2, rtol=1e-6)

    actions = [[3, 0], [7, 0], [9, 0], [0, 0], [0, 0], [0, 0], [0, 0]]
    # Copy 0, from t = 0 with max_buffer 6 s:
    # 1. 1 MB at 1 MB/s: 1 s; no stall on the first chunk; buffer 0 + 2.002. SSIM 8 dB,
    #    no change term: r = 8, r' = sqrt(9) - 1 + 0.008 = 2.008.
    # 2. 2 MB from t = 1: 2 s (t = 3); stall max(2 - 2.002, 0) = 0; buffer 0.002 + 2.002 =
    #    2.004; SSIM 13, change 5: r = 8.
    # 3. 2.5 MB from t = 3: 2.5 s (t = 5.5); stall 2.5 - 2.004 = 0.496; buffer 2.002;
    #    SSIM 16, change 3: r = 16 - 49.6 - 3 = -36.6, r' = -(sqrt(37.6) - 1 - 0.0366) =
    #    -5.095, clipped to -5.
    # 4. 0.25 MB from 5.5: 0.25 s; buffer 1.752 + 2.002 = 3.754; SSIM 8, change 8: r = 0.
    # 5. 0.25 MB from 5.75: 0.25 s, ending exactly at the slot boundary t = 6; buffer
    #    3.504 + 2.002 = 5.506; SSIM 9: r = 8.
    # 6. 0.25 MB from 6 at 0.2 MB/s: 0.2 MB in slot 6, 0.05 MB in 0.25 s of slot 7 (t = 7.25),
    #    delay 1.25; buffer 4.256 + 2.002 = 6.258 > 6: the network skips to the end of slot
    #    7 (t = 8, skip 0.75) and buffer = 6. SSIM 10: r = 9, r' = sqrt(10) - 1 + 0.009.
    # 7. 0.25 MB from 8: 1.25 s (t = 9.25); buffer 6.752 > 6: skip to 10. SSIM 11: r = 10.
    exp0 = {
        "delay": [1.0, 2.0, 2.5, 0.25, 0.25, 1.25, 1.25],
        "stall": [0.0, 0.0, 0.496, 0.0, 0.0, 0.0, 0.0],
        "buffer": [2.002, 2.004, 2.002, 3.754, 5.506, 6.0, 6.0],
        "sleep": [0.0] * 5 + [0.75, 0.75],
        "time": [1.0, 3.0, 5.5, 5.75, 6.0, 8.0, 10.0],
        "quality": [8.0, 13.0, 16.0, 8.0, 9.0, 10.0, 11.0],
        "change": [0.0, 5.0, 3.0, 8.0, 1.0, 1.0, 1.0],
        "raw": [8.0, 8.0, -36.6, 0.0, 8.0, 9.0, 10.0],
        "rt": [2.008, 2.008, -5.0, 0.0, 2.008, math.sqrt(10) - 1 + 0.009,
               math.sqrt(11) - 1 + 0.01],
    }
    # Copy 1: 0.25 MB chunks at 1 MB/s, 0.25 s each. Buffers 2.002, 3.754, 5.506; the 4th
    # download ends exactly on the boundary t = 1 with buffer 7.258 > 6: the download is in
    # the slot that just ended, so nothing is skipped (the reference's time left is 0 there);
    # from then on each chunk ends 0.25 s into a slot and the rest (0.75 s) is skipped.
    # SSIM 5 + k on chunk k: r = 5, then 6 - 1, 7 - 1, ...
    exp1 = {
        "delay": [0.25] * 7,
        "stall": [0.0] * 7,
        "buffer": [2.002, 3.754, 5.506, 6.0, 6.0, 6.0, 6.0],
        "sleep": [0.0, 0.0, 0.0, 0.0, 0.75, 0.75, 0.75],
        "time": [0.25, 0.5, 0.75, 1.0, 2.0, 3.0, 4.0],
        "quality": [5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0],
        "change": [0.0] + [1.0] * 6,
        "raw": [5.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0],
        "rt": [math.sqrt(6) - 1 + 0.005, math.sqrt(6) - 1 + 0.005, math.sqrt(7) - 1 + 0.006,
               math.sqrt(8) - 1 + 0.007, 2.008, math.sqrt(10) - 1 + 0.009,
               math.sqrt(11) - 1 + 0.01],
    }
    keys = ["delay", "stall", "buffer", "sleep", "quality", "change"]
    for t, act in enumerate(actions):
        obs, rew, term, trunc, info = env.step(np.array(act))
        last = env.last_step()
        for c, exp in enumerate([exp0, exp1]):
            for key in keys:
                assert last[key][c] == pytest.approx(exp[key][t], abs=1e-9), (key, t, c)
            assert last["reward"][c] == pytest.approx(exp["raw"][t], abs=1e-9), (t, c)
            assert rew[c] == pytest.approx(exp["rt"][t], abs=1e-9), (t, c)
            assert rew[c] == pytest.approx(rt_of(exp["raw"][t]), abs=1e-9)
            assert last["chunk"][c] == t
            if t < 6:  # the last step autoresets the position
                assert env.trace_time[c] == pytest.approx(exp["time"][t], abs=1e-9), (t, c)
        assert not trunc.any()
        if t == 2:  # after three steps, copy 0: rows 7-9 hold steps 1-3, oldest first
            m = obs.reshape(2, 10, 26)[0]
            assert not m[:7, :5].any()
            np.testing.assert_allclose(m[7, :5], [8 / 25, 1 / 3, 1 / 20, 2.002 / 6, 0.7008],
                                       rtol=1e-6)
            np.testing.assert_allclose(m[8, :5], [13 / 25, 2 / 3, 2 / 20, 2.004 / 6, 0.7008],
                                       rtol=1e-6)
            np.testing.assert_allclose(m[9, :5], [16 / 25, 2.5 / 3, 2.5 / 20, 2.002 / 6, 0.0],
                                       rtol=1e-6, atol=1e-7)
            # Long-term stall: the last 30 stalls [0] * 27 + [0, 0, 0.496] in groups of 3.
            np.testing.assert_allclose(m[:, 5], [0] * 9 + [0.496 / 3], rtol=1e-6)
            for r in range(5):  # look-ahead: chunks 3..7
                np.testing.assert_allclose(m[r, 6:16], 0.25 * (j + 1) / 3, rtol=1e-6)
                np.testing.assert_allclose(m[r, 16:], (5 + j + 3 + r) / 25, rtol=1e-6)
            assert not m[5:, 6:].any()
        if t < 6:
            assert not term.any() and "episode" not in info
    # Both end after 12 - 5 = 7 steps (5 look-ahead chunks left) and autoreset.
    assert term.all()
    ep = info["episode"]
    np.testing.assert_array_equal(info["_episode"], [True, True])
    np.testing.assert_array_equal(ep["length"], [7, 7])
    np.testing.assert_array_equal(ep["trace"], [0, 1])
    np.testing.assert_allclose(ep["return"], [6.4, 50.0])
    np.testing.assert_allclose(ep["return_transformed"], [sum(exp0["rt"]), sum(exp1["rt"])])
    np.testing.assert_allclose(ep["quality"], [75.0, 56.0])
    np.testing.assert_allclose(ep["stall"], [0.496, 0.0])
    np.testing.assert_allclose(ep["change"], [19.0, 6.0])
    np.testing.assert_allclose(ep["first_return"], [8.0, 5.0])
    np.testing.assert_allclose(ep["video_seconds"], [7 * 2.002] * 2)
    final = info["final_obs"].reshape(2, 10, 26)[0]
    np.testing.assert_allclose(final[9, :5], [11 / 25, 0.25 / 3, 1.25 / 20, 1.0,
                                              (exp0["rt"][6] + 5) / 10], rtol=1e-6)
    assert not final[:3, :5].any() and final[3, 0] == pytest.approx(8 / 25)
    # 7 stalls at positions 23-29 of 30: the 0.496 s of step 3 sits in group 8.
    np.testing.assert_allclose(final[:, 5], [0] * 8 + [0.496 / 3, 0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(final[4, 16:], (5 + j + 11) / 25, rtol=1e-6)  # chunk 11
    np.testing.assert_allclose(obs, env.reset()[0])  # the returned obs starts a new episode


def test_pensieve_hand_computed_episode():
    """4 one-second slots at 8/0.95, 8/0.95, 16/0.95 and 4/0.95 Mbit/s, i.e. payload rates of
    1, 1, 2 and 0.5 MB/s (1e6 bytes = 1 MB); period 4 s. Buffer cap 6 s, 4-chunk episodes."""
    traces = TraceSet("p", series={"time": np.arange(4.0)[None],
                                   "bandwidth": np.array([[8, 8, 16, 4]]) / 0.95},
                      lengths=[4])
    env = AbrVecEnv(traces, mode="test", variant="pensieve", buffer_cap_s=6.0, n_chunks=4)
    assert env.obs_layout == (6, 8) and env.n_levels == 6
    obs, _ = env.reset()
    s = obs.reshape(6, 8)
    assert not np.delete(s, 4, axis=0).any() and not s[4, 6:].any()
    np.testing.assert_allclose(s[4, :6], VIDEO_SIZES[:, 0] / 1e6, rtol=1e-6)

    # 1. 181801 B (chunk 0, 300 kbit/s) at 1e6 B/s: 0.181801 s; delay 181.801 + 80 =
    #    261.801 ms; rebuf 261.801 ms (empty buffer: Pensieve penalises the first chunk);
    #    buffer 4000 ms. r = 0.3 - 4.3 * 0.261801 - |300 - 750| / 1000 = -1.2757443.
    # 2. 2123065 B (chunk 1, 4300) from 0.181801: 818199 B in the rest of slot 0, 1e6 B in
    #    slot 1, 304866 B at 2e6 B/s (0.152433 s): t = 2.152433, 1.970632 s, 2050.632 ms.
    #    No rebuf; buffer 4000 - 2050.632 + 4000 = 5949.368 ms. r = 4.3 - 4.0 = 0.3.
    # 3. 2177073 B (chunk 2, 4300): 1695134 B in 0.847567 s of slot 2, 481939 B at 0.5e6 B/s
    #    (0.963878 s): 1.811445 s, 1891.445 ms; buffer 8057.923 ms > 6000: sleep
    #    ceil(2057.923 / 500) * 500 = 2500 ms, buffer 5557.923; the trace time 3.963878 +
    #    2.5 = 6.463878 wraps (0.463878 s into slot 2 of the second period). r = 4.3.
    # 4. 617681 B (chunk 3, 1200) at 2e6 B/s: 0.3088405 s, 388.8405 ms; buffer 9169.0825:
    #    sleep ceil(6.338165) * 500 = 3500 ms, buffer 5669.0825; t = 10.2727185.
    #    r = 1.2 - |1200 - 4300| / 1000 = -1.9.
    actions = [0, 5, 5, 2]
    delay_ms = [261.801, 2050.632, 1891.445, 388.8405]
    buffer_ms = [4000.0, 5949.368, 5557.923, 5669.0825]
    sleep_ms = [0.0, 0.0, 2500.0, 3500.0]
    stall = [0.261801, 0.0, 0.0, 0.0]
    times = [0.181801, 2.152433, 6.463878]
    rewards = [0.3 - 4.3 * 0.261801 - 0.45, 0.3, 4.3, -1.9]
    sizes = [VIDEO_SIZES[a, k] for k, a in enumerate(actions)]
    assert sizes == [181801, 2123065, 2177073, 617681]
    for k, a in enumerate(actions):
        obs, rew, term, trunc, info = env.step(np.array([a]))
        last = env.last_step()
        assert last["delay"][0] * 1000 == pytest.approx(delay_ms[k], abs=1e-6)
        assert last["buffer"][0] * 1000 == pytest.approx(buffer_ms[k], abs=1e-6)
        assert last["sleep"][0] * 1000 == pytest.approx(sleep_ms[k], abs=1e-6)
        assert last["stall"][0] == pytest.approx(stall[k], abs=1e-9)
        assert last["size"][0] == sizes[k]
        assert last["reward"][0] == pytest.approx(rewards[k], abs=1e-9)
        assert rew[0] == pytest.approx(rewards[k], abs=1e-9)  # the agent reward is the QoE
        if k < 3:
            assert env.trace_time[0] == pytest.approx(times[k], abs=1e-9)
            assert not term.any()
    assert term.all() and not trunc.any()
    ep = info["episode"]
    assert ep["length"][0] == 4
    assert ep["return"][0] == pytest.approx(sum(rewards))
    assert ep["quality"][0] == pytest.approx(10.1)  # 0.3 + 4.3 + 4.3 + 1.2 Mbit/s
    assert ep["change"][0] == pytest.approx(7.55)  # 0.45 + 4.0 + 0 + 3.1
    assert ep["stall"][0] == pytest.approx(0.261801)
    assert ep["first_return"][0] == pytest.approx(rewards[0])
    assert ep["video_seconds"][0] == 16.0
    final = info["final_obs"].reshape(6, 8)
    assert not np.delete(final, 4, axis=0)[:, :4].any()  # 4 steps: columns 4-7, oldest first
    np.testing.assert_allclose(final[0, 4:], np.array([300, 4300, 4300, 1200]) / 4300,
                               rtol=1e-6)
    np.testing.assert_allclose(final[1, 4:], np.array(buffer_ms) / 1000 / 10, rtol=1e-6)
    np.testing.assert_allclose(final[2, 4:], np.array(sizes) / np.array(delay_ms) / 1000,
                               rtol=1e-6)
    np.testing.assert_allclose(final[3, 4:], np.array(delay_ms) / 1000 / 10, rtol=1e-6)
    np.testing.assert_allclose(final[4, :6], VIDEO_SIZES[:, 4] / 1e6, rtol=1e-6)
    assert not final[4, 6:].any()
    np.testing.assert_allclose(final[5, 4:], [0.75, 0.5, 0.25, 0.0])
    assert final[2, 4] == pytest.approx(0.694424, abs=1e-6)  # 181801 B / 261.801 ms / 1000


# --------------------------------------------------------------------------- Pensieve reference
def _pensieve_cases(seed, n):
    cooked = random_cooked(np.random.default_rng(seed), n)
    return cooked, cooked_to_traceset(cooked)


@pytest.mark.parametrize("mode,cap,n_chunks", [("test", 60.0, 48), ("test", 10.0, 48),
                                               ("train", 60.0, 48), ("train", 12.0, 48),
                                               ("test", 20.0, 60)])
def test_pensieve_matches_the_literal_scalar_reference(mode, cap, n_chunks):
    """Random cooked traces (wrap-arounds, dead slots, sleeps), 3 episodes per copy; in train
    mode the start slots are read back and the env's noise factors injected into the
    reference. Delays to 1e-6 ms. 60-chunk episodes tile the 49-chunk video."""
    n_traces, n_envs = 9, 12
    cooked, traces = _pensieve_cases(17, n_traces)
    sampler = SequentialSampler(n_traces) if mode == "test" else None
    env = AbrVecEnv(traces, n_envs, sampler, mode=mode, seed=3, variant="pensieve",
                    buffer_cap_s=cap, n_chunks=n_chunks)
    obs, info = env.reset()

    def fresh(c):
        trace = int(env.current_traces[c])
        start = int(np.searchsorted(cooked[trace][0], env.trace_time[c]))  # forward slot
        assert cooked[trace][0][start] == env.trace_time[c]
        assert mode == "train" or start == 0
        return ScalarPensieve(cooked[trace], start + 1, n_chunks, cap_ms=cap * 1000), trace

    refs = [fresh(c) for c in range(n_envs)]
    periods = traces.constants["period"]
    seen = {"sleep": 0, "rebuf": 0, "wrap": 0, "autoreset": 0, "starts": set()}
    np.testing.assert_allclose(obs, np.stack([r.obs() for r, _ in refs]), atol=1e-6)
    rng = np.random.default_rng(0)
    for _ in range(3 * n_chunks):
        actions = rng.integers(0, 6, n_envs)
        obs, rew, term, trunc, info = env.step(actions)
        last = env.last_step()
        out = [r.step(int(a), last["delay_noise"][c]) for c, ((r, _), a)
               in enumerate(zip(refs, actions))]
        np.testing.assert_allclose(last["delay"] * 1000, [o["delay_ms"] for o in out],
                                   rtol=0, atol=1e-6)
        for key, got in [("rebuf", last["stall"]), ("buffer", last["buffer"]),
                         ("sleep", last["sleep"]), ("reward", rew)]:
            np.testing.assert_allclose(got, [o[key] for o in out], rtol=0, atol=1e-9)
        done = np.array([o["done"] for o in out])
        np.testing.assert_array_equal(term, done)
        assert not trunc.any()
        clocks = np.array([r.clock for r, _ in refs])
        np.testing.assert_allclose(np.where(done, clocks, env.trace_time), clocks, atol=1e-9)
        seen["sleep"] += int((last["sleep"] > 0).sum())
        seen["rebuf"] += int((last["stall"] > 0).sum())
        seen["wrap"] += int((clocks > periods[[t for _, t in refs]]).sum())
        ref_obs = np.stack([r.obs() for r, _ in refs])
        if done.any():
            seen["autoreset"] += int(done.sum())
            np.testing.assert_allclose(info["final_obs"], ref_obs, atol=1e-6)
            refs = [fresh(c) if d else ref for c, (ref, d) in enumerate(zip(refs, done))]
            seen["starts"] |= {int(np.searchsorted(cooked[t][0], env.trace_time[c]))
                               for c, (_, t) in enumerate(refs)}
            ref_obs = np.stack([r.obs() for r, _ in refs])
        np.testing.assert_allclose(obs, ref_obs, atol=1e-6)
        assert not obs.reshape(-1, 6, 8)[:, 4, 6:].any()
    assert seen["autoreset"] == 3 * n_envs
    assert min(seen["sleep"], seen["rebuf"], seen["wrap"]) >= 10, seen
    if mode == "train":
        assert len(seen["starts"]) > 3


def test_pensieve_noise_statistics_and_position():
    """U(0.9, 1.1) on the whole delay (RTT included), never moving the trace position."""
    cooked, traces = _pensieve_cases(5, 6)
    env = AbrVecEnv(traces, 64, mode="train", seed=0, variant="pensieve")
    env.reset()
    factors = []
    for _ in range(96):
        before = env.trace_time
        *_, term, _, _ = env.step(np.random.default_rng(1).integers(0, 6, 64))
        last = env.last_step()
        noise = last["delay_noise"]
        moved = env.trace_time - last["sleep"] - before  # download time only
        keep = ~term
        np.testing.assert_allclose((moved[keep] + 0.08) * noise[keep], last["delay"][keep],
                                   rtol=1e-9)
        factors.append(noise)
    f = np.concatenate(factors)
    assert f.min() >= 0.9 and f.max() <= 1.1
    assert abs(f.mean() - 1.0) < 0.004 and abs(f.std() - 0.2 / math.sqrt(12)) < 0.003
    assert f.min() < 0.901 and f.max() > 1.099
    test_env = AbrVecEnv(traces, mode="test", variant="pensieve")
    test_env.reset()
    test_env.step(np.zeros(6, dtype=int))
    assert (test_env.last_step()["delay_noise"] == 1.0).all()


# --------------------------------------------------------------------------- Gelato reference
@pytest.mark.parametrize("kind", ["irregular", "boundaries", "period", "history6"])
def test_gelato_test_mode_equals_the_scalar_reference(kind):
    """Test mode, exact: 3 episodes per copy, random actions, against the loop reference.
    "boundaries": grid traces whose downloads end exactly on slot boundaries; "period": traces
    with a period constant; "history6": 6 history rows (18 stalls) and other QoE weights."""
    rng = np.random.default_rng(11)
    n_traces, n_envs = 10, 8
    traces = random_puffer(rng, n_traces, 25, 45, grid=kind == "boundaries",
                           period=kind == "period")
    params = {"history_len": 6, "quality_weight": 0.5, "rebuf_weight": 30.0,
              "change_weight": 2.0} if kind == "history6" else {}
    env = AbrVecEnv(traces, n_envs, mode="test", min_chunks=25, **params)
    ref_kw = {"history_len": 6, "weights": (0.5, 30.0, 2.0)} if params else {}
    order = SequentialSampler(n_traces)
    obs, _ = env.reset()
    refs = [ScalarPuffer(traces, int(t), 0, **ref_kw) for t in order.sample_many(n_envs)]
    seen = {"skip": 0, "cap": 0, "stall": 0, "wrap": 0, "autoreset": 0, "boundary": 0}
    periods = env._sim._tables.period
    while seen["autoreset"] < 3 * n_envs:
        actions = rng.integers(0, 10, n_envs)
        obs, rew, term, trunc, info = env.step(actions)
        last = env.last_step()
        out = [r.step(int(a)) for r, a in zip(refs, actions)]
        for key, got in [("delay", last["delay"]), ("stall", last["stall"]),
                         ("buffer", last["buffer"]), ("sleep", last["sleep"]),
                         ("raw", last["reward"]), ("rt", rew), ("quality", last["quality"]),
                         ("change", last["change"])]:
            np.testing.assert_allclose(got, [o[key] for o in out], rtol=0, atol=1e-9)
        done = np.array([o["done"] for o in out])
        np.testing.assert_array_equal(term, done)
        assert not trunc.any()
        clocks = np.array([r.clock for r in refs])
        np.testing.assert_allclose(np.where(done, clocks, env.trace_time), clocks, atol=1e-9)
        seen["skip"] += int((last["sleep"] > 1e-6).sum())
        seen["cap"] += int((last["buffer"] == 15.0).sum())
        seen["stall"] += int((last["stall"] > 0).sum())
        seen["wrap"] += int((clocks > periods[[r.trace for r in refs]]).sum())
        seen["boundary"] += int((np.abs(clocks * 2 - np.round(clocks * 2)) < 1e-9).sum())
        ref_obs = np.stack([r.obs() for r in refs])
        if done.any():
            seen["autoreset"] += int(done.sum())
            np.testing.assert_allclose(info["final_obs"], ref_obs, atol=1e-6)
            new = iter(order.sample_many(int(done.sum())))
            refs = [ScalarPuffer(traces, int(next(new)), 0, **ref_kw) if d else r
                    for r, d in zip(refs, done)]
            np.testing.assert_array_equal(info["trace"], [r.trace for r in refs])
            ref_obs = np.stack([r.obs() for r in refs])
        np.testing.assert_allclose(obs, ref_obs, atol=1e-6)
    for key in ("skip", "cap", "stall", "wrap"):
        assert seen[key] >= 10, seen
    if kind == "boundaries":
        assert seen["boundary"] >= 50, seen


def test_gelato_train_mode_equals_the_reference_with_injected_noise():
    """Train mode: random starts (read back), the env's noise factors fed to the reference."""
    rng = np.random.default_rng(12)
    traces = random_puffer(rng, 7, 40, 60)
    env = AbrVecEnv(traces, 6, mode="train", seed=5, min_chunks=30)
    obs, _ = env.reset()

    def fresh(c):
        return ScalarPuffer(traces, int(env.current_traces[c]), int(env.chunk_index[c]))

    refs = [fresh(c) for c in range(6)]
    np.testing.assert_allclose(obs, np.stack([r.obs() for r in refs]), atol=1e-6)
    starts, capped, finished = set(), 0, 0
    for _ in range(200):
        actions = rng.integers(0, 10, 6)
        obs, rew, term, trunc, info = env.step(actions)
        last = env.last_step()
        out = [r.step(int(a), last["delay_noise"][c], last["buffer_noise"][c])
               for c, (r, a) in enumerate(zip(refs, actions))]
        for key, got in [("delay", last["delay"]), ("stall", last["stall"]),
                         ("buffer", last["buffer"]), ("sleep", last["sleep"]),
                         ("rt", rew)]:
            np.testing.assert_allclose(got, [o[key] for o in out], rtol=0, atol=1e-9)
        done = np.array([o["done"] for o in out])
        np.testing.assert_array_equal(term, done)
        capped += int(((last["sleep"] > 0) & (last["buffer_noise"] != 1.0)).sum())
        ref_obs = np.stack([r.obs() for r in refs])
        if done.any():
            finished += int(done.sum())
            np.testing.assert_allclose(info["final_obs"], ref_obs, atol=1e-6)
            refs = [fresh(c) if d else r for c, (r, d) in enumerate(zip(refs, done))]
            starts |= {r.vidx for r in refs}
            ref_obs = np.stack([r.obs() for r in refs])
        np.testing.assert_allclose(obs, ref_obs, atol=1e-6)
    assert finished >= 10 and len(starts) > 3 and capped > 10


def test_gelato_noise_statistics_and_position():
    rng = np.random.default_rng(13)
    traces = random_puffer(rng, 8, 100, 120)
    env = AbrVecEnv(traces, 64, mode="train", seed=1)
    env.reset()
    delay_f, buffer_f = [], []
    for _ in range(150):
        before = env.trace_time
        *_, term, _, _ = env.step(rng.integers(0, 10, 64))
        last = env.last_step()
        keep = ~term
        moved = env.trace_time - last["sleep"] - before  # the noiseless download time
        np.testing.assert_allclose(moved[keep] * last["delay_noise"][keep],
                                   last["delay"][keep], rtol=1e-9)
        cap = last["sleep"] > 0
        np.testing.assert_allclose(last["buffer"][cap], 15.0 * last["buffer_noise"][cap])
        delay_f.append(last["delay_noise"])
        buffer_f.append(last["buffer_noise"])
    d, b = np.concatenate(delay_f), np.concatenate(buffer_f)
    assert d.min() == 0.95 and d.max() == 1.05  # clipped N(1, 0.03)
    assert abs(d.mean() - 1.0) < 0.003 and 0.027 < d.std() < 0.031
    assert abs(np.mean(d == 1.05) - 0.048) < 0.015  # P(z > 5/3) = 0.048
    assert b.min() >= 0.98 and b.max() <= 1.02 and abs(b.std() - 0.005) < 0.0005


# --------------------------------------------------------------------------- Gymnasium API
@pytest.mark.filterwarnings("ignore:.*maximum value is infinity")  # Pensieve's rows 2-3
def test_single_envs_pass_the_env_checker():
    puffer = random_puffer(np.random.default_rng(14), 4, 90, 100)
    cooked = cooked_to_traceset(random_cooked(np.random.default_rng(15), 4))
    for variant, traces in [("gelato", puffer), ("pensieve", cooked)]:
        for mode in ("train", "test"):
            env = AbrEnv(traces, mode=mode, seed=0, variant=variant)
            check_env(env, skip_render_check=True)
            assert env.obs_layout == env.vec.obs_layout
        env = AbrEnv(traces, mode="test", variant=variant)
        assert [env.reset()[1]["trace"] for _ in range(3)] == [0, 1, 2]
        assert env.reset(seed=0)[1]["trace"] == 0
        obs, info = env.reset(seed=1)
        total, done, steps = 0.0, False, 0
        while not done:
            obs, r, term, trunc, step_info = env.step(0)
            total, done, steps = total + r, term or trunc, steps + 1
        assert step_info["episode"]["length"] == steps
        assert step_info["episode"]["return_transformed"] == pytest.approx(total)
        assert set(step_info["episode"]) == set(EPISODE_FIELDS)
        with pytest.raises(RuntimeError, match="reset"):
            env.step(0)
        with pytest.raises(ValueError, match="action"):
            env.reset()
            env.step(env.action_space.n)


@pytest.mark.parametrize("variant", ["gelato", "pensieve"])
def test_autoreset_final_obs_masks_and_sampler_updates(variant):
    rng = np.random.default_rng(16)
    if variant == "gelato":
        traces = random_puffer(rng, 5, 12, 20)
        kwargs = {"min_chunks": 10}
    else:
        traces = cooked_to_traceset(random_cooked(rng, 5))
        kwargs = {"n_chunks": 6}
    sampler = RecordingSampler(5, np.random.default_rng(0))
    n = 4
    env = AbrVecEnv(traces, n, sampler, mode="train", seed=2, variant=variant, **kwargs)
    assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    assert isinstance(env, gym.vector.VectorEnv) and env.trace_set is traces
    obs, info = env.reset()
    reset_obs = obs.copy()
    per_copy = [[] for _ in range(n)]
    finished = []
    prev = None
    for step in range(60):
        traces_before = env.current_traces.copy()
        sampler.events.clear()
        obs, rew, term, trunc, info = env.step(rng.integers(0, env.n_levels, n))
        assert not np.shares_memory(obs, env._sim.obs) and obs in env.observation_space
        assert prev is None or not np.shares_memory(prev, rew)
        prev = rew
        np.testing.assert_array_equal(info["_trace"], np.ones(n, bool))
        np.testing.assert_array_equal(env.last_step()["trace"], traces_before)
        for c in range(n):
            per_copy[c].append(rew[c])
        done = term | trunc
        if not done.any():
            assert "episode" not in info and "final_obs" not in info
            continue
        np.testing.assert_array_equal(info["_episode"], done)
        np.testing.assert_array_equal(info["_final_obs"], done)
        assert set(info["episode"]) == set(EPISODE_FIELDS)
        for key in EPISODE_FIELDS:
            assert not info["episode"][key][~done].any()
        # Updates for every finished episode, then one draw for the copies that restart.
        ended = np.flatnonzero(done)
        assert sampler.events == [("update", int(traces_before[c])) for c in ended] + [
            ("sample", len(ended))]
        for c in ended:
            ep = {k: v[c] for k, v in info["episode"].items()}
            rewards = np.array(per_copy[c])
            assert ep["length"] == len(rewards) and ep["trace"] == traces_before[c]
            assert ep["return_transformed"] == pytest.approx(rewards.sum())
            assert ep["video_seconds"] == pytest.approx(len(rewards) * env._sim.chunk_seconds)
            finished.append((int(traces_before[c]), rewards))
            per_copy[c] = []
            layout = env.obs_layout
            new = obs[c].reshape(layout)
            # The returned row is the new episode's first observation: empty history.
            if variant == "gelato":
                assert not new[:, :6].any() and new[:5, 6:].any()
                assert info["final_obs"][c].reshape(layout)[:, :5].any()
            else:
                assert not np.delete(new, 4, axis=0).any()
                np.testing.assert_array_equal(new, reset_obs[0].reshape(layout))
                assert info["final_obs"][c].reshape(layout)[5, -1] == 0.0  # no chunk left
        assert info["trace"][ended].tolist() == env.current_traces[ended].tolist()
    assert len(finished) >= 8
    assert len(sampler.calls) == len(finished)
    for (trace, rewards, stats), (exp_trace, exp_rewards) in zip(sampler.calls, finished):
        assert trace == exp_trace and stats == {} and rewards.dtype == np.float64
        np.testing.assert_array_equal(rewards, exp_rewards)


def test_training_episodes_are_truncated_at_max_steps():
    """A 600-chunk trace started within 0..4 would take >= 591 steps: training truncates at
    500 (truncated, not terminated, unlike the reference's 501 terminated steps)."""
    rng = np.random.default_rng(18)
    traces = random_puffer(rng, 1, 600, 600)
    sampler = RecordingSampler(1, np.random.default_rng(0))
    env = AbrVecEnv(traces, 2, sampler, mode="train", seed=0, min_chunks=595)
    assert env.max_steps == 500
    env.reset()
    for step in range(1, 501):
        obs, rew, term, trunc, info = env.step(rng.integers(0, 10, 2))
        assert not term.any()
        assert trunc.all() == (step == 500) and trunc.any() == (step == 500)
    np.testing.assert_array_equal(info["episode"]["length"], [500, 500])
    np.testing.assert_array_equal(info["_final_obs"], [True, True])
    assert [len(r) for _, r, _ in sampler.calls] == [500, 500]
    assert not obs.reshape(2, 10, 26)[:, :, :6].any()  # restarted
    # No limit in test mode (the default max_steps=None there) or when switched off.
    for env in (AbrVecEnv(traces, 1, mode="test", min_chunks=595),
                AbrVecEnv(traces, 1, mode="train", seed=0, min_chunks=595, max_steps=None)):
        env.reset()
        start = int(env.chunk_index[0])
        for _ in range(600 - 5 - start):
            *_, term, trunc, info = env.step(np.zeros(1, dtype=int))
            assert not trunc.any()
        assert term.all() and info["episode"]["length"][0] == 595 - start


@pytest.mark.parametrize("variant", ["gelato", "pensieve"])
def test_seeding_is_deterministic_and_reset_reseeds(variant):
    rng = np.random.default_rng(19)
    if variant == "gelato":
        traces, kwargs = random_puffer(rng, 6, 30, 40), {"min_chunks": 25}
    else:
        traces, kwargs = cooked_to_traceset(random_cooked(rng, 6)), {"n_chunks": 10}
    acts = np.random.default_rng(0).integers(0, 6, (40, 5))

    def rollout(env, seed=None):
        out = [env.reset(seed=seed)[0]]
        for a in acts:
            obs, rew, *_ = env.step(a)
            out += [obs, rew]
        return out

    make = lambda seed: AbrVecEnv(traces, 5, seed=seed, variant=variant, **kwargs)  # noqa
    a, b = rollout(make(11)), rollout(make(np.random.SeedSequence(11)))
    env = make(99)
    c, d = rollout(env), rollout(env, seed=11)
    for x, y, z in zip(a, b, d):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)
    assert any(not np.array_equal(x, z) for x, z in zip(a, c))
    ss = np.random.SeedSequence(3)
    make(ss)
    assert ss.n_children_spawned == 0


# --------------------------------------------------------------------------- errors
def test_bad_input_raises(gelato_tiny):
    bare = TraceSet("bare", dict(gelato_tiny.series), gelato_tiny.lengths)
    with pytest.raises(ValueError, match=r"chunk_sizes.*variant='pensieve'"):
        AbrVecEnv(bare, 2)
    no_ssim = TraceSet("x", dict(gelato_tiny.series), gelato_tiny.lengths,
                       chunks={"chunk_sizes": gelato_tiny.chunks["chunk_sizes"]})
    with pytest.raises(ValueError, match="ssim_db"):
        AbrVecEnv(no_ssim, 2, min_chunks=12)
    AbrVecEnv(bare, 2, variant="pensieve")  # bandwidth-only traces play in Pensieve's setting
    wrong = TraceSet("w", dict(gelato_tiny.series), gelato_tiny.lengths, chunks={
        "chunk_sizes": np.ones((2, 12, 6)), "ssim_db": np.ones((2, 12, 6))})
    with pytest.raises(ValueError, match="shape"):
        AbrVecEnv(wrong, 2, min_chunks=12)
    zero = TraceSet("z", dict(gelato_tiny.series), gelato_tiny.lengths, chunks={
        "chunk_sizes": np.zeros((2, 12, 10)), "ssim_db": np.ones((2, 12, 10))})
    with pytest.raises(ValueError, match="chunk size"):
        AbrVecEnv(zero, 2, min_chunks=12)
    # A trace shorter than min_chunks is refused, naming it.
    j = np.arange(10)
    sizes = [np.tile(0.1 * (j + 1), (k, 1)) for k in (90, 50)]
    short = puffer_traces([np.arange(90.0), np.arange(50.0)], [np.ones(90), np.ones(50)],
                          sizes, [s * 10 for s in sizes], ids=["long-stream", "tiny-stream"])
    with pytest.raises(ValueError, match="'tiny-stream' has 50 chunks.*min_chunks=86"):
        AbrVecEnv(short, 2)
    AbrVecEnv(short, 2, min_chunks=50)
    with pytest.raises(ValueError, match="mode"):
        AbrVecEnv(gelato_tiny, 2, mode="eval", min_chunks=12)
    with pytest.raises(ValueError, match="variant"):
        AbrVecEnv(gelato_tiny, 2, variant="park", min_chunks=12)
    with pytest.raises(ValueError, match="n_envs"):
        AbrVecEnv(gelato_tiny, min_chunks=12)  # required in train mode
    with pytest.raises(TypeError, match="rebuf_penalty.*valid"):
        AbrVecEnv(gelato_tiny, 2, min_chunks=12, rebuf_penalty=4.3)
    for bad in [{"max_buffer": 0.0}, {"history_len": 4}, {"max_steps": 0},
                {"chunk_seconds": -1.0}, {"rebuf_weight": float("nan")}, {"min_chunks": 5}]:
        with pytest.raises(ValueError, match=next(iter(bad))):
            AbrVecEnv(gelato_tiny, 2, **{"min_chunks": 12, **bad})
    for bad in [{"n_chunks": 0}, {"link_rtt_ms": -1.0}, {"buffer_cap_s": 0.0}]:
        with pytest.raises(ValueError, match=next(iter(bad))):
            AbrVecEnv(bare, 2, variant="pensieve", **bad)
    with pytest.raises(ValueError, match="sampler covers"):
        AbrVecEnv(gelato_tiny, 2, SequentialSampler(5), min_chunks=12)
    env = AbrVecEnv(gelato_tiny, 2, mode="test", min_chunks=12)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(2, dtype=int))
    env.reset()
    with pytest.raises(ValueError, match="actions"):
        env.step(np.array([0, 10]))
    with pytest.raises(ValueError, match="actions"):
        env.step(np.array([-1, 0]))
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(3, dtype=int))
    with pytest.raises(ValueError, match="integer"):
        env.step(np.array([0.5, 1.0]))
    env.step(np.array([1.0, 9.0]))  # integral floats are accepted
    penv = AbrVecEnv(bare, 2, mode="test", variant="pensieve")
    penv.reset()
    with pytest.raises(ValueError, match="actions"):
        penv.step(np.array([0, 6]))
