"""Congestion-control traces: the link tuples of Plume's Aurora setting and time-varying links.

Two built-in datasets (:data:`CC_DATASETS`, :func:`load_cc_dataset`), both fixed by the
dataset seed ``DATASET_SEED`` (never a run seed); split ``(name, split)`` draws from child
``STREAM_ORDER.index((name, split))`` of ``SeedSequence(seed).spawn(len(STREAM_ORDER))``, so
each split can be generated alone and train and test are independent draws.

``aurora`` (paper §3.4): a trace is a 4-tuple of link parameters held as TraceSet
*constants* (no series): ``bandwidth`` (packets/s), ``latency`` (one-way, s), ``queue``
(packets), ``loss`` (random loss fraction). The train split covers the paper's training
ranges, the test split its wider test ranges:

============  ==================  ===================
parameter     train               test
============  ==================  ===================
bandwidth     100-500 pkt/s       50-1000 pkt/s
latency       50-300 ms           25-500 ms
queue         2-50 packets        2-75 packets
loss          0-2 %               0-3 %
============  ==================  ===================

"Spaced evenly on a geometric progression" (bandwidth, queue, loss) and "uniformly"
(latency) is read as: each parameter takes one of ``levels`` values (10 in train, 12 in
test), ``numpy.geomspace`` between the range ends for bandwidth and queue (queue rounded to
whole packets: the levels stay distinct), ``numpy.linspace`` for latency, and for loss a
first level of exactly 0 followed by ``geomspace(0.1 %, max)`` (a geometric progression
cannot reach 0; 0.1 % is the smallest non-zero loss, a tenth of a percent, below which random
loss barely changes an episode). Traces are distinct grid points drawn without replacement
(1000 of the 10^4 training tuples, 300 of the 12^4 test tuples): "sampled once and fixed for
all controllers". The sizes keep stage 1-2 (1000 traces) and an evaluation (300 episodes in
one batch) cheap.

``cc_series`` (like GenetProject/Genet's CC simulator): the bandwidth varies in time. Series
``time`` (s, a 0.5 s grid over 60 s) and ``bandwidth`` (packets/s, forward convention: sample
j holds on ``[time[j], time[j+1])``, the last until ``constants["period"]`` = 60 s, then the
trace loops) plus constants ``latency`` (U(50, 300) ms), ``queue`` (log-uniform 2-50 packets,
rounded) and ``loss`` (Genet's draw: ``10^U(-5, log10 2 %)``, 0 when the exponent is below
-4, i.e. about 30 % loss-free links). Four labelled kinds, each around a base level B
log-uniform in 100-500 pkt/s:

* ``stable``: B with 3 % per-sample jitter;
* ``step``: a new level, log-uniform in 100-500, every U(5, 15) s (Genet's ``T_s``);
* ``volatile``: an AR(1) on log bandwidth around B (phi 0.6, innovation std 0.45), clipped to
  [B / 5, 3 B];
* ``outage``: B with a drop to 5 % of B lasting U(1, 3) s, every U(8, 15) s.

The train split is skewed like TraceBench's ``majority_*`` sets (600 stable, 250 step, 100
volatile, 50 outage); the test split holds 75 of each kind, so that every kind's score is
measured on as many traces as the majority's.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache

import numpy as np

from plume.traces.mixtures import check_dataset_split
from plume.traces.traceset import TraceSet

__all__ = [
    "AURORA_LEVELS",
    "AURORA_RANGES",
    "CC_DATASETS",
    "DATASET_SEED",
    "SERIES_DT",
    "SERIES_DURATION",
    "SERIES_KINDS",
    "SPLITS",
    "STREAM_ORDER",
    "UNITS",
    "CcDataset",
    "LinkRanges",
    "aurora_levels",
    "generate_cc_dataset",
    "load_cc_dataset",
]

DATASET_SEED = 2019
"""Seed that fixes every split of every built-in CC dataset (never a run seed)."""

SPLITS = ("train", "test")

STREAM_ORDER: tuple[tuple[str, str], ...] = (
    ("aurora", "train"), ("aurora", "test"), ("cc_series", "train"), ("cc_series", "test"))
"""Child k of ``SeedSequence(seed).spawn(len(STREAM_ORDER))`` seeds split ``STREAM_ORDER[k]``;
a new dataset may only append."""

UNITS = {"bandwidth": "packets/s", "latency": "s (one-way)", "queue": "packets",
         "loss": "fraction", "time": "s", "period": "s"}
"""``meta["units"]`` of every CC TraceSet (1500-byte packets, as Aurora)."""

MIN_NONZERO_LOSS = 0.001
"""The second loss level (0.1 %); the first is 0."""


@dataclass(frozen=True)
class LinkRanges:
    """Inclusive range of each link parameter (bandwidth pkt/s, latency s, queue packets,
    loss fraction)."""

    bandwidth: tuple[float, float]
    latency: tuple[float, float]
    queue: tuple[float, float]
    loss: tuple[float, float]


AURORA_RANGES = {
    "train": LinkRanges(bandwidth=(100.0, 500.0), latency=(0.05, 0.3), queue=(2.0, 50.0),
                        loss=(0.0, 0.02)),
    "test": LinkRanges(bandwidth=(50.0, 1000.0), latency=(0.025, 0.5), queue=(2.0, 75.0),
                       loss=(0.0, 0.03)),
}
"""The paper's training and (wider) test ranges (paper §3.4)."""

