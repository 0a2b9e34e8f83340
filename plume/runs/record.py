"""The run record: what a run directory holds, and its status as one typed record
(:class:`RunStatus`) that every command writes and every reader (the report, the experiments
runner, the sweepers) reads through :func:`read_status`, checked.

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

import dataclasses
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plume.runs.fields import (
    NAME_LIMIT,
    PID_RANGE,
    SEED_RANGE,
    RunFileError,
    as_mapping,
    as_name,
    as_real,
    as_text,
    as_whole,
    kind_of,
    load_json,
    shown,
)

__all__ = ["CHECKPOINT", "COMPLETED", "EVAL_TABLE", "EXPORTS", "FAILED", "HEARTBEAT_STALE_S",
           "HYDRA_CONFIG", "INTERRUPTED", "LINK_LATENESS", "PAUSED", "RESOLVED_CONFIG", "RUNNING",
           "SAMPLER_TABLE", "SCORE_FILE", "STATES", "STATUS", "TRAIN_LOG", "Broken", "RunStatus",
           "effective_state", "read_status", "run_state"]

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


BROKEN = "broken"
"""What a reader shows for a run whose status cannot be trusted (:class:`Broken`)."""


@dataclass(frozen=True)
class Broken:
    """A ``status.json`` that exists but is not a Plume status: ``reason`` is one line that
    starts with the file's name. None of its fields is trusted. ``is_object``: it is a JSON
    object with a damaged field (a job started there may still resume from its own checkpoint,
    which is checked on its own); otherwise the file is not even that (the job starts afresh)."""

    reason: str
    is_object: bool = False
    state: str = BROKEN

    def effective_state(self, now: float | None = None) -> str:
        return BROKEN


@dataclass
class RunStatus:
    """Every field any command writes into ``status.json``. ``from_json`` checks each one
    (a wrong type, an unknown state, a name that is not one line, a pid out of range: the
    record is :class:`Broken` with the reason); unknown keys are kept in ``extra`` and written
    back, so a newer Plume's fields survive an older one's rewrite."""

    state: str
    exp_name: str | None = None
    seed: int | None = None
    choices: dict[str, str | None] = field(default_factory=dict)
    command: str | None = None
    started_at: str | None = None
    updated_at: str | None = None
    finished_at: str | None = None
    elapsed_s: float | None = None
    error: str | None = None
    traceback: str | None = None
    host: str | None = None
    pid: int | None = None
    heartbeat: float | None = None
    versions: dict[str, str] = field(default_factory=dict)
    resumes: list[dict[str, Any]] = field(default_factory=list)
    checkpoint_refused: str | None = None
    wandb_run: str | None = None
    summary: dict[str, Any] | None = None
    link_lateness: dict[str, Any] | None = None
    """See :data:`LINK_LATENESS`."""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``status.json``: the fields that are set, then ``extra``."""
        record = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name != "extra" and not _unset(f, getattr(self, f.name))}
        return {**record, "state": self.state, **self.extra}

    @classmethod
    def from_json(cls, data: Any) -> RunStatus | Broken:
        """The record in ``data`` (a parsed ``status.json``), or Broken with the first
        problem found."""
        try:
            return cls(**_checked(data))
        except RunFileError as err:
            return Broken(str(err), is_object=isinstance(data, dict))

    def __getitem__(self, key: str) -> Any:
        """A field by its ``status.json`` key (``status["state"]``), so a script or notebook
        reads the record as the JSON object it is written as; unknown keys from ``extra``."""
        if key != "extra" and key in _FIELD_NAMES:
            return getattr(self, key)
        return self.extra[key]

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def effective_state(self, now: float | None = None) -> str:
        """The state a reader should believe: ``running`` becomes ``interrupted`` when the
        job's process is gone (same host, pid not alive) or its heartbeat is stale (also a
        job on another host, a SLURM node, whose pid cannot be checked)."""
        if self.state != RUNNING:
            return self.state
        if self.host == socket.gethostname() and self.pid is not None and not _pid_alive(self.pid):
            return INTERRUPTED
        if self.heartbeat is not None and (now or time.time()) - self.heartbeat > HEARTBEAT_STALE_S:
            return INTERRUPTED
        return RUNNING

    def finished(self) -> bool:
        return self.state == COMPLETED


def _unset(spec: dataclasses.Field, value: Any) -> bool:
    """A field left at its default (None, or an empty collection): not written."""
    if spec.default_factory is not dataclasses.MISSING:
        return value == spec.default_factory()
    return value is None


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(RunStatus))
_TEXTS = ("command", "started_at", "updated_at", "finished_at", "error", "traceback",
          "checkpoint_refused", "wandb_run")


