"""TraceSet: a dataset of replayable input traces as plain numpy arrays.

Every trace is a throughput series sampled at (possibly irregular) times. Traces may have
different lengths: arrays are padded to the longest trace and ``lengths`` says how much of
each row is real. Per-trace side data that a simulator replays alongside the throughput
(TraceBench's video chunk sizes, for instance) lives in ``extras``; ground-truth labels, when a
generator knows them, live in ``labels``. The content hash identifies the data, not the name,
so caches keyed on it (Plume's stage 1-2 analysis) stay valid across renames and copies.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

import numpy as np

_FORMAT_VERSION = 1


@dataclass(frozen=True, eq=False)
class TraceSet:
    """Traces of one dataset split.

    Attributes:
        name: human-readable name, e.g. ``"tracebench/majority_fast/train"``.
        time: (n, L) float64 sample times in seconds, each row starting at 0 and increasing.
        bandwidth: (n, L) float64 throughput; ``bandwidth[i, j]`` holds on
            ``[time[i, j], time[i, j + 1])`` (the forward convention of Park and Plume).
        lengths: (n,) int64 number of valid samples per row; padding beyond is zero.
        labels: optional (n,) str ground-truth kind of each trace (never seen by Plume).
        trace_ids: (n,) str stable identifiers (file names, or ``"<split>-<index>"``).
        extras: per-trace arrays with leading dimension n, replayed by the simulator.
        meta: JSON-serialisable provenance (generator, seed, units).
    """

    name: str
    time: np.ndarray
    bandwidth: np.ndarray
    lengths: np.ndarray
    labels: np.ndarray | None = None
    trace_ids: np.ndarray | None = None
    extras: Mapping[str, np.ndarray] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        time = np.ascontiguousarray(self.time, dtype=np.float64)
        bandwidth = np.ascontiguousarray(self.bandwidth, dtype=np.float64)
        lengths = np.ascontiguousarray(self.lengths, dtype=np.int64)
        if time.ndim != 2 or time.shape != bandwidth.shape:
            raise ValueError(
                f"TraceSet {self.name!r}: time and bandwidth must be 2-D arrays of one shape, "
                f"got {time.shape} and {bandwidth.shape}"
            )
        n, width = time.shape
        if n == 0:
            raise ValueError(f"TraceSet {self.name!r} holds no traces")
        if lengths.shape != (n,):
            raise ValueError(f"TraceSet {self.name!r}: lengths must have shape ({n},)")
        if lengths.min() < 2 or lengths.max() > width:
            raise ValueError(
                f"TraceSet {self.name!r}: every trace needs 2..{width} samples, "
                f"got lengths in [{lengths.min()}, {lengths.max()}]"
            )
        valid = np.arange(width)[None, :] < lengths[:, None]
        masked = np.where(valid, bandwidth, 0.0)
        broken = ~np.all(np.isfinite(masked) & (masked >= 0), axis=1)
        if broken.any():
            raise ValueError(
                f"TraceSet {self.name!r}: trace {int(np.argmax(broken))} has a negative or "
                "non-finite throughput"
            )
        dead = np.all(masked == 0.0, axis=1)
        if dead.any():
            raise ValueError(
                f"TraceSet {self.name!r}: trace {int(np.argmax(dead))} has zero throughput "
                "throughout, a download on it would never finish"
            )
        unordered = np.any((np.diff(time, axis=1) <= 0) & valid[:, 1:], axis=1)
        if unordered.any():
            raise ValueError(
                f"TraceSet {self.name!r}: trace {int(np.argmax(unordered))} has "
                "non-increasing times"
            )
        labels = None if self.labels is None else np.asarray(self.labels, dtype=str)
        if labels is not None and labels.shape != (n,):
            raise ValueError(f"TraceSet {self.name!r}: labels must have shape ({n},)")
        ids = (
            np.array([f"{i}" for i in range(n)])
            if self.trace_ids is None
            else np.asarray(self.trace_ids, dtype=str)
        )
        if ids.shape != (n,):
            raise ValueError(f"TraceSet {self.name!r}: trace_ids must have shape ({n},)")
        extras = {k: np.ascontiguousarray(v) for k, v in dict(self.extras).items()}
        for key, value in extras.items():
            if value.shape[:1] != (n,):
                raise ValueError(
                    f"TraceSet {self.name!r}: extras[{key!r}] must have leading dimension {n}"
                )
        for attr, value in [
            ("time", time), ("bandwidth", bandwidth), ("lengths", lengths),
            ("labels", labels), ("trace_ids", ids), ("extras", extras), ("meta", dict(self.meta)),
        ]:
            object.__setattr__(self, attr, value)
        for array in [time, bandwidth, lengths, labels, ids, *extras.values()]:
            if array is not None:
                array.setflags(write=False)

    def __len__(self) -> int:
        return self.time.shape[0]

    def __repr__(self) -> str:
        kinds = "" if self.labels is None else f", kinds={self.label_names}"
        return f"TraceSet({self.name!r}, n={len(self)}, hash={self.content_hash[:12]}{kinds})"

    @property
    def label_names(self) -> list[str]:
        """Sorted distinct ground-truth labels (empty when the dataset has none)."""
        return [] if self.labels is None else sorted(set(self.labels.tolist()))

    @cached_property
    def content_hash(self) -> str:
        """SHA-256 over the valid samples, labels, ids and extras (not the name or meta)."""
        digest = hashlib.sha256()
        digest.update(self.lengths.tobytes())
        for i, length in enumerate(self.lengths):
            digest.update(self.time[i, :length].tobytes())
            digest.update(self.bandwidth[i, :length].tobytes())
        if self.labels is not None:
            digest.update("\0".join(self.labels.tolist()).encode())
        digest.update("\0".join(self.trace_ids.tolist()).encode())
        for key in sorted(self.extras):
            digest.update(key.encode())
            digest.update(str(self.extras[key].dtype).encode())
            digest.update(np.ascontiguousarray(self.extras[key]).tobytes())
        return digest.hexdigest()

    def mean_bandwidth(self) -> np.ndarray:
        """(n,) mean throughput of each trace over its valid samples."""
        valid = np.arange(self.time.shape[1])[None, :] < self.lengths[:, None]
        return np.where(valid, self.bandwidth, 0.0).sum(axis=1) / self.lengths

    def subset(self, indices: np.ndarray | list[int], name: str | None = None) -> "TraceSet":
        """A new TraceSet with the given traces, in the given order."""
        idx = np.asarray(indices, dtype=np.int64)
        width = int(self.lengths[idx].max())
        return TraceSet(
            name=name or f"{self.name}[subset]",
            time=self.time[idx, :width],
            bandwidth=self.bandwidth[idx, :width],
            lengths=self.lengths[idx],
            labels=None if self.labels is None else self.labels[idx],
            trace_ids=self.trace_ids[idx],
            extras={k: v[idx] for k, v in self.extras.items()},
            meta=self.meta,
        )

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
            "extras": sorted(self.extras),
            "has_labels": self.labels is not None,
            "content_hash": self.content_hash,
        }
        arrays = {
            "time": self.time,
            "bandwidth": self.bandwidth,
            "lengths": self.lengths,
            "trace_ids": self.trace_ids,
            "header": np.array(json.dumps(header)),
            **{f"extra__{k}": v for k, v in self.extras.items()},
        }
        if self.labels is not None:
            arrays["labels"] = self.labels
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez_compressed(tmp, **arrays)
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "TraceSet":
        """Read a file written by :meth:`save`; the stored content hash is verified."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no TraceSet file at {path}")
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(str(data["header"]))
            if header.get("format_version") != _FORMAT_VERSION:
                raise ValueError(
                    f"{path}: TraceSet format {header.get('format_version')} is not supported "
                    f"(expected {_FORMAT_VERSION})"
                )
            traces = cls(
                name=header["name"],
                time=data["time"],
                bandwidth=data["bandwidth"],
                lengths=data["lengths"],
                labels=data["labels"] if header["has_labels"] else None,
                trace_ids=data["trace_ids"],
                extras={k: data[f"extra__{k}"] for k in header["extras"]},
                meta=header["meta"],
            )
        if traces.content_hash != header["content_hash"]:
            raise ValueError(f"{path}: content hash mismatch, the file is corrupt")
        return traces
