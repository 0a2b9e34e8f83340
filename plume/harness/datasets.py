"""Resolve ``env.dataset`` / ``env.test_sets`` entries to TraceSets: built-in names or files."""

from __future__ import annotations

from pathlib import Path

from plume.harness.schema import ConfigError
from plume.traces import TraceSet
from plume.traces.tracebench import DATASETS as TRACEBENCH_DATASETS
from plume.traces.tracebench import load_tracebench

BUILTIN = {"tracebench": tuple(TRACEBENCH_DATASETS)}


def check_dataset(env: str, dataset: str, trace_format: str | None, key: str) -> None:
    """Fail with a message naming ``key`` unless ``dataset`` is built in or an existing file."""
    builtin = BUILTIN.get(env, ())
    if dataset in builtin:
        return
    path = Path(dataset).expanduser()
    if path.exists():
        if trace_format is not None:
            raise ConfigError(
                f"{key}: trace_format={trace_format!r} loaders are not available yet; "
                "give a TraceSet .npz (TraceSet.save) with trace_format=null"
            )
        if path.suffix != ".npz":
            raise ConfigError(f"{key}: {path} is not a TraceSet .npz file")
        return
    raise ConfigError(
        f"{key}={dataset!r} is neither a built-in {env} dataset "
        f"({', '.join(builtin) or 'none'}) nor an existing file"
    )


def load_dataset(env: str, dataset: str, split: str) -> TraceSet:
    """The ``split`` of a built-in dataset, or the TraceSet stored at path ``dataset``."""
    if dataset in BUILTIN.get(env, ()):
        return load_tracebench(dataset, split)
    return TraceSet.load(Path(dataset).expanduser())
