"""Batched replay of piecewise-constant throughput traces: when does a download finish?

Every trace-driven simulator here (TraceBench, ABR in both its settings, a time-varying CC
link) asks the same question for N copies at once: a copy at unwrapped trace time ``tau``
starts a download of ``size`` payload units; at what unwrapped time does it complete? The
answer uses cumulative sums and searchsorted, forward convention (``bandwidth[j]`` holds on
``[time[j], time[j+1])``; the last sample holds until the trace's ``period``, after which
the trace loops): per-trace cumulative payload tables give ``bytes_at(tau)`` (payload
deliverable by ``tau``, whole periods included) and its inverse ``time_at(bytes)``, so a
download is ``time_at(bytes_at(tau) + size)``, and zero-throughput slots are skipped
automatically (the payload is flat there).

Tables are derived from an immutable TraceSet, so every environment over the same TraceSet
object shares them (:meth:`PayloadTables.shared`, :func:`derived_from`): 64 single-copy views
in a ``DummyVecEnv`` cost one set of tables, not 64.

Both look-ups need each copy's slot in its own trace. Rather than one ``np.searchsorted``
over all traces concatenated with offsets (about 100 ns per query, dominated by branch
mispredictions and cache misses), :class:`PayloadTables` gives a bucketed, branchless binary
search over padded per-trace rows: one or two halving steps for a regular grid, all copies at
once. A download within ``COMPLETE_TOL`` = 1e-8 size units of complete at a slot end completes
at that slot end (the reference loop's ``while size > 1e-8``); this also keeps float rounding
from pushing a completion across a following zero-throughput slot.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from functools import cached_property
from typing import Any, TypeVar

import numpy as np

from plume.traces.traceset import TraceSet

T = TypeVar("T")

COMPLETE_TOL = 1e-8
_TINY = float(np.finfo(np.float64).tiny)
LAST_SAMPLE_SECONDS = 1.0
"""How long the last sample holds when a TraceSet gives no ``constants["period"]``."""


_DERIVED: weakref.WeakKeyDictionary[TraceSet, dict[Hashable, Any]] = weakref.WeakKeyDictionary()


def derived_from(traces: TraceSet, key: Hashable, build: Callable[[], T]) -> T:
    """``build()`` the first time ``(traces, key)`` is asked for, the same object afterwards.

    Why: every environment over a TraceSet (each single copy in a ``DummyVecEnv``, each test env
    of an evaluation) precomputes the same tables from it; a TraceSet is immutable, so one copy
    can serve all of them. Keyed by the TraceSet *object* (no content hashing) and held weakly,
    so the tables go when the TraceSet does. ``build`` must return read-only data that keeps no
    reference to ``traces`` (that would keep it alive), and ``key`` must name every parameter
    the data depends on. A ``build`` that raises caches nothing.
    """
    per_traces = _DERIVED.setdefault(traces, {})
    if key not in per_traces:
        per_traces[key] = build()
    return per_traces[key]


def derived_tables(traces: TraceSet) -> dict[Hashable, Any]:
    """Every object :func:`derived_from` built for ``traces`` so far, by key (a copy of the
    mapping): what a checkpoint of an environment refers to instead of copying."""
    return dict(_DERIVED.get(traces, {}))


def read_only(*arrays: np.ndarray) -> None:
    """Mark shared arrays read-only, so that a consumer writing into one fails loudly."""
    for array in arrays:
        array.setflags(write=False)


def trace_periods(traces: TraceSet) -> np.ndarray:
    """(n,) loop period of every trace: ``constants["period"]`` or last time + 1 s, measured
    from the trace's first sample."""
    rows = np.arange(len(traces))
    last = traces.time[rows, traces.lengths - 1] - traces.time[:, 0]
    if "period" in traces.constants:
        period = np.asarray(traces.constants["period"], dtype=np.float64)
        short = period <= last
        if short.any():
            raise ValueError(
                f"TraceSet {traces.name!r}: trace {traces.trace_ids[int(np.argmax(short))]!r} "
                "has a period that ends before its last sample")
        return period
    return last + LAST_SAMPLE_SECONDS


