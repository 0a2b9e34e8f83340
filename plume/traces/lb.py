"""Load-balancing traces: job sequences for Park's ``load_balance`` setting (paper §3.5).

A trace is the exogenous job stream a load balancer sees: one row per job, the series
``interarrival`` (time units before the job arrives: the first value counts from time 0, later
ones from the previous arrival) and ``job_size`` (work units; a server of rate ``mu`` needs
``int(size / mu)`` time units for it). Both are **integers**, as in Park, whose generator
truncates ``Exp(55)`` gaps and Pareto sizes with ``int()``; the simulator relies on it to be
exact. Traces hold at most :data:`N_JOBS` = 650 jobs by default, the paper's cap (so a bad
policy's queues, and the return's variance, stay bounded).

**Built-in datasets** (:data:`LB_DATASETS`, :func:`load_lb_dataset`), every split from
``DATASET_SEED`` with its own stream, so train and test are independent draws and the split
never depends on a run seed:

* ``park``: Park's defaults exactly: ``int(Exp(mean 55))`` gaps, ``int((Lomax(1.5) + 1) x 100)``
  sizes (classical Pareto, shape 1.5, scale 100: mean 300, infinite variance), offered load
  about 0.92 on Park's 10 servers. One kind, label ``park``.
* ``lb_mixed`` (the default): a skewed mixture of load regimes (:data:`LB_KINDS`), a 60 %
  majority of Park-like ``typical`` traces and four 10 % minorities, each a different skew
  knob of Park's job-size and arrival parameters (``park/param.py``):

  ==========  ======  =========================  ========================================
  kind        weight  arrivals                   sizes
  ==========  ======  =========================  ========================================
  typical     0.60    Poisson                    Pareto, shape 1.4-1.8
  heavy_tail  0.10    Poisson                    Pareto, shape 1.05-1.25 (elephants)
  bimodal     0.10    Poisson                    mice U{20..80} + 3-8 % Pareto elephants
  batch       0.10    batches of mean 3-6 jobs   Pareto per batch, +-20 % within a batch
  bursty      0.10    two-state Markov-modulated Pareto, shape 1.4-1.8
  ==========  ======  =========================  ========================================

  Every kind draws its target offered load ``rho`` from U(0.55, 0.85) per trace. ``bursty``
  differs from ``typical`` only in its arrivals (bursts of 4-8x the calm rate lasting about 20
  jobs, calm spells of about 60): invisible to features of ``job_size`` (the paper's LB
  channel), visible with ``analysis.channel=interarrival``. ``batch`` jobs arrive together
  (zero gaps) with correlated sizes, which the size series' autocorrelation sees.
* ``lb_balanced``: the same kinds in equal shares (a control for the skew).

Ground truth per trace: ``labels`` (the kind) and the constants ``offered_load`` (target
``rho``), ``tail_index`` (the Pareto shape of the sizes; of the elephants for ``bimodal``) and
``burstiness`` (1 for Poisson arrivals, the mean batch size, or the burst-to-calm rate ratio).

**Offered load** ``rho = E[size] / (E[gap] x capacity)``, with ``capacity`` = 6.0, the sum of
Park's service rates. Sizes of the mixed kinds are capped at :data:`SIZE_CAP` (so their mean
is finite and the load well defined); the gap law is ``int(Exp(beta))`` with ``beta`` chosen
so that ``E[int(Exp(beta))] = 1 / (exp(1 / beta) - 1)`` is exactly the mean gap the load asks
for.

**Seeding and skew** follow ``plume.traces.abr``: ``class_weights`` fixes the kind counts by
largest remainder (exact composition), every random quantity of a kind has its own stream
``SeedSequence(seed, spawn_key=(*stream, 0, kind_index, quantity))`` drawn in one call, and the
kinds are interleaved by a random permutation from ``spawn_key=(*stream, 1)`` that keeps each
kind's traces in order. The j-th trace of a kind depends only on (seed, stream, kind, j,
n_jobs).

**CSV files** (:func:`read_lb_csv`, :func:`write_lb_csv`, ``env.trace_format=csv``): one trace
per file, rows ``arrival_time,size`` (integers, arrival times non-decreasing from time 0, an
optional column-name line ``arrival_time,size``), optionally preceded by a header comment
``# servers=10 rates=0.15,0.25,...`` recorded in ``meta["csv_headers"]`` (informational: the
environment's ``env.service_rates`` decide the servers). ``#`` lines are comments and blank
lines are skipped. Every malformed line fails with one :class:`TraceFileError` naming the file
and the line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import NamedTuple

import numpy as np

from plume.traces.mixtures import (
    check_dataset_split,
    check_int,
    kind_counts,
    seeded_rng,
    uniform_between,
)
from plume.traces.traceset import (
    MAX_PADDED_SAMPLES,
    TraceFileError,
    TraceSet,
    check_padding,
)

__all__ = [
    "CAPACITY",
    "DATASET_SEED",
    "LB_DATASETS",
    "LB_KINDS",
    "LB_UNITS",
    "N_JOBS",
    "PARK_RATES",
    "SIZE_CAP",
    "JobSequence",
    "LbKind",
    "generate_lb_dataset",
    "generate_lb_mixed",
    "generate_park",
    "load_lb_csv",
    "load_lb_dataset",
    "read_lb_csv",
    "write_lb_csv",
]

N_JOBS = 650
"""Jobs per trace: the paper's cap (default of the generators and of the CSV reader)."""

