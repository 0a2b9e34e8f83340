"""TraceBench: the synthetic throughput traces of Plume's controlled ABR study.

Every trace is a two-state (high / low throughput) Markov-switching series of ``TRACE_LEN``
samples, in one of four kinds: ``{fast|slow}_{high-var|low-var}`` (reference digest §1.1,
paper §3.3 and App. B). The generator keeps the reference's per-step semantics exactly:

* a trace starts with ``window = 0``;
* at each step, if ``window <= 1`` the state is redrawn from the kind's mixture weights
  (P(high), P(low)) and a window is drawn from that state's N(mean, 0.0125) and rounded,
  both redrawn while the window is negative; otherwise the window is decremented;
* then the throughput is drawn from the current state's normal and clipped to
  ``THROUGHPUT_CLIP``.

So a window of 3 holds its state for 3 samples and a window of 1 for 1 sample (the window
std of 0.0125 makes the rounded window deterministic in practice).

Each trace also carries its video, ``chunks["video_sizes"]`` of shape (TRACE_LEN, 3): for
every time step one common factor 1 + N(0, 0.01) and one factor 1 + N(0, 0.0005) per
bitrate, size = bitrate x common x per-bitrate (§1.2).

Time grid: ``np.linspace(0, 100, 100)`` for every trace, i.e. a spacing of 100/99 s
(about 1.0101 s) with the last sample at t = 100 s. This is the reference's grid, kept on
purpose so that simulated download times match the original study; it is *not* 1.0 s.

Seeding (differs from the reference on purpose, option (b) of the digest's §1.3): the
reference draws all six splits from one legacy ``gym`` ``RandomState`` stream in a fixed
order, so a split can only be produced by generating everything before it. Here the
dataset seed (``DATASET_SEED`` = 9, never a run seed) feeds
``np.random.SeedSequence(seed).spawn(6)``; child *k* belongs to the k-th entry of
``STREAM_ORDER`` (majority_fast/train, majority_fast/test, balanced/train, balanced/test,
majority_slow/train, majority_slow/test), and each child spawns three streams (state
process, throughput noise, video noise). Each split can therefore be generated alone, and
train and test are independent draws. The traces are **not** bit-identical to the
reference's (and so do not match its committed ``trace_features/*.json``); their
distribution is the same. Features must be computed from these traces.

Generation is vectorised across traces: one Python loop over the ``TRACE_LEN`` steps of the
window state machine, numpy masks across all traces of a split inside it.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import cache

import numpy as np

from plume.traces.traceset import TraceSet

__all__ = [
    "BITRATES",
    "COMMON_SIZE_NOISE_STD",
    "DATASETS",
    "DATASET_SEED",
    "FAST",
    "HIGH_VAR",
    "KINDS",
    "LOW_VAR",
    "PER_BITRATE_SIZE_NOISE_STD",
    "SLOW",
    "SPLITS",
    "STREAM_ORDER",
    "THROUGHPUT_CLIP",
    "TIME_GRID",
    "TRACE_LEN",
    "WINDOW_STD",
    "Normal",
    "SpeedClass",
    "VarianceClass",
    "generate_all",
    "generate_tracebench",
    "load_tracebench",
]

# --------------------------------------------------------------------------------------
# Constants (reference digest §1.1-1.3)
# --------------------------------------------------------------------------------------

TRACE_LEN = 100
"""Samples per trace."""

DATASET_SEED = 9
"""Seed that fixes every split of every TraceBench dataset (never a run seed)."""

TIME_GRID = np.linspace(0.0, 100.0, TRACE_LEN)
"""Sample times in seconds: the reference's ``linspace(0, 100, 100)``, spacing 100/99 s."""
TIME_GRID.setflags(write=False)

THROUGHPUT_CLIP = (0.1, 20.0)
"""Every throughput sample is clipped to this closed range (MB/s)."""

BITRATES = np.array([1.0, 3.0, 6.0])
"""Bitrate ladder (low, medium, high); chunk sizes are in MB (throughput unit x s)."""
BITRATES.setflags(write=False)

COMMON_SIZE_NOISE_STD = 0.01
"""Std of the per-time-step factor shared by all bitrates: 1 + N(0, 0.01)."""

PER_BITRATE_SIZE_NOISE_STD = 0.0005
"""Std of the per-(time step, bitrate) factor: 1 + N(0, 0.0005)."""

WINDOW_STD = 0.0125
"""Std of every window-length normal (rounded afterwards, so windows are 3 or 1)."""

DATASETS: dict[str, tuple[int, int]] = {
    "majority_fast": (750, 250),
    "balanced": (500, 500),
    "majority_slow": (250, 750),
}
"""Traces per split: (fast, slow). Each speed is half high-var, half low-var."""

SPLITS = ("train", "test")

KINDS = ("fast_high-var", "fast_low-var", "slow_high-var", "slow_low-var")
"""Ground-truth labels, ``"{speed}_{variance}"``."""

