"""Benchmark: congestion-control env steps (monitor intervals) per second, batched fluid model
vs the packet-level reference.

Run from the repository root::

    python benchmarks/bench_cc.py [--repeats 3] [--steps 2000]

Single-threaded on purpose: the thread-count variables are set before numpy is imported and,
where the OS allows, the process is pinned to one CPU. Random Aurora actions (N(0, 4), so
rates wander across the whole [40, 1000] pkt/s clip) in training mode (random initial rates,
uniform trace sampling, same-step autoreset with the two warm-up MIs, observation, reward
and sampler updates included) on ``aurora`` train (constant links) and ``cc_series`` train
(bandwidth series). Compares

* ``plume.envs.cc.sim.CcVecEnv`` at N = 1, 16, 256 and 1024 copies;
* the packet-level event simulator (``plume.envs.cc.packet``: PCC-RL's event loop, one Python
  event per packet) on the same links, in this process: the same-process baseline, so
  machine speed cancels out of the ratio.

Before timing, the fluid model's episode means are checked against the packet simulator on
six training links (the printed worst relative errors).
"""

from __future__ import annotations

import single_thread  # noqa: F401,E402,I001  (one thread; must precede numpy)

import argparse
import statistics
import time

import numpy as np

from plume.envs.cc.packet import Capacity, PacketLink
from plume.envs.cc.sim import CcVecEnv
from plume.traces.cc import load_cc_dataset

TARGET_N, TARGET_STEPS_PER_S = 256, 1_000_000
SIZES = (1, 16, 256, 1024)
DATASETS = ("aurora", "cc_series")


def batched_steps_per_s(traces, n_envs: int, steps: int, repeats: int) -> list[float]:
    """MIs per second (all copies) of the fluid env under fixed random rate changes."""
    env = CcVecEnv(traces, n_envs, mode="train", seed=0)
    actions = np.random.default_rng(0).normal(0.0, 4.0, (steps, n_envs, 1))
    return single_thread.random_action_steps_per_s(env, 0, steps, repeats, actions=actions)


def packet_links(traces, rows) -> list[tuple[Capacity, float, float, float]]:
    """(capacity, latency, queue, loss) of constant-link traces ``rows``."""
    c = traces.constants
    return [(Capacity(c["bandwidth"][i]), c["latency"][i], c["queue"][i], c["loss"][i])
            for i in rows]


def packet_steps_per_s(traces, n_links: int, mis: int) -> float:
    """MIs per second of the packet simulator, link after link (random actions)."""
    rng = np.random.default_rng(1)
    links = packet_links(traces, rng.choice(len(traces), n_links, replace=False))
    actions = rng.normal(0.0, 4.0, (n_links, mis))
    start = time.perf_counter()
    for (capacity, latency, queue, loss), row in zip(links, actions):
        sim = PacketLink(capacity, latency, queue, loss, rate=0.9 * capacity.bandwidth_at(0))
        sim.reset()
        for a in row:
            sim.step(a)
    return n_links * mis / (time.perf_counter() - start)


def fidelity(traces, rows, mis: int = 400) -> tuple[float, float]:
    """Worst relative error of the fluid model's mean throughput and RTT vs the packet sim
    (test mode, start at 0.9 x bandwidth, rate ramps)."""
    subset = traces.subset(rows)
    actions = np.array([[4.0, -4.0, 8.0, -6.0][(i // 20) % 4] for i in range(mis)])
    env = CcVecEnv(subset, mode="test", episode_mis=mis, init_rate_low=0.9,
                   init_rate_high=0.9)
    env.reset()
    thr, rtt = [], []
    for a in actions:
        env.step(np.full((len(rows), 1), a))
        thr.append(env.last_throughput.copy())
        rtt.append(env.last_rtt.copy())
    fluid_thr, fluid_rtt = np.mean(thr, axis=0), np.mean(rtt, axis=0)
    worst_thr = worst_rtt = 0.0
    for i, (capacity, latency, queue, loss) in enumerate(packet_links(subset, range(len(rows)))):
        sim = PacketLink(capacity, latency, queue, loss, rate=0.9 * capacity.bandwidth_at(0))
        sim.reset()
        mis_out = [sim.step(a) for a in actions]
        worst_thr = max(worst_thr, abs(fluid_thr[i] / np.mean([m.throughput for m in mis_out])
                                       - 1))
        worst_rtt = max(worst_rtt, abs(fluid_rtt[i] / np.mean([m.latency for m in mis_out]) - 1))
    return worst_thr, worst_rtt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    pinned = single_thread.pin_to_one_cpu()

    aurora = load_cc_dataset("aurora", "train")
    err_thr, err_rtt = fidelity(aurora, [0, 150, 300, 450, 600, 750])
    baseline = packet_steps_per_s(aurora, 20, 200)
    print(f"CC env (fluid Aurora model, 8 sub-steps per MI), train mode, random actions, "
          f"1 thread, pinned: {pinned}, numpy {np.__version__}")
    print(f"sanity: fluid vs packet sim on 6 aurora links, 400 MIs of rate ramps: worst "
          f"error of mean throughput {err_thr:.2%}, of mean RTT {err_rtt:.2%}")
    print(f"baseline: packet-level simulator, aurora links, {baseline:,.0f} MIs/s")
    print()
    print(f"{'dataset':<10} {'N':>5} {'best MIs/s':>12} {'median':>12} {'us/step':>8} "
          f"{'x packet':>9} {'x N=1':>7}")
    best_at_target = {}
    for name in DATASETS:
        traces = load_cc_dataset(name, "train")
        single = None
        for n in SIZES:
            steps = max(args.steps // max(n // 64, 1), 200)
            rates = batched_steps_per_s(traces, n, steps, args.repeats)
            best = max(rates)
            single = single or best
            if n == TARGET_N:
                best_at_target[name] = best
            print(f"{name:<10} {n:>5} {best:>12,.0f} {statistics.median(rates):>12,.0f} "
                  f"{n / best * 1e6:>8.1f} {best / baseline:>9.0f} {best / single:>7.1f}")
    print()
    verdict = "met" if best_at_target["aurora"] >= TARGET_STEPS_PER_S else "NOT met"
    print(f"target: >= {TARGET_STEPS_PER_S:,} MIs/s at N = {TARGET_N} on aurora: {verdict} "
          f"({best_at_target['aurora']:,.0f}); cc_series {best_at_target['cc_series']:,.0f}")


if __name__ == "__main__":
    main()
