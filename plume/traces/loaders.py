"""Load a trace dataset as one TraceSet: which files are traces, the train/test split and the
format lookup. Each format's reading and writing lives in ``plume/traces/formats/`` (cooked,
Mahimahi, Puffer and npz files into ABR TraceSets; ``csv`` job sequences into LB TraceSets
through ``plume.traces.lb``); :data:`TRACE_FORMATS` names them in registry order.

Adding a trace format:

1. write ``plume/traces/formats/<name>.py`` with a ``load`` function (signatures: ``TraceFormat``);
2. add one ``TraceFormat`` line for it to ``FORMATS`` in ``plume/traces/formats/__init__.py``;
3. add its name to ``trace_formats`` of each environment that reads it (``EnvSpec``).

Every loader returns the TraceSet conventions (see ``traceset.py``): ``time`` in s starting at
0 and strictly increasing, ``bandwidth`` in **Mbit/s** in the forward convention
(``bandwidth[j]`` holds on ``[time[j], time[j + 1])``, the last sample until
``constants["period"]``, then the trace loops), ``chunk_sizes`` in MB (1e6 bytes), ``ssim_db``
in dB. ``meta["units"]`` says so, ``meta["source"]`` names the path read and ``meta["files"]``
maps each trace id to its source file (relative path). Bad input raises
:class:`TraceFileError`, one line naming the file, the line and the trace, at load time, so a
broken file never reaches a training run.

Rules chosen here (each one is tested; format rules are in each format's module):

* **Bounded padding.** A TraceSet pads every trace to its longest, so memory is
  ``n_traces x longest``, not the samples read: one 10-million-line trace among 22 short ones
  would need 3.4 GiB. Before padding (cooked, Mahimahi, csv, Puffer, and joining sets),
  ``n_traces x longest`` over :data:`MAX_PADDED_SAMPLES` is refused with one TraceFileError
  naming the longest trace, its file and sample count, the cost and the limit: split or
  resample that trace, or pass ``max_padded_samples=N`` (None: no limit) to
  :func:`load_traces`. The default, 2**24 samples per channel, is 256 MiB for a ``time`` +
  ``bandwidth`` set, so a job's train and test sets at the cap peak under 1 GiB (measured;
  see ``traceset.py``). A Puffer set holds 26 float64 values per sample, 3.25 GiB at the
  cap: a Puffer job that must stay small passes a lower limit.
* **Which files are traces.** In a folder, hidden files and ``README*`` are never read. For
  ``csv`` only ``*.csv`` files are traces. For ``cooked`` and ``mahimahi`` every other file
  is a trace unless its last suffix (case-insensitive) is in :data:`NON_TRACE_SUFFIXES`:
  metadata, docs, code, images, arrays and archives that are clearly not a trace. ``.txt``,
  ``.log``, ``.csv``, ``.dat``, ``.html`` and any other suffix stay traces: cooked and
  Mahimahi names carry dots of their own (``trace_1_http---www.youtube.com``,
  ``report_bus_0001.log``, ``ATT-LTE-driving.down``, Pensieve's ``.txt`` files), and a real
  trace dropped without a word would be worse than a sidecar failing with its file named.
  Skipped files are listed in ``meta["skipped_files"]`` and in one INFO line of the
  ``plume`` logger; :func:`describe_split` counts with the same rule.
* **Splits.** ``train/`` and ``test/`` folders (for npz also ``train.npz`` and ``test.npz``)
  are the splits when present; otherwise a trace is in test iff
  ``int(sha256(trace_id).hexdigest()[:8], 16) % 100 < 20``: fixed, seed-free, independent of
  file order and of which other traces exist.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa  # noqa: F401  (re-exported: tests build Arrow types as ``loaders.pa``)

# Besides what this module uses, the imports below re-export (noqa: F401) the names that code
# and tests imported from it before the formats package existed; each lives in its format now.
from plume.traces.formats import FORMATS, TraceFormat
from plume.traces.formats._sets import SERIES_UNITS, ForwardTrace, _concat, _visible  # noqa: F401
from plume.traces.formats._text import _fast_columns  # noqa: F401
from plume.traces.formats.cooked import _COOKED_BYTES, read_cooked, write_cooked  # noqa: F401
from plume.traces.formats.mahimahi import (  # noqa: F401
    _STAMP_BYTES,
    MBPS_PER_PACKET_PER_MS,
    PACKET_BYTES,
    _bin_ms,
    read_mahimahi,
    write_mahimahi,
)
from plume.traces.formats.npz import read_npz  # noqa: F401
from plume.traces.formats.puffer import (  # noqa: F401
    _TIME,
    LAST_ROW_S,
    MIN_CHUNKS,
    N_FORMATS,
    PUFFER_FORMATS,
    PUFFER_HOLD_S,
    PUFFER_UNITS,
    SLOW_MBPS,
    _buffer_limit,
    load_puffer,
    write_puffer_sample,
)
from plume.traces.traceset import MAX_PADDED_SAMPLES, TraceFileError, TraceSet

log = logging.getLogger("plume")

TRACE_FORMATS = tuple(FORMATS)
SPLIT_CHOICES = ("train", "test", "all")
TEST_PERCENT = 20
HASH_RULE = f"sha256(trace id) % 100 < {TEST_PERCENT}"

#: Suffixes of files in a cooked or Mahimahi folder that are never traces (module docstring).
NON_TRACE_SUFFIXES = frozenset({
    ".json", ".yaml", ".yml", ".toml", ".ini", ".cfg",  # metadata and settings
    ".md", ".rst", ".pdf", ".ipynb", ".py", ".sh",  # documents and code
    ".png", ".jpg", ".jpeg", ".gif", ".svg",  # images
    ".npz", ".npy", ".parquet", ".pkl", ".pickle",  # arrays and tables
    ".zip", ".gz", ".tgz", ".tar", ".xz", ".bz2", ".7z",  # archives
})


def in_test_split(trace_id: str) -> bool:
    """Plume's fixed test rule: sha256 of the id, first 8 hex digits, mod 100 < 20."""
    return int(hashlib.sha256(trace_id.encode()).hexdigest()[:8], 16) % 100 < TEST_PERCENT


