"""Benchmark: per-draw cost of Plume-Dynamic's ``sample()`` over a realistic training run.

Run from the repository root::

    python benchmarks/bench_sampling.py [--episodes 60000] [--traces 1000] [--clusters 4]

Single-threaded on purpose: the thread-count variables are set before numpy and torch are
imported, ``torch.set_num_threads(1)``, and where the OS allows the process is pinned to one CPU.

The run: 1,000 traces in 4 soft clusters with 6 features; every episode draws a trace, then
feeds ``update`` ~95 per-step rewards (90-100) whose level depends on the cluster, with the
reference's TraceBench schedule (predictor trains every 250 recorded episodes, recompute every
1,125 prioritised draws after 2,250), so recomputes and training rounds happen during the
timed run. Each call is timed on its own (``perf_counter_ns``; the timer's own cost is printed).

Same-process baselines:

* ``UniformSampler.sample()`` (one ``rng.integers`` per draw);
* the reference's per-draw approach: ``weighted_sample`` = uniform with probability ε, else
  ``rng.choice(n, p=p)`` on the full probability vector (without the reference's Ray round
  trips, which only add to its cost).

Also reported: the vectorised ``sample_many(16)`` (one call per 16 episode starts, as a batched
environment does) and the amortised cost of ``update`` (including predictor training).
Target: Plume-Dynamic ``sample()`` < 20 µs per draw amortised.
"""

from __future__ import annotations

import os

import single_thread  # noqa: F401,E402  (one thread; must precede numpy)

import argparse
import time

import numpy as np
import torch


from plume.sampling import PlumeDynamicSampler, UniformSampler

TARGET_US = 20.0


def make_problem(n: int, k: int, seed: int = 0):
    gen = np.random.default_rng(seed)
    sizes = np.array([0.55, 0.25, 0.15, 0.05][:k] if k <= 4 else np.full(k, 1.0 / k))
    sizes = sizes / sizes.sum()
    labels = gen.choice(k, size=n, p=sizes)
    labels[:k] = np.arange(k)  # no empty cluster
    memberships = np.eye(k)[labels] * 0.85 + gen.dirichlet(np.ones(k), size=n) * 0.15
    features = gen.normal(size=(n, 6)) + labels[:, None] * np.linspace(0.5, 2.0, 6)
    # a pool of reward sequences per cluster (length 90-100): generated once, outside timing
    pool = [
        [np.clip(gen.normal(0.2 * (c + 1), 0.3 + 0.2 * c, size=gen.integers(90, 101)), -2, 1.45)
         for _ in range(64)]
        for c in range(k)
    ]
    return labels, memberships, features, pool


def timer_overhead_ns(repeats: int = 200_000) -> float:
    clock = time.perf_counter_ns
    total = 0
    for _ in range(repeats):
        t0 = clock()
        total += clock() - t0
    return total / repeats


def run_dynamic(n, k, episodes, seed, labels, memberships, features, pool):
    """Scalar draws, each followed by its episode's update; returns per-call timings."""
    s = PlumeDynamicSampler(n, np.random.default_rng(seed), memberships, features)
    clock = time.perf_counter_ns
    sample_ns = np.empty(episodes, dtype=np.int64)
    update_ns = np.empty(episodes, dtype=np.int64)
    recompute = np.zeros(episodes, dtype=bool)
    for e in range(episodes):
        before = len(s.history)
        t0 = clock()
        i = s.sample()
        t1 = clock()
        s.update(i, pool[labels[i]][e & 63])
        t2 = clock()
        sample_ns[e] = t1 - t0
        update_ns[e] = t2 - t1
        recompute[e] = len(s.history) != before
    return s, sample_ns, update_ns, recompute


def run_dynamic_batched(n, k, episodes, seed, labels, memberships, features, pool, batch=16):
    s = PlumeDynamicSampler(n, np.random.default_rng(seed), memberships, features)
    clock = time.perf_counter_ns
    total = 0
    e = 0
    while e < episodes:
        t0 = clock()
        idx = s.sample_many(batch)
        total += clock() - t0
        for i in idx.tolist():
            s.update(i, pool[labels[i]][e & 63])
            e += 1
    return s, total / e


