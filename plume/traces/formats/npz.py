"""npz: TraceSets saved by :meth:`TraceSet.save` (any environment's traces, already in the
TraceSet conventions), one ``.npz`` file or every ``*.npz`` below a folder joined into one
set; ``train.npz`` and ``test.npz`` side by side are the dataset's own split.
"""

from __future__ import annotations

from pathlib import Path

from plume.traces.formats._sets import _concat, _visible
from plume.traces.traceset import TraceFileError, TraceSet, TraceSetFileError


def load(part: Path, root: Path, name: str | None, limit: int | None, /,
         **options) -> TraceSet:
    """The registry's loader: the TraceSet file ``part``, or every one below that folder
    (``name`` and ``options`` are not used: a saved set keeps its own)."""
    return _load_npz(part, root, limit)


def read_npz(path: str | Path) -> TraceSet:
    """A TraceSet written by :meth:`TraceSet.save`; its errors become TraceFileError."""
    path = Path(path)
    try:
        return TraceSet.load(path)
    except TraceSetFileError as err:
        message = str(err)
        message = message[len(str(path)) + 2:] if message.startswith(f"{path}: ") else message
        raise TraceFileError(path, message) from None


def _load_npz(part: Path, root: Path, limit: int | None) -> TraceSet:
    if part.is_file():
        return read_npz(part)
    files = sorted(p for p in part.rglob("*.npz") if p.is_file() and _visible(p, part))
    if not files:
        raise TraceFileError(part, "no .npz TraceSet file below this folder")
    return _concat([read_npz(f) for f in files], part, limit)

