"""Find run directories and read them into tidy tables.

A *run directory* is any folder holding a ``status.json`` (docs/ARCHITECTURE.md, "Run
directory"). The report reads files only: ``status.json`` for the state, ``config.yaml``
(resolved config) for what the run was, ``eval.parquet`` for its test scores and ``score.json``
for what the score is and how it is normalised (floor and ceiling per test set). Nothing here
imports the harness, so a report can be built on a machine that only has the run folders.

    inventory = scan_runs(["runs/quickstart", "runs/extra/seed=7"])
    inventory.runs          # one row per run directory, completed or not
    scores = load_scores(inventory)   # one row per (completed run, progress, test set, trace)

Failed and unfinished runs stay in the inventory (with their error) and never reach
``load_scores``. A damaged run is listed, not fatal: :func:`read_run` is the one place that
reads a run's files, and it checks every file and field the report uses where it reads them; the
first problem makes the run ``broken`` with a one-line reason naming the file, and the report
goes on with the other runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from plume.runs.fields import (
    LARGEST,
    NAME_LIMIT,
    SEED_RANGE,
    RunFileError,
    as_mapping,
    as_name,
    as_real,
    as_text,
    as_whole,
    first_line,
    kind_of,
    load_json,
    load_yaml,
    present,
    regular_file,
    shown,
)
from plume.runs.record import (
    COMPLETED,
    EXPORTS,
    HYDRA_CONFIG,
    LINK_LATENESS,
    RUNNING,
    STATUS,
    RunStatus,
    read_status,
)
from plume.runs.record import EVAL_TABLE as EVAL
from plume.runs.record import RESOLVED_CONFIG as CONFIG
from plume.runs.record import SCORE_FILE as SCORE

BROKEN = "broken"
CONTROLLER = "controller"
"""The ``algo`` of a classic controller's run; its ``sampler`` column holds the controller."""

CHOICES = ("env", "algo", "sampler", "analysis", "policy", "link")
"""``status.json`` choices the report reads (``policy`` and ``link``: plume-emulate's)."""
SIMULATION, EMULATION = "simulation", "emulation"
"""A run directory's ``mode`` (config.yaml): emulation runs (plume-emulate) are reported
beside the simulator's runs (``plume.report.emulation``), never pooled with them."""
EVAL_REQUIRED = ("test_set", "trace", "return", "length", "progress")
EVAL_COLUMNS = (*EVAL_REQUIRED, "label", "cluster", "env_steps", "scoring_steps", "score")

#: Columns of the inventory, in order.
INVENTORY_COLUMNS = [
    "run_dir", "exp_name", "env", "dataset", "algo", "sampler", "analysis", "seed",
    "config_key", "state", "error", "elapsed", "total_steps", "eval_points", "test_sets",
    "score_name",
]
#: Columns of ``load_scores`` (the first 13 are the contract; the next three identify the run;
#: ``floor``/``ceiling`` are the run's normalisation anchors for the row's test set, NaN when
#: the run predates ``score.json``; ``scoring_steps`` the env steps its sampler had spent
#: playing the policy, 0 for a sampler that never does).
SCORE_COLUMNS = [
    "env", "dataset", "algo", "sampler", "config_key", "seed", "progress", "env_steps",
    "test_set", "trace", "label", "cluster", "score", "run_dir", "exp_name", "analysis",
    "floor", "ceiling", "scoring_steps",
]


class RunScanError(ValueError):
    """The paths given to the report hold no usable run directory."""


@dataclass
class RunFiles:
    """What the report took from one run directory, every field checked (``read_run``).

    ``status`` and ``config`` hold only the checked fields (config flattened: ``env`` is
    ``env.name``, ``algo`` is ``algo.name``...); ``eval`` is the checked ``eval.parquet`` of a
    completed run (with a ``score`` column); ``problem`` says why the run is broken."""

    status: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    score: dict[str, Any] = field(default_factory=dict)
    eval: pd.DataFrame | None = None
    state: str = BROKEN
    problem: str | None = None
    exports: list[dict[str, Any]] = field(default_factory=list)
    """The controller's exports (``exports.json``, plume-export); a damaged file gives one
    entry with ``problem`` and does not make the run broken."""