PARK_RATES = (0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95, 1.05)
"""Park's service rates (work units per time unit) of its 10 servers."""

CAPACITY = 6.0
"""Total service rate of Park's servers (``sum(PARK_RATES)``): the offered load's base."""

PARK_INTERVAL = 55.0
PARK_SHAPE = 1.5
SIZE_SCALE = 100.0
"""Pareto scale (minimum size) of Park's sizes and of every Pareto kind here."""

SIZE_CAP = 100_000
"""Sizes of the mixed kinds are capped here (about 2 % of an episode's work at rho = 0.7)."""

MICE = (20, 80)
"""Size range of the bimodal kind's mice (uniform integers, inclusive)."""
ELEPHANT_SCALE = 2000.0
"""Pareto scale of the bimodal kind's elephants."""
MMPP_DWELL = (60.0, 20.0)
"""Mean number of jobs of a calm and of a burst spell (``bursty`` kind)."""

DATASET_SEED = 2302
"""Seed of every built-in split (never a run seed)."""

LB_UNITS = {"interarrival": "time units", "job_size": "work units",
            "offered_load": "1", "tail_index": "1", "burstiness": "1"}
SPLITS = ("train", "test")


@dataclass(frozen=True)
class LbKind:
    """One load regime of the mixed generator; each range is drawn uniformly per trace.

    Attributes:
        weight: default share of the kind in ``lb_mixed``.
        arrivals: ``"poisson"``, ``"batch"`` (simultaneous jobs) or ``"mmpp"`` (two-state
            Markov-modulated rate, switching counted in jobs).
        sizes: ``"pareto"`` (scale 100, capped) or ``"bimodal"`` (mice + Pareto elephants).
        load: target offered load range.
        tail: Pareto shape range (of the elephants for bimodal sizes).
        burst: mean batch size (batch) or burst-to-calm rate ratio (mmpp); 1 for Poisson.
        elephants: share of elephants range (bimodal sizes only).
    """

    weight: float
    arrivals: str
    sizes: str
    load: tuple[float, float]
    tail: tuple[float, float]
    burst: tuple[float, float] = (1.0, 1.0)
    elephants: tuple[float, float] = (0.0, 0.0)


_LOAD = (0.55, 0.85)
_TAIL = (1.4, 1.8)
LB_KINDS: dict[str, LbKind] = {
    "typical": LbKind(0.6, "poisson", "pareto", _LOAD, _TAIL),
    "heavy_tail": LbKind(0.1, "poisson", "pareto", _LOAD, (1.05, 1.25)),
    "bimodal": LbKind(0.1, "poisson", "bimodal", _LOAD, (2.0, 3.0), elephants=(0.03, 0.08)),
    "batch": LbKind(0.1, "batch", "pareto", _LOAD, _TAIL, burst=(3.0, 6.0)),
    "bursty": LbKind(0.1, "mmpp", "pareto", _LOAD, _TAIL, burst=(4.0, 8.0)),
}
"""Kinds of ``lb_mixed`` in stream order (append only: the index seeds the kind)."""


# --------------------------------------------------------------------------------------
# Checks, streams, kind counts
# --------------------------------------------------------------------------------------







