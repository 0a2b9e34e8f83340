"""Trace-file loaders: cooked, Mahimahi, Puffer and npz files into ABR TraceSets; ``csv``
job sequences (``arrival_time,size``, one file per trace) into LB TraceSets through
``plume.traces.lb``, with the same directory, naming and split rules as cooked files.

Every loader returns the TraceSet conventions (see ``traceset.py``): ``time`` in s starting at
0 and strictly increasing, ``bandwidth`` in **Mbit/s** in the forward convention
(``bandwidth[j]`` holds on ``[time[j], time[j + 1])``, the last sample until
``constants["period"]``, then the trace loops), ``chunk_sizes`` in MB (1e6 bytes), ``ssim_db``
in dB. ``meta["units"]`` says so, ``meta["source"]`` names the path read and ``meta["files"]``
maps each trace id to its source file (relative path). Bad input raises
:class:`TraceFileError`, one line naming the file, the line and the trace, at load time, so a
broken file never reaches a training run.

Rules chosen here (each one is tested):

* **Cooked files are backward, TraceSets forward.** A cooked sample ``(t[i], bw[i])`` is the
  throughput measured over ``(t[i-1], t[i]]`` (Pensieve), so after shifting ``t[0]`` to 0 the
  forward series is ``time = t[:-1]``, ``bandwidth = bw[1:]`` and ``period = t[-1]``, the loop
  period Pensieve uses. ``bw[0]`` describes the time before the trace and is dropped. The
  megabits carried over one period are exactly the file's.
* **Mixed sampling intervals are kept, never resampled.** FCC files (dt = 5 s), HSDPA files
  (dt ~ 1 s) and irregular dt all load as they are: each sample holds until the next
  timestamp. Traces of different lengths share one TraceSet, padded past ``lengths``.
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
* **Puffer streams** (see :func:`load_puffer` for the cleaning rules): row ``i`` holds for
  ``clip(time_sent[i+1] - time_sent[i], 1e-3, 20)`` s, ``time`` is the cumulative sum of those
  durations (Plume clips at 0; 1e-3 keeps ``time`` strictly increasing when two chunks left
  together), and the last row holds 1 s, written explicitly as ``period = time[-1] + 1``.
  Labels are *derived*, not ground truth.
* **Fast, exact parsing.** A plain cooked or Mahimahi file (ASCII; ``#`` only at the start
  of a line; cooked rows ``<number><one space or tab><number>``, Mahimahi rows of digits) is
  parsed by Arrow's C++ CSV reader, whose doubles are correctly rounded like Python's
  ``float``, so the arrays are bit-identical to the line-by-line reader's (9x faster and 4.5x
  less memory on 10 million lines of 17-digit values, one CPU: benchmarks/
  bench_traces.py). Anything else, and every error's wording, comes from the
  line-by-line reader; line numbers of a fast-parsed file are found only when an error
  needs one.
* **Bounded padding.** A TraceSet pads every trace to its longest, so memory is
  ``n_traces x longest``, not the samples read: one 10-million-line trace among 22 short ones
  would need 3.4 GiB. Before padding (cooked, Mahimahi, csv, Puffer, and joining sets),
  ``n_traces x longest`` over :data:`MAX_PADDED_SAMPLES` is refused with one TraceFileError
  naming the longest trace, its file and sample count, the cost and the limit: split or
  resample that trace, or pass ``max_padded_samples=N`` (None: no limit) to
  :func:`load_traces`. The default, 2**24 samples per channel, is 256 MiB for a ``time`` +
  ``bandwidth`` set, so a job's train and test sets at the cap peak under 1 GiB (measured;
  see ``traceset.py``). A Puffer set holds 26 float64 values per sample, 3.25 GiB at the
  cap: a Puffer job that must stay small passes a lower limit.
* **Which files are traces.** In a folder, hidden files and ``README*`` are never read. For
  ``csv`` only ``*.csv`` files are traces. For ``cooked`` and ``mahimahi`` every other file
  is a trace unless its last suffix (case-insensitive) is in :data:`NON_TRACE_SUFFIXES`:
  metadata, docs, code, images, arrays and archives that are clearly not a trace. ``.txt``,
  ``.log``, ``.csv``, ``.dat``, ``.html`` and any other suffix stay traces: cooked and
  Mahimahi names carry dots of their own (``trace_1_http---www.youtube.com``,
  ``report_bus_0001.log``, ``ATT-LTE-driving.down``, Pensieve's ``.txt`` files), and a real
  trace dropped without a word would be worse than a sidecar failing with its file named.
  Skipped files are listed in ``meta["skipped_files"]`` and in one INFO line of the
  ``plume`` logger; :func:`describe_split` counts with the same rule.
* **Splits.** ``train/`` and ``test/`` folders (for npz also ``train.npz`` and ``test.npz``)
  are the splits when present; otherwise a trace is in test iff
  ``int(sha256(trace_id).hexdigest()[:8], 16) % 100 < 20``: fixed, seed-free, independent of
  file order and of which other traces exist.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import itertools
import json
import logging
import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pcsv

from plume.traces.traceset import (
    MAX_PADDED_SAMPLES,
    TraceFileError,
    TraceSet,
    TraceSetFileError,
    check_padding,
)

log = logging.getLogger("plume")

TRACE_FORMATS = ("cooked", "mahimahi", "puffer", "npz", "csv")
SPLIT_CHOICES = ("train", "test", "all")
TEST_PERCENT = 20
MIN_CHUNKS = 86
SLOW_MBPS = 6.0
PACKET_BYTES = 1500
MBPS_PER_PACKET_PER_MS = PACKET_BYTES * 8 / 1e6 * 1e3  # one packet per ms = 12 Mbit/s
PUFFER_HOLD_S = (1e-3, 20.0)
LAST_ROW_S = 1.0
HASH_RULE = f"sha256(trace id) % 100 < {TEST_PERCENT}"
SERIES_UNITS = {"time": "s", "bandwidth": "Mbit/s", "period": "s"}
PUFFER_UNITS = {**SERIES_UNITS, "delivery_rate": "Mbit/s", "min_rtt": "s", "rtt": "s",
                "cwnd": "packets", "in_flight": "packets", "chunk_sizes": "MB",
                "ssim_db": "dB"}

_FORMATS_A = ("426x240-26", "640x360-26", "640x360-24", "854x480-26", "854x480-24",
              "854x480-22", "1280x720-26", "1280x720-24", "1280x720-22", "1280x720-20")
_FORMATS_B = ("426x240-26", "640x360-24", "854x480-26", "854x480-24", "1280x720-26",
              "1280x720-24", "1280x720-22", "1280x720-20", "1920x1080-24", "1920x1080-22")
#: Plume's ``action_lookup.json``: per channel, the 10 Puffer formats from lowest quality up.
PUFFER_FORMATS = {**dict.fromkeys(("abc", "fox", "ion"), _FORMATS_A),
                  **dict.fromkeys(("nbc", "pbs", "cbs", "cw"), _FORMATS_B)}
N_FORMATS = 10
_FORMAT_INDEX = {f"{ch}|{fmt}": i for ch, fmts in PUFFER_FORMATS.items()
                 for i, fmt in enumerate(fmts)}
_UNKNOWN_EXPT = ("puffer_ttp", "bbr")  # Plume's assumption for an expt_id missing in the log

#: Suffixes of files in a cooked or Mahimahi folder that are never traces (module docstring).
NON_TRACE_SUFFIXES = frozenset({
    ".json", ".yaml", ".yml", ".toml", ".ini", ".cfg",  # metadata and settings
    ".md", ".rst", ".pdf", ".ipynb", ".py", ".sh",  # documents and code
    ".png", ".jpg", ".jpeg", ".gif", ".svg",  # images
    ".npz", ".npy", ".parquet", ".pkl", ".pickle",  # arrays and tables
    ".zip", ".gz", ".tgz", ".tar", ".xz", ".bz2", ".7z",  # archives
})
_SERIES_BYTES = 16  # one float64 time + one float64 bandwidth per padded sample


# ---------------------------------------------------------------------------------------
# errors and small helpers
# ---------------------------------------------------------------------------------------

class ForwardTrace(NamedTuple):
    """One trace in the forward convention: ``bandwidth[j]`` (Mbit/s) holds on
    ``[time[j], time[j+1])`` (s), the last sample until ``period``, then it loops."""

    time: np.ndarray
    bandwidth: np.ndarray
    period: float


def in_test_split(trace_id: str) -> bool:
    """Plume's fixed test rule: sha256 of the id, first 8 hex digits, mod 100 < 20."""
    return int(hashlib.sha256(trace_id.encode()).hexdigest()[:8], 16) % 100 < TEST_PERCENT


