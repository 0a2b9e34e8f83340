"""Cooked traces (Pensieve, Park, Genet): one trace per text file of
``time_s throughput_Mbps`` lines, blank and ``#`` lines skipped, trace id the file's path.

* **Cooked files are backward, TraceSets forward.** A cooked sample ``(t[i], bw[i])`` is the
  throughput measured over ``(t[i-1], t[i]]`` (Pensieve), so after shifting ``t[0]`` to 0 the
  forward series is ``time = t[:-1]``, ``bandwidth = bw[1:]`` and ``period = t[-1]``, the loop
  period Pensieve uses. ``bw[0]`` describes the time before the trace and is dropped. The
  megabits carried over one period are exactly the file's.
* **Mixed sampling intervals are kept, never resampled.** FCC files (dt = 5 s), HSDPA files
  (dt ~ 1 s) and irregular dt all load as they are: each sample holds until the next
  timestamp. Traces of different lengths share one TraceSet, padded past ``lengths``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from plume.traces.formats._sets import SERIES_UNITS, ForwardTrace, _series_traceset
from plume.traces.formats._text import _data_lines, _fast_columns, _first_problem, _LineNumbers
from plume.traces.traceset import TraceFileError, TraceSet

_COOKED_BYTES = b"0123456789+-.eE\n\r"


def load(files: Mapping[str, Path], name: str, meta: Mapping, limit: int | None, /,
         **options) -> TraceSet:
    """The registry's loader: the split's files ``{trace id: path}`` as one TraceSet."""
    traces = [read_cooked(path, **options) for path in files.values()]
    return _series_traceset(traces, list(files), name, {**meta, "units": SERIES_UNITS},
                            files, limit)


def read_cooked(path: str | Path) -> ForwardTrace:
    """Read one cooked file (``time_s throughput_Mbps`` per line) as a forward trace.

    The file's backward samples become ``time = t[:-1] - t[0]``, ``bandwidth = bw[1:]``,
    ``period = t[-1] - t[0]`` (module docstring). Blank and ``#`` lines are skipped.

    Raises:
        TraceFileError: naming the file, line and trace (the file stem) for a non-numeric
            field or wrong column count, non-increasing or non-finite time, negative or
            NaN/inf throughput, an empty file, fewer than 2 samples or all-zero throughput.
    """
    path = Path(path)
    tid = path.stem
    t, bw, lines = _cooked_table(path, tid)  # private arrays: changed in place below
    # Cheap pre-checks (a sum is finite only if every term is); the masks that find the
    # offending line are built only when one fails.
    with np.errstate(over="ignore", invalid="ignore"):
        finite_t, finite_bw = np.isfinite(t.sum()), np.isfinite(bw.sum())
    if not finite_t:
        _first_problem(path, tid, lines, [(~np.isfinite(t), "time {value} is not finite")], t)
    t -= t[0]
    if not (finite_bw and bw.min() >= 0 and np.all(t[1:] > t[:-1])):
        _first_problem(path, tid, lines, [
            (~np.isfinite(bw), "throughput {value} is NaN or infinite"),
            (bw < 0, "throughput {value} Mbit/s is negative"),
            (np.r_[False, np.diff(t) <= 0], "time does not increase (cooked times must "
                                            "strictly increase)")], bw)
    if len(t) < 2:
        raise TraceFileError(path, "only 1 sample: a cooked trace needs at least 2 (the first "
                                   "only marks the start time)", lines[0], tid)
    if not np.any(bw[1:] > 0):
        raise TraceFileError(path, "throughput is zero on every interval, a download on it "
                                   "would never finish", lines[1], tid)
    return ForwardTrace(np.ascontiguousarray(t[:-1]), np.ascontiguousarray(bw[1:]),
                        float(t[-1]))


def _cooked_table(path: Path, tid: str) -> tuple[np.ndarray, np.ndarray, Sequence[int]]:
    """Both columns and the rows' line numbers: Arrow for a plain file, else line by line."""
    columns = _fast_columns(path, ("time", "throughput"), pa.float64(), _COOKED_BYTES)
    if columns is not None and len(columns[0]):
        return columns[0], columns[1], _LineNumbers(path, len(columns[0]))
    rows = _data_lines(path, tid)
    if not rows:
        raise TraceFileError(path, "empty file: no 'time_s throughput_Mbps' lines", 1, tid)
    t, bw = _cooked_columns(path, tid, rows)
    return t, bw, [n for n, _ in rows]


def _cooked_columns(path: Path, tid: str, rows) -> tuple[np.ndarray, np.ndarray]:
    values = []
    for line, text in rows:
        fields = text.split()
        if len(fields) != 2:
            raise TraceFileError(path, f"expected 2 columns 'time_s throughput_Mbps', got "
                                       f"{len(fields)}: {text[:60]!r}", line, tid)
        try:
            values.append((float(fields[0]), float(fields[1])))
        except ValueError:
            raise TraceFileError(path, f"non-numeric field in {text[:60]!r}", line,
                                 tid) from None
    table = np.array(values, dtype=np.float64)
    return table[:, 0], table[:, 1]


def write_cooked(path: str | Path, time, bandwidth, period: float | None = None) -> Path:
    """Write a cooked file; floats are written with ``repr`` so reading them back is exact.

    Without ``period``, ``time`` and ``bandwidth`` are the file's own (backward) columns. With
    it they are a forward trace (what :func:`read_cooked` returns) and the file written is
    ``t = [*time, period]``, ``bw = [bandwidth[0], *bandwidth]``, so reading it back returns
    the same arrays (given ``time[0] == 0``).
    """
    t, bw = np.asarray(time, np.float64), np.asarray(bandwidth, np.float64)
    if period is not None:
        t, bw = np.append(t, period), np.append(bw[:1], bw)
    if t.ndim != 1 or t.shape != bw.shape:
        raise ValueError(f"time and bandwidth must be 1-D of one length, got {t.shape} and "
                         f"{bw.shape}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{a!r} {b!r}\n" for a, b in zip(t.tolist(), bw.tolist())))
    return path
