"""The ABR observations, built from per-chunk measurements: the one code path that both the
batched simulator (``plume.envs.abr.sim``) and the deployment runtime (``plume.deploy``) call,
so that a deployed policy sees exactly the numbers it was trained on.

Both builders hold N copies (the simulator's batch; one for a deployed session) and write
float32 observations in place, ping-ponged between two buffers so that the history shift is
one non-overlapping copy. The simulator computes the measurements from its trace replay; a
real client measures them. :func:`describe_gelato` / :func:`describe_pensieve` are the
observation's documentation as data (``contract.json``), written next to the code they
describe.

Only numpy is imported: a deployed controller needs no torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from plume.envs.abr.video import BITRATES_KBPS, VIDEO_SIZES

__all__ = [
    "BUFFER_NORM_S", "DELAY_NORM_S", "GELATO_LEVELS", "LOOKAHEAD", "PENSIEVE_HISTORY",
    "REWARD_CLIP", "SIZE_NORM_MB", "SSIM_NORM_DB", "STALL_GROUP", "STALL_NORM_S",
    "GelatoObservation", "PensieveObservation", "describe_gelato", "describe_pensieve",
    "gelato_reward", "pensieve_video_table", "symmetric_sqrt_clip",
]

GELATO_LEVELS = 10
"""Puffer encodings per chunk (the action count)."""
LOOKAHEAD = 5
"""Future chunks in the observation; an episode ends when only these remain."""
STALL_GROUP = 3
"""Consecutive stalls summed per long-term stall feature."""
SSIM_NORM_DB, SIZE_NORM_MB, DELAY_NORM_S, STALL_NORM_S = 25.0, 3.0, 20.0, 3.0
"""Gelato observation normalisers (reference: 25 dB, 3 MB, 20 s, 3 s)."""
REWARD_CLIP = 5.0
"""Agent reward bound, int(sqrt(25)); the observation maps r' to (r' + 5) / 10."""
PENSIEVE_HISTORY = 8
BUFFER_NORM_S = 10.0
"""Pensieve's state: 8 past chunks; the buffer is divided by 10 s."""


def symmetric_sqrt_clip(r: float | np.ndarray, bound: float = REWARD_CLIP):
    """Gelato's agent reward: ``clip(sign(r) (sqrt(|r| + 1) - 1 + 0.001 r), -bound, bound)``.

    The reference's exact form: the sign also multiplies the linear term, so this equals
    ``sign(r)(sqrt(|r|+1) - 1) + 0.001|r|`` (not an odd function). Kept so returns compare with
    the paper's. r = 10 -> 2.3266, r = 20 -> 3.6026, r = -35 -> -4.965, r <= -35.5 -> -5.
    Accepts a scalar (returns a float) or an array (returns a float64 array).
    """
    x = np.asarray(r, dtype=np.float64)
    out = np.clip(np.sign(x) * (np.sqrt(np.abs(x) + 1.0) - 1.0 + 0.001 * x), -bound, bound)
    return float(out) if out.ndim == 0 else out


def gelato_reward(quality, prev, stall, first, weights, raw, change, scratch) -> np.ndarray:
    """The chunk's QoE into ``raw`` and the agent reward (a fresh array), in place on (N,)
    float64 arrays: ``raw = qw q - rw stall - cw |q - prev|`` (no change term on an episode's
    first chunk), then :func:`symmetric_sqrt_clip`. ``prev`` becomes ``quality``; ``weights``
    is (quality_weight, rebuf_weight, change_weight)."""
    quality_weight, rebuf_weight, change_weight = weights
    np.subtract(quality, prev, out=change)
    np.abs(change, out=change)
    np.copyto(change, 0.0, where=first)
    np.copyto(prev, quality)
    np.multiply(quality, quality_weight, out=raw)
    np.multiply(stall, rebuf_weight, out=scratch)
    raw -= scratch
    np.multiply(change, change_weight, out=scratch)
    raw -= scratch
    rt = np.abs(raw)  # symmetric_sqrt_clip, in place on a fresh array
    rt += 1.0
    np.sqrt(rt, out=rt)
    rt -= 1.0
    np.multiply(raw, 0.001, out=scratch)
    rt += scratch
    np.sign(raw, out=scratch)
    rt *= scratch
    np.maximum(rt, -REWARD_CLIP, out=rt)
    np.minimum(rt, REWARD_CLIP, out=rt)
    return rt


