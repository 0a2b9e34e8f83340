"""Find run directories and read them into tidy tables.

A *run directory* is any folder holding a ``status.json`` (DESIGN.md, "Run directory"). The
report reads files only: ``status.json`` for the state, ``config.yaml`` (resolved config) for
what the run was, ``eval.parquet`` for its test scores and ``score.json`` for what the score is
and how it is normalised (floor and ceiling per test set). Nothing here imports the harness, so
a report can be built on a machine that only has the run folders.

    inventory = scan_runs(["runs/quickstart", "runs/extra/seed=7"])
    inventory.runs          # one row per run directory, completed or not
    scores = load_scores(inventory)   # one row per (completed run, progress, test set, trace)

Failed and unfinished runs stay in the inventory (with their error) and never reach
``load_scores``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from plume.harness.rundir import effective_state

STATUS = "status.json"
CONFIG = "config.yaml"
EVAL = "eval.parquet"
SCORE = "score.json"
COMPLETED, FAILED, RUNNING = "completed", "failed", "running"
CONTROLLER = "controller"
"""The ``algo`` of a classic controller's run; its ``sampler`` column holds the controller."""

#: Columns of the inventory, in order.
INVENTORY_COLUMNS = [
    "run_dir", "exp_name", "env", "dataset", "algo", "sampler", "analysis", "seed",
    "config_key", "state", "error", "elapsed", "total_steps", "eval_points", "test_sets",
    "score_name",
]
#: Columns of ``load_scores`` (the first 13 are the contract; the next three identify the run;
#: ``floor``/``ceiling`` are the run's normalisation anchors for the row's test set, NaN when
#: the run predates ``score.json``).
SCORE_COLUMNS = [
    "env", "dataset", "algo", "sampler", "config_key", "seed", "progress", "env_steps",
    "test_set", "trace", "label", "cluster", "score", "run_dir", "exp_name", "analysis",
    "floor", "ceiling",
]


class RunScanError(ValueError):
    """The paths given to the report hold no usable run directory."""


@dataclass
class RunInventory:
    """Every run directory found under the scanned paths.

    ``runs`` has one row per run directory (columns ``INVENTORY_COLUMNS``): state is
    ``completed``, ``failed``, ``running`` (also: a job killed without writing its failure) or
    ``broken`` (completed but its ``eval.parquet`` is missing or unreadable)."""

    runs: pd.DataFrame
    paths: list[Path] = field(default_factory=list)

    @property
    def completed(self) -> pd.DataFrame:
        return self.runs[self.runs["state"] == COMPLETED].reset_index(drop=True)

    @property
    def excluded(self) -> pd.DataFrame:
        """Runs that are listed but never pooled: failed, unfinished, broken."""
        return self.runs[self.runs["state"] != COMPLETED].reset_index(drop=True)

    def __len__(self) -> int:
        return len(self.runs)

    def counts(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.runs["state"].value_counts().sort_index().items()}


