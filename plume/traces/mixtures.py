"""Building blocks shared by the synthetic trace generators (ABR, LB): seeded streams, exact
class compositions, argument checks. One home, so every generator draws and checks alike."""

from __future__ import annotations

import operator
from collections.abc import Mapping

import numpy as np


def check_int(value, what: str, low: int) -> int:
    """``value`` as an int >= ``low``; TypeError / ValueError naming ``what``."""
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {type(value).__name__}") from None
    if value < low:
        raise ValueError(f"{what} must be >= {low}, got {value}")
    return value


def seeded_rng(seed: int, key: tuple[int, ...]) -> np.random.Generator:
    """The generator of stream ``key`` under ``seed`` (a SeedSequence spawn key, so streams
    are independent and each can be drawn alone)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


def kind_counts(n: int, kinds: Mapping[str, object], class_weights) -> dict[str, int]:
    """Traces per kind: the weights (default: each kind's ``weight``) normalised, counts by
    largest remainder (ties to the earlier kind), so a split's composition is exact rather
    than sampled."""
    if class_weights is None:
        class_weights = {name: kind.weight for name, kind in kinds.items()}
    unknown = sorted(set(class_weights) - set(kinds))
    if unknown:
        raise ValueError(
            f"unknown kinds {unknown} in class_weights; expected some of {list(kinds)}")
    w = np.array([float(class_weights.get(name, 0.0)) for name in kinds])
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError("class_weights must be finite, non-negative and not all zero, "
                         f"got {dict(class_weights)}")
    quota = n * w / w.sum()
    counts = np.floor(quota).astype(int)
    extra = np.argsort(-(quota - counts), kind="stable")[: n - counts.sum()]
    counts[extra] += 1
    return dict(zip(kinds, counts.tolist()))


def uniform_between(bounds: tuple[float, float], u: np.ndarray) -> np.ndarray:
    """``u`` in [0, 1) mapped onto [low, high)."""
    return bounds[0] + (bounds[1] - bounds[0]) * u


def check_dataset_split(name: str, split: str, datasets, splits, what: str) -> None:
    """ValueError listing the valid choices unless ``name`` is one of ``datasets`` and
    ``split`` one of ``splits`` (``what``: "ABR", "LB", ... for the message)."""
    if name not in datasets:
        raise ValueError(f"unknown {what} dataset {name!r}; expected one of {sorted(datasets)}")
    if split not in splits:
        raise ValueError(f"unknown split {split!r}; expected one of {list(splits)}")
