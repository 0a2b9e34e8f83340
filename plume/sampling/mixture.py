"""The ε-mixture draw that most samplers share: a prioritised distribution ``p`` mixed with
uniform draws, ``(1 − ε)·p + ε·uniform``.

Drawing: one ``rng.random()`` variate ``u`` per draw decides both the ε branch and the trace.
If ``u < ε`` the draw is uniform (trace ``floor(u / ε · n)``); otherwise
``v = (u − ε) / (1 − ε)`` is looked up in the cumulative distribution of the prioritised
probabilities, which is rebuilt only when they change. This is exactly the reference's
``weighted_sample`` (uniform with probability ε, else ``choice(n, p)``) at O(log n) per draw;
:meth:`~EpsilonMixtureSampler.sample` and :meth:`~EpsilonMixtureSampler.sample_many` consume the
generator identically, so ``k`` scalar draws equal one ``sample_many(k)``.

Counters: ``draws`` (per trace, every draw), ``uniform_draws`` (draws decided by the ε branch),
``prioritised_draws`` (the rest: the reference's ``get_probs`` calls, the unit of Plume-Dynamic's
warm-up and recompute schedule) and ``episodes`` (per trace, finished training episodes passed to
``update``).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

import numpy as np

from plume.checks import fraction
from plume.sampling.base import TraceSampler

__all__ = ["NEVER", "EpsilonMixtureConfig", "EpsilonMixtureSampler"]

NEVER = 1 << 62
"""``_next_due`` when no refresh of ``p`` is scheduled (the draw-count trigger never fires)."""


@dataclass
class EpsilonMixtureConfig:
    """Options of a bare :class:`EpsilonMixtureSampler` (uniform ``p``)."""

    epsilon: float = 0.1
    """Probability that a draw is uniform over all traces."""

    def __post_init__(self) -> None:
        self.epsilon = fraction("epsilon", self.epsilon)


class EpsilonMixtureSampler(TraceSampler):
    """Draws from ``(1 − ε)·p + ε·uniform``, where ``p`` (the prioritised distribution) is set
    by subclasses with :meth:`set_prioritised` (uniform until then).

    ε is :meth:`uniform_share`: the config's ``epsilon`` unless a subclass says otherwise.
    Subclasses that change ``p`` during training schedule a refresh by setting ``_next_due`` to
    a value of ``prioritised_draws``: just before the prioritised draw that reaches it,
    :meth:`_due` runs (it must either move ``_next_due`` forward or leave it, in which case it is
    retried at the next prioritised draw); :data:`NEVER` cancels the trigger.
    """

    name = "epsilon_mixture"
    CONFIG = EpsilonMixtureConfig

    def __init__(self, n_traces: int, rng: np.random.Generator, config: Any = None,
                 **options: Any) -> None:
        super().__init__(n_traces, rng, config, **options)
        self.epsilon = fraction("epsilon", self.uniform_share())
        self.uniform_draws = 0
        self.prioritised_draws = 0
        self._next_due = NEVER
        self._uscale = self.n_traces / self.epsilon if self.epsilon > 0 else 0.0
        self._vscale = 1.0 / (1.0 - self.epsilon) if self.epsilon < 1 else 0.0
        self.set_prioritised(np.full(self.n_traces, 1.0 / self.n_traces))

    def uniform_share(self) -> float:
        """ε, the share of uniform draws (read once, at construction)."""
        return self.config.epsilon

    # -- distribution ---------------------------------------------------------------------------
    def set_prioritised(self, probs: np.ndarray) -> None:
        """Make ``probs`` (finite, >= 0, any positive total: normalised here) the prioritised
        distribution ``p``."""
        p = np.array(probs, dtype=np.float64, copy=True).reshape(-1)
        if p.shape != (self.n_traces,) or not np.all(np.isfinite(p)) or np.any(p < 0):
            raise ValueError(f"prioritised probabilities must be {self.n_traces} finite values >= 0")
        total = p.sum()
        if not total > 0:
            raise ValueError("prioritised probabilities sum to zero")
        p /= total
        cdf = np.cumsum(p)
        cdf /= cdf[-1]  # exact 1.0 at the end: v < 1 never falls off the table
        self._prio = p
        self._cdf = cdf
        self._cdf_list = cdf.tolist()  # bisect on a list is ~10x faster than np.searchsorted

    def _due(self) -> None:
        """Refresh ``p`` (subclasses); the default just cancels the trigger."""
        self._next_due = NEVER

    def prioritised_probabilities(self) -> np.ndarray:
        """The prioritised distribution ``p`` before ε mixing (a copy)."""
        return self._prio.copy()

    def probabilities(self) -> np.ndarray:
        return (1.0 - self.epsilon) * self._prio + self.epsilon / self.n_traces

    # -- drawing --------------------------------------------------------------------------------
    def sample(self) -> int:
        u = self.rng.random()
        n = self.n_traces
        if u < self.epsilon:
            index = int(u * self._uscale)
            self.uniform_draws += 1
        else:
            if self.prioritised_draws >= self._next_due:
                self._due()
            self.prioritised_draws += 1
            index = bisect_right(self._cdf_list, (u - self.epsilon) * self._vscale)
        if index >= n:
            index = n - 1
        self.draws[index] += 1
        return index

    def sample_many(self, count: int) -> np.ndarray:
        count = int(count)
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        n = self.n_traces
        u = self.rng.random(count)
        out = np.empty(count, dtype=np.int64)
        uniform = u < self.epsilon
        n_uniform = int(np.count_nonzero(uniform))
        if n_uniform:
            out[uniform] = (u[uniform] * self._uscale).astype(np.int64)
        positions = np.flatnonzero(~uniform)
        done, total = 0, positions.size
        base_uniform = self.uniform_draws
        while done < total:  # one segment per refresh of p (usually exactly one)
            if self.prioritised_draws >= self._next_due:
                # counters as the scalar path would have them just before this draw
                self.uniform_draws = base_uniform + int(positions[done]) - done
                self._due()
            take = total - done
            if self.prioritised_draws < self._next_due:
                take = min(take, self._next_due - self.prioritised_draws)
            seg = positions[done:done + take]
            v = (u[seg] - self.epsilon) * self._vscale
            out[seg] = np.searchsorted(self._cdf, v, side="right")
            self.prioritised_draws += take
            done += take
        np.minimum(out, n - 1, out=out)
        self.uniform_draws = base_uniform + n_uniform
        np.add.at(self.draws, out, 1)
        return out

    # -- persistence ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "uniform_draws": self.uniform_draws,
            "prioritised_draws": self.prioritised_draws,
            "next_due": self._next_due,
            "prioritised": self._prio.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        prio = np.asarray(state["prioritised"], dtype=np.float64)
        if prio.shape != (self.n_traces,):
            raise ValueError(
                f"state covers {prio.shape[0]} traces but this sampler covers {self.n_traces}"
            )
        super().load_state_dict(state)
        self.uniform_draws = int(state["uniform_draws"])
        self.prioritised_draws = int(state["prioritised_draws"])
        self._next_due = int(state["next_due"])
        self.set_prioritised(prio)
