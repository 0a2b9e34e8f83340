"""The argument checks samplers and their ``CONFIG`` dataclasses use: :mod:`plume.checks` (one
dialect with environments and algorithms; a :class:`FieldError` names the field, so that the
harness reports ``sampler.<field>`` while a sampler built by hand says ``<field> must ...``),
plus the two that only samplers need: a controller named by an option, and the trace index an
episode report carries.
"""

from __future__ import annotations

from typing import Any

from plume.checks import FieldError, FieldTypeError, choice, fail, fraction, integer, positive

__all__ = ["FieldError", "choice", "controller", "fraction", "integer", "positive",
           "valid_trace"]


def controller(name: str, value: Any) -> str | None:
    """The name of one of the env's controllers, or None (the env's default); the harness
    checks that the env has it (``plume.harness.config.scored_controllers.sampler_controllers``)."""
    if value is not None and not isinstance(value, str):
        fail(name, value, "a controller name or None", FieldTypeError)
    return value


def valid_trace(index: Any, n_traces: int) -> int:
    """An episode report's trace index as an int in ``[0, n_traces)`` (IndexError otherwise)."""
    trace = int(index)
    if not 0 <= trace < n_traces:
        raise IndexError(f"trace index {index} out of range [0, {n_traces})")
    return trace