def _data_lines(path: Path, trace_id: str) -> list[tuple[int, str]]:
    """(1-based line number, stripped text) of every line that is not blank or a comment."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise TraceFileError(path, f"cannot be read as text ({err})", trace_id=trace_id) from None
    lines = ((n, s.strip()) for n, s in enumerate(text.splitlines(), 1))
    return [(n, s) for n, s in lines if s and not s.startswith("#")]


def _first_problem(path: Path, trace_id: str, lines: Sequence[int],
                   checks: Iterable[tuple[np.ndarray, str]], values: np.ndarray) -> None:
    """Raise for the first row of the first failing check (message may use ``{value}``)."""
    for bad, message in checks:
        if bad.any():
            i = int(np.argmax(bad))
            raise TraceFileError(path, message.format(value=values[i]), lines[i], trace_id)


_COMMENT_BYTES = bytes(range(0x20, 0x7F)) + b"\t"  # ASCII text: no other line breaks
_COOKED_BYTES = b"0123456789+-.eE\n\r"
_STAMP_BYTES = b"0123456789\n\r"  # digits only: Arrow would also take '0x10' as an integer


def _fast_columns(path: Path, names: Sequence[str], kind: pa.DataType,
                  alphabet: bytes) -> list[np.ndarray] | None:
    """The columns of a plain file read by Arrow's C++ CSV reader, or None (not plain, or
    Arrow refuses a value) so that the line-by-line reader decides and words any error.

    Plain: ASCII, ``#`` only at line starts, data lines of ``alphabet`` and one separator (a
    space; a tab in a file without spaces). Arrow's fast_float doubles are correctly rounded,
    as Python's ``float`` is, so both readers return the same bits. One thread: it was the
    fastest on a busy 2-core machine, and a sweep's jobs already load side by side.
    """
    try:
        data = _without_comments(path.read_bytes())
    except OSError:
        return None
    if data is None:
        return None
    sep = b"," if len(names) == 1 else b"\t" if b" " not in data else b" "
    if data.translate(None, alphabet + sep):
        return None
    try:
        table = pcsv.read_csv(
            pa.BufferReader(data),
            read_options=pcsv.ReadOptions(column_names=list(names), use_threads=False),
            parse_options=pcsv.ParseOptions(delimiter=sep.decode(), quote_char=False,
                                            double_quote=False, escape_char=False,
                                            ignore_empty_lines=True),
            convert_options=pcsv.ConvertOptions(column_types=dict.fromkeys(names, kind),
                                                null_values=[], strings_can_be_null=False,
                                                quoted_strings_can_be_null=False))
    except pa.ArrowInvalid:
        return None
    arrays = [table.column(name).to_numpy() for name in names]  # one chunk: a read-only view
    return [a if a.flags.writeable else a.copy() for a in arrays]


_LINE_BREAK = re.compile(rb"[\r\n]")


def _without_comments(data: bytes) -> bytes | None:
    """``data`` with its ``#`` lines emptied, or None when a ``#`` follows data on a line or
    a comment holds more than ASCII text (other line breaks would split it for the line
    reader). Every search stays within the comment's line, never rescanning a large file."""
    pieces, start, at, has_lf = [], 0, data.find(b"#"), b"\n" in data
    while at >= 0:
        head = data.rfind(b"\n", 0, at) + 1 if has_lf else 0
        head = max(head, data.rfind(b"\r", head, at) + 1)
        if data[head:at].strip(b" \t"):
            return None
        pieces.append(data[start:head])
        end = _LINE_BREAK.search(data, at)
        start = end.start() if end else len(data)
        if data[at:start].translate(None, _COMMENT_BYTES):
            return None
        at = data.find(b"#", start)
    return b"".join([*pieces, data[start:]]) if pieces else data


class _LineNumbers(Sequence):
    """1-based line numbers of the data rows (not blank, not ``#``) of a fast-parsed file,
    found by reading it again only when an error message needs one: no per-line list."""

    def __init__(self, path: Path, n_rows: int) -> None:
        self.path, self.n_rows = path, n_rows

    def __len__(self) -> int:
        return self.n_rows

    def __getitem__(self, row: int) -> int:
        row = row + self.n_rows if row < 0 else row
        if not 0 <= row < self.n_rows:
            raise IndexError(row)
        with open(self.path, encoding="ascii") as handle:  # universal newlines = splitlines
            lines = (n for n, text in enumerate(handle, 1)
                     if text.strip() and not text.strip().startswith("#"))
            return next(itertools.islice(lines, row, None))


# ---------------------------------------------------------------------------------------
# cooked (Pensieve / Park / Genet) files
# ---------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------
# Mahimahi link traces
# ---------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------
# Puffer public data: CSV access
# ---------------------------------------------------------------------------------------

_TIME = "time (ns GMT)"
_SENT_COLUMNS = (_TIME, "session_id", "index", "expt_id", "channel", "video_ts", "format",
                 "size", "ssim_index", "cwnd", "in_flight", "min_rtt", "rtt", "delivery_rate")
_ACKED_COLUMNS = (_TIME, "session_id", "index", "video_ts")
_BUFFER_COLUMNS = (_TIME, "session_id", "index", "event", "buffer", "cum_rebuf")


