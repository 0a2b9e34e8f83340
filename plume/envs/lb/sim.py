"""Park's load balancing, N copies stepped in numpy lockstep (``env=lb``).

Semantics: exactly those of Park's ``load_balance`` as :mod:`plume.envs.lb.reference` writes
them out (park-project/park), replaying a trace's job sequence instead of drawing one:

* One step = one job. The observation shows the servers when job ``j`` arrives at
  ``t_j = sum(interarrival[:j + 1])``; the action (``Discrete(S)``, S = 10 by default) is the
  server it joins. Servers are FIFO and non-preemptive with Park's rates
  ``[0.15, 0.25, ..., 1.05]``: the job starts at ``max(t_j, server's last finish)`` and needs
  ``int(size / rate)`` time units.
* Reward of step ``j``: minus the integral of the number of jobs in the system over
  ``[t_j, t_{j+1}]``. The last step drains the system (its interval runs until every job is
  done), so an episode's rewards add up to minus the sum of job completion times (JCT =
  finish - arrival); ``mean_jct = -return / jobs``. Completions come before arrivals on ties.
* Observation (11 float32 by default): per server Park's load, ``sum(sizes of queued jobs) +
  (finish - now)`` of the running one (work units plus time units: Park's quirk, kept), each
  clipped at ``obs_high`` (5e5), then the arriving job's size (clipped); all multiplied by
  ``obs_scale``. The episode's final observation is all zeros (drained servers, no job).
* ``step`` returns ``reward_scale`` x the reward; the episode's ``return`` is the raw sum.
* An episode replays a whole trace from its first job, in training too: the trace is one job
  sequence whose queues build up from empty servers, and a random start would replace its
  first jobs' load by an empty system (a different, lighter regime). Plume replays whole
  sequences.

Implementation (no per-slot recomputation): a job's finish time is known when it is
assigned, so the step ``p`` at whose end it leaves the system (the last arrival before it
finishes: ``t_p < finish <= t_{p+1}``, or the draining last step) is found then by one
``searchsorted`` in the traces' arrival times, and written into a per-copy **calendar**: a
count per (step, server) and the job's share of step ``p``'s integral, ``finish - t_p``. A
step's reward is then ``-(active x (t_{j+1} - t_j) + calendar partials of j)``, with
``active`` the jobs whose departure step lies beyond ``j``. Per server the env keeps the jobs
ever assigned, the jobs departed, the total size assigned and the last finish time; a
**ring** of ``finish - cumulative size`` per (copy, server) holds what the head (running)
job's term needs: ``load = total size + ring[head] - now`` on a busy server. The ring holds
the jobs in the system; before it could overflow its capacity doubles (entries are re-laid by
their job number), so no job is ever dropped. Everything is float64 on integers, hence
exact (checked against the reference in the tests).

Vector API: a ``gymnasium.vector.VectorEnv`` with same-step autoreset (``plume.envs.vector``):
``infos["episode"]`` holds ``return`` (raw), ``return_transformed`` (sum of the returned
rewards), ``length`` (jobs), ``trace``, ``mean_jct``, ``mean_wait`` (time before service),
``max_queue`` (most jobs at one server when a job joined, itself included) and Gymnasium's
``r``, ``l``, ``t``. The public read-only state (:meth:`LbVecEnv.queue_lengths`,
:meth:`LbVecEnv.work_left`, :meth:`LbVecEnv.service_times`, ``job_index``, ``job_size``,
``now``, ``service_rates``) is what the classic controllers bind to.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from plume.checks import fail, positive
from plume.envs.lb.observation import park_observation
from plume.envs.lb.reference import OBS_HIGH
from plume.envs.single import SingleCopyEnv
from plume.envs.vector import TraceVecEnv
from plume.sampling.base import TraceSampler
from plume.traces.lb import PARK_RATES
from plume.traces.traceset import TraceSet

__all__ = ["OBS_HIGH", "JobTables", "LbEnv", "LbVecEnv"]

RING_CAPACITY = 32
"""Initial jobs per (copy, server) ring; doubled on demand."""
_EXACT = 2.0 ** 53  # float64 holds every integer below this exactly


class JobTables:
    """Per-trace look-up tables of a TraceSet, built once and shared by the copies.

    Rows are ``width = max jobs + 1`` wide, so a flat index ``trace * width + j`` addresses
    job ``j`` of a trace in every table: ``arrival`` (arrival times, padded with the last
    one, so the step after the last job has a zero-length interval), ``size`` (padded with 0)
    and ``keys`` (``trace * span + arrival``, padded with ``last arrival + 1``: one sorted
    array in which a single ``searchsorted`` finds, for every copy at once, the first job of
    its own trace arriving at or after a time)."""

    def __init__(self, traces: TraceSet) -> None:
        n, lengths = len(traces), traces.lengths.astype(np.int64)
        width = int(lengths.max()) + 1
        valid = np.arange(width)[None, :] < lengths[:, None]  # the last column is padding
        gaps, sizes = (self._integers(traces, key, valid) for key in ("interarrival", "job_size"))
        arrival = np.cumsum(gaps, axis=1)
        last = arrival[np.arange(n), lengths - 1]
        arrival = np.where(valid, arrival, last[:, None])
        self.span = float(last.max()) + 2.0
        if n * self.span >= _EXACT:
            raise ValueError(f"TraceSet {traces.name!r}: arrival times up to {last.max():g} "
                             f"over {n} traces exceed the exact float64 range")
        keys = np.where(valid, arrival, last[:, None] + 1.0) + self.span * np.arange(n)[:, None]
        self.width, self.lengths, self.last = width, lengths, last
        self.arrival, self.size, self.keys = arrival.ravel(), sizes.ravel(), keys.ravel()
        for array in (self.arrival, self.size, self.keys, self.last, self.lengths):
            array.setflags(write=False)

    @staticmethod
    def _integers(traces: TraceSet, key: str, valid: np.ndarray) -> np.ndarray:
        """Series ``key`` as (n, width) with zeros past each trace; integers checked."""
        values = np.zeros(valid.shape)
        values[:, :-1] = traces.series[key][:, : valid.shape[1] - 1]
        values *= valid
        bad = np.any(values != np.floor(values), axis=1)
        if bad.any():
            trace = str(traces.trace_ids[np.argmax(bad)])
            raise ValueError(f"TraceSet {traces.name!r}: trace {trace!r} has a non-integer "
                             f"{key} (Park's times and sizes are integers)")
        return values


class LbVecEnv(TraceVecEnv):
    """N load-balancing copies in lockstep (module docstring).

    Args:
        traces: job sequences with series ``interarrival`` and ``job_size`` (integers).
        n_envs: copies; defaults to ``len(traces)`` in test mode (required in train mode).
        sampler: picks each episode's trace (default: uniform in train, sequential in test).
        mode: ``"train"`` (sampler updates) or ``"test"``; the dynamics are the same.
        seed: int, ``np.random.SeedSequence`` or None (``plume.envs.vector``).
        service_rates: work units per time unit of each server (Park's 10 by default).
        reward_scale: factor on the rewards ``step`` returns (the episode ``return`` is raw).
        obs_scale: factor on the observation (1 = Park's raw loads and sizes).
        obs_high: clipping bound of the raw observation (Park's 5e5).
    """

    def __init__(
        self,
        traces: TraceSet,
        n_envs: int | None = None,
        sampler: TraceSampler | None = None,
        *,
        mode: str = "train",
        seed: int | np.random.SeedSequence | None = None,
        service_rates=PARK_RATES,
        reward_scale: float = 1.0,
        obs_scale: float = 1.0,
        obs_high: float = OBS_HIGH,
    ) -> None:
        self._setup(traces, n_envs, sampler, mode)
        rates = np.asarray(service_rates, dtype=np.float64)
        if rates.ndim != 1 or rates.size < 1 or not np.all(np.isfinite(rates) & (rates > 0)):
            fail("service_rates", service_rates, "positive numbers")
        self.reward_scale = positive("reward_scale", reward_scale)
        self.obs_scale = positive("obs_scale", obs_scale)
        self.obs_high = positive("obs_high", obs_high)
        for channel in ("interarrival", "job_size"):
            if channel not in traces.series:
                raise ValueError(f"TraceSet {traces.name!r} has no series {channel!r}; LB "
                                 "traces are job sequences (interarrival, job_size)")
        self._rates = rates
        self._rates.setflags(write=False)
        self.n_servers = rates.size
        self._tables = JobTables(traces)
        high = np.float32(self.obs_high * self.obs_scale)
        self._set_spaces(spaces.Box(0.0, high, (self.n_servers + 1,), np.float32),
                         spaces.Discrete(self.n_servers))
        self._allocate()
        self._seed(seed)

    # ------------------------------------------------------------------ public state
    @property
    def service_rates(self) -> np.ndarray:
        """(S,) work units per time unit of each server (read-only)."""
        return self._rates

    @property
    def now(self) -> np.ndarray:
        """(N,) arrival time of each copy's incoming job (a copy)."""
        return self._now.copy()

    @property
    def job_index(self) -> np.ndarray:
        """(N,) position of the incoming job in its trace (a copy)."""
        return self._eplen.copy()

    @property
    def job_size(self) -> np.ndarray:
        """(N,) size of the incoming job, unclipped work units (a copy)."""
        return self._tables.size.take(self._fi)

    @property
    def ring_capacity(self) -> int:
        """Jobs per (copy, server) the ring holds now (it doubles before overflowing)."""
        return self._cap

    def queue_lengths(self) -> np.ndarray:
        """(N, S) jobs at each server (queued + running) when the incoming job arrives."""
        return self._assigned - self._head

    def park_loads(self, out: np.ndarray | None = None) -> np.ndarray:
        """(N, S) Park's load of each server when the incoming job arrives: sizes of its queued
        jobs + time left of its running job, 0 when idle (unclipped, unscaled)."""
        loads = np.empty((self.num_envs, self.n_servers)) if out is None else out
        head = self._ring.take(self._ring_base + (self._head & (self._cap - 1)))
        np.add(self._total, head, out=loads)
        loads -= self._now[:, None]
        loads *= self._assigned > self._head  # idle servers have no load
        return loads

    def work_left(self) -> np.ndarray:
        """(N, S) time units until each server would be idle: ``max(last finish - now, 0)``."""
        return np.maximum(self._last_finish - self._now[:, None], 0.0)

    def service_times(self) -> np.ndarray:
        """(N, S) time units the incoming job would need on each server: ``int(size/rate)``."""
        return np.floor(self.job_size[:, None] / self._rates)

    def last_step(self) -> dict[str, np.ndarray]:
        """Per-copy components of the last step (copies): raw ``reward``, ``server``,
        ``size``, ``arrival``, ``start`` and ``finish`` of the job just assigned, ``trace``."""
        return {"reward": self._raw.copy(), "server": self._server.copy(),
                "size": self._size.copy(), "arrival": self._arrival.copy(),
                "start": self._start.copy(), "finish": self._fin.copy(),
                "trace": self._last_trace.copy()}

    # ------------------------------------------------------------------ setup
    def _allocate(self) -> None:
        n, s, width = self.num_envs, self.n_servers, self._tables.width
        envs = np.arange(n, dtype=np.int64)
        # Episode sums (restart at zero) and per-copy trace positions.
        self._fstate = np.zeros((5, n))
        self._ret, self._ret_t, self._wait, self._maxq, self._active = self._fstate
        self._istate = np.zeros((5, n), dtype=np.int64)
        self._eplen, self._trace, self._fi, self._caloff, self._length = self._istate
        self._now, self._qcap, self._qbase = np.zeros(n), np.zeros(n), np.zeros(n)
        # Servers: last finish, total size, jobs assigned and departed.
        self._last_finish, self._total = np.zeros((n, s)), np.zeros((n, s))
        self._assigned = np.zeros((n, s), dtype=np.int64)
        self._head = np.zeros((n, s), dtype=np.int64)
        self._server_of = envs * s  # flat (copy, server) index of server 0
        self._cap = RING_CAPACITY
        self._ring = np.zeros(n * s * self._cap)
        self._ring_base = (envs[:, None] * s + np.arange(s)) * self._cap
        # Calendars: departures per (copy, step, server) and each step's partial integral.
        self._departures = np.zeros((n * width, s), dtype=np.int64)
        self._departures_flat = self._departures.reshape(-1)
        self._partial = np.zeros(n * width)
        self._rewbuf = np.zeros((n, width)) if self._train else None
        self._rew_rows = envs * width
        self._obs = np.zeros((n, s + 1), dtype=np.float32)
        self._loads = np.zeros((n, s))
        # Last step's components.
        self._raw, self._server, self._size = np.zeros(n), np.zeros(n, np.int64), np.zeros(n)
        self._arrival, self._start, self._fin = np.zeros(n), np.zeros(n), np.zeros(n)
        self._last_trace = np.zeros(n, dtype=np.int64)

    # ------------------------------------------------------------------ gym API
    def step(self, actions):
        """Assign every copy's incoming job, advance to the next arrival (or drain)."""
        a = self._check_step(actions, self.n_servers, "server")
        cell = self._server_of + a
        fin = self._assign(a, cell)
        self._schedule_departure(a, fin)
        raw = self._advance()
        rewards = raw * self.reward_scale
        self._ret += raw
        self._ret_t += rewards
        if self._train:
            self._rewbuf.reshape(-1).put(self._rew_rows + self._eplen, rewards)
        self._eplen += 1
        self._fi += 1
        done = self._eplen == self._length
        self._observe(done)
        infos: dict[str, Any] = {}
        if done.any():
            self._finish(done, infos)
        infos.update(self._trace_info())
        return (self._obs.copy(), rewards, done, np.zeros(self.num_envs, dtype=bool), infos)

    def _assign(self, a: np.ndarray, cell: np.ndarray) -> np.ndarray:
        """Put each incoming job at the tail of its server; returns its finish time."""
        size = self._tables.size.take(self._fi)
        service = np.floor(size / self._rates.take(a))
        start = np.maximum(self._last_finish.take(cell), self._now)
        fin = start + service
        self._last_finish.put(cell, fin)
        assigned = self._assigned.take(cell)
        queue = assigned - self._head.take(cell) + 1  # jobs at the server, this one included
        if queue.max() > self._cap:
            self._grow_ring(int(queue.max()))
        total = self._total.take(cell) + size
        self._total.put(cell, total)
        slot = self._ring_base.take(cell) + (assigned & (self._cap - 1))
        self._ring.put(slot, fin - total)
        self._assigned.put(cell, assigned + 1)
        np.maximum(self._maxq, queue, out=self._maxq)
        self._wait += start - self._now
        for out, value in ((self._size, size), (self._start, start), (self._fin, fin),
                           (self._arrival, self._now), (self._server, a),
                           (self._last_trace, self._trace)):
            np.copyto(out, value, casting="unsafe")
        return fin

    def _schedule_departure(self, a: np.ndarray, fin: np.ndarray) -> None:
        """Write the job into the calendar of the step at whose end it leaves the system:
        the step of the last arrival before its finish (never before its own step)."""
        tables = self._tables
        key = np.minimum(fin, self._qcap)
        key += self._qbase
        step = np.maximum(tables.keys.searchsorted(key) - 1, self._fi)
        share = fin - tables.arrival.take(step)
        day = step + self._caloff
        self._partial.put(day, self._partial.take(day) + share)
        cell = day * self.n_servers + a
        self._departures_flat.put(cell, self._departures_flat.take(cell) + 1)

    def _advance(self) -> np.ndarray:
        """This step's raw reward; departs the jobs its calendar day holds."""
        day = self._fi + self._caloff
        leaving = self._departures.take(day, axis=0)
        self._departures[day] = 0
        self._head += leaving
        partial = self._partial.take(day)
        self._partial.put(day, 0.0)
        self._active += 1.0
        self._active -= leaving.sum(axis=1)
        next_time = self._tables.arrival.take(self._fi + 1)
        raw = np.subtract(next_time, self._now)
        raw *= self._active
        raw += partial
        np.negative(raw, out=raw)
        np.copyto(self._raw, raw)
        np.copyto(self._now, next_time)
        return raw

    def _observe(self, done: np.ndarray) -> None:
        """Park's loads at ``now`` and the incoming size, clipped and scaled, into _obs."""
        loads = self.park_loads(out=self._loads)
        size = self._tables.size.take(self._fi)
        park_observation(loads, size, self.obs_high, self.obs_scale, self._obs)
        if done.any():
            self._obs[done] = 0.0  # drained: idle servers, no incoming job

    def _grow_ring(self, needed: int) -> None:
        """Double the ring until ``needed`` jobs fit, re-laying each live entry by its job
        number (the slot of job c is ``c mod capacity``)."""
        n, s, cap = self.num_envs, self.n_servers, self._cap
        new_cap = cap
        while new_cap < needed:
            new_cap *= 2
        old = self._ring.reshape(n, s, cap)
        latest = self._assigned[:, :, None]  # the ring holds jobs latest - cap .. latest - 1
        job = latest - cap + (np.arange(cap) - latest) % cap
        ring = np.zeros((n, s, new_cap))
        np.put_along_axis(ring, job % new_cap, old, axis=2)
        self._ring = ring.reshape(-1)
        self._cap = new_cap
        envs = np.arange(n, dtype=np.int64)
        self._ring_base = (envs[:, None] * s + np.arange(s)) * new_cap

    def _observation(self) -> np.ndarray:
        return self._obs

    def _episode_fields(self, mask: np.ndarray) -> dict[str, np.ndarray]:
        ret, ret_t, wait, maxq = np.where(mask, self._fstate[:4], 0.0)
        length, trace = np.where(mask, self._istate[:2], 0)
        jobs = np.maximum(length, 1)
        return {"return": ret, "return_transformed": ret_t, "length": length, "trace": trace,
                "mean_jct": -ret / jobs, "mean_wait": wait / jobs, "max_queue": maxq}

    def _restart(self, ids: np.ndarray) -> None:
        """New episodes for copies ``ids``: empty servers and calendars, the first job."""
        tables, width = self._tables, self._tables.width
        new, _ = self._draw(ids, np.ones(1, dtype=np.int64), True)
        self._fstate[:, ids] = 0.0
        self._eplen[ids] = 0
        self._trace[ids] = new
        self._fi[ids] = new * width
        self._caloff[ids] = (ids - new) * width
        self._length[ids] = tables.lengths[new]
        self._now[ids] = tables.arrival[new * width]
        self._qcap[ids] = tables.last[new] + 1.0
        self._qbase[ids] = new * tables.span
        for array in (self._last_finish, self._total, self._assigned, self._head):
            array[ids] = 0
        self._departures.reshape(self.num_envs, width, -1)[ids] = 0
        self._partial.reshape(self.num_envs, width)[ids] = 0.0
        first = np.zeros((len(ids), self.n_servers + 1), dtype=np.float32)  # idle servers
        park_observation(np.zeros((len(ids), self.n_servers)), tables.size[new * width],
                         self.obs_high, self.obs_scale, first)
        self._obs[ids] = first


class LbEnv(SingleCopyEnv):
    """Single-copy load balancing (an :class:`LbVecEnv` of one copy, no autoreset); takes
    the same arguments except ``n_envs``. ``info`` holds the step's ``last_step()`` values
    and, on the final step, the ``episode`` dict."""

    def __init__(self, traces: TraceSet, sampler: TraceSampler | None = None, **kwargs: Any):
        if "n_envs" in kwargs:
            raise TypeError("LbEnv is a single copy; use LbVecEnv for n_envs")
        super().__init__(LbVecEnv(traces, 1, sampler, **kwargs))
