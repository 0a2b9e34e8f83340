"""Hydra callbacks of the command-line apps.

:class:`ValidateFirst` checks a single run's composed config before Hydra creates its output
directory, so a rejected config leaves no run directory behind and never touches an existing
one (a completed job typed again with a bad value stays completed). Multirun jobs are
validated inside each job instead (their sweep values exist only there); the job then removes
the directory Hydra had just created for it (:func:`plume.harness.rundir.discard_new`).
"""

from __future__ import annotations

import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict

from plume.harness.errors import ConfigError


class ValidateFirst(Callback):
    """Validate a ``plume-train`` run before Hydra makes its directory; a user's mistake
    prints one line and exits with status 2 (no traceback)."""

    def __init__(self, app: str = "plume-train") -> None:
        self.app = app

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from plume.harness.schema import validate

        job = OmegaConf.masked_copy(config, [k for k in config if k != "hydra"])
        with open_dict(job):
            job.pop("hydra", None)
        try:
            validate(job)
        except ConfigError as err:
            print(f"{self.app}: error: {err}", file=sys.stderr)
            sys.exit(2)