class _Csv:
    """One Puffer CSV held as text columns; conversions name file, line and stream on error."""

    def __init__(self, path: Path, required: Sequence[str]) -> None:
        self.path = path
        frame = self._read(path)
        frame.columns = [str(c).strip() for c in frame.columns]
        if _TIME not in frame.columns and "time" in frame.columns:
            frame = frame.rename(columns={"time": _TIME})
        missing = [c for c in required if c not in frame.columns]
        if missing:
            raise TraceFileError(path, f"missing column(s) {', '.join(map(repr, missing))}; "
                                       f"the header has {', '.join(frame.columns)}", 1)
        frame = frame.fillna("")
        self.frame = frame[(frame != "").any(axis=1)]  # blank lines; the index keeps lines
        self.lines = self.frame.index.to_numpy() + 2

    @staticmethod
    def _read(path: Path) -> pd.DataFrame:
        try:
            return pd.read_csv(path, dtype=str, keep_default_na=False, skip_blank_lines=False,
                               skipinitialspace=True)
        except pd.errors.EmptyDataError:
            raise TraceFileError(path, "empty file, expected a CSV header row", 1) from None
        except pd.errors.ParserError as err:
            found = re.search(r"line (\d+), saw (\d+)", str(err))
            line = int(found.group(1)) if found else None
            raise TraceFileError(path, f"malformed CSV row ({str(err).split('. ')[-1]})",
                                 line) from None
        except (OSError, UnicodeDecodeError) as err:
            raise TraceFileError(path, f"cannot be read ({err})") from None

    def text(self, column: str) -> np.ndarray:
        return self.frame[column].to_numpy(dtype=object)

    def numbers(self, column: str, dtype=np.float64) -> np.ndarray:
        raw = self.text(column)
        try:
            return raw.astype(dtype)
        except (ValueError, OverflowError, TypeError):
            pass
        bad = next(i for i, v in enumerate(raw) if not _parses(v, dtype))
        kind = "an integer" if np.issubdtype(dtype, np.integer) else "a number"
        raise TraceFileError(self.path, f"column {column!r} holds {raw[bad]!r}, not {kind}",
                             int(self.lines[bad]), self.stream_at(bad))

    def streams(self) -> np.ndarray:
        """Stream ids ``"<session_id>-<index>"`` (the index must be an integer)."""
        self.numbers("index", np.int64)
        return self.text("session_id") + "-" + self.text("index")

    def stream_at(self, row: int) -> str | None:
        if not {"session_id", "index"} <= set(self.frame.columns):
            return None
        return f"{self.text('session_id')[row]}-{self.text('index')[row]}"


def _parses(value: str, dtype) -> bool:
    try:
        (int if np.issubdtype(dtype, np.integer) else float)(value)
        return True
    except (ValueError, OverflowError):
        return False


@dataclass(frozen=True)
class _PufferDay:
    """The files of one Puffer day folder (client_buffer and expt_settings are optional)."""

    video_sent: Path
    video_acked: Path
    video_size: Path
    ssim: Path
    client_buffer: Path | None
    expt_settings: Path | None


def _puffer_days(root: Path) -> list[_PufferDay]:
    """Every day under ``root`` (recursive), checking each has its files before any parsing."""
    if not root.is_dir():
        raise TraceFileError(root, "not a directory: a Puffer dataset is a folder holding "
                                   "day folders of video_sent_*.csv and friends")
    sent = sorted(p for p in root.rglob("video_sent_*.csv")
                  if not any(part.startswith(".") for part in p.relative_to(root).parts))
    if not sent:
        raise TraceFileError(root, "no video_sent_*.csv file found (searched recursively)")
    return [_puffer_day(p) for p in sent]


def _puffer_day(sent: Path) -> _PufferDay:
    tag = sent.name[len("video_sent_"):-len(".csv")]
    files = {k: sent.with_name(f"{k}_{tag}.csv")
             for k in ("video_acked", "video_size", "ssim", "client_buffer")}
    for key in ("video_acked", "video_size", "ssim"):
        if not files[key].is_file():
            raise TraceFileError(files[key], f"missing: {sent.name} needs the video_acked, "
                                             "video_size and ssim files of its day beside it")
    settings = [sent.parent / "logs" / "expt_settings", sent.with_name(f"expt_settings_{tag}.txt")]
    return _PufferDay(sent, files["video_acked"], files["video_size"], files["ssim"],
                      files["client_buffer"] if files["client_buffer"].is_file() else None,
                      next((p for p in settings if p.is_file()), None))


def _read_expt_settings(path: Path | None) -> dict[str, tuple[str, str]]:
    """expt_id -> (abr, cc) from ``<id> <json>`` lines; ``abr_name`` overrides ``abr``."""
    if path is None:
        return {}
    schemes = {}
    for line, text in _data_lines(path, None):
        expt_id, _, blob = text.partition(" ")
        try:
            info = json.loads(blob)
        except json.JSONDecodeError as err:
            raise TraceFileError(path, f"expected '<expt_id> <json>' ({err.msg})", line) from None
        if not isinstance(info, dict):
            raise TraceFileError(path, "expected '<expt_id> <json object>'", line)
        abr = str(info.get("abr_name", info.get("abr", "unknown")))
        schemes[expt_id] = (_clean_name(abr), _clean_name(str(info.get("cc", "unknown"))))
    return schemes


def _clean_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "", name)


def _allowed_schemes(schemes) -> dict[str, set[str] | None] | None:
    """abr -> allowed cc names (None: any cc) from a selector like Plume's train_select.json."""
    if schemes is None:
        return None
    if isinstance(schemes, Mapping):
        ccs = {abr: value.get("cc") if isinstance(value, Mapping) else value
               for abr, value in schemes.items()}
        return {abr: None if cc is None else {cc} if isinstance(cc, str) else set(cc)
                for abr, cc in ccs.items()}
    return {abr: None for abr in ([schemes] if isinstance(schemes, str) else schemes)}


# ---------------------------------------------------------------------------------------
# Puffer public data: tables, client_buffer rules, streams
# ---------------------------------------------------------------------------------------

def _read_sent(path: Path) -> pd.DataFrame:
    t = _Csv(path, _SENT_COLUMNS)
    return pd.DataFrame({
        "stream": t.streams(), "expt_id": t.text("expt_id"), "channel": t.text("channel"),
        "video_ts": t.numbers("video_ts", np.int64), "t_sent": t.numbers(_TIME, np.int64),
        "size_bytes": t.numbers("size"), "cwnd": t.numbers("cwnd"),
        "in_flight": t.numbers("in_flight"), "min_rtt": t.numbers("min_rtt") * 1e-6,
        "rtt": t.numbers("rtt") * 1e-6, "delivery_rate": t.numbers("delivery_rate") * 8e-6})


def _read_acked(path: Path) -> pd.DataFrame:
    t = _Csv(path, _ACKED_COLUMNS)
    acked = pd.DataFrame({"stream": t.streams(), "video_ts": t.numbers("video_ts", np.int64),
                          "t_acked": t.numbers(_TIME, np.int64)})
    return acked.drop_duplicates(["stream", "video_ts"], keep="last")


