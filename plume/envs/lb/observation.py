"""Park's load-balancing observation, built from the servers' state when a job arrives: the
one code path that both the batched simulator (``plume.envs.lb.sim``) and the deployment
runtime (``plume.deploy``) call. Only numpy is imported.

Per server Park's load, ``sum(sizes of queued jobs) + (finish - now)`` of the running one (work
units plus time units: Park's quirk, kept), 0 for an idle server, each clipped at
``obs_high``; then the arriving job's size, clipped; all multiplied by ``obs_scale``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["describe_park", "park_observation"]


def park_observation(loads: np.ndarray, sizes: np.ndarray, obs_high: float, obs_scale: float,
                     out: np.ndarray) -> None:
    """Write ``out`` (N, S + 1) float32 from Park's loads (N, S) and the arriving jobs' sizes
    (N,), both float64 scratch arrays that this overwrites (clipped and scaled in place, so
    the arithmetic is float64 before the one cast)."""
    s = loads.shape[1]
    np.minimum(loads, obs_high, out=loads)
    loads *= obs_scale
    out[:, :s] = loads
    np.minimum(sizes, obs_high, out=sizes)
    sizes *= obs_scale
    out[:, s] = sizes


def describe_park(n_servers: int, obs_high: float, obs_scale: float) -> dict[str, Any]:
    """The observation as data, for ``contract.json``."""
    norm = f"min(value, {obs_high}) x {obs_scale}"
    return {"layout": [n_servers + 1], "order": "flat", "dtype": "float32", "fields": [
        {"name": "load", "unit": "work units + time units", "position": [0, n_servers],
         "history": None, "normalisation": norm,
         "meaning": "per server: sizes of its queued jobs + time left of its running job "
                    "(Park's load); 0 when idle"},
        {"name": "job_size", "unit": "work units", "position": [n_servers, n_servers + 1],
         "history": None, "normalisation": norm, "meaning": "the arriving job"},
    ]}
