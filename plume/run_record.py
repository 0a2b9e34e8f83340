"""The run-directory record: what a run directory holds and how to read it, shared by the
harness (which writes run directories), the report and the experiments (which read them).

A run directory is any folder holding a ``status.json``:

- ``status.json``: running / completed / failed / paused, with error text and timings; for
  plume-emulate's runs also ``link_lateness`` (LINK_LATENESS)
- ``config.yaml``: the resolved config (``mode: emulation`` for plume-emulate's runs)
- ``train.jsonl``: the training curve, one JSON object per update
- ``eval.parquet``: one row per (progress point, test set, trace)
- ``sampler.parquet``: sampling weight per ground-truth kind / cluster over training
- ``score.json``: the env's score and its normalisation anchors per test set
- ``checkpoint.pt``: model, optimiser, sampler and RNG states, as data only
- ``exports.json``: the controller's exports (``plume-export``), each with its parity result

A job whose status says ``running`` but whose process is gone reads as ``interrupted``
(:func:`effective_state`). A ``paused`` job stopped early on purpose (``train.stop_at``): like
an interrupted one it is unfinished, is never pooled, and resumes from its checkpoint.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

__all__ = ["CHECKPOINT", "COMPLETED", "EVAL_TABLE", "EXPORTS", "FAILED", "HEARTBEAT_STALE_S",
           "HYDRA_CONFIG", "INTERRUPTED", "LINK_LATENESS", "PAUSED", "RESOLVED_CONFIG", "RUNNING",
           "SAMPLER_TABLE", "SCORE_FILE", "STATES", "STATUS", "TRAIN_LOG", "effective_state",
           "read_status"]

STATUS = "status.json"
TRAIN_LOG = "train.jsonl"
EVAL_TABLE = "eval.parquet"
SAMPLER_TABLE = "sampler.parquet"
CHECKPOINT = "checkpoint.pt"
RESOLVED_CONFIG = "config.yaml"
EXPORTS = "exports.json"
SCORE_FILE = "score.json"
HYDRA_CONFIG = ".hydra/config.yaml"
LINK_LATENESS = "link_lateness"
"""The ``status.json`` field of an emulation run saying how late its emulated links sent their
packets (actual minus scheduled departure): ``count``, ``p50_ms``, ``p90_ms``, ``p99_ms``,
``max_ms``, ``late_fraction`` (later than ``tolerance_ms``), ``within_tolerance`` (false: the link
fell behind its trace and the run's emulated numbers are biased; null: not measured),
``late_traces`` and ``unmeasured_traces``. Reports mark such runs, never show them as exact."""

RUNNING, COMPLETED, FAILED, INTERRUPTED = "running", "completed", "failed", "interrupted"
PAUSED = "paused"
STATES = (COMPLETED, FAILED, RUNNING, PAUSED, INTERRUPTED)
"""What a ``status.json`` may say (``paused``: stopped at ``train.stop_at``, to be resumed), and
``interrupted`` (a running job whose process died)."""
HEARTBEAT_STALE_S = 600.0
"""A ``running`` job whose heartbeat is older than this (seconds) reads as interrupted, also
when it ran on another host (a SLURM node) where its pid cannot be checked."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def effective_state(status: dict[str, Any] | None, now: float | None = None) -> str | None:
    """The state a reader should believe: ``running`` becomes ``interrupted`` when the job's
    process is gone (same host, pid not alive) or its heartbeat is stale."""
    if not isinstance(status, dict) or status.get("state") != RUNNING:
        return status.get("state") if isinstance(status, dict) else None
    pid, beat = _number(status.get("pid"), int), _number(status.get("heartbeat"), float)
    if status.get("host") == socket.gethostname() and pid is not None and 0 < pid < 2**31:
        if not _pid_alive(pid):
            return INTERRUPTED
    if beat is not None and (now or time.time()) - beat > HEARTBEAT_STALE_S:
        return INTERRUPTED
    return RUNNING


def _number(value: Any, kind: type) -> Any:
    """``value`` as ``kind``, or None when a damaged status holds something else there."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return kind(value)
    except (OverflowError, ValueError):  # inf, nan
        return None


def read_status(path: str | Path) -> dict[str, Any] | None:
    """The parsed ``status.json`` of the run directory ``path``, or None when the job never
    started or the file is not a JSON object. Never creates the directory (unlike
    :class:`RunDirectory`), so watching jobs that may never start leaves nothing behind."""
    try:
        status = json.loads((Path(path) / STATUS).read_text())
    except (OSError, ValueError, RecursionError):  # missing, not UTF-8 or JSON, too deep
        return None
    return status if isinstance(status, dict) else None
