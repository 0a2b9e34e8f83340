"""Hyperparameter search over ``plume-train`` jobs (``hydra/sweeper=plume_optuna``): the search
space, the objective read from run directories, the study and its outputs.

A trial is a set of values for the searched config keys; its jobs are ordinary ``plume-train``
jobs (one per seed) in ordinary run directories, trained rung by rung with ``train.stop_at``
(paused at each rung, resumed from its checkpoint at the next). Its value at a rung is the mean
over its seeds of each run's mean ``score`` on the held-out training traces (``train.validation``,
test set ``validation``) at its last evaluation at or before the rung: the test sets are never
read, so a search cannot tune on them. Only the sweeper process touches the study, and never a
damaged journal file (:func:`check_journal`).

Optuna (``pip install -e '.[tune]'``) is imported only by the functions that need it.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from plume.harness.config.datasets import VALIDATION
from plume.harness.config.errors import ConfigError
from plume.harness.config.preflight import JobInputs, check_train
from plume.runs.record import EVAL_TABLE

SPACE_KEY = "hydra.sweeper.params"
PARAM_TYPES = ("float", "int", "categorical")
PARAM_FIELDS = {"float": {"low", "high", "log", "step"}, "int": {"low", "high", "log", "step"},
                "categorical": {"choices"}}
DIRECTIONS = ("maximize", "minimize")
SAMPLERS = ("tpe", "random")
PRUNERS = ("median", "successive_halving", "none")
OBJECTIVES = ("mean", "worst", "mean_minus_std")
STUDY_DIR = "study"
JOURNAL = "optuna.journal"


@dataclass(frozen=True)
class Param:
    """One searched config key: a float or int range (``log`` scale or a ``step``) or a list of
    ``choices`` (a string choice is an override value as typed: ``[64,64]`` is a list)."""

    key: str
    type: str
    low: Any = None
    high: Any = None
    log: bool = False
    step: Any = None
    choices: tuple = ()

    def suggest(self, trial) -> Any:
        """This key's value for an Optuna ``trial`` (enqueued values come back as they were)."""
        if self.type == "float":
            return trial.suggest_float(self.key, self.low, self.high, log=self.log, step=self.step)
        if self.type == "int":
            return trial.suggest_int(self.key, self.low, self.high, log=self.log,
                                     step=self.step or 1)
        return trial.suggest_categorical(self.key, list(self.choices))

    def override(self, value: Any) -> str:
        return f"{self.key}={override_value(value)}"

    def probe(self) -> Any:
        """A value of the space, to compose a job before any trial exists."""
        return self.choices[0] if self.type == "categorical" else self.low

    def ends(self) -> list[tuple[str, Any]]:
        """(what, value) of every value a check of the space tries before any trial: each
        choice, or both ends of the range (the top one a ``step`` reaches, as Optuna's)."""
        if self.type == "categorical":
            return [("choice", c) for c in self.choices]
        top = self.high
        if self.step is not None:
            from optuna.distributions import FloatDistribution, IntDistribution

            kind = FloatDistribution if self.type == "float" else IntDistribution
            with warnings.catch_warnings():  # Optuna's "high is not a multiple of step"
                warnings.simplefilter("ignore")
                top = kind(self.low, self.high, step=self.step).high
        return [("low", self.low), ("high", top)]


