"""``contract.json``: what a deployed controller expects and does, as data.

One file per export, next to the model files. It names the environment and variant, every
observation field (name, unit, position, history, normalisation), the action and its meaning
in the real system's units, the constants the runtime's session needs, the policy (a model
with its input, outputs and greedy rule, or a classic rule by name), where it came from
(run directory, config and trace-data hashes, Plume version) and the parity check's result.
Reading it never executes anything: it is JSON, and the runtime maps the environment name to
its own built-in session classes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["CONTRACT_FILE", "CONTRACT_FORMAT", "ContractError", "read_contract",
           "write_contract"]

CONTRACT_FILE = "contract.json"
CONTRACT_FORMAT = "plume-controller/1"
REQUIRED = ("format", "env", "observation", "action", "constants", "policy")
POLICY_KINDS = ("model", "rule")


class ContractError(ValueError):
    """A contract that cannot be used: one line naming the file and what is wrong."""


def read_contract(path: str | Path) -> dict[str, Any]:
    """The contract of an export directory (or of the file itself), checked for the keys the
    runtime reads."""
    path = Path(path)
    file = path / CONTRACT_FILE if path.is_dir() else path
    try:
        contract = json.loads(file.read_text())
    except FileNotFoundError:
        raise ContractError(f"{file}: no contract (export a run with plume-export first)") \
            from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ContractError(f"{file}: unreadable contract: {err}") from None
    if not isinstance(contract, dict):
        raise ContractError(f"{file}: a contract is a JSON object")
    missing = [key for key in REQUIRED if key not in contract]
    if missing:
        raise ContractError(f"{file}: missing key(s) {', '.join(missing)}")
    if contract["format"] != CONTRACT_FORMAT:
        raise ContractError(f"{file}: format {contract['format']!r}; this Plume reads "
                            f"{CONTRACT_FORMAT!r}")
    kind = contract["policy"].get("kind") if isinstance(contract["policy"], dict) else None
    if kind not in POLICY_KINDS:
        raise ContractError(f"{file}: policy.kind must be one of {POLICY_KINDS}, got {kind!r}")
    return contract


def write_contract(directory: Path, contract: dict[str, Any]) -> Path:
    """Write ``contract.json`` into ``directory`` (indented: people read it)."""
    path = Path(directory) / CONTRACT_FILE
    path.write_text(json.dumps(contract, indent=2, sort_keys=False) + "\n")
    return path
