"""Traces: the TraceSet container, trace generators (TraceBench, synthetic ABR) and
trace-file loading (``loaders``; one module per file format in ``formats``)."""

from plume.traces.abr import ABR_DATASETS, load_abr_dataset
from plume.traces.loaders import TRACE_FORMATS, describe_split, load_traces
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
from plume.traces.traceset import TraceFileError, TraceSet, TraceSetFileError

__all__ = [
    "ABR_DATASETS",
    "BITRATES",
    "DATASETS",
    "DATASET_SEED",
    "KINDS",
    "SPLITS",
    "TRACE_FORMATS",
    "TRACE_LEN",
    "TraceFileError",
    "TraceSet",
    "TraceSetFileError",
    "describe_split",
    "generate_all",
    "generate_tracebench",
    "load_abr_dataset",
    "load_traces",
    "load_tracebench",
]
