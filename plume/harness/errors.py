"""The harness's error types for a user's mistake (config value, trace file, dataset) and for
a write the system refuses (a full disk): each one line, never a traceback."""

import os


class ConfigError(ValueError):
    """A job's configuration or data is invalid; the message names the key, file, line or
    trace and what was expected, in one line (printed without a traceback)."""


class JobRefused(RuntimeError):
    """A job of a sweep refused with a one-line reason (a ConfigError, a diverged learner, a
    run directory in use): the sweeper prints it and the sweep goes on with the others."""


class WriteFailed(RuntimeError):
    """The system refused a write (a full disk, a file-size limit, a read-only folder): one line
    with its reason and the file (``no space left on device writing <file>``), no traceback:
    the user's disk, not the code, is what needs fixing. Made by :func:`write_failed`."""


def write_failed(path, error: OSError) -> WriteFailed:
    """The one line of ``error`` (the system's own words, ``strerror``) writing ``path``."""
    reason = os.strerror(error.errno) if error.errno else str(error)
    return WriteFailed(f"{reason[:1].lower()}{reason[1:]} writing {path}")


def os_error(err: BaseException | None) -> OSError | None:
    """The OSError with an errno behind ``err`` (itself, or what it was raised while handling:
    torch's writer reports a failed ``write`` as a RuntimeError on top of the OSError)."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, OSError) and err.errno:
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None
