"""Snapshots of live training objects (the batched environment mid-episode, its sampler, the
learner-signal bookkeeping) for an exact resume, without each environment writing its own
``state_dict``.

A snapshot is a pickle with two differences from :func:`pickle.dumps`:

* numpy **views stay views**: simulators keep state in stacked arrays with named row views
  and ping-pong buffers, so an array pickled as a view of its base array is restored as a
  view of the restored base (a plain pickle would give independent copies, and the restored
  environment would silently stop updating half of its state);
* **static data is referred to, not copied**: the TraceSet and the tables derived from it
  (``plume.envs.replay.derived_from``) are stored as references and bound, when loading, to
  the same objects of the restarted job, which rebuilt them from the same dataset.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import numpy as np

from plume.envs.replay import derived_tables
from plume.traces import TraceSet


def dumps(obj: Any, traces: TraceSet) -> bytes:
    """``obj`` pickled with views kept and ``traces`` (and what is derived from it) referred to."""
    buffer = io.BytesIO()
    _Pickler(buffer, _static_objects(traces)).dump(obj)
    return buffer.getvalue()


def loads(data: bytes, traces: TraceSet) -> Any:
    """The object of :func:`dumps`, its references bound to ``traces`` and its derived tables
    (which must exist: build the job's environment from ``traces`` first)."""
    return _Unpickler(io.BytesIO(data), _static_objects(traces)).load()


def _static_objects(traces: TraceSet) -> dict[Any, Any]:
    """Reference key -> object: the TraceSet, each derived table, and the parts of each."""
    found: dict[Any, Any] = {("traces",): traces}
    for key, value in derived_tables(traces).items():
        found[("derived", key)] = value
        parts = (value if isinstance(value, (tuple, list))
                 else [v for v in vars(value).values()] if hasattr(value, "__dict__") else [])
        for i, part in enumerate(parts):
            if isinstance(part, np.ndarray):
                found[("derived", key, i)] = part
    return found


def _view_of(root: np.ndarray, offset: int, shape: tuple, strides: tuple, dtype) -> np.ndarray:
    return np.ndarray(shape, dtype=dtype, buffer=root, offset=offset, strides=strides)


def _owner(array: np.ndarray) -> np.ndarray:
    """The last ndarray in ``array``'s chain of bases (its own base may be a buffer: a
    restored array's is the unpickled bytes)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


class _Pickler(pickle.Pickler):
    def __init__(self, file, static: dict[Any, Any]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._static = {id(obj): key for key, obj in static.items()}

    def persistent_id(self, obj: Any) -> Any:
        return self._static.get(id(obj))

    def reducer_override(self, obj: Any) -> Any:
        if not isinstance(obj, np.ndarray) or obj.base is None:
            return NotImplemented
        root = _owner(obj)
        if root is obj or not root.flags.c_contiguous:
            return NotImplemented  # an array on memory numpy does not own, or a strided one
        offset = obj.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        return _view_of, (root, offset, obj.shape, obj.strides, obj.dtype)


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, static: dict[Any, Any]) -> None:
        super().__init__(file)
        self._static = static

    def persistent_load(self, key: Any) -> Any:
        try:
            return self._static[tuple(key)]
        except KeyError:
            raise pickle.UnpicklingError(f"the snapshot refers to {key!r}, which the restarted "
                                         "job did not build") from None
