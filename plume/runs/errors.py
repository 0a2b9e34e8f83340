"""A write the system refuses (a full disk, a file-size limit, a read-only folder), as one line
naming the file: the user's disk, not the code, is what needs fixing."""

import os


class WriteFailed(RuntimeError):
    """The system refused a write: one line with its reason and the file (``no space left on
    device writing <file>``), no traceback. Made by :func:`write_failed`."""


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
