"""Congestion control (Aurora / PCC-RL semantics) as a batched fluid model: N senders, each on
its own single-bottleneck link, stepped in numpy lockstep.

Semantics (PCCproject/PCC-RL's Aurora gym, ``src/gym/network_sim.py`` / ``sender_obs.py``)
------------------------------------------------------------------------------------------
* **Link** (one trace): bandwidth c(t) in packets/s (a constant, or a series in the forward
  convention that loops at its period), one-way delay D (s), queue capacity K (packets),
  random loss p. A packet is dropped at random with probability p *before* the queue, then
  tail-dropped when the queue already holds more than K - 1 packets (Aurora's
  ``queue_delay + 1/bw > K/bw``). So the backlog an arriving packet sees, Q, never exceeds
  ``K - 1``. Its RTT is ``2 D + (time to serve Q)`` (Aurora reads the link latency before
  the packet's own entry); for a constant link that is ``Q / c``, for a series the exact
  inverse of the cumulative capacity ``C(t) = integral of c``.
* **Sender**: paced at rate x (pkt/s), clipped to ``[min_rate, max_rate]`` = Aurora's
  [40, 1000]: the test links reach 1000 pkt/s, so the oracle can still match every link.
  Action: one real ``a`` (Box(-1e12, 1e12), Aurora's space); with ``a' = delta_scale * a``
  (0.025), ``x <- x (1 + a')`` if ``a' >= 0`` else ``x / (1 - a')``.
* **Monitor interval** (MI) = one env step. Its duration is 0.5 x the mean RTT of the
  previous MI; right after a reset it is 3 D, and before the first observation Aurora's two
  warm-up MIs of 3 D each run at the initial rate (they move the queue and the clock; like
  Aurora they are not recorded in the history and do not count towards the episode).
* **Fluid MI** of duration d in M = ``substeps`` equal sub-steps of dt = d / M: arrivals
  ``x dt``, random drops ``p x dt``, the rest enters the queue; ``served = C(t + dt) - C(t)``
  (exact for any bandwidth change inside a sub-step); ``Q' = Q + x (1 - p) dt - served``;
  overflow drop ``max(Q' - (K - 1), 0)``, an idle link's shortfall ``min(Q', 0)`` (capacity
  not used); ``Q = clip(Q', 0, K - 1)``. On a constant link Q moves linearly within an MI, so
  the sub-step values are exact; sub-steps matter for the RTT average and for series.
* **MI metrics**: throughput = delivered / d (pkt/s); latency = mean RTT over the MI
  (trapezoid rule over the sub-step ends: exact for a piecewise-linear queue); loss = (random
  + overflow drops) / sent; latency inflation = (mean RTT of the MI's second half - first
  half) / d; conn min latency = running min over the episode's MIs of the MI latency;
  latency ratio = latency / conn min; send ratio = x / throughput (1 when the throughput is 0
  or the ratio >= 1000).
* **Observation**: ``history`` MIs (10; Plume's Aurora used 25) of [latency inflation,
  latency ratio, send ratio], oldest first, float32, clipped to Aurora's bounds [-1, 10],
  [1, 1e4], [0, 1e3]. An empty history row is (0, 1, 1).
* **Reward** (Aurora's): ``0.001 (10 throughput - 1000 latency - 2000 loss)``; ``step``
  returns it times ``reward_scale`` (1).
* **Episode**: ``episode_mis`` (400) MIs, then ``truncated=True`` (a time limit, never
  ``terminated``: the link state is not terminal, so learners bootstrap).
* **Initial rate**: ``share x`` the link's bandwidth at the episode start, with ``share``
  in ``[init_rate_low, init_rate_high]`` (Aurora's 0.3, 1.5): training draws it uniformly
  from the env generator; test mode takes a fixed point of the same range per trace,
  ``low + (high - low) u`` with ``u`` the first 32 bits of sha256(trace id) / 2^32. Test
  episodes are thus deterministic (no noise) yet start from the training distribution of
  rates (a fixed 0.9 x bandwidth would hand a do-nothing policy a near-oracle start), and a
  trace keeps its start in any subset or order. Training episodes on a series start at a
  uniformly drawn sample of the trace; test episodes at t = 0.

Deliberate differences from PCC-RL
----------------------------------
* **Accounting at send time.** PCC-RL counts a packet in the MI in which its ACK (or loss
  notice) returns, one RTT after it was sent; here an MI reports the packets it sent, as if
  feedback were immediate. Episode averages agree with the packet-level reference
  (``plume.envs.cc.packet``, within 3 % in the tests); per-MI feedback is one RTT earlier.
* **No latency noise**: PCC-RL multiplies each link latency by U(1, 1.1) per packet; the
  fluid model has no per-packet randomness (random loss is its expectation).
* **Empty history rows** read latency ratio 1 (PCC-RL computes 0 there, outside its own
  observation bounds); observations are clipped to the bounds.
* **The fencepost**: throughput is delivered / d, PCC-RL's current ``8 bytes_acked / dur``.

Vector API: a Gymnasium ``VectorEnv`` with same-step autoreset (``plume.envs.vector``).
Finished copies report ``infos["episode"]`` with ``return`` (sum of raw rewards),
``return_transformed`` (sum of returned rewards), ``length``, ``trace``, ``throughput``
(pkt/s), ``latency`` (s) and ``loss`` (means over the episode's MIs) and ``utilisation``
(packets delivered / link capacity offered over the episode). Classic controllers read the
sender and link state through the public read-only properties ``rate``, ``link_bandwidth``,
``last_rtt``, ``last_loss``, ``last_throughput``, ``mi_duration``, ``elapsed`` and
``episode_started``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
from gymnasium import spaces

from plume.checks import FieldError, fail, finite, integer, positive
from plume.envs.cc.observation import (
    EMPTY_ROW,
    OBS_HIGH,
    OBS_LOW,
    AuroraObservation,
    change_rate,
)
from plume.envs.replay import derived_from, read_only, trace_periods
from plume.envs.single import SingleCopyEnv
from plume.envs.vector import TraceVecEnv
from plume.sampling.base import TraceSampler
from plume.traces.traceset import TraceSet

__all__ = [
    "ACTION_BOUND",
    "EMPTY_ROW",
    "OBS_HIGH",
    "OBS_LOW",
    "CcEnv",
    "CcVecEnv",
    "FluidLinks",
    "LinkTables",
    "rate_action",
]

ACTION_BOUND = 1e12
"""Aurora's action space is Box(-1e12, 1e12)."""
WARMUP_MIS = 2
RESET_MI_FACTOR = 3.0
"""The MIs right after a reset last 3 x the one-way delay."""
RTT_MI_FACTOR = 0.5
"""Later MIs last 0.5 x the previous MI's mean RTT."""
_TINY = float(np.finfo(np.float64).tiny)
_SERVE_TOL = 1e-9
"""A queue position this close (packets) to a slot end is served at that slot end: keeps
float rounding from carrying it across a following zero-bandwidth slot."""
CHANNELS = ("bandwidth", "latency", "queue", "loss")