AURORA_LEVELS = {"train": 10, "test": 12}
"""Levels per parameter of each split's grid."""

SERIES_DT = 0.5
SERIES_DURATION = 60.0
SERIES_KINDS = ("stable", "step", "volatile", "outage")
SERIES_COUNTS = {"train": (600, 250, 100, 50), "test": (75, 75, 75, 75)}
"""Traces of each kind (in ``SERIES_KINDS`` order) per split."""
SERIES_BANDWIDTH = (100.0, 500.0)


# --------------------------------------------------------------------------------------
# aurora: link tuples on a grid
# --------------------------------------------------------------------------------------


def aurora_levels(split: str) -> dict[str, np.ndarray]:
    """The values each link parameter takes in ``split`` (see the module docstring)."""
    ranges, n = AURORA_RANGES[split], AURORA_LEVELS[split]
    return {
        "bandwidth": np.geomspace(*ranges.bandwidth, n),
        "latency": np.linspace(*ranges.latency, n),
        "queue": np.round(np.geomspace(*ranges.queue, n)),
        "loss": np.concatenate([[0.0], np.geomspace(MIN_NONZERO_LOSS, ranges.loss[1], n - 1)]),
    }


def _aurora(split: str, size: int, rng: np.random.Generator, name: str,
            meta: dict) -> TraceSet:
    levels = aurora_levels(split)
    keys = tuple(levels)
    shape = tuple(len(levels[k]) for k in keys)
    cells = rng.choice(int(np.prod(shape)), size=size, replace=False)
    index = np.unravel_index(cells, shape)
    return TraceSet(
        name=name,
        constants={k: levels[k][i] for k, i in zip(keys, index)},
        trace_ids=np.array([f"{name}/{i:04d}" for i in range(size)]),
        meta={**meta, "generator": "aurora", "units": {k: UNITS[k] for k in keys},
              "levels": {k: v.tolist() for k, v in levels.items()},
              "ranges": AURORA_RANGES[split].__dict__},
    )


# --------------------------------------------------------------------------------------
# cc_series: time-varying bandwidth, Genet style
# --------------------------------------------------------------------------------------


def _log_uniform(rng: np.random.Generator, low: float, high: float, size=None):
    return np.exp(rng.uniform(np.log(low), np.log(high), size))


def _stable(rng: np.random.Generator, n: int) -> np.ndarray:
    base = _log_uniform(rng, *SERIES_BANDWIDTH)
    return base * (1.0 + 0.03 * rng.standard_normal(n))


def _step(rng: np.random.Generator, n: int) -> np.ndarray:
    out = np.empty(n)
    j = 0
    while j < n:
        hold = max(1, round(rng.uniform(5.0, 15.0) / SERIES_DT))
        out[j: j + hold] = _log_uniform(rng, *SERIES_BANDWIDTH)
        j += hold
    return out


def _volatile(rng: np.random.Generator, n: int) -> np.ndarray:
    base = _log_uniform(rng, *SERIES_BANDWIDTH)
    log_dev = np.empty(n)
    log_dev[0] = 0.45 * rng.standard_normal() / np.sqrt(1 - 0.6 ** 2)  # stationary start
    for j in range(1, n):
        log_dev[j] = 0.6 * log_dev[j - 1] + 0.45 * rng.standard_normal()
    return np.clip(base * np.exp(log_dev), base / 5.0, 3.0 * base)


def _outage(rng: np.random.Generator, n: int) -> np.ndarray:
    base = _log_uniform(rng, *SERIES_BANDWIDTH)
    out = np.full(n, base)
    t = rng.uniform(0.0, 8.0)  # first outage
    while t < n * SERIES_DT:
        length = rng.uniform(1.0, 3.0)
        out[int(t / SERIES_DT): int(np.ceil((t + length) / SERIES_DT))] = 0.05 * base
        t += rng.uniform(8.0, 15.0)
    return out


