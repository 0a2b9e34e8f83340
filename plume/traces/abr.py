"""Synthetic ABR datasets with controllable skew: Puffer-like sessions, Pensieve-like traces.

Plume's argument (paper §1) is that real ABR trace sets are skewed: in Puffer's Apr-May 2021
logs fewer than 6.5 % of sessions have a mean effective throughput below the mean bitrate of
the top encoding (Fig. 2), and 23 % of Pensieve's training traces sit below 750 kbit/s. The
real corpora cannot ship with the harness, so these generators produce look-alikes whose skew
is a parameter: a mixture over named **kinds** (ground-truth labels, never shown to Plume),
each with its own parameter distributions, mixed by ``class_weights``.

Units (what the ABR simulators expect; ``meta["units"]``): ``time`` in s from 0, strictly
increasing; ``bandwidth`` in **Mbit/s**, forward convention (``bandwidth[i, j]`` holds on
``[time[i, j], time[i, j + 1])``; the last sample holds 1 s unless ``constants["period"]``);
``chunk_sizes`` in **MB** and ``ssim_db`` in dB, float32, shape (n, L, 10), row j = chunk j.

**Puffer-like sessions** (:func:`generate_puffer_like`, paper §3.1; StanfordSNR/puffer): one
row per 2.002 s chunk as Puffer logs it. ``bandwidth`` is the chunk's effective throughput:
``level * exp(x_j + regime_j) * outage_j``, floored at 0.1 Mbit/s, where the session level is
a truncated log-normal (its mean throughput), ``x`` a stationary AR(1) on log throughput with
the session's cv and lag-1 coefficient (shifted by -s^2/2 so the level stays the mean),
``regime`` a piecewise-constant log offset redrawn at Bernoulli(rate) chunks and ``outage``
a multiplier in ``outage_depth`` for geometric runs of chunks. The kinds
(:data:`PUFFER_KINDS`; level = median Mbit/s, sigma of log, support):

================  ======  ==================  ==========  =========  =============  ==============
kind              weight  level               cv          AR(1)      regimes        outages
================  ======  ==================  ==========  =========  =============  ==============
fast_stable       0.50    40, 0.6, [8, 500]   0.05-0.20   0.85-0.95  none           none
fast_variable     0.23    25, 0.6, [8, 300]   0.30-0.60   0.60-0.85  2 %/chunk 0.4  none
medium            0.20    9, 0.3, [4, 25]     0.10-0.35   0.80-0.95  1 %/chunk 0.3  none
slow_stable       0.04    3.5, 0.35, [1.5, 8] 0.05-0.25   0.85-0.95  none           none
slow_variable     0.03    2.5, 0.45, [0.5, 8] 0.30-0.60   0.60-0.85  3 %/chunk 0.5  2 %/chunk, 3
================  ======  ==================  ==========  =========  =============  ==============

``slow_variable`` is the outage-prone kind: outages start with probability 2 % per chunk, last
a geometric number of chunks of mean 3 and multiply the throughput by U(0.02, 0.2). With the
default weights, 4.4 % (train) and 5.3 % (test) of ``puffer_synthetic`` sessions have a mean
below the top encoding's mean bitrate (3.56 Mbit/s: 889,893 B * 8 / 2.002 s), under Fig. 2's
6.5 %, and 8.7 % / 10.0 % are *slow* in Puffer's sense (mean below 6 Mbit/s = 0.75 MB/s,
:data:`PUFFER_SLOW_MBPS`): a small minority, under the paper's "< 20 % low-bandwidth". The
median session mean is about 25 Mbit/s, with a tail past 100 Mbit/s.

The video: Puffer's 10 encodings around BOLA-BASIC's static ladder (44,319 ... 889,893 B at
SSIM index 0.9105 ... 0.9833). A scene-complexity AR(1) (lag-1 0.9) shared by all encodings
scales every size by ``exp(0.3 z)`` (mean-preserving) and lowers SSIM by ``0.8 z`` dB, a
per-session channel factor ``exp(N(0, 0.1))`` scales sizes, and per-(chunk, encoding) noise of
4 % (sizes) and 0.15 dB (SSIM) is added; sizes then rise by >= 1 % and SSIM by >= 0.05 dB per
encoding index on every chunk, so the ladder is always ordered.

Send times come from a logging client replayed over the session: it picks the highest
encoding whose bitrate fits 0.8 x the previous chunk's throughput, downloads it
(size * 8 / throughput), adds 2.002 s of video to a buffer capped at 15 s and waits while the
buffer is full, so gaps are about 2.002 s once the buffer is full (jittered by
``clip(1 + N(0, 0.02), 0.9, 1.1)``), shorter during start-up and longer when throughput drops
below the chosen bitrate; gaps are capped at 8 s (Plume's stream cleaning cuts streams at
longer gaps). Session lengths are truncated-Pareto (alpha 1.3) chunk counts in
[``min_chunks`` = 91, ``max_chunks`` = 300]: 91 = Plume's 86-chunk minimum + the 5 look-ahead
chunks, so every session is a valid training-episode source.

**Pensieve-like traces** (:func:`generate_pensieve_like`; Pensieve's FCC and Norway sets): 320 s
bandwidth-only traces, ``constants["period"]`` = 320 s (they loop), of three kinds
(:data:`PENSIEVE_KINDS`) with deliberately mixed sampling intervals:

* ``fcc_like`` (weight 0.40): dt = 5 s exactly (64 samples), level log-normal median 1.4,
  sigma 0.45 on [1, 6] Mbit/s, cv 0.12-0.28, AR(1) lag-1 0.3-0.6: smooth, like FCC.
* ``hsdpa_like`` (0.45): dt = clip(1 + N(0, 0.15), 0.6, 1.5) s, level median 1.6, sigma 0.4
  on [1, 6], cv 0.40-0.60, lag-1 0.75-0.92: volatile and autocorrelated, like HSDPA.
* ``slow`` (0.15): dt = 1 s, Pensieve's Markov-chain generator: 10 levels evenly spaced in
  [0.2, 4.3] Mbit/s, stay probability 1 - 1/T_l (T_l log-uniform in [5, 60] s), a jump of d
  levels with P(d) proportional to x^-d (x solves sum_{d=1..8} x^-d = 1, truncated to the
  feasible distances, at most 8 as in Pensieve's table, random direction where both are),
  Gaussian noise of std cov x level (cov U(0.05, 0.3)) redrawn every T_s samples (T_s in
  {1..5}) and on every state change, floored at 0.1 Mbit/s. The levels are then scaled per
  trace (bisection on the factor, floor included) so the trace mean is its target
  U(0.3, 0.7) Mbit/s: every slow trace is below 750 kbit/s. Differences from Pensieve's
  ``sim/synthetic_traces.py`` on purpose: its jump distances are uniform over 0..max-1 (a
  loop-variable bug makes every weight equal), here they follow the geometric-like law the
  code intended; and the per-trace level scaling is new.

The non-slow levels start at 1 Mbit/s, so the slow share (mean < 0.75 Mbit/s) is the slow
weight: 15 % by default (measured 15.0 % train, 14.7 % test: 22 of 150 by largest remainder),
between the Pensieve train set's 23 % and its test set's 7 %.

**Skew and seeding.** ``class_weights`` (kind -> non-negative weight, normalised; kinds left
out get 0) fixes the kind counts by largest remainder, so a split's composition is exact, not
sampled. Every random quantity of every kind has its own stream,
``SeedSequence(seed, spawn_key=(*stream, 0, kind_index, quantity))`` with the kind's index in
the fixed kind tuple, and each is drawn in one call of shape (count, ...). So the j-th trace
of a kind depends only on (seed, stream, kind, j) and the length bounds (``max_chunks``,
``duration``): changing other kinds' weights, adding a kind or growing ``n`` never changes it
(it may move in the shuffled order). The order is a
random interleaving from ``spawn_key=(*stream, 1)`` that keeps each kind's traces in order,
so no kind clusters at the front of a split (harness code that takes the first traces gets a
fair mix).

**Built-in datasets** (:data:`ABR_DATASETS`, :func:`load_abr_dataset`): ``puffer_synthetic``
(train 1000, test 300 sessions) and ``pensieve_synthetic`` (train 500, test 150 traces), all
from ``DATASET_SEED`` = 2021 with split ``STREAM_ORDER.index((name, split))`` as ``stream``,
so each split stands alone and train and test are independent draws. Generating the Puffer
train split takes about 0.3 s here (the loops run over chunks, vectorised across sessions).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import cache
from typing import Callable, Mapping

import numpy as np
from scipy.special import ndtr, ndtri

from plume.traces.mixtures import (
    check_dataset_split,
    check_int,
    kind_counts,
    seeded_rng,
    uniform_between,
)
from plume.traces.traceset import TraceSet

__all__ = [
    "ABR_DATASETS",
    "CHUNK_SECONDS",
    "DATASET_SEED",
    "MAX_CHUNKS",
    "MIN_CHUNKS",
    "N_ENCODINGS",
    "PENSIEVE_DURATION_S",
    "PENSIEVE_KINDS",
    "PENSIEVE_SLOW_MBPS",
    "PUFFER_KINDS",
    "PUFFER_SLOW_MBPS",
    "SIZE_LADDER_BYTES",
    "SPLITS",
    "SSIM_DB_LADDER",
    "SSIM_INDEX_LADDER",
    "STREAM_ORDER",
    "TOP_BITRATE_MBPS",
    "AbrDataset",
    "LogNormal",
    "MarkovKind",
    "PufferKind",
    "SmoothKind",
    "generate_abr_dataset",
    "generate_pensieve_like",
    "generate_puffer_like",
    "load_abr_dataset",
    "share_below",
    "top_encoding_bitrate",
]

# --------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------

DATASET_SEED = 2021
"""Seed that fixes every split of the built-in ABR datasets (never a run seed)."""

SPLITS = ("train", "test")

CHUNK_SECONDS = 2.002
"""Video per Puffer chunk (s)."""

N_ENCODINGS = 10

SIZE_LADDER_BYTES = np.array(
    [44319, 93355, 115601, 142904, 196884, 263965, 353752, 494902, 632193, 889893], float)
"""Puffer BOLA-BASIC's static ladder: mean chunk size per encoding (bytes)."""
SIZE_LADDER_BYTES.setflags(write=False)

