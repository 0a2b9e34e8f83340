"""TraceSet: a dataset of replayable input traces as named numpy channels.

A trace is whatever exogenous input a simulator replays, so a TraceSet holds three kinds of
named channels, all with the trace as leading dimension:

* ``series``: ``(n, max_len)`` float64 time series, padded past ``lengths`` with zeros
  (ABR: ``time`` and ``bandwidth``; LB: ``interarrival`` and ``job_size``; CC with a
  time-varying link: ``time`` and ``bandwidth``). All series of a set share ``lengths``.
* ``chunks``: ``(n, n_chunks, ...)`` per-chunk arrays (TraceBench's ``video_sizes``; Puffer's
  ``chunk_sizes`` and ``ssim_db`` of every encoding, aligned with the series rows).
* ``constants``: ``(n,)`` one value per trace (CC's link tuple ``bandwidth``, ``latency``,
  ``queue``, ``loss``; the ``period`` of a looping series).

Conventions a loader or generator must follow (checked here, naming the trace id):
``time`` starts each row and strictly increases; ``bandwidth`` is non-negative and not zero
throughout (a download on it would never finish) and uses the forward convention,
``bandwidth[i, j]`` holding on ``[time[i, j], time[i, j + 1])``. The last sample holds until
``constants["period"]`` when present, else for 1 s (Park's and Plume's rule). Units live in
``meta["units"]``. Ground-truth ``labels`` (never seen by Plume) and stable ``trace_ids``
(file names, stream ids) travel with the traces. The content hash covers every channel,
labels, ids and the units (not the name or the provenance in meta), so caches keyed on it
(Plume's stage 1-2 analysis) stay valid across renames and copies.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

import numpy as np

_FORMAT_VERSION = 2
KINDS = ("series", "chunks", "constants")
#: Default cap on ``n_traces x padded width`` (samples per channel) when loaders pad traces of
#: different lengths into one set: 2**24 float64 cells are 128 MiB per channel, 256 MiB for a
#: ``time`` + ``bandwidth`` set; building one at the cap peaked 416 MiB above its parsed traces
#: (validation temporaries included, measured). A job's train and test sets both at the cap
#: then hold about 0.5 GiB and peak under 1 GiB, well under 2 GiB with the learner beside
#: them, while 1,000 traces of 16,000 samples (Pensieve's sets are far smaller) still fit.
MAX_PADDED_SAMPLES = 2**24
_NON_NEGATIVE = ("bandwidth", "interarrival", "job_size", "latency", "queue", "loss",
                 "chunk_sizes", "period")


class TraceFileError(ValueError):
    """A trace file (or dataset folder) the user gave is missing or malformed.

    ``str()`` is one line, ``"<path>:<line>: trace '<id>': <message>"`` without the parts that
    are None, so it reads well in a log and an editor can jump to the line.
    """

    def __init__(self, path: str | Path | None, message: str, line: int | None = None,
                 trace_id: str | None = None) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.trace_id = trace_id
        self.message = message
        head = ":".join(str(p) for p in (self.path, line) if p is not None)
        body = message if trace_id is None else f"trace '{trace_id}': {message}"
        super().__init__(re.sub(r"\s*[\r\n]+\s*", " ", f"{head}: {body}" if head else body))

    def __reduce__(self):  # keeps the attributes when the error crosses a process boundary
        return type(self), (self.path, self.message, self.line, self.trace_id)


def check_padding(lengths, trace_ids, bytes_per_sample: int, limit: int | None, *,
                  files: Mapping[str, Any] | None = None, where: str | Path | None = None,
                  width: int | None = None) -> None:
    """Refuse to pad ``len(lengths)`` traces to ``width`` (default: the longest) samples when
    that is over ``limit`` (None: no limit), before anything is allocated.

    Padding costs n x longest, so one long trace among many short ones multiplies memory;
    this turns a MemoryError deep in numpy into one line naming the longest trace (its file
    from ``files``, else ``where``), the cost in samples and bytes, the limit and the fixes.
    """
    lengths = np.asarray(lengths)
    if limit is None or not lengths.size:
        return
    n, longest = len(lengths), int(np.argmax(lengths))
    width = int(lengths[longest]) if width is None else int(width)
    cells = n * width
    if cells <= limit:
        return
    trace_id = str(trace_ids[longest])
    path = (files or {}).get(trace_id, where)
    raise TraceFileError(
        path, f"{int(lengths[longest]):,} samples, the longest of {n} traces; padding every "
              f"trace to {width:,} samples would take {n} x {width:,} = {cells:,} samples per "
              f"channel ({cells * bytes_per_sample / 2**30:.2f} GiB), over the limit of "
              f"{limit:,}: split or resample this trace, or raise the limit to at least "
              f"{cells:,} (env.max_padded_samples in plume-train, max_padded_samples= in "
              "load_traces)", None, trace_id)


class TraceSetFileError(ValueError):
    """A saved TraceSet archive is missing, malformed or corrupt; the message names the file
    and the key."""


@dataclass(frozen=True, eq=False)
class TraceSet:
    """Traces of one dataset split (see the module docstring for the channel conventions).

    Attributes:
        name: human-readable name, e.g. ``"tracebench/majority_fast/train"``.
        series: channel name -> (n, L) float64, valid up to ``lengths``.
        lengths: (n,) int64 valid samples per row of every series (zeros when there is none).
        chunks: channel name -> (n, n_chunks, ...) array.
        constants: channel name -> (n,) float64.
        labels: optional (n,) str ground-truth kind of each trace.
        trace_ids: (n,) str stable identifiers (default ``"0"``, ``"1"``, ...).
        meta: JSON-serialisable provenance (generator, seed, source files, units).
    """

    name: str
    series: Mapping[str, np.ndarray] = field(default_factory=dict)
    lengths: np.ndarray | None = None
    chunks: Mapping[str, np.ndarray] = field(default_factory=dict)
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)
    labels: np.ndarray | None = None
    trace_ids: np.ndarray | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        series = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in self.series.items()}
        chunks = {k: np.ascontiguousarray(v) for k, v in self.chunks.items()}
        constants = {k: np.ascontiguousarray(v, dtype=np.float64)
                     for k, v in self.constants.items()}
        n = self._count(series, chunks, constants)
        ids = (np.array([str(i) for i in range(n)]) if self.trace_ids is None
               else np.asarray(self.trace_ids, dtype=str))
        self._check(ids.shape == (n,), f"trace_ids must have shape ({n},), got {ids.shape}")
        if len(set(ids.tolist())) != n:
            self._fail("trace ids must be unique")
        object.__setattr__(self, "trace_ids", ids)
        lengths = self._lengths(series, n)
        labels = None if self.labels is None else np.asarray(self.labels, dtype=str)
        self._check(labels is None or labels.shape == (n,), f"labels must have shape ({n},)")
        self._check_series(series, lengths)
        for kind, channels, rank in [("chunks", chunks, 2), ("constants", constants, 1)]:
            for key, value in channels.items():
                self._check(value.ndim >= rank and value.shape[0] == n and
                            (rank > 1 or value.ndim == 1),
                            f"{kind}[{key!r}] must have shape "
                            f"({n}{', n_chunks, ...' if rank > 1 else ','}), got {value.shape}")
                self._check_values(kind, key, value.reshape(n, -1), np.ones(value.shape[:1], bool))
        for attr, value in [("series", series), ("lengths", lengths), ("chunks", chunks),
                            ("constants", constants), ("labels", labels),
                            ("meta", dict(self.meta))]:
            object.__setattr__(self, attr, value)
        for array in [lengths, labels, ids, *series.values(), *chunks.values(),
                      *constants.values()]:
            if array is not None:
                array.setflags(write=False)

    # ------------------------------------------------------------------ validation
    def _fail(self, message: str) -> None:
        raise ValueError(f"TraceSet {self.name!r}: {message}")

    def _id(self, row: int) -> str:
        return repr(str(self.trace_ids[row]))

    def _check(self, ok: bool, message: str) -> None:
        if not ok:
            self._fail(message)

    def _count(self, series, chunks, constants) -> int:
        arrays = [*series.values(), *chunks.values(), *constants.values()]
        if self.trace_ids is not None:
            n = len(np.asarray(self.trace_ids))
        elif arrays:
            n = arrays[0].shape[0] if arrays[0].ndim else 0
        else:
            self._fail("has no channels: give at least one series, chunks or constants array")
        self._check(n > 0, "holds no traces")
        return n

    def _lengths(self, series, n: int) -> np.ndarray:
        if not series:
            return np.zeros(n, np.int64) if self.lengths is None else np.ascontiguousarray(
                self.lengths, dtype=np.int64)
        widths = {v.shape for v in series.values()}
        self._check(len(widths) == 1 and all(v.ndim == 2 for v in series.values()),
                    "series channels must be 2-D arrays of one shape, got "
                    + ", ".join(f"{k} {v.shape}" for k, v in series.items()))
        (rows, width), = widths
        self._check(rows == n, f"series have {rows} rows for {n} traces")
        lengths = (np.full(n, width, np.int64) if self.lengths is None
                   else np.ascontiguousarray(self.lengths, dtype=np.int64))
        self._check(lengths.shape == (n,), f"lengths must have shape ({n},)")
        short = lengths < 1
        if short.any() or lengths.max() > width:
            self._fail(f"trace {self._id(int(np.argmax(short | (lengths > width))))} "
                       f"has length {lengths[int(np.argmax(short | (lengths > width)))]}, "
                       f"expected 1..{width}")
        return lengths

    def _check_series(self, series, lengths) -> None:
        if not series:
            return
        width = next(iter(series.values())).shape[1]
        valid = np.arange(width)[None, :] < lengths[:, None]
        for key, value in series.items():
            self._check_values("series", key, value, valid)
        if "time" in series:
            unordered = np.any((np.diff(series["time"], axis=1) <= 0) & valid[:, 1:], axis=1)
            if unordered.any():
                self._fail(f"trace {self._id(int(np.argmax(unordered)))} has "
                           "non-increasing times")
        if "bandwidth" in series:
            dead = np.all(np.where(valid, series["bandwidth"], 0.0) == 0.0, axis=1)
            if dead.any():
                self._fail(f"trace {self._id(int(np.argmax(dead)))} has zero "
                           "throughput throughout, a download on it would never finish")

    def _check_values(self, kind: str, key: str, value: np.ndarray, valid: np.ndarray) -> None:
        if value.dtype.kind not in "fiub":
            self._fail(f"{kind}[{key!r}] must be numeric, got dtype {value.dtype}")
        rows = value.reshape(len(valid), -1) if value.ndim > 2 else value
        mask = valid if rows.shape == valid.shape else np.ones(rows.shape, bool)
        masked = np.where(mask, rows, 0.0)
        broken = ~np.all(np.isfinite(masked), axis=1)
        if key in _NON_NEGATIVE:
            broken |= np.any(masked < 0, axis=1)
        if broken.any():
            sign = " or negative" if key in _NON_NEGATIVE else ""
            self._fail(f"trace {self._id(int(np.argmax(broken)))} has a non-finite"
                       f"{sign} value in {kind}[{key!r}]")

    # ------------------------------------------------------------------ access
    def __len__(self) -> int:
        return len(self.trace_ids)

    def __repr__(self) -> str:
        kinds = "" if self.labels is None else f", kinds={self.label_names}"
        return (f"TraceSet({self.name!r}, n={len(self)}, channels={self.channel_names}, "
                f"hash={self.content_hash[:12]}{kinds})")

    @property
    def channel_names(self) -> list[str]:
        """Every channel as ``kind/name``, e.g. ``["series/time", "chunks/ssim_db"]``."""
        return [f"{kind}/{key}" for kind in KINDS for key in sorted(getattr(self, kind))]

    def has(self, channel: str) -> bool:
        """Whether a channel of that name exists (in any kind)."""
        return any(channel in getattr(self, kind) for kind in KINDS)

    def channel(self, name: str) -> np.ndarray:
        """The series, chunks or constants array called ``name``; KeyError lists what exists."""
        for kind in KINDS:
            if name in getattr(self, kind):
                return getattr(self, kind)[name]
        raise KeyError(f"TraceSet {self.name!r} has no channel {name!r}; it has "
                       f"{', '.join(self.channel_names) or 'none'}")

    @property
    def time(self) -> np.ndarray:
        """The ``time`` series (s)."""
        return self.channel("time")

    @property
    def bandwidth(self) -> np.ndarray:
        """The ``bandwidth`` series (forward convention; units in ``meta["units"]``)."""
        return self.channel("bandwidth")

    @property
    def label_names(self) -> list[str]:
        """Sorted distinct ground-truth labels (empty when the dataset has none)."""
        return [] if self.labels is None else sorted(set(self.labels.tolist()))

    @cached_property
    def content_hash(self) -> str:
        """SHA-256 over the valid samples of every channel, labels, ids and ``meta["units"]``
        (what the numbers mean); not the name or the rest of ``meta`` (provenance such as a
        source path), so a copied or renamed dataset keeps its hash and its cached analyses."""
        digest = hashlib.sha256()
        digest.update(json.dumps(self.meta.get("units", {}), sort_keys=True).encode())
        digest.update(self.lengths.tobytes())
        for key in sorted(self.series):
            digest.update(f"series/{key}".encode())
            for i, length in enumerate(self.lengths):
                digest.update(self.series[key][i, :length].tobytes())
        for kind in ("chunks", "constants"):
            for key, value in sorted(getattr(self, kind).items()):
                digest.update(f"{kind}/{key}/{value.dtype}/{value.shape}".encode())
                digest.update(value.tobytes())
        if self.labels is not None:
            digest.update("\0".join(self.labels.tolist()).encode())
        digest.update("\0".join(self.trace_ids.tolist()).encode())
        return digest.hexdigest()

    def valid_mask(self) -> np.ndarray:
        """(n, L) True where a series sample is real, not padding."""
        width = next(iter(self.series.values())).shape[1] if self.series else 0
        return np.arange(width)[None, :] < self.lengths[:, None]

    def mean_bandwidth(self) -> np.ndarray:
        """(n,) mean throughput of each trace over its valid samples."""
        return np.where(self.valid_mask(), self.bandwidth, 0.0).sum(axis=1) / self.lengths

    def subset(self, indices: np.ndarray | list[int], name: str | None = None) -> "TraceSet":
        """A new TraceSet with the given traces, in the given order (repeats get ``#k`` ids)."""
        idx = np.asarray(indices, dtype=np.int64)
        width = int(self.lengths[idx].max()) if self.series else 0
        ids = self.trace_ids[idx]
        if len(set(ids.tolist())) != len(ids):
            seen: dict[str, int] = {}
            ids = np.array([self._repeat_id(i, seen) for i in ids.tolist()])
        return TraceSet(
            name=name or f"{self.name}[subset]",
            series={k: v[idx, :width] for k, v in self.series.items()},
            lengths=self.lengths[idx],
            chunks={k: v[idx] for k, v in self.chunks.items()},
            constants={k: v[idx] for k, v in self.constants.items()},
            labels=None if self.labels is None else self.labels[idx],
            trace_ids=ids,
            meta=self.meta,
        )

    @staticmethod
    def _repeat_id(trace_id: str, seen: dict[str, int]) -> str:
        seen[trace_id] = seen.get(trace_id, -1) + 1
        return trace_id if seen[trace_id] == 0 else f"{trace_id}#{seen[trace_id]}"

    # ------------------------------------------------------------------ files
    def save(self, path: str | Path) -> Path:
        """Write one compressed ``.npz`` (no pickles), returning the path written."""
        path = Path(path)
        if path.suffix != ".npz":
            path = path.with_suffix(".npz")
        path.parent.mkdir(parents=True, exist_ok=True)
        header = {
            "format_version": _FORMAT_VERSION,
            "name": self.name,
            "meta": dict(self.meta),
            **{kind: sorted(getattr(self, kind)) for kind in KINDS},
            "has_labels": self.labels is not None,
            "content_hash": self.content_hash,
        }
        arrays = {
            "lengths": self.lengths,
            "trace_ids": self.trace_ids,
            "header": np.array(json.dumps(header)),
            **{f"{kind}__{k}": v for kind in KINDS for k, v in getattr(self, kind).items()},
        }
        if self.labels is not None:
            arrays["labels"] = self.labels
        tmp = path.with_name(path.name + ".tmp.npz")
        try:
            np.savez_compressed(tmp, **arrays)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "TraceSet":
        """Read a file written by :meth:`save`, verifying its keys and content hash.

        Raises:
            TraceSetFileError: no such file, not an npz archive, a missing or malformed key,
                or a content-hash mismatch; the message names the file and the key.
        """
        path = Path(path)
        if not path.is_file():
            raise TraceSetFileError(f"{path}: no such TraceSet file")
        try:
            archive = np.load(path, allow_pickle=False)
        except Exception as err:  # zipfile/pickle/OS errors: all mean "not our archive"
            raise TraceSetFileError(f"{path}: not a TraceSet .npz archive ({err})") from None
        with archive as data:
            header = _header(path, data)
            read = lambda key: _array(path, data, key)  # noqa: E731
            try:
                traces = cls(
                    name=header["name"],
                    series={k: read(f"series__{k}") for k in header["series"]},
                    lengths=read("lengths"),
                    chunks={k: read(f"chunks__{k}") for k in header["chunks"]},
                    constants={k: read(f"constants__{k}") for k in header["constants"]},
                    labels=read("labels") if header["has_labels"] else None,
                    trace_ids=read("trace_ids"),
                    meta=header["meta"],
                )
            except ValueError as err:
                if isinstance(err, TraceSetFileError):
                    raise
                raise TraceSetFileError(f"{path}: {err}") from None
        if traces.content_hash != header["content_hash"]:
            raise TraceSetFileError(f"{path}: content hash mismatch, the file is corrupt")
        return traces


_HEADER_KEYS = {"name": str, "meta": dict, "series": list, "chunks": list, "constants": list,
                "has_labels": bool, "content_hash": str}


def _header(path: Path, data) -> dict[str, Any]:
    raw = _array(path, data, "header")
    try:
        header = json.loads(str(raw))
    except json.JSONDecodeError as err:
        raise TraceSetFileError(f"{path}: key 'header' is not JSON ({err})") from None
    if not isinstance(header, dict):
        raise TraceSetFileError(f"{path}: key 'header' must hold a JSON object")
    if header.get("format_version") == 1:  # time/bandwidth/extras, before named channels
        header = {**header, "series": ["time", "bandwidth"], "constants": [],
                  "chunks": header.get("extras", []), "format_version": _FORMAT_VERSION,
                  "_v1": True}
    if header.get("format_version") != _FORMAT_VERSION:
        raise TraceSetFileError(
            f"{path}: TraceSet format {header.get('format_version')!r} is not supported "
            f"(expected {_FORMAT_VERSION})")
    for key, kind in _HEADER_KEYS.items():
        if not isinstance(header.get(key), kind):
            raise TraceSetFileError(
                f"{path}: header key {key!r} is missing or not a {kind.__name__}")
    return header


def _array(path: Path, data, key: str) -> np.ndarray:
    names = set(data.files)
    aliases = {"series__time": "time", "series__bandwidth": "bandwidth"}  # format 1
    if key not in names and key.startswith("chunks__") and f"extra__{key[8:]}" in names:
        key = f"extra__{key[8:]}"
    key = aliases.get(key, key) if key not in names else key
    if key not in names:
        raise TraceSetFileError(f"{path}: missing key {key!r} (the archive has "
                                f"{', '.join(sorted(names)) or 'nothing'})")
    try:
        return data[key]
    except Exception as err:
        raise TraceSetFileError(f"{path}: key {key!r} is malformed ({err})") from None