def _read_encodings(day: _PufferDay) -> pd.DataFrame:
    """(channel, video_ts) -> size_0..9 (MB) and ssim_0..9 (raw index) in lookup order."""
    sizes = _encoding_table(day.video_size, "size", "size", 1e-6)
    ssims = _encoding_table(day.ssim, "ssim_index", "ssim", 1.0)
    return sizes.join(ssims, how="outer").reset_index()


def _encoding_table(path: Path, column: str, prefix: str, scale: float) -> pd.DataFrame:
    t = _Csv(path, ("channel", "format", "video_ts", column))
    index = pd.Series(t.text("channel") + "|" + t.text("format")).map(_FORMAT_INDEX)
    frame = pd.DataFrame({"channel": t.text("channel"), "video_ts": t.numbers("video_ts",
                          np.int64), "format": index, "value": t.numbers(column) * scale})
    frame = frame.dropna(subset=["format"]).astype({"format": np.int64})
    frame = frame.drop_duplicates(["channel", "video_ts", "format"], keep="last")
    wide = frame.pivot(index=["channel", "video_ts"], columns="format", values="value")
    wide = wide.reindex(columns=range(N_FORMATS))
    wide.columns = [f"{prefix}_{i}" for i in range(N_FORMATS)]
    return wide


def _buffer_limits(path: Path, sent: pd.DataFrame) -> dict[str, int | None]:
    """stream -> last valid send time (ns), or None when the client_buffer rules reject it."""
    t = _Csv(path, _BUFFER_COLUMNS)
    events = pd.DataFrame({"stream": t.streams(), "t": t.numbers(_TIME, np.int64),
                           "buffer": np.clip(t.numbers("buffer"), 0.0, 15.0),
                           "cum_rebuf": t.numbers("cum_rebuf"), "init": t.text("event") == "init"})
    events = events.sort_values(["stream", "t"], kind="mergesort")
    sends = sent.sort_values(["stream", "t_sent"], kind="mergesort")
    ev_at, sent_at = _runs(events["stream"].to_numpy()), _runs(sends["stream"].to_numpy())
    ev = {k: events[k].to_numpy() for k in ("t", "buffer", "cum_rebuf", "init")}
    sent_t = sends["t_sent"].to_numpy()
    return {sid: _buffer_limit(*(ev[k][ev_at[sid]] for k in ev), sent_t[rows])
            if sid in ev_at else None for sid, rows in sent_at.items()}


def _runs(keys: np.ndarray) -> dict[Any, slice]:
    """key -> slice of its run in an array sorted by key."""
    if not len(keys):
        return {}
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    ends = np.r_[starts[1:], len(keys)]
    return {keys[s]: slice(s, e) for s, e in zip(starts.tolist(), ends.tolist())}


def _buffer_limit(t, buffer, cum_rebuf, init, sent_t) -> int | None:
    """Plume's ``parse_buffer`` for one stream (events sorted by time, buffer clipped).

    Walking consecutive events, the first of these decides: both buffers > 5 s and the stall
    grew > 0.15 s -> the stream is invalid; the buffer stayed < 0.3 s for > 20 s, or the
    stall grew > 0.3 s faster than wall time -> truncate before that event. Plume's "> 8 s
    gap" test compares times in the wrong order after sorting and never fires, so it is not
    applied. Chunks sent after the last kept event are cut (when truncated). Start-up
    exclusion: ``init`` events never count; a stream with no other event before its last
    kept chunk, or whose stall total ends below its start-up value, is invalid.
    """
    if len(t) < 2:
        return None
    secs = (t - t[0]) / 1e9
    grew = np.maximum(np.diff(cum_rebuf), 0.0)
    low = buffer < 0.3
    starts = low & ~np.r_[False, low[:-1]]
    low_since = secs[np.maximum.accumulate(np.where(starts, np.arange(len(t)), 0))]
    invalid = (buffer[1:] > 5) & (buffer[:-1] > 5) & (grew > 0.15)
    stale = low[:-1] & (secs[1:] - low_since[:-1] > 20)
    stop = invalid | stale | (grew - np.diff(secs) > 0.3)
    if stop.any():
        first = int(np.argmax(stop))
        if invalid[first] or first < 1:
            return None
        t, cum_rebuf, init = t[:first + 1], cum_rebuf[:first + 1], init[:first + 1]
        sent_t = sent_t[sent_t <= t[-1]]
    if not len(sent_t):
        return None
    counted = ~init & (t <= sent_t[-1])
    if not counted.any() or cum_rebuf[counted][-1] < cum_rebuf[counted][0]:
        return None
    return int(sent_t[-1])


def _puffer_rows(day: _PufferDay, allowed, stats: Counter) -> pd.DataFrame:
    """Chunk rows of one day, joined and cleaned row-wise, sorted by (stream, video_ts)."""
    sent = _read_sent(day.video_sent).drop_duplicates(["stream", "video_ts"], keep="last")
    expts = _read_expt_settings(day.expt_settings)
    first = sent.drop_duplicates("stream")
    scheme = dict(zip(first["stream"], ("/".join(expts.get(e, _UNKNOWN_EXPT))
                                        for e in first["expt_id"])))
    stats["streams"] += len(scheme)
    if allowed is not None:
        keep = {s for s, name in scheme.items() if _scheme_allowed(name, allowed)}
        stats["dropped_by_scheme"] += len(scheme) - len(keep)
        sent = sent[sent["stream"].isin(keep)]
    limits = _buffer_limits(day.client_buffer, sent) if day.client_buffer else {}
    stats["dropped_by_client_buffer"] += sum(v is None for v in limits.values())
    rows = sent.merge(_read_acked(day.video_acked), on=["stream", "video_ts"], how="inner")
    rows = rows.merge(_read_encodings(day), on=["channel", "video_ts"], how="left")
    if day.client_buffer:
        rows = rows[rows["stream"].map(limits).notna()]
    rows = rows.sort_values(["stream", "video_ts"], kind="mergesort").reset_index(drop=True)
    rows["scheme"] = rows["stream"].map(scheme)
    return _mark_valid(rows, limits)


def _scheme_allowed(name: str, allowed: Mapping[str, set[str] | None]) -> bool:
    abr, cc = name.split("/")
    return abr in allowed and (allowed[abr] is None or cc in allowed[abr])


def _mark_valid(rows: pd.DataFrame, limits: Mapping[str, int | None]) -> pd.DataFrame:
    """Add throughput and the ``keep`` mask (prefix before the truncation, valid fields)."""
    known = pd.Series({k: v for k, v in limits.items() if v is not None}, dtype=np.int64)
    limit = known.reindex(rows["stream"], fill_value=np.iinfo(np.int64).max).to_numpy()
    beyond = pd.Series(rows["t_sent"].to_numpy() > limit, index=rows.index)
    prefix = ~beyond.groupby(rows["stream"]).cummax()
    transmit = (rows["t_acked"] - rows["t_sent"]).to_numpy() / 1e9
    with np.errstate(divide="ignore", invalid="ignore"):
        rows["bandwidth"] = rows["size_bytes"].to_numpy() * 8 / 1e6 / transmit
    sizes = rows[[f"size_{i}" for i in range(N_FORMATS)]].to_numpy()
    ssims = rows[[f"ssim_{i}" for i in range(N_FORMATS)]].to_numpy()
    fields = rows[["cwnd", "in_flight", "min_rtt", "rtt", "delivery_rate", "bandwidth"]]
    values = np.column_stack([fields.to_numpy(), sizes, ssims, transmit])
    sane = np.all(np.isfinite(values) & (values >= 0), axis=1)
    positive = (rows["size_bytes"].to_numpy() > 0) & np.all(sizes > 0, axis=1) & np.all(
        ssims > 0, axis=1) & (transmit > 0)
    rows["keep"] = prefix.to_numpy() & sane & positive
    return rows


