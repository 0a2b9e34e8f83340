"""Benchmark: generating all six TraceBench splits (6 x 1000 traces of 100 samples + video).

Run from the repository root::

    python benchmarks/bench_tracebench.py [--repeats 5] [--baseline-repeats 3]

Single-threaded on purpose: the thread-count variables are set before numpy is imported and,
where the OS allows, the process is pinned to one CPU. Compares

* ``plume.traces.generate_all`` (vectorised across traces, one loop over the 100 steps),
* the authors' figure for their generator: 5.5 s for all six splits, measured on a machine
  like ours (the reference draws every split from one stream, per trace and per step),
* a straightforward per-trace, per-step loop of the same generator written below, timed in
  this process (the same-process baseline, so machine speed cancels out of its ratio).
"""

from __future__ import annotations


import single_thread  # noqa: F401,E402  (one thread; must precede numpy)

import argparse
import statistics
import time

import numpy as np


from plume.traces import tracebench as tb

REFERENCE_SECONDS = 5.5  # authors' generator, all six splits, on a machine like ours


# --------------------------------------------------------------------------------------
# Baseline: the same generator, one trace and one step at a time (reference structure)
# --------------------------------------------------------------------------------------


def _loop_trace(rng: np.random.Generator, speed: tb.SpeedClass, var: tb.VarianceClass):
    levels = (speed.high, speed.low)
    windows = (var.window_high, var.window_low)
    throughput = np.empty(tb.TRACE_LEN)
    window, state = 0, 0
    for t in range(tb.TRACE_LEN):
        if window <= 1:
            window = -1
            while window < 0:
                state = 0 if rng.random() < var.p_high else 1
                window = int(np.round(rng.normal(windows[state].mean, windows[state].std)))
        else:
            window -= 1
        level = levels[state]
        throughput[t] = min(
            max(rng.normal(level.mean, level.std), tb.THROUGHPUT_CLIP[0]), tb.THROUGHPUT_CLIP[1]
        )
    video = np.empty((tb.TRACE_LEN, tb.BITRATES.size))
    for t in range(tb.TRACE_LEN):
        common = 1.0 + rng.normal(0.0, tb.COMMON_SIZE_NOISE_STD)
        per_bitrate = 1.0 + rng.normal(0.0, tb.PER_BITRATE_SIZE_NOISE_STD, tb.BITRATES.size)
        video[t] = tb.BITRATES * common * per_bitrate
    return throughput, video


def loop_generate_all(seed: int = tb.DATASET_SEED) -> dict[tuple[str, str], tuple]:
    children = np.random.SeedSequence(seed).spawn(len(tb.STREAM_ORDER))
    out = {}
    for child, (dataset, split) in zip(children, tb.STREAM_ORDER):
        rng = np.random.default_rng(child)
        n_fast, n_slow = tb.DATASETS[dataset]
        bandwidth, videos, labels = [], [], []
        for speed, count in ((tb.FAST, n_fast), (tb.SLOW, n_slow)):
            for _ in range(count // 2):
                for var in (tb.HIGH_VAR, tb.LOW_VAR):
                    throughput, video = _loop_trace(rng, speed, var)
                    bandwidth.append(throughput)
                    videos.append(video)
                    labels.append(f"{speed.name}_{var.name}")
        out[(dataset, split)] = (np.array(bandwidth), np.array(videos), np.array(labels))
    return out


# --------------------------------------------------------------------------------------


def _time(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline-repeats", type=int, default=3)
    args = parser.parse_args()

    pinned = single_thread.pin_to_one_cpu()

    tb.generate_all()  # warm-up (imports, first allocations)
    fast = _time(tb.generate_all, args.repeats)
    loop = _time(loop_generate_all, args.baseline_repeats)

    # Sanity: both implementations draw the same distribution.
    vec_all, loop_all = tb.generate_all(), loop_generate_all()
    vec_means = {
        k: np.mean([t.bandwidth[t.labels == k].mean() for t in vec_all.values()]) for k in tb.KINDS
    }
    loop_means = {
        k: np.mean([b[lab == k].mean() for b, _, lab in loop_all.values()]) for k in tb.KINDS
    }

    best, median = min(fast), statistics.median(fast)
    print(
        f"TraceBench: all six splits (6 x 1000 traces x {tb.TRACE_LEN} steps + video), "
        f"1 thread, pinned: {pinned}, numpy {np.__version__}"
    )
    print()
    print(f"{'implementation':<38} {'runs':>4} {'best s':>9} {'median s':>9}")
    print(
        f"{'plume.traces.generate_all (vectorised)':<38} {args.repeats:>4} "
        f"{best:>9.4f} {median:>9.4f}"
    )
    print(
        f"{'per-trace loop baseline (this file)':<38} {args.baseline_repeats:>4} "
        f"{min(loop):>9.4f} {statistics.median(loop):>9.4f}"
    )
    print(f"{'authors reference (reported)':<38} {'-':>4} {REFERENCE_SECONDS:>9.4f} {'-':>9}")
    print()
    print(
        f"speed-up vs {REFERENCE_SECONDS} s reference, measured on a machine like ours: "
        f"{REFERENCE_SECONDS / best:.1f}x (best), {REFERENCE_SECONDS / median:.1f}x (median)"
    )
    print(
        f"speed-up vs same-process per-trace loop: {min(loop) / best:.1f}x (best), "
        f"{statistics.median(loop) / median:.1f}x (median)"
    )
    print(f"target <= 0.5 s: {'met' if best <= 0.5 else 'NOT met'} (best {best:.3f} s)")
    print()
    print("mean throughput per kind over all splits (vectorised | loop):")
    for kind in tb.KINDS:
        print(f"  {kind:<14} {vec_means[kind]:.3f} | {loop_means[kind]:.3f}")


if __name__ == "__main__":
    main()