def load_traces(path: str | Path, trace_format: str, split: str, *, name: str | None = None,
                max_padded_samples: int | None = MAX_PADDED_SAMPLES, **options) -> TraceSet:
    """Load the ``split`` ("train", "test" or "all") of a trace dataset as one TraceSet.

    ``path`` is a directory or a single file. For cooked, Mahimahi and csv a directory is every
    regular trace file below it (sorted; hidden files, ``README*`` and non-trace files by the
    extension rule of the module docstring are skipped, the latter listed in
    ``meta["skipped_files"]`` and logged), one trace per file, trace id = path relative to
    ``path`` without suffix; a single file is a dataset of one trace. Puffer reads the day
    folders below ``path``; npz reads one TraceSet file, or every ``*.npz`` below a
    directory. Splits follow the module docstring. ``max_padded_samples`` caps
    ``n_traces x longest`` before traces are padded into one set (None: no cap).
    ``options`` go to the reader (``bin_s`` for Mahimahi; ``min_chunks``, ``schemes`` for
    Puffer; ``max_jobs`` for csv).

    Raises:
        TraceFileError: a missing or malformed file, an empty split, or padding over
            ``max_padded_samples`` (naming the longest trace).
        ValueError: an unknown ``trace_format`` or ``split``.
    """
    path = _dataset_path(path, trace_format, split)
    fmt = FORMATS[trace_format]
    name = name or f"{path.stem or path}/{split}"
    folders = _split_folders(path, fmt)
    limit = max_padded_samples
    if folders is None:
        traces = _load_part(path, fmt, path, split, name, options, limit)
        rule = HASH_RULE
    else:
        rule, train, test = folders
        parts = {"train": [train], "test": [test], "all": [train, test]}[split]
        traces = _concat([_load_part(p, fmt, path, "all", name, options, limit)
                          for p in parts], path, limit)
    meta = {**traces.meta, "split": split, "split_rule": rule}
    meta.setdefault("source", str(path))
    _log_skipped(path, fmt, meta.get("skipped_files", []))
    return dataclasses.replace(traces, name=name, meta=meta)


def describe_split(path: str | Path, trace_format: str, *,
                   max_padded_samples: int | None = MAX_PADDED_SAMPLES, **options) -> str:
    """One line naming the split rule used for ``path`` and the train/test counts (files
    are counted with :func:`load_traces`' rules, non-trace files left out)."""
    path = _dataset_path(path, trace_format, "all")
    fmt = FORMATS[trace_format]
    folders = _split_folders(path, fmt)
    limit = max_padded_samples
    if folders is not None:
        rule, train, test = folders
        n_train, n_test = (len(_part_ids(p, fmt, path, options, limit))
                           for p in (train, test))
        return f"split of {path}: {rule} ({n_train} / {n_test} traces)"
    ids = _part_ids(path, fmt, path, options, limit)
    n_test = sum(map(in_test_split, ids))
    return f"split of {path}: {HASH_RULE} -> test ({n_test} of {len(ids)} traces)"


def _dataset_path(path, trace_format: str, split: str) -> Path:
    if trace_format not in TRACE_FORMATS:
        raise ValueError(f"unknown trace format {trace_format!r}; expected one of "
                         f"{', '.join(TRACE_FORMATS)}")
    if split not in SPLIT_CHOICES:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLIT_CHOICES)}")
    path = Path(path)
    if not path.exists():
        raise TraceFileError(path, "no such file or directory")
    return path


