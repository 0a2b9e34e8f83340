"""The deployment runtime: a trained (or classic) controller answering real measurements,
without torch.

    from plume.deploy import load_controller
    ctrl = load_controller("runs/.../export")          # contract.json (+ policy.onnx)
    ctrl.decide({"last": None, "next_sizes_mb": ..., "next_ssim_db": ...})  # ABR, gelato
    ctrl.decide({"last": {...}, "next_sizes_mb": ..., "next_ssim_db": ...})

A controller is a session (the class its environment declares, ``EnvSpec.deploy``: raw
measurements -> the observation, built by the simulator's own code; the action -> the real
system's units) and a policy: the exported ONNX model run by onnxruntime with the contract's
greedy rule, or a classic controller by name (evaluated on the same observation, as in the
simulator). A built-in environment is found by the contract's name in the fixed registry; a
user's environment is never imported from a contract: its caller passes the spec
(``load_controller(folder, spec=SPEC)``). Needs numpy and onnxruntime (the ``deploy`` extra) and
nothing that trains.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import numpy as np

from plume.deploy.contract import ContractError, contract_file, read_contract
from plume.deploy.sessions import MeasurementError, deployment_of, no_session_reason, session_for
from plume.deploy.verify import check_contract, contract_spec

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
        options.log_severity_level = 3  # errors only: a refused model is our one line
        try:
            self.session = onnxruntime.InferenceSession(str(path), options,
                                                        providers=["CPUExecutionProvider"])
        except Exception as err:  # onnxruntime's own error types: a file it cannot run
            raise ContractError(f"{path}: not a model onnxruntime can run "
                                f"({_first_line(err)})") from None
        self.input_name = policy["input"]["name"]
        self.obs_dim = int(policy["input"]["shape"][1])
        self.n_outputs = int(policy["output"]["shape"][1])
        self.rule = policy["greedy"]
        if self.rule["kind"] == "clip":
            self.low = np.asarray(self.rule["low"], np.float32)
            self.high = np.asarray(self.rule["high"], np.float32)
        self._check_signature(path)

    def _check_signature(self, path: Path) -> None:
        """The model's own input and output agree with the contract, and it runs: one
        zero observation answers with finite outputs of the contract's width."""
        (given,), produced = self.session.get_inputs(), self.session.get_outputs()
        width = given.shape[-1] if given.shape else None
        if given.name != self.input_name or width != self.obs_dim:
            raise ContractError(f"{path}: the model takes {given.name!r} of width {width}, the "
                                f"contract says {self.input_name!r} of {self.obs_dim}")
        try:
            out = self.outputs(np.zeros((1, self.obs_dim), np.float32))
        except Exception as err:
            raise ContractError(f"{path}: the model fails on an observation "
                                f"({_first_line(err)})") from None
        if out.shape != (1, self.n_outputs) or not np.all(np.isfinite(out)):
            raise ContractError(f"{path}: the model answers shape {out.shape} (finite: "
                                f"{bool(np.all(np.isfinite(out)))}), the contract says "
                                f"(1, {self.n_outputs}) finite outputs; {len(produced)} "
                                "output(s)")

    def bind_to(self, session) -> OnnxPolicy:
        """A model has no per-session state: one policy serves every session."""
        return self

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
    """A classic controller of the environment, by name, on the session's observation. A
    rule that reads the simulator's state (``bind(env)``) is bound to the session, which
    offers the same public state from the measurements."""

    def __init__(self, contract: dict[str, Any], spec) -> None:
        env, name = contract["env"], contract["policy"]["controller"]
        if spec is None:
            raise ContractError(f"env {env['name']!r} is not built in: its rule {name!r} needs "
                                "the env's spec (load_controller(..., spec=SPEC))")
        if name not in spec.controllers:
            raise ContractError(f"env {spec.name!r} has no controller {name!r}")
        if name == spec.oracle_controller:
            raise ContractError(f"controller {name!r} knows the trace (the link's bandwidth): "
                                "it runs only in the simulator")
        self.name, self._rule = name, spec.controllers[name](spec.params(**env["params"]))
        self._policy = None if hasattr(self._rule, "bind") else self._rule

    def bind_to(self, session) -> RulePolicy:
        """This rule for ``session`` (a rule with state gets its own binding)."""
        if self._policy is not None:
            return self
        bound = copy.copy(self)
        bound._policy = self._rule.bind(session)
        return bound

    def act(self, obs: np.ndarray) -> np.ndarray:
        return np.asarray(self._policy(np.asarray(obs, dtype=np.float32)))


