"""``hydra/sweeper=plume``: Hydra's basic sweep with Plume's refusals (``plume.harness.apps.sweep``).

Every job of a batch is composed and checked (config, trace data, env package, algorithm fit)
before the batch is launched: a refused job is one line and never gets a folder; a job refused
or failed while running is one line; the sweep finishes the others, prints a summary and the
command exits non-zero. The batches go to any Hydra launcher.

The jobs are the cartesian product of the sweep overrides, in the order and batches of Hydra's
basic sweeper (``max_batch_size``, ``params``). With ``hydra.sweeper.jobs=<file.json>`` they are
instead exactly the jobs that file lists (a JSON list of override lists, each job after the
command line's other overrides): a list that is no product, such as the unfinished jobs of a
paper figure (``experiments/runner.py``).

Built on Hydra's public plugin API (``hydra.plugins.sweeper.Sweeper``) only: Hydra's basic
sweeper is none of it and may change in any release.
"""

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.plugins import Plugins
from hydra.errors import CompactHydraException, HydraException
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from hydra.utils import get_method
from omegaconf import DictConfig, OmegaConf


@dataclass
class PlumeSweeperConf:
    _target_: str = "hydra_plugins.plume_sweeper.plume_sweeper.PlumeSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None
    # The app's checks of one composed job config (raise ConfigError to refuse it).
    check: str = "plume.harness.config.preflight.check_train"
    app: str = "plume-train"
    # A JSON file listing the jobs to launch (each a list of overrides) instead of the
    # product of the sweep overrides.
    jobs: Optional[str] = None


ConfigStore.instance().store(group="hydra/sweeper", name="plume", node=PlumeSweeperConf,
                             provider="plume")


class JobsFileError(CompactHydraException):
    """A ``hydra.sweeper.jobs`` file, or a command line with it, that names no clear list of
    jobs: one line, before anything is launched."""


class PlumeSweeper(Sweeper):
    """The sweep of ``plume-train -m`` / ``plume-eval -m``: Hydra's basic sweep (or a jobs
    file's list) with every job checked before launch and one line per refusal or failure."""

    def __init__(self, max_batch_size: int | None = None,
                 params: dict[str, str] | None = None,
                 check: str = PlumeSweeperConf.check, app: str = PlumeSweeperConf.app,
                 jobs: str | None = None) -> None:
        super().__init__()
        self.max_batch_size, self.params = max_batch_size, dict(params or {})
        self.check, self.app, self.jobs_file = get_method(check), app, jobs
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None
        self.config: DictConfig | None = None
        self.launcher: Launcher | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.hydra_context, self.task_function, self.config = (hydra_context, task_function,
                                                               config)
        if self.jobs_file is None:  # a jobs file's sweep sets its launcher up in sweep()
            self.launcher = self._launcher(config)

    def sweep(self, arguments: list[str]) -> Any:
        from plume.harness.apps.sweep import SweepOutcome  # deferred: Hydra imports every plugin when any app starts

        assert self.hydra_context is not None and self.config is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides([*(f"{k}={v}" for k, v in self.params.items()),
                                            *arguments])
        if self.jobs_file is None:
            jobs = product_jobs(overrides)
            swept = frozenset(o.get_key_element() for o in overrides if o.is_sweep_override())
        else:
            jobs = listed_jobs(read_jobs(self.jobs_file), overrides, parser)
            swept = varying_keys(jobs)
            if jobs:  # the sweep's config is its first job's (its folder, the launcher's)
                self.config = self.hydra_context.config_loader.load_sweep_config(
                    master_config=self.config, sweep_overrides=jobs[0])
                self.launcher = self._launcher(self.config)
        outcome = SweepOutcome(self.app, swept)
        returns = self._launch(batches(jobs, self.max_batch_size), outcome)
        outcome.finish()
        return returns

    def _launch(self, job_batches: list[list[list[str]]], outcome: Any) -> list[Any]:
        """Check and launch each batch; the launchers' results, batch by batch."""
        assert self.config is not None
        returns: list[Any] = []
        index = 0
        for batch in job_batches:
            self.validate_batch_is_legal(batch)
            batch = outcome.check(batch, self._compose, self.check)
            if not batch:
                continue
            if index == 0:  # the sweep's folder, once a job of it will run
                sweep_dir = Path(self.config.hydra.sweep.dir)
                sweep_dir.mkdir(parents=True, exist_ok=True)
                OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
            assert self.launcher is not None
            results = self.launcher.launch(batch, initial_job_idx=index)
            outcome.collect(batch, results)
            index += len(batch)
            returns.append(results)
        return returns

    def _launcher(self, config: DictConfig) -> Launcher:
        assert self.hydra_context is not None and self.task_function is not None
        return make_launcher(self.hydra_context, self.task_function, config)

    def _compose(self, overrides: list[str]) -> Any:
        """A job's config without Hydra's node, as the job will see it."""
        assert self.hydra_context is not None
        return without_hydra(self.hydra_context.config_loader.load_sweep_config(
            master_config=self.config, sweep_overrides=overrides))