# --------------------------------------------------------------------------------------
# Building blocks (vectorised across the traces of a kind)
# --------------------------------------------------------------------------------------



def _pareto(shape: np.ndarray, scale: float, u: np.ndarray) -> np.ndarray:
    """Classical Pareto by inversion: ``scale * (1 - u) ** (-1 / shape)``."""
    return scale * (1.0 - u) ** (-1.0 / shape)


def _capped_pareto_mean(shape: np.ndarray, scale: float, cap: float) -> np.ndarray:
    """``E[min(X, cap)]`` of a Pareto(shape, scale): ``scale + scale / (shape - 1) *
    (1 - (scale / cap) ** (shape - 1))`` (the integral of its survival function)."""
    return scale + scale / (shape - 1.0) * (1.0 - (scale / cap) ** (shape - 1.0))


def _gap_beta(mean_gap: np.ndarray) -> np.ndarray:
    """The ``beta`` with ``E[int(Exp(beta))] = 1 / (exp(1 / beta) - 1) = mean_gap``."""
    return 1.0 / np.log1p(1.0 / mean_gap)


def _sizes(kind: LbKind, tail: np.ndarray, share: np.ndarray, u: np.ndarray,
           pick: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer sizes of Poisson/MMPP kinds from uniforms ``u`` and ``pick`` (count, n_jobs),
    and each trace's mean size (``- 0.5`` for the truncation)."""
    if kind.sizes == "pareto":
        raw = np.minimum(_pareto(tail[:, None], SIZE_SCALE, u), SIZE_CAP)
        return np.floor(raw), _capped_pareto_mean(tail, SIZE_SCALE, SIZE_CAP) - 0.5
    elephant = np.minimum(_pareto(tail[:, None], ELEPHANT_SCALE, u), SIZE_CAP)
    mice = MICE[0] + np.floor(u * (MICE[1] - MICE[0] + 1))
    sizes = np.where(pick < share[:, None], np.floor(elephant), mice)
    mean = (1 - share) * sum(MICE) / 2 + share * (
        _capped_pareto_mean(tail, ELEPHANT_SCALE, SIZE_CAP) - 0.5)
    return sizes, mean


def _batch_sizes(tail: np.ndarray, first: np.ndarray, u: np.ndarray,
                 jitter: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A Pareto base size per batch (from the uniform of its first job), every job of the
    batch within +-20 % of it; and each trace's mean size."""
    base = np.minimum(_pareto(tail[:, None], SIZE_SCALE, u), SIZE_CAP)
    opener = np.maximum.accumulate(np.where(first, np.arange(first.shape[1]), 0), axis=1)
    sizes = np.floor(np.take_along_axis(base, opener, axis=1) * (0.8 + 0.4 * jitter))
    return sizes, _capped_pareto_mean(tail, SIZE_SCALE, SIZE_CAP) - 0.5


def _batch_starts(mean_batch: np.ndarray, rng, n_jobs: int) -> np.ndarray:
    """(count, n_jobs) True where a job opens a batch; batch sizes are 1 + geometric with
    mean ``mean_batch`` (numpy's geometric counts trials, so its mean is 1 / p)."""
    count = mean_batch.size
    lengths = rng.geometric(1.0 / mean_batch[:, None], (count, n_jobs))
    starts = np.cumsum(lengths, axis=1) - lengths
    first = np.zeros((count, n_jobs + 1), dtype=bool)
    rows = np.repeat(np.arange(count), n_jobs)
    first[rows, np.minimum(starts, n_jobs).ravel()] = True
    return first[:, :n_jobs]


def _mmpp_means(ratio: np.ndarray, rng, n_jobs: int) -> np.ndarray:
    """(count, n_jobs) mean gap factor per job of a two-state chain over jobs: calm spells
    of mean ``MMPP_DWELL[0]`` jobs, bursts of ``MMPP_DWELL[1]``; a burst's arrival rate is
    ``ratio`` times the calm one and the factors average to 1 over the stationary law."""
    calm, burst = MMPP_DWELL
    q = burst / (calm + burst)  # stationary share of burst jobs
    calm_factor = 1.0 / (1.0 - q + q / ratio)
    u = rng.random((ratio.size, n_jobs))
    state = u[:, 0] < q
    states = np.empty((ratio.size, n_jobs), dtype=bool)
    for j in range(n_jobs):
        if j:
            leave = np.where(state, 1.0 / burst, 1.0 / calm)
            state = state ^ (u[:, j] < leave)
        states[:, j] = state
    return np.where(states, calm_factor[:, None] / ratio[:, None], calm_factor[:, None])


def _kind_traces(kind: LbKind, count: int, rngs, n_jobs: int) -> dict[str, np.ndarray]:
    """Every trace of one kind: series and ground-truth constants. Stream 0 holds the
    per-trace parameters, 1 the size uniforms, 2 the elephant picks or batch jitter, 3 the
    arrival structure, 4 the batch or MMPP gaps (one call each, so row j depends on j only)."""
    params = rngs[0].random((count, 4))
    load, tail = uniform_between(kind.load, params[:, 0]), uniform_between(kind.tail, params[:, 1])
    burst = uniform_between(kind.burst, params[:, 2])
    share = uniform_between(kind.elephants, params[:, 3])
    u, pick = rngs[1].random((count, n_jobs)), rngs[2].random((count, n_jobs))
    if kind.arrivals == "batch":
        first = _batch_starts(burst, rngs[3], n_jobs)
        sizes, mean_size = _batch_sizes(tail, first, u, pick)
        mean_gap = mean_size / (load * CAPACITY)
        batch_gap = np.floor(_gap_beta(mean_gap * burst)[:, None]
                             * rngs[4].standard_exponential((count, n_jobs)))
        gaps = np.where(first, batch_gap, 0.0)
    else:
        sizes, mean_size = _sizes(kind, tail, share, u, pick)
        mean_gap = mean_size / (load * CAPACITY)
        factor = (_mmpp_means(burst, rngs[3], n_jobs) if kind.arrivals == "mmpp"
                  else np.ones((count, 1)))
        gaps = np.floor(_gap_beta(mean_gap[:, None] * factor)
                        * rngs[4].standard_exponential((count, n_jobs)))
    return {"interarrival": gaps, "job_size": sizes, "offered_load": load,
            "tail_index": tail, "burstiness": burst}


def _assemble(parts: dict[str, dict], order_rng: np.random.Generator, name: str,
              meta: dict) -> TraceSet:
    """One TraceSet from per-kind parts, kinds interleaved at random, each kept in order."""
    kinds = list(parts)
    codes = np.repeat(np.arange(len(kinds)), [len(parts[k]["offered_load"]) for k in kinds])
    shuffled = codes[order_rng.permutation(codes.size)]
    order = np.argsort(np.argsort(shuffled, kind="stable"))  # output row -> grouped row

    def stack(key: str) -> np.ndarray:
        return np.concatenate([parts[k][key] for k in kinds])[order]

    n_jobs = parts[kinds[0]]["job_size"].shape[1]
    return TraceSet(
        name=name,
        series={key: stack(key) for key in ("interarrival", "job_size")},
        lengths=np.full(codes.size, n_jobs),
        constants={key: stack(key) for key in ("offered_load", "tail_index", "burstiness")},
        labels=np.array(kinds)[shuffled],
        trace_ids=np.array([f"{name}/{i:04d}" for i in range(codes.size)]),
        meta=meta,
    )


# --------------------------------------------------------------------------------------
# Public generators
# --------------------------------------------------------------------------------------

def generate_lb_mixed(n: int, seed: int, class_weights: Mapping[str, float] | None = None, *,
                      n_jobs: int = N_JOBS, stream: tuple[int, ...] = (),
                      name: str = "lb_mixed") -> TraceSet:
    """``n`` job sequences of the :data:`LB_KINDS` regimes (module docstring).

    Args:
        n: number of traces.
        seed: generator seed (with ``stream``, fixes every trace).
        class_weights: kind -> weight (normalised; kinds left out get 0); ``None`` = each
            kind's default weight (60 % typical, 10 % each minority).
        n_jobs: jobs per trace (the paper's 650 by default).
        stream: spawn-key prefix, so datasets and splits draw from disjoint streams.
        name: TraceSet name and trace-id prefix (ids ``"<name>/0000"``, ...).

    Raises:
        ValueError: bad ``n``, ``seed``, ``n_jobs`` or ``class_weights`` (naming the kinds).
    """
    n, seed = check_int(n, "n", 1), check_int(seed, "seed", 0)
    n_jobs = check_int(n_jobs, "n_jobs", 1)
    stream = tuple(check_int(s, "every stream entry", 0) for s in stream)
    counts = kind_counts(n, LB_KINDS, class_weights)
    parts = {}
    for index, (kind_name, kind) in enumerate(LB_KINDS.items()):
        if counts[kind_name]:
            rngs = [seeded_rng(seed, (*stream, 0, index, q)) for q in range(5)]
            parts[kind_name] = _kind_traces(kind, counts[kind_name], rngs, n_jobs)
    meta = {"generator": "lb_mixed", "seed": seed,
            "stream": f"SeedSequence({seed}, spawn_key={stream} + (0, kind, quantity))",
            "class_weights": {k: c / n for k, c in counts.items()}, "kind_counts": counts,
            "kinds": {k: asdict(v) for k, v in LB_KINDS.items()}, "units": LB_UNITS,
            "capacity": CAPACITY, "size_cap": SIZE_CAP}
    return _assemble(parts, seeded_rng(seed, (*stream, 1)), name, meta)


def generate_park(n: int, seed: int, *, n_jobs: int = N_JOBS, stream: tuple[int, ...] = (),
                  name: str = "park") -> TraceSet:
    """``n`` job sequences of Park's default generator: gaps ``int(Exp(mean 55))``, sizes
    ``int((Lomax(1.5) + 1) * 100)`` (numpy's ``pareto`` is Lomax), label ``park``.

    Not bit-identical to Park's seed-42 stream (Park draws size and gap alternately from one
    RandomState); the distribution is the same."""
    n, seed = check_int(n, "n", 1), check_int(seed, "seed", 0)
    n_jobs = check_int(n_jobs, "n_jobs", 1)
    stream = tuple(check_int(s, "every stream entry", 0) for s in stream)
    sizes = np.floor((seeded_rng(seed, (*stream, 0, 0)).pareto(PARK_SHAPE, (n, n_jobs)) + 1.0)
                     * SIZE_SCALE)
    gaps = np.floor(seeded_rng(seed, (*stream, 0, 1)).exponential(PARK_INTERVAL, (n, n_jobs)))
    mean_gap = 1.0 / (math.exp(1.0 / PARK_INTERVAL) - 1.0)  # E[int(Exp(55))] = 54.5
    mean_size = SIZE_SCALE * PARK_SHAPE / (PARK_SHAPE - 1.0) - 0.5
    meta = {"generator": "park", "seed": seed, "stream": f"SeedSequence({seed}, spawn_key="
            f"{stream} + (0, quantity))", "units": LB_UNITS, "capacity": CAPACITY,
            "job_interval": PARK_INTERVAL, "pareto_shape": PARK_SHAPE,
            "pareto_scale": SIZE_SCALE}
    return TraceSet(
        name=name, series={"interarrival": gaps, "job_size": sizes},
        lengths=np.full(n, n_jobs),
        constants={"offered_load": np.full(n, mean_size / (mean_gap * CAPACITY)),
                   "tail_index": np.full(n, PARK_SHAPE), "burstiness": np.ones(n)},
        labels=np.full(n, "park"), trace_ids=np.array([f"{name}/{i:04d}" for i in range(n)]),
        meta=meta)


# --------------------------------------------------------------------------------------
# Built-in datasets
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LbDataset:
    """A built-in dataset: what it is, how to generate ``n`` traces, the split sizes."""

    description: str
    generator: Callable[..., TraceSet]
    sizes: Mapping[str, int]


def _balanced(n: int, seed: int, **kwargs) -> TraceSet:
    return generate_lb_mixed(n, seed, dict.fromkeys(LB_KINDS, 1.0), **kwargs)


LB_DATASETS: dict[str, LbDataset] = {
    "lb_mixed": LbDataset(
        "Skewed LB regimes, 650 jobs each: 60 % typical Poisson/Pareto, 10 % each heavy-tail, "
        "bimodal, batch and bursty arrivals (offered load 0.55-0.85)",
        generate_lb_mixed, {"train": 1000, "test": 250}),
    "park": LbDataset(
        "Park's load_balance defaults, 650 jobs each: Exp(55) gaps, Pareto(1.5, 100) sizes "
        "(offered load ~0.92)", generate_park, {"train": 1000, "test": 250}),
    "lb_balanced": LbDataset(
        "The lb_mixed regimes in equal shares (20 % each)", _balanced,
        {"train": 1000, "test": 250}),
}
"""Dataset name -> description, generator and split sizes."""

STREAM_ORDER: tuple[tuple[str, str], ...] = tuple(
    (name, split) for name in ("lb_mixed", "park", "lb_balanced") for split in SPLITS)
"""Split k draws from ``stream=(k,)``; fixed explicitly so a new dataset can only append."""


def _check_names(name: str, split: str) -> None:
    check_dataset_split(name, split, LB_DATASETS, SPLITS, "LB")

def generate_lb_dataset(name: str, split: str, seed: int = DATASET_SEED) -> TraceSet:
    """One split of a built-in dataset (``"<name>/<split>"``, ids ``"<name>/<split>/0000"``)."""
    _check_names(name, split)
    dataset = LB_DATASETS[name]
    return dataset.generator(dataset.sizes[split], seed,
                             stream=(STREAM_ORDER.index((name, split)),),
                             name=f"{name}/{split}")


@cache
def _cached(name: str, split: str, seed: int) -> TraceSet:
    return generate_lb_dataset(name, split, seed)


def load_lb_dataset(name: str, split: str, seed: int = DATASET_SEED) -> TraceSet:
    """Like :func:`generate_lb_dataset`, memoised in-process (the TraceSet is shared: its
    arrays are read-only; do not mutate its dicts)."""
    _check_names(name, split)
    return _cached(name, split, check_int(seed, "seed", 0))


# --------------------------------------------------------------------------------------
# CSV files
# --------------------------------------------------------------------------------------

class JobSequence(NamedTuple):
    """One trace read from a CSV file: integer-valued float arrays and the parsed header."""

    interarrival: np.ndarray
    job_size: np.ndarray
    header: dict


COLUMNS = "arrival_time,size"


def read_lb_csv(path: str | Path, max_jobs: int | None = N_JOBS) -> JobSequence:
    """Read one ``arrival_time,size`` file (module docstring); the trace id is the file stem.

    Every row is checked (also those past ``max_jobs``) before the first ``max_jobs`` jobs
    are kept (``None`` keeps all).

    Raises:
        TraceFileError: naming the file and line: unreadable file, no job rows, a bad header
            comment, a wrong column count, a non-numeric, non-integer or negative value, or
            an arrival time smaller than the one before.
    """
    path = Path(path)
    tid = path.stem
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise TraceFileError(path, f"cannot be read as text ({err})", trace_id=tid) from None
    header, rows = _csv_rows(path, tid, text)
    if not rows:
        raise TraceFileError(path, f"no job rows: expected lines '{COLUMNS}'", 1, tid)
    arrival, size = _check_rows(path, tid, rows)
    if max_jobs is not None:
        arrival, size = arrival[:max_jobs], size[:max_jobs]
    return JobSequence(np.diff(arrival, prepend=0.0), size, header)


def _csv_rows(path: Path, tid: str, text: str) -> tuple[dict, list[tuple[int, float, float]]]:
    """The header comment and (line, arrival, size) of every data row, values parsed."""
    header: dict = {}
    rows: list[tuple[int, float, float]] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line.startswith("#"):
            if not rows and not header and "=" in line:
                header = _header(path, tid, number, line[1:])
            continue
        if not line or (not rows and line.replace(" ", "").lower() == COLUMNS):
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 2:
            raise TraceFileError(path, f"expected 2 columns '{COLUMNS}', got {len(fields)}: "
                                       f"{line[:60]!r}", number, tid)
        rows.append((number, *(_integer(path, tid, number, f, c)
                               for f, c in zip(fields, ("arrival_time", "size")))))
    return header, rows


def _integer(path: Path, tid: str, line: int, text: str, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceFileError(path, f"{column} {text[:30]!r} is not a number", line,
                             tid) from None
    if not math.isfinite(value) or value != math.floor(value):
        raise TraceFileError(path, f"{column} {text[:30]!r} is not an integer (Park's times "
                                   "and sizes are integers)", line, tid)
    if value < 0:
        raise TraceFileError(path, f"{column} {text[:30]!r} is negative", line, tid)
    return value


def _header(path: Path, tid: str, line: int, text: str) -> dict:
    """``servers=10 rates=0.15,...`` -> {"servers": 10, "rates": [...]}; other keys kept."""
    header: dict = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if not sep:
            raise TraceFileError(path, f"header token {token!r} is not key=value", line, tid)
        header[key] = value
    try:
        if "servers" in header:
            header["servers"] = int(header["servers"])
        if "rates" in header:
            header["rates"] = [float(r) for r in header["rates"].split(",")]
    except ValueError:
        raise TraceFileError(path, f"header {text.strip()[:60]!r}: servers must be an integer "
                                   "and rates comma-separated numbers", line, tid) from None
    rates = header.get("rates", [1.0])
    if header.get("servers", 1) < 1 or not all(math.isfinite(r) and r > 0 for r in rates):
        raise TraceFileError(path, "header: servers must be >= 1 and rates positive", line, tid)
    if "rates" in header and header.get("servers", len(rates)) != len(rates):
        raise TraceFileError(path, f"header: servers={header['servers']} but {len(rates)} "
                                   "rates", line, tid)
    return header


def _check_rows(path: Path, tid: str, rows) -> tuple[np.ndarray, np.ndarray]:
    table = np.array([(a, s) for _, a, s in rows], dtype=np.float64)
    arrival, size = table[:, 0], table[:, 1]
    back = np.flatnonzero(np.diff(arrival) < 0)
    if back.size:
        line, value = rows[back[0] + 1][0], arrival[back[0] + 1]
        raise TraceFileError(path, f"arrival_time {value:g} is smaller than the one before "
                                   "(arrival times must not decrease)", line, tid)
    return arrival, size


def write_lb_csv(path: str | Path, interarrival, job_size,
                 service_rates: tuple[float, ...] | None = PARK_RATES) -> Path:
    """Write one trace as ``arrival_time,size`` rows (arrival = cumulative gaps), with the
    ``# servers=... rates=...`` header comment unless ``service_rates`` is None, and the
    column-name line; :func:`read_lb_csv` reads it back exactly."""
    gaps, sizes = np.asarray(interarrival, np.float64), np.asarray(job_size, np.float64)
    if gaps.ndim != 1 or gaps.shape != sizes.shape or gaps.size == 0:
        raise ValueError(f"interarrival and job_size must be 1-D of one non-zero length, got "
                         f"{gaps.shape} and {sizes.shape}")
    values = np.concatenate([gaps, sizes])
    if not np.all(np.isfinite(values) & (values >= 0) & (values == np.floor(values))):
        raise ValueError("interarrival and job_size must be non-negative integers")
    lines = [] if service_rates is None else [
        f"# servers={len(service_rates)} rates={','.join(repr(float(r)) for r in service_rates)}"]
    lines.append(COLUMNS)
    lines += [f"{int(a)},{int(s)}" for a, s in zip(np.cumsum(gaps).tolist(), sizes.tolist())]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def load_lb_csv(files: Mapping[str, Path], name: str, meta: Mapping,
                max_jobs: int | None = N_JOBS, *,
                max_padded_samples: int | None = MAX_PADDED_SAMPLES) -> TraceSet:
    """One TraceSet of the CSV files ``{trace id: path}`` (in that order), padded past
    ``lengths``; ``meta`` gains the units, ``max_jobs`` and any header comments. With
    ``max_jobs=None`` files are read whole, so padding them to the longest is refused over
    ``max_padded_samples`` (TraceFileError naming the longest file)."""
    jobs = [read_lb_csv(path, max_jobs) for path in files.values()]
    lengths = np.array([len(j.job_size) for j in jobs])
    check_padding(lengths, list(files), 16, max_padded_samples, files=files)
    width = int(lengths.max())

    def pad(key: str) -> np.ndarray:
        return np.stack([np.pad(getattr(j, key), (0, width - len(j.job_size))) for j in jobs])

    headers = {tid: j.header for tid, j in zip(files, jobs) if j.header}
    extra = {"csv_headers": headers} if headers else {}
    return TraceSet(
        name=name, series={"interarrival": pad("interarrival"), "job_size": pad("job_size")},
        lengths=lengths, trace_ids=np.array(list(files)),
        meta={**meta, "units": {k: LB_UNITS[k] for k in ("interarrival", "job_size")},
              "max_jobs": max_jobs, **extra})