def override_value(value: Any) -> str:
    """``value`` spelt as Hydra parses it back: a float by ``repr`` (exact), booleans and None
    as YAML, a string as typed."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return repr(value) if isinstance(value, float) else str(value)


def search_space(params: Mapping[str, Any] | None) -> dict[str, Param]:
    """The checked search space of ``hydra.sweeper.params``; ConfigError naming the key."""
    if not params:
        raise ConfigError(f"{SPACE_KEY} is empty: name the config keys to search, e.g. "
                          f"algo.learning_rate: {{type: float, low: 1e-5, high: 1e-2, log: true}}")
    return {str(key): _param(str(key), spec) for key, spec in params.items()}


def _param(key: str, spec: Any) -> Param:
    at = f"{SPACE_KEY}.{key}"
    if not isinstance(spec, Mapping) or spec.get("type") not in PARAM_TYPES:
        raise ConfigError(f"{at}: expected {{type: float|int|categorical, ...}}, got {spec!r}")
    kind = spec["type"]
    unknown = sorted(set(spec) - PARAM_FIELDS[kind] - {"type"})
    if unknown:
        raise ConfigError(f"{at}: a {kind} parameter has no field(s) {', '.join(unknown)}; "
                          f"its fields: {', '.join(sorted(PARAM_FIELDS[kind]))}")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, (list, tuple)) or not choices or not all(
                c is None or isinstance(c, (bool, int, float, str)) for c in choices):
            raise ConfigError(f"{at}.choices: expected a non-empty list of numbers, strings, "
                              f"booleans or null, got {choices!r}")
        return Param(key, kind, choices=tuple(choices))
    number = float if kind == "float" else int
    low, high, step, log = spec.get("low"), spec.get("high"), spec.get("step"), spec.get("log")
    for name, value in (("low", low), ("high", high), ("step", step)):
        if (value is not None or name != "step") and not _is_number(value, number):
            expected = "an integer" if kind == "int" else "a number"
            raise ConfigError(f"{at}.{name}: expected {expected}, got {value!r}")
    if not low < high:
        raise ConfigError(f"{at}: low ({low}) must be below high ({high})")
    if log not in (None, True, False):
        raise ConfigError(f"{at}.log: expected true or false, got {log!r}")
    if log and (low <= 0 or step is not None):
        raise ConfigError(f"{at}: a log scale needs low > 0 and no step")
    if step is not None and step <= 0:
        raise ConfigError(f"{at}.step: must be > 0, got {step}")
    return Param(key, kind, number(low), number(high), bool(log),
                 None if step is None else number(step))


def _is_number(value: Any, number: type) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and (number is float or float(value).is_integer())


def check_settings(settings: Mapping[str, Any]) -> list[float]:
    """The sweeper's own settings (``hydra.sweeper.<key>``), checked before anything runs;
    returns the rungs."""
    for key, valid in (("direction", DIRECTIONS), ("sampler", SAMPLERS), ("pruner", PRUNERS),
                       ("objective", OBJECTIVES)):
        if settings[key] not in valid:
            raise ConfigError(f"hydra.sweeper.{key}={settings[key]!r}: valid choices: "
                              f"{', '.join(valid)}")
    for key, low in (("n_trials", 1), ("n_jobs", 1), ("seeds", 1), ("n_startup_trials", 0),
                     ("warmup_rungs", 0), ("reduction_factor", 2)):
        value = settings[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"hydra.sweeper.{key} must be an integer >= {low}, got {value!r}")
    if settings["objective"] == "mean_minus_std" and settings["seeds"] < 2:
        raise ConfigError("hydra.sweeper.objective=mean_minus_std needs hydra.sweeper.seeds >= 2 "
                          f"(a standard deviation over seeds), got seeds={settings['seeds']}")
    rungs = settings["rungs"]
    if (not isinstance(rungs, (list, tuple)) or not rungs
            or any(not _is_number(r, float) or not 0 < r <= 1 for r in rungs)
            or list(rungs) != sorted(set(rungs)) or rungs[-1] != 1):
        raise ConfigError(f"hydra.sweeper.rungs={rungs!r}: expected increasing fractions of "
                          "train.total_steps in (0, 1], the last 1.0")
    return [float(r) for r in rungs]


def check_trial_job(cfg: DictConfig, rungs: list[float]) -> JobInputs:
    """A trial job's composed config: a validation objective, rungs on its evaluation points,
    then every check of ``plume-train`` (``check_train``); ConfigError otherwise."""
    if not OmegaConf.select(cfg, "train.validation", default=0):
        raise ConfigError("train.validation=0: the objective is a validation score: set "
                          "train.validation, e.g. 0.2")
    inputs = check_train(cfg)
    points = inputs.job.train.eval_points
    for rung in rungs:
        if not math.isclose(rung * points, round(rung * points), abs_tol=1e-9):
            raise ConfigError(f"hydra.sweeper.rungs: {rung} is not an evaluation point of "
                              f"train.eval_points={points} (multiples of {1 / points:g})")
    if inputs.job.overwrite:
        raise ConfigError("overwrite=true would retrain every trial's jobs at each rung: a "
                          "search resumes its jobs; remove it (or change exp_name)")
    return inputs


def rung_value(run_dir: str | Path, rung: float) -> float:
    """A run's mean score on its ``validation`` traces at its last evaluation at or before
    ``rung``; ValueError (one line) when the run has none."""
    path = Path(run_dir) / EVAL_TABLE
    try:
        frame = pd.read_parquet(path, columns=["test_set", "progress", "score"])
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: unreadable: {err}") from None
    rows = frame[(frame["test_set"] == VALIDATION) & (frame["progress"] <= rung + 1e-9)]
    if rows.empty:
        raise ValueError(f"{path}: no evaluation on test set {VALIDATION!r} at or before "
                         f"progress {rung}")
    value = float(rows.loc[rows["progress"] == rows["progress"].max(), "score"].mean())
    if not math.isfinite(value):
        raise ValueError(f"{path}: the mean {VALIDATION} score at progress {rung} is {value}")
    return value


def seed_objective(values: list[float], objective: str, direction: str) -> float:
    """A trial's value from its seeds' values: their ``mean``; the ``worst`` seed; or
    ``mean_minus_std`` (mean minus the sample standard deviation, plus when minimizing). The
    last two rank a configuration that collapses on one seed below a steady one."""
    sign = 1.0 if direction == "maximize" else -1.0
    if objective == "worst":
        return min(values) if sign > 0 else max(values)
    mean = float(np.mean(values))
    if objective == "mean_minus_std":
        return mean - sign * float(np.std(values, ddof=1))
    return mean


def make_sampler(name: str, seed: int, n_startup_trials: int):
    import optuna

    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup_trials)


def make_pruner(name: str, n_startup_trials: int, min_resource: int, reduction_factor: int):
    """Median: a trial below the median of the completed trials at the same rung stops;
    successive halving: rungs at ``min_resource`` x ``reduction_factor``**k env steps."""
    import optuna

    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=n_startup_trials, n_warmup_steps=0)
    if name == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=max(1, min_resource),
                                                      reduction_factor=reduction_factor)
    return optuna.pruners.NopPruner()


def open_study(name: str, storage: str | None, sweep_dir: Path, direction: str, sampler,
               pruner):
    """The study (created, or loaded to resume it) and where it is stored. Without a storage
    URL: Optuna's journal file ``<sweep dir>/optuna.journal``."""
    import optuna
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    where = storage or str(sweep_dir / JOURNAL)
    backend = storage or optuna.storages.JournalStorage(JournalFileBackend(where))
    study = optuna.create_study(storage=backend, study_name=name, direction=direction,
                                sampler=sampler, pruner=pruner, load_if_exists=True)
    return study, where