class PayloadTables:
    """Per-trace cumulative payload tables and bucket indexes for a batched row search.

    ``payload_scale`` converts throughput x seconds into the simulator's size unit (e.g.
    Pensieve's Mbit/s -> bytes with its 0.95 payload share: 1e6 / 8 * 0.95).

    Row r of every flat table holds trace r's slots in ``stride`` entries, so copy c's slot j
    lives at ``r * stride + j``; search keys are padded with +inf. Two searches per step:

    * ``bytes_at``: slot of a time x in [0, period): the number of slot starts <= x, minus 1;
    * ``time_at``: slot in which a payload y in (0, total] completes: the number of slot-end
      payloads < y.

    Each is a bucketed, branchless binary search: ``buckets`` equal-width buckets per trace
    give a lower bound of the answer (a global index, row base included) and the widest
    bucket range fixes the number of halving steps, so a near-uniform grid needs one or two
    steps instead of log2(L). Bucket bounds carry a margin of 1e-9 of the span, far above the
    rounding of the bucket computation.

    Every array is read-only: build through :meth:`shared` to reuse one instance per TraceSet.
    """

    @classmethod
    def shared(cls, traces: TraceSet, payload_scale: float = 1.0) -> PayloadTables:
        """The tables of ``traces`` at ``payload_scale``, built once per TraceSet object."""
        scale = float(payload_scale)
        return derived_from(traces, (cls, scale), lambda: cls(traces, scale))

    def __init__(self, traces: TraceSet, payload_scale: float = 1.0) -> None:
        n, width = traces.time.shape
        lengths = traces.lengths
        valid = np.arange(width)[None, :] < lengths[:, None]
        rows = np.arange(n)
        local = traces.time - traces.time[:, :1]  # slot start times, each trace from 0
        widths = np.zeros((n, width))
        widths[:, :-1] = np.diff(local, axis=1)
        period = trace_periods(traces)
        widths[rows, lengths - 1] = (  # 1.0 exactly when the trace gives no period
            period - local[rows, lengths - 1] if "period" in traces.constants
            else LAST_SAMPLE_SECONDS)
        bandwidth = np.where(valid, traces.bandwidth * payload_scale, 0.0)
        payload = np.where(valid, bandwidth * widths, 0.0)
        end = np.cumsum(payload, axis=1)  # payload delivered by the end of each slot
        self.period = period
        self.total = end[rows, lengths - 1]
        self.local_time = np.where(valid, local, 0.0)  # (n, W), for reset positions

        buckets = min(2 * width, 512)  # bounded memory for long traces (more steps there)
        self.buckets = buckets
        time_lo, time_range = self._buckets(local, lengths, self.period, buckets, "right")
        pay_lo, pay_range = self._buckets(end, lengths, self.total, buckets, "left")
        self.time_steps = self._steps(time_range)
        self.payload_steps = self._steps(pay_range)
        reach = max([1, *self.time_steps, *self.payload_steps]) * 2
        self.stride = width + reach  # probes may read up to 2 * largest step past a row end
        self.time_lo = (time_lo + (rows * self.stride)[:, None]).reshape(-1)
        self.payload_lo = (pay_lo + (rows * self.stride)[:, None]).reshape(-1)

        def padded(values: np.ndarray, fill: float) -> np.ndarray:
            out = np.full((n, self.stride), fill)
            out[:, :width] = np.where(valid, values, fill)
            return out.reshape(-1)

        key_time = padded(local, np.inf)
        key_payload = padded(end, np.inf)
        # Views shifted by step - 1: ``take(view, g)`` probes key[g + step - 1].
        self.time_probes = [key_time[step - 1 :] for step in self.time_steps]
        self.payload_probes = [key_payload[step - 1 :] for step in self.payload_steps]
        # Slot data gathered together (one cache line per copy): start time, payload
        # delivered by the slot start, throughput, end time.
        self.slot = np.ascontiguousarray(
            np.stack([padded(local, 0.0), padded(end - payload, 0.0), padded(bandwidth, 1.0),
                      padded(local + widths, 0.0)], axis=1)
        )
        read_only(self.period, self.total, self.local_time, self.time_lo, self.payload_lo,
                  self.slot, *self.time_probes, *self.payload_probes)

    @cached_property
    def slot_end(self) -> np.ndarray:
        """Local end time of every padded slot, contiguous (read-only; built on first use, so
        environments sharing these tables share it too)."""
        end = np.ascontiguousarray(self.slot[:, 3])
        read_only(end)
        return end

    @staticmethod
    def _buckets(keys, lengths, spans, buckets, side):
        """Per trace and bucket q (of width span / buckets, plus one overflow bucket): a lower
        bound of the count (side "right": keys <= v; "left": keys < v) for any v in the
        bucket, and the widest gap between that bound and the upper one."""
        n = len(lengths)
        lo = np.empty((n, buckets + 1), dtype=np.int64)
        widest = 0
        steps = np.arange(buckets + 2)
        for r in range(n):
            row = keys[r, : lengths[r]]
            edges = steps * (spans[r] / buckets)
            margin = 1e-9 * spans[r]
            lo[r] = np.searchsorted(row, edges[:-1] - margin, side="left")
            hi = np.searchsorted(row, edges[1:] + margin, side=side)
            widest = max(widest, int((hi - lo[r]).max()))
        return lo, widest

    @staticmethod
    def _steps(widest: int) -> list[int]:
        """Halving steps whose sum (2**levels - 1) covers ``widest``."""
        return [1 << k for k in reversed(range(int(widest).bit_length()))]