SSIM_INDEX_LADDER = np.array([0.91050748, 0.94062527, 0.94806355, 0.95498943, 0.96214503,
                              0.96717277, 0.97273958, 0.97689813, 0.98004106, 0.98332605])
"""Puffer BOLA-BASIC's static ladder: mean SSIM index per encoding."""
SSIM_INDEX_LADDER.setflags(write=False)

SSIM_DB_LADDER = -10.0 * np.log10(1.0 - SSIM_INDEX_LADDER)
"""The SSIM ladder in dB (10.5 ... 17.8 dB)."""
SSIM_DB_LADDER.setflags(write=False)

TOP_BITRATE_MBPS = SIZE_LADDER_BYTES[-1] * 8e-6 / CHUNK_SECONDS
"""Mean bitrate of the ladder's top encoding, about 3.556 Mbit/s (Fig. 2's threshold)."""

PUFFER_SLOW_MBPS = 6.0
"""Puffer's slow path: mean delivery rate below 0.75 MB/s = 6 Mbit/s (the paper, §3.1)."""

PENSIEVE_SLOW_MBPS = 0.75
"""The Pensieve digest's slow line: mean below 750 kbit/s (23 % of its train traces)."""

MIN_CHUNKS = 91
"""Shortest Puffer-like session: Plume's 86-chunk minimum plus the 5 look-ahead chunks."""