def _checked(data: Any) -> dict[str, Any]:
    """The keyword arguments of a RunStatus from ``data``, every field checked."""
    at = f"{STATUS}: "
    if not isinstance(data, dict):
        raise RunFileError(f"{STATUS}: holds {kind_of(data)}, not a JSON object")
    state = data.get("state")
    if state is None:
        raise RunFileError(f"{at}no state")
    if state not in STATES:
        raise RunFileError(f"{at}unknown state {shown(state)} (expected "
                           f"{', '.join(STATES[:-1])} or {STATES[-1]})")
    known = _FIELD_NAMES - {"extra"}
    fields = {key: as_text(data.get(key), f"{at}{key}") for key in _TEXTS}
    fields.update(
        state=state,
        exp_name=as_name(data.get("exp_name"), f"{at}exp_name"),
        seed=as_whole(data.get("seed"), f"{at}seed", SEED_RANGE),
        choices={str(key): as_name(value, f"{at}choices.{key}")
                 for key, value in as_mapping(data.get("choices"), f"{at}choices").items()},
        elapsed_s=as_real(data.get("elapsed_s"), f"{at}elapsed_s", low=0.0),
        host=as_text(data.get("host"), f"{at}host", limit=NAME_LIMIT),
        pid=as_whole(data.get("pid"), f"{at}pid", PID_RANGE, "a process id"),
        heartbeat=as_real(data.get("heartbeat"), f"{at}heartbeat"),
        versions={str(k): as_text(v, f"{at}versions.{k}", limit=NAME_LIMIT) for k, v
                  in as_mapping(data.get("versions"), f"{at}versions").items()},
        resumes=_list_of_mappings(data.get("resumes"), f"{at}resumes"),
        summary=_optional_mapping(data.get("summary"), f"{at}summary"),
        link_lateness=_lateness(data.get(LINK_LATENESS), f"{at}{LINK_LATENESS}"),
        extra={key: value for key, value in data.items() if key not in known},
    )
    return fields


def _optional_mapping(value: Any, where: str) -> dict[str, Any] | None:
    return None if value is None else as_mapping(value, where)


def _list_of_mappings(value: Any, where: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise RunFileError(f"{where} is {kind_of(value)}, not a list")
    return [as_mapping(entry, f"{where}[{i}]") for i, entry in enumerate(value)]


def _lateness(value: Any, where: str) -> dict[str, Any] | None:
    """An emulation run's ``link_lateness`` (:data:`LINK_LATENESS`), checked: its numbers,
    the verdict (true, false or null) and the lists of trace ids."""
    if value is None:
        return None
    record = as_mapping(value, where)
    verdict = record.get("within_tolerance")
    if verdict is not None and not isinstance(verdict, bool):
        raise RunFileError(f"{where}.within_tolerance is {kind_of(verdict)} ({shown(verdict)}), "
                           "not true, false or null")
    for key in ("p50_ms", "p90_ms", "p99_ms", "max_ms", "tolerance_ms"):
        as_real(record.get(key), f"{where}.{key}", low=0.0)
    fraction = as_real(record.get("late_fraction"), f"{where}.late_fraction", low=0.0)
    if fraction is not None and fraction > 1.0:
        raise RunFileError(f"{where}.late_fraction {shown(fraction)} is above 1")
    for key in ("late_traces", "unmeasured_traces"):
        if not isinstance(record.get(key) or [], list):
            raise RunFileError(f"{where}.{key} is {kind_of(record[key])}, not a list of trace ids")
    as_whole(record.get("count"), f"{where}.count", (0, 2**62))
    return record


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def read_status(path: str | Path) -> RunStatus | Broken | None:
    """The checked status of the run directory ``path``: None when the job never started (no
    ``status.json``), Broken with its reason when the file is damaged. Never creates the
    directory, so watching jobs that may never start leaves nothing behind."""
    if not os.path.lexists(Path(path) / STATUS):
        return None
    try:
        return RunStatus.from_json(load_json(Path(path) / STATUS, STATUS))
    except RunFileError as err:
        return Broken(str(err))


def effective_state(status: RunStatus | Broken | dict[str, Any] | None,
                    now: float | None = None) -> str | None:
    """What a reader should believe of a status (a record, or a parsed ``status.json``
    object): None when there is none, ``broken``, ``interrupted`` for a running job whose
    process is gone, else its recorded state."""
    if isinstance(status, dict):
        status = RunStatus.from_json(status)
    return None if status is None else status.effective_state(now)


def run_state(path: str | Path, now: float | None = None) -> str | None:
    """:func:`effective_state` of the run directory ``path``'s status."""
    return effective_state(read_status(path), now)
