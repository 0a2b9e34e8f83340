"""Mahimahi link traces: one trace per text file, one line per 1500-byte delivery
opportunity holding its time in whole ms; mm-link replays the file in a loop. Read into
``bin_s`` bins of Mbit/s, written from a forward trace with Pensieve's walk.

* **Mahimahi bins.** A line ``ts`` is one 1500-byte delivery opportunity at ``ts`` ms; the file
  loops with period ``P`` = last timestamp. Bin ``k`` covers ``[k*bin, (k+1)*bin)`` ms (integer
  ms, no float error), the last bin ends at ``P`` and its Mbit/s use its true width. A
  timestamp equal to ``P`` is counted at time 0 (``ts mod P``): mm-link replays the schedule
  shifted by ``P``, so the opportunity at ``P`` *is* the next loop's time 0. Each line is then
  counted exactly once per period, and one period carries ``1500 x lines`` bytes. A file
  holding just ``1`` is one packet per ms, 12 Mbit/s.
* **Mahimahi writing** follows Pensieve's rule (walk 1 ms at a time; in ms ``k`` of a segment
  with ``r`` packets/ms emit ``floor(k*r) - already_emitted``) with two changes so that
  writing and reading round-trip within one packet per bin: the packets of a segment's k-th
  millisecond ``[s+k-1, s+k)`` get the timestamp ``s+k-1`` (Pensieve writes ``s+k``, which
  moves every segment's last millisecond into the next bin), and no leading ``0`` line is
  written. Packets at 0 are written as ``P`` (the same instant of the loop); if the last line
  is still not ``P``, one line ``P`` is appended so the file keeps its period (one extra
  packet per period).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from plume.traces.formats._sets import SERIES_UNITS, ForwardTrace, _series_traceset
from plume.traces.formats._text import _data_lines, _fast_columns, _first_problem, _LineNumbers
from plume.traces.traceset import TraceFileError, TraceSet

PACKET_BYTES = 1500
MBPS_PER_PACKET_PER_MS = PACKET_BYTES * 8 / 1e6 * 1e3  # one packet per ms = 12 Mbit/s
_STAMP_BYTES = b"0123456789\n\r"  # digits only: Arrow would also take '0x10' as an integer


def load(files: Mapping[str, Path], name: str, meta: Mapping, limit: int | None, /,
         **options) -> TraceSet:
    """The registry's loader: the split's files ``{trace id: path}`` as one TraceSet of
    ``bin_s`` bins (``options``: ``bin_s``, default 0.1 s)."""
    meta = {**meta, "units": SERIES_UNITS, "bin_s": options.get("bin_s", 0.1)}
    traces = [read_mahimahi(path, **options) for path in files.values()]
    return _series_traceset(traces, list(files), name, meta, files, limit)


def read_mahimahi(path: str | Path, bin_s: float = 0.1) -> ForwardTrace:
    """Read a Mahimahi link trace as ``bin_s`` bins of Mbit/s (rules in the module docstring).

    Blank and ``#`` lines are skipped; the trace id is the file stem.

    Raises:
        TraceFileError: a non-integer line, a negative or decreasing timestamp, an empty file
            or a zero period (the last timestamp is 0), naming file, line and trace.
        ValueError: ``bin_s`` is not a positive whole number of milliseconds.
    """
    path = Path(path)
    bin_ms = _bin_ms(bin_s)
    stamps, lines = _mahimahi_stamps(path, path.stem)
    period = int(stamps[-1])
    if period == 0:
        raise TraceFileError(path, "zero period: the last timestamp (the loop period) is 0 ms",
                             lines[-1], path.stem)
    n_bins = -(-period // bin_ms)
    counts = np.bincount((stamps % period) // bin_ms, minlength=n_bins)
    width_ms = np.minimum(bin_ms, period - np.arange(n_bins) * bin_ms)
    return ForwardTrace(np.arange(n_bins) * bin_ms / 1000.0,
                        counts * MBPS_PER_PACKET_PER_MS / width_ms, period / 1000.0)


def _bin_ms(bin_s: float) -> int:
    bin_ms = int(round(bin_s * 1000))
    if bin_ms < 1 or abs(bin_ms - bin_s * 1000) > 1e-6:
        raise ValueError(f"bin_s must be a positive whole number of milliseconds, got {bin_s}")
    return bin_ms


_INTEGER = re.compile(r"[+-]?\d+")


def _mahimahi_stamps(path: Path, tid: str) -> tuple[np.ndarray, Sequence[int]]:
    """The timestamps and their line numbers: Arrow for a plain file, else line by line."""
    columns = _fast_columns(path, ("ms",), pa.int64(), _STAMP_BYTES)
    if columns is not None and len(columns[0]):
        stamps, lines = columns[0], _LineNumbers(path, len(columns[0]))
    else:
        stamps, lines = _stamps_by_line(path, tid)
    if not (stamps.min() >= 0 and np.all(stamps[1:] >= stamps[:-1])):  # cheap pre-check
        _first_problem(path, tid, lines, [
            (stamps < 0, "timestamp {value} ms is negative"),
            (np.r_[False, np.diff(stamps) < 0], "timestamp {value} ms is smaller than the one "
                                                "before (timestamps must not decrease)")], stamps)
    return stamps, lines


def _stamps_by_line(path: Path, tid: str) -> tuple[np.ndarray, list[int]]:
    rows = _data_lines(path, tid)
    if not rows:
        raise TraceFileError(path, "empty file: no millisecond timestamps", 1, tid)
    for line, text in rows:
        if not _INTEGER.fullmatch(text):
            raise TraceFileError(path, f"{text[:40]!r} is not an integer millisecond "
                                       "timestamp", line, tid)
    return np.array([int(s) for _, s in rows], dtype=np.int64), [n for n, _ in rows]


def write_mahimahi(path: str | Path, time, bandwidth_forward, period: float) -> Path:
    """Write a forward trace (s, Mbit/s, loop period s) as a Mahimahi link trace.

    Pensieve's cooked-to-Mahimahi walk with the timestamp and period rules of the module
    docstring; ``time`` and ``period`` are rounded to whole ms and every sample must last at
    least 1 ms. A 1e-9 packet tolerance on ``floor(k*r)`` lets rates read back from Mahimahi
    re-emit the same packets despite float rounding.
    """
    start, end, rate = _ms_segments(time, bandwidth_forward, period)
    stamps = _pensieve_stamps(start, end, rate)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(map(str, stamps.tolist())) + "\n")
    return path


def _ms_segments(time, bandwidth, period) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t, bw = np.asarray(time, np.float64), np.asarray(bandwidth, np.float64)
    if t.ndim != 1 or t.shape != bw.shape or not len(t):
        raise ValueError(f"time and bandwidth must be 1-D of one length, got {t.shape} and "
                         f"{bw.shape}")
    if not (np.all(np.isfinite(bw)) and np.all(bw >= 0) and np.isfinite(period)):
        raise ValueError("bandwidth must be finite and non-negative, period finite")
    edges = np.rint(np.append(t, period) * 1000).astype(np.int64)
    if edges[0] != 0 or np.any(np.diff(edges) < 1):
        raise ValueError("time must start at 0 and every sample last at least 1 ms (time and "
                         "period are rounded to whole ms)")
    return edges[:-1], edges[1:], bw / MBPS_PER_PACKET_PER_MS


def _pensieve_stamps(start: np.ndarray, end: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """Packet timestamps: floor(k*r) packets due by the end of ms k of each segment."""
    period = int(end[-1])
    seg = np.repeat(np.arange(len(start)), end - start)
    k = np.arange(period) - start[seg] + 1
    due = np.floor(k * rate[seg] + 1e-9).astype(np.int64)
    before = np.where(k == 1, 0, np.roll(due, 1))
    stamps = np.repeat(np.arange(period), due - before)
    stamps = np.concatenate([stamps[stamps > 0], np.full(np.sum(stamps == 0), period)])
    if not stamps.size or stamps[-1] != period:
        stamps = np.append(stamps, period)
    return stamps
