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
  after chunk 0); when it reaches the contract's ``n_chunks`` (48) the answer is ``REFRESH``
  (the player reloads) and the session ends.

Sessions. Pensieve's own server answers every POST, and its player stays at its level when
an answer is not 200, so a well-formed POST is always decided on. A POST whose client has no
video in progress starts a session at its ``lastRequest``: 0 for a new video, any other chunk
when the server restarted mid-video (or the player's earlier POSTs went elsewhere). The
chunks before it are counted without measurements, so the look-ahead sizes and the
chunks-left feature are the player's chunk; this is logged once per session. A
``lastRequest`` that goes back (the player restarted or seeked) ends the session and starts
one at that chunk. A repeated ``lastRequest`` (a retried POST) gets the answer already
given; one that skips ahead (the POSTs between failed) counts the skipped chunks as download
glitches (zero download time: Pensieve's server then reuses its previous state, and so does
the runtime), so the session stays on the player's chunk. A POST carrying ``pastThroughput``
is the player's end-of-video summary: logged, answered ``0``. The next chunk's sizes come
from the contract's video table, as Pensieve's server reads them from its own files.

Sessions are kept per client: by the JSON field ``client_id`` when present (several players
behind one address), else by the client's IP address; the :data:`MAX_CLIENTS` most recently
active are kept.

Load and deadlines. The server is thread-per-connection (``ThreadingHTTPServer``) listening
with a backlog of :data:`LISTEN_BACKLOG` (1,024, clamped by the kernel to
``net.core.somaxconn``; socketserver's default of 5 lost requests of 200 players starting
together). Decisions run in one decision thread (:data:`DECISION_WORKERS`), in arrival order,
so that sessions sharing the export's policy never decide at once, and each POST has a
deadline: one not decided within :data:`DECISION_DEADLINE_S` (1 s; ``plume-serve pensieve
--decision-timeout``) of its body's arrival is answered ``503`` with a one-line reason. A
decision still queued then is dropped (the next POST counts its chunk as a glitch); one
already running finishes, and a retry of that POST gets its answer. A decision takes well
under a millisecond, so the deadline fires only under overload or a hang, and no connection
waits on one longer. A request body must arrive within ``request_timeout_s`` (10 s) in all.
Measured (``tests/test_adapters_load.py``, 2 cores shared with the players, each POST on its
own connection, no pause between chunks): 200 players x 49 POSTs, 9,800 requests, none lost,
p50 275 ms, p99 420 ms, all of it queueing (713 requests/s); at backlog 5, 402 lost.

Errors. Anything that is not a decision POST gets ``400`` with a one-line reason, and the
server goes on: a body that is not UTF-8 JSON, numbers beyond float range (a 400-digit
integer) or beyond Python's integer-parsing limit (4,300 digits), nesting deeper than the
parser's recursion limit, a body that is not an object, a missing or non-numeric field, a
number beyond +-:data:`MAX_FIELD`, a level out of range, a bad or missing
``Content-Length``, a body shorter than it says. (A download time under
:data:`MIN_DELAY_MS` is a glitch, like zero.) Malformed HTTP is answered by
Python's HTTP server (400, 414, 431, 501). An unexpected failure costs its request a ``500``
and one log line, never the server.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from plume.deploy.adapters.text import show
from plume.deploy.runtime import MeasurementError, load_controller

__all__ = [
    "CLIENT_FIELD", "DECISION_DEADLINE_S", "DEFAULT_PORT", "LISTEN_BACKLOG", "DecisionTimeout",
    "PensieveDecisions", "PensieveHTTPServer", "RequestError", "make_server", "parse_post",
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
LISTEN_BACKLOG = 1024
"""``listen()`` backlog (socketserver's ``request_queue_size``, default 5). 200 players x 49
POSTs: issue 34 lost 6,833 of 9,800 requests at 5; the load test's players lost 402 at 5
(connects timed out after 10 s of SYN retries, p99 1.45 s) and none at 1,024 (p99 0.42 s).
Linux clamps it to ``net.core.somaxconn`` (4096 since kernel 5.4, 128 before)."""
DECISION_DEADLINE_S = 1.0
"""Seconds from a POST's body to its answer before it is answered 503: a decision takes
< 1 ms (README, p99 0.2 ms) and a Pensieve chunk lasts 4 s, so 1 s means overload or a hang."""
DECISION_WORKERS = 1
"""Threads deciding. One: the sessions of an export share its policy, and a classic rule keeps
scratch workspaces (two threads deciding at once gave wrong levels under load); decisions hold
the GIL but for onnxruntime's run anyway. They are taken in arrival order."""
MAX_FIELD = 1e15
"""Largest magnitude of a number field: beyond any byte count, buffer or millisecond time a
player reports (``Date.now()`` is ~1.7e12 ms), and small enough that the float32 observation
stays finite (a 1e300-byte chunk made it inf)."""
MIN_DELAY_MS = 1e-3
"""A download time below this (the player's times are whole milliseconds) is a glitch like
zero: a chunk over 1e-300 ms would make the throughput feature inf."""
REQUIRED = ("lastquality", "buffer", "RebufferTime", "lastChunkStartTime",
            "lastChunkFinishTime", "lastChunkSize", "lastRequest")
"""Fields every decision POST must carry (those Pensieve's server reads)."""


class RequestError(ValueError):
    """A malformed request: the one-line reason is the 400 answer."""


class DecisionTimeout(TimeoutError):
    """No decision within the deadline: the one-line reason is the 503 answer."""


@dataclass
class _Session:
    """One player's decision state: its controller and where its video stands."""

    ctrl: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    expected: int = 0
    answer: str | None = None
    last_request: int | None = None
    first: int = 0
    chunks: int = 0
    level_sum: int = 0
    rebuffer_ms: float = 0.0
    active: bool = False


def _number(post: dict, name: str) -> float:
    """A finite JSON number within :data:`MAX_FIELD` (booleans refused: JSON ``true`` is not
    a size)."""
    if name not in post:
        raise RequestError(f"missing field {name!r}")
    value = post[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"field {name!r} must be a number, got {show(value)}")
    if isinstance(value, int) and abs(value) > sys.float_info.max:  # exact, never converted
        raise RequestError(f"field {name!r} must be finite, got an integer of "
                           f"{len(str(abs(value)))} digits")
    if not math.isfinite(value):
        raise RequestError(f"field {name!r} must be finite, got {value}")
    if abs(value) > MAX_FIELD:
        raise RequestError(f"field {name!r} must be within +-{MAX_FIELD:g}, got {value:g}")
    return float(value)


def _index(post: dict, name: str, high: int | None = None) -> int:
    """A non-negative integral number (below ``high`` when given)."""
    value = _number(post, name)
    if value != int(value) or value < 0 or (high is not None and value >= high):
        bound = f" below {high}" if high is not None else ""
        raise RequestError(f"field {name!r} must be an integer >= 0{bound}, got {value:g}")
    return int(value)


def parse_post(body: bytes) -> dict:
    """The POST body as a JSON object, or a RequestError saying why not (for any bytes)."""
    try:
        post = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise RequestError("bad JSON: body is not UTF-8") from None
    except json.JSONDecodeError as e:
        raise RequestError(f"bad JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise RequestError("bad JSON: nested too deeply") from None
    except ValueError as e:  # e.g. an integer beyond Python's digit limit (4300)
        raise RequestError(f"bad JSON: {str(e).splitlines()[0][:120]}") from None
    if not isinstance(post, dict):
        raise RequestError(f"bad JSON: expected an object, got {type(post).__name__}")
    return post


class PensieveDecisions:
    """The decision logic of Pensieve's server for one export, per client, without HTTP (the
    HTTP server and tests call :meth:`answer`). Thread-safe: one lock per client session."""

    def __init__(self, export_dir: str, max_clients: int = MAX_CLIENTS) -> None:
        self.export_dir = str(export_dir)
        first = load_controller(self.export_dir)  # a broken export fails now, not per POST
        if "pensieve" not in first.protocols:
            raise ValueError(f"{self.export_dir}: a Pensieve server needs an export whose session "
                             f"speaks Pensieve's protocol (Deployment.protocols), got "
                             f"{first.env}/{first.variant}")
        constants = {**first.contract.get("constants", {}), **first.contract.get("action", {})}
        self.n_chunks = int(constants.get("n_chunks", 48))
        self.levels = len(constants.get("levels_kbps", ())) or 6
        self._template = first
        self._clients: OrderedDict[str, _Session] = OrderedDict()
        self._lock = threading.Lock()
        self.max_clients = max_clients

    def answer(self, body: bytes, host: str, deadline: float | None = None) -> str:
        """The text answer to one POST body from ``host``; RequestError if malformed,
        DecisionTimeout if the client's session is not free by ``deadline`` (monotonic s)."""
        post = parse_post(body)
        if "pastThroughput" in post:
            log.info("pensieve summary client=%s %s", host, show(post))
            return "0"
        key = self._client_key(post, host)
        request = _index(post, "lastRequest")
        for name in REQUIRED:  # validate everything before any state changes
            _number(post, name)
        level = _index(post, "lastquality", self.levels)
        last = {"level": level, "size_bytes": _number(post, "lastChunkSize"),
                "delay_ms": _number(post, "lastChunkFinishTime")
                - _number(post, "lastChunkStartTime"), "buffer_s": _number(post, "buffer")}
        if last["size_bytes"] < 0 or last["buffer_s"] < 0:
            raise RequestError("fields 'lastChunkSize' and 'buffer' must be >= 0")
        # A download time <= 0 is a player glitch: the runtime then reuses its previous state
        # (as Pensieve's server does) while counting the chunk.
        if last["delay_ms"] < MIN_DELAY_MS:
            last["delay_ms"] = 0.0
        session = self._session(key)
        wait = -1 if deadline is None else max(deadline - time.monotonic(), 0.0)
        if not session.lock.acquire(timeout=wait):
            raise DecisionTimeout(f"no decision by the deadline: client {key}'s previous POST "
                                  "is still being decided")
        try:
            return self._step(key, session, post, request, last)
        except MeasurementError as e:
            raise RequestError(f"client {key}: {e}") from None
        finally:
            session.lock.release()

    def _client_key(self, post: dict, host: str) -> str:
        if CLIENT_FIELD not in post:
            return host
        value = post[CLIENT_FIELD]
        if (not isinstance(value, (str, int)) or isinstance(value, bool) or value == ""
                or len(str(value)) > 200):
            raise RequestError(f"field {CLIENT_FIELD!r} must be a non-empty string or integer "
                               "of at most 200 characters")
        return f"{host}/{value}"

    def _session(self, key: str) -> _Session:
        """The client's session, created (inactive) on its first POST."""
        with self._lock:
            session = self._clients.get(key)
            if session is None:
                session = _Session(ctrl=self._template.fork())
                self._clients[key] = session
                self._evict()
            self._clients.move_to_end(key)
        return session

    def _evict(self) -> None:
        while len(self._clients) > self.max_clients:
            key, old = self._clients.popitem(last=False)
            if old.active:
                self._log_end(key, old, "dropped (too many clients)")

    def _step(self, key: str, s: _Session, post: dict, request: int, last: dict) -> str:
        """Advance the client's session by one POST (its lock held)."""
        if request == s.last_request and s.answer is not None:
            return s.answer  # a retried POST
        if request >= self.n_chunks:
            return self._refresh(key, s, post)
        if not s.active or request < s.expected:
            self._start(key, s, request, last)
        self._skip(key, s, request, last)
        answer = str(int(s.ctrl.decide({"last": last})))
        s.chunks += 1
        s.level_sum += last["level"]
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
        self._count(s, request, last)

    @staticmethod
    def _count(s: _Session, request: int, last: dict) -> None:
        """Count the chunks before ``request`` the session has not seen, without measurements."""
        for _ in range(request - s.expected):
            s.ctrl.decide({"last": {**last, "delay_ms": 0.0}})
            s.expected += 1

    def _start(self, key: str, s: _Session, request: int, last: dict) -> None:
        """A new session at chunk ``request``: a fresh controller session whose chunk count
        starts there (logged once when that is not chunk 0)."""
        if s.active:
            self._log_end(key, s, f"abandoned (player restarted at lastRequest {request})")
        s.ctrl.reset()
        s.active, s.expected, s.last_request, s.answer = True, 0, None, None
        s.first, s.chunks, s.level_sum, s.rebuffer_ms = request, 0, 0, 0.0
        if request > 0:
            log.warning("pensieve client=%s: a session starts at lastRequest %d (none was in "
                        "progress here: the server restarted mid-video?); chunks 0-%d counted "
                        "without measurements", key, request, request - 1)
            self._count(s, request, last)

    def _log_end(self, key: str, s: _Session, how: str) -> None:
        mean = s.level_sum / s.chunks if s.chunks else float("nan")
        log.info("pensieve session client=%s chunks=%d mean_level=%.2f rebuffer_s=%.3f "
                 "first_chunk=%d end=%s", key, s.chunks, mean, s.rebuffer_ms / 1000.0, s.first,
                 how)

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
        self.timeout = self.server.request_timeout_s  # an idle connection is given up
        super().setup()

    def do_POST(self) -> None:
        host = self.client_address[0]
        try:
            text, code = self.server.decide(self._body(), host), 200
        except RequestError as e:
            code, text = 400, str(e)
            log.warning("pensieve 400 client=%s: %s", host, text)
        except DecisionTimeout as e:
            code, text = 503, str(e)
            log.warning("pensieve 503 client=%s: %s", host, text)
        except Exception as e:  # a bug must cost one answer, never the server
            code, text = 500, f"internal error: {type(e).__name__}: {show(str(e))}"
            log.error("pensieve 500 client=%s: %s", host, text)
            log.debug("pensieve 500 traceback", exc_info=True)
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
            raise RequestError(f"bad Content-Length {show(length[:20])}") from None
        if n < 0 or n > MAX_BODY_BYTES:
            self.close_connection = True
            raise RequestError(f"Content-Length {n} outside [0, {MAX_BODY_BYTES}]")
        body = self._read(n)
        if len(body) < n:
            self.close_connection = True
            raise RequestError(f"body has {len(body)} bytes, Content-Length says {n}")
        return body

    def _read(self, n: int) -> bytes:
        """Up to ``n`` body bytes arriving within ``request_timeout_s`` in all (a body sent a
        byte at a time cannot hold the connection longer)."""
        deadline = time.monotonic() + self.server.request_timeout_s
        parts, got = [], 0
        try:
            while got < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.connection.settimeout(left)
                part = self.rfile.read1(n - got)
                if not part:
                    break
                parts.append(part)
                got += len(part)
        except OSError:  # timed out or reset: the body is shorter than announced
            pass
        finally:
            try:
                self.connection.settimeout(self.server.request_timeout_s)
            except OSError:
                pass
        return b"".join(parts)

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
    """Pensieve's decision server: a thread per connection (reading, answering), decisions in
    :data:`DECISION_WORKERS` decision thread(s) under a deadline."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], decisions: PensieveDecisions,
                 request_timeout_s: float = 10.0,
                 decision_timeout_s: float = DECISION_DEADLINE_S,
                 workers: int = DECISION_WORKERS) -> None:
        if not (math.isfinite(decision_timeout_s) and decision_timeout_s > 0):
            raise ValueError(f"decision timeout must be a finite number of seconds > 0, got "
                             f"{decision_timeout_s}")
        self.decisions = decisions
        self.request_timeout_s = request_timeout_s
        """Socket timeout of a connection and the time a whole request body may take: a body
        shorter than its Content-Length, or an idle keep-alive connection, is given up."""
        self.decision_timeout_s = decision_timeout_s
        self.errors = 0
        """Connections that failed outside a request's own handling (logged, one line each)."""
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="pensieve-decide")
        super().__init__(address, _Handler)

    def decide(self, body: bytes, host: str) -> str:
        """The answer to one POST within the deadline, else DecisionTimeout (a decision still
        queued is then dropped; one already running finishes for the session's sake)."""
        deadline = time.monotonic() + self.decision_timeout_s
        future: Future = self._pool.submit(self.decisions.answer, body, host, deadline)
        try:
            return future.result(timeout=self.decision_timeout_s)
        except DecisionTimeout:
            raise
        except TimeoutError:
            if future.cancel() or not future.done():
                raise DecisionTimeout(f"no decision within {self.decision_timeout_s:g} s "
                                      "(the server is overloaded)") from None
            return future.result()  # it finished as the wait ended

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line per failed connection instead of socketserver's traceback on stderr."""
        self.errors += 1
        kind, err = sys.exc_info()[:2]
        log.warning("pensieve connection %s failed: %s: %s", client_address,
                    getattr(kind, "__name__", kind), show(str(err)))
        log.debug("pensieve connection traceback", exc_info=True)  # noqa: LOG014 (in its except)

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


def make_server(export_dir: str, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                decision_timeout_s: float = DECISION_DEADLINE_S) -> PensieveHTTPServer:
    """A bound (not yet serving) Pensieve decision server for ``export_dir``; port 0 picks a
    free port (``server.server_address[1]``). Serve with ``serve_forever()``."""
    return PensieveHTTPServer((host, port), PensieveDecisions(export_dir),
                              decision_timeout_s=decision_timeout_s)