MAX_CHUNKS = 300
"""Default longest Puffer-like session (chunks)."""

PENSIEVE_DURATION_S = 320.0
"""Length (and loop period) of a Pensieve-like trace: Pensieve's 320 s windows."""

MIN_THROUGHPUT_MBPS = 0.1
"""Every throughput sample is floored here (Pensieve's floor), so downloads always finish."""

BUFFER_CAP_S = 15.0
"""Puffer's client buffer cap (s), used by the logging client that sets the send times."""

MAX_GAP_S = 8.0
"""Longest gap between chunk sends: Plume's stream cleaning cuts streams at gaps over 8 s."""

LENGTH_PARETO_ALPHA = 1.3
"""Tail index of the truncated-Pareto session length (chunks)."""

_SCENE_AR = 0.9  # lag-1 coefficient of the per-chunk scene complexity
_SIZE_SCENE_SIGMA = 0.3  # log-size std from scene complexity, shared by all encodings
_SSIM_SCENE_DB = 0.8  # SSIM dB lost per unit of scene complexity
_CHANNEL_SIGMA = 0.1  # per-session log-size factor (channel)
_SIZE_NOISE = 0.04  # per-(chunk, encoding) log-size noise
_SSIM_NOISE_DB = 0.15  # per-(chunk, encoding) SSIM noise (dB)
_SIZE_STEP = math.log(1.01)  # sizes grow by at least 1 % per encoding index
_SSIM_STEP_DB = 0.05  # SSIM grows by at least 0.05 dB per encoding index
_CLIENT_SAFETY = 0.8  # the logging client's rate rule: bitrate <= 0.8 x last throughput
_SEND_JITTER = 0.02  # relative jitter of the gaps between sends (clipped to +-10 %)
_MARKOV_LEVELS = np.linspace(0.2, 4.3, 10)  # Pensieve's synthetic generator


# --------------------------------------------------------------------------------------
# Kinds
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogNormal:
    """A log-normal with the given median and log-std, truncated to [low, high]."""

    median: float
    sigma: float
    low: float
    high: float

    def from_uniform(self, u: np.ndarray) -> np.ndarray:
        """Inverse-CDF draws from U[0, 1) draws, so each value uses exactly one uniform."""
        mu = math.log(self.median)
        a, b = (ndtr((math.log(x) - mu) / self.sigma) for x in (self.low, self.high))
        return np.clip(np.exp(mu + self.sigma * ndtri(a + u * (b - a))), self.low, self.high)


@dataclass(frozen=True)
class PufferKind:
    """Parameter distributions of one kind of Puffer-like session (per-session draws are
    uniform over the given ranges; rates are per chunk)."""

    weight: float
    level: LogNormal
    cv: tuple[float, float]
    ar: tuple[float, float]
    regime_rate: float = 0.0
    regime_sigma: float = 0.0
    outage_rate: float = 0.0
    outage_chunks: float = 1.0
    outage_depth: tuple[float, float] = (0.02, 0.2)


@dataclass(frozen=True)
class SmoothKind:
    """A Pensieve-like kind with an AR(1) on log throughput around a log-normal level, sampled
    every ``dt`` s with relative jitter ``dt_jitter`` clipped to ``dt_range``."""

    weight: float
    level: LogNormal
    cv: tuple[float, float]
    ar: tuple[float, float]
    dt: float
    dt_jitter: float = 0.0
    dt_range: tuple[float, float] | None = None


@dataclass(frozen=True)
class MarkovKind:
    """A Pensieve-like kind from Pensieve's Markov-chain generator, rescaled to a mean in
    ``target_mean`` (T_l log-uniform, T_s integer, cov uniform over the given ranges)."""

    weight: float
    target_mean: tuple[float, float]
    t_l: tuple[float, float]
    t_s: tuple[int, int]
    cov: tuple[float, float]
    dt: float = 1.0


