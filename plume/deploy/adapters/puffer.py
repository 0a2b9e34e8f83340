"""Puffer's ``python_ipc`` controller backed by a Plume export (Puffer: src/abr/), for the
Gelato setting (Puffer's 10 formats, 2.002 s chunks).

Puffer binds and listens on a Unix stream socket, starts the controller as
``<test_path> <abr_name> <model_path> <ipc_path>`` and accepts one connection: the controller
*connects* and lives as long as that video session. Before each chunk Puffer writes a 2-byte
big-endian length and that many bytes of JSON, then reads an answer framed the same way:
``{"action": i}``, ``i`` indexing the formats sorted by (width, height, -crf), i.e. increasing
quality, the order of the simulator's actions.

Conversions (Puffer's ``python_ipc.cc``):

* ``past_chunk.ssim`` and ``ssims`` are SSIM indices in [0, 1]; Plume's traces hold SSIM dB,
  ``-10 log10(1 - ssim)`` clamped to [0, 60] as Puffer's ``ssim_db`` does (1 -> 60 dB);
* ``past_chunk.size`` and ``sizes`` are bytes x 1e-6, i.e. MB (Puffer's comments say "Mb"),
  the simulator's unit; chunks not yet encoded arrive as size 3.0 / SSIM 0.85, Puffer's
  defaults, and are passed on as such;
* ``past_chunk.delay`` is the transmission time in s, ``buffer`` s, ``cum_rebuf`` the
  session's cumulative rebuffering in s: the last chunk's stall is its increase since the
  previous request;
* ``past_chunk`` is all zeros before the first chunk: ``last`` is None and a new session
  starts (``ctrl.reset()``); a later all-zero ``past_chunk`` (Puffer reusing the process for
  a new video) starts another.

Errors. A frame that cannot be decided on is answered ``{"action": 0, "error": "<one
line>"}`` with the same framing and logged, and the session goes on: bytes that are not UTF-8
JSON, numbers beyond float range (a 400-digit integer) or beyond Python's integer-parsing
limit, nesting deeper than the parser's recursion limit, a value that is not an object, a
missing or ill-typed field, a number beyond +-:data:`MAX_FIELD`, a zero length prefix, and
(one line, never a traceback) anything the controller itself fails on. Puffer's reader takes
``action`` and would throw without one, so the answer carries the lowest format (the choice
least likely to stall) beside the reason.
A length prefix longer than the bytes that follow (the rest does not arrive within
``frame_timeout_s``, or the stream ends) leaves the stream out of sync: the error is answered
where the socket still takes it and the session ends. An end of stream between frames, or a
socket error, ends the session cleanly; :meth:`PufferIpcClient.serve` returns in every case
(tests feed it random frames and random bytes).
"""

from __future__ import annotations

import json
import logging
import math
import socket
import struct
import time
from typing import Any

from plume.deploy.adapters.text import show as _show
from plume.deploy.runtime import MeasurementError

__all__ = ["FrameError", "PufferIpcClient", "PufferMessages", "ssim_db"]

log = logging.getLogger("plume.deploy.puffer")

MAX_SSIM_DB, MIN_SSIM_DB = 60.0, 0.0
"""Puffer's SSIM dB clamp (``abr_algo.hh``)."""
LOOKAHEAD, FORMATS = 5, 10
"""Puffer's ``MAX_LOOKAHEAD_HORIZON`` and ``ACTION_SPACE_N``."""
_LENGTH = struct.Struct("!H")


FALLBACK_ACTION = 0
"""The format answered beside an error: Puffer's lowest."""
MAX_ERROR_CHARS = 400
"""An error answer's reason is cut to this, so its frame always fits the 2-byte length."""


class FrameError(ValueError):
    """A frame that cannot be decided on; ``in_sync`` says whether the stream can go on."""

    def __init__(self, message: str, in_sync: bool = True) -> None:
        super().__init__(message)
        self.in_sync = in_sync


def ssim_db(ssim: float) -> float:
    """Puffer's ``ssim_db``: an SSIM index in [0, 1] as dB, clamped to [0, 60]."""
    if ssim == 1.0:
        return MAX_SSIM_DB
    return max(MIN_SSIM_DB, min(MAX_SSIM_DB, -10.0 * math.log10(1.0 - ssim)))


MAX_FIELD = 1e15
"""Largest magnitude of a number field: far beyond any size (MB), time (s) or SSIM Puffer
sends, and small enough that the float32 observation stays finite."""


