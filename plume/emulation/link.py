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

**Lateness.** The schedule above is computed in the link's own clock, so a loop that wakes late
still gives each packet the opportunity it was due at (bytes per opportunity and per second
follow the trace); what it cannot undo is the write itself happening late. Every delivered
packet's lateness (the loop's clock when it serves the opportunity, just before the write,
minus the opportunity's time; >= 0) goes into a fixed-size histogram (:class:`Lateness`: 10 us
bins to 100 ms, one open bin above, the exact maximum), written with the counters (count, p50,
p90, p99 and max in ms, the fraction later than the tolerance, and the histogram itself so that
a run's sessions merge exactly). A link whose p99 lateness exceeds ``LATENESS_TOLERANCE_MS`` fell
behind its trace: its measurements are biased (a loaded machine) and runs say so. Arrivals are
stamped when the loop reads them, so a late loop delays arrivals by about as much; that part
is not measured separately.
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

__all__ = ["LATENESS_TOLERANCE_MS", "OPPORTUNITY_BYTES", "Direction", "Lateness", "LinkSpec",
           "Schedule", "run"]

OPPORTUNITY_BYTES = 1500
"""Bytes one delivery opportunity carries (an MTU-sized IP packet; the TUN devices carry
no packet-information header, so Mahimahi's 1504 counts the same payload)."""
BITS_PER_OPPORTUNITY = OPPORTUNITY_BYTES * 8
LATENESS_TOLERANCE_MS = 1.0
"""p99 lateness (ms) above which a link fell behind. Traces place opportunities on whole
milliseconds (Mahimahi's format): up to 1 ms late, a packet still leaves before the next
opportunity of a 12 Mbit/s trace (one per ms), within the trace's own resolution; later, delays
and rates are off by more than that resolution. p99 so that rare hiccups (one packet in a
hundred) do not flag a run, while a loop that is late for many packets does."""
LATENESS_BIN_MS = 0.01
"""Histogram resolution: 10 us, a hundredth of the tolerance; a quantile reads as the upper
edge of its bin (never below the true value, at most 10 us above)."""
LATENESS_BINS = 10_000
"""Bins of ``LATENESS_BIN_MS`` up to 100 ms (an RTT of Pensieve's setting: a link that late is
broken anyway); one open bin above it, whose quantiles read as the exact maximum."""
_OVERFLOW = LATENESS_BINS + 1


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
        return cls(np.floor(at * 1000.0).astype(np.int64), max(round(period_s * 1000), 1))

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
class Lateness:
    """Fixed-size histogram of per-packet lateness: bin 0 holds 0 ms, bin k in
    1..LATENESS_BINS holds ((k-1) x LATENESS_BIN_MS, k x LATENESS_BIN_MS], the last bin
    everything above; plus the exact count and maximum."""

    counts: list[int] = field(default_factory=lambda: [0] * (_OVERFLOW + 1))
    count: int = 0
    max_ms: float = 0.0

    def add(self, lateness_ms: float) -> None:
        lateness_ms = max(lateness_ms, 0.0)
        # round() first: 0.07 / 0.01 is 7.000000000000001 in floating point, bin 7 not 8.
        self.counts[min(math.ceil(round(lateness_ms / LATENESS_BIN_MS, 6)), _OVERFLOW)] += 1
        self.count += 1
        self.max_ms = max(self.max_ms, lateness_ms)

    def quantile_ms(self, percent: int) -> float | None:
        """Nearest rank: the upper edge of the bin holding the ceil(percent x count / 100)-th
        smallest lateness, at most the maximum (None without packets)."""
        if self.count == 0:
            return None
        rank = max((percent * self.count + 99) // 100, 1)
        k = int(np.searchsorted(np.cumsum(self.counts), rank, side="left"))
        return self.max_ms if k == _OVERFLOW else min(k * LATENESS_BIN_MS, self.max_ms)

    def later_than(self, tolerance_ms: float) -> int:
        """Packets later than ``tolerance_ms`` (rounded up to the bin's 10 us)."""
        first = math.ceil(round(tolerance_ms / LATENESS_BIN_MS, 6)) + 1
        return int(sum(self.counts[min(first, _OVERFLOW):]))

    def summary(self, tolerance_ms: float = LATENESS_TOLERANCE_MS) -> dict[str, Any]:
        """count, p50/p90/p99/max (ms), the fraction later than ``tolerance_ms`` and whether
        p99 is within it (None without packets: nothing was measured)."""
        p = {q: self.quantile_ms(q) for q in (50, 90, 99)}
        shown = {f"p{q}_ms": None if v is None else round(v, 3) for q, v in p.items()}
        return {"count": self.count, **shown, "max_ms": round(self.max_ms, 3),
                "late_fraction": self.later_than(tolerance_ms) / self.count if self.count
                else 0.0, "tolerance_ms": tolerance_ms,
                "within_tolerance": None if p[99] is None else bool(p[99] <= tolerance_ms)}

    def to_json(self) -> dict[str, Any]:
        """The histogram, sparse (``[bin, count]`` pairs), to merge runs exactly."""
        return {"bin_ms": LATENESS_BIN_MS, "max_ms": self.max_ms,
                "histogram": [[k, c] for k, c in enumerate(self.counts) if c]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Lateness:
        if data.get("bin_ms") != LATENESS_BIN_MS:
            raise ValueError(f"a lateness histogram of {data.get('bin_ms')} ms bins, "
                             f"expected {LATENESS_BIN_MS}")
        lateness = cls(max_ms=float(data["max_ms"]))
        for k, c in data["histogram"]:
            lateness.counts[int(k)] += int(c)
            lateness.count += int(c)
        return lateness

    @classmethod
    def merged(cls, parts: list[Lateness]) -> Lateness:
        """One histogram of all of ``parts``' packets (exact: bins add)."""
        total = cls()
        for part in parts:
            total.counts = [a + b for a, b in zip(total.counts, part.counts)]
            total.count += part.count
            total.max_ms = max(total.max_ms, part.max_ms)
        return total


@dataclass
class Direction:
    """One direction's state under its ``spec``: the delay line, the droptail queue, the
    packet in transit, the next opportunity and the lateness of its deliveries (see the
    module docstring)."""

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
    lateness: Lateness = field(default_factory=Lateness)

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
        writes a packet out, now: each delivered packet is ``now_ms`` minus its opportunity
        late). Opportunities with nothing to send are lost."""
        while (t := self.opportunity_at(self.next_index)) <= now_ms:
            while self.delayed and self.delayed[0][0] <= t:
                self._enqueue(self.delayed.popleft()[1])
            if self.queue or self.transit_left:
                self._use_opportunity(t, deliver, now_ms)
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

    def _use_opportunity(self, at_ms: int, deliver, now_ms: float) -> None:
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
                self.lateness.add(now_ms - at_ms)

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

    def summary(self, tolerance_ms: float = LATENESS_TOLERANCE_MS) -> dict[str, Any]:
        """The counters, bytes per second, and the lateness summary with its histogram."""
        return {**self.counts, "bytes_per_second": self.per_second,
                "lateness": {**self.lateness.summary(tolerance_ms), **self.lateness.to_json()}}


def run(spec: dict[str, Any], server_fd: int, client_fd: int) -> dict[str, Any]:
    """Move packets between the two TUN descriptors until SIGTERM (or ``spec["seconds"]``);
    returns the counters, per direction and the lateness of both directions together
    (against ``spec["lateness_tolerance_ms"]``)."""
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
    tolerance = float(spec.get("lateness_tolerance_ms") or LATENESS_TOLERANCE_MS)
    return {"down": down.summary(tolerance), "up": up.summary(tolerance),
            "lateness": Lateness.merged([down.lateness, up.lateness]).summary(tolerance),
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