def find_run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Run directories at or under ``paths`` (hidden folders such as ``.hydra`` and ``.cache``
    are skipped; a run directory's own sub-folders are not searched)."""
    found: dict[str, Path] = {}
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise RunScanError(f"{path}: no such file or directory")
        if path.is_file():
            if path.name == STATUS:
                path = path.parent
            else:
                raise RunScanError(f"{path}: expected a run directory or a folder of runs")
        if (path / STATUS).is_file():
            found.setdefault(str(path.resolve()), path)
            continue
        for folder, subdirs, files in os.walk(path, followlinks=False):
            if STATUS in files:
                found.setdefault(str(Path(folder).resolve()), Path(folder))
                subdirs[:] = []
                continue
            subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
    return [found[key] for key in sorted(found)]


def scan_runs(paths: str | Path | Sequence[str | Path]) -> RunInventory:
    """Walk any mix of sweep roots and run directories; one inventory row per run directory.

    Raises ``RunScanError`` when a path does not exist or nothing under the paths is a run
    directory."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = [Path(p) for p in paths]
    if not paths:
        raise RunScanError("no path given: pass sweep roots or run directories")
    run_dirs = find_run_dirs(paths)
    if not run_dirs:
        raise RunScanError(
            "no run directories found under " + ", ".join(map(str, paths))
            + f" (a run directory is a folder with {STATUS}, written by plume-train)"
        )
    rows = [_describe(run_dir) for run_dir in run_dirs]
    frame = pd.DataFrame(rows, columns=INVENTORY_COLUMNS)
    frame["seed"] = frame["seed"].astype("Int64")
    frame = frame.sort_values(["run_dir"], kind="stable").reset_index(drop=True)
    return RunInventory(frame, paths)


def _describe(run_dir: Path) -> dict[str, Any]:
    status, status_error = _read_status(run_dir)
    config = _read_config(run_dir)
    choices = status.get("choices") or {}
    seed = _first(config.get("seed"), status.get("seed"), _seed_from_name(run_dir.name))
    env = config.get("env") or {}
    test_sets = env.get("test_sets")
    state = effective_state(status) or ("unreadable" if status_error else "unknown")
    error = status.get("error") or status_error
    if state == COMPLETED and not (run_dir / EVAL).is_file():
        state, error = "broken", f"status says completed but {EVAL} is missing"
    return {
        "run_dir": str(run_dir),
        "exp_name": _first(config.get("exp_name"), status.get("exp_name")),
        "env": _first(env.get("name"), choices.get("env")),
        "dataset": env.get("dataset"),
        # A classic controller's run (plume-eval) is listed as algo "controller".
        "algo": CONTROLLER if "controller" in config else _first(
            (config.get("algo") or {}).get("name"), choices.get("algo")),
        "sampler": _first(config.get("controller"), (config.get("sampler") or {}).get("name"),
                          choices.get("sampler")),
        "analysis": choices.get("analysis"),
        "seed": None if seed is None else int(seed),
        "config_key": run_dir.parent.name,
        "state": state,
        "error": error,
        "elapsed": status.get("elapsed_s"),
        "total_steps": (config.get("train") or {}).get("total_steps"),
        "eval_points": (config.get("train") or {}).get("eval_points"),
        "test_sets": ",".join(map(str, test_sets)) if test_sets else None,
        "score_name": (read_score_file(run_dir).get("score") or {}).get("name"),
    }


def read_score_file(run_dir: Path) -> dict[str, Any]:
    """The run's ``score.json`` (score name, unit, normalisation per test set); {} when the run
    has none (it predates the file) or it is unreadable."""
    try:
        loaded = json.loads((Path(run_dir) / SCORE).read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _read_status(run_dir: Path) -> tuple[dict[str, Any], str | None]:
    try:
        return json.loads((run_dir / STATUS).read_text()), None
    except (OSError, json.JSONDecodeError) as err:
        return {}, f"{STATUS} unreadable: {err}"


def _read_config(run_dir: Path) -> dict[str, Any]:
    """The resolved ``config.yaml``; ``.hydra/config.yaml`` when a job failed before writing
    it; {} when neither exists."""
    import yaml

    for candidate in (run_dir / CONFIG, run_dir / ".hydra" / "config.yaml"):
        if candidate.is_file():
            try:
                loaded = yaml.safe_load(candidate.read_text())
            except yaml.YAMLError:
                continue
            if isinstance(loaded, dict):
                return loaded
    return {}


def _anchor(test_sets: pd.Series, anchors: dict, key: str) -> np.ndarray:
    """Per row, the run's recorded ``floor`` or ``ceiling`` for the row's test set (NaN if none)."""
    return test_sets.map(lambda t: anchors.get(t, {}).get(key, np.nan)).to_numpy(float)


def _seed_from_name(name: str) -> int | None:
    match = re.fullmatch(r"seed=(-?\d+)", name)
    return int(match.group(1)) if match else None


def _first(*values: Any) -> Any:
    for value in values:
        if value is not None:
            return value
    return None


def load_scores(inventory: RunInventory) -> pd.DataFrame:
    """Tidy test scores of the COMPLETED runs: one row per (run, progress, test set, trace).

    ``score`` is the environment's score of each episode (eval.parquet's ``score`` column; the
    QoE per chunk ``return / length`` for runs that predate it). ``label`` is the ground-truth
    kind (NA when the
    test set has none), ``cluster`` the trace's cluster when ``eval.parquet`` records one (NA
    otherwise). Columns: ``SCORE_COLUMNS``."""
    import pyarrow.parquet as pq

    frames = []
    for run in inventory.completed.itertuples(index=False):
        path = Path(run.run_dir) / EVAL
        available = set(pq.read_schema(path).names)
        wanted = ["test_set", "trace", "label", "cluster", "return", "length", "progress",
                  "env_steps", "score"]
        missing = {"test_set", "trace", "return", "length", "progress"} - available
        if missing:
            raise RunScanError(f"{path}: missing column(s) {sorted(missing)}")
        table = pd.read_parquet(path, columns=[c for c in wanted if c in available])
        if "score" in table:
            score = table["score"].to_numpy(float)
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                score = table["return"].to_numpy(float) / table["length"].to_numpy(float)
        anchors = (read_score_file(run.run_dir).get("normalisation") or {}).get("test_sets", {})
        test_sets = table["test_set"].astype(str)
        frame = pd.DataFrame({
            "env": run.env,
            "dataset": run.dataset,
            "algo": run.algo,
            "sampler": run.sampler,
            "config_key": run.config_key,
            "seed": run.seed,
            "progress": table["progress"].to_numpy(float),
            "env_steps": table["env_steps"].to_numpy() if "env_steps" in table else pd.NA,
            "test_set": table["test_set"].astype(str).to_numpy(),
            "trace": table["trace"].to_numpy(),
            "label": table.get("label", pd.NA),
            "cluster": table.get("cluster", pd.NA),
            "score": score,
            "run_dir": run.run_dir,
            "exp_name": run.exp_name,
            "analysis": run.analysis,
            "floor": _anchor(test_sets, anchors, "floor"),
            "ceiling": _anchor(test_sets, anchors, "ceiling"),
        })
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=SCORE_COLUMNS)
    scores = pd.concat(frames, ignore_index=True)[SCORE_COLUMNS]
    for column in ("label", "cluster"):
        scores[column] = scores[column].astype("string")
    scores["seed"] = scores["seed"].astype("Int64")
    return scores


__all__ = [
    "CONTROLLER",
    "INVENTORY_COLUMNS",
    "SCORE_COLUMNS",
    "RunInventory",
    "RunScanError",
    "find_run_dirs",
    "load_scores",
    "read_score_file",
    "scan_runs",
]
