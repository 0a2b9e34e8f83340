"""One job lifecycle for every command that writes a run directory (plume-train, plume-eval,
plume-emulate): the command checks its whole job first (a refusal leaves nothing), then hands
the directory, what the job records of itself and its body to :func:`run_lifecycle`:

    lock -> skip if completed (unless overwrite) -> record (Hydra's files, config.yaml)
    -> ``running`` with host, pid and heartbeat -> body -> completed / paused / failed

with the tracker finished in every case. The lock is the operating system's (``flock``): a
second process on the same folder is refused at once (:class:`RunDirectoryLocked`), and a
killed job leaves ``running`` with a dead pid, which every reader sees as ``interrupted``. While
the body runs, a heartbeat is written every :data:`HEARTBEAT_EVERY_S` seconds, so a job on
another host (a SLURM node) whose pid cannot be checked reads interrupted once it stops beating.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from plume.runs.errors import WriteFailed
from plume.runs.record import COMPLETED, FAILED, PAUSED, RESOLVED_CONFIG, RUNNING, Broken, RunStatus
from plume.runs.store import RunDirectory

log = logging.getLogger("plume")

HEARTBEAT_EVERY_S = 30.0
"""How often a running job says it is alive (well inside ``HEARTBEAT_STALE_S``)."""


class Tracker(Protocol):
    """What the lifecycle needs of an experiment tracker (W&B's run, or none)."""

    location: str | None

    def finish(self, exit_code: int) -> None: ...


class NoTracker:
    """A job that logs to no tracker."""

    location = None

    def finish(self, exit_code: int) -> None:
        return None


@dataclass(frozen=True)
class JobRecord:
    """What a job records of itself: in ``status.json`` (``exp_name``, ``seed``, ``choices``),
    and the files written before it runs (``config``: the resolved ``config.yaml`` text;
    ``hydra``: Hydra's record of the command, file name -> text, for ``.hydra/``)."""

    exp_name: str
    seed: int
    choices: dict[str, str]
    config: str
    overwrite: bool = False
    hydra: dict[str, str] = field(default_factory=dict)
    verb: str = "run"
    """For the skip line: 'skipping <dir>: already completed (overwrite=true to <verb> it
    again)'."""
    quiet: tuple[type[BaseException], ...] = ()
    """Errors recorded as ``failed`` with their one line and no traceback (the user's
    machine, not the code: emulation unavailable)."""


@dataclass
class Outcome:
    """What a body returns: its summary, whether it stopped early on purpose (``paused``), and
    any further status fields (``link_lateness``)."""

    summary: dict[str, Any]
    paused: bool = False
    fields: dict[str, Any] = field(default_factory=dict)


Start = Callable[[RunStatus | Broken | None], dict[str, Any]]
"""Called under the lock with the previous record (None: there is none) before ``running`` is
written; returns further fields of the running record (a resumed job's ``resumes``)."""


def run_lifecycle(rundir: RunDirectory, job: JobRecord,
                  body: Callable[[Tracker], Outcome], *, start: Start | None = None,
                  tracker: Callable[[], Tracker] = NoTracker) -> dict[str, Any] | None:
    """Run ``body`` in ``rundir`` through the whole lifecycle (module docstring); returns its
    summary, or the recorded one of a completed job that is skipped."""
    with rundir.lock():
        if job.hydra:
            rundir.write_hydra_record(job.hydra)
        previous = rundir.status()
        if isinstance(previous, RunStatus) and previous.state == COMPLETED and not job.overwrite:
            log.info("skipping %s: already completed (overwrite=true to %s it again)",
                     rundir.path, job.verb)
            return previous.summary
        _prepare(rundir, previous)
        more = start(previous) if start is not None else {}
        rundir.write_text(RESOLVED_CONFIG, job.config)
        started = time.time()
        rundir.write_status(
            RUNNING, started_at=_now(), finished_at=None, elapsed_s=None, error=None,
            traceback=None, host=socket.gethostname(), pid=os.getpid(),
            heartbeat=round(started, 3), exp_name=job.exp_name, seed=job.seed,
            choices=job.choices, command=" ".join(sys.argv), summary=None, **more)
        outcome = _run_body(rundir, job, body, tracker, started)
        rundir.write_status(PAUSED if outcome.paused else COMPLETED, finished_at=_now(),
                            elapsed_s=round(time.time() - started, 3), summary=outcome.summary,
                            **outcome.fields)
        return outcome.summary


def _prepare(rundir: RunDirectory, previous: RunStatus | Broken | None) -> None:
    """Clear what a killed process left (its temporaries) and say when the old status is not
    one (the job then starts afresh)."""
    stale = rundir.remove_stale_temporaries()
    if stale:
        log.info("removed %d temporary file(s) a killed process left: %s", len(stale),
                 ", ".join(stale))
    if isinstance(previous, Broken) and previous.is_object:
        log.warning("%s: %s: its status is not trusted", rundir.path, previous.reason)
    elif isinstance(previous, Broken):
        log.warning("%s: status.json is not a Plume status; the job starts afresh (%s)",
                    rundir.path, previous.reason)


def _run_body(rundir: RunDirectory, job: JobRecord, body: Callable[[Tracker], Outcome],
              tracker_factory: Callable[[], Tracker], started: float) -> Outcome:
    """The body with a heartbeat beside it and the tracker around it; ``failed`` and why when
    it raises (the error is raised on), the tracker finished in every case."""
    tracker: Tracker = NoTracker()
    exit_code = 1
    try:
        with _heartbeat(rundir):
            tracker = tracker_factory()
            outcome = body(tracker)
        exit_code = 0
    except BaseException as err:
        _record_failure(rundir, err, started, quiet=isinstance(err, job.quiet))
        raise
    finally:
        tracker.finish(exit_code)
    if tracker.location:
        outcome.fields.setdefault("wandb_run", tracker.location)
    return outcome


class _heartbeat:
    """A thread that writes ``heartbeat`` every HEARTBEAT_EVERY_S seconds while the block runs
    (status writes are serialised by the store, so the body may write the status too)."""

    def __init__(self, rundir: RunDirectory) -> None:
        self.rundir, self.every_s = rundir, HEARTBEAT_EVERY_S
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="plume-heartbeat", daemon=True)

    def __enter__(self) -> None:
        self.thread.start()

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def _beat(self) -> None:
        while not self.stop.wait(self.every_s):
            try:
                self.rundir.write_status(RUNNING, heartbeat=round(time.time(), 3))
            except WriteFailed as err:  # a full disk: the body's own writes will say so
                log.warning("heartbeat not written: %s", err)
                return


def _record_failure(rundir: RunDirectory, err: BaseException, started: float, *,
                    quiet: bool) -> None:
    """``failed`` and why in status.json. A disk too full for that small file too leaves it as
    it was (``running``: read as interrupted once the process is gone) and a WriteFailed says
    so in its one line."""
    try:
        rundir.write_status(FAILED, error=f"{type(err).__name__}: {err}",
                            traceback=None if quiet else traceback.format_exc(),
                            elapsed_s=round(time.time() - started, 3))
    except WriteFailed:
        if isinstance(err, WriteFailed):
            also = f"{err} (status.json could not be updated either: it still says running)"
            err.args = (also,)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
