"""Benchmark: TraceBench environment steps per second, batched vs per-copy.

Run from the repository root::

    python benchmarks/bench_env.py [--repeats 3] [--baseline-steps 20000]

Single-threaded on purpose: the thread-count variables are set before numpy is imported and,
where the OS allows, the process is pinned to one CPU. Random actions on TraceBench
``majority_fast`` train (training mode: random starts, delay and buffer noise, uniform trace
sampling, same-step autoreset, observation building and reward transform included). Compares

* ``plume.envs.TraceBenchVecEnv`` at N = 1, 16, 256 and 1024 copies;
* a per-copy scalar environment written below in the reference's structure (a Python
  download loop per chunk, numpy scalar noise draws, a deque frame stack and per-step
  ``np.concatenate``, as ``ToyABREnv`` + ``ToyABRWrapper``), stepped copy by copy in this
  process: the same-process baseline, so machine speed cancels out of its ratio;
* the authors' figure for their single-copy env + wrapper, 48,000 steps/s, measured on a
  machine like ours.

Each keyed-draws row (``train.crn``) gives its rate over the ordered env's at the same N.

Before timing, the scalar environment is checked against the batched one in test mode (no
noise): same rewards, delays and observations on 16 copies for two episodes.
"""

from __future__ import annotations


import single_thread  # noqa: F401,E402  (one thread; must precede numpy)

import argparse
import math
import statistics
import time
from collections import deque

import numpy as np


from plume.envs import TraceBenchVecEnv, transform_reward
from plume.traces import BITRATES, load_tracebench

REFERENCE_STEPS_PER_S = 48_000  # authors' single-copy env + wrapper, on a machine like ours
TARGET_N, TARGET_STEPS_PER_S = 256, 1_000_000
SIZES = (1, 16, 256, 1024)
KEYED_SIZES = (16, 256)  # the same env with train.crn's keyed draws
DATASET = ("majority_fast", "train")


# --------------------------------------------------------------------------------------
# Baseline: one copy at a time, in the reference's structure (ToyABREnv + ToyABRWrapper)
# --------------------------------------------------------------------------------------


class ScalarTraceBench:
    """One TraceBench copy stepped in Python. Same semantics as TraceBenchVecEnv (forward
    throughput convention, looping trace, sleep drained across slots, first chunk without
    stall, noise in training only, transformed reward, 53-value observation)."""

    SPAN = transform_reward(6.0) + 2.0

    def __init__(self, traces, rng, train=True, history_len=10, min_trace_len=90):
        self.traces, self.rng, self.train = traces, rng, train
        self.history_len, self.min_trace_len = history_len, min_trace_len
        self.bitrates = [float(b) for b in BITRATES]
        self.max_obs = np.array([6.0, 6.0, 20.0, 15.0, self.SPAN])

    def reset(self, trace: int) -> np.ndarray:
        length = int(self.traces.lengths[trace])
        self.time = self.traces.time[trace, :length]
        self.bw = self.traces.bandwidth[trace, :length]
        self.sizes = self.traces.chunks["video_sizes"][trace]
        n_starts = max(min(length, len(self.sizes)) - self.min_trace_len, 1)
        start = int(self.rng.integers(n_starts)) if self.train else 0
        self.trace, self.ptr, self.vidx = trace, start, start
        self.left = self.slot_len(start)
        self.buffer = None
        self.history = deque([np.zeros(5)] * self.history_len, maxlen=self.history_len)
        self.next_sizes = np.clip(self.sizes[self.vidx] / 6.0, 0.0, 1.0)
        return self.observe()

    def slot_len(self, j: int) -> float:
        return 1.0 if j == len(self.time) - 1 else self.time[j + 1] - self.time[j]

    def advance(self) -> None:
        self.ptr = 0 if self.ptr + 1 == len(self.time) else self.ptr + 1
        self.left = self.slot_len(self.ptr)

    def observe(self) -> np.ndarray:
        return np.concatenate((np.array(self.history).flatten(), self.next_sizes)).astype(
            np.float32
        )

    def step(self, action: int):
        size = self.sizes[self.vidx, action]
        remaining, delay = size, 0.0
        while remaining > 1e-8:
            if self.left <= 0:
                self.advance()
            throughput = self.bw[self.ptr]
            used = self.left if throughput == 0 else min(self.left, remaining / throughput)
            remaining -= throughput * used
            self.left -= used
            delay += used
        if self.train:
            delay *= np.clip(1 + self.rng.normal(0, 0.03), 0.95, 1.05)
        if self.buffer is None:
            stall, self.buffer = 0.0, 0.0
        else:
            stall = float(np.clip(delay - self.buffer, 0, 100))
        self.buffer = max(self.buffer - delay, 0.0) + 2.0
        if self.buffer > 15.0:
            self.left -= self.buffer - 15.0
            while self.left < 0:  # the sleep drains across slots
                carry = self.left
                self.advance()
                self.left += carry
            noise = np.clip(1 + self.rng.normal(0, 0.005), 0.98, 1.02) if self.train else 1.0
            self.buffer = 15.0 * noise
        quality = self.bitrates[action]
        raw = quality - 6.0 * stall
        reward = transform_reward(raw)
        row = np.array([quality, size, delay, self.buffer, reward + 2.0])
        self.history.append(np.clip(row / self.max_obs, 0.0, 1.0))
        self.vidx += 1
        self.next_sizes = np.clip(self.sizes[self.vidx] / 6.0, 0.0, 1.0)
        done = self.vidx + 1 == len(self.sizes)
        return self.observe(), reward, done, delay