def run_uniform(n, draws, seed):
    s = UniformSampler(n, np.random.default_rng(seed))
    clock = time.perf_counter_ns
    out = np.empty(draws, dtype=np.int64)
    for d in range(draws):
        t0 = clock()
        s.sample()
        out[d] = clock() - t0
    return out


def run_choice(p, draws, seed, epsilon=0.1):
    """The reference's weighted_sample: uniform with probability ε, else choice(n, p=p)."""
    gen = np.random.default_rng(seed)
    n = p.size
    clock = time.perf_counter_ns
    out = np.empty(draws, dtype=np.int64)
    for d in range(draws):
        t0 = clock()
        if gen.random() < epsilon:
            int(gen.choice(n))
        else:
            int(gen.choice(n, p=p))
        out[d] = clock() - t0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=60_000)
    parser.add_argument("--traces", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=4)
    parser.add_argument("--baseline-draws", type=int, default=60_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})

    n, k = args.traces, args.clusters
    labels, memberships, features, pool = make_problem(n, k, args.seed)
    overhead = timer_overhead_ns()

    s, sample_ns, update_ns, recompute = run_dynamic(n, k, args.episodes, args.seed, labels, memberships,
                                          features, pool)
    _, batched_ns = run_dynamic_batched(n, k, args.episodes, args.seed, labels, memberships,
                                         features, pool)
    uni_ns = run_uniform(n, args.baseline_draws, args.seed)
    choice_ns = run_choice(s.prioritised_probabilities(), args.baseline_draws, args.seed,
                           s.epsilon)

    dyn = sample_ns.mean() / 1e3
    cho = choice_ns.mean() / 1e3
    print(f"Plume-Dynamic sampling benchmark: {n} traces, {k} clusters, {args.episodes} episodes "
          f"(~95 rewards each), 1 thread")
    print(f"run: {len(s.history)} recomputes, {s.train_rounds} training rounds "
          f"({s.train_steps} Adam steps), {s.prioritised_draws} prioritised + "
          f"{s.uniform_draws} uniform draws; final cluster weights "
          f"{np.array2string(s.cluster_weights(), precision=3)}")
    print(f"timer overhead per measured call: {overhead:.0f} ns (included below)")
    print()
    print(f"{'per draw':<44} {'mean us':>9} {'median us':>10} {'max us':>9} {'vs uniform':>11}")
    rows = [
        ("plume_dynamic.sample() (incl. recomputes)", sample_ns),
        ("UniformSampler.sample()", uni_ns),
        ("rng.choice(n, p=p) + eps (reference)", choice_ns),
    ]
    for label, ns in rows:
        print(f"{label:<44} {ns.mean() / 1e3:>9.2f} {np.median(ns) / 1e3:>10.2f} "
              f"{ns.max() / 1e3:>9.1f} {ns.mean() / uni_ns.mean():>10.2f}x")
    print(f"{'plume_dynamic.sample_many(16), per draw':<44} {batched_ns / 1e3:>9.2f} "
          f"{'-':>10} {'-':>9} {batched_ns / uni_ns.mean():>10.2f}x")
    print()
    if recompute.any():
        rc = sample_ns[recompute]
        rest = sample_ns[~recompute]
        print(f"sample() calls that recomputed ({int(recompute.sum())}): mean {rc.mean() / 1e3:.0f} us "
              f"({rc.sum() / sample_ns.sum():.0%} of all sample() time); the others: mean "
              f"{rest.mean() / 1e3:.2f} us")
    print(f"update() per episode (incl. training): mean {update_ns.mean() / 1e3:.2f} us, "
          f"median {np.median(update_ns) / 1e3:.2f} us, max {update_ns.max() / 1e3:.0f} us")
    print(f"speed-up over the reference's per-draw rng.choice: {cho / dyn:.1f}x")
    print(f"target < {TARGET_US:.0f} us/draw amortised: "
          f"{'met' if dyn < TARGET_US else 'NOT met'} ({dyn:.2f} us)")


if __name__ == "__main__":
    main()
