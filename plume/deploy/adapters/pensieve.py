"""Pensieve's dash.js decision server backed by a Plume export (Pensieve: rl_server/).

Pensieve's modified dash.js player downloads chunk 0 at the default level (1) by itself, then
POSTs one JSON object per downloaded chunk to ``http://<server>:8333`` and plays the level the
server answers (``text/plain``, a decimal index) for the next chunk. So the player's first POST
of a video is the controller's first measurement: a session is ``ctrl.reset()`` followed by one
``ctrl.decide({"last": ...})`` per POST, never a decision before chunk 0. (The simulator's
first decision, chunk 0's level from the empty history, has no counterpart; the answer to the
POST after chunk k is its decision for chunk k + 1.)

Fields read (others, such as ``nextChunkSize``, ``Type``, ``bufferAdjusted`` or
``bandwidthEst``, are accepted and ignored):

* ``lastquality``: level of the chunk just downloaded (0-5);
* ``buffer``: playback buffer, seconds;
* ``RebufferTime``: cumulative rebuffering of the video, ms (only logged: the Pensieve state
  has no stall feature);
* ``lastChunkStartTime`` / ``lastChunkFinishTime``: ms; their difference is the download time
  (``delay_ms``, request round trip included, as Pensieve's server computes it);
* ``lastChunkSize``: bytes;
* ``lastRequest``: index of the chunk just downloaded. The player counts from 0 (the POST
  after chunk 0), so ``lastRequest`` 0 starts a session; when it reaches the contract's
  ``n_chunks`` (48) the answer is ``REFRESH`` (the player reloads) and the session ends.

A POST carrying ``pastThroughput`` is the player's end-of-video summary: logged, answered
``0``. A download time of zero or less (a player glitch Pensieve's server survives by reusing
its previous state) is passed on as zero, which the runtime treats the same way. A repeated
``lastRequest`` (a retried POST) gets the answer already given; a ``lastRequest`` that skips
ahead (the POSTs between failed) counts the skipped chunks as such glitches, so the session
stays on the player's chunk. The next chunk's sizes come from the contract's video table, as
Pensieve's server reads them from its own files.

Sessions are kept per client: by the JSON field ``client_id`` when present (several players
behind one address), else by the client's IP address. A POST from an unknown client, or from
one whose video ended, whose ``lastRequest`` is not 0, a ``lastRequest`` that goes back, bad
JSON, a missing or non-numeric field, a bad ``Content-Length`` get ``400`` with a one-line
reason; the server keeps serving.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from plume.deploy.runtime import MeasurementError, load_controller

__all__ = [
    "CLIENT_FIELD", "DEFAULT_PORT", "PensieveDecisions", "PensieveHTTPServer",
    "RequestError", "make_server", "parse_post",
]

log = logging.getLogger("plume.deploy.pensieve")

DEFAULT_PORT = 8333
"""Pensieve's decision server port."""
CLIENT_FIELD = "client_id"
"""Optional POST field naming the player, for several players behind one address."""
MAX_BODY_BYTES = 1 << 16
"""A decision POST is a few hundred bytes; anything beyond this is refused."""
MAX_CLIENTS = 1024
"""Sessions kept at once; the least recently active is dropped beyond this."""
REQUIRED = ("lastquality", "buffer", "RebufferTime", "lastChunkStartTime",
            "lastChunkFinishTime", "lastChunkSize", "lastRequest")
"""Fields every decision POST must carry (those Pensieve's server reads)."""


class RequestError(ValueError):
    """A malformed request: the one-line reason is the 400 answer."""


@dataclass
class _Session:
    """One player's decision state: its controller and where its video stands."""

    ctrl: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    expected: int = 0
    answer: str | None = None
    last_request: int | None = None
    chunks: int = 0
    level_sum: int = 0
    rebuffer_ms: float = 0.0
    active: bool = False


def _number(post: dict, name: str) -> float:
    """A finite JSON number (booleans refused: JSON ``true`` is not a size)."""
    if name not in post:
        raise RequestError(f"missing field {name!r}")
    value = post[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"field {name!r} must be a number, got {json.dumps(value)[:40]}")
    if not math.isfinite(value):
        raise RequestError(f"field {name!r} must be finite, got {value}")
    return float(value)


def _index(post: dict, name: str, high: int | None = None) -> int:
    """A non-negative integral number (below ``high`` when given)."""
    value = _number(post, name)
    if value != int(value) or value < 0 or (high is not None and value >= high):
        bound = f" below {high}" if high is not None else ""
        raise RequestError(f"field {name!r} must be an integer >= 0{bound}, got {value:g}")
    return int(value)


