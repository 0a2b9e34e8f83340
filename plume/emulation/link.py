"""A trace-driven link between two TUN devices, with Mahimahi's semantics.

Per direction (server -> client is ``down``, client -> server ``up``):

1. A packet read from the sending side's TUN device is dropped at random with probability
   ``loss`` (Mahimahi's ``mm-loss``), else held for the one-way ``delay_ms`` (``mm-delay``).
2. It then joins a droptail queue (``mm-link --*-queue=droptail``), bounded in ``packets`` or
   ``bytes`` (None: unbounded, Mahimahi's default); a packet that would exceed the bound is
   dropped.
3. The queue drains at the trace's **delivery opportunities**: a list of millisecond
   timestamps, each the chance to deliver ``OPPORTUNITY_BYTES`` (one 1500-byte packet), looping
   with the trace's period. As in Mahimahi's ``LinkQueue``, an opportunity's bytes may finish
   one packet and start the next; an opportunity with nothing queued is lost.

The loop runs in one process (``link.main``, started by
:class:`plume.emulation.emulator.Emulator` with the two TUN descriptors), waking at the next
arrival, release or opportunity (``select`` with microsecond timeouts). On SIGTERM it writes its
counters to the spec's ``stats`` path: packets and bytes in, dropped by loss and by the queue,
delivered, and bytes delivered in every second of the run per direction.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["OPPORTUNITY_BYTES", "Direction", "LinkSpec", "Schedule", "run"]

OPPORTUNITY_BYTES = 1500
"""Bytes one delivery opportunity carries (an MTU-sized IP packet; the TUN devices carry
no packet-information header, so Mahimahi's 1504 counts the same payload)."""
BITS_PER_OPPORTUNITY = OPPORTUNITY_BYTES * 8


@dataclass(frozen=True)
class Schedule:
    """Delivery opportunities: ``times_ms`` (sorted, within one period) repeating every
    ``period_ms``."""

    times_ms: np.ndarray
    period_ms: int

    @classmethod
    def constant(cls, mbps: float) -> Schedule:
        """A constant rate, to the millisecond: ``mbps`` x 1000 / 12 opportunities a second,
        spread evenly over a period of 12 ms per Mbit/s rounding."""
        return cls.from_bandwidth(np.array([0.0]), np.array([float(mbps)]), period_s=1.0)

    @classmethod
    def from_bandwidth(cls, time_s: np.ndarray, mbps: np.ndarray, period_s: float) -> Schedule:
        """Opportunities from a bandwidth series (``mbps[j]`` holds from ``time_s[j]`` to the
        next sample, the last until ``period_s``): one where the cumulative bits cross each
        multiple of 12,000, at the millisecond it happens (floor), as Mahimahi's traces of
        a rate are written."""
        edges = np.append(np.asarray(time_s, np.float64), float(period_s))
        bits = np.concatenate([[0.0], np.cumsum(np.diff(edges) * np.asarray(mbps) * 1e6)])
        count = int(bits[-1] // BITS_PER_OPPORTUNITY)
        if count < 1:
            raise ValueError("the trace delivers less than one packet per period")
        targets = np.arange(1, count + 1) * BITS_PER_OPPORTUNITY
        at = np.interp(targets, bits, edges)  # the time each packet's last bit arrives
        return cls(np.floor(at * 1000.0).astype(np.int64), max(int(round(period_s * 1000)), 1))

    @classmethod
    def from_mahimahi(cls, path: str | Path) -> Schedule:
        """A Mahimahi trace file: one millisecond timestamp per line; period = the last."""
        lines = [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]
        try:
            times = np.array([int(line) for line in lines], dtype=np.int64)
        except ValueError as err:
            raise ValueError(f"{path}: not a Mahimahi trace ({err})") from None
        if len(times) == 0 or times[-1] <= 0 or np.any(np.diff(times) < 0):
            raise ValueError(f"{path}: timestamps must be non-decreasing and end above 0")
        return cls(times, int(times[-1]))

    def to_mahimahi(self, path: str | Path) -> Path:
        """Write this schedule as a Mahimahi trace. Mahimahi's period is the last timestamp,
        so the cycle is rotated to end on an opportunity: opportunities at 0 move to the
        period's end and an idle tail moves to the front (the same cycle, started up to one
        gap between opportunities later)."""
        times = np.sort(np.where(self.times_ms == 0, self.period_ms, self.times_ms))
        times = times + (self.period_ms - times[-1])
        path = Path(path)
        path.write_text("\n".join(map(str, times.tolist())) + "\n")
        return path

    def to_json(self) -> dict[str, Any]:
        return {"times_ms": self.times_ms.tolist(), "period_ms": self.period_ms}


@dataclass(frozen=True)
class LinkSpec:
    """One direction of the link: opportunities, one-way delay, droptail bound in packets or
    bytes (None: unbounded), random loss (drawn from ``seed``)."""

    schedule: Schedule
    delay_ms: float = 0.0
    queue_packets: int | None = None
    queue_bytes: int | None = None
    loss: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.delay_ms < 0 or not 0.0 <= self.loss < 1.0:
            raise ValueError(f"delay_ms must be >= 0 and loss in [0, 1), got {self.delay_ms}, "
                             f"{self.loss}")
        if self.queue_packets is not None and self.queue_bytes is not None:
            raise ValueError("a droptail queue is bounded in packets or in bytes, not both")

    def to_json(self) -> dict[str, Any]:
        return {"schedule": self.schedule.to_json(), "delay_ms": self.delay_ms,
                "queue_packets": self.queue_packets, "queue_bytes": self.queue_bytes,
                "loss": self.loss, "seed": self.seed}

    @classmethod
    def from_json(cls, spec: dict[str, Any]) -> LinkSpec:
        schedule = Schedule(np.asarray(spec["schedule"]["times_ms"], np.int64),
                            int(spec["schedule"]["period_ms"]))
        return cls(schedule, float(spec["delay_ms"]), spec["queue_packets"],
                   spec["queue_bytes"], float(spec["loss"]), int(spec["seed"]))


@dataclass
class Direction:
    """One direction's state under its ``spec``: the delay line, the droptail queue, the
    packet in transit and the next opportunity (see the module docstring)."""

    spec: LinkSpec
    delayed: deque = field(default_factory=deque)
    queue: deque = field(default_factory=deque)
    queued_bytes: int = 0
    in_transit: bytes | None = None
    transit_left: int = 0
    next_index: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("packets_in", "bytes_in", "lost", "queue_drops", "delivered", "bytes_out"), 0))
    per_second: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.spec.seed)

    def arrive(self, packet: bytes, now_ms: float) -> None:
        self.counts["packets_in"] += 1
        self.counts["bytes_in"] += len(packet)
        if self.spec.loss and self.rng.random() < self.spec.loss:
            self.counts["lost"] += 1
            return
        self.delayed.append((now_ms + self.spec.delay_ms, packet))

    def _enqueue(self, packet: bytes) -> None:
        packets, size = self.spec.queue_packets, self.spec.queue_bytes
        full = ((packets is not None and len(self.queue) >= packets) or
                (size is not None and self.queued_bytes + len(packet) > size))
        if full:
            self.counts["queue_drops"] += 1
            return
        self.queue.append(packet)
        self.queued_bytes += len(packet)

    def opportunity_at(self, index: int) -> int:
        times, period = self.spec.schedule.times_ms, self.spec.schedule.period_ms
        return int(times[index % len(times)] + period * (index // len(times)))

    def service(self, now_ms: float, deliver) -> None:
        """Everything due up to ``now_ms``, in time order: a packet joins the queue when its
        delay ends and can use only the opportunities from then on (``deliver(packet)``
        writes a packet out). Opportunities with nothing to send are lost."""
        while (t := self.opportunity_at(self.next_index)) <= now_ms:
            while self.delayed and self.delayed[0][0] <= t:
                self._enqueue(self.delayed.popleft()[1])
            if self.queue or self.transit_left:
                self._use_opportunity(t, deliver)
                self.next_index += 1
            elif self.delayed and self.delayed[0][0] <= now_ms:
                self._skip_to(self.delayed[0][0])
            else:
                self._skip_to(now_ms)
                break
        while self.delayed and self.delayed[0][0] <= now_ms:
            self._enqueue(self.delayed.popleft()[1])

    def _skip_to(self, t_ms: float) -> None:
        """The next opportunity is the first at or after ``t_ms``."""
        times, period = self.spec.schedule.times_ms, self.spec.schedule.period_ms
        cycle = int(t_ms // period)
        position = int(np.searchsorted(times, t_ms - cycle * period, side="left"))
        self.next_index = max(self.next_index, cycle * len(times) + position)

    def _use_opportunity(self, at_ms: int, deliver) -> None:
        budget = OPPORTUNITY_BYTES
        while budget > 0:
            if self.transit_left == 0:
                if not self.queue:
                    return
                self.in_transit = self.queue.popleft()
                self.queued_bytes -= len(self.in_transit)
                self.transit_left = len(self.in_transit)
            sent = min(budget, self.transit_left)
            budget -= sent
            self.transit_left -= sent
            if self.transit_left == 0:
                deliver(self.in_transit)
                self._count_delivery(len(self.in_transit), at_ms)

    def _count_delivery(self, size: int, at_ms: int) -> None:
        self.counts["delivered"] += 1
        self.counts["bytes_out"] += size
        second = at_ms // 1000
        if second >= len(self.per_second):
            self.per_second.extend([0] * (second + 1 - len(self.per_second)))
        self.per_second[second] += size

    def next_event_ms(self) -> float:
        """When this direction next has something to do (inf: nothing queued or in flight)."""
        if self.queue or self.transit_left:
            return float(self.opportunity_at(self.next_index))
        return self.delayed[0][0] if self.delayed else math.inf

    def summary(self) -> dict[str, Any]:
        return {**self.counts, "bytes_per_second": self.per_second}


def run(spec: dict[str, Any], server_fd: int, client_fd: int) -> dict[str, Any]:
    """Move packets between the two TUN descriptors until SIGTERM (or ``spec["seconds"]``);
    returns the counters."""
    down, up = (Direction(LinkSpec.from_json(spec[key])) for key in ("down", "up"))
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    for fd in (server_fd, client_fd):
        os.set_blocking(fd, False)
    routes = {server_fd: (down, client_fd), client_fd: (up, server_fd)}
    start = time.monotonic()
    limit = float(spec.get("seconds") or math.inf)
    while not stop["now"]:
        now = (time.monotonic() - start) * 1000.0
        if now >= limit * 1000.0:
            break
        wake = min(down.next_event_ms(), up.next_event_ms(), limit * 1000.0)
        # select, not epoll: its timeout has microseconds (epoll rounds up to a millisecond,
        # which would add up to 1 ms per hop to every delay).
        ready, _, _ = select.select(list(routes), [], [],
                                    max(wake - now, 0.0) / 1000.0 if wake < math.inf else 0.05)
        for fd in ready:
            _read_all(fd, routes[fd][0], (time.monotonic() - start) * 1000.0)
        now = (time.monotonic() - start) * 1000.0
        for direction, out in routes.values():
            direction.service(now, lambda packet, out=out: _write(out, packet))
    return {"down": down.summary(), "up": up.summary(),
            "seconds": round(time.monotonic() - start, 3)}


def _read_all(fd: int, direction: Direction, now_ms: float) -> None:
    while True:
        try:
            packet = os.read(fd, 65536)
        except BlockingIOError:
            return
        direction.arrive(packet, now_ms)


def _write(fd: int, packet: bytes) -> None:
    try:
        os.write(fd, packet)
    except OSError:  # the receiving side is gone or its TUN queue is full: the packet is lost
        pass


def main() -> None:
    """``main()`` with argv ``SPEC.json SERVER_FD CLIENT_FD`` (the emulator starts it)."""
    spec = json.loads(Path(sys.argv[1]).read_text())
    stats = run(spec, int(sys.argv[2]), int(sys.argv[3]))
    if spec.get("stats"):
        Path(spec["stats"]).write_text(json.dumps(stats))


if __name__ == "__main__":
    main()
