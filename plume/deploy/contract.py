"""``contract.json``: what a deployed controller expects and does, as data, sealed.

One file per export, next to the model files. It names the environment and variant, every
observation field (name, unit, position, history, normalisation), the action and its meaning
in the real system's units, the constants the runtime's session needs, the policy (a model
with its input, outputs and greedy rule, or a classic rule by name), where it came from
(run directory, config and trace-data hashes, Plume version) and the parity check's result.

Its ``integrity`` section seals the export: the SHA-256 of every model file the policy names
and the SHA-256 of the contract's own content (canonical JSON of everything but that one
hash). :func:`read_contract` recomputes both, so a damaged or edited export (a torn copy, a
NaN typed into a constant, a shifted ``greedy.start``, another model dropped in) is refused
in one line before anything acts on it. JSON's non-standard ``NaN`` / ``Infinity`` are refused
when read and never written. Reading a contract never executes anything: it is JSON; a
built-in environment's session comes from plume's own registry, a user's only from the spec
its caller passes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["CONTRACT_FILE", "CONTRACT_FORMAT", "ContractError", "canonical_sha256",
           "contract_file", "file_sha256", "read_contract", "write_contract"]

CONTRACT_FILE = "contract.json"
CONTRACT_FORMAT = "plume-controller/2"
"""/2 adds the ``integrity`` section; /1 exports (unsealed) are refused with a re-export hint."""
REQUIRED = ("format", "env", "observation", "action", "constants", "policy", "integrity")
POLICY_KINDS = ("model", "rule")
MAX_CONTRACT_BYTES = 16 << 20
"""A contract is a few kB (the Pensieve video table is the largest part); more is not one."""


class ContractError(ValueError):
    """A contract that cannot be used: one line naming the file and what is wrong."""


def canonical_sha256(content: Any) -> str:
    """SHA-256 of ``content`` as canonical JSON (sorted keys, no spaces, finite numbers)."""
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sealed_part(contract: dict[str, Any]) -> dict[str, Any]:
    """Everything the contract hash covers: the whole contract but the hash itself."""
    integrity = {k: v for k, v in contract.get("integrity", {}).items()
                 if k != "contract_sha256"}
    return {**contract, "integrity": integrity}


def model_files(contract: dict[str, Any]) -> dict[str, str]:
    """The policy's files (format -> file name in the export folder); none for a rule."""
    files = contract["policy"].get("files") if isinstance(contract["policy"], dict) else None
    return dict(files) if isinstance(files, dict) else {}


def write_contract(directory: Path, contract: dict[str, Any]) -> Path:
    """Seal ``contract`` (hashes of the model files already in ``directory`` and of itself)
    and write it atomically as ``directory/contract.json`` (indented: people read it).
    ValueError naming the value for a non-finite number (never written as NaN)."""
    directory = Path(directory)
    files = {name: file_sha256(directory / name) for name in model_files(contract).values()}
    contract = {k: v for k, v in contract.items() if k != "integrity"}
    contract["integrity"] = {"algorithm": "sha256", "files": files}
    try:
        contract["integrity"]["contract_sha256"] = canonical_sha256(_sealed_part(contract))
    except ValueError:
        raise ValueError(f"the contract holds a non-finite number ({_first_non_finite(contract)})"
                         "; nothing was exported") from None
    path = directory / CONTRACT_FILE
    tmp = path.with_name(f".{CONTRACT_FILE}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(contract, indent=2) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _first_non_finite(value: Any, where: str = "") -> str:
    """The dotted path of the first NaN or infinity in ``value`` (for the error line)."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "the value"
    items = (value.items() if isinstance(value, dict)
             else enumerate(value) if isinstance(value, (list, tuple)) else ())
    for key, item in items:
        found = _first_non_finite(item, f"{where}.{key}" if where else str(key))
        if found:
            return found
    return ""


def _refuse_constant(name: str) -> Any:
    raise ContractError(f"non-finite number {name} (JSON has none; the file was edited)")


def contract_file(path: str | Path) -> Path:
    """The contract file of an export directory, or ``path`` itself when it names the file."""
    path = Path(path)
    return path / CONTRACT_FILE if path.is_dir() else path


def read_contract(path: str | Path) -> dict[str, Any]:
    """The contract of an export directory (or of the file itself), its seal verified: the
    model files and the contract hash as written, and the keys the runtime reads present."""
    file = contract_file(path)
    contract = _parse(file)
    missing = [key for key in REQUIRED if key not in contract]
    if contract.get("format") not in (None, CONTRACT_FORMAT) and "format" not in missing:
        hint = (" (made by an older Plume, without integrity hashes): export the run again "
                "with plume-export" if contract["format"] == "plume-controller/1" else "")
        raise ContractError(f"{file}: format {contract['format']!r}; this Plume reads "
                            f"{CONTRACT_FORMAT!r}{hint}")
    if missing:
        raise ContractError(f"{file}: missing key(s) {', '.join(missing)}")
    kind = contract["policy"].get("kind") if isinstance(contract["policy"], dict) else None
    if kind not in POLICY_KINDS:
        raise ContractError(f"{file}: policy.kind must be one of {POLICY_KINDS}, got {kind!r}")
    _verify_seal(file, contract)
    return contract


def _parse(file: Path) -> dict[str, Any]:
    if file.is_file() and file.stat().st_size > MAX_CONTRACT_BYTES:
        raise ContractError(f"{file}: {file.stat().st_size:,} bytes is not a contract")
    try:
        contract = json.loads(file.read_text(encoding="utf-8"), parse_constant=_refuse_constant)
    except FileNotFoundError:
        raise ContractError(f"{file}: no contract (export a run with plume-export first)") \
            from None
    except ContractError as err:
        raise ContractError(f"{file}: {err}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ContractError(f"{file}: unreadable contract: {err}") from None
    except ValueError as err:  # e.g. an integer of more digits than Python converts
        raise ContractError(f"{file}: unreadable contract: {err}") from None
    if not isinstance(contract, dict):
        raise ContractError(f"{file}: a contract is a JSON object")
    return contract


def _verify_seal(file: Path, contract: dict[str, Any]) -> None:
    """The contract hash, then every model file's: ContractError naming what differs."""
    integrity = contract["integrity"]
    recorded = integrity.get("contract_sha256") if isinstance(integrity, dict) else None
    if not isinstance(recorded, str) or not isinstance(integrity.get("files"), dict):
        raise ContractError(f"{file}: integrity section damaged (no contract_sha256 / files)")
    if canonical_sha256(_sealed_part(contract)) != recorded:
        raise ContractError(f"{file}: content does not match its SHA-256 (the contract was "
                            "edited or damaged); export the run again")
    folder = file.parent
    names = set(model_files(contract).values())
    if names != set(integrity["files"]):
        raise ContractError(f"{file}: integrity.files does not list the policy's files")
    for name in sorted(names):
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise ContractError(f"{file}: policy file {name!r} is not a file name in the "
                                "export folder")
        model = folder / name
        if not model.is_file():
            raise ContractError(f"{model}: the contract's model file is missing")
        if file_sha256(model) != integrity["files"][name]:
            raise ContractError(f"{model}: SHA-256 differs from the contract's (the file was "
                                "replaced or damaged); export the run again")