def _unit_hash(trace_id: str) -> float:
    """A fixed number in [0, 1) per trace id (its sha256's first 32 bits / 2^32)."""
    return int(hashlib.sha256(str(trace_id).encode()).hexdigest()[:8], 16) / 2.0 ** 32


def rate_action(current, target, delta_scale: float = 0.025) -> np.ndarray:
    """The Aurora action that moves a sender from rate ``current`` to ``target`` in one step
    (the inverse of the env's multiplicative update; clipping to the rate bounds aside)."""
    current = np.asarray(current, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    up = target / current - 1.0  # a' >= 0: x (1 + a')
    down = 1.0 - current / target  # a' < 0: x / (1 - a')
    return np.where(target >= current, up, down) / delta_scale


# --------------------------------------------------------------------------------------
# Links: per-trace tables and the monitor-interval kernel
# --------------------------------------------------------------------------------------


class LinkTables:
    """What the fluid model needs of every trace of a TraceSet, built once per TraceSet object
    (:meth:`shared`) and read-only.

    ``params``: (n_traces, 4) rows [one-way delay D, queue limit K - 1, 1 - p, p]. Constant
    links keep their bandwidth in ``bandwidth``; series links keep, concatenated over traces,
    each slot's local start time, bandwidth and cumulative capacity at its start, with
    per-trace offsets that make the keys of one ``np.searchsorted`` strictly increasing
    (time keys ``start + time_offset[r]``, capacity keys ``end + capacity_offset[r]``).
    """

    @classmethod
    def shared(cls, traces: TraceSet) -> LinkTables:
        return derived_from(traces, cls, lambda: cls(traces))

    def __init__(self, traces: TraceSet) -> None:
        missing = [c for c in CHANNELS if not traces.has(c)]
        if missing:
            raise ValueError(f"TraceSet {traces.name!r} has no {', '.join(missing)} channel; a "
                             f"CC link needs {', '.join(CHANNELS)}")
        for name in ("latency", "queue", "loss"):
            if name not in traces.constants:
                raise ValueError(f"TraceSet {traces.name!r}: {name!r} must be a per-trace "
                                 "constant (time-varying delay, queue or loss is not modelled)")
        latency, queue, loss = (traces.constants[c] for c in ("latency", "queue", "loss"))
        self._check(traces, latency > 0, "a one-way latency > 0 s")
        self._check(traces, queue >= 1, "a queue of at least 1 packet")
        self._check(traces, loss < 1, "a loss rate below 1")
        self.params = np.stack([latency, queue - 1.0, 1.0 - loss, loss], axis=1)
        self.test_share = np.array([_unit_hash(i) for i in traces.trace_ids])
        self.constant = "bandwidth" in traces.constants
        self.n_traces = len(traces)
        if self.constant:
            self.bandwidth = traces.constants["bandwidth"]
            self._check(traces, self.bandwidth > 0, "a bandwidth > 0 packets/s")
            self.n_starts = np.ones(len(traces), dtype=np.int64)
            read_only(self.params, self.test_share)
        else:
            if not traces.has("time"):
                raise ValueError(f"TraceSet {traces.name!r}: a bandwidth series needs a 'time' "
                                 "series")
            self._series(traces)

    @staticmethod
    def _check(traces: TraceSet, ok: np.ndarray, what: str) -> None:
        if not np.all(ok):
            bad = traces.trace_ids[int(np.argmin(ok))]
            raise ValueError(f"TraceSet {traces.name!r}: trace {bad!r} needs {what}")

    def _series(self, traces: TraceSet) -> None:
        n = len(traces)
        valid = traces.valid_mask()
        rows = np.arange(n)
        local = traces.time - traces.time[:, :1]
        period = trace_periods(traces)
        ends = np.where(valid, np.append(local[:, 1:], np.zeros((n, 1)), axis=1), 0.0)
        ends[rows, traces.lengths - 1] = period
        bandwidth = np.where(valid, traces.bandwidth, 0.0)
        served = bandwidth * (ends - local)
        cum_end = np.cumsum(np.where(valid, served, 0.0), axis=1)
        total = cum_end[rows, traces.lengths - 1]
        self.period, self.total = period, total
        self.time_offset = np.concatenate([[0.0], np.cumsum(period + 1.0)[:-1]])
        self.capacity_offset = np.concatenate([[0.0], np.cumsum(total + 1.0)[:-1]])
        self.slot_start = local[valid]
        self.slot_bandwidth = bandwidth[valid]
        self.slot_capacity = (cum_end - served)[valid]
        self.time_keys = (local + self.time_offset[:, None])[valid]
        self.capacity_keys = (cum_end + self.capacity_offset[:, None])[valid]
        self.start_times = np.where(valid, local, 0.0)
        self.n_starts = traces.lengths.astype(np.int64)
        self.copy_rows = np.stack([period, total, self.time_offset, self.capacity_offset],
                                  axis=1)
        read_only(self.params, self.test_share, self.period, self.total, self.time_offset,
                  self.capacity_offset, self.slot_start, self.slot_bandwidth,
                  self.slot_capacity, self.time_keys, self.capacity_keys, self.start_times,
                  self.copy_rows)

    def start_time(self, rows: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Unwrapped link time at which an episode starting at sample ``starts`` begins."""
        if self.constant:
            return np.zeros(len(rows))
        return self.start_times[rows, starts]

    def bandwidth_at(self, rows: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The bandwidth (pkt/s) of traces ``rows`` at unwrapped times ``t``."""
        if self.constant:
            return self.bandwidth[rows]
        period, _, time_offset, _ = self.copy_rows[rows].T
        x = np.maximum(t - np.floor(t / period) * period, 0.0)
        slot = np.searchsorted(self.time_keys, x + time_offset, side="right") - 1
        return self.slot_bandwidth[slot]


class FluidLinks:
    """N copies' links and the fluid monitor-interval kernel (see the module docstring).

    ``assign(ids, rows)`` puts copies on traces; ``run(rate, queue, tau, dur)`` plays one MI of
    ``dur`` seconds for every copy, updating ``queue`` and ``tau`` in place and writing the MI's
    results into ``out`` rows (:data:`FluidLinks.FIELDS`). All arithmetic runs on arrays
    allocated here once, so a step allocates nothing but, on series links, the index arrays
    ``np.searchsorted`` returns.
    """

    FIELDS = ("throughput", "latency", "loss", "delivered", "capacity", "inflation")

    def __init__(self, tables: LinkTables, n: int, substeps: int) -> None:
        m = self.substeps = int(substeps)
        self.tables, self.n = tables, n
        self.params = np.zeros((4, n))
        self.delay, self.limit, self.keep, self.loss_rate = self.params
        self.out = np.zeros((len(self.FIELDS), n))
        (self.throughput, self.latency, self.loss, self.delivered, self.capacity,
         self.inflation) = self.out
        if tables.constant:
            self.bandwidth = np.zeros(n)
            self.inv_bandwidth = np.zeros(n)
        else:
            self.rows = np.zeros((4, n))  # period, total, time offset, capacity offset
            self.times = np.zeros((m + 1, n))
            self.cum = np.zeros((m + 1, n))
            self.served = np.zeros((m, n))
            self._grid = np.arange(m + 1, dtype=np.float64)[:, None]
            self._s = [np.zeros((m + 1, n)) for _ in range(3)]
            self._slot = np.zeros((m + 1, n), dtype=np.intp)
        self.steps = np.zeros((m, n))  # per sub-step queue increment, then clipped excess
        self.queue = np.zeros((m + 1, n))  # backlog at each sub-step end (row 0: start)
        self.qdelay = np.zeros((m + 1, n))
        self._scratch = np.zeros((m, n))
        self._dt, self._enter, self._sum = np.zeros(n), np.zeros(n), np.zeros(n)
        self._means = np.zeros((2, n))
        half = m // 2
        trapezoid = np.ones(m + 1)
        trapezoid[[0, -1]] = 0.5
        first = np.zeros(m + 1)
        first[: half + 1] = trapezoid[: half + 1]
        first[half] = 0.5
        second = np.zeros(m + 1)
        second[half:] = trapezoid[half:]
        second[half] = 0.5
        # Row 0: mean over the MI; row 1: mean of the second half minus the first half.
        self._weights = np.stack([trapezoid / m, (second - first) / half])

    def assign(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """Copies ``ids`` now play traces ``rows``."""
        tables = self.tables
        self.params[:, ids] = tables.params[rows].T
        if tables.constant:
            bandwidth = tables.bandwidth[rows]
            self.bandwidth[ids] = bandwidth
            self.inv_bandwidth[ids] = 1.0 / bandwidth
        else:
            self.rows[:, ids] = tables.copy_rows[rows].T

    def run(self, rate: np.ndarray, queue: np.ndarray, tau: np.ndarray,
            dur: np.ndarray) -> None:
        """One MI of ``dur`` s at ``rate`` for every copy (see the class docstring)."""
        m, dt, enter, steps, q = self.substeps, self._dt, self._enter, self.steps, self.queue
        np.multiply(dur, 1.0 / m, out=dt)
        np.multiply(rate, self.keep, out=enter)
        enter *= dt  # packets entering the queue per sub-step (before tail drop)
        if self.tables.constant:
            np.multiply(self.bandwidth, dur, out=self.capacity)
            np.multiply(self.bandwidth, dt, out=self._sum)
            np.subtract(enter, self._sum, out=steps[0])
            steps[1:] = steps[0]
        else:
            self._series_served(tau, dt)
            np.subtract(enter, self.served, out=steps)
        q[0] = queue
        limit = self.limit
        for k in range(m):  # the clipped walk, one sub-step at a time
            np.add(q[k], steps[k], out=steps[k])
            np.maximum(steps[k], 0.0, out=q[k + 1])
            np.minimum(q[k + 1], limit, out=q[k + 1])
        np.copyto(queue, q[m])
        self._drops_and_delivery(rate, dur)
        self._latency(tau, dur)
        tau += dur

    def _drops_and_delivery(self, rate: np.ndarray, dur: np.ndarray) -> None:
        """Overflow drops and delivered packets from the clipped excess of every sub-step."""
        steps, scratch = self.steps, self._scratch
        np.subtract(steps, self.queue[1:], out=steps)  # > 0: overflow; < 0: idle capacity
        np.minimum(steps, 0.0, out=scratch)
        np.add.reduce(scratch, axis=0, out=self.delivered)
        self.delivered += self.capacity
        np.maximum(steps, 0.0, out=scratch)
        np.add.reduce(scratch, axis=0, out=self.loss)  # overflow packets, for now
        np.multiply(rate, dur, out=self._sum)  # packets sent
        self.loss /= self._sum
        self.loss += self.loss_rate
        np.divide(self.delivered, dur, out=self.throughput)

    def _latency(self, tau: np.ndarray, dur: np.ndarray) -> None:
        """Mean RTT and latency inflation from the queueing delay at every sub-step end."""
        if self.tables.constant:
            np.multiply(self.queue, self.inv_bandwidth, out=self.qdelay)
        else:
            self._series_delay()
        np.dot(self._weights, self.qdelay, out=self._means)
        np.multiply(self.delay, 2.0, out=self.latency)
        self.latency += self._means[0]
        np.divide(self._means[1], dur, out=self.inflation)

    # ---------------------------------------------------------------- series links
    def _series_served(self, tau: np.ndarray, dt: np.ndarray) -> None:
        """``cum`` = C at every sub-step end, ``served`` its increments, ``capacity`` the MI's
        total (exact for bandwidth changes anywhere inside a sub-step)."""
        times = self.times
        np.multiply(self._grid, dt, out=times)
        times += tau
        self._capacity_at(times, out=self.cum)
        np.subtract(self.cum[1:], self.cum[:-1], out=self.served)
        np.subtract(self.cum[-1], self.cum[0], out=self.capacity)

    def _capacity_at(self, t: np.ndarray, out: np.ndarray) -> None:
        """``out`` = C(t), the packets the link can serve from its time 0 to unwrapped t."""
        tab, (k, x, s), slot = self.tables, self._s, self._slot
        period, total, time_offset, _ = self.rows
        np.divide(t, period, out=k)
        np.floor(k, out=k)
        np.multiply(k, period, out=x)
        np.subtract(t, x, out=x)
        np.maximum(x, 0.0, out=x)  # rounding must not move x into the previous trace's row
        np.add(x, time_offset, out=s)
        slot[...] = np.searchsorted(tab.time_keys, s, side="right")
        slot -= 1
        tab.slot_start.take(slot, out=s, mode="clip")
        x -= s
        tab.slot_bandwidth.take(slot, out=s, mode="clip")
        x *= s
        tab.slot_capacity.take(slot, out=s, mode="clip")
        x += s
        np.multiply(k, total, out=out)
        out += x

    def _series_delay(self) -> None:
        """``qdelay`` = time to serve the backlog at each sub-step end: the inverse of C."""
        tab, (k, y, s), slot = self.tables, self._s, self._slot
        period, total, _, capacity_offset = self.rows
        np.add(self.cum, self.queue, out=y)  # position of the backlog's last packet
        y -= _SERVE_TOL
        np.divide(y, total, out=k)
        np.ceil(k, out=k)
        k -= 1.0
        np.multiply(k, total, out=s)
        y -= s  # in (0, total] up to rounding, clamped so the search stays in the row
        np.maximum(y, _TINY, out=y)
        np.minimum(y, total, out=y)
        np.add(y, capacity_offset, out=s)
        slot[...] = np.searchsorted(tab.capacity_keys, s, side="left")
        tab.slot_capacity.take(slot, out=s, mode="clip")
        y -= s
        tab.slot_bandwidth.take(slot, out=s, mode="clip")
        y /= s
        tab.slot_start.take(slot, out=s, mode="clip")
        y += s
        np.multiply(k, period, out=s)
        y += s  # the unwrapped time at which the backlog is served
        np.subtract(y, self.times, out=self.qdelay)
        np.maximum(self.qdelay, 0.0, out=self.qdelay)


# --------------------------------------------------------------------------------------
# The environment
# --------------------------------------------------------------------------------------


class CcVecEnv(TraceVecEnv):
    """N Aurora senders in lockstep; Gymnasium vector API with same-step autoreset.

    Args:
        traces: links with ``bandwidth`` (a constant or a series with ``time``), ``latency``,
            ``queue`` and ``loss`` constants (units in ``plume.traces.cc.UNITS``).
        n_envs: copies; defaults to ``len(traces)`` in test mode (required in train mode).
        sampler: picks each episode's trace (default: uniform in train, sequential in test).
        mode: ``"train"`` (random initial rate and series start, sampler updates) or
            ``"test"`` (deterministic: a fixed initial rate per trace, t = 0, no updates).
        seed: int, ``np.random.SeedSequence`` or None (``plume.envs.vector``).
        history: MIs in the observation (10; Plume's Aurora: 25).
        episode_mis: MIs per episode (400).
        substeps: fluid sub-steps per MI (even, >= 2; 8).
        min_rate, max_rate: sending-rate clip in pkt/s (Aurora's 40, 1000).
        delta_scale: action scale (Aurora's 0.025).
        init_rate_low, init_rate_high: range of the initial rate / bandwidth (training: a
            uniform draw; test: a fixed point per trace, see the module docstring).
        reward_scale: ``step`` returns the Aurora reward times this.
    """

    def __init__(
        self,
        traces: TraceSet,
        n_envs: int | None = None,
        sampler: TraceSampler | None = None,
        *,
        mode: str = "train",
        seed: int | np.random.SeedSequence | None = None,
        history: int = 10,
        episode_mis: int = 400,
        substeps: int = 8,
        min_rate: float = 40.0,
        max_rate: float = 1000.0,
        delta_scale: float = 0.025,
        init_rate_low: float = 0.3,
        init_rate_high: float = 1.5,
        reward_scale: float = 1.0,
    ) -> None:
        self._setup(traces, n_envs, sampler, mode)
        self.history = integer("history", history, 1)
        self.episode_mis = integer("episode_mis", episode_mis, 1)
        self.substeps = integer("substeps", substeps, 2)
        if self.substeps % 2:
            fail("substeps", substeps, "even (the MI is split in halves)")
        self.min_rate, self.max_rate = positive("min_rate", min_rate), positive(
            "max_rate", max_rate)
        self.delta_scale = positive("delta_scale", delta_scale)
        self.init_rate = (positive("init_rate_low", init_rate_low),
                          positive("init_rate_high", init_rate_high))
        for (low, lo), (high, hi) in ((("min_rate", min_rate), ("max_rate", max_rate)),
                                      (("init_rate_low", init_rate_low),
                                       ("init_rate_high", init_rate_high))):
            if lo > hi:
                raise FieldError(low, f"{lo} exceeds {high} {hi}")
        self.reward_scale = finite("reward_scale", reward_scale)
        self._tables = LinkTables.shared(traces)
        self._same_starts = bool(np.all(self._tables.n_starts == self._tables.n_starts[0]))

        observation = spaces.Box(np.tile(OBS_LOW, self.history).astype(np.float32),
                                 np.tile(OBS_HIGH, self.history).astype(np.float32),
                                 dtype=np.float32)
        self._set_spaces(observation, spaces.Box(-ACTION_BOUND, ACTION_BOUND, (1,), np.float32))
        self._allocate()
        self._seed(seed)

    # ------------------------------------------------------------------ controller state
    def _view(self, array: np.ndarray) -> np.ndarray:
        view = array.view()
        view.setflags(write=False)
        return view

    @property
    def rate(self) -> np.ndarray:
        """(N,) sending rate (pkt/s) of the last MI, or the initial rate at an episode start
        (read-only view, valid until the next step)."""
        return self._view(self._rate)

    @property
    def link_bandwidth(self) -> np.ndarray:
        """(N,) bandwidth (pkt/s) of each copy's link now, at the start of the next MI."""
        return self._tables.bandwidth_at(self._trace, self._tau)

    @property
    def last_rtt(self) -> np.ndarray:
        """(N,) mean RTT (s) of the last MI (at an episode start: the last warm-up MI)."""
        return self._view(self._link.latency)

    @property
    def last_loss(self) -> np.ndarray:
        """(N,) loss ratio of the last MI (at an episode start: the last warm-up MI)."""
        return self._view(self._link.loss)

    @property
    def last_throughput(self) -> np.ndarray:
        """(N,) throughput (pkt/s) of the last MI (at an episode start: the last warm-up MI)."""
        return self._view(self._link.throughput)

    @property
    def mi_duration(self) -> np.ndarray:
        """(N,) duration (s) of the next MI."""
        return self._view(self._dur)

    @property
    def elapsed(self) -> np.ndarray:
        """(N,) seconds simulated since the episode's first observation."""
        return self._view(self._elapsed)

    @property
    def episode_started(self) -> np.ndarray:
        """(N,) True where the current observation is the first of an episode."""
        return self._view(self._started)

    def last_step(self) -> dict[str, np.ndarray]:
        """Per-copy components of the last step (copies): rate, throughput, latency, loss,
        latency inflation, MI duration, raw reward and the step's trace index."""
        link = self._link
        return {"rate": self._rate.copy(), "throughput": link.throughput.copy(),
                "latency": link.latency.copy(), "loss": link.loss.copy(),
                "inflation": link.inflation.copy(), "duration": self._last_dur.copy(),
                "reward": self._raw.copy(), "trace": self._last_trace.copy()}

    # ------------------------------------------------------------------ setup
    def _allocate(self) -> None:
        n = self.num_envs
        self._link = FluidLinks(self._tables, n, self.substeps)
        self._state = np.zeros((5, n))
        self._rate, self._queue, self._tau, self._dur, self._elapsed = self._state
        # Episode sums: return, return_transformed, then the link's first five FIELDS.
        self._sums = np.zeros((7, n))
        self._ret, self._ret_t = self._sums[:2]
        self._istate = np.zeros((2, n), dtype=np.int64)
        self._eplen, self._trace = self._istate
        self._rewbuf = np.zeros((n, self.episode_mis)) if self._train else None
        self._rewflat = None if self._rewbuf is None else self._rewbuf.reshape(-1)
        self._rew_rows = np.arange(n, dtype=np.int64) * self.episode_mis
        self._started = np.zeros(n, dtype=bool)
        self._raw, self._last_dur = np.zeros(n), np.zeros(n)
        self._last_trace = np.zeros(n, dtype=np.int64)
        self._a, self._factor, self._s1 = np.zeros(n), np.zeros(n), np.zeros(n)
        self._neg, self._done = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        self._idx = np.zeros(n, dtype=np.int64)
        self._observer = AuroraObservation(n, self.history)

    # ------------------------------------------------------------------ gym API
    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                          dict[str, Any]]:
        """One MI for every copy; finished copies restart in the same call."""
        self._apply_actions(actions)
        link = self._link
        np.copyto(self._last_dur, self._dur)
        link.run(self._rate, self._queue, self._tau, self._dur)
        self._elapsed += self._last_dur
        np.multiply(link.latency, RTT_MI_FACTOR, out=self._dur)
        self._observe()
        rt = self._reward()
        self._account(rt)
        self._started.fill(False)
        done = np.equal(self._eplen, self.episode_mis, out=self._done)
        infos: dict[str, Any] = {}
        if done.any():
            self._finish(done, infos)
        infos["trace"] = self._trace.copy()
        infos["_trace"] = np.ones(self.num_envs, dtype=bool)
        return (self._observer.obs.copy(), rt, np.zeros(self.num_envs, dtype=bool), done.copy(),
                infos)

    def _apply_actions(self, actions: Any) -> None:
        """Aurora's multiplicative rate update, then the rate clip."""
        if self._needs_reset:
            raise RuntimeError("call reset() before step() (and after an episode ends when "
                               "autoreset is off)")
        a = np.asarray(actions)
        if a.size != self.num_envs:
            raise ValueError(f"actions must have shape ({self.num_envs}, 1) or "
                             f"({self.num_envs},), got {a.shape}")
        if a.dtype.kind not in "fiu":
            raise ValueError(f"actions must be real numbers, got dtype {a.dtype}")
        np.multiply(a.reshape(self.num_envs), self.delta_scale, out=self._a)
        a = self._a
        if not np.isfinite(np.add.reduce(a)):
            raise ValueError("actions must be finite")
        change_rate(self._rate, a, self.min_rate, self.max_rate, self._factor, self._neg)

    def _observe(self) -> None:
        """The MI's observation row, clipped to the bounds, appended to the history."""
        link = self._link
        self._observer.push(link.inflation, link.latency, link.throughput, self._rate)

    def _reward(self) -> np.ndarray:
        """Aurora's reward into ``_raw``; returns the scaled reward as a fresh array."""
        link, raw, s1 = self._link, self._raw, self._s1
        np.multiply(link.throughput, 10.0, out=raw)
        np.multiply(link.latency, 1000.0, out=s1)
        raw -= s1
        np.multiply(link.loss, 2000.0, out=s1)
        raw -= s1
        raw *= 0.001
        return raw * self.reward_scale

    def _account(self, rt: np.ndarray) -> None:
        self._ret += self._raw
        self._ret_t += rt
        self._sums[2:] += self._link.out[:5]
        if self._train:
            np.add(self._rew_rows, self._eplen, out=self._idx)
            self._rewflat.put(self._idx, rt, mode="clip")
        np.copyto(self._last_trace, self._trace)
        self._eplen += 1

    def _observation(self) -> np.ndarray:
        return self._observer.obs

    def _episode_fields(self, mask: np.ndarray) -> dict[str, np.ndarray]:
        sums = np.where(mask, self._sums, 0.0)
        length = np.where(mask, self._eplen, 0)
        per_mi = sums[2:5] / np.maximum(length, 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            utilisation = np.where(mask, sums[5] / sums[6], 0.0)
        return {"return": sums[0], "return_transformed": sums[1], "length": length,
                "trace": np.where(mask, self._trace, 0), "throughput": per_mi[0],
                "latency": per_mi[1], "loss": per_mi[2], "utilisation": utilisation}

    def _restart(self, ids: np.ndarray) -> None:
        """New episodes for copies ``ids``: trace, start, initial rate, Aurora's warm-up."""
        tables = self._tables
        new, start = self._draw(ids, tables.n_starts, self._same_starts)
        tau = tables.start_time(new, start)
        low, high = self.init_rate
        if self._train:
            share = self._draws.uniform(low, high, ids)
        else:
            share = low + (high - low) * tables.test_share[new]
        rate = np.clip(share * tables.bandwidth_at(new, tau), self.min_rate, self.max_rate)
        warm = FluidLinks(tables, len(ids), self.substeps)
        warm.assign(np.arange(len(ids)), new)
        queue, dur = np.zeros(len(ids)), RESET_MI_FACTOR * warm.delay
        for _ in range(WARMUP_MIS):
            warm.run(rate, queue, tau, dur)
        self._link.assign(ids, new)
        self._link.out[:, ids] = warm.out
        self._state[:, ids] = [rate, queue, tau, dur, np.zeros(len(ids))]
        self._sums[:, ids] = 0.0
        self._eplen[ids] = 0
        self._trace[ids] = new
        self._started[ids] = True
        self._observer.restart(ids)


class CcEnv(SingleCopyEnv):
    """Single-copy CC env (a :class:`CcVecEnv` of one copy, autoreset off). Takes the same
    arguments except ``n_envs``; ``step`` takes a (1,) float action and returns the scaled
    Aurora reward; ``info`` holds the step's ``last_step()`` components and, at the episode's
    end, an ``episode`` dict."""

    def __init__(self, traces: TraceSet, sampler: TraceSampler | None = None, **kwargs: Any):
        if "n_envs" in kwargs:
            raise TypeError("CcEnv is a single copy; use CcVecEnv for n_envs")
        super().__init__(CcVecEnv(traces, 1, sampler, **kwargs))
