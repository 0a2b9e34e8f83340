"""The protocol adapters (plume.deploy.adapters, plume-serve), each driven by a client written
from the protocols' descriptions (Pensieve's rl_server fields, Puffer's python_ipc framing,
PCC-Uspace's helper calls, as the README and the adapters' docstrings state them), not from
the adapters' code:

* replayed simulated sessions get, through the real transport (HTTP on 127.0.0.1, a Unix
  socket, PCC's function calls), exactly the decisions the policy made in simulation;
* malformed requests get a one-line error and the server answers a good request afterwards;
* the command starts, answers and stops on a signal.

Every server binds 127.0.0.1 (port 0) or a Unix path in a fresh temporary directory, every
wait has a timeout, every server is shut down in ``finally``.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import math
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from plume.deploy.adapters import pcc, pensieve, puffer
from plume.deploy.export import export_controller
from plume.deploy.replay import simulated_sessions
from plume.deploy.runtime import MeasurementError, load_controller

TIMEOUT_S = 20.0
"""Bound on every wait for a server (a subprocess imports numpy and the env registry)."""
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Rule exports (no training): robust MPC reads the whole observation (throughput
    history, look-ahead sizes and SSIMs, buffer); BBA varies its level most on these traces."""
    root = tmp_path_factory.mktemp("exports")
    return {f"{variant}/{rule}": export_controller("abr", {"variant": variant}, rule,
                                                   root / f"{variant}-{rule}")
            for variant in ("pensieve", "gelato") for rule in ("robust_mpc", "bba")}


@pytest.fixture(scope="module")
def cc_export(tmp_path_factory):
    return make_cc_export(tmp_path_factory.mktemp("exports") / "cc")


def make_cc_export(out: Path) -> Path:
    """A learned-policy export (ONNX) for CC, whose classic rules read the simulator's state
    and cannot be served: a hand-written actor that raises the rate while the newest latency
    ratio is low and lowers it when latency or the send ratio grows, so the rate moves."""
    torch = pytest.importorskip("torch")
    from plume.agents.base import GreedyPolicy
    from plume.deploy.export import contract_for, export_policy
    from plume.envs.registry import get_env

    class Probe(torch.nn.Module):
        def forward(self, obs):
            newest = obs[:, -3:]  # [latency inflation, latency ratio, send ratio]
            return (4.0 * (1.1 - newest[:, 1:2]) - 2.0 * (newest[:, 2:3] - 1.0)
                    - 20.0 * newest[:, 0:1])

    spec = get_env("cc")
    params = spec.params()
    rows = np.random.default_rng(0).uniform([-0.1, 1.0, 0.5] * params.history,
                                            [0.1, 2.0, 2.0] * params.history,
                                            (64, 3 * params.history)).astype(np.float32)
    contract = contract_for(spec, params, {"algorithm": "hand-written probe"}, {"test": True})
    rule = {"kind": "clip", "low": [-1e12], "high": [1e12]}
    export_policy(GreedyPolicy(Probe(), "mean", rule), rows, contract, out)
    return out


# ---------------------------------------------------------------- Pensieve (HTTP, port 8333)

