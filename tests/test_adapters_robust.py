"""The adapters never die on input: Pensieve's POST body parser and its whole HTTP request path,
and Puffer's frame reader, fuzzed with arbitrary bytes and hostile JSON (numbers beyond float
range and beyond Python's integer-parsing limit, nesting deeper than the parser's recursion
limit); a Pensieve session that starts mid-video; the per-request decision deadline.
(PCC's ``give_sample`` arguments are fuzzed in ``test_pcc_driver.py``, beside its export.)

Servers bind 127.0.0.1 (port 0) or a socket pair; every wait has a timeout. Hypothesis runs a
modest number of examples without deadlines (2 shared cores).
"""

from __future__ import annotations

import json
import logging
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plume.deploy.adapters import pensieve
from plume.deploy.export import export_controller
from plume.deploy.replay import simulated_sessions
from plume.deploy.runtime import load_controller
from tests.test_deploy_adapters import PufferSide, _controller_thread, _player_post

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 20.0
FUZZ = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
LEVELS = {str(level) for level in range(6)}
HUGE = "1" * 400
"""A 400-digit JSON integer: parses, but beyond float range (``float()`` overflows)."""
HUGER = "1" * 5000
"""Beyond Python's integer-parsing limit (4,300 digits): ``json.loads`` raises ValueError."""
DEEP = "[" * 30000 + "]" * 30000
"""Nesting beyond the parser's recursion limit: ``json.loads`` raises RecursionError."""


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("robust")
    return {variant: export_controller("abr", {"variant": variant}, "robust_mpc",
                                       root / variant) for variant in ("pensieve", "gelato")}


@pytest.fixture(scope="module")
def server(exports):
    """An in-process Pensieve server (short timeouts, so a fuzzed partial request ends soon)."""
    srv = pensieve.PensieveHTTPServer(("127.0.0.1", 0),
                                      pensieve.PensieveDecisions(str(exports["pensieve"])),
                                      request_timeout_s=0.5)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(TIMEOUT_S)


@pytest.fixture(scope="module")
def decisions(exports):
    """One decision object across fuzz examples: the state they leave is any client's state."""
    return pensieve.PensieveDecisions(str(exports["pensieve"]))


@pytest.fixture(scope="module")
def gelato_steps(exports):
    return simulated_sessions(exports["gelato"], n=1)[0].steps[:4]


@pytest.fixture(scope="module")
def pensieve_lasts(exports):
    """The measurements of one simulated Pensieve session, chunk 0 first."""
    return [step.measurement["last"] for step in simulated_sessions(exports["pensieve"],
                                                                    n=1)[0].steps[1:]]


def _http(port: int, data: bytes) -> bytes:
    """Raw bytes to the server, write side then closed; everything it answers (a server may
    reset a connection it closed with bytes unread: what arrived before is kept)."""
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except OSError:
            pass
    return out


def _post(port: int, body: bytes) -> tuple[int, str]:
    request = (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    head, _, text = _http(port, request).partition(b"\r\n\r\n")
    return int(head.split()[1]), text.decode()


def _first_answer(exports, last: dict) -> str:
    ref = load_controller(exports["pensieve"])
    ref.reset()
    return str(ref.decide({"last": last}))


# ------------------------------------------------------------------ Pensieve: the body parser

@FUZZ
@given(st.binary(max_size=512))
def test_pensieve_parse_post_takes_any_bytes(body):
    """Any bytes: a JSON object, or RequestError in one line; nothing else escapes."""
    try:
        post = pensieve.parse_post(body)
    except pensieve.RequestError as e:
        assert str(e).startswith("bad JSON") and "\n" not in str(e)
    else:
        assert isinstance(post, dict)


def test_pensieve_parse_post_refuses_huge_numbers_and_deep_nesting():
    cases = {HUGER: "bad JSON: Exceeds the limit (4300 digits)", DEEP: "bad JSON: nested too "
             "deeply", '{"a": ' + DEEP + "}": "nested too deeply", "\xff": "not UTF-8"}
    for text, reason in cases.items():
        body = text.encode("latin-1" if text == "\xff" else "utf-8")
        with pytest.raises(pensieve.RequestError, match=re.escape(reason)) as err:
            pensieve.parse_post(body)
        assert "\n" not in str(err.value)


_JSON = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers()
    | st.integers(min_value=10**300, max_value=10**400) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=3),
    max_leaves=8)
"""JSON values, NaN and infinities included, integers beyond float range among them."""


