"""Sessions: from the raw measurements a real client has to the observation a policy was
trained on, and from the policy's action back to the real system's units.

A session class belongs to its environment (``EnvSpec.deploy``: ``plume/envs/<env>/deploy.py``
declares one per variant, with what ``decide(measurement)`` takes and returns); this module
holds what every session builds on: the checks of measurements (:class:`MeasurementError`
naming the field) and of contract constants (``ContractError``), and the lookup of a
contract's session through its environment's spec. Each session keeps its own history and
builds the observation with the simulator's own builder (``plume.envs.<env>.observation``, the
code the batched environment calls), for one copy. Only numpy is imported: a deployed
controller needs no torch.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from plume.deploy.contract import ContractError
from plume.deploy.verify import contract_spec

__all__ = ["MeasurementError", "constant", "constant_array", "deployment_of", "has_session",
           "matrix", "no_session_reason", "number", "one", "session_for"]


class MeasurementError(ValueError):
    """A measurement a session cannot use: one line naming the field."""


def number(record: dict[str, Any], key: str, where: str = "", low: float | None = None) -> float:
    """``record[key]`` as a finite float (>= ``low`` when given), or MeasurementError."""
    if not isinstance(record, dict):
        raise MeasurementError(f"{where or 'measurement'} must be an object with {key!r}, got "
                               f"{type(record).__name__}")
    if key not in record:
        raise MeasurementError(f"missing field {where}{key}")
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise MeasurementError(f"field {where}{key} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or (low is not None and value < low):
        bound = "a finite number" if low is None else f"a finite number >= {low:g}"
        raise MeasurementError(f"field {where}{key} must be {bound}, got {value}")
    return value


def matrix(record: dict[str, Any], key: str, shape: tuple[int, ...]) -> np.ndarray:
    """``record[key]`` as a finite float64 array of ``shape``, or MeasurementError."""
    if key not in record:
        raise MeasurementError(f"missing field {key}")
    try:
        value = np.asarray(record[key], dtype=np.float64)
    except (TypeError, ValueError):
        raise MeasurementError(f"field {key} must be numbers of shape {shape}") from None
    if value.shape != shape or not np.all(np.isfinite(value)):
        raise MeasurementError(f"field {key} must be finite numbers of shape {shape}, got "
                               f"shape {value.shape}")
    return value


def constant(constants: dict[str, Any], key: str, low: float | None = None,
             above: float | None = None, integer: bool = False) -> float:
    """A contract constant a session uses, checked when the session is built (never at the
    first request): finite, >= ``low`` / > ``above``, integral when asked; ContractError."""
    value = constants.get(key)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (low is None or value >= low) and (above is None or value > above)
    if not ok or (integer and value != int(value)):
        bound = (f" >= {low:g}" if low is not None else "") + (
            f" > {above:g}" if above is not None else "")
        kind = "an integer" if integer else "a finite number"
        raise ContractError(f"constants.{key} must be {kind}{bound}, got {value!r}")
    return float(value)


def constant_array(constants: dict[str, Any], key: str, ndim: int) -> np.ndarray:
    """A constant table of positive finite numbers with ``ndim`` axes, or ContractError."""
    try:
        value = np.asarray(constants.get(key), dtype=np.float64)
    except (TypeError, ValueError):
        value = np.zeros(0)
    if value.ndim != ndim or value.size == 0 or not np.all(np.isfinite(value) & (value > 0)):
        raise ContractError(f"constants.{key} must be a {ndim}-axis table of positive finite "
                            "numbers")
    return value


def one(x: float) -> np.ndarray:
    """``x`` as the (1,) float64 array a one-copy observation builder takes."""
    return np.array([x], dtype=np.float64)


def deployment_of(contract: dict[str, Any], spec=None):
    """The ``Deployment`` (session and recorder classes) that the contract's environment
    declares for its variant: ``spec`` when the caller passes the EnvSpec of a user's
    environment, else the built-in environment the contract names (never a module the
    contract names); None when there is none."""
    spec = contract_spec(contract, spec)
    return None if spec is None else spec.deployment_for(contract["env"].get("variant"))


def has_session(contract: dict[str, Any], spec=None) -> bool:
    """Whether the contract's environment has a deployment session."""
    return deployment_of(contract, spec) is not None


def no_session_reason(contract: dict[str, Any]) -> str:
    name, variant = contract["env"].get("name"), contract["env"].get("variant")
    return (f"no deployment session for env={name}" + (f" variant={variant}" if variant else "")
            + "; pass observations with act_observation() instead (or, for a user's "
              "environment, its spec: load_controller(..., spec=SPEC))")


def session_for(contract: dict[str, Any], spec=None, **options: Any):
    """A new session of the contract's environment (``options``: what the session class
    takes, e.g. CC's ``clip_bps``), its constants checked (ContractError); ValueError for an
    environment without one."""
    deployment = deployment_of(contract, spec)
    if deployment is None:
        raise ValueError(no_session_reason(contract))
    constants = {**contract["constants"], **contract["action"]}
    return deployment.session(constants, **options)
