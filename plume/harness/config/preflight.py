"""Everything a job reads, checked before anything of the job exists on disk.

A user's mistake (a config value, a trace file, an ``env.package`` module, a name that would
put a folder outside ``paths.root``) must fail in one line with nothing left behind: no run
directory, no ``failed`` status a report would count, no W&B run, no analysis. So each app
loads and checks its inputs here first: Hydra's ``ValidateFirst`` callback calls these checks
before a single run's directory is made, the ``plume`` sweeper before it launches a sweep's
jobs, and the job itself again (the directory Hydra made for a refused multirun job is
removed). The loaded data is kept for the job that follows (:func:`load_inputs`), so a single
run reads its trace files once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from plume.harness.config.datasets import (
    VALIDATION,
    is_builtin,
    load_checked,
    load_test_sets,
    make_env,
    validation_split,
)
from plume.harness.config.errors import ConfigError
from plume.harness.config.schema import (
    JobConfig,
    analysis_settings,
    check_inside_root,
    env_section,
    validate,
)
from plume.traces import TraceSet


@dataclass(frozen=True)
class JobInputs:
    """A validated ``plume-train`` job and the data it trains and tests on."""

    job: JobConfig
    train_traces: TraceSet
    test_sets: dict[str, TraceSet]


def check_train(cfg: DictConfig) -> JobInputs:
    """The job's config, its trace data (train split and every test set) and the fit of its
    algorithm to the environment, checked; ConfigError (one line) otherwise."""
    inputs = load_inputs(validate(cfg))
    _check_algorithm_fits(inputs.job, inputs.train_traces)
    return inputs


def check_eval(cfg: DictConfig):
    """``plume-eval``: ``(env section, EnvSpec, params, controller, test sets)``, checked."""
    env, spec, params, name = check_controller(cfg)
    key = ("eval", spec.name, tuple(env.test_sets), env.trace_format,
           env.max_padded_samples, repr(params))
    test_sets = _cached(key, spec, env.test_sets, lambda: load_test_sets(spec, env, params))
    return env, spec, params, name, test_sets


def check_controller(cfg: DictConfig):
    """``(env section, EnvSpec, params, controller name)`` of a plume-eval config; ConfigError
    for a bad env key or a controller the env does not have (before any evaluation)."""
    env, spec, params = env_section(cfg.get("env"))
    check_inside_root(str(cfg.paths.root), exp_name=str(cfg.get("exp_name")))
    name = str(cfg.get("controller"))
    if name not in spec.controllers:
        raise ConfigError(f"controller={name!r} is not a controller of env {spec.name!r}; "
                          f"valid choices: {', '.join(sorted(spec.controllers))}")
    return env, spec, params, name


def check_analyze(cfg: DictConfig):
    """``plume-analyze``: ``(env section, EnvSpec, analysis settings, traces)``, checked."""
    split = cfg.get("split")
    if split not in ("train", "test"):
        raise ConfigError(f"split must be 'train' or 'test', got {split!r}")
    env, spec, params = env_section(cfg.get("env"))
    settings = analysis_settings(cfg.get("analysis"), spec.analysis_for(env.dataset))
    key = ("analyze", spec.name, env.dataset, split, env.trace_format,
           env.max_padded_samples, repr(params))
    traces = _cached(key, spec, [env.dataset], lambda: load_checked(
        spec, env, env.dataset, split, params))
    return env, spec, settings, traces


def load_inputs(job: JobConfig) -> JobInputs:
    """The train split and the test sets of ``job``, loaded and checked once per process for
    the same files (the callback's check and the job that follows share them). With
    ``train.validation`` the test set is the held-out part of the train split
    (:func:`~plume.harness.config.datasets.validation_split`) and no test set is read at all."""
    spec, env, params = job.env_spec, job.env, job.env_params
    fraction = job.train.validation
    test_sets = [] if fraction > 0 else list(env.test_sets)

    def load() -> tuple[TraceSet, dict[str, TraceSet]]:
        train = load_checked(spec, env, env.dataset, "train", params)
        if fraction > 0:
            train, held_out = validation_split(train, fraction)
            return train, {VALIDATION: held_out}
        return train, load_test_sets(spec, env, params)

    key = ("train", spec.name, env.dataset, tuple(test_sets), fraction, env.trace_format,
           env.max_padded_samples, repr(params))
    return JobInputs(job, *_cached(key, spec, [env.dataset, *test_sets], load))


_LAST: dict[str, Any] = {}


def _cached(key: tuple, spec: Any, datasets: list[str], load):
    """``load()``, or what it returned last time for the same key and unchanged files (their
    sizes and modification times); one entry, so a long-lived worker holds one dataset."""
    stamp = (key, tuple(_files_stamp(Path(d).expanduser()) for d in datasets
                        if not is_builtin(spec, d)))
    if _LAST.get("stamp") != stamp:
        _LAST.clear()
        value = load()
        _LAST.update(stamp=stamp, value=value)
    return _LAST["value"]


def _files_stamp(path: Path) -> tuple:
    """(relative path, size, mtime) of every file at ``path``: what says the data changed."""
    if path.is_file():
        stat = path.stat()
        return ((path.name, stat.st_size, stat.st_mtime_ns),)
    return tuple((p.relative_to(path).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
                 for p in sorted(path.rglob("*")) if p.is_file())


def _check_algorithm_fits(job: JobConfig, traces: TraceSet) -> None:
    """Build the learner on a one-copy env of the first training trace: its spaces are the
    real ones, so a config the algorithm rejects (e.g. network=gelato on the Pensieve
    observation) is the user's mistake, reported in one line before anything is written."""
    from plume.agents import ALGORITHMS  # deferred: torch loads only when a learner is built

    probe = make_env(job.env_spec, traces.subset([0]), 1, None, mode="test", seed=0,
                     params=job.env_params)
    try:
        ALGORITHMS[job.algo_name](probe, job.algo, seed=0, total_env_steps=1)
    except ValueError as err:
        raise ConfigError(f"algo={job.algo_name} does not fit env={job.env_spec.name}: "
                          f"{err}") from None