_STREAM_SERIES = ("bandwidth", "delivery_rate", "min_rtt", "rtt", "cwnd", "in_flight")


def _columns(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    """The row table as numpy arrays, so each stream is a cheap slice."""
    cols = {k: rows[k].to_numpy() for k in ("keep", "t_sent", "scheme", *_STREAM_SERIES)}
    for key, prefix in (("chunk_sizes", "size"), ("ssim_index", "ssim")):
        cols[key] = rows[[f"{prefix}_{i}" for i in range(N_FORMATS)]].to_numpy(np.float64)
    return cols


def _puffer_stream(cols: Mapping[str, np.ndarray], at: slice,
                   min_chunks: int) -> dict[str, Any] | None:
    """Series, chunks and period of one stream's kept rows, or None when too short."""
    keep, sent = cols["keep"][at], cols["t_sent"][at]
    if keep.any():  # rows sent before the first kept one would have negative rebased time
        keep = keep & (sent >= sent[np.argmax(keep)])
    if keep.sum() < max(min_chunks, 1):
        return None
    sent_s = (sent[keep] - sent[keep][0]) / 1e9
    time = np.r_[0.0, np.cumsum(np.clip(np.diff(sent_s), *PUFFER_HOLD_S))]
    ssim = np.clip(cols["ssim_index"][at][keep], 1e-5, 0.99999)
    return {"time": time, **{k: cols[k][at][keep].astype(np.float64) for k in _STREAM_SERIES},
            "chunk_sizes": cols["chunk_sizes"][at][keep], "ssim_db": -10 * np.log10(1 - ssim),
            "period": time[-1] + LAST_ROW_S, "scheme": cols["scheme"][at.start]}


def load_puffer(directory: str | Path, *, min_chunks: int = MIN_CHUNKS, schemes=None,
                name: str | None = None,
                max_padded_samples: int | None = MAX_PADDED_SAMPLES) -> TraceSet:
    """Load Puffer's public day CSVs (searched recursively) as one TraceSet of streams.

    A stream is ``(session_id, index)``, trace id ``"<session_id>-<index>"`` (``_1``, ``_2``
    appended if the same stream shows up in another day). Each chunk is a ``video_sent`` row
    joined with the ``video_acked`` row of the same stream and ``video_ts``; its throughput
    is ``size_bytes * 8 / 1e6 / (t_acked - t_sent)`` Mbit/s. ``video_size`` and ``ssim`` give
    all 10 encodings per ``(channel, video_ts)`` in :data:`PUFFER_FORMATS` order; SSIM dB is
    ``-10 log10(1 - clip(ssim_index, 1e-5, 0.99999))``. Series, durations and ``period``
    follow the module docstring.

    Cleaning (Plume's ``trace_downloader``, in this order):

    1. ``schemes`` given (``{abr: [cc, ...]}`` or ``{abr: {"cc": [...]}}`` as in Plume's
       ``train_select.json``, or a list of abr names, any cc): keep only the streams whose
       ``expt_id`` maps to an allowed scheme in ``logs/expt_settings`` (``abr_name``
       overrides ``abr``; an unknown id counts as puffer_ttp/bbr, as in Plume).
    2. ``client_buffer`` present: the per-stream rules of :func:`_buffer_limit` (invalid
       streams dropped, truncated ones cut after the last valid event, start-up ``init``
       events excluded); a stream with fewer than 2 buffer events is dropped. Absent: no
       buffer rule applies.
    3. Rows: the last ``video_sent`` and ``video_acked`` row per ``video_ts`` wins; chunks
       never acked are dropped, and so are rows with a non-positive sent size, size or raw
       SSIM index of any encoding (missing encodings count as non-positive), a non-positive
       transmit time, or any negative, NaN or infinite field; rows sent before the first
       kept row too. Time is rebased to the first kept row.
    4. Streams with fewer than ``min_chunks`` (86, about 2.9 min of video) rows left go.

    Labels are derived, not ground truth: ``"slow"`` when the stream's mean delivery rate is
    <= 6 Mbit/s (Puffer's slow path, paper.md §3.1), else ``"fast"``. Streams are padded to
    the longest: ``n_streams x longest`` over ``max_padded_samples`` is refused (each padded
    chunk holds 26 float64 values, 208 bytes).

    Raises:
        TraceFileError: missing day files, an empty or malformed CSV (missing column,
            non-numeric value: file, line and stream named), no stream surviving cleaning,
            or padding over ``max_padded_samples``.
    """
    root = Path(directory)
    days, allowed, stats = _puffer_days(root), _allowed_schemes(schemes), Counter()
    streams: dict[str, dict] = {}
    for day in days:
        rows = _puffer_rows(day, allowed, stats)
        cols = _columns(rows)
        for sid, at in _runs(rows["stream"].to_numpy()).items():
            stream = _puffer_stream(cols, at, min_chunks)
            stats["dropped_too_short" if stream is None else "kept"] += 1
            if stream is not None:
                stream["file"] = day.video_sent.relative_to(root).as_posix()
                streams[_unique_id(sid, streams)] = stream
    if not streams:
        raise TraceFileError(root, f"no Puffer stream survived cleaning ({_counts(stats)})")
    return _puffer_traceset(streams, root, name, dict(stats, min_chunks=min_chunks),
                            max_padded_samples)


def _unique_id(sid: str, taken: Mapping[str, Any]) -> str:
    k, tid = 0, sid
    while tid in taken:
        k += 1
        tid = f"{sid}_{k}"
    return tid


def _counts(stats: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in stats.items()) or "no stream found"


def _pad(rows: Sequence[np.ndarray], width: int) -> np.ndarray:
    """Stack rows of different lengths along axis 0, zero-padded on axis 1 to ``width``."""
    out = np.zeros((len(rows), width, *rows[0].shape[1:]), dtype=rows[0].dtype)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


_PUFFER_BYTES = 8 * (len(_STREAM_SERIES) + 2 * N_FORMATS)  # float64 per padded chunk


def _puffer_traceset(streams: dict[str, dict], root: Path, name, stats,
                     limit: int | None) -> TraceSet:
    ids = list(streams)
    lengths = np.array([len(s["time"]) for s in streams.values()])
    col = lambda key: [s[key] for s in streams.values()]  # noqa: E731
    check_padding(lengths, ids, _PUFFER_BYTES, limit,
                  files={i: root / s["file"] for i, s in streams.items()})
    mean_rate = np.array([s["delivery_rate"].mean() for s in streams.values()])
    return TraceSet(
        name=name or f"puffer:{root.name}",
        series={k: _pad(col(k), lengths.max()) for k in ("time", *_STREAM_SERIES)},
        lengths=lengths,
        chunks={k: _pad(col(k), lengths.max()) for k in ("chunk_sizes", "ssim_db")},
        constants={"period": np.array(col("period"))},
        labels=np.where(mean_rate <= SLOW_MBPS, "slow", "fast"),
        trace_ids=np.array(ids),
        meta={"format": "puffer", "source": str(root), "units": PUFFER_UNITS,
              "files": dict(zip(ids, col("file"))), "schemes": dict(zip(ids, col("scheme"))),
              "labels": f"derived: slow iff mean delivery_rate <= {SLOW_MBPS} Mbit/s",
              "cleaning": stats})


# ---------------------------------------------------------------------------------------
# Puffer sample writer
# ---------------------------------------------------------------------------------------

_SAMPLE_HEADERS = {
    "video_sent": [_TIME, "session_id", "index", "expt_id", "channel", "video_ts", "format",
                   "size", "ssim_index", "cwnd", "in_flight", "min_rtt", "rtt",
                   "delivery_rate", "buffer", "cum_rebuf"],
    "video_acked": [_TIME, "session_id", "index", "expt_id", "channel", "video_ts", "buffer",
                    "cum_rebuf"],
    "client_buffer": [_TIME, "session_id", "index", "expt_id", "channel", "event", "buffer",
                      "cum_rebuf"],
    "video_size": [_TIME, "channel", "format", "video_ts", "size"],
    "ssim": [_TIME, "channel", "format", "video_ts", "ssim_index"],
}
_SAMPLE_EXPTS = {"1": {"abr": "puffer_ttp", "abr_name": "puffer_ttp_cl", "cc": "bbr"},
                 "2": {"abr": "linear_bba", "cc": "cubic"}}
_SAMPLE_LADDER_MBPS = np.array([0.2, 0.4, 0.7, 1.1, 1.6, 2.3, 3.2, 4.5, 6.0, 8.0])
_SAMPLE_SSIM = np.array([0.90, 0.92, 0.935, 0.95, 0.96, 0.97, 0.977, 0.983, 0.988, 0.992])
_CHUNK_S, _CHUNK_NS, _TICKS_PER_CHUNK, _NS = 2.002, 2_002_000_000, 180180, 10**9


def write_puffer_sample(directory: str | Path, n_streams: int = 2,
                        n_chunks: int | Sequence[int] = 100, seed: int = 0, *,
                        day: str = "2021-04-01") -> Path:
    """Write a small synthetic Puffer day folder in the public schema; return its path.

    ``directory/<day>T11_<day+1>T11/`` gets the five CSVs and ``logs/expt_settings``. Stream
    ``s`` (``n_chunks`` rows, or ``n_chunks[s]``) is slow (1.5-4.5 Mbit/s) when ``s`` is even,
    fast (12-40 Mbit/s) when odd, and uses expt 1 (puffer_ttp_cl/bbr) or 2 (linear_bba/cubic)
    alternately. All randomness comes from ``np.random.default_rng(seed)``.
    """
    rng = np.random.default_rng(seed)
    counts = [int(n_chunks)] * n_streams if np.ndim(n_chunks) == 0 else list(n_chunks)
    start = datetime.fromisoformat(day).replace(hour=11, tzinfo=timezone.utc)
    folder = Path(directory) / f"{start:%Y-%m-%dT11}_{start + timedelta(days=1):%Y-%m-%dT11}"
    tables: dict[str, list] = {k: [] for k in _SAMPLE_HEADERS}
    for s, n in enumerate(counts):
        _sample_stream(rng, s, n, int(start.timestamp()) * _NS + s * 3600 * _NS, tables)
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    for key, rows in tables.items():
        with open(folder / f"{key}_{folder.name}.csv", "w", newline="") as handle:
            csv.writer(handle).writerows([_SAMPLE_HEADERS[key], *rows])
    (folder / "logs" / "expt_settings").write_text(
        "".join(f"{k} {json.dumps(v)}\n" for k, v in _SAMPLE_EXPTS.items()))
    return folder


def _sample_stream(rng: np.random.Generator, s: int, n: int, t0: int, tables) -> None:
    """Append one synthetic stream's rows (and its encodings) to ``tables``."""
    channel = tuple(PUFFER_FORMATS)[s % 6]
    ids = [str(10**9 + s * 10**6 + int(rng.integers(10**6))), "0", str(1 + s % 2), channel]
    formats = PUFFER_FORMATS[channel]
    video_ts = (_TICKS_PER_CHUNK * (10**4 * (s + 1) + np.arange(n))).tolist()
    sizes = np.maximum(100, _SAMPLE_LADDER_MBPS * 1e6 / 8 * _CHUNK_S
                       * rng.lognormal(0, 0.1, (n, N_FORMATS))).astype(np.int64)
    ssims = np.round(np.clip(_SAMPLE_SSIM + rng.normal(0, 0.003, (n, N_FORMATS)), 0.5, 0.9999), 6)
    action = np.r_[0, rng.integers(0, N_FORMATS, n)][:n]  # start-up chunk at the lowest format
    mbps = (rng.uniform(1.5, 4.5) if s % 2 == 0 else rng.uniform(12, 40)) * rng.lognormal(0, 0.2, n)
    size = sizes[np.arange(n), action]
    sent, acked = _sample_times(t0, np.ceil(size * 8 / (mbps * 1e6) * _NS).astype(np.int64))
    tcp = _sample_tcp(rng, mbps)
    level = np.round(np.minimum(15.0, _CHUNK_S * (np.arange(n) + 1)), 3).tolist()
    for k in range(n):
        a = action[k]
        tables["video_sent"].append([sent[k], *ids, video_ts[k], formats[a], size[k],
                                     ssims[k, a], *tcp[k], level[k], 0.5])
        tables["video_acked"].append([acked[k], *ids, video_ts[k], level[k], 0.5])
        tables["client_buffer"].append([acked[k], *ids, "timer" if k else "startup",
                                        level[k], 0.5])
        for f, fmt in enumerate(formats):
            tables["video_size"].append([sent[k] - _NS, channel, fmt, video_ts[k], sizes[k, f]])
            tables["ssim"].append([sent[k] - _NS, channel, fmt, video_ts[k], ssims[k, f]])
    tables["client_buffer"].append([t0 - _NS, *ids, "init", 0.0, 0.0])


def _sample_tcp(rng: np.random.Generator, mbps: np.ndarray) -> list[list[int]]:
    """cwnd, in_flight (packets), min_rtt, rtt (us), delivery_rate (bytes/s) per chunk."""
    n = len(mbps)
    cwnd = rng.integers(10, 200, n)
    min_rtt = rng.integers(10**4, 8 * 10**4, n)
    rate = (mbps * 1e6 / 8 * rng.uniform(0.9, 1.1, n)).astype(np.int64)
    return np.column_stack([cwnd, rng.integers(0, 10, n), min_rtt,
                            min_rtt + rng.integers(0, 4 * 10**4, n), rate]).tolist()


def _sample_times(t0: int, transmit: np.ndarray) -> tuple[list[int], list[int]]:
    """Send and ack times (ns): the next chunk leaves 2.002 s later, or 5 ms after the ack."""
    sent, acked, t = [], [], t0
    for duration in transmit.tolist():
        sent.append(t)
        acked.append(t + duration)
        t = max(t + duration + 5 * 10**6, t + _CHUNK_NS)
    return sent, acked


# ---------------------------------------------------------------------------------------
# npz
# ---------------------------------------------------------------------------------------

def read_npz(path: str | Path) -> TraceSet:
    """A TraceSet written by :meth:`TraceSet.save`; its errors become TraceFileError."""
    path = Path(path)
    try:
        return TraceSet.load(path)
    except TraceSetFileError as err:
        message = str(err)
        message = message[len(str(path)) + 2:] if message.startswith(f"{path}: ") else message
        raise TraceFileError(path, message) from None


# ---------------------------------------------------------------------------------------
# datasets and splits
# ---------------------------------------------------------------------------------------

def load_traces(path: str | Path, trace_format: str, split: str, *, name: str | None = None,
                max_padded_samples: int | None = MAX_PADDED_SAMPLES, **options) -> TraceSet:
    """Load the ``split`` ("train", "test" or "all") of a trace dataset as one TraceSet.

    ``path`` is a directory or a single file. For cooked, Mahimahi and csv a directory is every
    regular trace file below it (sorted; hidden files, ``README*`` and non-trace files by the
    extension rule of the module docstring are skipped, the latter listed in
    ``meta["skipped_files"]`` and logged), one trace per file, trace id = path relative to
    ``path`` without suffix; a single file is a dataset of one trace. Puffer reads the day
    folders below ``path``; npz reads one TraceSet file, or every ``*.npz`` below a
    directory. Splits follow the module docstring. ``max_padded_samples`` caps
    ``n_traces x longest`` before traces are padded into one set (None: no cap).
    ``options`` go to the reader (``bin_s`` for Mahimahi; ``min_chunks``, ``schemes`` for
    Puffer; ``max_jobs`` for csv).

    Raises:
        TraceFileError: a missing or malformed file, an empty split, or padding over
            ``max_padded_samples`` (naming the longest trace).
        ValueError: an unknown ``trace_format`` or ``split``.
    """
    path = _dataset_path(path, trace_format, split)
    name = name or f"{path.stem or path}/{split}"
    folders = _split_folders(path, trace_format)
    limit = max_padded_samples
    if folders is None:
        traces = _load_part(path, trace_format, path, split, name, options, limit)
        rule = HASH_RULE
    else:
        rule, train, test = folders
        parts = {"train": [train], "test": [test], "all": [train, test]}[split]
        traces = _concat([_load_part(p, trace_format, path, "all", name, options, limit)
                          for p in parts], path, limit)
    meta = {**traces.meta, "split": split, "split_rule": rule}
    meta.setdefault("source", str(path))
    _log_skipped(path, trace_format, meta.get("skipped_files", []))
    return dataclasses.replace(traces, name=name, meta=meta)


def describe_split(path: str | Path, trace_format: str, *,
                   max_padded_samples: int | None = MAX_PADDED_SAMPLES, **options) -> str:
    """One line naming the split rule used for ``path`` and the train/test counts (files
    are counted with :func:`load_traces`' rules, non-trace files left out)."""
    path = _dataset_path(path, trace_format, "all")
    folders = _split_folders(path, trace_format)
    limit = max_padded_samples
    if folders is not None:
        rule, train, test = folders
        n_train, n_test = (len(_part_ids(p, trace_format, path, options, limit))
                           for p in (train, test))
        return f"split of {path}: {rule} ({n_train} / {n_test} traces)"
    ids = _part_ids(path, trace_format, path, options, limit)
    n_test = sum(map(in_test_split, ids))
    return f"split of {path}: {HASH_RULE} -> test ({n_test} of {len(ids)} traces)"


def _dataset_path(path, trace_format: str, split: str) -> Path:
    if trace_format not in TRACE_FORMATS:
        raise ValueError(f"unknown trace format {trace_format!r}; expected one of "
                         f"{', '.join(TRACE_FORMATS)}")
    if split not in SPLIT_CHOICES:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLIT_CHOICES)}")
    path = Path(path)
    if not path.exists():
        raise TraceFileError(path, "no such file or directory")
    return path


