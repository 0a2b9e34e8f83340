"""Building TraceSets shared by several formats: the forward trace that cooked and Mahimahi
files read into, padding traces of any lengths into one set (refused over the padding cap
before any memory is taken), joining sets, and which files of a folder are visible.

**Bounded padding.** A TraceSet pads every trace to its longest, so memory is
``n_traces x longest``, not the samples read (see ``plume/traces/loaders.py`` for the cap
and how to raise it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from plume.traces.traceset import TraceFileError, TraceSet, check_padding

SERIES_UNITS = {"time": "s", "bandwidth": "Mbit/s", "period": "s"}
_SERIES_BYTES = 16  # one float64 time + one float64 bandwidth per padded sample


class ForwardTrace(NamedTuple):
    """One trace in the forward convention: ``bandwidth[j]`` (Mbit/s) holds on
    ``[time[j], time[j+1])`` (s), the last sample until ``period``, then it loops."""

    time: np.ndarray
    bandwidth: np.ndarray
    period: float


def _pad(rows: Sequence[np.ndarray], width: int) -> np.ndarray:
    """Stack rows of different lengths along axis 0, zero-padded on axis 1 to ``width``."""
    out = np.zeros((len(rows), width, *rows[0].shape[1:]), dtype=rows[0].dtype)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


def _visible(file: Path, top: Path) -> bool:
    """Not hidden and not a README: such files in a dataset folder are never traces."""
    parts = file.relative_to(top).parts
    return not any(p.startswith(".") for p in parts) and not file.name.upper().startswith(
        "README")


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
