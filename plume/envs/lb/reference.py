"""Park's ``load_balance`` written out literally: one copy, an event heap, Python objects.

The oracle for :class:`plume.envs.lb.sim.LbVecEnv` (which must match it exactly) and the
same-process baseline of ``benchmarks/bench_lb.py``. It follows Park's ``LoadBalanceEnv``,
``Server`` and ``Timeline`` step by step (park-project/park, ``park/envs/load_balance``):

* ``reset`` pushes the first arrival and pops it: the agent sees the first job.
* ``step(a)`` appends the incoming job to server ``a``'s FIFO queue and starts it if the server
  is idle, pushing its completion at ``start + int(size / rate)``; then it pushes the next
  arrival (``now + interarrival``, Park generates it when the current job is scheduled) and
  pops events in time order. Before each pop the reward loses ``(t_event - now) x (jobs in
  the system)`` (queued jobs plus one per busy server). A completion starts the server's next
  job; an arrival ends the step.
* **Ties**: events are keyed ``(time, kind, counter)`` with completions (kind 0) before
  arrivals (kind 1) at the same time, the order Park's heap counter leaves open. It only
  moves work between a zero-length interval's sides, so rewards never depend on it; the
  observation does (a job that finishes exactly at an arrival is gone from it).
* The step after the last job drains the system (every remaining completion is popped) and
  ends the episode; its observation is all zeros (Park's: idle servers, no incoming job).
* Observation: per server ``sum(queued sizes) + (finish - now)`` of the running job, the
  running job counted in time units and the queued ones in work units (Park HEAD's quirk;
  a later Park commit multiplies the running term by the rate), each clipped at
  ``obs_high``, then the incoming job's size (clipped too).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

import numpy as np

from plume.traces.lb import PARK_RATES

OBS_HIGH = 5e5
"""Park's ``load_balance_obs_high``: every observation entry is clipped here."""
_COMPLETION, _ARRIVAL = 0, 1


@dataclass
class Job:
    """A job's life: arrival, size, and once scheduled its server, start and finish."""

    index: int
    size: float
    arrival: float
    server: int = -1
    start: float = float("nan")
    finish: float = float("nan")


class ReferenceLoadBalance:
    """One Park load-balancing episode over a fixed job sequence (module docstring).

    Args:
        interarrival, job_size: the trace (time and work units; integers for Park).
        service_rates: work units per time unit of each server (Park's by default).
        obs_high: clipping bound of the observation.
    """

    def __init__(self, interarrival, job_size, service_rates=PARK_RATES,
                 obs_high: float = OBS_HIGH) -> None:
        self.gaps = [float(g) for g in interarrival]
        self.sizes = [float(s) for s in job_size]
        self.rates = [float(r) for r in service_rates]
        self.obs_high = float(obs_high)
        self.reset()

    # ------------------------------------------------------------------ Park's loop
    def reset(self) -> np.ndarray:
        """Empty servers, the first job arriving; returns the first observation."""
        self.now = 0.0
        self.queues: list[list[Job]] = [[] for _ in self.rates]
        self.running: list[Job | None] = [None for _ in self.rates]
        self.timeline: list = []
        self.counter = itertools.count()
        self.jobs: list[Job] = []
        self.incoming: Job | None = None
        self._push_arrival(0)
        self._pop_until_arrival()
        return self.observe()

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        """Schedule the incoming job on server ``action``; (observation, reward, done)."""
        job, self.incoming = self.incoming, None
        job.server = int(action)
        self.queues[job.server].append(job)
        self._process(job.server)
        if job.index + 1 < len(self.sizes):
            self._push_arrival(job.index + 1)
        reward = self._pop_until_arrival()
        done = not self.timeline and self.incoming is None
        return self.observe(), reward, done

    def _push_arrival(self, index: int) -> None:
        heapq.heappush(self.timeline, (self.now + self.gaps[index], _ARRIVAL,
                                       next(self.counter), index))

    def _process(self, server: int) -> None:
        """Start the head of ``server``'s queue if the server is idle (Park's ``process``)."""
        current = self.running[server]
        if (current is None or current.finish <= self.now) and self.queues[server]:
            job = self.queues[server].pop(0)
            job.start = self.now
            job.finish = self.now + int(job.size / self.rates[server])
            self.running[server] = job
            heapq.heappush(self.timeline, (job.finish, _COMPLETION, next(self.counter), job))

    def _pop_until_arrival(self) -> float:
        reward = 0.0
        while self.timeline:
            time, kind, _, item = heapq.heappop(self.timeline)
            reward -= (time - self.now) * self.jobs_in_system()
            self.now = time
            if kind == _ARRIVAL:
                self.incoming = Job(item, self.sizes[item], time)
                self.jobs.append(self.incoming)
                break
            if self.running[item.server] is item:
                self.running[item.server] = None
            self._process(item.server)
        return reward

    # ------------------------------------------------------------------ state
    def jobs_in_system(self) -> int:
        return sum(len(q) for q in self.queues) + sum(j is not None for j in self.running)

    def observe(self) -> np.ndarray:
        """Park's observation (float64): per-server load, then the incoming job's size."""
        loads = []
        for queue, job in zip(self.queues, self.running):
            load = sum(j.size for j in queue)
            if job is not None:
                load += job.finish - self.now
            loads.append(min(load, self.obs_high))
        size = 0.0 if self.incoming is None else min(self.incoming.size, self.obs_high)
        return np.array(loads + [size])

    def queue_lengths(self) -> np.ndarray:
        """Jobs (queued + running) at each server now."""
        return np.array([len(q) + (j is not None) for q, j in zip(self.queues, self.running)])

    def completion_times(self) -> np.ndarray:
        """Finish minus arrival of every job scheduled so far (NaN while not started)."""
        return np.array([j.finish - j.arrival for j in self.jobs if j.server >= 0])