@FUZZ
@given(st.sampled_from(pensieve.REQUIRED + ("client_id", "pastThroughput", "extra")), _JSON,
       st.integers(0, 60))
def test_pensieve_decisions_answer_any_json_value_in_any_field(decisions, pensieve_lasts, name,
                                                              value, request):
    """A good POST with one field replaced by any JSON value: a level, REFRESH or the
    summary's 0, or RequestError in one line (never another exception)."""
    post = {**_player_post(request, pensieve_lasts[min(request, 46)]), name: value}
    try:
        text = decisions.answer(json.dumps(post).encode(), "fuzz")
    except pensieve.RequestError as e:
        assert "\n" not in str(e) and len(str(e)) < 300
    else:
        assert text in LEVELS | {"REFRESH", "0"}


# -------------------------------------------------------------- Pensieve: the HTTP request path

_HEADER = st.tuples(st.sampled_from([b"Content-Length", b"Host", b"Connection", b"Expect",
                                     b"Transfer-Encoding", b"X"]) | st.binary(max_size=12),
                    st.sampled_from([b"5", b"-1", b"9" * 5000, b"1_0", b" 7 ", b"close",
                                     b"100-continue", b"chunked"]) | st.binary(max_size=20))
_REQUEST = st.builds(
    lambda method, path, version, headers, body: b"%s %s %s\r\n%s\r\n%s" % (
        method, path, version, b"".join(b"%s: %s\r\n" % h for h in headers), body),
    st.sampled_from([b"POST", b"GET", b"OPTIONS", b"PUT", b"HEAD"]) | st.binary(max_size=6),
    st.sampled_from([b"/", b"*", b"/" * 70000]) | st.binary(max_size=10),
    st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1.1", b""]),
    st.lists(_HEADER, max_size=4),
    st.binary(max_size=64) | st.sampled_from([HUGE.encode(), b'{"buffer": ' + HUGE.encode()
                                              + b"}"]))


@FUZZ
@given(st.one_of(st.binary(max_size=400), _REQUEST))
def test_pensieve_http_path_takes_any_bytes(server, exports, pensieve_lasts, caplog, data):
    """Any bytes on a connection: an HTTP answer other than 500 (or none), no failed
    connection, and the server answers the next player exactly."""
    port = server.server_address[1]
    errors = server.errors
    with caplog.at_level(logging.WARNING, logger="plume.deploy.pensieve"):
        answer = _http(port, data)
    assert b"HTTP/1.1 500" not in answer and b"HTTP/1.0 500" not in answer, answer[:200]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert server.errors == errors
    post = _player_post(0, pensieve_lasts[0], client=f"next-{time.monotonic_ns()}")
    assert _post(port, json.dumps(post).encode()) == (200, _first_answer(exports,
                                                                        pensieve_lasts[0]))


def test_pensieve_huge_numbers_and_deep_nesting_get_400_and_the_server_goes_on(
        server, exports, pensieve_lasts):
    port = server.server_address[1]
    good = json.dumps(_player_post(0, pensieve_lasts[0], client="huge")).encode()
    cases = [(good.replace(b'"lastChunkSize": ', b'"lastChunkSize": ' + HUGE.encode() + b", "
                                                  b'"was": '),
              "field 'lastChunkSize' must be finite, got an integer of 400 digits"),
             (good.replace(b'"buffer": ', b'"buffer": ' + HUGER.encode() + b', "was": '),
              "bad JSON: Exceeds the limit (4300 digits)"),
             (DEEP.encode(), "bad JSON: nested too deeply"),
             (b'{"lastquality": ' + DEEP.encode() + b"}", "bad JSON: nested too deeply")]
    for body, reason in cases:
        status, text = _post(port, body)
        assert status == 400 and text.startswith(reason) and text.count("\n") == 1, text
    assert _post(port, good) == (200, _first_answer(exports, pensieve_lasts[0]))
    assert server.errors == 0


# ----------------------------------------------------------- Pensieve: a session at any chunk

