"""Puffer's public data (puffer.stanford.edu): day folders of ``video_sent``, ``video_acked``,
``video_size``, ``ssim`` and optional ``client_buffer`` CSVs plus ``logs/expt_settings``,
read as one trace per video stream with Plume's cleaning rules (:func:`load_puffer`); and a
writer of small synthetic days in the same schema (:func:`write_puffer_sample`).

* **Puffer streams** (see :func:`load_puffer` for the cleaning rules): row ``i`` holds for
  ``clip(time_sent[i+1] - time_sent[i], 1e-3, 20)`` s, ``time`` is the cumulative sum of those
  durations (Plume clips at 0; 1e-3 keeps ``time`` strictly increasing when two chunks left
  together), and the last row holds 1 s, written explicitly as ``period = time[-1] + 1``.
  Labels are *derived*, not ground truth.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from plume.traces.formats._sets import SERIES_UNITS, _pad
from plume.traces.formats._text import _data_lines
from plume.traces.traceset import MAX_PADDED_SAMPLES, TraceFileError, TraceSet, check_padding

MIN_CHUNKS = 86
SLOW_MBPS = 6.0
PUFFER_HOLD_S = (1e-3, 20.0)
LAST_ROW_S = 1.0
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


def load(part: Path, root: Path, name: str | None, limit: int | None, /,
         **options) -> TraceSet:
    """The registry's loader: every stream of the day folders below ``part`` (``options``:
    ``min_chunks``, ``schemes``)."""
    return load_puffer(part, name=name, max_padded_samples=limit, **options)


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
    <= 6 Mbit/s (Puffer's slow path; the paper, §3.1), else ``"fast"``. Streams are padded to
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
