"""The deployment runtime: a trained (or classic) controller answering real measurements,
without torch.

    from plume.deploy import load_controller
    ctrl = load_controller("runs/.../export")          # contract.json (+ policy.onnx)
    ctrl.decide({"last": None, "next_sizes_mb": ..., "next_ssim_db": ...})  # ABR, gelato
    ctrl.decide({"last": {...}, "next_sizes_mb": ..., "next_ssim_db": ...})

A controller is a session (``plume.deploy.sessions``: raw measurements -> the observation,
built by the simulator's own code; the action -> the real system's units) and a policy: the
exported ONNX model run by onnxruntime with the contract's greedy rule, or a classic
controller by name (evaluated on the same observation, as in the simulator). Needs numpy and
onnxruntime (the ``deploy`` extra) and nothing that trains.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from plume.deploy.contract import ContractError, read_contract
from plume.deploy.sessions import MeasurementError, session_for

__all__ = ["ContractError", "DeployedController", "MeasurementError", "OnnxPolicy",
           "RulePolicy", "load_controller"]


class OnnxPolicy:
    """The exported model under onnxruntime (one thread unless told: a decision is small)
    and the contract's greedy rule."""

    def __init__(self, path: Path, policy: dict[str, Any], threads: int = 1) -> None:
        try:
            import onnxruntime
        except ImportError:
            raise ContractError("the runtime needs onnxruntime for a learned policy: pip "
                                "install 'plume-rl[deploy]' (or onnxruntime)") from None
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = int(threads)
        self.session = onnxruntime.InferenceSession(str(path), options,
                                                    providers=["CPUExecutionProvider"])
        self.input_name = policy["input"]["name"]
        self.obs_dim = int(policy["input"]["shape"][1])
        self.rule = policy["greedy"]
        if self.rule["kind"] == "clip":
            self.low = np.asarray(self.rule["low"], np.float32)
            self.high = np.asarray(self.rule["high"], np.float32)

    def outputs(self, obs: np.ndarray) -> np.ndarray:
        """The model's outputs for a batch of observations (B, obs_dim)."""
        x = np.ascontiguousarray(obs, dtype=np.float32).reshape(-1, self.obs_dim)
        return self.session.run(None, {self.input_name: x})[0]

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Greedy actions (B,) or (B, act_dim), as the contract's rule says."""
        out = self.outputs(obs)
        if self.rule["kind"] == "argmax":
            return out.argmax(axis=-1) + int(self.rule["start"])
        return np.minimum(np.maximum(out, self.low), self.high)


class RulePolicy:
    """A classic controller of the environment, by name, on the session's observation."""

    def __init__(self, contract: dict[str, Any]) -> None:
        from plume.envs.registry import get_env

        env, name = contract["env"], contract["policy"]["controller"]
        spec = get_env(env["name"])
        if name not in spec.controllers:
            raise ContractError(f"env {spec.name!r} has no controller {name!r}")
        policy = spec.controllers[name](spec.params(**env["params"]))
        if hasattr(policy, "bind"):
            raise ContractError(f"controller {name!r} reads the simulator's state, not the "
                                "observation; the runtime cannot serve it")
        self.name, self._policy = name, policy

    def act(self, obs: np.ndarray) -> np.ndarray:
        return np.asarray(self._policy(np.asarray(obs, dtype=np.float32)))


class DeployedController:
    """One controller: ``reset`` starts a session, ``decide`` answers one measurement."""

    def __init__(self, contract: dict[str, Any], policy, session) -> None:
        self.contract, self.policy, self.session = contract, policy, session
        self.observation: np.ndarray | None = None
        """The last observation built (1, obs_dim) float32."""

    @property
    def env(self) -> str:
        return self.contract["env"]["name"]

    @property
    def variant(self) -> str | None:
        return self.contract["env"].get("variant")

    def reset(self, **start: Any) -> None:
        """A new session (video, flow); CC takes ``initial_rate_bps``."""
        self.session.reset(**start)

    def decide(self, measurement: dict[str, Any] | None) -> int | float:
        """The action for one measurement, in the real system's units (see
        ``plume.deploy.sessions``). MeasurementError names a missing or bad field."""
        self.observation = self.session.observe(measurement)
        return self.session.action(self.policy.act(self.observation)[0])

    def act_observation(self, obs: np.ndarray) -> np.ndarray:
        """The policy's environment actions for observations built elsewhere (B, obs_dim)."""
        return self.policy.act(obs)

    def __repr__(self) -> str:
        what = (self.contract["policy"].get("controller")
                or self.contract["policy"].get("algorithm", "model"))
        return f"DeployedController({self.env}/{self.variant or '-'}, {what})"


def load_controller(path: str | Path, *, threads: int = 1,
                    clip_bps: tuple[float, float] | None = None) -> DeployedController:
    """The controller of an export directory (``plume-export``'s output). ``clip_bps``
    (CC only) replaces the training clip of the sending rate, e.g. PCC-RL's (0.5e6, 300e6)."""
    path = Path(path)
    contract = read_contract(path)
    policy_section = contract["policy"]
    if policy_section["kind"] == "model":
        model = path / policy_section["files"]["onnx"]
        if not model.is_file():
            raise ContractError(f"{model}: the contract's ONNX model is missing")
        policy = OnnxPolicy(model, policy_section, threads)
    else:
        policy = RulePolicy(contract)
    options = {"clip_bps": tuple(clip_bps)} if clip_bps is not None else {}
    try:
        session = session_for(contract, **options)
    except ValueError as err:
        session = _ObservationOnly(contract, str(err))
    return DeployedController(contract, policy, session)


class _ObservationOnly:
    """An environment without a deployment session (TraceBench, a user's env): the policy
    still answers observations through ``act_observation``."""

    def __init__(self, contract: dict[str, Any], why: str) -> None:
        self.why = why

    def reset(self, **start: Any) -> None:
        raise ContractError(self.why)

    def observe(self, measurement: Any) -> np.ndarray:
        raise ContractError(self.why)