class BatchedDownload:
    """Completion times of N concurrent downloads, each copy on its own trace.

    ``assign(copies, traces)`` puts copies on traces; ``finish_time(tau, size, out)`` writes
    the unwrapped time at which a download of ``size`` started at unwrapped time ``tau``
    completes. All arithmetic runs in place on preallocated float64 arrays; table look-ups
    use ``take(..., mode="clip")`` on indices computed here (always in range).
    """

    def __init__(self, tables: PayloadTables, n: int) -> None:
        self.tables = tables
        self._per_trace = np.stack(  # period, total, buckets per second, buckets per payload
            [tables.period, tables.total, tables.buckets / tables.period,
             tables.buckets / tables.total], axis=1)
        self._state = np.zeros((4, n))
        self.period, self.total, self._time_scale, self._payload_scale = self._state
        self._bucket_base = np.zeros(n, dtype=np.int64)
        f = lambda: np.zeros(n, dtype=np.float64)  # noqa: E731
        self._k, self._x, self._b, self._y, self._s1 = f(), f(), f(), f(), f()
        self._g, self._bucket = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        self._key, self._hit = f(), np.zeros(n, dtype=bool)
        self._slot = np.zeros((n, 4))
        self._slot_cols = [self._slot[:, j] for j in range(4)]

    def assign(self, copies: np.ndarray, traces: np.ndarray) -> None:
        """Copies ``copies`` now replay traces ``traces`` (indices into the TraceSet)."""
        self._state[:, copies] = self._per_trace[traces].T
        self._bucket_base[copies] = traces * (self.tables.buckets + 1)

    def finish_time(self, tau: np.ndarray, size: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out`` = unwrapped completion time of ``size`` payload units started at ``tau``."""
        tab = self.tables
        k, x, b, y, s1, g = self._k, self._x, self._b, self._y, self._s1, self._g
        period, total = self.period, self.total
        slot, slot_start, slot_payload, slot_bw, slot_end = self._slot, *self._slot_cols

        # bytes_at(tau): k whole periods, x into the current one; slot = count(starts <= x) - 1.
        np.divide(tau, period, out=k)
        np.floor(k, out=k)
        np.multiply(k, period, out=x)
        np.subtract(tau, x, out=x)
        np.maximum(x, 0.0, out=x)
        self._search(x, self._time_scale, tab.time_lo, tab.time_probes, tab.time_steps,
                     np.less_equal)  # g = row base + count
        g -= 1
        tab.slot.take(g, axis=0, out=slot, mode="clip")
        np.subtract(x, slot_start, out=s1)
        s1 *= slot_bw
        s1 += slot_payload
        np.multiply(k, total, out=b)
        b += s1
        b += size  # payload position at which the download is complete
        b -= COMPLETE_TOL  # searched 1e-8 early: see COMPLETE_TOL (wraps included)

        # time_at(b): k whole payload periods and y in (0, total]; slot = count(ends < y).
        # y is clamped to (0, total] against rounding, so the slot found has throughput > 0.
        np.divide(b, total, out=k)
        np.ceil(k, out=k)
        k -= 1.0
        np.multiply(k, total, out=y)
        np.subtract(b, y, out=y)
        np.maximum(y, _TINY, out=y)
        np.minimum(y, total, out=y)
        self._search(y, self._payload_scale, tab.payload_lo, tab.payload_probes,
                     tab.payload_steps, np.less)
        tab.slot.take(g, axis=0, out=slot, mode="clip")
        np.subtract(y, slot_payload, out=out)
        out += COMPLETE_TOL
        out /= slot_bw
        out += slot_start
        np.minimum(out, slot_end, out=out)  # a remainder <= 1e-8 at the slot end is dropped
        np.multiply(k, period, out=s1)
        out += s1
        return out

    def _search(self, value: np.ndarray, scale: np.ndarray, lower: np.ndarray,
                probes: list[np.ndarray], steps: list[int], keep) -> None:
        """Bucketed branchless search of every copy's own row (see ``PayloadTables``):
        ``self._g`` = row base + number of keys k with ``keep(k, value)``."""
        g, key, hit, bucket = self._g, self._key, self._hit, self._bucket
        np.multiply(value, scale, out=key)  # value / bucket width, >= 0
        np.copyto(bucket, key, casting="unsafe")  # truncation = floor
        bucket += self._bucket_base
        lower.take(bucket, out=g, mode="clip")
        for probe, step in zip(probes, steps):
            probe.take(g, out=key, mode="clip")
            keep(key, value, out=hit)
            np.add(g, step, out=g, where=hit)
