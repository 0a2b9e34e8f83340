"""TraceBench: Plume's controlled ABR environment, N copies stepped in numpy lockstep.

Semantics follow the reference ``ToyABREnv`` + ``ToyABRWrapper`` (the authors'
``controlled_abr``, sagar-pa/plume); the differences are listed under "Deliberate changes" below.

Dynamics (one step = one video chunk)
-------------------------------------
* Action: ``Discrete(3)``, the bitrate index into ``BITRATES`` = [1, 3, 6].
* The chunk of ``chunks["video_sizes"][trace, video_idx, action]`` (throughput x seconds
  units) is downloaded through the throughput trace. **Forward convention**:
  ``bandwidth[j]`` holds on ``[time[j], time[j+1])``; the last sample holds for 1 s; the trace
  then loops, so its period is ``time[L-1] - time[0] + 1``.
* Training mode multiplies the download time by ``clip(1 + N(0, 0.03), 0.95, 1.05)``; as in
  the reference the noise changes the reported delay, buffer and stall, **not** the trace
  position.
* ``stall = 0`` on the first chunk of an episode (the reference's ``buffer = None``), else
  ``clip(delay - buffer, 0, 100)``; then ``buffer = max(buffer - delay, 0) + chunk_seconds``.
* If ``buffer > max_buffer`` the player sleeps for the excess (trace time advances by
  ``buffer - max_buffer`` with nothing downloaded) and ``buffer = max_buffer * noise`` with
  ``noise = clip(1 + N(0, 0.005), 0.98, 1.02)`` in training and 1 in test mode.
* Raw reward (QoE): ``quality_weight * bitrate - rebuf_weight * stall``.
* ``video_idx`` starts at the start offset and increases by one per step; the episode
  terminates when ``video_idx + 1 == n_chunks`` (100 for TraceBench), i.e. after
  ``n_chunks - 1 - start`` steps (99 - start). ``terminated=True``, ``truncated=False``.
* Start offset (= first video chunk = first trace slot): training draws it uniformly from
  ``{0, ..., max(min(L, n_chunks) - min_trace_len, 1) - 1}`` (0..9 for TraceBench); test mode
  uses 0. At reset the trace time is the *start of slot* ``start``: the reference sets its
  pointer to ``start`` with the full slot duration left.

Agent reward and observation (the reference wrapper, §1.5)
----------------------------------------------------------
* ``step`` returns the transformed reward :func:`transform_reward`:
  ``x = r - 1; r' = sign(x) * (sqrt(|x| + 1) - 1 + 0.001 * x)``. This is the reference's exact,
  *non-odd* form: the sign also multiplies the linear term, so it equals
  ``sign(x)(sqrt(|x|+1) - 1) + 0.001|x|``, not MuZero's odd ``h(x)``. Kept so that returns are
  comparable with the paper's. Values: r=1 -> 0, r=3 -> 0.7341, r=6 -> 1.4545, r=0 -> -0.4132.
* Observation: ``5 * history_len + 3`` float32 in [0, 1] (53 by default). The history holds
  ``history_len`` rows ``[quality/6, size/6, delay/20, buffer/max_buffer, (r' + 2)/3.4545]``
  clipped to [0, 1], flattened oldest row first, then the next chunk's 3 sizes / 6 (clipped).
  At reset the history is all zeros (what the reference wrapper yields: its reset row has
  zero quality, size, delay, buffer and an unshifted zero reward) and the next sizes are those
  of the start chunk. ``-2`` is ``-int(sqrt(6))`` and ``3.4545 = transform_reward(6) + 2``,
  the reference's reward "scale".

Vector API
----------
:class:`TraceBenchVecEnv` is a ``gymnasium.vector.VectorEnv`` with
``metadata["autoreset_mode"] = AutoresetMode.SAME_STEP``: a copy that finishes is reset inside
the same ``step``; the returned observation row is the new episode's first observation.
``infos`` always holds ``"trace"`` (current trace index of every copy, mask ``"_trace"``);
when some copy finished it also holds ``"final_obs"`` (a dense (N, obs_dim) float32 array,
meaningful where ``"_final_obs"`` is True) and ``"episode"``, a dict of (N,) arrays with mask
``"_episode"``: ``return`` (raw QoE sum), ``return_transformed`` (sum of r'), ``length``,
``trace``, ``quality`` (sum of bitrates), ``stall`` (sum of stall seconds), and Gymnasium's
``r`` (= ``return_transformed``), ``l`` (= ``length``) and ``t`` (wall seconds since the env was
created; ``plume.envs.vector.GYMNASIUM_EPISODE_KEYS``); zero where the mask is False. In
training mode the sampler receives
``sampler.update(trace_index, rewards=<the episode's per-step r' as a float array>)`` for every
finished episode, before the copy draws its next trace with ``sampler.sample_many``. Test mode
never calls ``update``. Episodes cut short by ``reset()`` are not reported.

Implementation: a copy's state is its *unwrapped* trace time ``tau`` (position
``tau mod period``); downloads are ``plume.envs.replay.BatchedDownload`` look-ups in per-trace
cumulative payload tables (cumulative sums and searchsorted, forward convention, exact to 1e-8).

Deliberate changes from the reference
-------------------------------------
* **Sleep drain fixed** (digest §1.4 [BUG?], §7.8). The reference subtracts the sleep from
  the *current* slot's remaining time only; a negative remainder is discarded when the next
  download moves to the next slot, so a sleep longer than what is left of the current slot is
  cut short (and a sleep right at a slot boundary is lost entirely). Here the sleep advances
  the unwrapped trace time by the full excess, across as many slots (and trace wrap-arounds)
  as needed. Reason: the buffer model says the player idles for ``buffer - max_buffer``
  seconds while the network keeps running; losing part of that time makes the next download
  see the wrong throughput and silently couples the result to slot boundaries. With the
  cumulative formulation the fix is simply ``tau += excess``.
* Observation normalisation divides the buffer by ``max_buffer`` (the reference's constant
  15, the default). Start offsets use ``min(L, n_chunks)`` for the reference's trace length
  (both 100 in TraceBench).

Seeding, the default samplers and ``reset`` are those of every batched env here
(``plume.envs.vector``): one generator for the whole batch, so a training trajectory depends on
``n_envs`` as well as the seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from plume.checks import finite, integer, positive
from plume.envs.replay import COMPLETE_TOL, BatchedDownload, PayloadTables
from plume.envs.single import SingleCopyEnv
from plume.envs.vector import TraceVecEnv
from plume.sampling.base import TraceSampler
from plume.traces.tracebench import BITRATES
from plume.traces.traceset import TraceSet

__all__ = [
    "BITRATES",
    "COMPLETE_TOL",
    "DELAY_NORM",
    "REWARD_SHIFT",
    "REWARD_SPAN",
    "SIZE_NORM",
    "TraceBenchEnv",
    "TraceBenchVecEnv",
    "transform_reward",
]

SIZE_NORM = float(BITRATES[-1])
"""Quality and chunk sizes are divided by the top bitrate (6) in the observation."""
DELAY_NORM = 20.0
"""Download delay normaliser (the reference's 99.9th percentile guess)."""
DELAY_NOISE = (0.03, 0.95, 1.05)
"""Training delay noise: clip(1 + N(0, std), low, high)."""
BUFFER_NOISE = (0.005, 0.98, 1.02)
"""Training buffer-cap noise: clip(1 + N(0, std), low, high)."""
MAX_STALL = 100.0


def transform_reward(r: float | np.ndarray) -> float | np.ndarray:
    """The reference's reward transform: ``x = r - 1``; ``sign(x)(sqrt(|x|+1) - 1 + 0.001 x)``.

    Kept exactly, including its non-odd linear term (see the module docstring). Accepts a
    scalar (returns a float) or an array (returns a float64 array).
    """
    x = np.asarray(r, dtype=np.float64) - 1.0
    out = np.sign(x) * (np.sqrt(np.abs(x) + 1.0) - 1.0 + 0.001 * x)
    return float(out) if out.ndim == 0 else out


REWARD_SHIFT = float(int(np.sqrt(BITRATES[-1])))
"""Added to r' before normalising: ``-int(sqrt(6)) = -2`` is the reference's reward floor."""
REWARD_SPAN = transform_reward(float(BITRATES[-1])) + REWARD_SHIFT
"""``transform_reward(6) + 2 = 3.4545``: the reference's reward normaliser."""


class TraceBenchVecEnv(TraceVecEnv):
    """N TraceBench copies in lockstep; Gymnasium vector API with same-step autoreset.

    Args:
        traces: the TraceSet to replay; needs ``chunks["video_sizes"]`` of shape
            (n_traces, n_chunks, 3), finite and positive.
        n_envs: number of copies; defaults to ``len(traces)`` in test mode (required in train
            mode).
        sampler: picks each episode's trace; defaults to ``UniformSampler`` seeded from
            ``seed`` (train) or ``SequentialSampler`` (test).
        mode: ``"train"`` (random start offset, delay and buffer noise, sampler updates) or
            ``"test"`` (start 0, no noise, no updates).
        seed: int, ``np.random.SeedSequence`` or None (see the module docstring).
        quality_weight, rebuf_weight: raw QoE = quality_weight * bitrate - rebuf_weight * stall.
        history_len: rows of the observation history (10).
        max_buffer: buffer cap in seconds (15).
        chunk_seconds: video seconds added to the buffer per chunk (2).
        min_trace_len: training start offsets are ``< max(min(L, n_chunks) - min_trace_len, 1)``.
    """

    def __init__(
        self,
        traces: TraceSet,
        n_envs: int | None = None,
        sampler: TraceSampler | None = None,
        *,
        mode: str = "train",
        seed: int | np.random.SeedSequence | None = None,
        quality_weight: float = 1.0,
        rebuf_weight: float = 6.0,
        history_len: int = 10,
        max_buffer: float = 15.0,
        chunk_seconds: float = 2.0,
        min_trace_len: int = 90,
    ) -> None:
        self._setup(traces, n_envs, sampler, mode)
        n_traces = len(traces)
        self.quality_weight = finite("quality_weight", quality_weight)
        self.rebuf_weight = finite("rebuf_weight", rebuf_weight)
        self.max_buffer = positive("max_buffer", max_buffer)
        self.chunk_seconds = positive("chunk_seconds", chunk_seconds)
        self.history_len = integer("history_len", history_len, 1)
        self.min_trace_len = integer("min_trace_len", min_trace_len, 1)
        sizes = traces.chunks.get("video_sizes")
        if sizes is None:
            raise ValueError(
                f"TraceSet {traces.name!r} has no chunks['video_sizes'] (n_traces, n_chunks, "
                f"{len(BITRATES)}); TraceBench needs the chunk sizes of every trace"
            )
        sizes = np.asarray(sizes, dtype=np.float64)
        if sizes.ndim != 3 or sizes.shape[0] != n_traces or sizes.shape[2] != len(BITRATES):
            raise ValueError(
                f"TraceSet {traces.name!r}: chunks['video_sizes'] must have shape "
                f"({n_traces}, n_chunks, {len(BITRATES)}), got {sizes.shape}"
            )
        if sizes.shape[1] < 2:
            raise ValueError(
                f"TraceSet {traces.name!r}: a video needs at least 2 chunks, got {sizes.shape[1]}"
            )
        if not np.all(np.isfinite(sizes) & (sizes > 0)):
            raise ValueError(
                f"TraceSet {traces.name!r}: chunks['video_sizes'] must be finite and positive"
            )

        # Static tables.
        self._tables = PayloadTables.shared(traces)  # one per TraceSet, shared by all envs
        self._n_chunks = sizes.shape[1]
        self._sizes = np.ascontiguousarray(sizes.reshape(-1, len(BITRATES)))  # row: chunk
        self._n_starts = np.maximum(
            np.minimum(traces.lengths, self._n_chunks) - self.min_trace_len, 1
        ).astype(np.int64)
        self._same_starts = bool(np.all(self._n_starts == self._n_starts[0]))
        self._bitrates = np.asarray(BITRATES, dtype=np.float64)
        self._quality_norm = np.clip(self._bitrates / SIZE_NORM, 0.0, 1.0)

        # Spaces.
        self.obs_dim = 5 * self.history_len + len(BITRATES)
        self._set_spaces(spaces.Box(0.0, 1.0, (self.obs_dim,), np.float32),
                         spaces.Discrete(len(BITRATES)))

        self._allocate()
        self._seed(seed)

    # ------------------------------------------------------------------ properties
    @property
    def trace_time(self) -> np.ndarray:
        """(N,) unwrapped trace time of each copy in seconds since its trace's t=0 (a copy)."""
        return self._tau.copy()

    @property
    def payload_tables(self) -> PayloadTables:
        """The precomputed download tables: read-only, one per TraceSet, shared by every env
        over that TraceSet (``PayloadTables.shared``)."""
        return self._tables

    @property
    def n_chunks(self) -> int:
        return self._n_chunks

    def last_step(self) -> dict[str, np.ndarray]:
        """Per-copy components of the last step (copies): delay, stall, buffer (after the cap),
        sleep, chunk size, quality (bitrate), raw reward and the step's trace index."""
        return {
            "delay": self._delay.copy(),
            "stall": self._stall.copy(),
            "buffer": self._last_buffer.copy(),
            "sleep": self._sleep.copy(),
            "size": self._size.copy(),
            "quality": self._quality.copy(),
            "reward": self._raw.copy(),
            "trace": self._last_trace.copy(),
        }

    # ------------------------------------------------------------------ setup
    def _allocate(self) -> None:
        n = self.num_envs
        f = lambda: np.zeros(n, dtype=np.float64)
        i = lambda: np.zeros(n, dtype=np.int64)
        # Episode state, stacked so that a reset and the episode report are a few fancy ops.
        # Float rows 0-5 restart at zero; row 6 is the unwrapped trace time.
        self._fstate = np.zeros((7, n))
        (self._ret, self._ret_t, self._qsum, self._ssum, self._buf, self._notfirst,
         self._tau) = self._fstate
        self._istate = np.zeros((4, n), dtype=np.int64)  # rows 0-1 are reported per episode
        self._eplen, self._trace, self._vidx, self._vrow = self._istate
        self._rewbuf = np.zeros((n, self._n_chunks)) if self._train else None
        self._rewflat = None if self._rewbuf is None else self._rewbuf.reshape(-1)
        self._rew_rows = np.arange(n, dtype=np.int64) * self._n_chunks
        self._obs = np.zeros((n, self.obs_dim), dtype=np.float32)
        self._obs_alt = np.zeros((n, self.obs_dim), dtype=np.float32)
        # Per-step results and scratch space.
        self._delay, self._stall, self._last_buffer, self._sleep = f(), f(), f(), f()
        self._size, self._quality, self._raw, self._last_trace = f(), f(), f(), i()
        self._t1 = f()
        self._download = BatchedDownload(self._tables, n)
        self._s1, self._s2 = f(), f()
        self._idx = i()
        self._noise = np.zeros((2, n), dtype=np.float64)
        self._delay_noise, self._buffer_noise = self._noise[0], self._noise[1]
        self._noise_std = np.array([[DELAY_NOISE[0]], [BUFFER_NOISE[0]]])
        self._noise_low = np.array([[DELAY_NOISE[1]], [BUFFER_NOISE[1]]])
        self._noise_high = np.array([[DELAY_NOISE[2]], [BUFFER_NOISE[2]]])
        self._row = np.zeros((n, 5), dtype=np.float64)
        self._row_cols = [self._row[:, j] for j in range(5)]
        self._chunk = np.zeros((n, len(BITRATES)))  # sizes of each copy's current chunk
        self._chunk_flat = self._chunk.reshape(-1)
        self._chunk_rows = np.arange(n, dtype=np.int64) * len(BITRATES)
        self._next = np.zeros((n, len(BITRATES)))
        h5 = 5 * self.history_len
        # (obs, previous history to shift, shifted history, newest row, next sizes) by parity.
        self._views = [
            (dst, src[:, 5:h5], dst[:, : h5 - 5], dst[:, h5 - 5 : h5], dst[:, h5:])
            for src, dst in [(self._obs, self._obs_alt), (self._obs_alt, self._obs)]
        ]
        self._parity = 0
        self._done = np.zeros(n, dtype=bool)
        self._cap = np.zeros(n, dtype=bool)

    # ------------------------------------------------------------------ gym API
    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every copy; finished copies are reset in the same call (see the module doc).

        All arithmetic runs in place on preallocated float64 arrays; table look-ups use
        ``take(..., mode="clip")`` on indices computed here (always in range).
        """
        a = self._check_step(actions, len(BITRATES), "bitrate")
        self._play_chunk(a)
        raw, rt = self._rewards(a)
        self._observe(a, rt)
        done = self._account(raw, rt)
        infos: dict[str, Any] = {}
        if done.any():
            self._finish(done, infos)
        infos["trace"] = self._trace.copy()
        infos["_trace"] = np.ones(self.num_envs, dtype=bool)
        return self._obs.copy(), rt, done.copy(), np.zeros(self.num_envs, dtype=bool), infos

    def _play_chunk(self, a: np.ndarray) -> None:
        """The chunk's size and download delay (training noise applied), then the stall,
        the buffer and the sleep above the cap; the trace position moves on."""
        tau, t1 = self._tau, self._t1
        s1, idx = self._s1, self._idx
        delay, stall, buf, sleep = self._delay, self._stall, self._buf, self._sleep
        size = self._size

        # Chunk size, from the current chunk's sizes (gathered when the chunk came up).
        np.add(self._chunk_rows, a, out=idx)
        self._chunk_flat.take(idx, out=size, mode="clip")
        self._download.finish_time(tau, size, out=t1)
        np.subtract(t1, tau, out=delay)

        if self._train:
            noise = self._noise  # row 0: delay noise, row 1: buffer-cap noise
            self._draws.normal(noise)
            noise *= self._noise_std
            noise += 1.0
            np.maximum(noise, self._noise_low, out=noise)
            np.minimum(noise, self._noise_high, out=noise)
            delay *= self._delay_noise  # the noise does not move the trace position

        # Stall (none on an episode's first chunk), buffer, sleep above the cap.
        np.subtract(delay, buf, out=stall)
        np.maximum(stall, 0.0, out=stall)
        np.minimum(stall, MAX_STALL, out=stall)
        stall *= self._notfirst
        buf -= delay
        np.maximum(buf, 0.0, out=buf)
        buf += self.chunk_seconds
        np.subtract(buf, self.max_buffer, out=sleep)
        np.maximum(sleep, 0.0, out=sleep)
        np.add(t1, sleep, out=tau)  # the fixed drain: the full sleep, across any slots
        if self._train:
            np.greater(buf, self.max_buffer, out=self._cap)
            np.multiply(self._buffer_noise, self.max_buffer, out=s1)
            np.copyto(buf, s1, where=self._cap)
        else:
            np.minimum(buf, self.max_buffer, out=buf)
        self._notfirst.fill(1.0)

    def _rewards(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(raw QoE, transformed reward: a fresh array returned to the caller)."""
        stall, s1, s2 = self._stall, self._s1, self._s2
        # Rewards: raw QoE, then transform_reward in place.
        quality, raw = self._quality, self._raw
        self._bitrates.take(a, out=quality, mode="clip")
        np.multiply(quality, self.quality_weight, out=raw)
        np.multiply(stall, self.rebuf_weight, out=s1)
        raw -= s1
        rt = np.subtract(raw, 1.0)  # returned to the caller: a fresh array
        np.abs(rt, out=s2)
        s2 += 1.0
        np.sqrt(s2, out=s2)
        s2 -= 1.0
        np.multiply(rt, 0.001, out=s1)
        s2 += s1
        np.sign(rt, out=rt)
        rt *= s2
        return raw, rt

    def _observe(self, a: np.ndarray, rt: np.ndarray) -> None:
        """The next observation: this chunk's row, the history shifted, the next sizes."""
        size, delay, buf = self._size, self._delay, self._buf
        # Observation row, normalised and clipped, then the history shift (ping-pong buffers).
        row = self._row
        c0, c1, c2, c3, c4 = self._row_cols
        self._quality_norm.take(a, out=c0, mode="clip")
        np.multiply(size, 1.0 / SIZE_NORM, out=c1)
        np.multiply(delay, 1.0 / DELAY_NORM, out=c2)
        np.multiply(buf, 1.0 / self.max_buffer, out=c3)
        np.add(rt, REWARD_SHIFT, out=c4)
        c4 *= 1.0 / REWARD_SPAN
        np.maximum(row, 0.0, out=row)
        np.minimum(row, 1.0, out=row)
        self._vidx += 1
        self._vrow += 1
        out, old_hist, new_hist, new_row, new_next = self._views[self._parity]
        np.copyto(new_hist, old_hist)
        np.copyto(new_row, row, casting="same_kind")
        self._sizes.take(self._vrow, axis=0, out=self._chunk, mode="clip")
        np.multiply(self._chunk, 1.0 / SIZE_NORM, out=self._next)
        np.minimum(self._next, 1.0, out=self._next)  # sizes are positive
        np.copyto(new_next, self._next, casting="same_kind")
        self._obs = out
        self._parity ^= 1

    def _account(self, raw: np.ndarray, rt: np.ndarray) -> np.ndarray:
        """Episode sums and the training reward log; the mask of copies that finished."""
        buf, quality, stall, idx = self._buf, self._quality, self._stall, self._idx
        # Episode bookkeeping.
        np.copyto(self._last_buffer, buf)
        np.copyto(self._last_trace, self._trace)
        self._ret += raw
        self._ret_t += rt
        self._qsum += quality
        self._ssum += stall
        if self._train:
            np.add(self._rew_rows, self._eplen, out=idx)
            self._rewflat.put(idx, rt, mode="clip")
        self._eplen += 1
        done = np.equal(self._vidx, self._n_chunks - 1, out=self._done)
        return done

    def _observation(self) -> np.ndarray:
        return self._obs

    def _episode_fields(self, mask: np.ndarray) -> dict[str, np.ndarray]:
        ret, ret_t, quality, stall = np.where(mask, self._fstate[:4], 0.0)
        length, trace = np.where(mask, self._istate[:2], 0)
        return {"return": ret, "return_transformed": ret_t, "length": length, "trace": trace,
                "quality": quality, "stall": stall}

    def _restart(self, ids: np.ndarray) -> None:
        """New episodes for copies ``ids``: draw traces (and starts), zero the history."""
        new, start = self._draw(ids, self._n_starts, self._same_starts)
        self._fstate[:6, ids] = 0.0  # returns, buffer, "not first chunk"
        self._download.assign(ids, new)
        self._tau[ids] = self._tables.local_time[new, start]
        self._eplen[ids] = 0
        self._trace[ids] = new
        self._vidx[ids] = start
        self._vrow[ids] = new * self._n_chunks + start
        h5 = 5 * self.history_len
        self._obs[ids, :h5] = 0.0
        chunk = self._sizes[self._vrow[ids]]
        self._chunk[ids] = chunk
        self._obs[ids, h5:] = np.minimum(chunk * (1.0 / SIZE_NORM), 1.0)

class TraceBenchEnv(SingleCopyEnv):
    """Single-copy TraceBench (a ``TraceBenchVecEnv`` with one copy and no autoreset).

    Takes the same arguments as :class:`TraceBenchVecEnv` except ``n_envs``. ``step`` returns
    the transformed reward; ``info`` holds the step's ``delay``, ``stall``, ``buffer``,
    ``sleep``, ``size``, ``quality``, raw ``reward`` and ``trace``, and on the final step an
    ``episode`` dict of floats (return, return_transformed, length, trace, quality, stall, and
    Gymnasium's r, l, t: SB3 reads these without a ``Monitor``, which would replace the dict).
    After ``terminated`` call ``reset()``. In test mode with the default sampler, successive
    ``reset()`` calls play traces 0, 1, 2, ... (``reset(seed=...)`` starts again at 0).
    """

    def __init__(self, traces: TraceSet, sampler: TraceSampler | None = None, **kwargs: Any):
        if "n_envs" in kwargs:
            raise TypeError("TraceBenchEnv is a single copy; use TraceBenchVecEnv for n_envs")
        super().__init__(TraceBenchVecEnv(traces, 1, sampler, **kwargs))