def check_journal(path: Path) -> None:
    """Refuse a damaged journal file before the sweeper opens it (ConfigError naming the file,
    the first bad line and how to go on), reading it only. Optuna itself skips a torn or
    undecodable last line and appends after it (tearing the next line too), and stops on any
    other bad line with a traceback, after writing to the file."""
    if not path.is_file():
        return
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as err:
        raise ConfigError(f"{path}: the study's journal cannot be read: {err.strerror}") from None
    logs: list[dict] = []
    bad = None
    for number, line in enumerate(lines, start=1):
        if number == len(lines):  # after the last line break: nothing, or a torn line
            if line:
                bad = (number, "is torn (no line break at its end: a write cut short)")
            break
        log = _journal_operation(line)
        if isinstance(log, str):
            bad = (number, log)
            break
        logs.append(log)
    bad = _replay(logs) or bad  # a line before the first unreadable one may not replay either
    if bad is not None:
        number, problem = bad
        keep = (f", or keep its first {number - 1} line(s) to resume from what they record "
                f"(head -n {number - 1} {path} > kept.journal; mv kept.journal {path})"
                if number > 1 else "")
        raise ConfigError(f"{path}:{number}: damaged Optuna journal: line {number} {problem}; "
                          f"the sweeper has not written to it: move it aside to start the "
                          f"study afresh{keep}")


def _journal_operation(line: bytes) -> dict | str:
    """One journal line as Optuna's operation record, or what is wrong with it."""
    if not line.strip():
        return "is empty"
    try:
        log = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        return "is not text (not UTF-8)"
    except json.JSONDecodeError as err:
        return f"is not JSON ({err.msg} at column {err.colno})"
    except (ValueError, RecursionError) as err:  # a 5,000-digit integer, nesting 30,000 deep
        return f"is not JSON ({str(err).splitlines()[0][:80] or type(err).__name__})"
    op = log.get("op_code") if isinstance(log, dict) else None
    if not isinstance(op, int) or isinstance(op, bool):
        return "is not an Optuna journal operation (no integer op_code)"
    return log


def _replay(logs: list[dict]) -> tuple[int, str] | None:
    """Optuna's own replay of ``logs`` in memory (nothing written): the line it fails on."""
    from optuna.storages.journal import BaseJournalBackend, JournalStorage

    class Lines(BaseJournalBackend):
        read = 0

        def read_logs(self, log_number_from: int):
            for number in range(log_number_from, len(logs)):
                self.read = number + 1
                yield logs[number]

        def append_logs(self, new: list[dict]) -> None:
            raise RuntimeError("a replay to check a journal writes nothing")

    lines = Lines()
    try:
        JournalStorage(lines)
    except Exception as err:  # noqa: BLE001 (any failure of Optuna's replay: that line)
        return lines.read, f"cannot be replayed by Optuna ({type(err).__name__}: {err})"
    return None