PUFFER_KINDS: dict[str, PufferKind] = {
    "fast_stable": PufferKind(0.50, LogNormal(40.0, 0.6, 8.0, 500.0), (0.05, 0.20), (0.85, 0.95)),
    "fast_variable": PufferKind(0.23, LogNormal(25.0, 0.6, 8.0, 300.0), (0.30, 0.60),
                                (0.60, 0.85), regime_rate=0.02, regime_sigma=0.4),
    "medium": PufferKind(0.20, LogNormal(9.0, 0.3, 4.0, 25.0), (0.10, 0.35), (0.80, 0.95),
                         regime_rate=0.01, regime_sigma=0.3),
    "slow_stable": PufferKind(0.04, LogNormal(3.5, 0.35, 1.5, 8.0), (0.05, 0.25), (0.85, 0.95)),
    "slow_variable": PufferKind(0.03, LogNormal(2.5, 0.45, 0.5, 8.0), (0.30, 0.60),
                                (0.60, 0.85), regime_rate=0.03, regime_sigma=0.5,
                                outage_rate=0.02, outage_chunks=3.0),
}
"""Puffer-like session kinds in stream order (append only: the index seeds the kind)."""

PENSIEVE_KINDS: dict[str, SmoothKind | MarkovKind] = {
    "fcc_like": SmoothKind(0.40, LogNormal(1.4, 0.45, 1.0, 6.0), (0.12, 0.28), (0.3, 0.6),
                           dt=5.0),
    "hsdpa_like": SmoothKind(0.45, LogNormal(1.6, 0.4, 1.0, 6.0), (0.40, 0.60), (0.75, 0.92),
                             dt=1.0, dt_jitter=0.15, dt_range=(0.6, 1.5)),
    "slow": MarkovKind(0.15, target_mean=(0.3, 0.7), t_l=(5.0, 60.0), t_s=(1, 5),
                       cov=(0.05, 0.3)),
}
"""Pensieve-like kinds in stream order (append only: the index seeds the kind)."""


# --------------------------------------------------------------------------------------
# Validation, streams and kind counts
# --------------------------------------------------------------------------------------




def _check_stream(stream) -> tuple[int, ...]:
    return tuple(check_int(s, "every stream entry", 0) for s in stream)






def _kind_rngs(seed: int, stream: tuple[int, ...], kind_index: int, count: int):
    """One generator per random quantity of a kind; each is drawn once, shape (count, ...)."""
    return [seeded_rng(seed, (*stream, 0, kind_index, q)) for q in range(count)]




# --------------------------------------------------------------------------------------
# Building blocks (vectorised across traces)
# --------------------------------------------------------------------------------------


def _ar1(phi: np.ndarray | float, innovations: np.ndarray) -> np.ndarray:
    """(n, L) stationary AR(1) with unit variance, started from its stationary law; the loop
    runs over the L steps, all traces at once."""
    phi = np.broadcast_to(np.asarray(phi, float), innovations.shape[:1])
    scale = np.sqrt(1.0 - phi**2)
    out = np.empty(innovations.shape)
    out[:, 0] = innovations[:, 0]
    for t in range(1, innovations.shape[1]):
        out[:, t] = phi * out[:, t - 1] + scale * innovations[:, t]
    return out


def _latest(flags: np.ndarray) -> np.ndarray:
    """(n, L) column of the latest True at or before each column (-1 where none yet)."""
    cols = np.where(flags, np.arange(flags.shape[1]), -1)
    return np.maximum.accumulate(cols, axis=1)


def _regimes(events: np.ndarray, shift: np.ndarray, sigma: float) -> np.ndarray:
    """Piecewise-constant log offset: 0 until the first event, then N(-sigma^2/2, sigma)
    (mean-preserving in linear space) redrawn at every event."""
    latest = _latest(events)
    values = np.take_along_axis(sigma * shift - sigma**2 / 2, np.maximum(latest, 0), axis=1)
    return np.where(latest >= 0, values, 0.0)


def _outages(u: np.ndarray, kind: PufferKind) -> np.ndarray:
    """(n, L) throughput multiplier: 1, or the depth of the latest outage while one lasts.
    ``u`` is (n, L, 3) uniforms: start, length (geometric, mean ``outage_chunks``), depth."""
    cols = np.arange(u.shape[1])
    starts = u[..., 0] < kind.outage_rate
    p = 1.0 / kind.outage_chunks
    length = 1 + np.floor(np.log1p(-u[..., 1]) / math.log1p(-p)) if p < 1 else np.ones(u.shape[:2])
    covered = np.maximum.accumulate(np.where(starts, cols + length, 0), axis=1) > cols
    depth = np.take_along_axis(uniform_between(kind.outage_depth, u[..., 2]),
                               np.maximum(_latest(starts), 0), axis=1)
    return np.where(covered, depth, 1.0)


def _log_ar_throughput(level, cv, phi, innovations) -> np.ndarray:
    """level * exp(s x - s^2/2) for a unit AR(1) x, s = sqrt(log(1 + cv^2)): a log-normal
    marginal with mean ``level`` and coefficient of variation ``cv``."""
    s = np.sqrt(np.log1p(cv**2))[:, None]
    return level[:, None] * np.exp(s * _ar1(phi, innovations) - s**2 / 2)


