"""A packet-level, event-driven reference of one PCC-RL sender on one link, in plain Python.

It follows PCC-RL's ``network_sim.py`` event loop literally, so that the batched fluid model
(``sim.py``) can be checked against it (tests: episode means within 3 %). It is slow (one
Python event per packet) and used only for validation.

* The sender is paced: its first packet leaves 1 / rate after the start, and each send
  schedules the next one 1 / rate later, at the rate of that moment.
* On entry to the bottleneck a packet first reads the link latency ``D + queueing delay``
  (the time to serve the backlog ahead of it), then is dropped at random with probability p,
  then tail-dropped if the backlog already holds more than K - 1 packets; else it joins the
  queue. Its ACK (or loss notice) returns ``2 D + queueing delay`` after the send.
* The backlog is held in packets and drained by the cumulative capacity C(t) of the link
  (``Q(t) = max(W - C(t), 0)`` with W the capacity position of the backlog's last packet),
  so a time-varying bandwidth drains it exactly; for a constant link this is PCC-RL's
  queue-delay bookkeeping (``Q / bw``).
* A monitor interval runs events while the clock is before its end (the event that crosses
  it is still processed, as PCC-RL); it counts packets sent, acknowledged (with their RTT
  samples) and lost **when their ACK or loss notice arrives**. Its metrics: throughput =
  acked / duration, latency = mean RTT sample (0 without samples), loss = lost / (lost +
  acked), send rate = sent / duration.
* :meth:`PacketLink.reset` runs PCC-RL's two warm-up MIs of 3 D; the first step's MI lasts
  3 D, every later one 0.5 x the previous MI's latency (unchanged when it had no samples).
* No latency noise (PCC-RL's U(1, 1.1) per-packet factor), matching the fluid model.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from dataclasses import dataclass

__all__ = ["Capacity", "MonitorInterval", "PacketLink"]


class Capacity:
    """The cumulative capacity C(t) of a link and its inverse, for a constant bandwidth or a
    looping forward-convention series (sample j holds on ``[time[j], time[j+1])``, the last
    until ``period``)."""

    def __init__(self, bandwidth: float | list[float], time: list[float] | None = None,
                 period: float | None = None) -> None:
        if time is None:
            self.starts, self.bandwidth, self.period = [0.0], [float(bandwidth)], None
            self.cum, self.total = [0.0], None
            return
        self.starts = [float(t) - float(time[0]) for t in time]
        self.bandwidth = [float(b) for b in bandwidth]
        self.period = float(period)
        ends = self.starts[1:] + [self.period]
        self.cum = [0.0]
        for start, end, bw in zip(self.starts, ends, self.bandwidth):
            self.cum.append(self.cum[-1] + bw * (end - start))
        self.total = self.cum.pop()
        self.ends = self.cum[1:] + [self.total]

    def at(self, t: float) -> float:
        """Packets the link can serve between its time 0 and ``t``."""
        if self.period is None:
            return self.bandwidth[0] * t
        laps, x = divmod(t, self.period)
        j = bisect.bisect_right(self.starts, x) - 1
        return laps * self.total + self.cum[j] + self.bandwidth[j] * (x - self.starts[j])

    def time_of(self, position: float) -> float:
        """The earliest time by which ``position`` packets have been served."""
        if self.period is None:
            return position / self.bandwidth[0]
        laps = math.ceil(position / self.total) - 1
        y = position - laps * self.total
        j = bisect.bisect_left(self.ends, y)
        while self.bandwidth[j] == 0:  # a flat stretch: served when the link comes back
            j += 1
        return laps * self.period + self.starts[j] + (y - self.cum[j]) / self.bandwidth[j]

    def bandwidth_at(self, t: float) -> float:
        if self.period is None:
            return self.bandwidth[0]
        return self.bandwidth[bisect.bisect_right(self.starts, t % self.period) - 1]


@dataclass
class MonitorInterval:
    """What one MI counted and its metrics."""

    duration: float
    sent: int
    acked: int
    lost: int
    rtt_samples: list[float]

    @property
    def throughput(self) -> float:
        return self.acked / self.duration

    @property
    def send_rate(self) -> float:
        return self.sent / self.duration

    @property
    def latency(self) -> float:
        return sum(self.rtt_samples) / len(self.rtt_samples) if self.rtt_samples else 0.0

    @property
    def loss(self) -> float:
        total = self.lost + self.acked
        return self.lost / total if total else 0.0


class PacketLink:
    """One paced sender on one bottleneck link (see the module docstring).

    Args:
        capacity: the link's :class:`Capacity`.
        latency: one-way delay D (s).
        queue: queue capacity K (packets).
        loss: random loss probability p.
        rate: initial sending rate (pkt/s).
        seed: seed of the random-loss draws.
        min_rate, max_rate, delta_scale: Aurora's rate clip and action scale.
    """

    def __init__(self, capacity: Capacity, latency: float, queue: float, loss: float,
                 rate: float, seed: int = 0, min_rate: float = 40.0, max_rate: float = 1000.0,
                 delta_scale: float = 0.025) -> None:
        self.capacity, self.delay, self.queue_size, self.loss_rate = (
            capacity, latency, queue, loss)
        self.min_rate, self.max_rate, self.delta_scale = min_rate, max_rate, delta_scale
        self.rate = min(max(rate, min_rate), max_rate)
        self.random = random.Random(seed)
        self.now = 0.0
        self.tail = 0.0  # capacity position W of the backlog's last packet
        self.events: list[tuple[float, int, str, float]] = []
        self.serial = 0
        self.run_dur = 3.0 * latency
        self._push(1.0 / self.rate, "send", 0.0)

    def _push(self, time: float, kind: str, rtt: float) -> None:
        self.serial += 1  # ties keep their order
        heapq.heappush(self.events, (time, self.serial, kind, rtt))

    def backlog(self, t: float) -> float:
        """Packets queued at time ``t``."""
        return max(self.tail - self.capacity.at(t), 0.0)

    def reset(self) -> None:
        """PCC-RL's two warm-up MIs before the first observation (not reported)."""
        for _ in range(2):
            self.run(self.run_dur)

    def step(self, action: float) -> MonitorInterval:
        """Apply an Aurora action, play one MI, set the next MI's duration."""
        delta = self.delta_scale * action
        rate = self.rate * (1.0 + delta) if delta >= 0 else self.rate / (1.0 - delta)
        self.rate = min(max(rate, self.min_rate), self.max_rate)
        mi = self.run(self.run_dur)
        if mi.latency > 0:
            self.run_dur = 0.5 * mi.latency
        return mi

    def run(self, duration: float) -> MonitorInterval:
        """Process events until the clock passes ``now + duration``."""
        start, end = self.now, self.now + duration
        sent = acked = lost = 0
        samples: list[float] = []
        while self.now < end:
            time, _, kind, rtt = heapq.heappop(self.events)
            self.now = time
            if kind == "send":
                sent += 1
                self._enter(time)
                self._push(time + 1.0 / self.rate, "send", 0.0)
            elif kind == "ack":
                acked += 1
                samples.append(rtt)
            else:
                lost += 1
        return MonitorInterval(self.now - start, sent, acked, lost, samples)

    def _enter(self, t: float) -> None:
        """A packet reaches the bottleneck at ``t``: latency read first, then the drops."""
        served = self.capacity.at(t)
        backlog = max(self.tail - served, 0.0)
        queue_delay = self.capacity.time_of(served + backlog) - t if backlog > 0 else 0.0
        rtt = 2.0 * self.delay + max(queue_delay, 0.0)
        if self.random.random() < self.loss_rate or backlog + 1.0 > self.queue_size:
            self._push(t + rtt, "lost", rtt)
            return
        self.tail = served + backlog + 1.0
        self._push(t + rtt, "ack", rtt)
