"""Genet's CL2 difficulty curriculum on a fixed trace set (``cl2``).

Genet (Xia, Zhou, Yan, Jiang, Sen, Li, Kumar, SIGCOMM 2022) compares its own curriculum with a
"CL2" baseline (its ``schedulers.py``): order environments by how much better the best
controller does than the rule-based baseline (the gap is the "difficulty"), split them into 5
difficulty bins, and add one harder bin per curriculum level, giving the newest bin 0.3 of the
mass. Genet moves up a level every fixed number of epochs; here the 5 levels are evenly spaced
over the training budget in environment steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from plume.checks import fraction, integer
from plume.sampling.base import ConfigField, SamplerNeeds
from plume.sampling.checks import controller, valid_trace
from plume.sampling.mixture import EpsilonMixtureSampler
from plume.sampling.weights import finite_scores

__all__ = ["NEW_BIN_MASS", "N_BINS", "DifficultyCurriculumConfig", "DifficultyCurriculumSampler",
           "difficulty_bins"]

N_BINS = 5
"""Difficulty bins, and curriculum levels (level L opens bins 0..L)."""
NEW_BIN_MASS = 0.3
"""Share of the newest bin at each level; the older bins keep 0.7 of the previous level's."""


def difficulty_bins(difficulty: np.ndarray, n_bins: int = N_BINS) -> np.ndarray:
    """Bin of each trace: ``floor(n_bins · rank / n)``, rank by difficulty (ties: lower index
    first), so bins hold equal counts up to one; bin 0 is the easiest."""
    d = np.asarray(difficulty, dtype=np.float64)
    ranks = np.empty(d.size, dtype=np.int64)
    ranks[np.argsort(d, kind="stable")] = np.arange(d.size)
    return (n_bins * ranks) // d.size


@dataclass
class DifficultyCurriculumConfig:
    """CL2's options."""

    budget_steps: int
    """The run's env-step budget (the config gives ``${train.total_steps}``): levels are
    evenly spaced over it."""
    epsilon: float = 0.0
    """Optional uniform floor; the published scheme has none."""
    baseline: Optional[str] = None
    """Controller scored as the baseline (provenance); None: the env's default rule-based one."""
    reference: Optional[str] = None
    """Controller scored as the reference (provenance); None: the env's oracle if it has one,
    else the best of the env's controllers on each trace."""

    def __post_init__(self) -> None:
        self.budget_steps = integer("budget_steps", self.budget_steps, 1)
        self.epsilon = fraction("epsilon", self.epsilon)
        self.baseline = controller("baseline", self.baseline)
        self.reference = controller("reference", self.reference)


class DifficultyCurriculumSampler(EpsilonMixtureSampler):
    """Genet's CL2: bins of increasing difficulty, opened one per fifth of the budget.

    ``difficulty = reference_scores − baseline_scores`` (higher scores are better, so a large gap
    means the baseline leaves much to learn). Bins: :func:`difficulty_bins`. Level
    ``min(4, floor(5 · steps_seen / budget_steps))``, ``steps_seen`` = total length of the
    reward arrays passed to :meth:`update`. Bin distribution: :meth:`level_probabilities`; a
    trace is uniform inside its bin; then optional ε-uniform mixing (``epsilon=0``: the
    published scheme, no floor).

    **Empty bins** (only with fewer than 5 traces): their share is dropped and the open,
    non-empty bins are renormalised (bin 0 is never empty, so there always is one).

    ``baseline`` and ``reference`` name the controllers the harness scored the traces with;
    they are kept for provenance only.
    """

    name = "cl2"
    CONFIG = DifficultyCurriculumConfig
    NEEDS = SamplerNeeds(inputs=("baseline_scores", "reference_scores"))
    baseline = ConfigField()
    reference = ConfigField()

    def __init__(self, n_traces: int, rng: np.random.Generator, baseline_scores: np.ndarray,
                 reference_scores: np.ndarray, config: DifficultyCurriculumConfig | None = None,
                 **options: Any) -> None:
        super().__init__(n_traces, rng, config, **options)
        base = finite_scores("baseline_scores", baseline_scores, self.n_traces)
        ref = finite_scores("reference_scores", reference_scores, self.n_traces)
        self.difficulty = ref - base
        self.bins = difficulty_bins(self.difficulty)
        self.clusters = self.bins
        self.bin_sizes = np.bincount(self.bins, minlength=N_BINS)
        self.steps_seen = 0
        self.level = 0
        self._refresh()

    @staticmethod
    def level_probabilities(level: int) -> np.ndarray:
        """Genet's bin distribution at ``level`` (shape (5,), zeros for unopened bins):
        level 0 is bin 0 alone; level L gives bin L 0.3 and the others 0.7 × level L−1's."""
        level = integer("level", level, 0)
        if level >= N_BINS:
            raise ValueError(f"level must be < {N_BINS}, got {level}")
        probs = np.zeros(N_BINS)
        probs[0] = 1.0
        for newest in range(1, level + 1):
            probs *= 1.0 - NEW_BIN_MASS
            probs[newest] = NEW_BIN_MASS
        return probs

    def bin_probabilities(self, level: int | None = None) -> np.ndarray:
        """Mass of each bin in the prioritised distribution (before ε) at ``level`` (default:
        the current one): :meth:`level_probabilities` renormalised over non-empty bins."""
        probs = self.level_probabilities(self.level if level is None else level)
        probs[self.bin_sizes == 0] = 0.0
        return probs / probs.sum()

    def trace_probabilities(self, level: int | None = None) -> np.ndarray:
        """Prioritised per-trace probabilities at ``level``: bin mass / bin size."""
        mass = self.bin_probabilities(level)
        return (mass / np.maximum(self.bin_sizes, 1))[self.bins]

    def level_at(self, steps: int) -> int:
        """The curriculum level after ``steps`` environment steps."""
        return min(N_BINS - 1, (N_BINS * int(steps)) // self.config.budget_steps)

    def _refresh(self) -> None:
        self.set_prioritised(self.trace_probabilities())

    def update(self, trace_index: int, rewards: np.ndarray, **learner_stats: Any) -> None:
        """Count the episode's steps; move to the next level when a fifth of the budget is up."""
        trace = valid_trace(trace_index, self.n_traces)
        super().update(trace, rewards)
        self.steps_seen += int(np.asarray(rewards).size)
        level = self.level_at(self.steps_seen)
        if level != self.level:
            self.level = level
            self._refresh()

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "steps_seen": self.steps_seen, "level": self.level}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.steps_seen = int(state["steps_seen"])
        self.level = self.level_at(self.steps_seen)
        self._refresh()