def _split_folders(path: Path, trace_format: str) -> tuple[str, Path, Path] | None:
    """(rule, train, test) when the dataset brings its own split, else None (hash rule)."""
    if not path.is_dir():
        return None
    if (path / "train").is_dir() and (path / "test").is_dir():
        return "train/ and test/ folders", path / "train", path / "test"
    if trace_format == "npz" and all((path / f"{s}.npz").is_file() for s in ("train", "test")):
        return "train.npz and test.npz files", path / "train.npz", path / "test.npz"
    return None


def _load_part(part: Path, trace_format: str, root: Path, split: str, name: str,
               options, limit: int | None) -> TraceSet:
    """Every trace of ``part`` (a file or folder) that the hash rule puts in ``split``."""
    if trace_format in ("cooked", "mahimahi", "csv"):
        files, skipped = _trace_files(part, root, trace_format)
        ids = _select(list(files), split, part)
        meta = {"format": trace_format, "source": str(root),
                "files": {i: _relative(files[i], root) for i in ids},
                "skipped_files": [_relative(f, root) for f in skipped]}
        if trace_format == "csv":  # LB job sequences (plume.traces.lb), one file per trace
            from plume.traces.lb import load_lb_csv

            return load_lb_csv({i: files[i] for i in ids}, name, meta,
                               max_padded_samples=limit, **options)
        reader = read_cooked if trace_format == "cooked" else read_mahimahi
        meta["units"] = SERIES_UNITS
        if trace_format == "mahimahi":
            meta["bin_s"] = options.get("bin_s", 0.1)
        traces = [reader(files[i], **options) for i in ids]
        return _series_traceset(traces, ids, name, meta, {i: files[i] for i in ids}, limit)
    traces = (load_puffer(part, name=name, max_padded_samples=limit, **options)
              if trace_format == "puffer" else _load_npz(part, root, limit))
    ids = _select(traces.trace_ids.tolist(), split, part)
    if len(ids) == len(traces):
        return traces
    keep = set(ids)
    subset = traces.subset([i for i, t in enumerate(traces.trace_ids) if t in keep], name)
    files = {k: v for k, v in subset.meta.get("files", {}).items() if k in keep}
    return dataclasses.replace(subset, meta={**subset.meta, "files": files})


