"""What a contract must agree with before its first decision, beyond its seal.

The seal (:mod:`plume.deploy.contract`) proves the files are as written; these checks prove
that what was written can be acted on:

- **the environment's own definition**: for a built-in environment, the observation, action
  and constants the contract carries must be what ``EnvSpec.deployment`` gives for the
  contract's ``env.params`` (every number, list and kind; prose is not compared, so a
  reworded description never invalidates an export). A NaN bitrate, ``n_chunks=-5`` or a
  video table from another video is refused here, not met at the first request.
- **the policy's shapes**: the model's input is a batch of flattened observations of the
  observation's size; its outputs are one per discrete action (greedy rule ``argmax`` with
  the action space's start) or one per action dimension (``clip`` with finite bounds).

A user's environment (not built in) is never imported from a contract (that would run its
code): the caller passes its EnvSpec (``load_controller(folder, spec=SPEC)``), which is then
checked like a built-in one; without it only the policy's own consistency is checked, and the
runtime serves it through ``act_observation``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from plume.deploy.contract import ContractError
from plume.envs.registry import ENV_PACKAGES, get_env

__all__ = ["check_contract", "contract_spec", "env_description", "first_difference"]

PROSE_KEYS_KEPT = ("kind", "dtype", "order", "name", "unit")
"""String values compared with the environment's definition; other strings are prose."""


def contract_spec(contract: dict[str, Any], spec=None):
    """The EnvSpec a contract is checked and served with: ``spec`` (a user's environment,
    passed by the caller: its name must be the contract's), else the built-in environment
    the contract names, resolved through the fixed registry ``ENV_PACKAGES`` (reading a
    contract never imports a module it names); None for a user's environment not passed."""
    env = contract.get("env") if isinstance(contract.get("env"), dict) else {}
    if spec is not None:
        if spec.name != env.get("name"):
            raise ContractError(f"the contract is an export of env {env.get('name')!r}, not of "
                                f"the spec passed ({spec.name!r})")
        return spec
    return get_env(env["name"]) if env.get("name") in ENV_PACKAGES else None


def check_contract(contract: dict[str, Any], where: str, spec=None) -> None:
    """ContractError (one line, starting with ``where``) unless the contract agrees with its
    environment's definition (``spec``, or the built-in one it names) and its policy section
    with itself."""
    _check_environment(contract, where, spec)
    if contract["policy"]["kind"] == "model":
        _check_model(contract, where)


def _decisive(value: Any) -> Any:
    """``value`` without its prose: the numbers, lists, kinds and names a session reads."""
    if isinstance(value, dict):
        return {k: _decisive(v) for k, v in value.items()
                if not isinstance(v, str) or k in PROSE_KEYS_KEPT}
    if isinstance(value, (list, tuple)):
        return [_decisive(v) for v in value]
    return value


def first_difference(found: Any, expected: Any, where: str) -> str | None:
    """The first place ``found`` differs from ``expected``, as one phrase, or None."""
    if isinstance(found, dict) and isinstance(expected, dict):
        for key in sorted(set(found) | set(expected), key=str):
            if key not in found:
                return f"{where}.{key} is missing"
            if key not in expected:
                return f"{where}.{key} is not part of the environment's definition"
            diff = first_difference(found[key], expected[key], f"{where}.{key}")
            if diff:
                return diff
        return None
    if isinstance(found, list) and isinstance(expected, list) and len(found) == len(expected):
        for i, (a, b) in enumerate(zip(found, expected)):
            diff = first_difference(a, b, f"{where}[{i}]")
            if diff:
                return diff
        return None
    other_type = type(found) is not type(expected) and not _both_numbers(found, expected)
    if other_type or found != expected:
        return f"{where} is {_short(found)}, the environment defines {_short(expected)}"
    return None


