"""Where Plume's Hydra configs live and the resolvers they use: one home for every entry point
(``plume-train``, ``plume-eval``, ``plume-analyze``, ``plume-emulate``, the experiments), so none
depends on importing another for a side effect.

``conf/`` is at the repository root; ``plume/conf`` links to it so that a wheel ships it as
package data. Importing this module registers the ``plume_dirname`` resolver that the run
directory layout (``conf/hydra/default.yaml``) names, and the configs
``schema/sampler/<name>`` that ``conf/sampler/<name>.yaml`` extend (each sampler's options at
their ``CONFIG`` defaults).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from omegaconf import OmegaConf

__all__ = ["CONF_DIR", "override_dirname", "register_resolvers", "register_sampler_defaults"]

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


def register_sampler_defaults() -> None:
    """Store every registered sampler's options at their defaults as the Hydra config
    ``schema/sampler/<name>`` (idempotent): a ``conf/sampler`` file names only what differs,
    and every option is a command-line key (``sampler.alpha=0.7``) without a ``+``."""
    from hydra.core.config_store import ConfigStore

    from plume.sampling import SAMPLERS, sampler_defaults  # deferred: the sampler registry loads every sampler module

    store = ConfigStore.instance()
    for name, cls in SAMPLERS.items():
        store.store(group="schema/sampler", name=name, node=sampler_defaults(cls))


register_resolvers()
register_sampler_defaults()
