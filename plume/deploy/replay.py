"""Simulated sessions as a real client would report them: the check that a deployed controller
decides as the policy did in simulation.

:func:`simulated_sessions` plays test traces in the simulator with a policy acting on the
simulator's observations, and records at every step only what a real client could measure
(``plume.deploy.sessions``' measurement dicts, built from the environment's public
``last_step()`` and state) together with the decision the policy took, in the real system's
units. Replaying the measurements through ``DeployedController.decide`` must give the same
decisions: the observation is rebuilt from raw measurements by the runtime, so any drift
between the simulator's observation and the runtime's shows up as a different decision.
Torch-free, like the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from plume.deploy.runtime import load_controller

__all__ = ["Session", "Step", "simulated_mi", "simulated_sessions", "simulator"]


@dataclass
class Step:
    """One decision: what ``decide`` gets, and what the simulator's policy decided (ABR: the
    level, LB: the server, CC: the new sending rate in bit/s)."""

    measurement: dict[str, Any] | None
    action: Any


@dataclass
class Session:
    trace_id: str
    reset_kwargs: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)


class _Gelato:
    def __init__(self, env, traces, contract) -> None:
        self.env, self.sizes, self.ssim = env, traces.chunks["chunk_sizes"], traces.chunks["ssim_db"]

    def _ahead(self, i: int) -> dict[str, Any]:
        k = int(self.env.chunk_index[i])
        return {"next_sizes_mb": self.sizes[i, k:k + 5].tolist(),
                "next_ssim_db": self.ssim[i, k:k + 5].tolist()}

    def start(self, i: int) -> tuple[dict[str, Any], Any]:
        return {}, {"last": None, **self._ahead(i)}

    def after(self, i: int, step: dict[str, np.ndarray], action) -> tuple[Any, Any]:
        last = {"size_mb": step["size"][i], "ssim_db": step["quality"][i],
                "delay_s": step["delay"][i], "buffer_s": step["buffer"][i],
                "stall_s": step["stall"][i]}
        return int(action), {"last": {k: float(v) for k, v in last.items()}, **self._ahead(i)}


class _Pensieve:
    def __init__(self, env, traces, contract) -> None:
        pass

    def start(self, i: int) -> tuple[dict[str, Any], Any]:
        return {}, {"last": None}

    def after(self, i: int, step: dict[str, np.ndarray], action) -> tuple[Any, Any]:
        last = {"level": int(action), "size_bytes": float(step["size"][i]),
                "delay_ms": float(step["delay"][i] * 1000.0), "buffer_s": float(step["buffer"][i])}
        return int(action), {"last": last}


class _Aurora:
    """Monitor intervals as statistics (PCC-Uspace's form): packet counts and two RTT
    samples could not carry the fluid model's rounding (an inflation of -1e-16 s/s)."""

    def __init__(self, env, traces, contract) -> None:
        self.env = env
        self.bits = 8.0 * float(contract["constants"]["packet_bytes"])

    def start(self, i: int) -> tuple[dict[str, Any], Any]:
        return {"initial_rate_bps": float(self.env.rate[i]) * self.bits,
                "initial_rtt_s": float(self.env.last_rtt[i])}, None

    def after(self, i: int, step: dict[str, np.ndarray], action) -> tuple[Any, Any]:
        """The rate the action set is the next MI's rate; after an episode's last step the
        copy has restarted, so that step's decision is unknown (None: not recorded)."""
        if step["done"][i]:
            return None, None
        sample = simulated_mi(step, i, self.bits)
        return sample["sending_rate_bps"], sample


def simulated_mi(step: dict[str, np.ndarray], i: int, bits_per_packet: float) -> dict:
    """Copy ``i``'s monitor interval of a CC env's ``last_step()`` as the runtime's
    statistics-form measurement (rates in bit/s)."""
    return {"sending_rate_bps": float(step["rate"][i]) * bits_per_packet,
            "receiving_rate_bps": float(step["throughput"][i]) * bits_per_packet,
            "latency_s": float(step["latency"][i]),
            "latency_inflation": float(step["inflation"][i]),
            "loss": float(step["loss"][i]), "duration_s": float(step["duration"][i])}


class _Park:
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


RECORDERS = {("abr", "gelato"): _Gelato, ("abr", "pensieve"): _Pensieve, ("cc", None): _Aurora,
             ("lb", None): _Park}


def _play(env, recorder, sessions: list[Session], act: Callable) -> None:
    """Step every copy through one episode; append (measurement, decision) pairs. A step's
    decision is known after the step (CC: the rate it set, unknown for an episode's last
    step, which is then left out), its measurement before."""
    n = env.num_envs
    obs, _ = env.reset()
    pending = []
    for i in range(n):
        sessions[i].reset_kwargs, measurement = recorder.start(i)
        pending.append(measurement)
    live = np.ones(n, dtype=bool)
    while live.any():
        actions = np.asarray(act(obs))
        obs, _, terminated, truncated, _ = env.step(actions)
        step = {**env.last_step(), "done": terminated | truncated}
        for i in np.flatnonzero(live):
            decision, following = recorder.after(i, step, actions[i])
            if decision is not None:
                sessions[i].steps.append(Step(pending[i], decision))
            pending[i] = following
        live &= ~step["done"]


def simulated_sessions(export_dir: str | Path, traces=None, n: int | None = None,
                       policy: Callable[[np.ndarray], np.ndarray] | None = None) -> list[Session]:
    """One session per test trace (the env's default test set unless ``traces`` is given,
    the first ``n`` of them when given), played by ``policy`` (default: the export's own
    policy on the simulator's observations)."""
    from plume.envs.registry import get_env

    controller = load_controller(export_dir)
    contract = controller.contract
    spec = get_env(contract["env"]["name"])
    if traces is None:
        params = spec.params(**contract["env"]["params"])
        traces = spec.load_builtin(spec.default_dataset(params), "test")
    if n is not None:
        traces = traces.subset(list(range(min(n, len(traces)))))
    key = (spec.name, contract["env"].get("variant"))
    if key not in RECORDERS:
        raise ValueError(f"no measurement recorder for env={spec.name}")
    env, own_policy = simulator(controller, traces)
    sessions = [Session(str(t)) for t in traces.trace_ids]
    _play(env, RECORDERS[key](env, traces, contract), sessions, policy or own_policy)
    return sessions


def simulator(controller, traces) -> tuple[Any, Callable]:
    """The controller's environment in test mode on ``traces`` (one copy per trace) and the
    controller's policy there: the model on the simulator's observations, or the classic
    rule as the evaluator runs it (bound to the simulator's state)."""
    from plume.envs.registry import get_env

    contract = controller.contract
    spec = get_env(contract["env"]["name"])
    params = spec.params(**contract["env"]["params"])
    env = spec.make(traces, None, None, mode="test", seed=None, params=params)
    if contract["policy"]["kind"] == "model":
        return env, controller.act_observation
    rule = spec.controllers[contract["policy"]["controller"]](params)
    return env, rule.bind(env) if hasattr(rule, "bind") else rule
