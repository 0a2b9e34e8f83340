"""Simulated sessions as a real client would report them: the check that a deployed controller
decides as the policy did in simulation.

:func:`simulated_sessions` plays test traces in the simulator with a policy acting on the
simulator's observations, and records at every step only what a real client could measure
(the measurement dicts of the environment's session, built by the recorder its spec
declares, ``EnvSpec.deploy``, from the environment's public ``last_step()`` and state) together
with the decision the policy took, in the real system's units. Replaying the measurements
through ``DeployedController.decide`` must give the same decisions: the observation is rebuilt
from raw measurements by the runtime, so any drift between the simulator's observation and the
runtime's shows up as a different decision.
Torch-free, like the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from plume.deploy.runtime import load_controller

__all__ = ["Session", "Step", "simulated_sessions", "simulator"]


@dataclass
class Step:
    """One decision: what ``decide`` gets, and what the simulator's policy decided, in the real
    system's units (a level, a server, a sending rate in bit/s)."""

    measurement: dict[str, Any] | None
    action: Any


@dataclass
class Session:
    trace_id: str
    reset_kwargs: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)


def _play(env, recorder, sessions: list[Session], act: Callable) -> None:
    """Step every copy through one episode; append (measurement, decision) pairs. A step's
    decision is known after the step (a rate it set may be unknown for an episode's last
    step, which is then left out), its measurement before. The recorder sees the step as the
    env's ``last_step()`` plus ``observation`` (what the step returned: for an env whose
    observation is raw measurements, what a client measured) and ``done``."""
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
        step = {**env.last_step(), "observation": obs, "done": terminated | truncated}
        for i in np.flatnonzero(live):
            decision, following = recorder.after(i, step, actions[i])
            if decision is not None:
                sessions[i].steps.append(Step(pending[i], decision))
            pending[i] = following
        live &= ~step["done"]


def simulated_sessions(export_dir: str | Path, traces=None, n: int | None = None,
                       policy: Callable[[np.ndarray], np.ndarray] | None = None, *,
                       spec=None) -> list[Session]:
    """One session per test trace (the env's default test set unless ``traces`` is given,
    the first ``n`` of them when given), played by ``policy`` (default: the export's own
    policy on the simulator's observations). ``spec``: a user's environment, as for
    ``load_controller``."""
    controller = load_controller(export_dir, spec=spec)
    contract, spec = controller.contract, _spec_of(controller)
    if traces is None:
        params = spec.params(**contract["env"]["params"])
        traces = spec.load_builtin(spec.default_dataset(params), "test")
    if n is not None:
        traces = traces.subset(list(range(min(n, len(traces)))))
    deployment = spec.deployment_for(contract["env"].get("variant"))
    if deployment is None:
        raise ValueError(f"no measurement recorder for env={spec.name} (its spec declares no "
                         "deploy slice for this variant)")
    env, own_policy = simulator(controller, traces)
    sessions = [Session(str(t)) for t in traces.trace_ids]
    _play(env, deployment.recorder(env, traces, contract), sessions, policy or own_policy)
    return sessions


def _spec_of(controller):
    """The EnvSpec the controller was loaded with; ValueError for a user's env without one."""
    if controller.spec is None:
        raise ValueError(f"env={controller.env} is not built in: pass its spec "
                         "(load_controller(..., spec=SPEC))")
    return controller.spec


def simulator(controller, traces) -> tuple[Any, Callable]:
    """The controller's environment in test mode on ``traces`` (one copy per trace) and the
    controller's policy there: the model on the simulator's observations, or the classic
    rule as the evaluator runs it (bound to the simulator's state)."""
    contract, spec = controller.contract, _spec_of(controller)
    params = spec.params(**contract["env"]["params"])
    env = spec.make(traces, None, None, mode="test", seed=None, params=params)
    if contract["policy"]["kind"] == "model":
        return env, controller.act_observation
    rule = spec.controllers[contract["policy"]["controller"]](params)
    return env, rule.bind(env) if hasattr(rule, "bind") else rule