def _session_lengths(u: np.ndarray, low: int, high: int) -> np.ndarray:
    """Truncated Pareto(alpha) chunk counts in [low, high] by inverse CDF: heavy-tailed."""
    a = LENGTH_PARETO_ALPHA
    tail = 1.0 - (low / (high + 1)) ** a
    return np.clip(np.floor(low * (1.0 - u * tail) ** (-1.0 / a)), low, high).astype(np.int64)


def _monotone(values: np.ndarray, step: float) -> np.ndarray:
    """Raise values along the last axis so each exceeds its predecessor by at least ``step``."""
    ramp = step * np.arange(values.shape[-1])
    return np.maximum.accumulate(values - ramp, axis=-1) + ramp


def _video(scene: np.ndarray, channel: np.ndarray, noise: np.ndarray):
    """Chunk sizes (MB) and SSIM (dB), (n, L, 10) float32, around the BOLA ladder: complex
    scenes (scene > 0) give bigger chunks and lower SSIM at every encoding."""
    z = scene[..., None]
    log_size = (np.log(SIZE_LADDER_BYTES * 1e-6) + _SIZE_SCENE_SIGMA * z
                - _SIZE_SCENE_SIGMA**2 / 2 + _CHANNEL_SIGMA * channel[:, None, None]
                + _SIZE_NOISE * noise[..., 0, :])
    sizes = np.exp(_monotone(log_size, _SIZE_STEP))
    ssim = _monotone(SSIM_DB_LADDER - _SSIM_SCENE_DB * z + _SSIM_NOISE_DB * noise[..., 1, :],
                     _SSIM_STEP_DB)
    return sizes.astype(np.float32), ssim.astype(np.float32)


def _send_times(bandwidth: np.ndarray, sizes: np.ndarray, jitter: np.ndarray) -> np.ndarray:
    """Chunk send times of a logging client (module docstring): rate rule on the previous
    chunk's throughput, 15 s buffer cap, gaps jittered and capped at ``MAX_GAP_S``."""
    n, width = bandwidth.shape
    rows = np.arange(n)
    bitrates = sizes * (8.0 / CHUNK_SECONDS)  # Mbit/s of every (chunk, encoding)
    gaps = np.empty((n, width))
    buffer = np.zeros(n)
    estimate = np.zeros(n)
    for j in range(width):
        choice = np.maximum((bitrates[:, j] <= _CLIENT_SAFETY * estimate[:, None]).sum(1) - 1, 0)
        download = sizes[rows, j, choice] * 8.0 / bandwidth[:, j]
        buffer = np.maximum(buffer - download, 0.0) + CHUNK_SECONDS
        wait = np.maximum(buffer - BUFFER_CAP_S, 0.0)
        buffer -= wait
        gaps[:, j] = download + wait
        estimate = bandwidth[:, j]
    gaps *= np.clip(1.0 + _SEND_JITTER * jitter, 0.9, 1.1)
    times = np.zeros((n, width))
    np.cumsum(np.minimum(gaps[:, :-1], MAX_GAP_S), axis=1, out=times[:, 1:])
    return times


# --------------------------------------------------------------------------------------
# Per-kind generators: each returns series (time, bandwidth), lengths and chunks
# --------------------------------------------------------------------------------------


def _puffer_kind(kind: PufferKind, count: int, rngs, min_chunks: int, max_chunks: int) -> dict:
    """``count`` sessions of one kind; every quantity comes from its own stream, so session j
    does not depend on ``count``."""
    session_rng, event_rng, path_rng, video_rng = rngs
    u = session_rng.random((count, 5))  # level, length, cv, ar, channel
    events = event_rng.random((count, max_chunks, 4))  # regime, outage start/length/depth
    path = path_rng.standard_normal((count, max_chunks, 4))  # log noise, regime, scene, jitter
    noise = video_rng.standard_normal((count, max_chunks, 2, N_ENCODINGS), dtype=np.float32)

    bandwidth = _log_ar_throughput(kind.level.from_uniform(u[:, 0]),
                                   uniform_between(kind.cv, u[:, 2]),
                                   uniform_between(kind.ar, u[:, 3]), path[..., 0])
    if kind.regime_rate > 0:
        bandwidth *= np.exp(_regimes(events[..., 0] < kind.regime_rate, path[..., 1],
                                     kind.regime_sigma))
    if kind.outage_rate > 0:
        bandwidth *= _outages(events[..., 1:], kind)
    np.maximum(bandwidth, MIN_THROUGHPUT_MBPS, out=bandwidth)
    channel = ndtri(np.clip(u[:, 4], 1e-12, 1 - 1e-12))  # a normal; clipped: never -inf
    sizes, ssim = _video(_ar1(_SCENE_AR, path[..., 2]), channel, noise)
    return {"time": _send_times(bandwidth, sizes, path[..., 3]), "bandwidth": bandwidth,
            "lengths": _session_lengths(u[:, 1], min_chunks, max_chunks),
            "chunk_sizes": sizes, "ssim_db": ssim}