def make_launcher(hydra_context: HydraContext, task_function: TaskFunction,
                  config: DictConfig) -> Launcher:
    """The launcher ``config`` chooses (``hydra/launcher``), set up for ``task_function``."""
    return Plugins.instance().instantiate_launcher(
        hydra_context=hydra_context, task_function=task_function, config=config)


def without_hydra(cfg: DictConfig) -> DictConfig:
    """A composed job config without Hydra's node: what the job's checks and the job see."""
    with_hydra = OmegaConf.to_container(cfg, resolve=False)
    with_hydra.pop("hydra", None)
    return OmegaConf.create(with_hydra)


def product_jobs(overrides: Sequence[Override]) -> list[list[str]]:
    """The jobs of Hydra's basic sweeper: one ``key=value`` list per key, in the order keys
    first appear (a repeated key keeps its place and takes its last value), a sweep's values
    in its order, the cartesian product with the last key varying fastest."""
    values: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if not override.is_sweep_override():
            values[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            values[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            assert override.value_type is not None
            raise HydraException(f"{PlumeSweeper.__name__} does not support sweep type : "
                                 f"{override.value_type.name}")
    return [list(job) for job in itertools.product(*values.values())]


def batches(jobs: list[list[str]], size: int | None) -> list[list[list[str]]]:
    """``jobs`` in batches of ``size`` (None: one batch), as the basic sweeper cuts them."""
    if size is not None and size <= 0:
        raise HydraException(f"hydra.sweeper.max_batch_size must be > 0, got {size}")
    if size is None:
        return [jobs]
    return [jobs[i:i + size] for i in range(0, len(jobs), size)]


def read_jobs(path: str) -> list[list[str]]:
    """The jobs of a ``hydra.sweeper.jobs`` file: a JSON list of lists of override strings."""
    try:
        jobs = json.loads(Path(path).expanduser().read_text())
    except (OSError, ValueError) as err:
        raise JobsFileError(f"hydra.sweeper.jobs={path}: cannot read it: {err}") from None
    if not (isinstance(jobs, list) and all(
            isinstance(job, list) and all(isinstance(o, str) for o in job) for job in jobs)):
        raise JobsFileError(f"hydra.sweeper.jobs={path}: expected a JSON list of jobs, each a "
                            "list of override strings")
    return jobs


def listed_jobs(jobs: list[list[str]], given: Sequence[Override],
                parser: OverridesParser) -> list[list[str]]:
    """Each listed job after the ``given`` overrides (params, command line) it does not set
    itself, all as typed (a product's values are re-spelled, ``1e30`` as ``1e+30``): a job
    lands in the folder that a plain run with those overrides uses."""
    sweeps = [o.input_line for o in given if o.is_sweep_override()]
    if sweeps:
        raise JobsFileError(f"hydra.sweeper.jobs lists the jobs; a sweep override cannot be "
                            f"added to them: {' '.join(map(str, sweeps))}")
    full = []
    for job in jobs:
        own = parser.parse_overrides(job)
        sweeps = [o.input_line for o in own if o.is_sweep_override()]
        if sweeps:
            raise JobsFileError(f"hydra.sweeper.jobs: a job is one run, not a sweep: "
                                f"{' '.join(map(str, sweeps))} (quote a value with commas)")
        keys = {o.get_key_element() for o in own}
        full.append([*(str(o.input_line) for o in given if o.get_key_element() not in keys),
                     *job])
    return full


def _key(override: str) -> str:
    """The key of an override string, as the sweep's lines name a job by it."""
    return override.partition("=")[0].lstrip("+~")


def varying_keys(jobs: Sequence[Sequence[str]]) -> frozenset[str]:
    """The keys whose override is not the same in every job (absent counts as different): they
    name a job of a list in the sweep's lines, as the swept keys name a job of a product."""
    by_key = [{_key(o): o for o in job} for job in jobs]
    keys = {key for job in by_key for key in job}
    return frozenset(k for k in keys if len({job.get(k) for job in by_key}) > 1)


def job_names(jobs: Sequence[Sequence[str]]) -> list[str]:
    """How the sweep's lines (``<app>: refused [<name>]: ...``) name each job of a jobs file
    that the command line adds nothing to: its overrides of the varying keys, in its order."""
    swept = varying_keys(jobs)
    return [" ".join(o for o in job if _key(o) in swept) for job in jobs]
