"""Benchmark: load-balancing environment steps per second, batched vs Park's event loop.

Run from the repository root::

    python benchmarks/bench_lb.py [--repeats 3] [--baseline-steps 20000]

Single-threaded on purpose (thread variables set before numpy loads; the process pinned to
one CPU where the OS allows). Random actions on ``lb_mixed`` train (650-job traces, training
mode: uniform trace sampling, same-step autoreset, reward scaling, observation building).
Compares

* ``plume.envs.lb.LbVecEnv`` at N = 1, 16, 256 and 1024 copies;
* ``plume.envs.lb.reference.ReferenceLoadBalance``, Park's event-heap loop written out
  literally, stepped copy by copy in this process: the same-process baseline, so machine
  speed cancels out of the ratio.

Before timing, the batched env is checked against the reference in test mode: exact rewards
and observations on 16 traces, two episodes each.
"""

from __future__ import annotations

import single_thread  # noqa: F401,E402,I001  (one thread; must precede numpy)

import argparse
import statistics
import time

import numpy as np

from plume.envs.lb import LbVecEnv
from plume.envs.lb.reference import ReferenceLoadBalance
from plume.traces.lb import load_lb_dataset

TARGET_N, TARGET_STEPS_PER_S = 256, 500_000
SIZES = (1, 16, 256, 1024)
DATASET = ("lb_mixed", "train")
N_SERVERS = 10


def reference_of(traces, trace: int) -> ReferenceLoadBalance:
    n = traces.lengths[trace]
    return ReferenceLoadBalance(traces.series["interarrival"][trace, :n],
                                traces.series["job_size"][trace, :n])


def reference_steps_per_s(traces, steps: int, seed: int = 0) -> float:
    """Park's loop, one copy at a time over random traces, random actions, autoreset."""
    rng = np.random.default_rng(seed)
    actions = rng.integers(0, N_SERVERS, steps).tolist()
    env = reference_of(traces, int(rng.integers(len(traces))))
    start = time.perf_counter()
    for a in actions:
        if env.step(a)[2]:
            env = reference_of(traces, int(rng.integers(len(traces))))
    return steps / (time.perf_counter() - start)


def mismatches(traces, n_copies: int = 16) -> int:
    """Test mode, two episodes per copy: steps whose rewards or observations differ."""
    subset = traces.subset(range(n_copies))
    env = LbVecEnv(subset, mode="test")
    obs, _ = env.reset()
    refs = [reference_of(subset, i) for i in range(n_copies)]
    bad = int(not np.array_equal(obs, np.stack([r.reset() for r in refs]).astype(np.float32)))
    rng = np.random.default_rng(1)
    for _ in range(2 * int(subset.lengths.max())):
        actions = rng.integers(0, N_SERVERS, n_copies)
        obs, rewards, done, _, info = env.step(actions)
        out = [r.step(int(a)) for r, a in zip(refs, actions)]
        expected = np.stack([o[0] for o in out]).astype(np.float32)
        seen = np.where(done[:, None], info.get("final_obs", obs), obs)
        bad += int(not (np.array_equal(rewards, [o[1] for o in out])
                        and np.array_equal(seen, expected)))
        for i in np.flatnonzero(done):
            refs[i] = reference_of(subset, int(info["trace"][i]))
            refs[i].reset()
    return bad


def batched_steps_per_s(traces, n_envs: int, steps: int, repeats: int) -> list[float]:
    env = LbVecEnv(traces, n_envs, mode="train", seed=0, reward_scale=1e-3, obs_scale=1e-3)
    return single_thread.random_action_steps_per_s(env, N_SERVERS, steps, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline-steps", type=int, default=20_000)
    args = parser.parse_args()

    pinned = single_thread.pin_to_one_cpu()
    traces = load_lb_dataset(*DATASET)
    bad = mismatches(traces)
    baseline = [reference_steps_per_s(traces, args.baseline_steps, seed)
                for seed in range(args.repeats)]
    base = max(baseline)

    print(f"LB env, {DATASET[0]}/{DATASET[1]} ({len(traces)} traces of "
          f"{int(traces.lengths.max())} jobs), train mode, random actions, 1 thread, pinned: "
          f"{pinned}, numpy {np.__version__}")
    print(f"sanity: batched env == Park reference in test mode: {bad} mismatching steps")
    print()
    header = (f"{'implementation':<36} {'N':>5} {'best steps/s':>13} {'median':>11} "
              f"{'us/call':>8} {'x reference':>11}")
    print(header)
    print("-" * len(header))
    results = {}
    for n in SIZES:
        steps = int(min(max(1_000_000 // n, 2_000), 20_000))
        rates = batched_steps_per_s(traces, n, steps, args.repeats)
        results[n] = max(rates)
        print(f"{'LbVecEnv (batched)':<36} {n:>5} {results[n]:>13,.0f} "
              f"{statistics.median(rates):>11,.0f} {n / results[n] * 1e6:>8.1f} "
              f"{results[n] / base:>11.1f}")
    print(f"{'Park event loop (reference.py)':<36} {1:>5} {base:>13,.0f} "
          f"{statistics.median(baseline):>11,.0f} {1e6 / base:>8.1f} {1.0:>11.1f}")
    print()
    best = results[TARGET_N]
    print(f"N={TARGET_N}: {best / base:.1f}x the same-process Park event loop")
    verdict = "met" if best >= TARGET_STEPS_PER_S else "NOT met"
    print(f"target >= {TARGET_STEPS_PER_S:,} steps/s at N={TARGET_N}: {verdict} ({best:,.0f})")
    if bad:
        raise SystemExit(f"batched env and Park reference disagree on {bad} steps")


if __name__ == "__main__":
    main()