def _part_ids(part: Path, trace_format: str, root: Path, options, limit) -> list[str]:
    if trace_format in ("cooked", "mahimahi", "csv"):
        return list(_trace_files(part, root, trace_format)[0])
    traces = (load_puffer(part, max_padded_samples=limit, **options)
              if trace_format == "puffer" else _load_npz(part, root, limit))
    return traces.trace_ids.tolist()


def _select(ids: list[str], split: str, where: Path) -> list[str]:
    if split == "all":
        return ids
    chosen = [i for i in ids if in_test_split(i) == (split == "test")]
    if not chosen:
        raise TraceFileError(where, f"split {split!r} is empty: the rule {HASH_RULE} -> test "
                                    f"puts none of its {len(ids)} trace(s) there")
    return chosen


def _relative(file: Path, root: Path) -> str:
    return file.name if file == root else file.relative_to(root).as_posix()


def _visible(file: Path, top: Path) -> bool:
    parts = file.relative_to(top).parts
    return not any(p.startswith(".") for p in parts) and not file.name.upper().startswith(
        "README")


def _is_trace(file: Path, trace_format: str) -> bool:
    """The extension rule of the module docstring (csv: ``*.csv``; else not a known
    non-trace suffix)."""
    suffix = file.suffix.lower()
    return suffix == ".csv" if trace_format == "csv" else suffix not in NON_TRACE_SUFFIXES


