"""Hydra callbacks of the command-line apps.

:class:`ValidateFirst` checks a single run's composed config before Hydra creates its output
directory, so a rejected config leaves no run directory behind and never touches an existing
one (a completed job typed again with a bad value stays completed). Multirun jobs are
validated inside each job instead (their sweep values exist only there); the job then removes
the directory Hydra had just created for it (:func:`plume.harness.rundir.discard_new`).
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from plume.harness.errors import ConfigError


class ValidateFirst(Callback):
    """Validate a ``plume-train`` run before Hydra makes its directory; a user's mistake
    prints one line and exits with status 2 (no traceback)."""

    def __init__(self, app: str = "plume-train") -> None:
        self.app = app

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from plume.harness.schema import validate

        try:
            validate(config)  # the job's sections; the hydra node is not read
        except ConfigError as err:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":  # Hydra's switch for tracebacks
                traceback.print_exc()
            print(f"{self.app}: error: {err}", file=sys.stderr)
            sys.exit(2)  # SystemExit: Hydra logs and ignores a callback's ordinary exceptions
