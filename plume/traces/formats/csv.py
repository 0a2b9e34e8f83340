"""csv: load-balancing job sequences, one trace per ``*.csv`` file of ``arrival_time,size``
rows, read by :mod:`plume.traces.lb` (``read_lb_csv``) into an LB TraceSet with the same
directory, naming and split rules as cooked files.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from plume.traces.traceset import TraceSet


def load(files: Mapping[str, Path], name: str, meta: Mapping, limit: int | None, /,
         **options) -> TraceSet:
    """The registry's loader: the split's files ``{trace id: path}`` as one LB TraceSet
    (``options``: ``max_jobs``)."""
    from plume.traces.lb import load_lb_csv  # LB job sequences (plume.traces.lb)

    return load_lb_csv(files, name, meta, max_padded_samples=limit, **options)
