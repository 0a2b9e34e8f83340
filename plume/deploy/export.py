"""Exporting a controller: the greedy actor as TorchScript and ONNX, checked for parity, and
``contract.json``; or a classic controller's contract with its rule instead of a model.

Parity (at export, on the observations of the run's own test episodes): the PyTorch module,
the TorchScript file and the ONNX file (under onnxruntime) give outputs within ``TOLERANCE``
x max(1, the step's largest |output|) and the same greedy action on every recorded step. A step whose two best
outputs are within that tolerance of each other is a tie: counted and reported (with how
many tied steps the formats break differently), never a failure and never hidden. Anything
else fails the export with :class:`ParityError` naming the format, the step and the values.
Files are written to a temporary folder and moved into place only when parity holds.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from plume import __version__
from plume.deploy.contract import CONTRACT_FORMAT, write_contract

__all__ = ["ONNX_OPSET", "TOLERANCE", "ParityError", "check_parity", "contract_for",
           "export_controller", "export_policy", "export_rule", "install"]

TOLERANCE = 1e-5
"""Largest output difference between formats, relative to max(1, the step's largest |output|):
float32 sums round relative to their largest terms, so Q-values of 30 differ by a few 1e-6
between two correct implementations while logits near 0 must agree to 1e-5."""
TOLERANCE_TEXT = f"{TOLERANCE:g} x max(1, largest |output| of the step)"
ONNX_OPSET = 18
ONNX_FILE, TORCHSCRIPT_FILE = "policy.onnx", "policy.pt"
BATCH = 4096
"""Observations per forward pass in the parity check."""


class ParityError(RuntimeError):
    """The exported files do not compute what the trained policy computes."""


def contract_for(spec, params, policy: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """The contract of ``spec``'s environment with ``params``, ``policy`` and ``source``."""
    from dataclasses import asdict, is_dataclass

    described = spec.deployment(params) if spec.deployment is not None else {
        "observation": {"fields": [], "note": "the environment describes no fields"},
        "action": {}, "constants": {}}
    env = {"name": spec.name, "variant": getattr(params, "variant", None),
           "params": asdict(params) if is_dataclass(params) else {}}
    return {"format": CONTRACT_FORMAT, "plume_version": __version__, "env": env,
            **described, "policy": policy, "source": source}


def _forward(module, observations: np.ndarray) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return np.concatenate([module(torch.from_numpy(observations[i:i + BATCH])).numpy()
                               for i in range(0, len(observations), BATCH)])


def _actions(outputs: np.ndarray, rule: dict[str, Any]) -> np.ndarray:
    if rule["kind"] == "argmax":
        return outputs.argmax(axis=-1)
    return np.clip(outputs, np.asarray(rule["low"], np.float32),
                   np.asarray(rule["high"], np.float32))


def check_parity(reference: np.ndarray, others: dict[str, np.ndarray],
                 rule: dict[str, Any]) -> dict[str, Any]:
    """Compare each format's outputs with the reference's (same recorded observations);
    ParityError where they differ, else the report written into the contract."""
    scale = np.maximum(1.0, np.abs(reference).max(axis=-1, keepdims=True))
    ties = np.zeros(len(reference), dtype=bool)
    if rule["kind"] == "argmax" and reference.shape[-1] > 1:
        top2 = np.sort(reference, axis=-1)[:, -2:]
        ties = (top2[:, 1] - top2[:, 0]) <= TOLERANCE * scale[:, 0]
    actions = _actions(reference, rule)
    report = {"steps": int(len(reference)), "tolerance": TOLERANCE_TEXT,
              "ties": int(ties.sum()), "formats": {}}
    for name, outputs in others.items():
        excess = np.abs(outputs - reference) / scale
        if not np.all(excess <= TOLERANCE):
            step = int(np.argwhere(~(excess <= TOLERANCE))[0][0])
            raise ParityError(f"{name} differs from PyTorch at recorded step {step}: "
                              f"{outputs[step].tolist()} vs {reference[step].tolist()} "
                              f"(tolerance {TOLERANCE_TEXT})")
        other = _actions(outputs, rule)
        if rule["kind"] == "argmax":
            differ = other != actions
        else:  # continuous actions: the same action within the tolerance
            differ = (np.abs(other - actions) > TOLERANCE * scale).any(axis=-1)
        if np.any(differ & ~ties):
            step = int(np.argmax(differ & ~ties))
            raise ParityError(f"{name} picks action {other[step]} at recorded step {step} where "
                              f"PyTorch picks {actions[step]} (outputs {outputs[step].tolist()})")
        report["formats"][name] = {"max_abs_diff": float(np.abs(outputs - reference).max()),
                                   "ties_broken_differently": int((differ & ties).sum())}
    return report


def _write_models(module, obs_dim: int, folder: Path) -> None:
    """TorchScript (traced) and ONNX (torch.export-based exporter) with a dynamic batch."""
    import torch

    example = torch.zeros(2, obs_dim)
    chatter = logging.getLogger("torch.onnx")  # the exporter's registry warnings
    level = chatter.level
    chatter.setLevel(logging.ERROR)
    try:
        _trace_and_export(module, example, folder)
    finally:
        chatter.setLevel(level)


def _trace_and_export(module, example, folder: Path) -> None:
    import torch

    with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(module, example, check_trace=False)
        torch.jit.save(traced, str(folder / TORCHSCRIPT_FILE))
        batch = torch.export.Dim("batch", min=1)
        program = torch.onnx.export(module, (example,), dynamo=True, opset_version=ONNX_OPSET,
                                    input_names=["obs"], output_names=["outputs"],
                                    dynamic_shapes=({0: batch},), verbose=False)
        program.save(str(folder / ONNX_FILE))


def export_policy(greedy, observations: np.ndarray, contract: dict[str, Any],
                  out: Path) -> dict[str, Any]:
    """Write ``greedy`` (an ``Algorithm.greedy_policy()``) to ``out`` as TorchScript, ONNX and
    the contract (its ``policy`` section filled in here), after the parity check on
    ``observations`` (N, obs_dim) float32; returns the parity report."""
    import onnxruntime
    import torch

    observations = np.ascontiguousarray(observations, dtype=np.float32)
    obs_dim = observations.shape[1]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".export-", dir=Path(out).parent) as tmp:
        folder = Path(tmp)
        _write_models(greedy.module, obs_dim, folder)
        reference = _forward(greedy.module, observations)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript: Puffer's format
            scripted_module = torch.jit.load(str(folder / TORCHSCRIPT_FILE))
        scripted = _forward(scripted_module, observations)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        session = onnxruntime.InferenceSession(str(folder / ONNX_FILE), options,
                                               providers=["CPUExecutionProvider"])
        onnx_out = np.concatenate([session.run(None, {"obs": observations[i:i + BATCH]})[0]
                                   for i in range(0, len(observations), BATCH)])
        parity = check_parity(reference, {"torchscript": scripted, "onnx": onnx_out},
                              greedy.rule)
        contract["policy"] = {
            **contract["policy"], "kind": "model",
            "files": {"onnx": ONNX_FILE, "torchscript": TORCHSCRIPT_FILE},
            "input": {"name": "obs", "shape": [None, obs_dim], "dtype": "float32",
                      "layout": "a batch of flattened observations, as contract.observation"},
            "output": {"name": "outputs", "meaning": greedy.outputs,
                       "shape": [None, int(reference.shape[-1])]},
            "greedy": greedy.rule, "onnx_opset": ONNX_OPSET}
        contract["parity"] = parity
        write_contract(folder, contract)
        install(folder, Path(out))
    return parity


def install(folder: Path, out: Path) -> None:
    """Replace ``out`` by ``folder``'s files (a previous export there is removed)."""
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(folder, out)
    out.chmod(0o755)  # the temporary folder was private


def export_controller(env: str, params: dict[str, Any] | Any, controller: str,
                      out: str | Path, source: dict[str, Any] | None = None) -> Path:
    """A classic controller's contract (its rule by name, no model): the runtime and the
    adapters serve it exactly like a learned policy. Returns the export folder."""
    from plume.envs.registry import get_env

    spec = get_env(env)
    if controller not in spec.controllers:
        raise ValueError(f"env {spec.name!r} has no controller {controller!r}; valid: "
                         f"{', '.join(sorted(spec.controllers))}")
    params = spec.params(**params) if isinstance(params, dict) else params
    policy = {"kind": "rule", "controller": controller}
    return export_rule(contract_for(spec, params, policy, source or {"controller": controller}),
                       Path(out))


def export_rule(contract: dict[str, Any], out: Path) -> Path:
    """Write a rule's contract (no model files) into ``out``, replacing what was there."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".export-", dir=out.parent) as tmp:
        write_contract(Path(tmp), contract)
        install(Path(tmp), out)
    return out
