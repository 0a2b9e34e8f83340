"""Measurement programs run inside the emulator's namespaces (the calibration's real traffic):
``python -m plume.emulation.probes <probe> ...``; each prints one JSON object and every loop
that sends is bounded in count and time.

=============================================  ==============================================
``udp-echo PORT SECONDS``                       echo every datagram back, for SECONDS
``udp-ping HOST PORT COUNT INTERVAL_S``         COUNT probes; ``{"rtt_s": [...]}``
``udp-sink PORT SECONDS``                       count datagrams; ``{"packets", "bytes"}``
``udp-burst HOST PORT COUNT SIZE``              COUNT datagrams of SIZE bytes at once
``udp-flood HOST PORT MBPS SECONDS SIZE``       datagrams paced at MBPS for SECONDS
``tcp-source PORT SECONDS``                     accept one connection, send bulk for SECONDS
``tcp-sink HOST PORT SECONDS``                  read for SECONDS; ``{"bytes", "per_second"}``
=============================================  ==============================================
"""

from __future__ import annotations

import json
import socket
import sys
import time

CHUNK = 65536


def udp_echo(port: int, seconds: float) -> dict:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", port))
    end, echoed = time.monotonic() + seconds, 0
    while (left := end - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            data, peer = sock.recvfrom(CHUNK)
        except socket.timeout:
            break
        sock.sendto(data, peer)
        echoed += 1
    return {"echoed": echoed}


def udp_ping(host: str, port: int, count: int, interval: float) -> dict:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(2.0)
    rtts = []
    for k in range(count):
        sent = time.monotonic()
        sock.sendto(k.to_bytes(4, "big"), (host, port))
        try:
            sock.recvfrom(CHUNK)
            rtts.append(time.monotonic() - sent)
        except socket.timeout:
            pass
        time.sleep(interval)
    return {"rtt_s": rtts}


def udp_sink(port: int, seconds: float) -> dict:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    sock.bind(("0.0.0.0", port))
    end, packets, size = time.monotonic() + seconds, 0, 0
    while (left := end - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            data = sock.recv(CHUNK)
        except socket.timeout:
            break
        packets, size = packets + 1, size + len(data)
    return {"packets": packets, "bytes": size}


def udp_burst(host: str, port: int, count: int, size: int) -> dict:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payload = bytes(size)
    for _ in range(count):
        sock.sendto(payload, (host, port))
    return {"sent": count}


def udp_flood(host: str, port: int, mbps: float, seconds: float, size: int) -> dict:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payload, gap = bytes(size), (size + 28) * 8 / (mbps * 1e6)
    start, sent = time.monotonic(), 0
    while (now := time.monotonic()) - start < seconds:
        due = start + sent * gap
        if due > now:
            time.sleep(min(due - now, 0.002))
            continue
        sock.sendto(payload, (host, port))
        sent += 1
    return {"sent": sent}


def tcp_source(port: int, seconds: float) -> dict:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(1)
    server.settimeout(seconds + 10)
    conn, _ = server.accept()
    conn.settimeout(5.0)
    payload, end, sent = bytes(CHUNK), time.monotonic() + seconds, 0
    try:
        while time.monotonic() < end:
            sent += conn.send(payload)
    except OSError:
        pass
    conn.close()
    return {"sent": sent}


def tcp_sink(host: str, port: int, seconds: float) -> dict:
    conn = socket.create_connection((host, port), timeout=10)
    start, got, per_second = time.monotonic(), 0, []
    while (elapsed := time.monotonic() - start) < seconds:
        conn.settimeout(max(seconds - elapsed, 0.01))
        try:
            data = conn.recv(CHUNK)
        except socket.timeout:
            break
        if not data:
            break
        second = int(time.monotonic() - start)
        per_second.extend([0] * (second + 1 - len(per_second)))
        per_second[second] += len(data)
        got += len(data)
    conn.close()
    return {"bytes": got, "per_second": per_second}


PROBES = {"udp-echo": (udp_echo, (int, float)), "udp-ping": (udp_ping, (str, int, int, float)),
          "udp-sink": (udp_sink, (int, float)), "udp-burst": (udp_burst, (str, int, int, int)),
          "udp-flood": (udp_flood, (str, int, float, float, int)),
          "tcp-source": (tcp_source, (int, float)), "tcp-sink": (tcp_sink, (str, int, float))}


def main() -> None:
    name, args = sys.argv[1], sys.argv[2:]
    probe, types = PROBES[name]
    print(json.dumps(probe(*(kind(a) for kind, a in zip(types, args)))), flush=True)


if __name__ == "__main__":
    main()
