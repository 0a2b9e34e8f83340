"""Congestion control over a real UDP flow: a paced sender driven by the deployment runtime in
the server namespace, an ACK-ing receiver in the client namespace.

* Packets are 1500-byte IP datagrams (1472 bytes of UDP payload) carrying a sequence number
  and their send time; the receiver echoes both back at once.
* Monitor intervals (MIs): the first lasts 3 x the handshake RTT (as the simulator's first MIs
  last 3 x the one-way delay, near 1.5 RTT), later ones 0.5 x the previous MI's mean RTT. An
  MI is complete when each of its packets is acknowledged or overdue (2 x the latest RTT after
  the MI's end, then counted lost); the controller then gets its statistics (sending and
  receiving rate, mean RTT, latency inflation = second half's mean RTT minus the first half's
  over the duration, loss) and sets the rate of the MIs that follow. Feedback thus arrives one
  RTT late, as for a real sender (the fluid simulator accounts at send time).
* Aurora's reward per MI on the measured values: 0.001 (10 throughput - 1000 latency - 2000
  loss), throughput in packets/s.

``python -m plume.emulation.cc receive PORT SECONDS`` and ``... send EXPORT HOST PORT MIS
RATE_BPS`` (printing one JSON record per MI) are what the emulation job runs.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from plume.deploy import load_controller

__all__ = ["MonitorInterval", "mi_statistics", "receive", "send"]

PAYLOAD = 1472
"""UDP payload of a 1500-byte IP packet."""
PACKET_BYTES = 1500
HEADER = struct.Struct("!Qd")  # sequence number, send time


@dataclass
class MonitorInterval:
    start: float
    end: float = 0.0
    sent: dict[int, float] = field(default_factory=dict)  # sequence -> send time
    rtts: dict[int, float] = field(default_factory=dict)  # sequence -> RTT of its ACK


def mi_statistics(mi: MonitorInterval) -> dict[str, float]:
    """The runtime's measurement (statistics form) of a complete MI."""
    duration = mi.end - mi.start
    acked = [mi.rtts[s] for s in sorted(mi.rtts)]
    half = len(acked) // 2
    latency = float(np.mean(acked)) if acked else 0.0
    inflation = ((np.mean(acked[half:]) - np.mean(acked[:half])) / duration
                 if len(acked) > 1 else 0.0)
    bits = 8.0 * PACKET_BYTES
    return {"sending_rate_bps": len(mi.sent) * bits / duration,
            "receiving_rate_bps": len(acked) * bits / duration, "latency_s": latency,
            "latency_inflation": float(inflation), "duration_s": duration,
            "loss": 1.0 - len(acked) / len(mi.sent) if mi.sent else 0.0}


def receive(port: int, seconds: float) -> dict:
    """Echo every packet's header back to its sender for ``seconds``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    sock.bind(("0.0.0.0", port))
    end, count = time.monotonic() + seconds, 0
    while (left := end - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            data, peer = sock.recvfrom(2048)
        except socket.timeout:
            break
        sock.sendto(data[:HEADER.size], peer)
        count += 1
    return {"received": count}


class _Flow:
    """The sender's state: open MIs, pacing, the latest RTT."""

    def __init__(self, sock: socket.socket, address, rate_bps: float) -> None:
        self.sock, self.address, self.rate_bps = sock, address, rate_bps
        self.seq, self.next_send, self.rtt = 0, time.monotonic(), None
        self.owner: dict[int, MonitorInterval] = {}
        self.payload = bytearray(PAYLOAD)

    def handshake(self) -> float:
        self.sock.settimeout(2.0)
        start = time.monotonic()
        self.sock.sendto(HEADER.pack(2**63, start), self.address)
        self.sock.recvfrom(2048)
        self.rtt = time.monotonic() - start
        return self.rtt

    def pace(self, mi: MonitorInterval, until: float) -> None:
        """Send at the current rate until ``until``, reading ACKs in between."""
        gap = 8.0 * PACKET_BYTES / self.rate_bps
        while (now := time.monotonic()) < until:
            if now >= self.next_send:
                HEADER.pack_into(self.payload, 0, self.seq, now)
                self.sock.sendto(self.payload, self.address)
                mi.sent[self.seq], self.owner[self.seq] = now, mi
                self.seq += 1
                self.next_send = max(self.next_send + gap, now - gap)
            self.read_acks(min(self.next_send, until) - time.monotonic())

    def read_acks(self, wait: float) -> None:
        self.sock.settimeout(max(wait, 0.0))  # 0: only what has arrived
        try:
            while True:
                data = self.sock.recv(2048)
                seq, sent = HEADER.unpack_from(data)
                mi = self.owner.pop(seq, None)
                if mi is not None:
                    self.rtt = time.monotonic() - sent
                    mi.rtts[seq] = self.rtt
                self.sock.settimeout(0.0)
        except (BlockingIOError, socket.timeout):
            return


def send(export: str, host: str, port: int, mis: int, rate_bps: float) -> list[dict]:
    """A flow of ``mis`` monitor intervals at the controller's rates; one record per MI."""
    controller = load_controller(export)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    flow = _Flow(sock, (host, port), rate_bps)
    rtt = flow.handshake()
    controller.reset(initial_rate_bps=rate_bps, initial_rtt_s=rtt)
    flow.rate_bps = controller.decide(None)
    pending, records, duration = [], [], 3.0 * rtt
    while len(records) < mis:
        mi = MonitorInterval(time.monotonic())
        flow.pace(mi, mi.start + duration)
        mi.end = time.monotonic()
        pending.append(mi)
        while pending and _complete(pending[0], flow):
            done = pending.pop(0)
            stats = mi_statistics(done)
            flow.rate_bps = controller.decide(stats)
            records.append({**stats, "rate_bps": flow.rate_bps, "reward": _reward(stats)})
        duration = max(0.5 * (records[-1]["latency_s"] if records else rtt), 0.005)
    return records[:mis]


def _complete(mi: MonitorInterval, flow: _Flow) -> bool:
    """All packets of ``mi`` acknowledged, or the rest overdue (then lost)."""
    if len(mi.rtts) == len(mi.sent):
        return True
    return time.monotonic() > mi.end + 2.0 * (flow.rtt or 0.1) + 0.05


def _reward(stats: dict[str, float]) -> float:
    throughput = stats["receiving_rate_bps"] / (8.0 * PACKET_BYTES)
    return 0.001 * (10.0 * throughput - 1000.0 * stats["latency_s"] - 2000.0 * stats["loss"])


def main() -> None:
    role, args = sys.argv[1], sys.argv[2:]
    if role == "receive":
        print(json.dumps(receive(int(args[0]), float(args[1]))), flush=True)
    else:
        export, host, port, mis, rate = args
        print(json.dumps(send(export, host, int(port), int(mis), float(rate))), flush=True)


if __name__ == "__main__":
    main()