def _both_numbers(a: Any, b: Any) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_environment(contract: dict[str, Any], where: str, spec) -> None:
    env = contract["env"]
    if not isinstance(env, dict) or not isinstance(env.get("params"), dict):
        raise ContractError(f"{where}: env must be an object with params")
    try:
        spec = contract_spec(contract, spec)
    except ContractError as err:
        raise ContractError(f"{where}: {err}") from None
    if spec is None:
        return  # a user's environment whose spec was not passed: never imported from a contract
    try:
        params = spec.params(**env["params"])
    except (TypeError, ValueError) as err:
        raise ContractError(f"{where}: env.params are not valid for env {spec.name}: "
                            f"{err}") from None
    if env.get("variant") != getattr(params, "variant", None):
        raise ContractError(f"{where}: env.variant {env.get('variant')!r} does not match "
                            f"env.params (variant {getattr(params, 'variant', None)!r})")
    described = json.loads(json.dumps(env_description(spec, params)))
    for section in ("observation", "action", "constants"):
        diff = first_difference(_decisive(contract[section]), _decisive(described[section]),
                                section)
        if diff:
            raise ContractError(f"{where}: {diff} for these env.params (the export was edited "
                                "or made by another Plume version); export the run again")


def env_description(spec, params) -> dict[str, Any]:
    """The observation, action and constants ``spec``'s environment defines for ``params``
    (``EnvSpec.deployment``); an environment without one describes no fields."""
    if spec.deployment is not None:
        return spec.deployment(params)
    return {"observation": {"fields": [], "note": "the environment describes no fields"},
            "action": {}, "constants": {}}


def _check_model(contract: dict[str, Any], where: str) -> None:
    policy, action = contract["policy"], contract["action"]
    inputs, outputs, rule = (policy.get(k) for k in ("input", "output", "greedy"))
    if not all(isinstance(x, dict) for x in (inputs, outputs, rule)):
        raise ContractError(f"{where}: policy needs input, output and greedy objects")
    width = _batch_width(inputs.get("shape"), "policy.input.shape", where)
    layout = contract["observation"].get("layout")
    if isinstance(layout, list) and layout and width != math.prod(layout):
        raise ContractError(f"{where}: policy.input.shape[1] is {width}, the observation "
                            f"layout {layout} has {math.prod(layout)} values")
    if not isinstance(inputs.get("name"), str) or inputs.get("dtype") != "float32":
        raise ContractError(f"{where}: policy.input needs a name and dtype float32")
    n_out = _batch_width(outputs.get("shape"), "policy.output.shape", where)
    if rule.get("kind") == "argmax":
        _check_argmax(rule, action, n_out, where)
    elif rule.get("kind") == "clip":
        _check_clip(rule, action, n_out, where)
    else:
        raise ContractError(f"{where}: policy.greedy.kind must be argmax or clip, got "
                            f"{rule.get('kind')!r}")


def _batch_width(shape: Any, name: str, where: str) -> int:
    if (not isinstance(shape, list) or len(shape) != 2 or shape[0] is not None
            or not isinstance(shape[1], int) or isinstance(shape[1], bool) or shape[1] < 1):
        raise ContractError(f"{where}: {name} must be [null, n] with n >= 1, got "
                            f"{_short(shape)}")
    return shape[1]


def _check_argmax(rule: dict, action: dict, n_out: int, where: str) -> None:
    start = rule.get("start")
    if not isinstance(start, int) or isinstance(start, bool):
        raise ContractError(f"{where}: policy.greedy.start must be an integer")
    if action.get("kind") == "discrete":
        if n_out != action.get("n"):
            raise ContractError(f"{where}: the model has {n_out} outputs, the action "
                                f"{action.get('n')} choices")
        if start != action.get("start", 0):
            raise ContractError(f"{where}: policy.greedy.start is {start}, the action's "
                                f"first choice is {action.get('start', 0)}")


def _check_clip(rule: dict, action: dict, n_out: int, where: str) -> None:
    bounds = [rule.get("low"), rule.get("high")]
    if not all(isinstance(b, list) and len(b) == n_out
               and all(_finite_number(x) for x in b) for b in bounds):
        raise ContractError(f"{where}: policy.greedy low and high must be {n_out} finite "
                            "numbers each")
    if any(lo > hi for lo, hi in zip(*bounds)):
        raise ContractError(f"{where}: policy.greedy.low exceeds policy.greedy.high")
    shape = action.get("shape")
    if isinstance(shape, list) and math.prod(shape) != n_out:
        raise ContractError(f"{where}: the model has {n_out} outputs, the action shape is "
                            f"{shape}")


def _finite_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