def parse_post(body: bytes) -> dict:
    """The POST body as a JSON object, or a RequestError saying why not."""
    try:
        post = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise RequestError("bad JSON: body is not UTF-8") from None
    except json.JSONDecodeError as e:
        raise RequestError(f"bad JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(post, dict):
        raise RequestError(f"bad JSON: expected an object, got {type(post).__name__}")
    return post


class PensieveDecisions:
    """The decision logic of Pensieve's server for one export, per client, without HTTP (the
    HTTP handler and tests call :meth:`answer`). Thread-safe: one lock per client session."""

    def __init__(self, export_dir: str, max_clients: int = MAX_CLIENTS) -> None:
        self.export_dir = str(export_dir)
        first = load_controller(self.export_dir)  # a broken export fails now, not per POST
        if first.env != "abr" or first.variant != "pensieve":
            raise ValueError(f"{self.export_dir}: a Pensieve server needs an abr/pensieve export, "
                             f"got {first.env}/{first.variant}")
        constants = {**first.contract.get("constants", {}), **first.contract.get("action", {})}
        self.n_chunks = int(constants.get("n_chunks", 48))
        self.levels = len(constants.get("levels_kbps", ())) or 6
        self._template = first
        self._clients: OrderedDict[str, _Session] = OrderedDict()
        self._lock = threading.Lock()
        self.max_clients = max_clients

    def answer(self, body: bytes, host: str) -> str:
        """The text answer to one POST body from ``host``; RequestError if malformed."""
        post = parse_post(body)
        if "pastThroughput" in post:
            log.info("pensieve summary client=%s %s", host, json.dumps(post)[:300])
            return "0"
        key = self._client_key(post, host)
        request = _index(post, "lastRequest")
        for name in REQUIRED:  # validate everything before any state changes
            _number(post, name)
        level = _index(post, "lastquality", self.levels)
        session = self._session(key, request)
        with session.lock:
            try:
                return self._step(key, session, post, request, level)
            except MeasurementError as e:
                raise RequestError(f"client {key}: {e}") from None

    def _client_key(self, post: dict, host: str) -> str:
        if CLIENT_FIELD not in post:
            return host
        value = post[CLIENT_FIELD]
        if not isinstance(value, (str, int)) or isinstance(value, bool) or str(value) == "":
            raise RequestError(f"field {CLIENT_FIELD!r} must be a non-empty string or integer")
        return f"{host}/{value}"

    def _session(self, key: str, request: int) -> _Session:
        """The client's session; lastRequest 0 starts one (a new video or a reload)."""
        with self._lock:
            session = self._clients.get(key)
            if session is None:
                if request != 0:
                    raise RequestError(
                        f"unknown client {key}: no session here (a video starts with "
                        f"lastRequest 0, got {request})")
                session = _Session(ctrl=self._template.fork())
                self._clients[key] = session
                self._evict()
            self._clients.move_to_end(key)
        return session

    def _evict(self) -> None:
        while len(self._clients) > self.max_clients:
            key, old = self._clients.popitem(last=False)
            self._log_end(key, old, "dropped (too many clients)")

    def _step(self, key: str, s: _Session, post: dict, request: int, level: int) -> str:
        """Advance the client's session by one POST (its lock held)."""
        if request == 0 and s.last_request != 0:
            if s.active:
                self._log_end(key, s, "abandoned (player restarted)")
            self._start(s)
        if request == s.last_request and s.answer is not None:
            return s.answer  # a retried POST
        if request >= self.n_chunks:
            return self._refresh(key, s, post)
        if not s.active:
            raise RequestError(f"client {key}: no video in progress (a video starts with "
                               f"lastRequest 0, got {request})")
        if request < s.expected:
            raise RequestError(f"client {key}: lastRequest {request} out of order, expected "
                               f"{s.expected}")
        last = {"level": level, "size_bytes": _number(post, "lastChunkSize"),
                "delay_ms": _number(post, "lastChunkFinishTime")
                - _number(post, "lastChunkStartTime"), "buffer_s": _number(post, "buffer")}
        if last["size_bytes"] < 0 or last["buffer_s"] < 0:
            raise RequestError("fields 'lastChunkSize' and 'buffer' must be >= 0")
        # A download time <= 0 is a player glitch: the runtime then reuses its previous state
        # (as Pensieve's server does) while counting the chunk.
        last["delay_ms"] = max(last["delay_ms"], 0.0)
        self._skip(key, s, request, last)
        answer = str(int(s.ctrl.decide({"last": last})))
        s.chunks += 1
        s.level_sum += level
        s.rebuffer_ms = _number(post, "RebufferTime")
        s.expected, s.last_request, s.answer = request + 1, request, answer
        return answer

    def _refresh(self, key: str, s: _Session, post: dict) -> str:
        """The video's last chunk is in: the player reloads; the session ends (once)."""
        if s.active:
            s.rebuffer_ms = _number(post, "RebufferTime")
            self._log_end(key, s, "REFRESH")
        s.active, s.expected, s.last_request, s.answer = False, 0, None, None
        return "REFRESH"

    def _skip(self, key: str, s: _Session, request: int, last: dict) -> None:
        """Chunks the player reported in POSTs that failed are counted as glitches (zero
        download time: state reused), so the look-ahead stays on the player's chunk."""
        if request > s.expected:
            log.warning("pensieve client=%s: lastRequest %d after %d, %d chunk(s) counted "
                        "without measurements", key, request, s.expected - 1,
                        request - s.expected)
        for _ in range(request - s.expected):
            s.ctrl.decide({"last": {**last, "delay_ms": 0.0}})
            s.expected += 1

    def _start(self, s: _Session) -> None:
        """A new video for this client: a fresh controller session."""
        s.ctrl.reset()
        s.active, s.expected, s.last_request, s.answer = True, 0, None, None
        s.chunks, s.level_sum, s.rebuffer_ms = 0, 0, 0.0

    def _log_end(self, key: str, s: _Session, how: str) -> None:
        mean = s.level_sum / s.chunks if s.chunks else float("nan")
        log.info("pensieve session client=%s chunks=%d mean_level=%.2f rebuffer_s=%.3f end=%s",
                 key, s.chunks, mean, s.rebuffer_ms / 1000.0, how)

    def close(self) -> None:
        """Log the sessions still open (the server is stopping)."""
        with self._lock:
            for key, s in self._clients.items():
                if s.active:
                    self._log_end(key, s, "server stopped")
                    s.active = False


class _Handler(BaseHTTPRequestHandler):
    """One HTTP request; the decision logic lives in ``server.decisions``."""

    server_version = "plume-pensieve/1"
    protocol_version = "HTTP/1.1"
    # Headers and body leave in two writes; with Nagle on, the body waits for the client's
    # delayed ACK (~40 ms per decision on Linux, measured by benchmarks/bench_deploy.py).
    disable_nagle_algorithm = True

    def setup(self) -> None:
        self.timeout = self.server.request_timeout_s  # a short body fails, never hangs
        super().setup()

    def do_POST(self) -> None:
        try:
            text = self.server.decisions.answer(self._body(), self.client_address[0])
            code = 200
        except RequestError as e:
            code, text = 400, str(e)
            log.warning("pensieve 400 client=%s: %s", self.client_address[0], text)
        except Exception as e:  # a bug must cost one answer, never the server
            code, text = 500, f"internal error: {type(e).__name__}: {e}"
            log.exception("pensieve 500 client=%s", self.client_address[0])
        self._reply(code, text)

    def do_GET(self) -> None:
        self._reply(200, f"plume pensieve decision server for {self.server.decisions.export_dir}")

    def do_OPTIONS(self) -> None:
        self._reply(204, "")

    def _body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is None:
            self.close_connection = True  # whatever body follows is unframed
            raise RequestError("missing Content-Length header")
        try:
            n = int(length)
        except ValueError:
            self.close_connection = True
            raise RequestError(f"bad Content-Length {length[:20]!r}") from None
        if n < 0 or n > MAX_BODY_BYTES:
            self.close_connection = True
            raise RequestError(f"Content-Length {n} outside [0, {MAX_BODY_BYTES}]")
        try:
            body = self.rfile.read(n)
        except OSError:  # the read timed out: the body is shorter than announced
            body = b""
        if len(body) < n:
            self.close_connection = True
            raise RequestError(f"body has {len(body)} bytes, Content-Length says {n}")
        return body

    def _reply(self, code: int, text: str) -> None:
        data = (text + "\n" if code >= 400 else text).encode("utf-8")
        try:
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Access-Control-Allow-Origin", "*")  # the player's page is elsewhere
            self.send_header("Access-Control-Allow-Methods", "POST, GET, OPTIONS")
            self.send_header("Access-Control-Allow-Headers", "Content-Type")
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client went away: nothing to answer
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("pensieve http %s " + format, self.client_address[0], *args)


class PensieveHTTPServer(ThreadingHTTPServer):
    """Pensieve's decision server: a threading HTTP server holding :class:`PensieveDecisions`."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], decisions: PensieveDecisions,
                 request_timeout_s: float = 10.0) -> None:
        self.decisions = decisions
        self.request_timeout_s = request_timeout_s
        """Socket timeout of a connection: a body shorter than its Content-Length, or an idle
        keep-alive connection, is given up after this."""
        super().__init__(address, _Handler)


def make_server(export_dir: str, host: str = "127.0.0.1",
                port: int = DEFAULT_PORT) -> PensieveHTTPServer:
    """A bound (not yet serving) Pensieve decision server for ``export_dir``; port 0 picks a
    free port (``server.server_address[1]``). Serve with ``serve_forever()``."""
    return PensieveHTTPServer((host, port), PensieveDecisions(export_dir))