def _split_folders(path: Path, fmt: TraceFormat) -> tuple[str, Path, Path] | None:
    """(rule, train, test) when the dataset brings its own split, else None (hash rule)."""
    if not path.is_dir():
        return None
    if (path / "train").is_dir() and (path / "test").is_dir():
        return "train/ and test/ folders", path / "train", path / "test"
    ext = fmt.split_suffix
    if ext and all((path / f"{s}{ext}").is_file() for s in ("train", "test")):
        return f"train{ext} and test{ext} files", path / f"train{ext}", path / f"test{ext}"
    return None


def _load_part(part: Path, fmt: TraceFormat, root: Path, split: str, name: str,
               options, limit: int | None) -> TraceSet:
    """Every trace of ``part`` (a file or folder) that the hash rule puts in ``split``."""
    if fmt.per_file:  # the split is chosen from the file names, before any file is read
        files, skipped = _trace_files(part, root, fmt)
        ids = _select(list(files), split, part)
        meta = {"format": fmt.name, "source": str(root),
                "files": {i: _relative(files[i], root) for i in ids},
                "skipped_files": [_relative(f, root) for f in skipped]}
        return fmt.load({i: files[i] for i in ids}, name, meta, limit, **options)
    traces = fmt.load(part, root, name, limit, **options)
    ids = _select(traces.trace_ids.tolist(), split, part)
    if len(ids) == len(traces):
        return traces
    keep = set(ids)
    subset = traces.subset([i for i, t in enumerate(traces.trace_ids) if t in keep], name)
    files = {k: v for k, v in subset.meta.get("files", {}).items() if k in keep}
    return dataclasses.replace(subset, meta={**subset.meta, "files": files})


def _part_ids(part: Path, fmt: TraceFormat, root: Path, options, limit) -> list[str]:
    if fmt.per_file:
        return list(_trace_files(part, root, fmt)[0])
    return fmt.load(part, root, None, limit, **options).trace_ids.tolist()


def _select(ids: list[str], split: str, where: Path) -> list[str]:
    if split == "all":
        return ids
    chosen = [i for i in ids if in_test_split(i) == (split == "test")]
    if not chosen:
        raise TraceFileError(where, f"split {split!r} is empty: the rule {HASH_RULE} -> test "
                                    f"puts none of its {len(ids)} trace(s) there")
    return chosen


def _relative(file: Path, root: Path) -> str:
    return file.name if file == root else file.relative_to(root).as_posix()


def _is_trace(file: Path, fmt: TraceFormat) -> bool:
    """The extension rule of the module docstring (csv: ``*.csv``, any format's own
    ``trace_suffix``; else not a known non-trace suffix)."""
    suffix = file.suffix.lower()
    return suffix == fmt.trace_suffix if fmt.trace_suffix else suffix not in NON_TRACE_SUFFIXES


def _extension_rule(fmt: TraceFormat) -> str:
    return (f"a {fmt.name} dataset reads only *{fmt.trace_suffix} files" if fmt.trace_suffix
            else "known non-trace extensions: " + " ".join(sorted(NON_TRACE_SUFFIXES)))


def _trace_files(part: Path, root: Path, fmt: TraceFormat) -> tuple[dict[str, Path], list[Path]]:
    """(trace id -> file, skipped non-trace files): a single file, or every visible regular
    file below a folder that the extension rule calls a trace."""
    if part.is_file():
        return {part.stem if part == root else
                part.relative_to(root).with_suffix("").as_posix(): part}, []
    visible = sorted((p for p in part.rglob("*") if p.is_file() and _visible(p, part)),
                     key=lambda p: p.relative_to(root).as_posix())
    files = [p for p in visible if _is_trace(p, fmt)]
    skipped = [p for p in visible if not _is_trace(p, fmt)]
    if not files:
        raise TraceFileError(part, f"no trace files (every regular file below it is read, "
                                   f"except hidden ones, README* and, by extension, "
                                   f"{len(skipped)} skipped file(s); "
                                   f"{_extension_rule(fmt)})")
    found: dict[str, Path] = {}
    for file in files:
        tid = file.relative_to(root).with_suffix("").as_posix()
        if tid in found:
            raise TraceFileError(file, f"has the same trace id as {found[tid].name}", None, tid)
        found[tid] = file
    return found, skipped


def _log_skipped(path: Path, fmt: TraceFormat, skipped: Sequence[str]) -> None:
    """One INFO line listing the files the extension rule left out (the first 10 by name)."""
    if skipped:
        names = ", ".join(skipped[:10]) + (f" and {len(skipped) - 10} more"
                                           if len(skipped) > 10 else "")
        log.info("skipped %d non-trace file(s) in %s: %s (%s)", len(skipped), path, names,
                 _extension_rule(fmt))

