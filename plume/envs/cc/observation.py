"""Aurora's observation, built from per-monitor-interval measurements: the one code path that
both the fluid simulator (``plume.envs.cc.sim``) and the deployment runtime (``plume.deploy``)
call, so that a deployed rate controller sees exactly the numbers it was trained on.

A history of ``history`` monitor intervals (MIs) of [latency inflation, latency ratio, send
ratio], oldest first, float32, clipped to Aurora's bounds; an empty row is (0, 1, 1). The
latency ratio divides by the lowest MI latency of the episode (the connection's minimum), so
the builder keeps that minimum per copy. Only numpy is imported.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["EMPTY_ROW", "OBS_HIGH", "OBS_LOW", "SEND_RATIO_CAP", "AuroraObservation",
           "change_rate", "describe_aurora"]

OBS_LOW = np.array([-1.0, 1.0, 0.0])
OBS_HIGH = np.array([10.0, 1e4, 1e3])
"""Aurora's bounds of [latency inflation, latency ratio, send ratio]."""
EMPTY_ROW = np.array([0.0, 1.0, 1.0])
"""A history row before any MI was recorded."""
SEND_RATIO_CAP = 1000.0
"""A send ratio at or above this (or a zero throughput) reads 1, as in PCC-RL."""
_TINY = float(np.finfo(np.float64).tiny)


class AuroraObservation:
    """The observations of N senders, ping-ponged between two float32 buffers."""

    def __init__(self, n: int, history: int) -> None:
        self.n, self.history = n, int(history)
        h3 = 3 * self.history
        self.empty = np.tile(EMPTY_ROW, self.history).astype(np.float32)
        self._buffers = (np.tile(self.empty, (n, 1)), np.tile(self.empty, (n, 1)))
        # (destination, previous history to shift, shifted part, newest-row columns).
        self._views = [(dst, src[:, 3:], dst[:, : h3 - 3], [dst[:, h3 - 3 + j] for j in range(3)])
                       for src, dst in [self._buffers, self._buffers[::-1]]]
        self._parity = 0
        self.conn_min = np.full(n, np.inf)
        """(N,) lowest MI latency (s) of each copy's episode so far."""
        self._s1 = np.zeros(n)
        self._mask = np.zeros(n, dtype=bool)

    @property
    def obs(self) -> np.ndarray:
        """The current observations (N, 3 x history): a view, valid until the next push."""
        return self._buffers[self._parity]

    def restart(self, ids: np.ndarray) -> None:
        """Copies ``ids`` start an episode: empty history, no latency seen yet."""
        self.obs[ids] = self.empty
        self.conn_min[ids] = np.inf

    def push(self, inflation, latency, throughput, rate) -> None:
        """One MI per copy ((N,) float64): latency inflation (the second half's mean RTT minus
        the first half's, over the MI's duration), mean RTT (s), throughput and sending rate
        (the same unit, e.g. packets/s)."""
        s1 = self._s1
        np.minimum(self.conn_min, latency, out=self.conn_min)
        out, old_hist, new_hist, (c0, c1, c2) = self._views[self._parity]
        np.copyto(new_hist, old_hist)
        np.maximum(inflation, OBS_LOW[0], out=s1)
        np.minimum(s1, OBS_HIGH[0], out=c0)
        np.divide(latency, self.conn_min, out=s1)
        np.minimum(s1, OBS_HIGH[1], out=c1)  # >= 1: the min includes this MI
        np.maximum(throughput, _TINY, out=s1)
        np.divide(rate, s1, out=s1)
        np.greater_equal(s1, SEND_RATIO_CAP, out=self._mask)
        np.copyto(s1, 1.0, where=self._mask)
        np.copyto(c2, s1, casting="same_kind")
        self._parity ^= 1


def change_rate(rate: np.ndarray, scaled_action: np.ndarray, low: float, high: float,
                factor: np.ndarray, negative: np.ndarray) -> None:
    """Aurora's rate change, in place on ``rate`` (N,): with ``a'`` = the scaled action,
    ``rate x (1 + a')`` if ``a' >= 0`` else ``rate / (1 - a')``, then clipped to [low, high].
    ``factor`` and ``negative`` are (N,) scratch arrays."""
    np.less(scaled_action, 0.0, out=negative)
    np.abs(scaled_action, out=factor)
    factor += 1.0
    np.divide(1.0, factor, out=factor, where=negative)
    rate *= factor
    np.maximum(rate, low, out=rate)
    np.minimum(rate, high, out=rate)


def describe_aurora(history: int) -> dict[str, Any]:
    """The observation as data, for ``contract.json``."""
    hist = f"the last {history} monitor intervals, oldest first; an empty row is (0, 1, 1)"
    fields = [
        {"name": "latency_inflation", "unit": "s/s", "position": "3 i", "history": hist,
         "normalisation": "clipped to [-1, 10]",
         "meaning": "(mean RTT of the MI's second half - first half) / MI duration"},
        {"name": "latency_ratio", "unit": "ratio", "position": "3 i + 1", "history": hist,
         "normalisation": "clipped to [1, 1e4]",
         "meaning": "mean RTT of the MI / lowest MI mean RTT of the flow so far"},
        {"name": "send_ratio", "unit": "ratio", "position": "3 i + 2", "history": hist,
         "normalisation": "1 when the throughput is 0 or the ratio >= 1000",
         "meaning": "sending rate / throughput (packets sent / packets acknowledged)"},
    ]
    return {"layout": [history, 3], "order": "row-major, flattened", "dtype": "float32",
            "fields": fields}
