"""The run store: every job is a self-describing folder whose files
and states ``plume.runs.record`` names (the record the report and the experiments read).

Every file is written atomically (temporary file + rename, the temporary removed when the
write fails), so a crash or a reader in another process never sees half a file. Checkpoints
are data that loading can never execute (``plume.runs.statefile``); a torn or corrupt one
is detected when loaded (:class:`CorruptCheckpoint`) and never trusted. One process at a time
works in a run directory (:meth:`RunDirectory.lock`). A write the system refuses (a full disk,
a file-size limit) is one :class:`~plume.runs.errors.WriteFailed` line naming the file, its
temporary removed; Hydra's job log file (:class:`RunLogHandler`) says so once and stops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from plume.runs.errors import os_error, write_failed
from plume.runs.record import (
    CHECKPOINT,
    COMPLETED,
    EXPORTS,
    STATUS,
    TRAIN_LOG,
    Broken,
    RunStatus,
    read_status,
)

LOCK = ".lock"
HYDRA_FILES = (".hydra",)


class CorruptCheckpoint(ValueError):
    """A checkpoint file that cannot be loaded (torn by a kill, truncated, overwritten)."""


class RunDirectoryLocked(RuntimeError):
    """Another process holds the run directory's lock (the same job started twice)."""


def _atomic_write(path: Path, write) -> None:
    """``write(tmp)`` then rename; the temporary removed on failure, and a write the system
    refused (an OSError, maybe under a library's own error) raised as one WriteFailed line."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        refused = os_error(err) if isinstance(err, Exception) else None
        if refused is None:
            raise
        raise write_failed(path, refused) from None


class RunLogHandler(logging.FileHandler):
    """Hydra's job log file (``hydra.job_logging.handlers.file`` in ``conf/hydra/default.yaml``).
    A record it cannot write (a full disk) is one line on stderr, then the file is closed and
    left as it is: logging's own handler prints ``--- Logging error ---`` and a traceback for
    every record, burying the job's one-line error under hundreds."""

    failed = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.failed:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        refused = os_error(sys.exc_info()[1])
        if refused is None:
            super().handleError(record)
            return
        self.failed = True
        with contextlib.suppress(OSError):  # its buffer cannot be flushed either
            self.close()
        with contextlib.suppress(OSError):  # a stderr on the same full disk
            print(f"{write_failed(self.baseFilename, refused)}: this log file stops here (the "
                  "console shows the rest)", file=sys.stderr, flush=True)


def discard_unused(path: Path) -> bool:
    """Remove ``path`` when nothing but Hydra's own files (``.hydra/``, the job log) is in it
    and no job ever started there (a job refused inside a multirun), with the sweep folders
    made for it if they are left empty; returns whether it was removed. A directory with a
    status is never touched."""
    if not path.is_dir() or (path / STATUS).exists():
        return False
    if any(p.name not in HYDRA_FILES and p.suffix != ".log" for p in path.iterdir()):
        return False
    shutil.rmtree(path, ignore_errors=True)
    for parent in list(path.parents)[:2]:
        try:
            parent.rmdir()
        except OSError:
            break
    return True


