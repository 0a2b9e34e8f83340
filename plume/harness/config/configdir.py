"""Where Plume's Hydra configs live and the resolvers they use: one home for every entry point
(``plume-train``, ``plume-eval``, ``plume-analyze``, ``plume-emulate``, the experiments), so none
depends on importing another for a side effect.

``conf/`` is at the repository root; ``plume/conf`` links to it so that a wheel ships it as
package data. :func:`register_configs` registers what those files name but do not hold: the
``plume_dirname`` resolver of the run directory layout (``conf/hydra/default.yaml``), the
configs ``schema/sampler/<name>`` that ``conf/sampler/<name>.yaml`` extend and the node
``schema/algo/auto`` that ``conf/algo/auto.yaml`` extends. Importing this module registers
nothing: whoever starts Hydra on ``conf/`` calls it (an app's ``main``, a launcher's worker
receiving a task, :func:`plume_hydra`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path

from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

__all__ = ["AUTO", "CONF_DIR", "UNSET", "override_dirname", "plume_hydra", "register_configs"]

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

AUTO = "auto"
"""``algo.name`` of ``conf/algo/auto.yaml``, plume-train's default: the environment's preset."""
UNSET = "???"  # OmegaConf's missing value: a key of algo=auto the config did not set


def override_dirname(value: str | None) -> str:
    """Folder name for a job's overrides: never empty, never nested, never longer than a file
    name may be (a long one keeps a readable prefix and gains a hash of the whole)."""
    name = str(value or "").replace("/", "_").replace(os.sep, "_") or "defaults"
    if len(name.encode()) > 200:  # NAME_MAX is 255 bytes
        name = name[:180] + "-" + hashlib.sha1(name.encode()).hexdigest()[:12]
    return name


def register_configs() -> None:
    """Register Plume's resolvers and schema nodes with OmegaConf and Hydra (idempotent)."""
    OmegaConf.register_new_resolver("plume_dirname", override_dirname, replace=True)
    _register_sampler_defaults()
    _register_algo_keys()


@contextmanager
def plume_hydra() -> Iterator[None]:
    """Hydra initialised on ``conf/`` with Plume's configs registered, for the compose API
    (``hydra.compose(...)`` inside the block composes what the apps would)."""
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


def _register_sampler_defaults() -> None:
    """Store every registered sampler's options at their defaults as the Hydra config
    ``schema/sampler/<name>``: a ``conf/sampler`` file names only what differs, and every
    option is a command-line key (``sampler.alpha=0.7``) without a ``+``."""
    from plume.sampling import (  # deferred: the sampler registry loads every sampler module
        SAMPLERS,
        sampler_defaults,
    )

    store = ConfigStore.instance()
    for name, cls in SAMPLERS.items():
        store.store(group="schema/sampler", name=name, node=sampler_defaults(cls))


def _register_algo_keys() -> None:
    """Store the Hydra config ``schema/algo/auto``: ``name: auto`` and every key of every
    registered algorithm's config unset, the node ``conf/algo/auto.yaml`` extends. Hydra
    refuses ``algo.<key>=<value>`` for a key its config lacks, and the preset that supplies
    the key is only known once the env's params are validated; the keys come from the
    algorithms' own configs, so a new algorithm needs no YAML for them."""
    from plume.agents import ALGORITHMS  # deferred: the algorithm registry loads torch

    keys = dict.fromkeys(f.name for algo in ALGORITHMS.values() for f in fields(algo.CONFIG))
    ConfigStore.instance().store(group="schema/algo", name=AUTO,
                                 node={"name": AUTO, **{key: UNSET for key in keys}})