def test_pensieve_session_starting_at_lastrequest_17_plays_the_players_chunks(
        exports, pensieve_lasts, caplog):
    """The server restarted mid-video: the player's first POST here is lastRequest 17. The
    session starts at chunk 17 (chunks 0-16 counted without measurements, logged once): its
    look-ahead is chunk 18's sizes, its chunks-left feature the player's, and every answer to
    the end of the video is the runtime's for the same chunks."""
    decisions = pensieve.PensieveDecisions(str(exports["pensieve"]))
    ref = load_controller(exports["pensieve"])
    ref.reset()
    for _ in range(17):
        ref.decide({"last": {**pensieve_lasts[17], "delay_ms": 0.0}})
    with caplog.at_level(logging.INFO, logger="plume.deploy.pensieve"):
        for k in range(17, 47):
            body = json.dumps(_player_post(k, pensieve_lasts[k])).encode()
            assert decisions.answer(body, "10.0.0.17") == str(ref.decide(
                {"last": pensieve_lasts[k]})), k
            if k == 17:  # the server's session and the reference built the same state
                served = decisions._clients["10.0.0.17"].ctrl.observation
                np.testing.assert_array_equal(served, ref.observation)
                obs = ref.observation.reshape(6, 8)
                sizes = ref.session.sizes[18] / 1e6  # the contract's video, chunk 18
                np.testing.assert_array_equal(obs[4, :6], sizes.astype(np.float32))
                assert obs[5, 7] == np.float32((48 - 18) / 48)
        refresh = json.dumps(_player_post(48, pensieve_lasts[46])).encode()
        assert decisions.answer(refresh, "10.0.0.17") == "REFRESH"
    starts = [r.getMessage() for r in caplog.records if "a session starts at" in r.getMessage()]
    assert starts == [("pensieve client=10.0.0.17: a session starts at lastRequest 17 (none "
                       "was in progress here: the server restarted mid-video?); chunks 0-16 "
                       "counted without measurements")]
    assert "chunks=30 mean_level" in caplog.text and "first_chunk=17 end=REFRESH" in caplog.text


# ------------------------------------------------------------------ Pensieve: the deadline

def test_pensieve_decision_deadline_answers_503_and_the_session_goes_on(exports,
                                                                        pensieve_lasts):
    """A POST whose session is still busy past the deadline gets 503 in about the deadline,
    not a connection held open; the session's next POST is decided."""
    srv = pensieve.make_server(str(exports["pensieve"]), "127.0.0.1", 0, decision_timeout_s=0.3)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        port = srv.server_address[1]
        first = json.dumps(_player_post(0, pensieve_lasts[0])).encode()
        assert _post(port, first) == (200, _first_answer(exports, pensieve_lasts[0]))
        lock = srv.decisions._clients["127.0.0.1"].lock  # a decision of this session running
        with lock:
            began = time.monotonic()
            status, text = _post(port, json.dumps(_player_post(1, pensieve_lasts[1])).encode())
            waited = time.monotonic() - began
        assert status == 503 and text.startswith("no decision") and text.count("\n") == 1
        assert 0.25 < waited < 5.0
        ref = load_controller(exports["pensieve"])  # POST 1 never decided: chunk 1 counted
        ref.reset()                                   # as a glitch when POST 2 comes
        for last in (pensieve_lasts[0], {**pensieve_lasts[2], "delay_ms": 0.0}):
            ref.decide({"last": last})
        third = json.dumps(_player_post(2, pensieve_lasts[2])).encode()
        assert _post(port, third) == (200, str(ref.decide({"last": pensieve_lasts[2]})))
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(TIMEOUT_S)


def test_plume_serve_pensieve_refuses_a_bad_decision_timeout(exports):
    done = subprocess.run([sys.executable, "-m", "plume.deploy.serve", "pensieve",
                           str(exports["pensieve"]), "--port", "0", "--decision-timeout", "0"],
                          check=False, capture_output=True, text=True, timeout=TIMEOUT_S,
                          cwd=ROOT)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--decision-timeout must be a finite number of seconds > 0, got 0" in done.stderr


# ------------------------------------------------------------------ Puffer: the frame reader

def _frame(body: bytes) -> bytes:
    return struct.pack("!H", len(body)) + body


def _answers(sock: socket.socket) -> list[dict]:
    """Every framed answer until the controller closes its end."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    out = []
    while data:
        (n,) = struct.unpack("!H", data[:2])
        out.append(json.loads(data[2:2 + n]))
        data = data[2 + n:]
    return out


def _serve_pair(export, stream: bytes) -> tuple[list[dict], dict]:
    """Puffer's side of a socket pair writes ``stream`` and closes its write side; the real
    controller answers on the other end until the stream ends."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.settimeout(TIMEOUT_S)
    result: dict = {}
    thread = _controller_thread(export, "pair", result, sock=theirs, frame_timeout_s=0.2)
    try:
        ours.sendall(stream)
        ours.shutdown(socket.SHUT_WR)
        answers = _answers(ours)
    finally:
        ours.close()
        thread.join(TIMEOUT_S)
    assert not thread.is_alive() and result, "the controller did not end"
    return answers, result