def recover(study) -> list[int]:
    """Trials a killed sweeper left running: told FAIL, their values asked again (enqueued),
    so that the new trials launch the same jobs in the same run directories."""
    from optuna.trial import TrialState

    stale = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    for trial in stale:
        study.tell(trial.number, state=TrialState.FAIL)
        study.enqueue_trial(dict(trial.params))
    return [t.number for t in stale]


def finished(study) -> int:
    """COMPLETE + PRUNED trials: what ``n_trials`` counts (a resumed study ends with as many)."""
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


def completed_median(study, step: int) -> float:
    """The median of the completed trials' values reported at ``step`` (nan without any)."""
    from optuna.trial import TrialState

    values = [t.intermediate_values[step] for t in study.get_trials(
        deepcopy=False, states=(TrialState.COMPLETE,)) if step in t.intermediate_values]
    return float(np.median(values)) if values else math.nan


def trials_table(study, space: Mapping[str, Param], rungs: list[float]) -> pd.DataFrame:
    """One row per trial: number, state, value, each parameter, the value at each rung, its
    seeds' values at each rung and its run directories (both ``;``-separated)."""
    rows = []
    for trial in study.get_trials(deepcopy=False):
        at = trial.user_attrs.get("rung_values", {})
        seeds = trial.user_attrs.get("seed_values", {})
        rows.append({"number": trial.number, "state": trial.state.name, "value": trial.value,
                     **{key: trial.params.get(key) for key in space},
                     **{f"rung_{r:g}": at.get(f"{r:g}") for r in rungs},
                     **{f"seeds_{r:g}": ";".join(f"{v:.6g}" for v in seeds.get(f"{r:g}", []))
                        for r in rungs},
                     "run_dirs": ";".join(trial.user_attrs.get("run_dirs", []))})
    return pd.DataFrame(rows)


def best_config(trial, space: Mapping[str, Param], typed: Callable[[str], Any],
                groups: set[str], header: str, prefix: str = "",
                defaults: list[str] | None = None) -> str:
    """The text of a config file setting the best trial's values as nested keys (``prefix``
    removed), a config group's choice in its defaults list, under a citing ``header``."""
    values: DictConfig = OmegaConf.create()
    chosen: list[Any] = list(defaults or [])
    for key, param in space.items():
        override = param.override(trial.params[key])
        if key in groups:
            chosen.append({f"override /{key}": override_value(trial.params[key])})
            continue
        OmegaConf.update(values, key.removeprefix(prefix), typed(override), force_add=True)
    body = OmegaConf.to_yaml(OmegaConf.merge({"defaults": chosen} if chosen else {}, values))
    return header + body


def citation(study, where: str, trial, package: str | None) -> str:
    """The comment block on top of ``best.yaml`` / ``best_algo.yaml``: what found these values."""
    attrs = trial.user_attrs
    found = (f"# Best trial of the Optuna study {study.study_name!r} ({where}): trial "
             f"{trial.number}, validation score {trial.value:.6g}")
    how = (f"# ({attrs.get('objective', 'mean')} over {attrs.get('seeds', '?')} seed(s), "
           f"train.validation="
           f"{attrs.get('validation', '?')}), budget {attrs.get('total_steps', '?')} env steps; "
           f"written {time.strftime('%Y-%m-%d %H:%M:%S %z')}.")
    search = f"# Search: plume-train -m {' '.join(attrs.get('command', []))}"
    lines = [*([f"# @package {package}"] if package else []), found, how, search]
    return "\n".join(lines) + "\n"


def draw_figures(study, out: Path) -> list[str]:
    """``history`` and (with >= 2 completed trials) ``importance`` as PNG and PDF; one line per
    figure saying where it is or why it is not drawn."""
    import matplotlib

    matplotlib.use("Agg")
    from optuna.trial import TrialState
    from optuna.visualization import matplotlib as plots

    from plume.figures import save_figure  # deferred: matplotlib loads only for a figure

    notes = []
    complete = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optuna.visualization.matplotlib is "experimental"
        for name, plot, needs in (("history", plots.plot_optimization_history, 1),
                                  ("importance", plots.plot_param_importances, 2)):
            if complete < needs:
                notes.append(f"{name}: not drawn: needs >= {needs} completed trial(s), the "
                             f"study has {complete}")
                continue
            try:
                axes = plot(study)
            except Exception as err:  # noqa: BLE001 (a figure Optuna cannot draw: said)
                notes.append(f"{name}: not drawn: {type(err).__name__}: {err}")
                continue
            paths = save_figure(axes.figure, out / name)
            notes.append(f"{name}: {', '.join(str(p) for p in paths)}")
    return notes
