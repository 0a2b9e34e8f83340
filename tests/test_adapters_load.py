"""Load on ``plume-serve pensieve``: many players starting together, none of their requests
lost, every answer the simulator's decision.

The players are written from Pensieve's protocol (docs: deployment.md, section 1), not from the
server's code: after each chunk a player POSTs one JSON object with ``lastquality``,
``buffer``, ``RebufferTime``, ``lastChunkStartTime``, ``lastChunkFinishTime``,
``lastChunkSize`` and ``lastRequest`` 0..47 (and the fields the server ignores), reads the
next level as text, and after the last chunk (``lastRequest`` 48) gets ``REFRESH``. Each
player replays a simulated session, so the answer to every POST is known: the simulator's
decision for the next chunk. Each player has its own loopback address (127.0.x.y, all of
127/8 is loopback on Linux), as distinct hosts would, so the server keys its sessions by
address without any extension of the protocol. A request is lost if its connection is
refused or reset, times out, or gets anything but the expected answer; each POST opens its
own connection (``Connection: close``), so every request passes the listen backlog.

The server is a real ``plume-serve pensieve`` subprocess started through this interpreter,
on 127.0.0.1 and a free port; every socket and wait has a timeout.
"""

from __future__ import annotations

import json
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from plume.deploy.export import export_controller
from plume.deploy.replay import simulated_sessions

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 30.0
"""Bound on each request and on the server's start (it imports numpy and the env registry)."""
N_CHUNKS = 48
"""Pensieve's video: 48 chunks (``TOTAL_VIDEO_CHUNCK``)."""
LEVELS = {str(level) for level in range(6)}
LOAD_DEADLINE_S = 300.0
"""Bound on a whole load run (200 players take ~15 s on 2 shared cores)."""


@pytest.fixture(scope="module")
def pensieve_export(tmp_path_factory):
    """A rule export (RobustMPC reads the whole observation) and its simulated sessions."""
    try:
        socket.create_server(("127.0.1.1", 0)).close()
    except OSError:
        pytest.skip("needs all of 127.0.0.0/8 on the loopback interface (Linux has it)")
    export = export_controller("abr", {"variant": "pensieve"}, "robust_mpc",
                               tmp_path_factory.mktemp("load") / "pensieve")
    return export, simulated_sessions(export, n=4)


def _script(session) -> list[tuple[bytes, str | None]]:
    """A player's POST bodies and the answers due: lastRequest k after chunk k (the
    simulator's step k + 1 decided chunk k + 1 from it), the last chunk (any level), then
    lastRequest 48 (REFRESH)."""
    steps, out = session.steps, []
    lasts = [step.measurement["last"] for step in steps[1:]]
    lasts.append({**lasts[-1], "level": int(steps[-1].action)})
    answers = [str(int(step.action)) for step in steps[1:]] + [None, "REFRESH"]
    rebuffer = 0.0
    for k, (last, answer) in enumerate(zip(lasts + [lasts[-1]], answers)):
        post = {"nextChunkSize": 0, "Type": "RL", "lastquality": int(last["level"]),
                "buffer": last["buffer_s"], "bufferAdjusted": last["buffer_s"] - 4.55,
                "bandwidthEst": 0, "lastRequest": k, "RebufferTime": rebuffer,
                "lastChunkStartTime": 0, "lastChunkFinishTime": last["delay_ms"],
                "lastChunkSize": last["size_bytes"]}
        out.append((json.dumps(post).encode(), answer))
    assert len(out) == N_CHUNKS + 1
    return out


def _post(port: int, source: str, body: bytes) -> tuple[int, str]:
    """One POST on its own connection from ``source``, as XMLHttpRequest sends it."""
    head = (f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S,
                                  source_address=(source, 0)) as sock:
        sock.sendall(head + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2].decode()


