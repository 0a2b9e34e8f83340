"""Benchmark: batched ABR simulator steps per second (gelato and pensieve variants), with
TraceBench measured in the same process as the baseline.

Run from the repository root::

    python benchmarks/bench_abr.py [--repeats 3]

Single-threaded on purpose: the thread-count variables are set before numpy is imported and,
where the OS allows, the process is pinned to one CPU. Random actions in training mode (random
starts, delay and buffer noise, uniform trace sampling, same-step autoreset, observation
building and reward transform included) on synthetic traces generated below with a fixed seed
(nothing is downloaded):

* gelato: 400 Puffer-like streams of 200-600 chunks (slots of about 2 s, per-stream lognormal
  throughput with means of 1-40 Mbit/s, 10 encodings of 0.1-5.5 Mbit/s with per-chunk size
  noise, SSIM 6-20 dB);
* pensieve: 127 cooked-like traces of 200-400 one-second slots, 0.2-8 Mbit/s, some dead slots;
* TraceBench ``majority_fast`` train (``plume.envs.TraceBenchVecEnv``), the baseline.

Target: >= 500,000 steps/s at N = 256 for both variants.
"""

from __future__ import annotations

import single_thread  # noqa: F401,E402  (one thread; must precede numpy)

import argparse
import statistics

import numpy as np

from plume.envs import TraceBenchVecEnv
from plume.envs.abr.sim import AbrVecEnv
from plume.traces import load_tracebench
from plume.traces.traceset import TraceSet

SIZES = (1, 256)
TARGET_N, TARGET_STEPS_PER_S = 256, 500_000
LADDER_MBPS = np.geomspace(0.1, 5.5, 10)


def puffer_like(seed: int = 0, n: int = 400) -> TraceSet:
    """Synthetic Puffer streams: time_sent about 2.002 s apart, throughput in Mbit/s, chunk
    sizes in MB and SSIM in dB of all 10 encodings (row i = chunk i)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(200, 601, n)
    width = int(lengths.max())
    gaps = np.clip(rng.normal(2.002, 0.4, (n, width)), 0.2, 20.0)
    time = np.concatenate([np.zeros((n, 1)), np.cumsum(gaps[:, :-1], axis=1)], axis=1)
    means = np.exp(rng.uniform(np.log(1.0), np.log(40.0), n))
    bandwidth = means[:, None] * rng.lognormal(-0.125, 0.5, (n, width))
    noise = rng.lognormal(0.0, 0.15, (n, width, 1))  # scene complexity, shared by encodings
    sizes = LADDER_MBPS * 2.002 / 8.0 * noise
    ssim = np.linspace(6.0, 20.0, 10) - 2.0 * np.log(noise)
    return TraceSet("bench/puffer-like", series={"time": time, "bandwidth": bandwidth},
                    lengths=lengths, chunks={"chunk_sizes": sizes, "ssim_db": ssim})


def cooked_like(seed: int = 1, n: int = 127) -> TraceSet:
    """Synthetic Pensieve-style traces, already in the forward convention (1-s slots)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(200, 401, n)
    width = int(lengths.max())
    time = np.tile(np.arange(width, dtype=float), (n, 1))
    bandwidth = rng.uniform(0.2, 8.0, (n, width))
    bandwidth[rng.random((n, width)) < 0.02] = 0.0
    bandwidth[:, 0] = 1.0
    return TraceSet("bench/cooked-like", series={"time": time, "bandwidth": bandwidth},
                    lengths=lengths)


def steps_per_s(make, n_envs: int, n_actions: int, repeats: int) -> list[float]:
    steps = int(min(max(500_000 // n_envs, 2_000), 20_000))
    return single_thread.random_action_steps_per_s(make(n_envs), n_actions, steps, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    pinned = single_thread.pin_to_one_cpu()

    puffer, cooked = puffer_like(), cooked_like()
    tracebench = load_tracebench("majority_fast", "train")
    cases = [
        ("AbrVecEnv gelato", 10,
         lambda n: AbrVecEnv(puffer, n, mode="train", seed=0, variant="gelato")),
        ("AbrVecEnv pensieve", 6,
         lambda n: AbrVecEnv(cooked, n, mode="train", seed=0, variant="pensieve")),
        ("TraceBenchVecEnv (baseline)", 3,
         lambda n: TraceBenchVecEnv(tracebench, n, mode="train", seed=0)),
    ]
    print(f"ABR env, train mode, random actions, 1 thread, pinned: {pinned}, "
          f"numpy {np.__version__}")
    print(f"gelato: {len(puffer)} puffer-like streams ({puffer.lengths.min()}-"
          f"{puffer.lengths.max()} chunks); pensieve: {len(cooked)} cooked-like traces; "
          f"baseline: TraceBench majority_fast/train ({len(tracebench)} traces)")
    print()
    header = (f"{'implementation':<30} {'N':>5} {'best steps/s':>13} {'median':>11} "
              f"{'us/call':>8} {'x TraceBench':>12}")
    print(header)
    print("-" * len(header))
    rates: dict[tuple[str, int], list[float]] = {}
    for n in SIZES:
        for name, n_actions, make in cases:
            rates[name, n] = steps_per_s(make, n, n_actions, args.repeats)
    best = {key: max(r) for key, r in rates.items()}
    for name, _, _ in cases:
        for n in SIZES:
            base = best[cases[-1][0], n]
            print(f"{name:<30} {n:>5} {best[name, n]:>13,.0f} "
                  f"{statistics.median(rates[name, n]):>11,.0f} {n / best[name, n] * 1e6:>8.1f} "
                  f"{best[name, n] / base:>12.2f}")
    print()
    for name, _, _ in cases[:2]:
        rate = best[name, TARGET_N]
        verdict = "met" if rate >= TARGET_STEPS_PER_S else "NOT met"
        print(f"{name}: target >= {TARGET_STEPS_PER_S:,} steps/s at N={TARGET_N}: {verdict} "
              f"({rate:,.0f}; {rate / best[cases[-1][0], TARGET_N]:.2f}x TraceBench)")


if __name__ == "__main__":
    main()