def _smooth_kind(kind: SmoothKind, count: int, rngs, duration: float) -> dict:
    """AR(1) log-normal traces on a (jittered) grid covering ``duration`` seconds."""
    session_rng, path_rng = rngs
    shortest = kind.dt_range[0] if kind.dt_range else kind.dt
    width = int(math.ceil(duration / shortest)) + 1
    u = session_rng.random((count, 3))  # level, cv, ar
    path = path_rng.standard_normal((count, width, 2))  # log noise, dt jitter
    dt = kind.dt * (1.0 + kind.dt_jitter * path[..., 1])
    if kind.dt_range:
        dt = np.clip(dt, *kind.dt_range)
    time = np.zeros((count, width))
    np.cumsum(dt[:, :-1], axis=1, out=time[:, 1:])
    bandwidth = _log_ar_throughput(kind.level.from_uniform(u[:, 0]),
                                   uniform_between(kind.cv, u[:, 1]),
                                   uniform_between(kind.ar, u[:, 2]), path[..., 0])
    return {"time": time, "bandwidth": np.maximum(bandwidth, MIN_THROUGHPUT_MBPS),
            "lengths": (time < duration).sum(axis=1)}


def _jump_weights() -> np.ndarray:
    """P(jump of d levels) proportional to x^-d, d = 1..8, with sum_{d=1..8} x^-d = 1."""
    d = np.arange(1, _MARKOV_LEVELS.size - 1)
    lo, hi = 1.0, 2.0
    for _ in range(60):  # bisection: the sum falls as x grows
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.sum(mid ** -d.astype(float)) > 1 else (lo, mid)
    return lo ** -d.astype(float)


_JUMP_CDF = np.cumsum(_jump_weights())