_SERIES_GENERATORS: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    "stable": _stable, "step": _step, "volatile": _volatile, "outage": _outage}


def _genet_loss(rng: np.random.Generator, size: int, high: float = 0.02) -> np.ndarray:
    """Genet's loss draw: 10^U(log10(1e-5), log10(high + 1e-5)), 0 below 10^-4, at most
    ``high`` (the 1e-5 would otherwise overshoot it)."""
    exponent = rng.uniform(np.log10(1e-5), np.log10(high + 1e-5), size)
    return np.where(exponent < -4.0, 0.0, np.minimum(10.0 ** exponent, high))


def _cc_series(split: str, size: int, rng: np.random.Generator, name: str,
               meta: dict) -> TraceSet:
    counts = SERIES_COUNTS[split]
    if sum(counts) != size:
        raise ValueError(f"cc_series/{split}: kind counts {counts} do not sum to {size}")
    n_samples = round(SERIES_DURATION / SERIES_DT)
    labels = np.repeat(np.array(SERIES_KINDS), counts)
    bandwidth = np.stack([_SERIES_GENERATORS[kind](rng, n_samples) for kind in labels])
    np.maximum(bandwidth, 1.0, out=bandwidth)  # never a dead link
    return TraceSet(
        name=name,
        series={"time": np.broadcast_to(np.arange(n_samples) * SERIES_DT, bandwidth.shape),
                "bandwidth": bandwidth},
        constants={
            "latency": rng.uniform(0.05, 0.3, size),
            "queue": np.round(_log_uniform(rng, 2.0, 50.0, size)),
            "loss": _genet_loss(rng, size),
            "period": np.full(size, SERIES_DURATION),
        },
        labels=labels,
        trace_ids=np.array([f"{name}/{i:04d}" for i in range(size)]),
        meta={**meta, "generator": "cc_series", "units": dict(UNITS), "kinds": list(SERIES_KINDS),
              "counts": dict(zip(SERIES_KINDS, counts))},
    )


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CcDataset:
    """A built-in dataset: what it is, the traces per split and its generator."""

    description: str
    sizes: Mapping[str, int]
    generator: Callable[[str, int, np.random.Generator, str, dict], TraceSet]
    """``(split, size, rng, name, meta) -> TraceSet``; ``meta`` says which stream it drew."""


CC_DATASETS: dict[str, CcDataset] = {
    "aurora": CcDataset(
        "Aurora link tuples (bandwidth, latency, queue, loss) on geometric/uniform grids: "
        "1000 train in the paper's training ranges, 300 test in its wider test ranges",
        {"train": 1000, "test": 300}, _aurora),
    "cc_series": CcDataset(
        "time-varying links (Genet-style bandwidth series, 60 s at 0.5 s): stable / step / "
        "volatile / outage, train skewed 600/250/100/50, test 75 of each",
        {"train": 1000, "test": 300}, _cc_series),
}


def _check_names(name: str, split: str) -> None:
    check_dataset_split(name, split, CC_DATASETS, SPLITS, "CC")


def _check_seed(seed: int) -> int:
    try:
        value = operator.index(seed)
    except TypeError:
        raise TypeError(f"CC dataset seed must be an int, got {type(seed).__name__}") from None
    if value < 0:
        raise ValueError(f"CC dataset seed must be non-negative, got {value}")
    return value


def generate_cc_dataset(name: str, split: str, seed: int = DATASET_SEED) -> TraceSet:
    """Generate split ``split`` of built-in dataset ``name`` (named ``"<name>/<split>"``)."""
    _check_names(name, split)
    seed = _check_seed(seed)
    stream = STREAM_ORDER.index((name, split))
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(len(STREAM_ORDER))[stream])
    dataset = CC_DATASETS[name]
    meta = {"dataset": name, "split": split, "seed": seed,
            "stream": f"SeedSequence({seed}).spawn({len(STREAM_ORDER)})[{stream}]"}
    return dataset.generator(split, dataset.sizes[split], rng, f"{name}/{split}", meta)


@cache
def _cached(name: str, split: str, seed: int) -> TraceSet:
    return generate_cc_dataset(name, split, seed)


def load_cc_dataset(name: str, split: str, seed: int = DATASET_SEED) -> TraceSet:
    """Like :func:`generate_cc_dataset`, memoised in-process (generation takes milliseconds).
    The TraceSet is shared between callers: its arrays are read-only; do not mutate its
    ``meta`` dict."""
    _check_names(name, split)
    return _cached(name, split, _check_seed(seed))
