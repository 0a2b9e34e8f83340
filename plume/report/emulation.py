"""Emulation results in reports: the folders ``plume-emulate`` writes (``emulation.json``,
``emulation.parquet``), read as data, shown as simulation and emulation side by side with the
gap per controller and metric.

The gap (``plume.emulation.gap``) is emulation minus simulation on the same trace, averaged
over traces, with a 95 % Student-t interval over the per-trace differences from 5 traces on
(none below: never an interval from fewer than 5).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import pandas as pd

from plume.emulation.gap import gap_rows

__all__ = ["EMULATION_FILE", "find_emulations", "read_emulations"]

EMULATION_FILE = "emulation.json"
TABLE_FILE = "emulation.parquet"
GAP_COLUMNS = ["folder", "env", "policy", "metric", "simulation", "emulation", "gap",
               "gap_lo", "gap_hi", "traces", "problem"]


def find_emulations(paths: Sequence[str | Path]) -> list[Path]:
    """Every folder under ``paths`` that ``plume-emulate`` wrote (it holds emulation.json)."""
    found = set()
    for path in map(Path, paths):
        if (path / EMULATION_FILE).is_file():
            found.add(path)
        if path.is_dir():
            found.update(p.parent for p in path.rglob(EMULATION_FILE))
    return sorted(found)


def _read_one(folder: Path) -> list[dict]:
    try:
        meta = json.loads((folder / EMULATION_FILE).read_text())
        frame = pd.read_parquet(folder / TABLE_FILE)
        metrics = [m for m in meta["metrics"] if m in frame.columns]
        if set(frame["mode"]) != {"emulation", "simulation"} or not metrics:
            raise ValueError("it needs both modes and the metrics emulation.json names")
        rows = gap_rows(frame, metrics)
    except (OSError, ValueError, KeyError, TypeError) as err:
        return [{"folder": str(folder), "problem": f"{type(err).__name__}: {err}"[:200]}]
    return [{"folder": str(folder), "env": meta.get("env"), "policy": meta.get("policy"),
             **row} for row in rows]


def read_emulations(paths: Sequence[str | Path]) -> pd.DataFrame:
    """One row per (emulation folder, metric); an unreadable folder is one row with its
    ``problem``."""
    rows = [row for folder in find_emulations(paths) for row in _read_one(folder)]
    return pd.DataFrame(rows, columns=GAP_COLUMNS)
