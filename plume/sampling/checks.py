"""Argument checks shared by samplers and their ``CONFIG`` dataclasses.

A failed check raises :class:`FieldError` (a ValueError) that names the field, so that the
harness can report ``sampler.<field>`` while a sampler built by hand says ``<field> must ...``.
Each check returns the value normalised (a float, an int), ready to store.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["FieldError", "choice", "fraction", "integer", "positive", "valid_trace"]


class FieldError(ValueError):
    """A value out of its range; ``field`` names it (``str(err)`` is ``"<field> <problem>"``)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field


def fraction(name: str, value: Any) -> float:
    """``value`` as a float in [0, 1] (a probability, a mixing share, a rate)."""
    v = float(value)
    if not 0.0 <= v <= 1.0:
        raise FieldError(name, f"must be in [0, 1], got {value}")
    return v


def integer(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int >= ``minimum`` (a whole float such as 3.0 passes; a bool does not)."""
    if isinstance(value, bool) or int(value) != value or int(value) < minimum:
        raise FieldError(name, f"must be an integer >= {minimum}, got {value!r}")
    return int(value)


def positive(name: str, value: Any) -> float:
    """``value`` as a finite float > 0 (a temperature, a learning rate)."""
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise FieldError(name, f"must be a positive number, got {value!r}")
    return v


def choice(name: str, value: Any, valid: Sequence[str]) -> str:
    """``value`` if it is one of ``valid``."""
    if value not in valid:
        raise FieldError(name, f"must be one of {tuple(valid)}, got {value!r}")
    return value


def valid_trace(index: Any, n_traces: int) -> int:
    """An episode report's trace index as an int in ``[0, n_traces)`` (IndexError otherwise)."""
    trace = int(index)
    if not 0 <= trace < n_traces:
        raise IndexError(f"trace index {index} out of range [0, {n_traces})")
    return trace
