"""Where Plume's Hydra configs live and the resolvers they use: one home for every entry point
(``plume-train``, ``plume-eval``, ``plume-analyze``, ``plume-emulate``, the experiments), so none
depends on importing another for a side effect.

``conf/`` is at the repository root; ``plume/conf`` links to it so that a wheel ships it as
package data. Importing this module registers the ``plume_dirname`` resolver that the run
directory layout (``conf/hydra/default.yaml``) names.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from omegaconf import OmegaConf

__all__ = ["CONF_DIR", "override_dirname", "register_resolvers"]

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def override_dirname(value: str | None) -> str:
    """Folder name for a job's overrides: never empty, never nested, never longer than a file
    name may be (a long one keeps a readable prefix and gains a hash of the whole)."""
    name = str(value or "").replace("/", "_").replace(os.sep, "_") or "defaults"
    if len(name.encode()) > 200:  # NAME_MAX is 255 bytes
        name = name[:180] + "-" + hashlib.sha1(name.encode()).hexdigest()[:12]
    return name


def register_resolvers() -> None:
    """Register Plume's OmegaConf resolvers (idempotent)."""
    OmegaConf.register_new_resolver("plume_dirname", override_dirname, replace=True)


register_resolvers()