class _PingPong:
    """Two float32 (N, rows x cols) buffers; a step writes the one it did not read."""

    def __init__(self, n: int, layout: tuple[int, int]) -> None:
        self.n, self.layout = n, layout
        self.obs_dim = layout[0] * layout[1]
        self.buffers = (np.zeros((n, self.obs_dim), np.float32),
                        np.zeros((n, self.obs_dim), np.float32))
        self.parity = 0

    @property
    def obs(self) -> np.ndarray:
        """The current observations (N, obs_dim): a view, valid until the next push."""
        return self.buffers[self.parity]

    def flip(self) -> None:
        self.parity = 1 - self.parity


class GelatoObservation(_PingPong):
    """Gelato's ``history_len`` x 26 observation of N copies (the layout in ``sim.py``'s
    module docstring): history rows [SSIM dB / 25, size MB / 3, delay s / 20, buffer s /
    max_buffer, (r' + 5) / 10] oldest first, the long-term stall column, and the look-ahead
    sizes / SSIMs of the next 5 chunks in rows 0-4, everything clipped to [0, 1]."""

    def __init__(self, n: int, history_len: int, max_buffer: float) -> None:
        self.history_len = h = int(history_len)
        super().__init__(n, (h, 2 * GELATO_LEVELS + 6))
        self.max_buffer = float(max_buffer)
        w = self.layout[1]
        self._row = np.zeros((n, 5))
        self._cols = [self._row[:, j] for j in range(5)]
        self._look = np.zeros((2, n, GELATO_LEVELS))
        self._stalls = (np.zeros((n, STALL_GROUP * h)), np.zeros((n, STALL_GROUP * h)))
        self._groups = np.zeros((n, h))
        # Views by parity (source p, destination 1 - p). Every row moves up one, shifting the
        # history (cols 0-4) and the look-ahead (rows 1-4 -> 0-3 of cols 6-25, row 5's zeros
        # into row 4) in one contiguous copy; then the newest history row, the stall column and
        # the new 5th look-ahead row are written.
        self._views = []
        new = LOOKAHEAD - 1
        for p in (0, 1):
            src, dst = self.buffers[p], self.buffers[1 - p]
            d3 = dst.reshape(n, h, w)
            s_st, d_st = self._stalls[p], self._stalls[1 - p]
            g3 = d_st.reshape(n, h, STALL_GROUP)
            self._views.append((
                src[:, w:], dst[:, :-w], d3[:, -1, :5], d3[:, :, 5],
                d3[:, new, 6:6 + GELATO_LEVELS], d3[:, new, 6 + GELATO_LEVELS:],
                s_st[:, 1:], d_st[:, :-1], d_st[:, -1], [g3[:, :, j] for j in range(STALL_GROUP)],
            ))

    def restart(self, ids: np.ndarray, sizes_mb: np.ndarray, ssim_db: np.ndarray) -> None:
        """Copies ``ids`` start an episode: empty history, the look-ahead of the next 5 chunks
        (``(len(ids), 5, 10)`` MB and dB)."""
        obs3 = self.obs.reshape(self.n, *self.layout)
        obs3[ids] = 0.0
        self._write_lookahead(obs3, ids, sizes_mb, ssim_db)
        self._stalls[self.parity][ids] = 0.0

    def set_lookahead(self, sizes_mb: np.ndarray, ssim_db: np.ndarray) -> None:
        """Overwrite all 5 look-ahead rows of every copy ((N, 5, 10) MB and dB): a real client
        measures them afresh each chunk (Puffer fills chunks not yet encoded with defaults)."""
        obs3 = self.obs.reshape(self.n, *self.layout)
        self._write_lookahead(obs3, slice(None), sizes_mb, ssim_db)

    @staticmethod
    def _write_lookahead(obs3: np.ndarray, ids, sizes_mb, ssim_db) -> None:
        obs3[ids, :LOOKAHEAD, 6:6 + GELATO_LEVELS] = np.minimum(
            np.asarray(sizes_mb, np.float64) * (1.0 / SIZE_NORM_MB), 1.0)
        obs3[ids, :LOOKAHEAD, 6 + GELATO_LEVELS:] = np.clip(
            np.asarray(ssim_db, np.float64) * (1.0 / SSIM_NORM_DB), 0.0, 1.0)

    def push(self, quality_db, size_mb, delay_s, buffer_s, reward, stall_s,
             next_sizes_mb, next_ssim_db) -> None:
        """One downloaded chunk per copy ((N,) float64 each; ``reward`` = the agent reward of
        :func:`gelato_reward`) and the chunk that became 5th in the look-ahead ((N, 10))."""
        (old_rows, new_rows, new_row, new_stall, new_sizes, new_ssim, old_st, new_st,
         newest_st, groups) = self._views[self.parity]
        self.flip()
        np.copyto(new_rows, old_rows)  # history and look-ahead up one row
        row, (c0, c1, c2, c3, c4) = self._row, self._cols
        np.multiply(quality_db, 1.0 / SSIM_NORM_DB, out=c0)
        np.multiply(size_mb, 1.0 / SIZE_NORM_MB, out=c1)
        np.multiply(delay_s, 1.0 / DELAY_NORM_S, out=c2)
        np.multiply(buffer_s, 1.0 / self.max_buffer, out=c3)
        np.add(reward, REWARD_CLIP, out=c4)
        c4 *= 0.5 / REWARD_CLIP
        np.maximum(row, 0.0, out=row)
        np.minimum(row, 1.0, out=row)
        np.copyto(new_row, row, casting="same_kind")

        np.copyto(new_st, old_st)  # the last 3 * history_len stalls, newest last
        np.copyto(newest_st, stall_s)
        g = self._groups
        np.add(groups[0], groups[1], out=g)
        for col in groups[2:]:
            g += col
        g *= 1.0 / STALL_NORM_S
        np.minimum(g, 1.0, out=g)  # stalls are >= 0
        np.copyto(new_stall, g, casting="same_kind")

        ls, lq = self._look
        np.multiply(next_sizes_mb, 1.0 / SIZE_NORM_MB, out=ls)
        np.minimum(ls, 1.0, out=ls)  # sizes are positive
        np.copyto(new_sizes, ls, casting="same_kind")
        np.multiply(next_ssim_db, 1.0 / SSIM_NORM_DB, out=lq)
        np.maximum(lq, 0.0, out=lq)
        np.minimum(lq, 1.0, out=lq)
        np.copyto(new_ssim, lq, casting="same_kind")


