"""Hydra callbacks of the command-line apps.

:class:`ValidateFirst` checks a single run's composed config *and everything it reads* (trace
files, test sets, an ``env.package`` module: ``plume.harness.config.preflight``) before Hydra creates
its output directory, so a refused run leaves no run directory behind and never touches an
existing one (a completed job typed again with a bad value stays completed). A sweep's jobs
are checked by the ``plume`` sweeper before it launches them, and by each job again.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

from hydra.experimental.callback import Callback
from hydra.utils import get_method
from omegaconf import DictConfig

from plume.harness.config.errors import ConfigError


class ValidateFirst(Callback):
    """Run ``check`` (a dotted path to a function of the composed config) before Hydra makes a
    single run's directory; a user's mistake prints one line and exits with status 2."""

    def __init__(self, app: str = "plume-train",
                 check: str = "plume.harness.config.preflight.check_train") -> None:
        self.app, self.check = app, get_method(check)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            self.check(config)  # the job's sections; the hydra node is not read
        except ConfigError as err:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":  # Hydra's switch for tracebacks
                traceback.print_exc()
            print(f"{self.app}: error: {err}", file=sys.stderr)
            sys.exit(2)  # SystemExit: Hydra logs and ignores a callback's ordinary exceptions