STREAM_ORDER: tuple[tuple[str, str], ...] = tuple(
    (dataset, split)
    for dataset in ("majority_fast", "balanced", "majority_slow")
    for split in SPLITS
)
"""Child k of ``SeedSequence(seed).spawn(len(STREAM_ORDER))`` seeds split ``STREAM_ORDER[k]``.
Fixed explicitly (not derived from ``DATASETS``) so that adding a dataset can only append."""


@dataclass(frozen=True)
class Normal:
    """A normal distribution N(mean, std)."""

    mean: float
    std: float


@dataclass(frozen=True)
class SpeedClass:
    """Throughput levels of the two Markov states of a trace speed."""

    name: str
    high: Normal
    low: Normal


@dataclass(frozen=True)
class VarianceClass:
    """Mixture weights for the state draw and window lengths of each state."""

    name: str
    p_high: float
    p_low: float
    window_high: Normal
    window_low: Normal


FAST = SpeedClass("fast", high=Normal(9.75, 0.65), low=Normal(5.75, 0.5))
SLOW = SpeedClass("slow", high=Normal(3.25, 0.5), low=Normal(1.35, 0.35))
LOW_VAR = VarianceClass(
    "low-var",
    p_high=0.95,
    p_low=0.05,
    window_high=Normal(3.0, WINDOW_STD),
    window_low=Normal(1.0, WINDOW_STD),
)
HIGH_VAR = VarianceClass(
    "high-var",
    p_high=0.7,
    p_low=0.3,
    window_high=Normal(1.0, WINDOW_STD),
    window_low=Normal(3.0, WINDOW_STD),
)

_KIND_CLASSES: dict[str, tuple[SpeedClass, VarianceClass]] = {
    f"{speed.name}_{var.name}": (speed, var)
    for speed in (FAST, SLOW)
    for var in (HIGH_VAR, LOW_VAR)
}
assert tuple(_KIND_CLASSES) == KINDS

_HIGH, _LOW = 0, 1  # state codes of the state sequence


# --------------------------------------------------------------------------------------
# Core
# --------------------------------------------------------------------------------------