class PensieveObservation(_PingPong):
    """Pensieve's 6 x 8 state of N copies, newest value in column 7, rows rolled left per
    chunk: bitrate / 4300 kbit/s, buffer / 10 s, throughput (bytes / ms / 1000), delay
    / 10 s, the next chunk's 6 sizes in MB (row 4, columns 0-5, not rolled), chunks left
    (capped at ``n_chunks``) / ``n_chunks``."""

    def __init__(self, n: int, n_chunks: int, n_levels: int = len(BITRATES_KBPS)) -> None:
        super().__init__(n, (6, PENSIEVE_HISTORY))
        self.n_chunks, self.n_levels = int(n_chunks), int(n_levels)
        left = self.n_chunks - np.arange(self.n_chunks + 1)
        self._left = np.minimum(left, self.n_chunks) / self.n_chunks  # by chunks downloaded
        self._newest = np.zeros((n, 6))  # column 7 of the new state; row 4 stays 0
        self._rows = [self._newest[:, j] for j in range(6)]
        self._views = []
        for par in (0, 1):
            s3 = self.buffers[par].reshape(n, 6, PENSIEVE_HISTORY)
            d3 = self.buffers[1 - par].reshape(n, 6, PENSIEVE_HISTORY)
            self._views.append((s3[:, :, 1:], d3[:, :, :-1], d3[:, :, -1],
                                d3[:, 4, :self.n_levels]))

    def restart(self, ids: np.ndarray, next_sizes_mb: np.ndarray) -> None:
        """Copies ``ids`` start an episode: zeros but the first chunk's sizes (MB)."""
        obs3 = self.obs.reshape(self.n, 6, PENSIEVE_HISTORY)
        obs3[ids] = 0.0
        obs3[ids, 4, :self.n_levels] = next_sizes_mb

    def push(self, kbps, buffer_ms, size_bytes, delay_ms, downloaded, next_sizes_mb) -> None:
        """One chunk per copy ((N,) float64: bitrate, buffer after the chunk in ms, its size,
        its delay in ms; ``downloaded`` = chunks downloaded so far, this one included, as an
        int64 array) and the next chunk's sizes (N, 6) MB float32."""
        old, shifted, newest, sizes = self._views[self.parity]
        self.flip()
        r0, r1, r2, r3, _, r5 = self._rows
        np.divide(kbps, BITRATES_KBPS[-1], out=r0)
        np.divide(buffer_ms, 1000.0 * BUFFER_NORM_S, out=r1)
        np.divide(size_bytes, delay_ms, out=r2)
        r2 /= 1000.0
        np.divide(delay_ms, 1000.0 * BUFFER_NORM_S, out=r3)
        self._left.take(downloaded, out=r5, mode="clip")
        np.copyto(shifted, old)
        np.copyto(newest, self._newest, casting="same_kind")
        np.copyto(sizes, next_sizes_mb)


