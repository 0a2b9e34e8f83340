"""The samplers ``sampler.name`` selects, and the door for a user's own.

A module of the user's (``sampler.package=<dotted module or .py file>``) is imported before
the config is checked; it calls :func:`register_sampler` on its :class:`TraceSampler`
subclass, which ``sampler.name=<its name>`` then selects with any env and algorithm. Such a
module is code and runs with the user's rights, like ``env.package``.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Any

from plume.sampling.base import SAMPLER_INPUTS, SamplerNeeds, TraceSampler
from plume.user_modules import import_user_module

__all__ = ["SAMPLERS", "SECTION_KEYS", "import_sampler_package", "register_sampler",
           "sampler_defaults"]

SAMPLERS: dict[str, type[TraceSampler]] = {}
"""Samplers selectable by name from a config (``sampler.name``)."""
SECTION_KEYS = ("name", "package")
"""Keys of the ``sampler`` config section that are not options of the sampler."""


def register_sampler(cls: type[TraceSampler]) -> type[TraceSampler]:
    """Make ``cls`` selectable as ``sampler.name=<cls.name>`` (usable as a class decorator).

    Checked here, so that a mistake shows at import rather than mid-run: a concrete
    TraceSampler subclass, a plain lower-case ``name`` not taken by another class, a
    dataclass ``CONFIG`` whose fields are not section keys or data inputs, a
    :class:`SamplerNeeds` ``NEEDS``. Registering the same class again is a no-op."""
    if not (isinstance(cls, type) and issubclass(cls, TraceSampler)):
        raise TypeError(f"register_sampler takes a TraceSampler subclass, got {cls!r}")
    name = cls.name
    if not (isinstance(name, str) and re.fullmatch(r"[a-z][a-z0-9_]*", name)) or name == "base":
        raise ValueError(f"{cls.__name__}.name must be a plain lower-case name such as "
                         f"'my_sampler', got {name!r}")
    if SAMPLERS.get(name, cls) is not cls:
        taken = SAMPLERS[name]
        raise ValueError(f"sampler name {name!r} is taken by {taken.__module__}."
                         f"{taken.__qualname__}; give {cls.__name__} another name")
    if not (isinstance(cls.CONFIG, type) and dataclasses.is_dataclass(cls.CONFIG)):
        raise TypeError(f"{cls.__name__}.CONFIG must be a dataclass, got {cls.CONFIG!r}")
    clashes = [f.name for f in dataclasses.fields(cls.CONFIG)
               if f.name in SECTION_KEYS or f.name in SAMPLER_INPUTS]
    if clashes:
        raise ValueError(f"{cls.CONFIG.__name__} field(s) {clashes} clash with the sampler "
                         f"section's keys {SECTION_KEYS} or its data inputs")
    if not isinstance(cls.NEEDS, SamplerNeeds):
        raise TypeError(f"{cls.__name__}.NEEDS must be a SamplerNeeds, got {cls.NEEDS!r}")
    if inspect.isabstract(cls):
        raise TypeError(f"{cls.__name__} does not implement "
                        f"{', '.join(sorted(cls.__abstractmethods__))}")
    SAMPLERS[name] = cls
    return cls


def sampler_defaults(cls: type[TraceSampler]) -> dict[str, Any]:
    """The ``sampler`` config section of ``cls`` with every option at its ``CONFIG`` default
    (``"???"``, OmegaConf's missing value, for an option without one): the node that
    ``conf/sampler/<name>.yaml`` extends, so defaults are written in the dataclass alone."""
    options = {f.name: _default(f) for f in dataclasses.fields(cls.CONFIG) if f.init}
    return {"name": cls.name, "package": None, **options}


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return "???"


def import_sampler_package(package: str):
    """Import ``package`` (a dotted module path, or a ``.py`` file), which registers its
    sampler(s); see :func:`plume.user_modules.import_user_module`."""
    return import_user_module(package, "sampler.package", "plume_user_sampler")