def _serve(export) -> tuple[pensieve.PensieveHTTPServer, threading.Thread]:
    server = pensieve.make_server(str(export), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    return server, thread


def _stop(server, thread) -> None:
    server.shutdown()
    server.server_close()
    thread.join(TIMEOUT_S)


def _post(port: int, body, headers: dict | None = None) -> tuple[int, str]:
    """One POST as the dash.js player sends it (JSON text, no content type)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    try:
        conn.request("POST", "/", body=data, headers=headers or {})
        reply = conn.getresponse()
        return reply.status, reply.read().decode()
    finally:
        conn.close()


def _player_post(request: int, last: dict, rebuffer_ms: float = 0.0, client=None) -> dict:
    """The player's POST after downloading chunk ``request``. The start time is 0 so that
    finish - start is the recorded download time to the bit; the ignored fields Pensieve's
    player also sends are included."""
    post = {"nextChunkSize": 0, "Type": "RL", "lastquality": last["level"],
            "buffer": last["buffer_s"], "bufferAdjusted": last["buffer_s"] - 4.55,
            "bandwidthEst": 0, "lastRequest": request, "RebufferTime": rebuffer_ms,
            "lastChunkFinishTime": last["delay_ms"], "lastChunkStartTime": 0,
            "lastChunkSize": last["size_bytes"]}
    if client is not None:
        post["client_id"] = client
    return post


def _replay_pensieve(port: int, session, n_chunks: int, client=None) -> None:
    """The player's view of a simulated session: it downloads chunk 0 itself, then POSTs
    after chunk k (lastRequest k) and plays the answer; the simulator's step k + 1 decided
    chunk k + 1 from chunk k's measurement. Ends with the last chunk and REFRESH."""
    steps = session.steps
    assert steps[0].measurement["last"] is None and len(steps) == n_chunks
    for k, step in enumerate(steps[1:]):
        status, text = _post(port, _player_post(k, step.measurement["last"], client=client))
        assert (status, text) == (200, str(step.action)), f"{session.trace_id} chunk {k}"
    last = {**steps[-1].measurement["last"], "level": int(steps[-1].action)}
    status, text = _post(port, _player_post(n_chunks - 1, last, client=client))
    assert status == 200 and text in {str(i) for i in range(6)}
    assert _post(port, _player_post(n_chunks, last, client=client)) == (200, "REFRESH")


@pytest.mark.parametrize("rule", ["robust_mpc", "bba"])
def test_pensieve_replays_simulated_sessions_over_http(exports, rule):
    export = exports[f"pensieve/{rule}"]
    sessions = simulated_sessions(export, n=2)
    n_chunks = load_controller(export).contract["constants"]["n_chunks"]
    server, thread = _serve(export)
    try:
        port = server.server_address[1]
        _replay_pensieve(port, sessions[0], n_chunks)
        _replay_pensieve(port, sessions[1], n_chunks)  # the same player, after REFRESH
        # Two players behind one address, interleaved: each keeps its own session.
        a, b = sessions[0].steps, sessions[1].steps
        for k in range(1, n_chunks):
            for name, steps in (("a", a), ("b", b)):
                post = _player_post(k - 1, steps[k].measurement["last"], client=name)
                assert _post(port, post) == (200, str(steps[k].action)), (name, k)
    finally:
        _stop(server, thread)


def test_pensieve_protocol_edges(exports):
    """Summary POST, retried POST, zero download time, a skipped POST, a lastRequest that goes
    back, a POST after the video ended; answers as a runtime session fed the same chunks
    gives."""
    session = simulated_sessions(exports["pensieve/robust_mpc"], n=1)[0]
    lasts = [step.measurement["last"] for step in session.steps[1:6]]
    ref = load_controller(exports["pensieve/robust_mpc"])
    ref.reset()
    server, thread = _serve(exports["pensieve/robust_mpc"])
    try:
        port = server.server_address[1]
        assert _post(port, {"pastThroughput": [1.0, 2.0], "lastquality": 1}) == (200, "0")
        first = _post(port, _player_post(0, lasts[0]))
        assert first == (200, str(ref.decide({"last": lasts[0]})))
        assert _post(port, _player_post(0, lasts[0])) == first  # a retry: the same answer
        glitch = {**lasts[1], "delay_ms": 0.0}
        assert _post(port, _player_post(1, glitch)) == (200, str(ref.decide({"last": glitch})))
        ref.decide({"last": {**lasts[2], "delay_ms": 0.0}})  # POST 2 lost: counted as a glitch
        assert _post(port, _player_post(3, lasts[3])) == (200, str(ref.decide({"last": lasts[3]})))
        # lastRequest goes back (the player restarted): a new session from that chunk.
        assert _post(port, _player_post(2, lasts[2])) == (200, _fresh_at(ref, 2, lasts[2]))
        n_chunks = ref.contract["constants"]["n_chunks"]
        assert _post(port, _player_post(n_chunks, lasts[4])) == (200, "REFRESH")
        assert _post(port, _player_post(n_chunks, lasts[4])) == (200, "REFRESH")  # a retry
        # After the video ended, a POST mid-video starts a session at its chunk.
        assert _post(port, _player_post(4, lasts[4])) == (200, _fresh_at(ref, 4, lasts[4]))
    finally:
        _stop(server, thread)


def _fresh_at(ref, chunk: int, last: dict) -> str:
    """The answer of a session that starts at ``chunk``: reset, the chunks before it counted
    without measurements (zero download time), then the POST's own decision."""
    ref.reset()
    for _ in range(chunk):
        ref.decide({"last": {**last, "delay_ms": 0.0}})
    return str(ref.decide({"last": last}))


def _raw_http(port: int, request: bytes) -> tuple[int, str]:
    """Bytes on a socket, for requests http.client will not send (bad framing)."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


def test_pensieve_malformed_requests_get_400_and_the_server_goes_on(exports):
    session = simulated_sessions(exports["pensieve/robust_mpc"], n=1)[0]
    good = _player_post(0, session.steps[1].measurement["last"])
    missing = {k: v for k, v in good.items() if k != "buffer"}
    cases = [
        (b"{not json", "bad JSON"),
        (b"[1, 2]", "expected an object"),
        (json.dumps(missing).encode(), "missing field 'buffer'"),
        (json.dumps({**good, "lastChunkSize": "big"}).encode(), "'lastChunkSize' must be a num"),
        (json.dumps({**good, "lastquality": 9}).encode(), "'lastquality' must be an integer"),
        (json.dumps({**good, "lastRequest": -1}).encode(), "'lastRequest' must be an integer"),
        (json.dumps({**good, "client_id": True}).encode(), "'client_id' must be a non-empty"),
    ]
    server, thread = _serve(exports["pensieve/robust_mpc"])
    server.request_timeout_s = 0.5
    try:
        port = server.server_address[1]
        for body, reason in cases:
            status, text = _post(port, body)
            assert status == 400 and reason in text and text.count("\n") == 1, (body, text)
        no_length = b"POST / HTTP/1.1\r\nHost: x\r\n\r\n"
        assert _raw_http(port, no_length) == (400, "missing Content-Length header\n")
        short = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\": 1}"
        status, text = _raw_http(port, short)
        assert status == 400 and "Content-Length says 100" in text
        assert _post(port, good) == (200, str(session.steps[1].action))
    finally:
        _stop(server, thread)


# ------------------------------------------------------------ Puffer (python_ipc, Unix socket)

def _ssim_index(db: float) -> float:
    """Puffer sends SSIM indices; the simulator's traces hold dB."""
    return 1.0 - 10.0 ** (-db / 10.0)


class PufferSide:
    """Puffer's end of python_ipc: it listens on a Unix socket, the controller connects; each
    request is a 2-byte big-endian length and JSON, the answer is framed the same way."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="plume-ipc-")  # short: Unix paths are <= 107 bytes
        self.path = os.path.join(self.dir, "ipc")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.listener.settimeout(TIMEOUT_S)
        self.conn: socket.socket | None = None
        self.cum_rebuf = 0.0

    def accept(self) -> None:
        self.conn, _ = self.listener.accept()
        self.conn.settimeout(TIMEOUT_S)

    def send_raw(self, data: bytes) -> None:
        self.conn.sendall(data)

    def send(self, message) -> None:
        body = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.send_raw(struct.pack("!H", len(body)) + body)

    def answer(self) -> dict:
        head = self._exactly(2)
        return json.loads(self._exactly(struct.unpack("!H", head)[0]))

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.conn.recv(n - len(data))
            assert chunk, "the controller closed the stream"
            data += chunk
        return data

    def request(self, measurement: dict) -> dict:
        """Puffer's request for a runtime measurement, in Puffer's units."""
        last = measurement["last"]
        if last is None:
            past = dict.fromkeys(("delay", "ssim", "size", "cwnd", "in_flight", "min_rtt",
                                  "rtt", "delivery_rate"), 0.0)
            buffer = 0.0
        else:
            self.cum_rebuf += last["stall_s"]
            past = {"delay": last["delay_s"], "ssim": _ssim_index(last["ssim_db"]),
                    "size": last["size_mb"], "cwnd": 10, "in_flight": 2, "min_rtt": 0.04,
                    "rtt": 0.05, "delivery_rate": 1.5}
            buffer = last["buffer_s"]
        return {"past_chunk": past, "buffer": buffer, "cum_rebuf": self.cum_rebuf,
                "sizes": [list(map(float, row)) for row in measurement["next_sizes_mb"]],
                "ssims": [[_ssim_index(float(v)) for v in row]
                          for row in measurement["next_ssim_db"]],
                "channel_name": "test", "ts": 180180}

    def close(self) -> None:
        for sock in (self.conn, self.listener):
            if sock is not None:
                sock.close()
        if os.path.exists(self.path):
            os.unlink(self.path)
        os.rmdir(self.dir)


def _controller_thread(export, path: str, result: dict, ctrl=None, sock=None,
                       **kw) -> threading.Thread:
    """The controller serving in a thread (on ``sock`` when given: already connected)."""
    client = puffer.PufferIpcClient(ctrl or load_controller(export), path, **kw)
    if sock is not None:
        client.sock = sock

    def run() -> None:
        try:
            result.update(client.serve())
        finally:
            client.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("rule", ["robust_mpc", "bba"])
def test_puffer_replays_simulated_sessions_over_a_unix_socket(exports, rule):
    """Also the whole observation (SSIM dB from indices, the stall from cum_rebuf, the reward
    column) equals the one the runtime builds from the simulator's own measurements."""
    export = exports[f"gelato/{rule}"]
    for session in simulated_sessions(export, n=2):
        side, result = PufferSide(), {}
        ctrl, ref, thread = load_controller(export), load_controller(export), None
        try:
            thread = _controller_thread(export, side.path, result, ctrl)
            side.accept()
            assert session.steps[0].measurement["last"] is None
            for k, step in enumerate(session.steps):
                side.send(side.request(step.measurement))
                assert side.answer() == {"action": int(step.action)}, (session.trace_id, k)
                ref.decide(step.measurement)
                np.testing.assert_allclose(ctrl.observation, ref.observation, rtol=0, atol=1e-6)
            side.conn.close()  # Puffer ends the video: the controller ends cleanly
            thread.join(TIMEOUT_S)
            assert not thread.is_alive()
            assert result == {"decisions": len(session.steps), "errors": 0, "sessions": 1,
                              "end": "end of stream"}
        finally:
            side.close()
            if thread is not None:
                thread.join(TIMEOUT_S)


def test_puffer_stalls_and_a_second_video_reach_the_observation(exports):
    """Stalls (Puffer's cum_rebuf grows) and a new video on the same connection (past_chunk
    zero again): the adapter's observations equal the runtime's fed the same measurements."""
    export = exports["gelato/robust_mpc"]
    steps = simulated_sessions(export, n=1)[0].steps[:12]
    measurements = [step.measurement if step.measurement["last"] is None else
                    {**step.measurement, "last": {**step.measurement["last"],
                                                  "stall_s": 0.25 * (k % 3)}}
                    for k, step in enumerate(steps)]
    measurements += measurements[:6]  # the second video starts with last=None
    side, result = PufferSide(), {}
    ctrl, ref, thread = load_controller(export), load_controller(export), None
    try:
        thread = _controller_thread(export, side.path, result, ctrl)
        side.accept()
        for k, m in enumerate(measurements):
            if m["last"] is None:
                side.cum_rebuf = 0.0  # Puffer's counter is per video
            side.send(side.request(m))
            assert side.answer() == {"action": int(ref.decide(m))}, k
            np.testing.assert_allclose(ctrl.observation, ref.observation, rtol=0, atol=1e-6)
        side.conn.close()
        thread.join(TIMEOUT_S)
        assert result["sessions"] == 2 and result["decisions"] == len(measurements)
    finally:
        side.close()
        if thread is not None:
            thread.join(TIMEOUT_S)


def test_puffer_ssim_db_is_puffers():
    assert puffer.ssim_db(1.0) == 60.0 and puffer.ssim_db(0.0) == 0.0
    assert puffer.ssim_db(0.9) == pytest.approx(10.0)
    assert puffer.ssim_db(1 - 1e-9) == 60.0  # clamped, as Puffer's MAX_SSIM


def test_puffer_malformed_frames_get_errors_and_the_session_goes_on(exports):
    session = simulated_sessions(exports["gelato/robust_mpc"], n=1)[0]
    side, result, thread = PufferSide(), {}, None
    try:
        thread = _controller_thread(exports["gelato/robust_mpc"], side.path, result,
                                    frame_timeout_s=0.5)
        side.accept()
        good = side.request(session.steps[0].measurement)
        no_rebuf = {k: v for k, v in good.items() if k != "cum_rebuf"}
        short_row = {**good, "sizes": [row[:9] for row in good["sizes"]]}
        for frame, reason in [(b"{oops", "bad JSON"), (no_rebuf, "missing field cum_rebuf"),
                              (short_row, "sizes[0] must be a list of 10"),
                              ({**good, "buffer": "full"}, "buffer must be a finite number"),
                              (b"", "zero length prefix")]:
            side.send(frame)
            answer = side.answer()
            assert answer["action"] == 0 and reason in answer["error"], (frame, answer)
        side.send(good)
        assert side.answer() == {"action": int(session.steps[0].action)}
        side.send_raw(struct.pack("!H", 100) + b'{"past_chunk"')  # then nothing: out of sync
        answer = side.answer()
        assert "length prefix says 100 bytes, only 13 followed" in answer["error"]
        thread.join(TIMEOUT_S)
        assert result["end"] == "stream out of sync" and result["errors"] == 6
    finally:
        side.close()
        if thread is not None:
            thread.join(TIMEOUT_S)


def test_puffer_stream_ending_inside_a_frame_ends_the_session(exports):
    side, result, thread = PufferSide(), {}, None
    try:
        thread = _controller_thread(exports["gelato/robust_mpc"], side.path, result)
        side.accept()
        side.send_raw(struct.pack("!H", 50) + b"{}")
        side.conn.shutdown(socket.SHUT_WR)
        assert "only 2 followed" in side.answer()["error"]
        thread.join(TIMEOUT_S)
        assert result["end"] == "stream out of sync"
    finally:
        side.close()
        if thread is not None:
            thread.join(TIMEOUT_S)


# ------------------------------------------------------------ PCC-Uspace (Python helper calls)

MI_S = 0.125
"""Monitor interval length given to PCC's calls: a power of two, so rates and times convert
to bytes and seconds exactly."""


def _sample(k: int, m: dict) -> tuple:
    """give_sample's arguments after flow_id for the simulator's statistics of monitor interval
    k, as PCC-Uspace passes an interval: bytes, seconds since the flow's first interval, the
    first and last ACK latency (s), packet size, utility. The two latencies carry the mean RTT
    and its inflation up to floating-point rounding."""
    start, spread = k * MI_S, m["latency_inflation"] * MI_S / 2.0
    sent = m["sending_rate_bps"] / 8.0 * MI_S
    rtts = [m["latency_s"] - spread, m["latency_s"] + spread]
    return (sent, m["receiving_rate_bps"] / 8.0 * MI_S, m["loss"] * sent, start, start + MI_S,
            start + rtts[0], start + MI_S + rtts[1], rtts, 1500, 0.0)


SIM_REL = 1e-6
"""CC rates against the simulator's: it multiplies packets/s where the runtime multiplies
bit/s, and float32 observations round differently, so the runtime itself agrees to ~3e-8."""
RUNTIME_REL = 1e-12
"""CC rates against the runtime fed the simulator's statistics directly: the RTT pair and
byte counts rebuild them up to rounding, so the adapter adds nothing visible."""


def _direct_rates(export, session) -> list[float]:
    ctrl = load_controller(export)
    ctrl.reset(**session.reset_kwargs)
    return [ctrl.decide(step.measurement) for step in session.steps]


def _replay_pcc(helper, export, session, flow_id) -> None:
    """init, then get_rate before any sample and after each give_sample."""
    steps, direct = session.steps, _direct_rates(export, session)
    assert steps[0].measurement is None
    helper.init(flow_id)
    rates = [helper.get_rate(flow_id)]
    for k, step in enumerate(steps[1:], 1):
        helper.give_sample(flow_id, *_sample(k, step.measurement))
        rates.append(helper.get_rate(flow_id))
    assert all(type(rate) is float for rate in rates)
    assert rates == pytest.approx(direct, rel=RUNTIME_REL)
    assert rates == pytest.approx([step.action for step in steps], rel=SIM_REL)
    assert len(set(rates)) > len(rates) // 4  # the rate moves: the check is not vacuous


def test_pcc_helper_replays_simulated_flows(cc_export):
    sessions = simulated_sessions(cc_export, n=2)
    for flow_id, session in enumerate(sessions):
        flows = pcc.AuroraFlows(str(cc_export),
                                initial_rate_bps=session.reset_kwargs["initial_rate_bps"])
        _replay_pcc(flows, cc_export, session, flow_id)
        flows.reset(flow_id)
        assert flows.get_rate(flow_id) == pytest.approx(session.steps[0].action, rel=SIM_REL)


def test_pcc_module_functions_and_written_module(cc_export, tmp_path):
    session = simulated_sessions(cc_export, n=1)[0]
    rate = session.reset_kwargs["initial_rate_bps"]
    pcc.unbind()
    try:
        pcc.bind(str(cc_export), initial_rate_bps=rate)
        _replay_pcc(pcc, cc_export, session, 3)
    finally:
        pcc.unbind()
    path = pcc.write_module(str(cc_export), str(tmp_path), "plume_test_helper",
                            initial_rate_bps=rate)
    spec = importlib.util.spec_from_file_location("plume_test_helper", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # what PCC-Uspace's PyImport_ImportModule runs
    _replay_pcc(module, cc_export, session, 0)
    module.reset()  # older PCC-Uspace calls reset() without a flow id
    assert module.get_rate(0) == pytest.approx(session.steps[0].action, rel=SIM_REL)


def test_pcc_malformed_calls_are_logged_never_raised_and_the_flow_goes_on(cc_export, caplog):
    """PCC exits on an exception it does not clear: give_sample logs and keeps the rate; the
    strict ``sample`` raises the same one-line reason."""
    session = simulated_sessions(cc_export, n=1)[0]
    flows = pcc.AuroraFlows(str(cc_export),
                            initial_rate_bps=session.reset_kwargs["initial_rate_bps"])
    direct = _direct_rates(cc_export, session)
    assert flows.get_rate(99) == pytest.approx(direct[0], rel=RUNTIME_REL)  # started as init
    assert "flow 99: not initialised" in caplog.text
    flows.init(1)
    good = _sample(1, session.steps[1].measurement)
    bad = [(good[:7] + ("fast",) + good[8:], "rtt_samples must be a list"),
           (("lots",) + good[1:], "bytes_sent must be a finite number"),
           ((-1,) + good[1:], "bytes_sent must be a finite number in"),
           ((2**31,) + good[1:], "bytes_sent must be a finite number in"),
           (good[:3] + (None,) + good[4:], "send_start_time"),
           (good[:3] + (good[4], good[3]) + good[5:], "send_end_time .* must be at least"),
           (good[:4] + (good[3],) + good[5:], "send_end_time .* must be at least")]
    for args, field in bad:
        with pytest.raises(MeasurementError, match=field) as err:
            flows.sample(1, *args)
        assert "flow 1" in str(err.value) and "\n" not in str(err.value)
        assert flows.give_sample(1, *args) is None  # PCC's call: logged, never raised
        assert flows.get_rate(1) == pytest.approx(direct[0], rel=RUNTIME_REL)  # rate kept
    stats = flows.stats(1)
    assert stats["errors"] == len(bad) and stats["samples"] == 0
    assert re.search("send_end_time .* must be at least", stats["last_error"])
    assert caplog.text.count("interval not used") == pcc.LOGGED_ERRORS  # then only counted
    for k, step in enumerate(session.steps[1:], 1):
        flows.give_sample(1, *_sample(k, step.measurement))
        assert flows.get_rate(1) == pytest.approx(direct[k], rel=RUNTIME_REL), k


def test_pcc_profile_clips_to_pcc_rls_range(cc_export):
    flows = pcc.AuroraFlows(str(cc_export), profile="pcc")
    flows.init(0)
    assert 0.5e6 <= flows.get_rate(0) <= 300e6
    with pytest.raises(ValueError, match="unknown rate profile"):
        pcc.AuroraFlows(str(cc_export), profile="fast")


# ----------------------------------------------------------------------------- plume-serve

def _serve_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "plume.deploy.serve", *args]


def _readline(proc: subprocess.Popen, timeout: float = TIMEOUT_S) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "plume-serve printed nothing in time"
    return proc.stdout.readline()


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    if proc.poll() is None:
        proc.kill()
    _, err = proc.communicate(timeout=TIMEOUT_S)
    return proc.returncode, err


def test_plume_serve_help():
    done = subprocess.run(_serve_cmd("--help"), check=False, capture_output=True, text=True,
                          timeout=TIMEOUT_S, cwd=ROOT)
    assert done.returncode == 0
    assert all(word in done.stdout for word in ("pensieve", "puffer", "pcc"))


def test_plume_serve_pensieve_answers_and_stops_on_sigterm(exports):
    export = str(exports["pensieve/robust_mpc"])
    proc = subprocess.Popen(_serve_cmd("pensieve", export, "--port", "0"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)", _readline(proc)).group(1))
        last = {"level": 1, "size_bytes": 500000, "delay_ms": 800, "buffer_s": 3.2}
        post = {**_player_post(0, last), "lastChunkStartTime": 1_700_000_000_000,
                "lastChunkFinishTime": 1_700_000_000_800}
        status, text = _post(port, post)
        assert status == 200 and text in {str(i) for i in range(6)}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(TIMEOUT_S) == 0
    finally:
        code, err = _finish(proc)
    assert code == 0 and "pensieve session client=127.0.0.1 chunks=1" in err, err


def test_plume_serve_puffer_in_puffers_argv_layout(exports):
    session = simulated_sessions(exports["gelato/robust_mpc"], n=1)[0]
    side = PufferSide()
    export = str(exports["gelato/robust_mpc"])
    proc = subprocess.Popen(_serve_cmd("puffer", "gelato", export, side.path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        side.accept()
        for step in session.steps[:3]:
            side.send(side.request(step.measurement))
            assert side.answer() == {"action": int(step.action)}
        side.conn.close()
        assert proc.wait(TIMEOUT_S) == 0
    finally:
        code, err = _finish(proc)
        side.close()
    assert code == 0 and "puffer session" in err and "decisions=3" in err, err


def test_plume_serve_puffer_stops_on_sigint(exports):
    side = PufferSide()
    proc = subprocess.Popen(_serve_cmd("puffer", str(exports["gelato/bba"]), side.path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        side.accept()
        assert "connected to" in _readline(proc)  # its signal handlers are in place
        proc.send_signal(signal.SIGINT)
        assert proc.wait(TIMEOUT_S) == 0
    finally:
        code, err = _finish(proc)
        side.close()
    assert code == 0 and "stopped by signal" in err, err


def test_plume_serve_pcc_writes_a_loadable_module(cc_export, tmp_path):
    done = subprocess.run(_serve_cmd("pcc", str(cc_export), "--write-module", str(tmp_path),
                                     "--name", "aurora_helper"),
                          check=False, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert f"-pyhelper=aurora_helper -pypath={tmp_path}" in done.stdout
    check = ("import aurora_helper as h; h.init(0); r = h.get_rate(0); "
             "assert type(r) is float and r > 0, r; print(r)")
    ran = subprocess.run([sys.executable, "-c", check], check=False, capture_output=True, text=True,
                         timeout=TIMEOUT_S, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert ran.returncode == 0, ran.stderr
    assert math.isfinite(float(ran.stdout))


def test_plume_serve_refuses_a_missing_export(tmp_path):
    done = subprocess.run(_serve_cmd("pensieve", str(tmp_path / "none"), "--port", "0"),
                          check=False, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "no contract" in done.stderr


def test_plume_serve_puffer_without_puffer_fails_fast(exports, tmp_path):
    started = time.monotonic()
    export = str(exports["gelato/robust_mpc"])
    done = subprocess.run(_serve_cmd("puffer", export, str(tmp_path / "ipc"),
                                     "--connect-timeout", "0.2"),
                          check=False, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert done.returncode == 1 and "nothing listens on" in done.stderr
    assert time.monotonic() - started < TIMEOUT_S
