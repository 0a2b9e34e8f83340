"""Snapshots of live training objects (the batched environment mid-episode, its sampler, the
learner-signal bookkeeping) for an exact resume, without each environment writing its own
``state_dict``, and without a pickle: a snapshot is data (``plume.runs.statefile``).

* **Views stay views**: simulators keep state in stacked arrays with named row views and
  ping-pong buffers; a restored view is a view of the restored base.
* **Static data is referred to, not copied**: the TraceSet and the tables derived from it
  (``plume.envs.replay.derived_from``) are stored as keys and bound, when loading, to the same
  objects of the restarted job, which rebuilt them from the same dataset.
* **Only the job's own kinds of objects**: a snapshot is rebuilt from the classes of the
  objects the restarted job has just built from its config (the *template*), and each part
  must come back as the same class as the template's part. A file naming any other class, a
  function or a module is refused (:class:`StateRefused`) and the job trains from scratch.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Any

import numpy as np

from plume.envs.replay import derived_tables
from plume.runs.statefile import CODE, Encoded, StateRefused, class_name, decode, encode
from plume.traces import TraceSet

__all__ = ["StateRefused", "classes_of", "dumps", "loads"]


def dumps(obj: Any, traces: TraceSet) -> Encoded:
    """``obj`` as data, with ``traces`` (and what is derived from it) referred to."""
    return encode(obj, {id(v): k for k, v in _static_objects(traces).items()})


def loads(snapshot: Encoded, traces: TraceSet, template: dict[str, Any]) -> dict[str, Any]:
    """The mapping of :func:`dumps`, rebuilt from the classes found in ``template`` (the same
    keys, built afresh by the restarted job; each object part must come back as the same
    class) and bound to ``traces`` and its derived tables
    (which must exist: build the job's environment from ``traces`` first)."""
    restored = decode(snapshot, classes_of(template), _static_objects(traces))
    if not isinstance(restored, dict) or set(restored) != set(template):
        held = sorted(map(str, restored)) if isinstance(restored, dict) else type(restored)
        raise StateRefused(f"the snapshot holds {held}, not {sorted(template)}")
    for key, fresh in template.items():  # an object comes back as the job's own kind
        if hasattr(fresh, "__dict__") and type(restored[key]) is not type(fresh):
            raise StateRefused(f"its {key} is a {class_name(type(restored[key]))}, this job "
                               f"builds a {class_name(type(fresh))}")
    return restored


def classes_of(*roots: Any) -> dict[str, type]:
    """Name -> class of every object reachable from ``roots`` through attributes and
    containers: the kinds of objects a snapshot of them may hold."""
    found: dict[str, type] = {}
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        value = stack.pop()
        if id(value) in seen or isinstance(value, (np.ndarray, np.generic, str, bytes, type,
                                                   *CODE)):
            continue
        seen.add(id(value))
        kind = type(value)
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, (list, tuple, set, frozenset, deque)):
            stack.extend(value)
        if isinstance(value, enum.Enum) or (isinstance(value, tuple) and hasattr(kind, "_fields")):
            found[class_name(kind)] = kind
        elif hasattr(value, "__dict__"):
            found[class_name(kind)] = kind
            stack.extend(vars(value).values())
    return found


def _static_objects(traces: TraceSet) -> dict[str, Any]:
    """Reference key -> object: the TraceSet, each derived table, and the parts of each. The
    keys are text (a derived table's key may hold a class), the same in every process."""
    found: dict[str, Any] = {"traces": traces}
    for key, value in derived_tables(traces).items():
        found[f"derived {key!r}"] = value
        parts = (value if isinstance(value, (tuple, list))
                 else [v for v in vars(value).values()] if hasattr(value, "__dict__") else [])
        for i, part in enumerate(parts):
            if isinstance(part, np.ndarray):
                found[f"derived {key!r} part {i}"] = part
    return found
