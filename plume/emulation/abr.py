"""ABR over real TCP: a chunk server in the server namespace, a streaming client in the client
namespace driven by the deployment runtime, one emulated link between them.

* ``serve``: an HTTP/1.1 server (keep-alive, Nagle off) answering ``GET /chunk/<k>/<level>``
  with that chunk's bytes (zeros of the video's size: Pensieve's EnvivioDash3 sizes).
* ``play``: the player. Per chunk: the controller's decision, the download over TCP, then the
  simulator's own accounting with the *measured* download time (Pensieve's ``sim/env.py``:
  rebuffer = max(delay - buffer, 0); buffer = max(buffer - delay, 0) + chunk length; above
  the cap the player sleeps, in real time, in 500 ms steps). The QoE per chunk is the env's
  reward. The runtime gets the raw measurements a dash.js player reports.
* The scenario that runs these programs, simulates the same controller on the same traces and
  aggregates both sides' per-chunk records is the environment's (``plume.envs.abr.emulate``).

Pensieve's setting (``env.variant=pensieve``): the delay a chunk takes includes the request's
round trip on the emulated link (the simulator adds its 80 ms RTT instead).
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from plume.deploy import load_controller

__all__ = ["play", "serve"]

DRAIN_QUANTUM_S = 0.5
"""Pensieve's sleep step when the buffer is above its cap."""


def serve(port: int, sizes: np.ndarray, seconds: float) -> None:
    """Answer chunk requests for ``seconds``; ``sizes[k, level]`` in bytes."""
    zeros = bytes(int(sizes.max()))

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            try:
                _, _, chunk, level = self.path.split("/")
                size = int(sizes[int(chunk) % len(sizes), int(level)])
            except (ValueError, IndexError):
                self.send_error(404, "GET /chunk/<k>/<level>")
                return
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            self.wfile.write(zeros[:size])

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    server.timeout = 0.5
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        server.handle_request()
    server.server_close()


def _download(conn: http.client.HTTPConnection, chunk: int, level: int) -> tuple[int, float]:
    """(bytes, seconds) of one chunk, from the request to the last byte."""
    start = time.monotonic()
    conn.request("GET", f"/chunk/{chunk}/{level}")
    response = conn.getresponse()
    body = response.read()
    if response.status != 200:
        raise RuntimeError(f"chunk {chunk} level {level}: HTTP {response.status}")
    return len(body), time.monotonic() - start


def play(export: str, host: str, port: int, chunks: int) -> list[dict[str, float]]:
    """Stream ``chunks`` chunks with the controller of ``export``; one record per chunk."""
    controller = load_controller(export)
    constants = controller.contract["constants"]
    params = controller.contract["env"]["params"]
    levels = controller.contract["action"]["levels_kbps"]
    chunk_s, cap_s = float(constants["chunk_seconds"]), 60.0
    conn = http.client.HTTPConnection(host, port, timeout=60)
    controller.reset()
    level = controller.decide({"last": None})
    buffer_s, previous, records = 0.0, levels[1], []  # Pensieve: DEFAULT_QUALITY 1
    for chunk in range(chunks):
        size, delay_s = _download(conn, chunk, level)
        stall = max(delay_s - buffer_s, 0.0)
        buffer_s = max(buffer_s - delay_s, 0.0) + chunk_s
        sleep = math.ceil(max(buffer_s - cap_s, 0.0) / DRAIN_QUANTUM_S) * DRAIN_QUANTUM_S
        if sleep:
            time.sleep(sleep)
            buffer_s -= sleep
        reward = (levels[level] / 1000.0 - params["rebuf_penalty"] * stall
                  - params["smooth_penalty"] * abs(levels[level] - previous) / 1000.0)
        records.append({"level": level, "size": size, "delay": delay_s, "stall": stall,
                        "buffer": buffer_s, "reward": reward,
                        "quality": levels[level] / 1000.0,
                        "change": abs(levels[level] - previous) / 1000.0})
        previous = levels[level]
        if chunk + 1 < chunks:
            level = controller.decide({"last": {"level": level, "size_bytes": size,
                                                "delay_ms": delay_s * 1000.0,
                                                "buffer_s": buffer_s}})
    conn.close()
    return records


def main() -> None:
    """``serve PORT SIZES.npy SECONDS`` or ``play EXPORT HOST PORT CHUNKS`` (the emulation
    job runs these in the namespaces)."""
    parser = argparse.ArgumentParser(prog="python -m plume.emulation.abr")
    parser.add_argument("role", choices=("serve", "play"))
    parser.add_argument("args", nargs="+")
    args = parser.parse_args()
    if args.role == "serve":
        port, sizes, seconds = args.args
        serve(int(port), np.load(sizes), float(seconds))
    else:
        export, host, port, chunks = args.args
        print(json.dumps(play(export, host, int(port), int(chunks))), flush=True)


if __name__ == "__main__":
    sys.exit(main())