def _finite(value: Any) -> bool:
    """A JSON number within :data:`MAX_FIELD` (an integer is compared exactly, never
    converted: ``math.isfinite`` raises OverflowError on a 400-digit one)."""
    if type(value) is float:
        return math.isfinite(value) and abs(value) <= MAX_FIELD
    return type(value) is int and abs(value) <= MAX_FIELD


def _number(value: Any, name: str) -> float:
    if not _finite(value):
        raise FrameError(f"field {name} must be a finite number within +-{MAX_FIELD:g}, got "
                         f"{_show(value)}")
    return float(value)


def _field(obj: dict, key: str, where: str = "") -> Any:
    if key not in obj:
        raise FrameError(f"missing field {where}{key}")
    return obj[key]


def _table(msg: dict, key: str) -> list[list[float]]:
    """``sizes`` / ``ssims``: 5 look-ahead chunks x 10 formats of numbers."""
    rows = _field(msg, key)
    if not isinstance(rows, list) or len(rows) != LOOKAHEAD:
        raise FrameError(f"field {key} must be a list of {LOOKAHEAD} lists")
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != FORMATS:
            raise FrameError(f"field {key}[{i}] must be a list of {FORMATS} numbers")
        if not all(map(_finite, row)):  # the element is named only when one is wrong
            j = next(j for j, v in enumerate(row) if not _finite(v))
            _number(row[j], f"{key}[{i}][{j}]")
    return [[float(v) for v in row] for row in rows]


def _ssim_index(value: float, name: str) -> float:
    if not 0.0 <= value <= 1.0:
        raise FrameError(f"field {name} must be an SSIM index in [0, 1], got {value:g}")
    return value


class PufferMessages:
    """Turns Puffer's requests into runtime measurements; tracks ``cum_rebuf`` across a session
    so that each chunk carries its own stall."""

    def __init__(self) -> None:
        self.cum_rebuf = 0.0

    def measurement(self, msg: Any) -> tuple[bool, dict]:
        """(starts a new session, the measurement for ``ctrl.decide``); FrameError if bad."""
        if not isinstance(msg, dict):
            raise FrameError(f"expected a JSON object, got {type(msg).__name__}")
        past = _field(msg, "past_chunk")
        if not isinstance(past, dict):
            raise FrameError("field past_chunk must be an object")
        delay = _number(_field(past, "delay", "past_chunk."), "past_chunk.delay")
        ssim = _ssim_index(_number(_field(past, "ssim", "past_chunk."), "past_chunk.ssim"),
                           "past_chunk.ssim")
        size = _number(_field(past, "size", "past_chunk."), "past_chunk.size")
        buffer = _number(_field(msg, "buffer"), "buffer")
        cum_rebuf = _number(_field(msg, "cum_rebuf"), "cum_rebuf")
        sizes = _table(msg, "sizes")
        ssims = [[ssim_db(_ssim_index(v, f"ssims[{i}][{j}]")) for j, v in enumerate(row)]
                 for i, row in enumerate(_table(msg, "ssims"))]
        first = size == 0.0
        if first:
            last = None
        else:
            last = {"size_mb": size, "ssim_db": ssim_db(ssim), "delay_s": delay,
                    "buffer_s": buffer, "stall_s": max(cum_rebuf - self.cum_rebuf, 0.0)}
        return first, {"last": last, "next_sizes_mb": sizes, "next_ssim_db": ssims}

    def accept(self, msg: dict) -> None:
        """The request was decided on: its ``cum_rebuf`` is the base of the next stall."""
        self.cum_rebuf = float(msg["cum_rebuf"])


