"""What a sweep of ``plume-train -m`` (or ``plume-eval -m``) did with each of its jobs.

The ``plume`` sweeper (``hydra_plugins/plume_sweeper``, the default of both apps) runs Hydra's
basic sweep: the same cartesian product of override values, the same batches, any launcher.
Around it, this module keeps the outcome: a job refused by its checks before launch (its
config or data: it never gets a folder), refused while running (``JobRefused``: a diverged
learning rate, a run directory in use, a problem only the job can see) or failed (a bug: its
traceback is in its ``status.json``) is one line on stderr; the others go on; the sweep ends
with a summary line, and the command exits non-zero (:func:`exit_code`). Tracebacks are
printed only with ``HYDRA_FULL_ERROR=1``, Hydra's own switch.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from hydra.types import RunMode

from plume.harness.config.errors import ConfigError, JobRefused
from plume.runs.errors import WriteFailed
from plume.runs.store import RunDirectoryLocked

REFUSED_EXIT, FAILED_EXIT = 2, 1
_LAST: dict[str, int] = {}


@dataclass
class SweepOutcome:
    """The counts and one-line reasons of one sweep (printed as they come)."""

    app: str
    swept: frozenset[str] = frozenset()  # the keys whose values name a job in the lines
    completed: int = 0
    refused: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def check(self, batch: Sequence[Sequence[str]], compose: Callable[[list[str]], Any],
              check: Callable[[Any], Any]) -> list[Sequence[str]]:
        """The jobs of ``batch`` whose composed config passes ``check``; the others are
        refused here, before any of their folders exists."""
        passed = []
        for overrides in batch:
            try:
                check(compose(list(overrides)))
            except ConfigError as err:
                self._note(self.refused, overrides, "refused", err)
                continue
            passed.append(overrides)
        return passed

    def collect(self, batch: Sequence[Sequence[str]], results: Sequence[Any]) -> list[str | None]:
        """Count the launcher's results (Hydra ``JobReturn``) of ``batch``; per job, None when
        it completed, else its one line (a sweeper that decides per job reads them)."""
        lines: list[str | None] = []
        for overrides, result in zip(batch, results):
            try:
                with contextlib.redirect_stderr(io.StringIO()):  # Hydra's "Error executing
                    _ = result.return_value  # job" line; raises what the job raised
            except JobRefused as err:
                lines.append(self._note(self.refused, overrides, "refused", err))
            except Exception as err:  # noqa: BLE001 (a bug in a job: reported, others go on)
                where = _run_dir(result)
                lines.append(self._note(self.failed, overrides, "failed", err,
                                        f" (traceback in {where}/status.json)" if where else "",
                                        kind=True))
            else:
                self.completed += 1
                lines.append(None)
        return lines

    def finish(self) -> int:
        """Print the summary line; the exit code the command should end with."""
        total = self.completed + len(self.refused) + len(self.failed)
        print(f"{self.app}: sweep of {total} job(s): {self.completed} completed, "
              f"{len(self.refused)} refused, {len(self.failed)} failed", file=sys.stderr)
        code = FAILED_EXIT if self.failed else REFUSED_EXIT if self.refused else 0
        _LAST["exit"] = code
        return code

    def _note(self, into: list[str], overrides, verb: str, err: BaseException,
              suffix: str = "", kind: bool = False) -> str:
        job = " ".join(o for o in overrides if o.partition("=")[0].lstrip("+~") in self.swept)
        reason = f"{type(err).__name__}: {err}" if kind else str(err)
        named = f" [{job}]" if job else ""
        line = f"{self.app}: {verb}{named}: {' '.join(reason.split())}{suffix}"
        into.append(line)
        print(line, file=sys.stderr, flush=True)
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            traceback.print_exception(err)
        return line


def refuse(app: str, err: Exception, mode: RunMode | None) -> NoReturn:
    """A user's mistake found inside a job: in a sweep (any mode but a single run) a
    JobRefused for the sweeper to print; in a single run one line and exit status 2; with
    ``HYDRA_FULL_ERROR=1`` the error itself, with its traceback."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise err
    if mode != RunMode.RUN:
        raise JobRefused(str(err)) from None
    print(f"{app}: error: {err}", file=sys.stderr)
    sys.exit(REFUSED_EXIT)


def failed_write(app: str, err: WriteFailed, mode: RunMode | None) -> NoReturn:
    """A write the system refused (a full disk): in a single run one line and exit status 1
    (the job failed; its status says why where it could still be written); in a sweep the
    error itself, which the sweeper counts failed in one line; with ``HYDRA_FULL_ERROR=1`` its
    traceback."""
    if mode != RunMode.RUN or os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise err
    print(f"{app}: error: {err}", file=sys.stderr, flush=True)
    sys.exit(FAILED_EXIT)


def run_task(app: str, run: Callable[[Path], Any], hydra_cfg: Any,
             refused: tuple[type[Exception], ...] = ()) -> Any:
    """A Hydra task function's body for every app: ``run(output_dir)``, with a user's mistake
    or a folder in use (and ``refused``) as one line (:func:`refuse`) and a full disk as one
    line too, a failure (:func:`failed_write`)."""
    try:
        return run(Path(hydra_cfg.runtime.output_dir))
    except (ConfigError, RunDirectoryLocked, *refused) as err:  # one line, no traceback
        refuse(app, err, hydra_cfg.mode)
    except WriteFailed as err:  # a full disk: one line, a failure
        failed_write(app, err, hydra_cfg.mode)


def exit_code() -> int:
    """The exit code of the last sweep this process ran (0 when it ran none)."""
    return _LAST.pop("exit", 0)


def _run_dir(result: Any) -> str | None:
    try:
        return str(result.hydra_cfg.hydra.runtime.output_dir)
    except Exception:  # noqa: BLE001 (a launcher that records no Hydra config)
        return None
