"""How an adapter names a peer's value in a one-line error: bounded, whatever the value.

A peer can send a 5,000-digit integer, an array nested 30,000 deep or a megabyte string; the
error line that names it must stay one short line and must never recurse into it or convert
the integer (both raise in Python). Shared by the three adapters.
"""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = ["show"]

_repr = reprlib.Repr()
_repr.maxlevel, _repr.maxstring, _repr.maxother, _repr.maxlong = 2, 40, 40, 40


def show(value: Any) -> str:
    """A short, bounded rendering of ``value`` (at most 80 characters)."""
    try:
        text = _repr.repr(value)
    except Exception:  # noqa: BLE001 (a value whose repr fails is named by its type)
        return f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."
