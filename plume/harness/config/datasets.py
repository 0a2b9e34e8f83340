"""Resolve ``env.dataset`` / ``env.test_sets`` entries to TraceSets through the EnvSpec.

An entry is a built-in dataset name of the environment or a path to trace files read by the
loader ``env.trace_format`` names (``plume.traces.loaders``). A user dataset is tested on its
own test split unless ``env.test_sets`` names other sets: never silently on synthetic traces.
A path named as a test set is a test set: every trace in it is played, except when it is the
training dataset itself, whose test split is played (its other traces train: testing on all
of it would test on training traces).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from plume.envs.registry import EnvSpec
from plume.harness.config.errors import ConfigError
from plume.traces import TraceSet
from plume.traces.loaders import describe_split, load_traces
from plume.traces.traceset import MAX_PADDED_SAMPLES


def is_builtin(spec: EnvSpec, dataset: str) -> bool:
    return dataset in spec.datasets


def check_dataset(spec: EnvSpec, dataset: str, trace_format: str | None, key: str) -> None:
    """Fail with a message naming ``key`` unless ``dataset`` is built in or readable files."""
    if is_builtin(spec, dataset):
        return
    path = Path(dataset).expanduser()
    if not path.exists():
        raise ConfigError(
            f"{key}={dataset!r} is neither a built-in {spec.name} dataset "
            f"({', '.join(spec.datasets) or 'none'}) nor an existing file or directory")
    fmt = trace_format or ("npz" if path.suffix == ".npz" else None)
    if fmt is None:
        raise ConfigError(
            f"{key}={dataset!r} is a path: say how to read it with env.trace_format="
            f"{'|'.join(spec.trace_formats)}")
    if fmt not in spec.trace_formats:
        raise ConfigError(
            f"env.trace_format={fmt!r}: env {spec.name!r} replays "
            f"{', '.join(spec.trace_formats)} traces")


def default_test_sets(spec: EnvSpec, dataset: str) -> list[str]:
    """The built-in dataset's own test sets, or the test split of a user dataset."""
    return spec.builtin_test_sets(dataset) if is_builtin(spec, dataset) else [dataset]


def load_dataset(spec: EnvSpec, dataset: str, split: str, trace_format: str | None = None,
                 max_padded_samples: int | None = MAX_PADDED_SAMPLES) -> TraceSet:
    """The ``split`` of a built-in dataset, or of the trace files at path ``dataset`` (padded
    storage capped at ``max_padded_samples`` per channel: ``plume.traces.loaders``)."""
    if is_builtin(spec, dataset):
        return spec.load_builtin(dataset, split)
    path = Path(dataset).expanduser()
    return load_traces(path, trace_format or "npz", split,
                       max_padded_samples=max_padded_samples)


def played_split(spec: EnvSpec, training: str, dataset: str) -> str:
    """The split of ``dataset`` a test set plays: a built-in dataset's test split, the test
    split of the training dataset (``training``) named again, every trace of any other path."""
    if is_builtin(spec, dataset) or _same_path(dataset, training):
        return "test"
    return "all"


def _same_path(a: str, b: str) -> bool:
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def describe_test_set(spec: EnvSpec, dataset: str, trace_format: str | None,
                      split: str = "test", n_traces: int | None = None) -> str:
    """One line saying where a test set comes from (printed by every run)."""
    if is_builtin(spec, dataset):
        return f"{dataset}: built-in {spec.name} dataset, its test split"
    if split == "all":
        return f"{dataset}: every trace in it ({n_traces} traces)"
    return (f"{describe_split(Path(dataset).expanduser(), trace_format or 'npz')}: the training "
            "dataset's own test split (its other traces train)")


def test_set_name(spec: EnvSpec, dataset: str) -> str:
    """The name of a test set in eval.parquet and logs: the dataset name or the path's stem."""
    return dataset if is_builtin(spec, dataset) else Path(dataset).expanduser().resolve().stem


def load_checked(spec: EnvSpec, env: Any, dataset: str, split: str, params: Any) -> TraceSet:
    """:func:`load_dataset` with the ``env`` section's trace format and padding cap, checked
    for the channels the environment needs; bad trace files and bad traces become a
    ConfigError (one line naming the file, line or trace)."""
    try:
        traces = load_dataset(spec, dataset, split, env.trace_format, env.max_padded_samples)
        spec.check_channels(traces, params, f"{dataset} ({split})")
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return traces


def load_test_sets(spec: EnvSpec, env: Any, params: Any) -> dict[str, TraceSet]:
    """Every test set of the ``env`` section by name (:func:`played_split` says which traces of
    each), each announced with where it comes from."""
    test_sets = {}
    for dataset in env.test_sets:
        split = played_split(spec, env.dataset, dataset)
        traces = load_checked(spec, env, dataset, split, params)
        test_sets[test_set_name(spec, dataset)] = traces
        logging.getLogger("plume").info("test set %s", describe_test_set(
            spec, dataset, env.trace_format, split, len(traces)))
    return test_sets


VALIDATION = "validation"
"""The test set name of the traces ``train.validation`` holds out (in eval.parquet and logs)."""


def validation_split(traces: TraceSet, fraction: float) -> tuple[TraceSet, TraceSet]:
    """``(train, validation)``: the ``round(fraction * n)`` traces (at least one) whose trace id
    has the smallest sha256 are held out, each part in the traces' order. The rule reads only
    the ids, so the split is the same for every seed and any order of the traces; a fraction
    that leaves no trace on either side is a ConfigError naming ``train.validation``."""
    if not 0 < fraction < 1:
        raise ConfigError(f"train.validation must be in (0, 1) to hold traces out, got {fraction}")
    n = len(traces)
    held = max(1, round(fraction * n))
    if held >= n:
        raise ConfigError(f"train.validation={fraction}: holding out {held} of the {n} training "
                          f"traces of {traces.name} leaves none to train on")
    digests = [hashlib.sha256(str(i).encode()).hexdigest() for i in traces.trace_ids]
    chosen = set(sorted(range(n), key=lambda i: digests[i])[:held])
    return (traces.subset([i for i in range(n) if i not in chosen], name=traces.name),
            traces.subset(sorted(chosen), name=f"{traces.name}[{VALIDATION}]"))


def make_env(spec: EnvSpec, traces: TraceSet, n_envs: int | None, sampler, *, mode: str,
             seed, params: Any):
    """``spec.make``; the environment refusing a trace (too short for an episode, a bad
    chunk table, ...) is the user's data problem, so it becomes a ConfigError naming it."""
    try:
        return spec.make(traces, n_envs, sampler, mode=mode, seed=seed, params=params)
    except ValueError as err:
        raise ConfigError(f"{traces.name} ({mode}): {err}") from None
