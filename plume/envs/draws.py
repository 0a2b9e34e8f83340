"""Where a training environment's random draws come from: in order of use, or keyed by trace
and visit (common random numbers).

By default (:class:`OrderedDraws`) every draw comes from one ``np.random.Generator`` in order
of use: the moment two samplers pick different traces every later draw differs too, so two
methods never meet the same noise on the same trace. Under ``train.crn``
(:class:`CommonDraws`) the draws of each episode form their own stream, keyed by (the env's
seed, the trace, the visit number on that trace): the v-th episode on trace k gets the same
start offset and the same per-step noise in every run of that seed, whichever sampler led
there, at whatever time and in whichever copy. That is the standard variance reduction of
simulation studies (common random numbers): the comparison of two methods at one seed then
carries less of the noise both face.

A stream is splitmix64 (Steele, Lea and Flood, OOPSLA 2014) seeded by a hash of the key: a
counter-based generator, so a copy's draws are computed from its episode key and its position
in the stream, with no state beyond the two counters, which the env's snapshot keeps (exact
resume). Both classes offer the same four draws, each for a batch whose last axis is the env's
copies (all of them, or ``copies`` for draws at episode starts).
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_UNIT = 2.0 ** -53


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (a new array; products wrap modulo 2**64)."""
    x = x ^ (x >> np.uint64(30))
    x *= _MIX_1
    x ^= x >> np.uint64(27)
    x *= _MIX_2
    x ^= x >> np.uint64(31)
    return x


class OrderedDraws:
    """Every draw from ``rng`` in order of use: exactly the calls the environments made before
    draws were keyed, so runs without ``train.crn`` are unchanged to the bit."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def begin(self, copies: np.ndarray, traces: np.ndarray) -> None:
        """Episodes start on ``traces`` in ``copies``: nothing to key here."""

    def normal(self, out: np.ndarray) -> None:
        self.rng.standard_normal(out=out)

    def random(self, out: np.ndarray) -> None:
        self.rng.random(out=out)

    def uniform(self, low: float, high: float, copies: np.ndarray) -> np.ndarray:
        return self.rng.uniform(low, high, size=len(copies))

    def integers(self, high: int | np.ndarray, copies: np.ndarray) -> np.ndarray:
        if np.ndim(high) == 0:
            return self.rng.integers(0, high, size=len(copies))
        return self.rng.integers(0, high)


class CommonDraws:
    """Common random numbers: copy i's draws in an episode are the splitmix64 stream of the
    episode's key (seed, trace, visit); ``visits[k]`` counts the episodes begun on trace k."""

    def __init__(self, key: np.ndarray, n_traces: int, n_copies: int) -> None:
        self.key = np.asarray(key, dtype=np.uint64).reshape(2)
        self.visits = np.zeros(n_traces, dtype=np.int64)
        self.visit = np.zeros(n_copies, dtype=np.int64)  # the visit each copy plays
        self.episode = np.zeros(n_copies, dtype=np.uint64)  # its stream's seed
        self.position = np.zeros(n_copies, dtype=np.uint64)  # draws taken from it so far

    def begin(self, copies: np.ndarray, traces: np.ndarray) -> None:
        """New episodes on ``traces`` in ``copies``: each gets the next visit of its trace (two
        copies on one trace at once: in the order of ``copies``) and its stream from 0."""
        traces = np.asarray(traces, dtype=np.int64)
        order = np.argsort(traces, kind="stable")
        ranks = np.empty(len(traces), dtype=np.int64)
        ordered = traces[order]
        firsts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        ranks[order] = np.arange(len(traces)) - np.repeat(firsts, np.diff(np.r_[firsts,
                                                                                len(traces)]))
        visit = self.visits[traces] + ranks
        np.add.at(self.visits, traces, 1)
        self.visit[copies] = visit
        seeded = mix64(self.key[0] ^ (traces.astype(np.uint64) * _GOLDEN))
        self.episode[copies] = mix64(seeded ^ (visit.astype(np.uint64) * _GOLDEN + self.key[1]))
        self.position[copies] = 0

    def _unit(self, copies: np.ndarray | None, count: int) -> np.ndarray:
        """(count, copies) uniforms in (0, 1): the next ``count`` of each copy's stream."""
        episode = self.episode if copies is None else self.episode[copies]
        position = self.position if copies is None else self.position[copies]
        steps = np.arange(1, count + 1, dtype=np.uint64)[:, None] + position[None, :]
        bits = mix64(episode[None, :] + steps * _GOLDEN)
        if copies is None:
            self.position += np.uint64(count)
        else:
            self.position[copies] += np.uint64(count)
        return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * _UNIT

    def normal(self, out: np.ndarray) -> None:
        """Standard normals (Box-Muller, two uniforms each) for every copy, last axis."""
        count = out.size // out.shape[-1]
        u = self._unit(None, 2 * count)
        z = np.sqrt(-2.0 * np.log(u[:count])) * np.cos(2.0 * np.pi * u[count:])
        np.copyto(out, z.reshape(out.shape))

    def random(self, out: np.ndarray) -> None:
        np.copyto(out, self._unit(None, out.size // out.shape[-1]).reshape(out.shape))

    def uniform(self, low: float, high: float, copies: np.ndarray) -> np.ndarray:
        return low + (high - low) * self._unit(np.asarray(copies), 1)[0]

    def integers(self, high: int | np.ndarray, copies: np.ndarray) -> np.ndarray:
        """Uniform integers in [0, high) (``high`` one bound or one per copy)."""
        bound = np.broadcast_to(np.asarray(high, dtype=np.int64), (len(copies),))
        drawn = np.floor(self._unit(np.asarray(copies), 1)[0] * bound).astype(np.int64)
        return np.minimum(drawn, bound - 1)


Draws = OrderedDraws | CommonDraws
"""What ``TraceVecEnv._draws`` holds."""

__all__ = ["CommonDraws", "Draws", "OrderedDraws", "mix64"]