@dataclass
class RunInventory:
    """Every run directory found under the scanned paths.

    ``runs`` has one row per run directory (columns ``INVENTORY_COLUMNS``): state is
    ``completed``, ``failed``, ``running``, ``paused`` (stopped at ``train.stop_at``, never
    pooled), ``interrupted`` (a running job whose process is gone) or ``broken`` (a run file
    is unreadable or malformed, or a completed run lacks its ``eval.parquet``; ``error`` says
    which file and why). ``files`` keeps what was read per
    run directory, so ``load_scores`` reads nothing twice."""

    runs: pd.DataFrame
    paths: list[Path] = field(default_factory=list)
    files: dict[str, RunFiles] = field(default_factory=dict, repr=False)

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
    are skipped; a run directory's own sub-folders are not searched). A folder whose
    ``status.json`` is anything (a directory, a dangling link) is a run directory: it is
    listed as broken rather than silently missing."""
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
        if os.path.lexists(path / STATUS):
            found.setdefault(str(path.resolve()), path)
            continue
        for folder, subdirs, files in os.walk(path, followlinks=False):
            if STATUS in files or STATUS in subdirs:
                found.setdefault(str(Path(folder).resolve()), Path(folder))
                subdirs[:] = []
                continue
            subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
    return [found[key] for key in sorted(found)]


def scan_runs(paths: str | Path | Sequence[str | Path]) -> RunInventory:
    """Walk any mix of sweep roots and run directories; one inventory row per run directory.

    Raises ``RunScanError`` when a path does not exist or nothing under the paths is a run
    directory; a damaged run directory is a ``broken`` row, never an exception."""
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
    files = {str(run_dir): read_run(run_dir) for run_dir in run_dirs}
    run_dirs = [d for d in run_dirs if files[str(d)].config.get("mode") != EMULATION]
    if not run_dirs:
        raise RunScanError("only emulation run directories (plume-emulate) under "
                           + ", ".join(map(str, paths)))
    files = {str(run_dir): files[str(run_dir)] for run_dir in run_dirs}
    rows = [_describe(run_dir, files[str(run_dir)]) for run_dir in run_dirs]
    frame = pd.DataFrame(rows, columns=INVENTORY_COLUMNS)
    frame["seed"] = frame["seed"].astype("Int64")
    frame = frame.sort_values(["run_dir"], kind="stable").reset_index(drop=True)
    return RunInventory(frame, paths, files)


def _describe(run_dir: Path, files: RunFiles) -> dict[str, Any]:
    """The inventory row of one run from its checked files (whatever was read before a
    problem still names the run)."""
    status, config = files.status, files.config
    choices = status.get("choices", {})
    test_sets = config.get("test_sets")
    return {
        "run_dir": str(run_dir),
        "exp_name": _first(config.get("exp_name"), status.get("exp_name")),
        "env": _first(config.get("env"), choices.get("env")),
        "dataset": config.get("dataset"),
        # A classic controller's run (plume-eval) is listed as algo "controller".
        "algo": CONTROLLER if config.get("is_controller") else _first(
            config.get("algo"), choices.get("algo")),
        "sampler": _first(config.get("controller"), config.get("sampler"),
                          choices.get("sampler")),
        "analysis": choices.get("analysis"),
        "seed": _first(config.get("seed"), status.get("seed"), _seed_from_name(run_dir.name)),
        "config_key": run_dir.parent.name,
        "state": files.state,
        "error": files.problem or status.get("error"),
        "elapsed": status.get("elapsed_s"),
        "total_steps": config.get("total_steps"),
        "eval_points": config.get("eval_points"),
        "test_sets": ",".join(test_sets) if test_sets else None,
        "score_name": files.score.get("score", {}).get("name"),
    }


EXPORT_COLUMNS = ["run_dir", "kind", "policy", "path", "parity_steps", "ties",
                  "max_diff_torchscript", "max_diff_onnx", "created", "problem"]


def exports_table(inventory: RunInventory) -> pd.DataFrame:
    """One row per export of every scanned run (``plume-export``'s record in the run)."""
    rows = [{"run_dir": run_dir, **entry} for run_dir, files in inventory.files.items()
            for entry in files.exports]
    return pd.DataFrame(rows, columns=EXPORT_COLUMNS)


# --------------------------------------------------------------------------- reading one run


def read_run(run_dir: str | Path) -> RunFiles:
    """Read and check every file of ``run_dir`` the report uses: the one place that says
    "this run's files, or why not". The first unreadable file or malformed field makes the
    run broken (``problem`` names the file and what is wrong); the other files are still
    read, so the row names the run. Nothing here raises for a damaged run."""
    run_dir = Path(run_dir)
    files = RunFiles()
    problems: list[str] = []
    record = read_status(run_dir)
    if isinstance(record, RunStatus):
        files.status = _status_fields(record)
    else:
        problems.append(f"{STATUS}: cannot be read (missing)" if record is None
                        else record.reason)
    for attribute, read in (("config", lambda: _read_config(run_dir)),
                            ("score", lambda: _read_score(run_dir))):
        try:
            setattr(files, attribute, read())
        except RunFileError as err:
            problems.append(str(err))
    if not problems:
        files.state = record.effective_state()
        if files.state == COMPLETED:
            try:
                files.eval = _read_completed_eval(run_dir, files)
            except RunFileError as err:
                problems.append(str(err))
    if problems:
        files.state, files.problem, files.eval = BROKEN, problems[0], None
    files.exports = _read_exports(run_dir)
    return files


def _read_exports(run_dir: Path) -> list[dict[str, Any]]:
    """The checked entries of ``exports.json``: where, what, and the parity check's result."""
    if not os.path.lexists(run_dir / EXPORTS):
        return []
    try:
        entries = as_mapping(load_json(run_dir / EXPORTS, EXPORTS), EXPORTS).get("exports")
        if not isinstance(entries, list):
            raise RunFileError(f"{EXPORTS}: 'exports' is not a list")
        return [_check_export(as_mapping(e, f"{EXPORTS}: an entry")) for e in entries]
    except RunFileError as err:
        return [{"problem": str(err)}]


def _check_export(entry: dict[str, Any]) -> dict[str, Any]:
    at = f"{EXPORTS}: "
    parity = as_mapping(entry.get("parity") or {}, f"{at}parity")
    formats = as_mapping(parity.get("formats") or {}, f"{at}parity.formats")
    checked = {
        "path": as_text(entry.get("path"), f"{at}path"),
        "kind": as_name(entry.get("kind"), f"{at}kind"),
        "policy": as_name(entry.get("algorithm") or entry.get("controller"), f"{at}policy"),
        "created": as_text(entry.get("created"), f"{at}created", limit=NAME_LIMIT),
        "parity_steps": as_whole(parity.get("steps"), f"{at}parity.steps", (0, 2**62)),
        "ties": as_whole(parity.get("ties"), f"{at}parity.ties", (0, 2**62)),
    }
    for name in ("torchscript", "onnx"):
        diff = as_mapping(formats.get(name) or {}, f"{at}parity.formats.{name}")
        checked[f"max_diff_{name}"] = as_real(diff.get("max_abs_diff"),
                                            f"{at}parity.formats.{name}.max_abs_diff", low=0.0)
    return checked


def read_score_file(run_dir: str | Path) -> dict[str, Any]:
    """The run's checked ``score.json`` (score name and unit, normalisation description and
    floor/ceiling per test set); {} when the run has none (it predates the file) or it is
    malformed (such a run is broken, never pooled)."""
    try:
        return _read_score(Path(run_dir))
    except RunFileError:
        return {}


def _read_config(run_dir: Path) -> dict[str, Any]:
    """The checked ``config.yaml``; ``.hydra/config.yaml`` when a job failed before writing
    it; {} when neither exists."""
    for name in (CONFIG, HYDRA_CONFIG):
        if os.path.lexists(run_dir / name):
            return _check_config(load_yaml(run_dir / name, name), name)
    return {}


def _read_score(run_dir: Path) -> dict[str, Any]:
    if not os.path.lexists(run_dir / SCORE):
        return {}
    return _check_score(load_json(run_dir / SCORE, SCORE))


def _read_completed_eval(run_dir: Path, files: RunFiles) -> pd.DataFrame:
    """A completed run's checked ``eval.parquet``, consistent with its other files: it names
    its environment, and ``score.json`` (when it has anchors) covers every test set."""
    if not os.path.lexists(run_dir / EVAL):
        raise RunFileError(f"status says completed but {EVAL} is missing")
    table = _read_eval(run_dir / EVAL)
    if _first(files.config.get("env"), files.status.get("choices", {}).get("env")) is None:
        raise RunFileError(f"{CONFIG}: no env.name (nor choices.env in {STATUS}) for a "
                           "completed run")
    anchors = files.score.get("normalisation", {}).get("test_sets", {})
    uncovered = sorted(set(table["test_set"]) - set(anchors)) if anchors else []
    if uncovered:
        raise RunFileError(f"{SCORE}: no floor and ceiling for test set(s) {uncovered} of {EVAL}")
    return table


# --------------------------------------------------------------------------- files


# --------------------------------------------------------------------------- fields


def _status_fields(record: RunStatus) -> dict[str, Any]:
    """The fields of the status record the report shows (choices: the CHOICES it reads; an
    emulation's lateness with its trace lists counted)."""
    fields = {"state": record.state, "error": record.error, "elapsed_s": record.elapsed_s,
              "exp_name": record.exp_name, "seed": record.seed,
              "choices": {key: record.choices.get(key) for key in CHOICES}}
    if record.link_lateness is not None:
        lateness = record.link_lateness
        fields[LINK_LATENESS] = {
            **{key: lateness.get(key) for key in ("p50_ms", "p90_ms", "p99_ms", "max_ms",
                                                   "tolerance_ms", "count", "late_fraction",
                                                   "within_tolerance")},
            **{f"n_{key}": len(lateness.get(key) or []) for key in ("late_traces",
                                                                    "unmeasured_traces")}}
    if record.state == RUNNING:
        fields.update(host=record.host, pid=record.pid, heartbeat=record.heartbeat)
    return fields


def _check_config(config: Any, name: str) -> dict[str, Any]:
    """The fields of a resolved config the report uses, checked and flattened."""
    if not isinstance(config, dict):
        raise RunFileError(f"{name}: holds {kind_of(config)}, not a YAML mapping")
    at = f"{name}: "
    env = as_mapping(config.get("env"), f"{at}env")
    train = as_mapping(config.get("train"), f"{at}train")
    test_sets = env.get("test_sets")
    if test_sets is not None and not (
            isinstance(test_sets, list)
            and all(isinstance(t, str) and t.strip() and t.isprintable() for t in test_sets)):
        raise RunFileError(f"{at}env.test_sets is {kind_of(test_sets)} ({shown(test_sets)}), "
                           "not a list of test set names")
    steps = (0, SEED_RANGE[1])
    return {
        "exp_name": as_name(config.get("exp_name"), f"{at}exp_name"),
        "seed": as_whole(config.get("seed"), f"{at}seed", SEED_RANGE),
        "env": as_name(env.get("name"), f"{at}env.name"),
        "dataset": as_name(env.get("dataset"), f"{at}env.dataset"),
        "test_sets": test_sets,
        "algo": as_name(as_mapping(config.get("algo"), f"{at}algo").get("name"), f"{at}algo.name"),
        "sampler": as_name(as_mapping(config.get("sampler"), f"{at}sampler").get("name"),
                         f"{at}sampler.name"),
        "controller": as_name(config.get("controller"), f"{at}controller"),
        "is_controller": "controller" in config,
        "mode": _mode(config.get("mode", SIMULATION), f"{at}mode"),
        "total_steps": as_whole(train.get("total_steps"), f"{at}train.total_steps", steps),
        "eval_points": as_whole(train.get("eval_points"), f"{at}train.eval_points", steps),
    }


def _mode(value: Any, where: str) -> str:
    if value not in (SIMULATION, EMULATION):
        raise RunFileError(f"{where} is {shown(value)}, not {SIMULATION!r} or {EMULATION!r}")
    return value


def _check_score(score: Any) -> dict[str, Any]:
    """The fields of ``score.json`` the report uses, checked; absent ones are left out (as
    in a run that predates them)."""
    if not isinstance(score, dict):
        raise RunFileError(f"{SCORE}: holds {kind_of(score)}, not a JSON object")
    at = f"{SCORE}: "
    spec = as_mapping(score.get("score"), f"{at}score")
    norm = as_mapping(score.get("normalisation"), f"{at}normalisation")
    anchors = {}
    for test_set, pair in as_mapping(norm.get("test_sets"), f"{at}normalisation.test_sets").items():
        where = f"{at}normalisation.test_sets.{shown(test_set)}"
        as_name(test_set, f"{at}test set")
        pair = as_mapping(pair, where)
        anchors[test_set] = {key: as_real(pair.get(key), f"{where}.{key}", required=True)
                             for key in ("floor", "ceiling")}
    return {
        "score": present(name=as_name(spec.get("name"), f"{at}score.name"),
                          unit=as_text(spec.get("unit"), f"{at}score.unit", limit=NAME_LIMIT)),
        "normalisation": present(
            description=as_text(norm.get("description"), f"{at}normalisation.description",
                              limit=10_000),
            test_sets=anchors),
    }


# --------------------------------------------------------------------------- eval.parquet


def _read_eval(path: Path) -> pd.DataFrame:
    """The columns of ``eval.parquet`` the report uses, checked, with ``score`` (the episode
    score, or for runs that predate it the QoE per chunk ``return / length``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    regular_file(path, EVAL)
    # Parquet decoders raise many types on damaged bytes; each of these means "unreadable".
    errors = (pa.ArrowException, OSError, ValueError, TypeError, KeyError, IndexError,
              NotImplementedError, MemoryError)
    try:
        available = set(pq.read_schema(path).names)
        missing = sorted(set(EVAL_REQUIRED) - available)
        table = None if missing else pq.read_table(
            path, columns=[c for c in EVAL_COLUMNS if c in available]).to_pandas()
    except errors as err:
        raise RunFileError(f"{EVAL}: not a readable Parquet file ({first_line(err)})") from None
    if missing:
        raise RunFileError(f"{EVAL}: missing column(s) {missing}")
    if table.empty:
        raise RunFileError(f"{EVAL}: no rows")
    for column in ("return", "length", "progress", "env_steps", "scoring_steps", "score"):
        if column in table and not _numeric(table[column]):
            raise RunFileError(f"{EVAL}: column {column!r} holds {table[column].dtype} values, "
                               "not numbers")
    if "score" not in table:
        with np.errstate(divide="ignore", invalid="ignore"):
            table["score"] = _floats(table["return"]) / _floats(table["length"])
    _check_values(table, "progress", 0.0, 1.0, allow_missing=False)
    _check_values(table, "score", -LARGEST, LARGEST, allow_missing=True)  # NaN: stats drops
    for column in ("env_steps", "scoring_steps"):
        if column in table:
            _check_values(table, column, 0.0, LARGEST, allow_missing=column == "env_steps")
    if table["trace"].isna().any():
        raise RunFileError(f"{EVAL}: column 'trace' has missing values")
    _check_names(table, "test_set", allow_missing=False)
    _check_names(table, "label", allow_missing=True)
    if "cluster" in table and not _numeric(table["cluster"]):
        _check_names(table, "cluster", allow_missing=True)
    return table.drop(columns=[c for c in ("return", "length") if c in table])


def _numeric(column: pd.Series) -> bool:
    return (pd.api.types.is_numeric_dtype(column)
            and not pd.api.types.is_bool_dtype(column)) or column.isna().all()


def _floats(column: pd.Series) -> np.ndarray:
    return column.to_numpy(dtype=float, na_value=np.nan)


def _check_values(table: pd.DataFrame, column: str, low: float, high: float, *,
                  allow_missing: bool) -> None:
    """RunFileError naming the first value of ``column`` outside [low, high] (or missing,
    unless ``allow_missing``: non-finite scores are left out later, with a note)."""
    values = _floats(table[column])
    bad = (values < low) | (values > high)
    if not allow_missing:
        bad |= ~np.isfinite(values)
    if bad.any():
        first = float(values[bad][0])
        raise RunFileError(f"{EVAL}: {column} {first!r} is outside [{low:g}, {high:g}] "
                           f"({int(bad.sum())} row(s))")


def _check_names(table: pd.DataFrame, column: str, *, allow_missing: bool) -> None:
    if column not in table:
        return
    values = table[column]
    if values.isna().any() and not allow_missing:
        raise RunFileError(f"{EVAL}: column {column!r} has missing values")
    for value in pd.unique(values.dropna()):
        if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
            as_name(value, f"{EVAL}: {column}")


# --------------------------------------------------------------------------- scores


def _anchor(test_sets: pd.Series, anchors: dict, key: str) -> np.ndarray:
    """Per row, the run's recorded ``floor`` or ``ceiling`` for the row's test set (NaN if none)."""
    return test_sets.map(lambda t: anchors.get(t, {}).get(key, np.nan)).to_numpy(float)


def _seed_from_name(name: str) -> int | None:
    match = re.fullmatch(r"seed=(-?\d{1,18})", name)
    return int(match.group(1)) if match else None


def _first(*values: Any) -> Any:
    for value in values:
        if value is not None:
            return value
    return None


def _run_files(inventory: RunInventory, run_dir: str) -> RunFiles:
    """What the scan read for ``run_dir`` (read again for an inventory built by hand);
    RunScanError when that run cannot be pooled."""
    files = inventory.files.get(run_dir) or read_run(run_dir)
    if files.eval is None:
        raise RunScanError(f"{run_dir}: {files.problem or 'not a completed run'}")
    return files


def load_scores(inventory: RunInventory) -> pd.DataFrame:
    """Tidy test scores of the COMPLETED runs: one row per (run, progress, test set, trace).

    ``score`` is the environment's score of each episode (eval.parquet's ``score`` column; the
    QoE per chunk ``return / length`` for runs that predate it). ``label`` is the ground-truth
    kind (NA when the test set has none), ``cluster`` the trace's cluster when
    ``eval.parquet`` records one (NA otherwise). Columns: ``SCORE_COLUMNS``."""
    frames = []
    for run in inventory.completed.itertuples(index=False):
        files = _run_files(inventory, run.run_dir)
        table = files.eval
        anchors = files.score.get("normalisation", {}).get("test_sets", {})
        test_sets = table["test_set"].astype(str)
        frame = pd.DataFrame({
            "env": run.env,
            "dataset": run.dataset,
            "algo": run.algo,
            "sampler": run.sampler,
            "config_key": run.config_key,
            "seed": run.seed,
            "progress": _floats(table["progress"]),
            "env_steps": table["env_steps"].to_numpy() if "env_steps" in table else pd.NA,
            "test_set": test_sets.to_numpy(),
            "trace": table["trace"].to_numpy(),
            "label": table.get("label", pd.NA),
            "cluster": table.get("cluster", pd.NA),
            "score": _floats(table["score"]),
            "run_dir": run.run_dir,
            "exp_name": run.exp_name,
            "analysis": run.analysis,
            "floor": _anchor(test_sets, anchors, "floor"),
            "ceiling": _anchor(test_sets, anchors, "ceiling"),
            "scoring_steps": (_floats(table["scoring_steps"]) if "scoring_steps" in table
                              else 0.0),
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
    "BROKEN",
    "CONTROLLER",
    "INVENTORY_COLUMNS",
    "SCORE_COLUMNS",
    "RunFileError",
    "RunFiles",
    "RunInventory",
    "RunScanError",
    "find_run_dirs",
    "load_scores",
    "read_run",
    "read_score_file",
    "scan_runs",
]