def _extension_rule(trace_format: str) -> str:
    return ("a csv dataset reads only *.csv files" if trace_format == "csv" else
            "known non-trace extensions: " + " ".join(sorted(NON_TRACE_SUFFIXES)))


def _trace_files(part: Path, root: Path, trace_format: str) -> tuple[dict[str, Path], list[Path]]:
    """(trace id -> file, skipped non-trace files): a single file, or every visible regular
    file below a folder that the extension rule calls a trace."""
    if part.is_file():
        return {part.stem if part == root else
                part.relative_to(root).with_suffix("").as_posix(): part}, []
    visible = sorted((p for p in part.rglob("*") if p.is_file() and _visible(p, part)),
                     key=lambda p: p.relative_to(root).as_posix())
    files = [p for p in visible if _is_trace(p, trace_format)]
    skipped = [p for p in visible if not _is_trace(p, trace_format)]
    if not files:
        raise TraceFileError(part, f"no trace files (every regular file below it is read, "
                                   f"except hidden ones, README* and, by extension, "
                                   f"{len(skipped)} skipped file(s); "
                                   f"{_extension_rule(trace_format)})")
    found: dict[str, Path] = {}
    for file in files:
        tid = file.relative_to(root).with_suffix("").as_posix()
        if tid in found:
            raise TraceFileError(file, f"has the same trace id as {found[tid].name}", None, tid)
        found[tid] = file
    return found, skipped


def _log_skipped(path: Path, trace_format: str, skipped: Sequence[str]) -> None:
    """One INFO line listing the files the extension rule left out (the first 10 by name)."""
    if skipped:
        names = ", ".join(skipped[:10]) + (f" and {len(skipped) - 10} more"
                                           if len(skipped) > 10 else "")
        log.info("skipped %d non-trace file(s) in %s: %s (%s)", len(skipped), path, names,
                 _extension_rule(trace_format))


def _series_traceset(traces: list[ForwardTrace], ids: list[str], name: str, meta,
                     files: Mapping[str, Path], limit: int | None) -> TraceSet:
    """One TraceSet of forward traces of any lengths, padded past ``lengths`` (refused over
    ``limit`` padded samples per channel)."""
    lengths = np.array([len(t.time) for t in traces])
    check_padding(lengths, ids, _SERIES_BYTES, limit, files=files)
    return TraceSet(
        name=name,
        series={"time": _pad([t.time for t in traces], lengths.max()),
                "bandwidth": _pad([t.bandwidth for t in traces], lengths.max())},
        lengths=lengths,
        constants={"period": np.array([t.period for t in traces])},
        trace_ids=np.array(ids),
        meta=meta)


def _load_npz(part: Path, root: Path, limit: int | None) -> TraceSet:
    if part.is_file():
        return read_npz(part)
    files = sorted(p for p in part.rglob("*.npz") if p.is_file() and _visible(p, part))
    if not files:
        raise TraceFileError(part, "no .npz TraceSet file below this folder")
    return _concat([read_npz(f) for f in files], part, limit)


def _concat(sets: list[TraceSet], where: Path, limit: int | None) -> TraceSet:
    """Join TraceSets of the same channels (train + test, several npz files) into one."""
    if len(sets) == 1:
        return sets[0]
    first = sets[0]
    if any(_layout(s) != _layout(first) for s in sets):
        raise TraceFileError(where, "its parts hold different channels: "
                             + " vs ".join(str(s.channel_names) for s in sets))
    ids = np.concatenate([s.trace_ids for s in sets])
    if len(set(ids.tolist())) != len(ids):
        raise TraceFileError(where, "its parts share trace ids, so they cannot form one set")
    files = {k: v for s in sets for k, v in s.meta.get("files", {}).items()}
    _check_join(sets, ids, where, limit)
    meta = {**first.meta, "files": files} if files else dict(first.meta)
    if any("skipped_files" in s.meta for s in sets):
        meta["skipped_files"] = [f for s in sets for f in s.meta.get("skipped_files", [])]
    return TraceSet(
        name=first.name,
        series={k: _join(sets, "series", k) for k in first.series},
        lengths=np.concatenate([s.lengths for s in sets]),
        chunks={k: _join(sets, "chunks", k) for k in first.chunks},
        constants={k: np.concatenate([s.constants[k] for s in sets]) for k in first.constants},
        labels=None if first.labels is None else np.concatenate([s.labels for s in sets]),
        trace_ids=ids,
        meta=meta)


def _check_join(sets: list[TraceSet], ids: np.ndarray, where: Path, limit: int | None) -> None:
    """:func:`check_padding` for the widest series (or chunks) of the joined set; files are
    named for parts read from ``where`` (npz files may name files of another folder)."""
    kind = "series" if sets[0].series else "chunks"
    arrays = [a for s in sets for a in getattr(s, kind).values()]
    if not arrays:
        return
    width = max(a.shape[1] for a in arrays)
    per_sample = sum(a.itemsize * int(np.prod(a.shape[2:])) for k in ("series", "chunks")
                     for a in getattr(sets[0], k).values())
    lengths = np.concatenate([s.lengths if s.series else np.full(len(s), width) for s in sets])
    files = {k: where / v for s in sets if s.meta.get("source") == str(where)
             for k, v in s.meta.get("files", {}).items()}
    check_padding(lengths, ids.tolist(), per_sample, limit, width=width, where=where,
                  files=files)


def _layout(traces: TraceSet) -> tuple:
    return tuple(sorted(getattr(traces, k)) for k in ("series", "chunks", "constants")) + (
        traces.labels is None,)


def _join(sets: list[TraceSet], kind: str, key: str) -> np.ndarray:
    """One channel of several sets stacked, zero-padded on axis 1 to the widest."""
    arrays = [getattr(s, kind)[key] for s in sets]
    width = max(a.shape[1] for a in arrays)
    return np.concatenate([_pad(list(a), width) for a in arrays])