class RunDirectory:
    """Reads and writes the files of one job's run directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._status_lock = threading.Lock()  # the lifecycle's heartbeat thread writes too

    def status(self) -> RunStatus | Broken | None:
        """The checked status record (``plume.runs.record``): None when the job never started,
        Broken (with its reason) when ``status.json`` is damaged: nothing in it is trusted."""
        return read_status(self.path)

    @property
    def status_damaged(self) -> bool:
        """A ``status.json`` exists but is not a Plume status (:class:`Broken`)."""
        return isinstance(self.status(), Broken)

    @property
    def is_completed(self) -> bool:
        status = self.status()
        return isinstance(status, RunStatus) and status.state == COMPLETED

    def write_status(self, state: str, **fields: Any) -> RunStatus:
        """Set ``fields`` of the status record (a damaged one starts afresh), its state and
        time stamp, and write it; a field the record does not have is a TypeError."""
        with self._status_lock:
            status = self.status()
            status = status if isinstance(status, RunStatus) else RunStatus(state=state)
            status = dataclasses.replace(status, **fields, state=state,
                                         updated_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
            text = json.dumps(status.to_json(), indent=2, default=str)
            _atomic_write(self.path / STATUS, lambda tmp: tmp.write_text(text + "\n"))
        return status

    @contextlib.contextmanager
    def lock(self):
        """Hold this directory's lock for the block; RunDirectoryLocked if another process
        holds it. The operating system drops the lock when the process dies (even SIGKILL)."""
        handle = open(self.path / LOCK, "a+")
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                status = self.status()
                pid, host = ((status.pid, status.host) if isinstance(status, RunStatus)
                             else (None, None))
                raise RunDirectoryLocked(
                    f"{self.path} is in use by another process (pid {pid or '?'} on "
                    f"{host or '?'}): the same job is already running") from None
            yield self
        finally:
            handle.close()

    def remove_stale_temporaries(self) -> list[str]:
        """Delete temporaries a killed writer left behind (call under :meth:`lock`)."""
        stale = sorted(self.path.glob(".*.tmp"))
        for path in stale:
            path.unlink(missing_ok=True)
        return [p.name for p in stale]

    def write_hydra_record(self, files: dict[str, str]) -> None:
        """Hydra's record of the command (``.hydra/<name>``), each file written atomically."""
        folder = self.path / HYDRA_FILES[0]
        folder.mkdir(exist_ok=True)
        for name, text in files.items():
            _atomic_write(folder / name, lambda tmp, text=text: tmp.write_text(text))

    def write_text(self, name: str, text: str) -> Path:
        path = self.path / name
        _atomic_write(path, lambda tmp: tmp.write_text(text))
        return path

    def write_json(self, name: str, content: dict[str, Any]) -> Path:
        path = self.path / name
        text = json.dumps(content, indent=2, default=str)
        _atomic_write(path, lambda tmp: tmp.write_text(text + "\n"))
        return path

    def exports(self) -> list[dict[str, Any]]:
        """The exports recorded so far (``exports.json``; [] when none or unreadable)."""
        try:
            entries = json.loads((self.path / EXPORTS).read_text()).get("exports", [])
        except (OSError, ValueError, AttributeError):
            return []
        return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []

    def record_export(self, entry: dict[str, Any]) -> None:
        """Add (or replace, for the same folder) one export in ``exports.json``."""
        kept = [e for e in self.exports() if e.get("path") != entry.get("path")]
        self.write_json(EXPORTS, {"exports": [*kept, entry]})

    def reset_train_log(self) -> None:
        (self.path / TRAIN_LOG).unlink(missing_ok=True)

    def append_train(self, record: dict[str, Any]) -> None:
        """One line more in ``train.jsonl``; a refused write is cut back off (a torn last line
        would break a resume) and raised as WriteFailed."""
        path = self.path / TRAIN_LOG
        size = path.stat().st_size if path.exists() else 0
        try:
            with open(path, "a") as handle:
                handle.write(json.dumps(record) + "\n")
        except OSError as err:
            with contextlib.suppress(OSError):
                os.truncate(path, size)
            raise write_failed(path, err) from None

    def truncate_train_log(self, env_steps: int) -> None:
        """Drop training records past ``env_steps`` (those a resumed job will redo)."""
        path = self.path / TRAIN_LOG
        if not path.is_file():
            return
        kept = [line for line in path.read_text().splitlines()
                if line.strip() and json.loads(line)["env_steps"] <= env_steps]
        _atomic_write(path, lambda tmp: tmp.write_text("".join(f"{line}\n" for line in kept)))

    def read_train(self) -> pd.DataFrame:
        return pd.read_json(self.path / TRAIN_LOG, lines=True)

    def write_table(self, name: str, rows: Iterable[dict[str, Any]] | pd.DataFrame) -> Path:
        frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
        path = self.path / name
        _atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False))
        return path

    def read_table(self, name: str) -> pd.DataFrame:
        return pd.read_parquet(self.path / name)

    def save_checkpoint(self, state: dict[str, Any]) -> Path:
        """Write ``state`` as a data-only file (``plume.runs.statefile``): tensors, arrays,
        numbers, strings, containers and encoded snapshots; never a pickle."""
        from plume.runs import statefile

        def write(tmp: Path) -> None:
            # through a Python file: a failed write surfaces as an OSError (torch's own file
            # says only "iostream error") and the handle is closed, freeing the temporary's space
            with open(tmp, "wb") as handle:
                statefile.save(state, handle)

        path = self.path / CHECKPOINT
        _atomic_write(path, write)
        return path

    @property
    def has_checkpoint(self) -> bool:
        return (self.path / CHECKPOINT).is_file()

    def load_checkpoint(self) -> dict[str, Any]:
        """The checkpoint, read as data only (``torch.load(weights_only=True)``, no object
        rebuilt); CorruptCheckpoint, one line naming the file, for anything else: a torn or
        truncated file, a pickle, a file of an older Plume."""
        from plume.runs import statefile

        path = self.path / CHECKPOINT
        try:
            state = statefile.load(path)
        except statefile.StateRefused as err:
            raise CorruptCheckpoint(f"{path}: unreadable checkpoint: {err}") from None
        if not isinstance(state, dict) or "env_steps" not in state:
            raise CorruptCheckpoint(f"{path}: not a Plume checkpoint")
        return state
