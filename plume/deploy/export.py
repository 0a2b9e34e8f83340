"""Exporting a controller: the greedy actor as TorchScript and ONNX, checked for parity, and
``contract.json``; or a classic controller's contract with its rule instead of a model.

Parity (at export, on the observations of the run's own test episodes): the PyTorch module,
the TorchScript file and the ONNX file (under onnxruntime) give outputs within ``TOLERANCE``
x max(1, the step's largest |output|) and the same greedy action on every recorded step. A
step whose two best outputs are within that tolerance of each other is a tie: counted and
reported (with how many tied steps the formats break differently), never a failure and never
hidden. Anything
else fails the export with :class:`ParityError` naming the format, the step and the values.
Files are written to a private staging folder beside the destination and moved into place
only when parity holds; the destination must be new, empty or an earlier export of the same
run or rule (:func:`check_destination`), and only the files an export writes are replaced.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from plume import __version__
from plume.deploy.contract import CONTRACT_FILE, CONTRACT_FORMAT, write_contract
from plume.deploy.verify import env_description
from plume.envs.registry import get_env

__all__ = ["EXPORT_FILES", "ONNX_OPSET", "TOLERANCE", "DestinationError", "ParityError",
           "check_destination", "check_parity", "contract_for", "export_controller",
           "export_identity", "export_policy", "export_rule", "install", "run_identity",
           "stage_policy", "staging"]

TOLERANCE = 1e-5
"""Largest output difference between formats, relative to max(1, the step's largest |output|):
float32 sums round relative to their largest terms, so Q-values of 30 differ by a few 1e-6
between two correct implementations while logits near 0 must agree to 1e-5."""
TOLERANCE_TEXT = f"{TOLERANCE:g} x max(1, largest |output| of the step)"
ONNX_OPSET = 18
ONNX_FILE, TORCHSCRIPT_FILE = "policy.onnx", "policy.pt"
EXPORT_FILES = (ONNX_FILE, TORCHSCRIPT_FILE, CONTRACT_FILE)
"""Every file an export writes: a re-export replaces these and nothing else."""
BATCH = 4096
"""Observations per forward pass in the parity check."""


class ParityError(RuntimeError):
    """The exported files do not compute what the trained policy computes."""


class DestinationError(ValueError):
    """An export folder that is refused: writing there could destroy what Plume did not
    write, or nothing can be written there. One line; nothing was written."""


def contract_for(spec, params, policy: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """The contract of ``spec``'s environment with ``params``, ``policy`` and ``source``."""
    from dataclasses import asdict, is_dataclass

    env = {"name": spec.name, "variant": getattr(params, "variant", None),
           "params": asdict(params) if is_dataclass(params) else {}}
    return {"format": CONTRACT_FORMAT, "plume_version": __version__, "env": env,
            **env_description(spec, params), "policy": policy, "source": source}


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
        # through a Python file: a failed write is an OSError (a path makes torch's C++ writer
        # abort the process when the disk fills)
        with open(folder / TORCHSCRIPT_FILE, "wb") as handle:
            torch.jit.save(traced, handle)
        batch = torch.export.Dim("batch", min=1)
        program = torch.onnx.export(module, (example,), dynamo=True, opset_version=ONNX_OPSET,
                                    input_names=["obs"], output_names=["outputs"],
                                    dynamic_shapes=({0: batch},), verbose=False)
        program.save(str(folder / ONNX_FILE))


def stage_policy(greedy, observations: np.ndarray, contract: dict[str, Any],
                 folder: Path) -> dict[str, Any]:
    """Write ``greedy`` (an ``Algorithm.greedy_policy()``) into the staging ``folder`` as
    TorchScript, ONNX and the sealed contract (its ``policy`` section filled in here), after
    the parity check on ``observations`` (N, obs_dim) float32; returns the parity report."""
    import onnxruntime
    import torch

    observations = np.ascontiguousarray(observations, dtype=np.float32)
    obs_dim = observations.shape[1]
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
    parity = check_parity(reference, {"torchscript": scripted, "onnx": onnx_out}, greedy.rule)
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
    return parity


def export_policy(greedy, observations: np.ndarray, contract: dict[str, Any],
                  out: Path) -> dict[str, Any]:
    """:func:`stage_policy` into ``out`` (checked first by :func:`check_destination`), moved
    into place only when parity holds; returns the parity report."""
    out = Path(out)
    check_destination(out, export_identity(contract))
    with staging(out) as folder:
        parity = stage_policy(greedy, observations, contract, folder)
        install(folder, out)
    return parity


def export_identity(contract: dict[str, Any]) -> str:
    """What an export is an export *of*: its run (by the hash of the run's config.yaml, which
    moving or copying the run keeps), or a rule of an environment."""
    source = contract.get("source") if isinstance(contract.get("source"), dict) else {}
    if source.get("config_sha256"):
        return run_identity(source["config_sha256"])
    env = contract.get("env") if isinstance(contract.get("env"), dict) else {}
    policy = contract.get("policy") if isinstance(contract.get("policy"), dict) else {}
    return f"rule {policy.get('controller')} of env {env.get('name')}"


def run_identity(config_sha256: str) -> str:
    """The identity of every export of the run whose ``config.yaml`` has this SHA-256."""
    return f"run {config_sha256}"


def _earlier_identity(folder: Path) -> str | None:
    """The identity of the export already in ``folder`` (None: not an export, or unreadable)."""
    try:
        contract = json.loads((folder / CONTRACT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return export_identity(contract) if isinstance(contract, dict) else None


def check_destination(out: Path, identity: str, run_dir: Path | None = None) -> None:
    """DestinationError unless ``out`` is missing, empty, or an earlier export of
    ``identity``: an export never deletes what it did not write. ``run_dir`` (the run being
    exported) may be neither ``out`` nor inside it (a sweep root, a parent folder)."""
    out = Path(out).resolve()
    if run_dir is not None:
        run = Path(run_dir).resolve()
        if out == run:
            raise DestinationError(f"--out {out} is the run directory itself; an export goes "
                                   f"into a folder of its own (default {run / 'export'})")
        if run.is_relative_to(out):
            raise DestinationError(f"--out {out} contains the run {run} (a sweep root or a "
                                   "parent folder); choose a new or empty folder")
    if not out.exists():
        return
    if not out.is_dir():
        raise DestinationError(f"--out {out} exists and is not a folder")
    if not any(out.iterdir()):
        return
    if _earlier_identity(out) != identity:
        raise DestinationError(f"--out {out} is not empty and holds no earlier export of "
                               f"this {identity.split(' ')[0]}; nothing was written (choose a "
                               "new or empty folder)")


@contextlib.contextmanager
def staging(out: Path) -> Iterator[Path]:
    """A private folder beside ``out`` (same file system: files move in by rename) for the
    export's files; removed afterwards, and with it every folder made for ``out``'s parent
    when the export fails, so a failed export leaves nothing behind."""
    out = Path(out)
    made = [p for p in (out.parent, *out.parent.parents) if not p.exists()]
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=".export-", dir=out.parent))
    except OSError as err:
        _remove_empty(made)
        raise DestinationError(f"--out {out}: cannot write there ({err.strerror or err})") \
            from None
    try:
        yield folder
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        _remove_empty(made)
        raise
    shutil.rmtree(folder, ignore_errors=True)


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:  # deepest first
        try:
            folder.rmdir()
        except OSError:
            return


def install(folder: Path, out: Path) -> None:
    """Move the staged export files of ``folder`` into ``out`` (made if missing), replacing
    the files an export writes (:data:`EXPORT_FILES`) and nothing else. The old contract goes
    first and the new one comes last, so that an interrupted install leaves no contract (or
    one whose seal no longer matches the models): refused when loaded, never acted on."""
    out = Path(out)
    out.mkdir(exist_ok=True)
    staged = {p.name for p in folder.iterdir()}
    (out / CONTRACT_FILE).unlink(missing_ok=True)
    for name in EXPORT_FILES:
        if name not in staged and (out / name).is_file():
            (out / name).unlink()  # a format the new export does not have (rule after model)
    for name in sorted(staged - {CONTRACT_FILE}, key=EXPORT_FILES.index):
        os.replace(folder / name, out / name)
    os.replace(folder / CONTRACT_FILE, out / CONTRACT_FILE)


def export_controller(env: str, params: dict[str, Any] | Any, controller: str,
                      out: str | Path, source: dict[str, Any] | None = None) -> Path:
    """A classic controller's contract (its rule by name, no model): the runtime and the
    adapters serve it exactly like a learned policy. Returns the export folder."""
    spec = get_env(env)
    if controller not in spec.controllers:
        raise ValueError(f"env {spec.name!r} has no controller {controller!r}; valid: "
                         f"{', '.join(sorted(spec.controllers))}")
    params = spec.params(**params) if isinstance(params, dict) else params
    policy = {"kind": "rule", "controller": controller}
    return export_rule(contract_for(spec, params, policy, source or {"controller": controller}),
                       Path(out))


def export_rule(contract: dict[str, Any], out: Path) -> Path:
    """Write a rule's sealed contract (no model files) into ``out`` (checked first)."""
    check_destination(out, export_identity(contract))
    with staging(out) as folder:
        write_contract(folder, contract)
        install(folder, out)
    return out