def _player(port: int, index: int, script, start: threading.Barrier, out: dict) -> None:
    """Play one video; record each request's latency and every loss with its reason."""
    source = f"127.0.{1 + index // 250}.{1 + index % 250}"
    latencies, lost = [], []
    try:
        start.wait(TIMEOUT_S)
    except threading.BrokenBarrierError:
        pass
    for k, (body, due) in enumerate(script):
        begin = time.perf_counter()
        try:
            status, text = _post(port, source, body)
        except OSError as e:
            lost.append(f"player {index} chunk {k}: {type(e).__name__}: {e}")
            continue
        latencies.append(time.perf_counter() - begin)
        ok = status == 200 and (text == due if due is not None else text in LEVELS)
        if not ok:
            lost.append(f"player {index} chunk {k}: {status} {text!r}, expected {due!r}")
    out[index] = (latencies, lost)


def _start_server(export, log_file) -> tuple[subprocess.Popen, int]:
    cmd = [sys.executable, "-m", "plume.deploy.serve", "pensieve", str(export), "--port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file, text=True, cwd=ROOT)
    ready, _, _ = select.select([proc.stdout], [], [], TIMEOUT_S)
    line = proc.stdout.readline() if ready else ""
    match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if match is None:
        proc.kill()
        raise AssertionError(f"plume-serve pensieve did not start: {line!r}")
    return proc, int(match.group(1))


def _load(pensieve_export, players: int) -> dict:
    """``players`` players x 49 POSTs against a fresh server; the server's log checked."""
    export, sessions = pensieve_export
    scripts = [_script(session) for session in sessions]
    with tempfile.TemporaryFile("w+") as log_file:
        proc, port = _start_server(export, log_file)
        try:
            results, start = {}, threading.Barrier(players)
            threads = [threading.Thread(target=_player, daemon=True, args=(
                port, i, scripts[i % len(scripts)], start, results)) for i in range(players)]
            began = time.perf_counter()
            for thread in threads:
                thread.start()
            deadline = began + LOAD_DEADLINE_S
            for thread in threads:
                thread.join(max(deadline - time.perf_counter(), 0.0))
            wall = time.perf_counter() - began
            assert not any(thread.is_alive() for thread in threads), "a player hung"
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(TIMEOUT_S) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(TIMEOUT_S)
            proc.stdout.close()
        log_file.seek(0)
        server_log = log_file.read()
    latencies = np.array([t for lat, _ in results.values() for t in lat]) * 1e3
    lost = [line for _, lost in results.values() for line in lost]
    sent = players * (N_CHUNKS + 1)
    p50, p99 = (np.percentile(latencies, (50, 99)) if latencies.size else (np.nan, np.nan))
    print(f"\n[load] {players} players x {N_CHUNKS + 1} POSTs: {sent} requests, {len(lost)} lost, "
          f"latency p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {latencies.max():.1f} ms; "
          f"{wall:.1f} s ({sent / wall:.0f} requests/s)")
    assert lost == [], f"{len(lost)} of {sent} requests lost, e.g. {lost[:5]}"
    assert len(results) == players and latencies.size == sent
    ended = re.findall(r"pensieve session client=127\.0\.\d+\.\d+ chunks=48 .* first_chunk=0 "
                       r"end=REFRESH", server_log)
    assert len(ended) == players, server_log[-2000:]
    assert "Traceback" not in server_log and " 503 " not in server_log
    return {"requests": sent, "lost": len(lost), "p50_ms": p50, "p99_ms": p99, "wall_s": wall}


def test_fifty_players_lose_no_request(pensieve_export):
    """The default suite's size: 50 players starting together, 2,450 requests."""
    stats = _load(pensieve_export, 50)
    assert stats["lost"] == 0 and stats["requests"] == 50 * 49


@pytest.mark.slow
def test_two_hundred_players_lose_no_request(pensieve_export):
    """Issue 34's load: 200 players x 48 chunks starting together (at socketserver's backlog
    of 5 it lost 6,833 of 9,800 requests)."""
    stats = _load(pensieve_export, 200)
    assert stats["lost"] == 0 and stats["requests"] == 9800