class PufferIpcClient:
    """The controller side of ``python_ipc``: connects to Puffer's socket at ``ipc_path`` and
    answers each request with ``ctrl``'s decision until Puffer closes the stream."""

    def __init__(self, ctrl: Any, ipc_path: str, frame_timeout_s: float = 10.0,
                 connect_timeout_s: float = 5.0) -> None:
        if "puffer" not in ctrl.protocols:
            raise ValueError(f"Puffer's python_ipc needs an export whose session speaks "
                             f"Puffer's protocol (Deployment.protocols), got "
                             f"{ctrl.env}/{ctrl.variant}")
        self.ctrl, self.ipc_path = ctrl, str(ipc_path)
        self.frame_timeout_s, self.connect_timeout_s = frame_timeout_s, connect_timeout_s
        self.sock: socket.socket | None = None
        self.messages = PufferMessages()
        self.totals = {"decisions": 0, "errors": 0, "sessions": 0}
        self.decisions = self.errors = 0  # of the current session
        self.started = False

    def connect(self) -> None:
        """Connect to Puffer's listening socket, retrying briefly (Puffer listens before it
        starts the controller, so the first try normally succeeds)."""
        deadline = time.monotonic() + self.connect_timeout_s
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.ipc_path)
                self.sock = sock
                return
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                if time.monotonic() >= deadline:
                    raise ConnectionError(f"nothing listens on {self.ipc_path} "
                                          f"(waited {self.connect_timeout_s:g} s)") from None
                time.sleep(0.05)

    def serve(self) -> dict[str, Any]:
        """Answer requests until the stream ends; returns counts for the session log."""
        if self.sock is None:
            self.connect()
        end = "end of stream"
        while True:
            try:
                msg = self._read_frame()
            except FrameError as e:
                self._error(e)
                if not e.in_sync:
                    end = "stream out of sync"
                    break
                continue
            if msg is None:
                break
            self._answer(msg)
        self._log_session(end)
        return {**self.totals, "end": end}

    def _answer(self, msg: Any) -> None:
        """Decide on one parsed request and write the action (or an error) back."""
        try:
            first, measurement = self.messages.measurement(msg)
            if first or not self.started:
                if not first:  # joined mid-video: the stall before it is not this chunk's
                    measurement["last"]["stall_s"] = 0.0
                self._start(first)
            action = int(self.ctrl.decide(measurement))
        except FrameError as e:
            self._error(e)
            return
        except MeasurementError as e:
            self._error(FrameError(str(e)))
            return
        except Exception as e:  # a bug costs one answer, never Puffer's session
            log.debug("puffer ipc traceback", exc_info=True)
            self._error(FrameError(f"internal error: {type(e).__name__}: {_show(str(e))}"))
            return
        self.messages.accept(msg)
        self.decisions += 1
        self.totals["decisions"] += 1
        self._write({"action": action})

    def _start(self, first: bool) -> None:
        """A new video session (also when a connection begins mid-video, ``first`` False)."""
        if self.started and (self.decisions or self.errors):
            self._log_session("new video")
        if not first:
            log.warning("puffer ipc %s: first request already has a past chunk; deciding from "
                        "it with an empty history", self.ipc_path)
        self.ctrl.reset()
        self.started = True
        self.decisions = self.errors = 0
        self.totals["sessions"] += 1

    def _read_frame(self) -> Any:
        """The next request's JSON value; None at a clean end of stream."""
        head = self._read(1, None)
        if not head:
            return None
        head += self._read(1, self.frame_timeout_s)
        if len(head) < 2:
            raise FrameError("stream ended inside a length prefix", in_sync=False)
        (n,) = _LENGTH.unpack(head)
        if n == 0:
            raise FrameError("zero length prefix: no JSON follows")
        body = self._read(n, self.frame_timeout_s)
        if len(body) < n:
            raise FrameError(f"length prefix says {n} bytes, only {len(body)} followed",
                             in_sync=False)
        try:
            return json.loads(body.decode("utf-8"))
        except RecursionError:
            raise FrameError("bad JSON: nested too deeply") from None
        except ValueError as e:  # not UTF-8, not JSON, an integer beyond the digit limit
            raise FrameError(f"bad JSON: {str(e).splitlines()[0][:120]}") from None

    def _read(self, n: int, timeout: float | None) -> bytes:
        """Up to ``n`` bytes: fewer only at end of stream or when ``timeout`` passes."""
        assert self.sock is not None
        data = b""
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(data) < n:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            try:
                self.sock.settimeout(left)
                chunk = self.sock.recv(n - len(data))
            except OSError:  # timed out, reset, or the socket is gone: no more bytes
                break
            if not chunk:
                break
            data += chunk
        return data

    def _write(self, obj: dict) -> bool:
        """One framed JSON answer; False when the socket no longer takes it."""
        body = json.dumps(obj, separators=(",", ":")).encode("utf-8")
        try:
            assert self.sock is not None
            self.sock.settimeout(self.frame_timeout_s)
            self.sock.sendall(_LENGTH.pack(len(body)) + body)
            return True
        except OSError:
            return False

    def _error(self, e: FrameError) -> None:
        self.errors += 1
        self.totals["errors"] += 1
        sent = self._write({"action": FALLBACK_ACTION, "error": str(e)[:MAX_ERROR_CHARS]})
        log.warning("puffer ipc %s: %s%s", self.ipc_path, e, "" if sent else " (not answered)")

    def _log_session(self, end: str) -> None:
        log.info("puffer session ipc=%s decisions=%d errors=%d end=%s", self.ipc_path,
                 self.decisions, self.errors, end)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
