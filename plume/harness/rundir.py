"""The run-directory contract (DESIGN.md): every job is a self-describing folder.

- ``status.json``: running / completed / failed, with error text and timings
- ``train.jsonl``: the training curve, one JSON object per update
- ``eval.parquet``: one row per (progress point, test set, trace)
- ``sampler.parquet``: sampling weight per ground-truth kind / cluster over training
- ``checkpoint.pt``: model, optimiser, sampler and RNG states
Every file is written atomically (temporary file + rename), so a crash or a reader in another
process never sees half a file.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

STATUS = "status.json"
TRAIN_LOG = "train.jsonl"
EVAL_TABLE = "eval.parquet"
SAMPLER_TABLE = "sampler.parquet"
CHECKPOINT = "checkpoint.pt"
RESOLVED_CONFIG = "config.yaml"

RUNNING, COMPLETED, FAILED = "running", "completed", "failed"


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(tmp)
    os.replace(tmp, path)


class RunDirectory:
    """Reads and writes the files of one job's run directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    def status(self) -> dict[str, Any] | None:
        """The parsed ``status.json``, or None when the job never started."""
        try:
            return json.loads((self.path / STATUS).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    @property
    def is_completed(self) -> bool:
        status = self.status()
        return status is not None and status.get("state") == COMPLETED

    def write_status(self, state: str, **fields: Any) -> dict[str, Any]:
        """Merge ``fields`` into the status, set its state and time stamp, write it."""
        status = self.status() or {}
        status.update(fields, state=state, updated_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        text = json.dumps(status, indent=2, default=str)
        _atomic_write(self.path / STATUS, lambda tmp: tmp.write_text(text + "\n"))
        return status

    def write_json(self, name: str, content: dict[str, Any]) -> Path:
        path = self.path / name
        text = json.dumps(content, indent=2, default=str)
        _atomic_write(path, lambda tmp: tmp.write_text(text + "\n"))
        return path

    def reset_train_log(self) -> None:
        (self.path / TRAIN_LOG).unlink(missing_ok=True)

    def append_train(self, record: dict[str, Any]) -> None:
        with open(self.path / TRAIN_LOG, "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def truncate_train_log(self, env_steps: int) -> None:
        """Drop training records past ``env_steps`` (those a resumed job will redo)."""
        path = self.path / TRAIN_LOG
        if not path.is_file():
            return
        kept = [line for line in path.read_text().splitlines()
                if line.strip() and json.loads(line)["env_steps"] <= env_steps]
        _atomic_write(path, lambda tmp: tmp.write_text("".join(f"{line}\n" for line in kept)))

    def read_train(self) -> pd.DataFrame:
        return pd.read_json(self.path / TRAIN_LOG, lines=True)

    def write_table(self, name: str, rows: Iterable[dict[str, Any]] | pd.DataFrame) -> Path:
        frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
        path = self.path / name
        _atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False))
        return path

    def read_table(self, name: str) -> pd.DataFrame:
        return pd.read_parquet(self.path / name)

    def save_checkpoint(self, state: dict[str, Any]) -> Path:
        import torch

        path = self.path / CHECKPOINT
        _atomic_write(path, lambda tmp: torch.save(state, tmp))
        return path

    @property
    def has_checkpoint(self) -> bool:
        return (self.path / CHECKPOINT).is_file()

    def load_checkpoint(self) -> dict[str, Any]:
        import torch

        return torch.load(self.path / CHECKPOINT, map_location="cpu", weights_only=False)
