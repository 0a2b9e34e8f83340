"""The kinds of per-trace array a sampler can take (``SamplerNeeds.inputs``), declared once.

Each kind says what the array is and who provides it: Plume's stage 1-2 ``analysis`` of the
training traces (a ``plume.analysis.TraceAnalysis``), the training ``traces`` themselves (a
``TraceSet``), or the env's classic ``controllers`` scored by the harness on every training
trace. The harness builds every input from this table (``plume.harness.training.samplers``), and
validation refuses a sampler whose kinds the env cannot provide; adding a kind that the
analysis or the traces already hold is one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter, methodcaller
from typing import Any

import numpy as np

__all__ = ["INPUT_KINDS", "INPUT_SOURCES", "SAMPLER_INPUTS", "InputKind"]

INPUT_SOURCES = {
    "analysis": "Plume's stage 1-2 analysis of the training traces (plume.analysis), cached "
                "per dataset content and settings",
    "traces": "the training TraceSet itself",
    "controllers": "the env's classic controllers, each scored by the harness on every "
                   "training trace (one test-mode episode per trace)",
}
"""Who provides an input kind, and how."""


@dataclass(frozen=True)
class InputKind:
    """One kind of per-trace array: its ``name`` (the constructor argument), its meaning and
    shape, its ``source`` (a key of :data:`INPUT_SOURCES`) and how to obtain it: ``read``
    takes the TraceAnalysis or the TraceSet; ``role`` names the controller a
    ``controllers`` kind scores (``baseline``: one rule-based controller; ``reference``: the
    env's oracle or the best controller per trace)."""

    name: str
    meaning: str
    source: str
    read: Callable[[Any], np.ndarray] | None = None
    role: str | None = None

    def __post_init__(self) -> None:
        if self.source not in INPUT_SOURCES:
            raise ValueError(f"input kind {self.name!r}: source must be one of "
                             f"{tuple(INPUT_SOURCES)}, got {self.source!r}")
        given, other = ("role", "read") if self.source == "controllers" else ("read", "role")
        if getattr(self, given) is None or getattr(self, other) is not None:
            raise ValueError(f"input kind {self.name!r} from {self.source} takes {given}, "
                             f"not {other}")


INPUT_KINDS: dict[str, InputKind] = {kind.name: kind for kind in (
    InputKind("memberships", "(n, K) soft cluster memberships (GMM posteriors)", "analysis",
              read=attrgetter("memberships")),
    InputKind("features", "(n, F) the kept critical features, standardised", "analysis",
              read=attrgetter("standardized")),
    InputKind("mean_throughput", "(n,) each trace's mean bandwidth", "traces",
              read=methodcaller("mean_bandwidth")),
    InputKind("baseline_scores", "(n,) the score of a classic baseline controller",
              "controllers", role="baseline"),
    InputKind("reference_scores", "(n,) the score of a reference: the env's oracle, or the "
              "best of the named controllers on each trace", "controllers", role="reference"),
)}
"""Every input kind, by name (the order is the one error messages list)."""

SAMPLER_INPUTS = tuple(INPUT_KINDS)
"""The names of :data:`INPUT_KINDS`."""
