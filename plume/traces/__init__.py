"""Traces: the TraceSet container, trace generators (TraceBench) and file-format loaders."""

from plume.traces.tracebench import (
    BITRATES,
    DATASET_SEED,
    DATASETS,
    KINDS,
    SPLITS,
    TRACE_LEN,
    generate_all,
    generate_tracebench,
    load_tracebench,
)
from plume.traces.traceset import TraceSet

__all__ = [
    "BITRATES",
    "DATASETS",
    "DATASET_SEED",
    "KINDS",
    "SPLITS",
    "TRACE_LEN",
    "TraceSet",
    "generate_all",
    "generate_tracebench",
    "load_tracebench",
]
