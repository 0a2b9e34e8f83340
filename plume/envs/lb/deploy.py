"""LB's deployment slice (``SPEC.deploy``): Park's load-balancing session and the recorder
that turns the simulator's job arrivals into what a real balancer measures.

Imported only by the deploy layer, through the spec's lazy loader: it builds on
``plume.deploy.sessions``, which an env package must not import when it is imported.

``decide(measurement)`` takes ``{job_size, loads: S}`` (Park's load per server: queued work +
time left of the running job, 0 when idle; classic rules also read ``work_left`` and
``queue_lengths``) and returns the server index.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from plume.deploy.contract import ContractError
from plume.deploy.sessions import MeasurementError, constant, constant_array, matrix, number
from plume.envs.lb.observation import park_observation
from plume.envs.registry import Deployment

__all__ = ["DEPLOYMENTS", "ParkRecorder", "ParkSession"]


class ParkSession:
    """Park's load balancing: no history, one decision per arriving job. Also offers the
    servers' state the classic rules read (``work_left()``, ``queue_lengths()``,
    ``service_times()``, ``service_rates``, ``job_size``, ``job_index``), from the
    measurement's optional ``work_left`` and ``queue_lengths`` fields."""

    num_envs = 1

    def __init__(self, constants: dict[str, Any]) -> None:
        self.n_servers = int(constant(constants, "n_servers", 1, integer=True))
        self.obs_high = constant(constants, "obs_high", above=0.0)
        self.obs_scale = constant(constants, "obs_scale", above=0.0)
        self.service_rates = constant_array(constants, "service_rates", 1)
        if len(self.service_rates) != self.n_servers:
            raise ContractError(f"constants.service_rates must list {self.n_servers} rates")
        self.obs = np.zeros((1, self.n_servers + 1), dtype=np.float32)
        self.job_index = np.zeros(1, dtype=np.int64)
        self.job_size = np.zeros(1)
        self._last: dict[str, Any] = {}

    def reset(self) -> None:
        """A new job sequence (the round-robin rule counts from its first job)."""
        self.job_index[:] = 0
        self._last = {}

    def observe(self, m: dict[str, Any]) -> np.ndarray:
        if not isinstance(m, dict):
            raise MeasurementError(f"measurement must be an object, got {type(m).__name__}")
        loads = matrix(m, "loads", (self.n_servers,))
        if np.any(loads < 0):
            raise MeasurementError("field loads must be >= 0")
        size = number(m, "job_size", low=0.0)
        if self._last:
            self.job_index += 1
        self._last = m
        self.job_size[:] = size
        park_observation(loads[None].copy(), self.job_size.copy(), self.obs_high,
                         self.obs_scale, self.obs)
        return self.obs

    def work_left(self) -> np.ndarray:
        """(1, S) time until each server is idle (measurement field ``work_left``)."""
        return matrix(self._last, "work_left", (self.n_servers,))[None]

    def queue_lengths(self) -> np.ndarray:
        """(1, S) jobs at each server (measurement field ``queue_lengths``)."""
        return matrix(self._last, "queue_lengths", (self.n_servers,))[None]

    def service_times(self) -> np.ndarray:
        """(1, S) time the arriving job would need on each server: ``int(size / rate)``."""
        return np.floor(self.job_size[:, None] / self.service_rates)

    def action(self, a: Any) -> int:
        return int(a)


class ParkRecorder:
    """The arriving job and the servers' state, before each decision."""

    def __init__(self, env, traces, contract) -> None:
        self.env = env

    def _jobs(self, i: int) -> dict[str, Any]:
        return {"job_size": float(self.env.job_size[i]),
                "loads": self.env.park_loads()[i].tolist(),
                "work_left": self.env.work_left()[i].tolist(),
                "queue_lengths": self.env.queue_lengths()[i].tolist()}

    def start(self, i: int) -> tuple[dict[str, Any], Any]:
        return {}, self._jobs(i)

    def after(self, i: int, step: dict[str, np.ndarray], action) -> tuple[Any, Any]:
        return int(action), self._jobs(i)


DEPLOYMENTS = {None: Deployment(ParkSession, ParkRecorder)}
"""LB has no variants: one runtime slice."""