def _markov_chain(stay: np.ndarray, u: np.ndarray, z: np.ndarray, state: np.ndarray,
                  t_s: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """(n, L) raw samples of Pensieve's chain (level + noise, before the 0.1 floor).
    ``u`` is (n, L, 3) uniforms (stay, distance, direction); ``z`` (n, L) noise normals."""
    n, width = z.shape
    top = _MARKOV_LEVELS.size - 1
    raw = np.empty((n, width))
    noise = np.zeros(n)
    count = np.zeros(n)
    for t in range(width):
        redraw = count <= 0
        noise = np.where(redraw, cov * _MARKOV_LEVELS[state] * z[:, t], noise)
        count = np.where(redraw, t_s, count) - 1
        raw[:, t] = _MARKOV_LEVELS[state] + noise
        reach = np.minimum(np.maximum(state, top - state), _JUMP_CDF.size)  # farthest jump
        distance = 1 + (_JUMP_CDF[None, :] < (u[:, t, 1] * _JUMP_CDF[reach - 1])[:, None]).sum(1)
        up_ok, down_ok = state + distance <= top, state - distance >= 0
        up = up_ok & (~down_ok | (u[:, t, 2] < 0.5))
        move = u[:, t, 0] >= stay
        count = np.where(move, 0, count)  # a state change redraws the noise
        state = np.where(move, np.where(up, state + distance, state - distance), state)
    return raw


def _scale_to_mean(raw: np.ndarray, target: np.ndarray) -> np.ndarray:
    """max(f * raw, floor) with f per trace set by bisection so the mean hits ``target``
    (the mean rises monotonically with f, from the floor at f = 0)."""
    lo = np.zeros(len(raw))
    hi = 2.0 * target / np.maximum(raw, 0.0).mean(axis=1)
    mean_at = lambda f: np.maximum(f[:, None] * raw, MIN_THROUGHPUT_MBPS).mean(axis=1)  # noqa: E731
    for _ in range(50):
        mid = (lo + hi) / 2
        low_side = mean_at(mid) < target
        lo, hi = np.where(low_side, mid, lo), np.where(low_side, hi, mid)
    return np.maximum(((lo + hi) / 2)[:, None] * raw, MIN_THROUGHPUT_MBPS)


def _markov_kind(kind: MarkovKind, count: int, rngs, duration: float) -> dict:
    """Pensieve's Markov-chain traces at dt = ``kind.dt``, rescaled to a slow target mean."""
    session_rng, chain_rng, noise_rng = rngs
    width = int(math.ceil(duration / kind.dt))
    u = session_rng.random((count, 5))  # target, T_l, T_s, cov, initial state
    t_l = np.exp(uniform_between(np.log(kind.t_l), u[:, 1]))
    t_s = np.floor(uniform_between((kind.t_s[0], kind.t_s[1] + 1), u[:, 2]))
    state = np.minimum((u[:, 4] * _MARKOV_LEVELS.size).astype(np.int64), _MARKOV_LEVELS.size - 1)
    raw = _markov_chain(1.0 - 1.0 / t_l, chain_rng.random((count, width, 3)),
                        noise_rng.standard_normal((count, width)), state, t_s,
                        uniform_between(kind.cov, u[:, 3]))
    return {"time": np.broadcast_to(kind.dt * np.arange(width), (count, width)),
            "bandwidth": _scale_to_mean(raw, uniform_between(kind.target_mean, u[:, 0])),
            "lengths": np.full(count, width, np.int64)}


# --------------------------------------------------------------------------------------
# Assembly
# --------------------------------------------------------------------------------------


def _assemble(parts: dict[str, dict], order_rng: np.random.Generator, name: str,
              constants: dict, meta: dict) -> TraceSet:
    """One TraceSet from per-kind parts: rows padded with zeros past their lengths, kinds
    interleaved at random with each kind's traces kept in order."""
    kinds = list(parts)
    codes = np.repeat(np.arange(len(kinds)), [len(parts[k]["lengths"]) for k in kinds])
    shuffled = codes[order_rng.permutation(codes.size)]
    order = np.argsort(np.argsort(shuffled, kind="stable"))  # output row -> grouped row
    labels = np.array(kinds)[shuffled]
    lengths = np.concatenate([parts[k]["lengths"] for k in kinds])[order]
    width = int(lengths.max())
    valid = np.arange(width)[None, :] < lengths[:, None]

    def stack(key: str) -> np.ndarray:
        blocks = [parts[k][key][:, :width] for k in kinds]
        blocks = [np.pad(b, [(0, 0), (0, width - b.shape[1])] + [(0, 0)] * (b.ndim - 2))
                  for b in blocks]
        rows = np.concatenate(blocks)[order]
        return np.where(valid.reshape(valid.shape + (1,) * (rows.ndim - 2)), rows, 0)

    chunk_keys = [key for key in ("chunk_sizes", "ssim_db") if key in parts[kinds[0]]]
    return TraceSet(
        name=name,
        series={key: stack(key) for key in ("time", "bandwidth")},
        lengths=lengths,
        chunks={key: stack(key) for key in chunk_keys},
        constants={key: np.full(labels.size, value) for key, value in constants.items()},
        labels=labels,
        trace_ids=np.array([f"{name}/{i:04d}" for i in range(labels.size)]),
        meta=meta,
    )


def _meta(generator: str, seed: int, stream, counts, kinds, units: dict, **extra) -> dict:
    total = sum(counts.values())
    return {
        "generator": generator,
        "seed": seed,
        "stream": f"SeedSequence({seed}, spawn_key={tuple(stream)} + (0, kind, quantity))",
        "class_weights": {k: c / total for k, c in counts.items()},
        "kind_counts": dict(counts),
        "kinds": {k: asdict(kinds[k]) for k in kinds},
        "units": units,
        **extra,
    }


# --------------------------------------------------------------------------------------
# Public generators
# --------------------------------------------------------------------------------------


def generate_puffer_like(
    n: int,
    seed: int,
    class_weights: Mapping[str, float] | None = None,
    *,
    max_chunks: int = MAX_CHUNKS,
    min_chunks: int = MIN_CHUNKS,
    stream: tuple[int, ...] = (),
    name: str = "puffer_like",
) -> TraceSet:
    """``n`` Puffer-like streaming sessions, one row per 2.002 s chunk (module docstring).

    Args:
        n: number of sessions.
        seed: generator seed (with ``stream``, fixes every session).
        class_weights: kind -> weight over :data:`PUFFER_KINDS` (normalised; missing kinds
            get 0); ``None`` uses each kind's default weight (the Fig. 2 skew).
        max_chunks, min_chunks: bounds of the session lengths (chunks).
        stream: spawn-key prefix, so datasets and splits draw from disjoint streams.
        name: TraceSet name and trace-id prefix (ids ``"<name>/0000"``, ...).

    Returns:
        A TraceSet with series ``time`` (s) and ``bandwidth`` (Mbit/s), chunks
        ``chunk_sizes`` (MB) and ``ssim_db`` (dB) of shape (n, L, 10) float32, labels.

    Raises:
        ValueError: bad ``n``, seed, stream or chunk bounds, or bad ``class_weights`` (the
            message lists the kinds).
    """
    n, seed = check_int(n, "n", 1), check_int(seed, "seed", 0)
    stream = _check_stream(stream)
    min_chunks = check_int(min_chunks, "min_chunks", 1)
    max_chunks = check_int(max_chunks, "max_chunks", min_chunks)
    counts = kind_counts(n, PUFFER_KINDS, class_weights)
    parts = {}
    for index, (kind_name, kind) in enumerate(PUFFER_KINDS.items()):
        if counts[kind_name]:
            parts[kind_name] = _puffer_kind(kind, counts[kind_name],
                                            _kind_rngs(seed, stream, index, 4),
                                            min_chunks, max_chunks)
    units = {"time": "s", "bandwidth": "Mbit/s", "chunk_sizes": "MB", "ssim_db": "dB"}
    meta = _meta("puffer_like", seed, stream, counts, PUFFER_KINDS, units,
                 chunk_seconds=CHUNK_SECONDS, min_chunks=min_chunks, max_chunks=max_chunks,
                 size_ladder_bytes=SIZE_LADDER_BYTES.tolist(),
                 ssim_index_ladder=SSIM_INDEX_LADDER.tolist(),
                 top_bitrate_mbps=TOP_BITRATE_MBPS, slow_mbps=PUFFER_SLOW_MBPS)
    return _assemble(parts, seeded_rng(seed, (*stream, 1)), name, {}, meta)


def generate_pensieve_like(
    n: int,
    seed: int,
    class_weights: Mapping[str, float] | None = None,
    *,
    duration: float = PENSIEVE_DURATION_S,
    stream: tuple[int, ...] = (),
    name: str = "pensieve_like",
) -> TraceSet:
    """``n`` Pensieve-like bandwidth traces of ``duration`` s (module docstring).

    Args:
        n: number of traces.
        seed: generator seed (with ``stream``, fixes every trace).
        class_weights: kind -> weight over :data:`PENSIEVE_KINDS` (normalised; missing kinds
            get 0); ``None`` uses the default weights (15 % slow).
        duration: trace length and loop period ``constants["period"]`` (s).
        stream: spawn-key prefix, so datasets and splits draw from disjoint streams.
        name: TraceSet name and trace-id prefix.

    Returns:
        A TraceSet with series ``time`` (s) and ``bandwidth`` (Mbit/s), constant ``period``
        (s) and labels; fcc_like rows are sampled every 5 s, the others about every 1 s.
    """
    n, seed = check_int(n, "n", 1), check_int(seed, "seed", 0)
    stream = _check_stream(stream)
    if not (isinstance(duration, (int, float)) and 10.0 <= duration < math.inf):
        raise ValueError(f"duration must be a finite number of seconds >= 10, got {duration!r}")
    counts = kind_counts(n, PENSIEVE_KINDS, class_weights)
    parts = {}
    for index, (kind_name, kind) in enumerate(PENSIEVE_KINDS.items()):
        if counts[kind_name]:
            build = _markov_kind if isinstance(kind, MarkovKind) else _smooth_kind
            rngs = _kind_rngs(seed, stream, index, 3 if isinstance(kind, MarkovKind) else 2)
            parts[kind_name] = build(kind, counts[kind_name], rngs, float(duration))
    units = {"time": "s", "bandwidth": "Mbit/s", "period": "s"}
    meta = _meta("pensieve_like", seed, stream, counts, PENSIEVE_KINDS, units,
                 duration_s=float(duration), slow_mbps=PENSIEVE_SLOW_MBPS)
    return _assemble(parts, seeded_rng(seed, (*stream, 1)), name, {"period": float(duration)}, meta)


# --------------------------------------------------------------------------------------
# Skew measures
# --------------------------------------------------------------------------------------


def top_encoding_bitrate(traces: TraceSet) -> float:
    """Mean bitrate (Mbit/s) of the top encoding over every valid chunk of a Puffer-like set:
    mean top size * 8 / 2.002 s, Fig. 2's threshold."""
    top = traces.chunks["chunk_sizes"][..., -1].astype(np.float64)
    return float(top[traces.valid_mask()].mean() * 8.0 / CHUNK_SECONDS)


def share_below(traces: TraceSet, threshold_mbps: float) -> float:
    """Share of traces whose mean throughput (over samples) is below ``threshold_mbps``."""
    return float(np.mean(traces.mean_bandwidth() < threshold_mbps))


# --------------------------------------------------------------------------------------
# Built-in datasets
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AbrDataset:
    """A built-in dataset: what it is, its generator and the traces of each split."""

    description: str
    generator: Callable[..., TraceSet]
    sizes: Mapping[str, int]


ABR_DATASETS: dict[str, AbrDataset] = {
    "puffer_synthetic": AbrDataset(
        "Puffer-like streaming sessions (2.002 s chunks, 10 encodings with sizes and SSIM), "
        "Fig. 2 skew: ~4-5 % below the top-encoding bitrate, ~8 % slow (< 6 Mbit/s)",
        generate_puffer_like, {"train": 1000, "test": 300}),
    "pensieve_synthetic": AbrDataset(
        "Pensieve-like 320 s bandwidth traces: FCC-like (dt 5 s), HSDPA-like (dt ~1 s) and "
        "15 % slow Markov-chain traces (< 0.75 Mbit/s)",
        generate_pensieve_like, {"train": 500, "test": 150}),
}
"""Dataset name -> description, generator and split sizes (the harness's ABR registry)."""

STREAM_ORDER: tuple[tuple[str, str], ...] = (
    ("puffer_synthetic", "train"), ("puffer_synthetic", "test"),
    ("pensieve_synthetic", "train"), ("pensieve_synthetic", "test"),
)
"""Split k draws from ``stream=(k,)``; fixed explicitly so a new dataset can only append."""


def _check_names(name: str, split: str) -> None:
    check_dataset_split(name, split, ABR_DATASETS, SPLITS, "ABR")

def generate_abr_dataset(name: str, split: str, seed: int = DATASET_SEED) -> TraceSet:
    """Generate one split of a built-in dataset (``"<name>/<split>"``, ids
    ``"<name>/<split>/0000"``); raises ValueError listing the valid names and splits."""
    _check_names(name, split)
    spec = ABR_DATASETS[name]
    return spec.generator(spec.sizes[split], seed, stream=(STREAM_ORDER.index((name, split)),),
                          name=f"{name}/{split}")


@cache
def _cached(name: str, split: str, seed: int) -> TraceSet:
    return generate_abr_dataset(name, split, seed)


def load_abr_dataset(name: str, split: str, seed: int = DATASET_SEED) -> TraceSet:
    """Like :func:`generate_abr_dataset`, memoised in-process. The TraceSet is shared between
    callers: its arrays are read-only; do not mutate its ``chunks`` or ``meta`` dicts."""
    _check_names(name, split)
    return _cached(name, split, check_int(seed, "seed", 0))