def scalar_steps_per_s(traces, n_copies: int, steps: int, seed: int = 0) -> float:
    """Step ``n_copies`` scalar envs one by one (random actions, uniform traces, autoreset)."""
    rng = np.random.default_rng(seed)
    envs = [ScalarTraceBench(traces, np.random.default_rng(seed + 1 + i)) for i in range(n_copies)]
    for env in envs:
        env.reset(int(rng.integers(len(traces))))
    actions = rng.integers(0, 3, (steps // n_copies + 1, n_copies)).tolist()
    rounds = steps // n_copies
    start = time.perf_counter()
    for t in range(rounds):
        row = actions[t]
        for i, env in enumerate(envs):
            _, _, done, _ = env.step(row[i])
            if done:
                env.reset(int(rng.integers(len(traces))))
    return rounds * n_copies / (time.perf_counter() - start)


def check_scalar_matches_batched(traces, n_copies: int = 16) -> float:
    """Test mode, two episodes per copy: max abs difference of rewards, delays and obs."""
    env = TraceBenchVecEnv(traces.subset(range(n_copies)), mode="test")
    obs, _ = env.reset()
    refs = [ScalarTraceBench(env.trace_set, None, train=False) for _ in range(n_copies)]
    ref_obs = np.stack([r.reset(i) for i, r in enumerate(refs)])
    worst = float(np.abs(obs - ref_obs).max())
    rng = np.random.default_rng(1)
    for _ in range(2 * (env.n_chunks - 1)):
        actions = rng.integers(0, 3, n_copies)
        obs, rewards, terminated, _, info = env.step(actions)
        out = [r.step(int(a)) for r, a in zip(refs, actions)]
        ref_obs = np.stack([o[0] for o in out])
        worst = max(
            worst,
            float(np.abs(rewards - [o[1] for o in out]).max()),
            float(np.abs(env.last_step()["delay"] - [o[3] for o in out]).max()),
        )
        if terminated.any():
            worst = max(worst, float(np.abs(info["final_obs"] - ref_obs).max()))
            ref_obs = np.stack([r.reset(i) for i, r in enumerate(refs)])
        worst = max(worst, float(np.abs(obs - ref_obs).max()))
    return worst


# --------------------------------------------------------------------------------------


def batched_steps_per_s(traces, n_envs: int, steps: int, repeats: int,
                        keyed: bool = False) -> list[float]:
    env = TraceBenchVecEnv(traces, n_envs, mode="train", seed=0)
    if keyed:  # train.crn: draws keyed by (seed, trace, visit)
        env.key_draws_by_visit()
    return single_thread.random_action_steps_per_s(env, 3, steps, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline-steps", type=int, default=20_000)
    args = parser.parse_args()

    pinned = single_thread.pin_to_one_cpu()

    traces = load_tracebench(*DATASET)
    mismatch = check_scalar_matches_batched(traces)
    scalar = [scalar_steps_per_s(traces, 16, args.baseline_steps) for _ in range(args.repeats)]
    scalar_best = max(scalar)

    print(
        f"TraceBench env, {DATASET[0]}/{DATASET[1]} ({len(traces)} traces), train mode, random "
        f"actions, 1 thread, pinned: {pinned}, numpy {np.__version__}"
    )
    print(f"sanity: scalar baseline == batched env in test mode, max abs diff {mismatch:.1e}")
    print()
    header = (
        f"{'implementation':<34} {'N':>5} {'best steps/s':>13} {'median':>11} "
        f"{'us/call':>8} {'x scalar':>9} {'x authors':>9}"
    )
    print(header)
    print("-" * len(header))
    results = {}
    for n in SIZES:
        steps = int(min(max(1_000_000 // n, 2_000), 20_000))
        rates = batched_steps_per_s(traces, n, steps, args.repeats)
        best, median = max(rates), statistics.median(rates)
        results[n] = best
        print(
            f"{'TraceBenchVecEnv (batched)':<34} {n:>5} {best:>13,.0f} {median:>11,.0f} "
            f"{n / best * 1e6:>8.1f} {best / scalar_best:>9.1f} "
            f"{best / REFERENCE_STEPS_PER_S:>9.2f}"
        )
    print(
        f"{'scalar per-copy loop (this file)':<34} {16:>5} {scalar_best:>13,.0f} "
        f"{statistics.median(scalar):>11,.0f} {1e6 / scalar_best:>8.1f} {1.0:>9.1f} "
        f"{scalar_best / REFERENCE_STEPS_PER_S:>9.2f}"
    )
    print(
        f"{'authors env + wrapper (reported)':<34} {1:>5} {REFERENCE_STEPS_PER_S:>13,.0f} "
        f"{'-':>11} {1e6 / REFERENCE_STEPS_PER_S:>8.1f} "
        f"{REFERENCE_STEPS_PER_S / scalar_best:>9.1f} {1.0:>9.2f}"
    )
    for n in KEYED_SIZES:
        steps = int(min(max(1_000_000 // n, 2_000), 20_000))
        best = max(batched_steps_per_s(traces, n, steps, args.repeats, keyed=True))
        print(f"{'  keyed draws (train.crn)':<34} {n:>5} {best:>13,.0f} {'-':>11} "
              f"{n / best * 1e6:>8.1f} {best / scalar_best:>9.1f} "
              f"{best / REFERENCE_STEPS_PER_S:>9.2f}   x{best / results[n]:.2f} of ordered")
    print()
    best = results[TARGET_N]
    print(
        f"N={TARGET_N}: {best / REFERENCE_STEPS_PER_S:.1f}x the authors' {REFERENCE_STEPS_PER_S:,} "
        f"steps/s (single-copy env + wrapper, measured on a machine like ours), "
        f"{best / scalar_best:.1f}x the same-process scalar loop"
    )
    verdict = "met" if best >= TARGET_STEPS_PER_S else "NOT met"
    print(f"target >= {TARGET_STEPS_PER_S:,} steps/s at N={TARGET_N}: {verdict} ({best:,.0f})")
    if not math.isfinite(mismatch) or mismatch > 1e-6:
        raise SystemExit(f"scalar baseline and batched env disagree: {mismatch}")


if __name__ == "__main__":
    main()
