"""Argument checks shared by environments, algorithms and samplers: one dialect for all three.

A failed check says ``<name> must be <expected>, got <value>`` and raises :class:`FieldError`,
a ValueError whose ``field`` is the name, so that a caller can tell the user where the value
came from (the harness reports a sampler option as ``sampler.<field>``). A value of the wrong
kind altogether (a string where a number goes) raises :class:`FieldTypeError`, which is also a
TypeError. Every check returns the value normalised (a float, an int, a tuple), ready to store.

This module sits below every layer (docs/ARCHITECTURE.md) and needs numpy only, so that the
Plume library (traces, analysis, sampling) and a user's own code can use it alone.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np

__all__ = ["FieldError", "FieldTypeError", "boolean", "choice", "fail", "finite", "fraction",
           "integer", "positive", "real", "sizes"]


class FieldError(ValueError):
    """A value out of its range; ``field`` names it (``str(err)`` is ``"<field> <problem>"``)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field


class FieldTypeError(FieldError, TypeError):
    """A value of the wrong kind (not a number, not a bool): a FieldError and a TypeError."""


def _shown(value: Any) -> str:
    """``repr`` of the value as the user wrote it (a numpy scalar as the Python number)."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def fail(name: str, value: Any, expected: str,
         error: type[FieldError] = FieldError) -> NoReturn:
    """Raise ``error`` saying ``<name> must be <expected>, got <value>``."""
    raise error(name, f"must be {expected}, got {_shown(value)}")


def _number(name: str, value: Any, expected: str) -> float:
    """``value`` as a float if it is a real number at all (a bool is not)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        fail(name, value, expected, FieldTypeError)
    return float(value)


def real(name: str, value: Any) -> float:
    """A real number, NaN refused and infinity allowed (``math.inf`` often means "no limit")."""
    v = _number(name, value, "a real number")
    if math.isnan(v):
        fail(name, value, "a real number")
    return v


def finite(name: str, value: Any) -> float:
    """A finite real number (a reward weight, a scale)."""
    v = _number(name, value, "a finite number")
    if not math.isfinite(v):
        fail(name, value, "a finite number")
    return v


def positive(name: str, value: Any) -> float:
    """A finite number > 0 (a temperature, a learning rate, a duration)."""
    v = _number(name, value, "a positive number")
    if not (math.isfinite(v) and v > 0):
        fail(name, value, "a positive number")
    return v


def fraction(name: str, value: Any) -> float:
    """A number in [0, 1] (a probability, a mixing share, a rate)."""
    v = _number(name, value, "in [0, 1]")
    if not 0.0 <= v <= 1.0:
        fail(name, value, "in [0, 1]")
    return v


def integer(name: str, value: Any, minimum: int) -> int:
    """An int >= ``minimum``; a whole float such as 3.0 passes (YAML and JSON write counts
    either way), a bool does not."""
    expected = f"an integer >= {minimum}"
    v = _number(name, value, expected)
    if not (math.isfinite(v) and v == int(v) and int(v) >= minimum):
        fail(name, value, expected)
    return int(v)


def boolean(name: str, value: Any) -> bool:
    """A bool (numpy's included); 0, 1 and "yes" are not."""
    if not isinstance(value, (bool, np.bool_)):
        fail(name, value, "a bool", FieldTypeError)
    return bool(value)


def choice(name: str, value: Any, valid: Sequence[Any]) -> Any:
    """``value`` if it is one of ``valid`` (shown as given: a tuple or a list)."""
    if value not in valid:
        fail(name, value, f"one of {valid!r}")
    return value


def sizes(name: str, value: Any) -> tuple[int, ...]:
    """A sequence of positive ints (layer widths) as a tuple: lists from YAML become tuples."""
    try:
        items = tuple(value)
    except TypeError:
        fail(name, value, "a sequence of positive integers", FieldTypeError)
    if not all(isinstance(h, numbers.Integral) and not isinstance(h, (bool, np.bool_)) and h >= 1
               for h in items):
        fail(name, value, "a sequence of positive integers")
    return tuple(int(h) for h in items)
