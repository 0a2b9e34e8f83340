"""Trace file formats: one module per format, one :data:`FORMATS` line each.

:func:`plume.traces.loaders.load_traces` finds a dataset's files, applies the split rule and
calls the format's loader, so a format module only turns files into a TraceSet (in the
conventions of ``plume/traces/loaders.py``'s docstring, errors as TraceFileError).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from plume.traces.formats import cooked, csv, mahimahi, npz, puffer
from plume.traces.traceset import TraceSet


@dataclass(frozen=True)
class TraceFormat:
    """A format as ``load_traces`` uses it. ``per_file``: one trace per file, so the split
    is chosen from the file names before any file is read, and ``load(files, name, meta,
    limit, **options)`` gets ``{trace id: path}`` of the split and the dataset's ``meta``;
    otherwise ``load(part, root, name, limit, **options)`` reads a whole file or folder
    ``part`` of the dataset at ``root`` and the split is taken from its trace ids. ``limit``
    caps padding (``max_padded_samples``); ``options`` are the caller's reader options.
    ``trace_suffix``: only files with it are traces (else any file whose suffix is not a
    known non-trace one). ``split_suffix``: ``train<suffix>`` and ``test<suffix>`` files
    side by side are the dataset's own split (as ``train/`` and ``test/`` folders are)."""

    name: str
    description: str
    load: Callable[..., TraceSet]
    per_file: bool = False
    trace_suffix: str | None = None
    split_suffix: str | None = None


FORMATS: dict[str, TraceFormat] = {f.name: f for f in (
    TraceFormat("cooked", "'time_s throughput_Mbps' lines (Pensieve)", cooked.load, per_file=True),
    TraceFormat("mahimahi", "Mahimahi link traces: ms per packet", mahimahi.load, per_file=True),
    TraceFormat("puffer", "Puffer's public day CSVs, one trace per stream", puffer.load),
    TraceFormat("npz", "TraceSets saved by TraceSet.save", npz.load, split_suffix=".npz"),
    TraceFormat("csv", "LB jobs 'arrival_time,size'", csv.load, per_file=True, trace_suffix=".csv"),
)}