def _split_kinds(dataset: str) -> np.ndarray:
    """Index into ``KINDS`` of every trace of a split, in the reference order: fast then slow,
    each as ``count // 2`` pairs of (high-var, low-var)."""
    n_fast, n_slow = DATASETS[dataset]
    fast_pair = [KINDS.index("fast_high-var"), KINDS.index("fast_low-var")]
    slow_pair = [KINDS.index("slow_high-var"), KINDS.index("slow_low-var")]
    return np.concatenate([np.tile(fast_pair, n_fast // 2), np.tile(slow_pair, n_slow // 2)])


def _markov_states(
    uniform: np.ndarray,
    window_noise: np.ndarray,
    p_high: np.ndarray,
    window_means: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """Run the window state machine for all traces at once.

    Args:
        uniform: (T, n) U[0, 1) draws; ``uniform[t, i]`` picks the state of trace i if it
            redraws at step t (low when ``>= p_high``, as ``choice(2, p=[p_high, p_low])``).
        window_noise: (T, n) standard normals for the window drawn at the same redraw.
        p_high: (n,) probability of the high state per trace.
        window_means: (n, 2) window mean per trace for the [high, low] state.
        rng: source of fresh draws for the (practically never taken) negative-window retry.

    Returns:
        (T, n) int8 state per step, 0 = high, 1 = low.
    """
    n_steps, n = uniform.shape
    states = np.empty((n_steps, n), dtype=np.int8)
    state = np.zeros(n, dtype=bool)  # True = low; overwritten at step 0 (window starts at 0)
    window = np.zeros(n)
    win_high, win_low = window_means[:, _HIGH], window_means[:, _LOW]
    for t in range(n_steps):
        redraw = window <= 1
        new_low = uniform[t] >= p_high
        new_window = np.rint(np.where(new_low, win_low, win_high) + WINDOW_STD * window_noise[t])
        retry = redraw & (new_window < 0)
        while retry.any():  # the reference redraws state and window while the window is < 0
            idx = np.flatnonzero(retry)
            low = rng.random(idx.size) >= p_high[idx]
            drawn = np.where(low, win_low[idx], win_high[idx])
            new_low[idx] = low
            new_window[idx] = np.rint(drawn + WINDOW_STD * rng.standard_normal(idx.size))
            retry[idx] = new_window[idx] < 0
        state = np.where(redraw, new_low, state)
        window = np.where(redraw, new_window, window - 1)
        states[t] = state
    return states


def _check_names(dataset: str, split: str) -> None:
    if dataset not in DATASETS:
        raise ValueError(
            f"unknown TraceBench dataset {dataset!r}; expected one of {sorted(DATASETS)}"
        )
    if split not in SPLITS:
        raise ValueError(f"unknown TraceBench split {split!r}; expected one of {list(SPLITS)}")


def _check_seed(seed: int) -> int:
    try:
        value = operator.index(seed)
    except TypeError:
        raise TypeError(f"TraceBench seed must be an int, got {type(seed).__name__}") from None
    if value < 0:
        raise ValueError(f"TraceBench seed must be non-negative, got {value}")
    return value


def _generate(dataset: str, split: str, seed: int) -> tuple[TraceSet, np.ndarray]:
    """The split and its (n, TRACE_LEN) int8 state sequence (0 = high, 1 = low)."""
    _check_names(dataset, split)
    seed = _check_seed(seed)
    split_seq = np.random.SeedSequence(seed).spawn(len(STREAM_ORDER))[
        STREAM_ORDER.index((dataset, split))
    ]
    state_rng, throughput_rng, video_rng = (np.random.default_rng(s) for s in split_seq.spawn(3))

    kind_index = _split_kinds(dataset)
    labels = np.array(KINDS)[kind_index]
    n = labels.size
    classes = [_KIND_CLASSES[kind] for kind in KINDS]
    p_high = np.array([var.p_high for _, var in classes])[kind_index]
    window_means = np.array([[var.window_high.mean, var.window_low.mean] for _, var in classes])[
        kind_index
    ]
    level_mean = np.array([[sp.high.mean, sp.low.mean] for sp, _ in classes])[kind_index]
    level_std = np.array([[sp.high.std, sp.low.std] for sp, _ in classes])[kind_index]

    uniform = state_rng.random((TRACE_LEN, n))
    window_noise = state_rng.standard_normal((TRACE_LEN, n))
    states = _markov_states(uniform, window_noise, p_high, window_means, state_rng).T
    low = states.astype(bool)
    mean = np.where(low, level_mean[:, _LOW, None], level_mean[:, _HIGH, None])
    std = np.where(low, level_std[:, _LOW, None], level_std[:, _HIGH, None])
    bandwidth = mean + std * throughput_rng.standard_normal((n, TRACE_LEN))
    np.clip(bandwidth, *THROUGHPUT_CLIP, out=bandwidth)

    common = 1.0 + COMMON_SIZE_NOISE_STD * video_rng.standard_normal((n, TRACE_LEN, 1))
    per_bitrate = 1.0 + PER_BITRATE_SIZE_NOISE_STD * video_rng.standard_normal(
        (n, TRACE_LEN, BITRATES.size)
    )
    video_sizes = BITRATES * common * per_bitrate

    traces = TraceSet(
        name=f"tracebench/{dataset}/{split}",
        series={"time": np.broadcast_to(TIME_GRID, (n, TRACE_LEN)), "bandwidth": bandwidth},
        lengths=np.full(n, TRACE_LEN, dtype=np.int64),
        labels=labels,
        trace_ids=np.array([f"{dataset}/{split}/{i:04d}" for i in range(n)]),
        chunks={"video_sizes": video_sizes},
        meta={
            "generator": "tracebench",
            "dataset": dataset,
            "split": split,
            "seed": seed,
            "stream": f"SeedSequence({seed}).spawn({len(STREAM_ORDER)})"
            f"[{STREAM_ORDER.index((dataset, split))}]",
            "units": {"time": "s", "bandwidth": "MB/s", "video_sizes": "MB"},
            "bitrates": BITRATES.tolist(),
        },
    )
    return traces, states


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------


def generate_tracebench(dataset: str, split: str, seed: int = DATASET_SEED) -> TraceSet:
    """Generate one TraceBench split.

    Args:
        dataset: one of ``DATASETS`` (majority_fast, balanced, majority_slow).
        split: ``"train"`` or ``"test"``.
        seed: the dataset seed; splits are fixed by it, never by a run seed.

    Returns:
        A TraceSet named ``"tracebench/<dataset>/<split>"`` with 1000 traces of
        ``TRACE_LEN`` samples, labels from ``KINDS`` (fast traces first, then slow; within
        a speed alternating high-var, low-var), ids ``"<dataset>/<split>/0000"`` and
        ``chunks["video_sizes"]`` of shape (n, TRACE_LEN, 3).

    Raises:
        ValueError: unknown dataset or split (the message lists the valid names), or a
            negative seed.
    """
    return _generate(dataset, split, seed)[0]


def generate_all(seed: int = DATASET_SEED) -> dict[tuple[str, str], TraceSet]:
    """All six splits, keyed by ``(dataset, split)`` in ``STREAM_ORDER``."""
    return {key: generate_tracebench(*key, seed=seed) for key in STREAM_ORDER}


@cache  # functools.lru_cache(maxsize=None)
def _cached(dataset: str, split: str, seed: int) -> TraceSet:
    return generate_tracebench(dataset, split, seed)


def load_tracebench(dataset: str, split: str, seed: int = DATASET_SEED) -> TraceSet:
    """Like :func:`generate_tracebench`, memoised in-process (generation takes milliseconds,
    so there is no disk cache). The returned TraceSet is shared between callers: its arrays
    are read-only; do not mutate its ``chunks`` or ``meta`` dicts."""
    _check_names(dataset, split)
    return _cached(dataset, split, _check_seed(seed))