class DeployedController:
    """One controller: ``reset`` starts a session, ``decide`` answers one measurement.
    :meth:`fork` gives another session on the same policy (a server with many clients
    loads the model once)."""

    def __init__(self, contract: dict[str, Any], policy, session, new_session=None,
                 spec=None, protocols: tuple[str, ...] = ()) -> None:
        self.contract, self.policy, self.session = contract, policy, session
        self._new_session = new_session
        self.spec = spec
        """The environment's EnvSpec (None: a user's environment loaded without it)."""
        self.protocols = protocols
        """The ``plume-serve`` protocols the session speaks (``Deployment.protocols``)."""
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

    def fork(self) -> DeployedController:
        """A controller with its own fresh session and this one's policy (a model is shared,
        onnxruntime sessions may be run from several threads; a rule with state is bound anew).
        A stateless rule is shared with its scratch arrays: controllers forked from one decide
        from one thread at a time (the Pensieve server decides in one thread)."""
        session = self._new_session()
        return DeployedController(self.contract, self.policy.bind_to(session), session,
                                  self._new_session, self.spec, self.protocols)

    def act_observation(self, obs: np.ndarray) -> np.ndarray:
        """The policy's environment actions for observations built elsewhere (B, obs_dim)."""
        return self.policy.act(obs)

    def __repr__(self) -> str:
        what = (self.contract["policy"].get("controller")
                or self.contract["policy"].get("algorithm", "model"))
        return f"DeployedController({self.env}/{self.variant or '-'}, {what})"


def load_controller(path: str | Path, *, threads: int = 1,
                    clip_bps: tuple[float, float] | None = None,
                    spec=None) -> DeployedController:
    """The controller of an export directory (``plume-export``'s output), checked before its
    first decision: the seal (model and contract hashes), the environment's own definition,
    the policy's shapes, the model's signature and the session's constants; ContractError in
    one line for anything damaged or edited. ``clip_bps`` (CC only) replaces the training
    clip of the sending rate, e.g. PCC-RL's (0.5e6, 300e6). ``spec``: the EnvSpec of a user's
    environment (a built-in one is found by name; nothing the contract names is imported)."""
    file = contract_file(path)
    contract = read_contract(file)
    where = str(file)
    check_contract(contract, where, spec)
    spec = contract_spec(contract, spec)
    policy_section = contract["policy"]
    if policy_section["kind"] == "model":
        policy = OnnxPolicy(file.parent / policy_section["files"]["onnx"], policy_section,
                            threads)
    else:
        policy = RulePolicy(contract, spec)
    options = {"clip_bps": _clip(clip_bps)} if clip_bps is not None else {}
    deployment = deployment_of(contract, spec)

    def new_session():
        if deployment is None:
            return _ObservationOnly(contract, no_session_reason(contract))
        return session_for(contract, spec, **options)

    try:
        session = new_session()
    except ContractError as err:
        raise ContractError(f"{where}: {err}") from None
    return DeployedController(contract, policy.bind_to(session), session, new_session, spec,
                              deployment.protocols if deployment is not None else ())


def _clip(clip_bps: tuple[float, float]) -> tuple[float, float]:
    low, high = (float(x) for x in clip_bps)
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low < high):
        raise ContractError(f"clip_bps must be two finite rates 0 < low < high, got {clip_bps}")
    return low, high


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:200]


class _ObservationOnly:
    """An environment without a deployment session (its spec declares no deploy slice for the
    variant, or a user's env loaded without its spec): the policy still answers observations
    through ``act_observation``."""

    def __init__(self, contract: dict[str, Any], why: str) -> None:
        self.why = why

    def reset(self, **start: Any) -> None:
        raise ContractError(self.why)

    def observe(self, measurement: Any) -> np.ndarray:
        raise ContractError(self.why)