def _hostile(good: dict) -> st.SearchStrategy[bytes]:
    """Frame bodies that can never be decided on: arbitrary bytes, huge numbers, deep
    nesting, the request with a field made hostile."""
    text = json.dumps(good)
    return st.one_of(
        st.binary(max_size=200),
        st.sampled_from([HUGE, HUGER, DEEP, "NaN", "[]", "{}", '{"a": ' + DEEP + "}"])
        .map(str.encode),
        st.sampled_from(["buffer", "cum_rebuf", "past_chunk", "sizes", "ssims"]).flatmap(
            lambda key: st.sampled_from([HUGE, HUGER, "[" * 3000 + "]" * 3000, '"x"', "NaN",
                                         "-1e999"]).map(
                lambda v, key=key: text.replace(f'"{key}": ', f'"{key}": {v}, "was": ', 1)
                .encode())))


@FUZZ
@given(st.data())
def test_puffer_reader_takes_random_frames_and_bytes(exports, gelato_steps, data):
    """Valid requests in order, hostile frames between them, maybe a tail of random bytes:
    one answer per complete frame (the error frame for each hostile one), the valid ones the
    runtime's decisions exactly, and the session ends by itself."""
    steps, side = gelato_steps, PufferSide()  # its request builder, in Puffer's units
    try:
        goods = [json.dumps(side.request(step.measurement)).encode() for step in steps]
    finally:
        side.close()
    frames, kinds = [], []
    for good in goods:
        for bad in data.draw(st.lists(_hostile(json.loads(good)), max_size=2)):
            frames.append(_frame(bad))
            kinds.append("bad")
        frames.append(_frame(good))
        kinds.append("good")
    tail = data.draw(st.binary(max_size=40))
    answers, result = _serve_pair(exports["gelato"], b"".join(frames) + tail)
    expected = _tail_answers(tail)
    assert len(answers) == len(kinds) + expected
    ref = load_controller(exports["gelato"])
    decisions = iter(int(ref.decide(step.measurement)) for step in steps)
    for kind, answer in zip(kinds, answers):
        if kind == "good":
            assert answer == {"action": next(decisions)}
        else:
            assert answer["action"] == 0 and "\n" not in answer["error"], answer
    assert result["decisions"] == len(goods) and result["end"] in {"end of stream",
                                                                    "stream out of sync"}


def _tail_answers(tail: bytes) -> int:
    """Answers due to random bytes after the last frame, read as Puffer's framing: one per
    complete frame (zero-length ones too), one for an incomplete last frame."""
    count = 0
    while len(tail) >= 2:
        (n,) = struct.unpack("!H", tail[:2])
        count += 1
        if len(tail) - 2 < n:
            return count
        tail = tail[2 + n:]
    return count + (1 if tail else 0)


def test_puffer_process_survives_a_hostile_stream(exports):
    """``plume-serve puffer`` (Puffer's argv layout) fed random bytes, huge numbers and deep
    nesting between valid requests: an error frame for each, the valid ones decided, exit 0,
    no traceback."""
    steps = simulated_sessions(exports["gelato"], n=1)[0].steps[:3]
    rng = np.random.default_rng(34)
    hostile = [rng.bytes(300), HUGE.encode(), HUGER.encode(), DEEP.encode(), b"",
               b'{"past_chunk": ' + DEEP.encode() + b"}", rng.bytes(65535)]
    side = PufferSide()
    proc = subprocess.Popen([sys.executable, "-m", "plume.deploy.serve", "puffer", "gelato",
                             str(exports["gelato"]), side.path], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        side.accept()
        ref = load_controller(exports["gelato"])
        for step in steps:
            for bad in hostile:
                side.send(bad) if bad else side.send_raw(b"\x00\x00")
                answer = side.answer()
                assert answer["action"] == 0 and "error" in answer, answer
            side.send(side.request(step.measurement))
            assert side.answer() == {"action": int(ref.decide(step.measurement))}
        side.conn.close()
        assert proc.wait(TIMEOUT_S) == 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=TIMEOUT_S)
        side.close()
    assert proc.returncode == 0 and "Traceback" not in err, err
    totals = f"'decisions': 3, 'errors': {3 * len(hostile)}, 'sessions': 1, 'end': 'end of stream'"
    assert totals in err, err
