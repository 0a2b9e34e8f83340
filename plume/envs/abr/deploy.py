"""ABR's deployment slice (``SPEC.deploy``): the runtime's sessions of both variants and the
recorders that turn the simulator's steps into what a real player measures.

Imported only by the deploy layer, through the spec's lazy loader: it builds on
``plume.deploy.sessions``, which an env package must not import when it is imported.

=========  ==========================================================================
variant    ``decide(measurement)`` takes / returns
=========  ==========================================================================
gelato     ``{"last": None | {size_mb, ssim_db, delay_s, buffer_s, stall_s},
           next_sizes_mb: 5 x 10, next_ssim_db: 5 x 10}`` -> format index (Puffer)
pensieve   ``{"last": None | {level, size_bytes, delay_ms, buffer_s},
           next_sizes_bytes (optional, 6)}`` -> level (Pensieve's dash.js server)
=========  ==========================================================================

``last=None``: a new session.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from plume.deploy.contract import ContractError
from plume.deploy.sessions import (
    MeasurementError,
    constant,
    constant_array,
    matrix,
    number,
    one,
)
from plume.envs.abr.observation import (
    GELATO_LEVELS,
    LOOKAHEAD,
    GelatoObservation,
    PensieveObservation,
    gelato_reward,
    pensieve_video_table,
)
from plume.envs.registry import Deployment

__all__ = ["DEPLOYMENTS", "GelatoRecorder", "GelatoSession", "PensieveRecorder",
           "PensieveSession"]


class GelatoSession:
    """The Puffer / Gelato setting: 10 formats, a 5-chunk look-ahead of sizes and SSIMs."""

    def __init__(self, constants: dict[str, Any]) -> None:
        self.observer = GelatoObservation(1, int(constant(constants, "history_len", 1,
                                                          integer=True)),
                                          constant(constants, "max_buffer", above=0.0))
        self.weights = tuple(constant(constants, key) for key in (
            "quality_weight", "rebuf_weight", "change_weight"))
        self.levels = GELATO_LEVELS
        self._prev, self._raw, self._change, self._s1 = (np.zeros(1) for _ in range(4))
        self._first = np.ones(1, dtype=bool)

    def reset(self) -> None:
        """A new video session: the next measurement has ``last=None``."""
        self._first[:] = True

    def observe(self, m: dict[str, Any]) -> np.ndarray:
        """The observation for the next decision (1, obs_dim)."""
        if not isinstance(m, dict):
            raise MeasurementError(f"measurement must be an object, got {type(m).__name__}")
        shape = (LOOKAHEAD, self.levels)
        sizes, ssim = matrix(m, "next_sizes_mb", shape), matrix(m, "next_ssim_db", shape)
        last = m.get("last")
        if last is None:
            self.reset()
            self.observer.restart(np.arange(1), sizes[None], ssim[None])
            return self.observer.obs
        # Every field is checked before any state changes: a bad measurement leaves none.
        quality, size, delay, buffer = (one(number(last, key, "last.", low)) for key, low in (
            ("ssim_db", None), ("size_mb", 0.0), ("delay_s", 0.0), ("buffer_s", 0.0)))
        stall = one(number(last, "stall_s", "last.", 0.0))
        if self._first[0]:
            stall[:] = 0.0  # the session's first chunk has no stall, as in the simulator
        rt = gelato_reward(quality, self._prev, stall, self._first, self.weights, self._raw,
                           self._change, self._s1)
        self.observer.push(quality, size, delay, buffer, rt, stall, sizes[None, -1],
                           ssim[None, -1])
        self.observer.set_lookahead(sizes[None], ssim[None])
        self._first[:] = False
        return self.observer.obs

    def action(self, a: Any) -> int:
        return int(a)


class PensieveSession:
    """Pensieve's setting: 6 bitrates, a 48-chunk video whose chunk sizes the contract holds
    (as Pensieve's server holds them), chunks counted by the session."""

    def __init__(self, constants: dict[str, Any]) -> None:
        self.n_chunks = int(constant(constants, "n_chunks", 1, integer=True))
        self.levels_kbps = constant_array(constants, "levels_kbps", 1)
        video = constant_array(constants, "video_sizes_bytes", 2)  # level x chunk, bytes
        if video.shape[0] != len(self.levels_kbps) or np.any(np.diff(self.levels_kbps) <= 0):
            raise ContractError(f"constants: levels_kbps must rise and name each of the "
                                f"video's {video.shape[0]} levels")
        self.observer = PensieveObservation(1, self.n_chunks)
        self.sizes = pensieve_video_table(self.n_chunks, video)
        self.downloaded = np.zeros(1, dtype=np.int64)

    def reset(self) -> None:
        self.downloaded[:] = 0
        self.observer.restart(np.arange(1), (self.sizes[0] / 1e6).astype(np.float32))

    def observe(self, m: dict[str, Any]) -> np.ndarray:
        if not isinstance(m, dict):
            raise MeasurementError(f"measurement must be an object, got {type(m).__name__}")
        last = m.get("last")
        if last is None:
            self.reset()
            return self.observer.obs
        level = number(last, "level", "last.", 0.0)
        if level != int(level) or level >= len(self.levels_kbps):
            raise MeasurementError(f"field last.level must be a level index 0.."
                                   f"{len(self.levels_kbps) - 1}, got {level:g}")
        delay = number(last, "delay_ms", "last.", 0.0)
        buffer_ms = number(last, "buffer_s", "last.", 0.0) * 1000.0
        size = number(last, "size_bytes", "last.", 0.0)
        chunk = min(int(self.downloaded[0]) + 1, self.n_chunks)
        next_sizes = (self.sizes[chunk] if m.get("next_sizes_bytes") is None else
                      matrix(m, "next_sizes_bytes", (len(self.levels_kbps),)))
        self.downloaded += 1
        if delay == 0.0:  # a player glitch: Pensieve's server reuses its previous state
            return self.observer.obs
        self.observer.push(one(self.levels_kbps[int(level)]), one(buffer_ms), one(size),
                           one(delay), self.downloaded,
                           (next_sizes / 1e6).astype(np.float32)[None])
        return self.observer.obs

    def action(self, a: Any) -> int:
        return int(a)


class GelatoRecorder:
    """Puffer's measurements in the simulator: the chunk just played and the look-ahead."""

    def __init__(self, env, traces, contract) -> None:
        self.env = env
        self.sizes, self.ssim = traces.chunks["chunk_sizes"], traces.chunks["ssim_db"]

    def _ahead(self, i: int) -> dict[str, Any]:
        k = int(self.env.chunk_index[i])
        return {"next_sizes_mb": self.sizes[i, k:k + LOOKAHEAD].tolist(),
                "next_ssim_db": self.ssim[i, k:k + LOOKAHEAD].tolist()}

    def start(self, i: int) -> tuple[dict[str, Any], Any]:
        return {}, {"last": None, **self._ahead(i)}

    def after(self, i: int, step: dict[str, np.ndarray], action) -> tuple[Any, Any]:
        last = {"size_mb": step["size"][i], "ssim_db": step["quality"][i],
                "delay_s": step["delay"][i], "buffer_s": step["buffer"][i],
                "stall_s": step["stall"][i]}
        return int(action), {"last": {k: float(v) for k, v in last.items()}, **self._ahead(i)}


class PensieveRecorder:
    """What Pensieve's dash.js player posts after each chunk."""

    def __init__(self, env, traces, contract) -> None:
        pass

    def start(self, i: int) -> tuple[dict[str, Any], Any]:
        return {}, {"last": None}

    def after(self, i: int, step: dict[str, np.ndarray], action) -> tuple[Any, Any]:
        last = {"level": int(action), "size_bytes": float(step["size"][i]),
                "delay_ms": float(step["delay"][i] * 1000.0), "buffer_s": float(step["buffer"][i])}
        return int(action), {"last": last}


DEPLOYMENTS = {"gelato": Deployment(GelatoSession, GelatoRecorder, protocols=("puffer",)),
               "pensieve": Deployment(PensieveSession, PensieveRecorder, protocols=("pensieve",))}
"""``env.variant`` -> its runtime slice."""
