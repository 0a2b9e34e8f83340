"""Import first in every benchmark: one BLAS/OpenMP thread (set before numpy loads) and the
repository root on sys.path, so a benchmark runs from a checkout without installing."""

import os
import sys
from pathlib import Path

for _var in (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
):
    os.environ[_var] = "1"

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pin_to_one_cpu() -> str:
    """Pin this process to one CPU where the OS allows it; returns what was done, for the
    benchmark's header line."""
    if not hasattr(os, "sched_setaffinity"):
        return "no"
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return f"cpu {cpu}"


def random_action_steps_per_s(env, n_actions: int, steps: int, repeats: int,
                              actions=None) -> list[float]:
    """Env steps per second (all copies) of a batched env driven by fixed random actions
    (``actions``, (steps, N, ...), or uniform integers below ``n_actions``), after a 50-step
    warm-up; one rate per repeat."""
    import time

    import numpy as np

    env.reset()
    if actions is None:
        actions = np.random.default_rng(0).integers(0, n_actions, (steps, env.num_envs))
    for a in actions[:50]:
        env.step(a)
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for a in actions:
            env.step(a)
        rates.append(steps * env.num_envs / (time.perf_counter() - start))
    return rates
