"""How a command-line app becomes Hydra's app over ``conf/``.

:func:`hydra_app` registers Plume's configs before Hydra composes (``register_configs``; no
import does it). A launcher's worker (joblib, submitit, Ray) is sent the task function alone
and composes the job's config, run directory included, before it calls the task: the task
therefore travels as a :class:`HydraTask`, which registers the configs where it is unpickled.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import hydra
from omegaconf import DictConfig

from plume.harness.config.configdir import CONF_DIR, register_configs

Task = Callable[[DictConfig], Any]


class HydraTask:
    """A task function that, once pickled, comes back with Plume's configs registered."""

    def __init__(self, function: Task) -> None:
        self.function = function
        functools.update_wrapper(self, function)  # Hydra names the app after the function's module

    def __call__(self, cfg: DictConfig) -> Any:
        return self.function(cfg)

    def __reduce__(self):
        return _restore, (self.function,)  # the function pickles as it would alone


def _restore(function: Task) -> HydraTask:
    """``function`` as a task, in a process that may not have registered the configs."""
    register_configs()
    return HydraTask(function)


def hydra_app(config_name: str, task: Task) -> Callable[[], Any]:
    """Hydra's app over ``conf/<config_name>.yaml`` running ``task`` on each job's config."""
    app = hydra.main(version_base="1.3", config_path=str(CONF_DIR),
                     config_name=config_name)(HydraTask(task))

    def run() -> Any:
        register_configs()
        return app()

    return run
