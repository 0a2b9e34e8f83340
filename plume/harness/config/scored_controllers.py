"""Which classic controllers a sampler needs scored on every training trace.

A config question (the env's controllers and the sampler's ``baseline`` / ``reference``
options), asked twice: by the job's checks, so that a sampler asking for a controller the env
lacks is refused before anything runs, and by the training runtime, which scores them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plume.sampling import INPUT_KINDS, SAMPLERS


def _baseline(spec, params: Mapping[str, Any]) -> list[str]:
    """``[params["baseline"] or the env's baseline_controller]``."""
    baseline = params.get("baseline") or spec.baseline_controller
    if baseline is None:
        raise ValueError(f"env {spec.name!r} names no default baseline controller: set "
                         f"sampler.baseline to one of {', '.join(spec.controllers)}")
    return [str(baseline)]


def _reference(spec, params: Mapping[str, Any]) -> list[str]:
    """``params["reference"]`` (a name or a list; the best of them per trace), else the env's
    oracle, else all its controllers."""
    reference = params.get("reference")
    return ([str(reference)] if isinstance(reference, str) else list(map(str, reference))
            if reference else [spec.oracle_controller] if spec.oracle_controller
            else sorted(spec.controllers))


CONTROLLER_ROLES = {"baseline": _baseline, "reference": _reference}
"""How the controllers of each ``role`` of a ``controllers`` input kind are chosen."""


def sampler_controllers(spec, name: str, params: Mapping[str, Any]) -> dict[str, list[str]]:
    """The controllers whose per-trace scores sampler ``name`` takes, per input kind from the
    env's controllers (``CONTROLLER_ROLES`` of the kind's role). ``params``: the sampler's
    options as a mapping (``dataclasses.asdict`` of its config). ValueError when the env
    cannot provide them."""
    wanted = [key for key in SAMPLERS[name].NEEDS.inputs
              if INPUT_KINDS[key].source == "controllers"]
    if not wanted:
        return {}
    if not spec.controllers:
        raise ValueError(f"sampler={name} measures the policy against classic controllers; "
                         f"env {spec.name!r} has none")
    chosen = {key: CONTROLLER_ROLES[INPUT_KINDS[key].role](spec, params) for key in wanted}
    for names in chosen.values():
        unknown = [n for n in names if n not in spec.controllers]
        if unknown:
            raise ValueError(f"sampler={name}: {unknown[0]!r} is not a controller of env "
                             f"{spec.name!r}; valid choices: {', '.join(spec.controllers)}")
    return chosen