def _field(name, unit, rows, cols, normalisation, history=None, **extra) -> dict[str, Any]:
    """One entry of ``contract.json``'s observation fields (positions in the row-major
    observation matrix)."""
    return {"name": name, "unit": unit, "rows": rows, "cols": cols,
            "history": history, "normalisation": normalisation, **extra}


def describe_gelato(p: dict[str, Any]) -> dict[str, Any]:
    """The Gelato observation and action as data, for ``contract.json``."""
    h, w = int(p["history_len"]), 2 * GELATO_LEVELS + 6
    hist = f"rows 0-{h - 1}: the last {h} chunks, oldest first (zeros before the first)"
    clip = "clipped to [0, 1]"
    fields = [
        _field("ssim_db", "dB", [0, h], [0, 1], f"/ {SSIM_NORM_DB}, {clip}", hist),
        _field("size", "MB", [0, h], [1, 2], f"/ {SIZE_NORM_MB}, {clip}", hist),
        _field("delay", "s", [0, h], [2, 3], f"/ {DELAY_NORM_S}, {clip}", hist,
               meaning="transmit time of the chunk"),
        _field("buffer", "s", [0, h], [3, 4], f"/ max_buffer ({p['max_buffer']} s), {clip}", hist),
        _field("reward", "agent reward", [0, h], [4, 5], f"(r' + {REWARD_CLIP}) / "
               f"{2 * REWARD_CLIP}, {clip}", hist,
               meaning="symmetric_sqrt_clip(QoE): QoE = quality_weight x SSIM dB - "
                       "rebuf_weight x stall s - change_weight x |SSIM dB change|"),
        _field("stall_groups", "s", [0, h], [5, 6], f"sum of 3 stalls / {STALL_NORM_S}, {clip}",
               f"row i = stalls of chunks 3i..3i+2 of the last {STALL_GROUP * h}, oldest first"),
        _field("next_sizes", "MB", [0, LOOKAHEAD], [6, 6 + GELATO_LEVELS],
               f"/ {SIZE_NORM_MB}, {clip}", None,
               meaning="row k = chunk k ahead (0 = the chunk this decision downloads), "
                       "column = format"),
        _field("next_ssim_db", "dB", [0, LOOKAHEAD], [6 + GELATO_LEVELS, w],
               f"/ {SSIM_NORM_DB}, {clip}", None, meaning="as next_sizes"),
    ]
    return {"layout": [h, w], "order": "row-major, flattened", "dtype": "float32",
            "fields": fields, "zeros_elsewhere": f"rows {LOOKAHEAD}-{h - 1} of cols 6-{w - 1}"}


def describe_pensieve(p: dict[str, Any]) -> dict[str, Any]:
    """The Pensieve state and action as data, for ``contract.json``."""
    hist = f"columns 0-{PENSIEVE_HISTORY - 1}: the last 8 chunks, newest in column 7"
    top = BITRATES_KBPS[-1]
    fields = [
        _field("bitrate", "kbit/s", [0, 1], [0, 8], f"/ {top}", hist),
        _field("buffer", "s", [1, 2], [0, 8], f"/ {BUFFER_NORM_S}", hist),
        _field("throughput", "bytes/ms / 1000", [2, 3], [0, 8], "size bytes / delay ms / 1000",
               hist, meaning="delay includes the request RTT"),
        _field("delay", "ms", [3, 4], [0, 8], f"/ 1000 / {BUFFER_NORM_S}", hist),
        _field("next_sizes", "MB", [4, 5], [0, len(BITRATES_KBPS)], "bytes / 1e6", None,
               meaning="the next chunk at each level; columns 6-7 are 0"),
        _field("chunks_left", "chunks", [5, 6], [0, 8],
               f"min(left, {p['n_chunks']}) / {p['n_chunks']}", hist),
    ]
    return {"layout": [6, PENSIEVE_HISTORY], "order": "row-major, flattened",
            "dtype": "float32", "fields": fields, "not_clipped": True}


def pensieve_video_table(n_chunks: int, sizes: np.ndarray = VIDEO_SIZES) -> np.ndarray:
    """(n_chunks + 1, levels) chunk sizes in bytes by chunk index: ``sizes`` (level x chunk,
    Pensieve's 49-chunk video by default) tiled to the episode's length."""
    sizes = np.asarray(sizes)
    return sizes.T[np.arange(n_chunks + 1) % sizes.shape[1]]
