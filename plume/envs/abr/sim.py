"""Batched ABR simulator: N copies of a chunk-level video session stepped in numpy lockstep.

One Gymnasium ``VectorEnv``, :class:`AbrVecEnv`, in two settings (``variant``), with the
conventions of TraceBench (``plume.envs.tracebench.env``): same-step autoreset, the same
``infos`` keys, sampler calls, seeding and preallocated in-place arithmetic. Downloads are
exact look-ups in cumulative payload tables (``plume.envs.replay.BatchedDownload``, forward
convention: ``bandwidth[j]`` in Mbit/s holds on ``[time[j], time[j+1])``, the last sample until
``constants["period"]`` or for 1 s, then the trace loops). A copy's position is its unwrapped
trace time ``tau``. One step = one video chunk; the action is the encoding of that chunk.

variant="gelato": Plume/Gelato's Puffer simulator
-------------------------------------------------
(StanfordSNR/puffer; the paper, §3.1; the authors' ``puffer_abr``: ``abr.py`` ``ABRSimEnv``,
``abr_wrapper.py``.) Needs Puffer traces:
``chunks["chunk_sizes"]`` (n, L, 10) in MB and ``chunks["ssim_db"]`` (n, L, 10), row i = chunk
i of the stream, aligned with the series rows; trace i has ``lengths[i]`` chunks.

* Action: ``Discrete(10)``, the encoding (0 = lowest). The video index starts at the network
  start index and advances one row per step (the video is the trace's own chunk sequence).
* Download time of chunk k at action a: ``chunk_sizes[trace, k, a]`` MB through the bandwidth
  (payload scale 1/8 MB per Mbit, no RTT). Training multiplies it by
  ``clip(1 + N(0, 0.03), 0.95, 1.05)``; the noise does not move the trace position.
* ``stall = 0`` on an episode's first chunk, else ``clip(delay - buffer, 0, 20)``;
  ``buffer = max(buffer - delay, 0) + chunk_seconds`` (2.002 s).
* If ``buffer > max_buffer`` (15 s): the network skips to the start of the next trace slot,
  exactly the reference's ``network_time_left = 0``: ``tau`` jumps to the end of the slot in
  which the download ended (a download that ends exactly on a slot boundary is in the slot
  that just ended, so no time is skipped, as in the reference loop; boundaries are matched
  within ``SLOT_EPS`` = 1e-9 s). Then ``buffer = max_buffer * clip(1 + N(0, 0.005), 0.98,
  1.02)`` in training, ``max_buffer`` in test mode. ``last_step()["sleep"]`` is the skip.
* Raw reward (QoE) = ``quality_weight * q - rebuf_weight * stall - change_weight * |q - q_prev|``
  with ``q`` = SSIM dB of the chosen encoding; no change term on an episode's first chunk.
* Agent reward (what ``step`` returns), :func:`symmetric_sqrt_clip`:
  ``clip(sign(r) * (sqrt(|r| + 1) - 1 + 0.001 * r), -5, 5)``, the reference's form where the
  sign also multiplies the linear term. r = 10 -> 2.3266, r = 20 -> 3.6026, r = -35 -> -4.965;
  it saturates at -5 from r of about -35.5 (half a second of stall on a 15 dB chunk).
* Observation (``history_len`` x 26 = 10 x 26, flattened row-major; ``obs_layout`` = (10, 26)),
  float32 clipped to [0, 1]: rows x cols 0-4 = the last 10 steps, oldest first, [SSIM dB / 25,
  size MB / 3, delay s / 20, buffer s / max_buffer, (r' + 5) / 10]; col 5 = the long-term
  stall feature: the last 30 per-step stalls (zero-padded) summed in 10 groups of 3, oldest
  group in row 0, each / 3 s; rows 0-4 x cols 6-15 = the next 5 chunks' sizes of all 10
  encodings / 3 MB (row 0 = the chunk the next action downloads); rows 0-4 x cols 16-25 =
  their SSIM dB / 25; rows 5-9 x cols 6-25 = 0. At reset the history is zeros and the
  look-ahead starts at the start chunk.
* Episodes terminate when the video index + 5 == the trace's chunk count (5 look-ahead chunks
  remain): ``lengths - 5 - start`` steps. Training starts at a uniform index in
  ``[0, max(len - min_chunks, 1))`` and is truncated (``truncated=True``) after ``max_steps``
  (500) steps; test mode starts at 0 with no step limit. Traces with fewer than
  ``min_chunks`` (86) chunks are refused at construction.

variant="pensieve": Pensieve's ``sim/env.py``
---------------------------------------------
(hongzimao/pensieve.) Bandwidth-only traces (time / bandwidth in Mbit/s; Puffer traces
work too, their chunks are ignored). The loader converts Pensieve's backward-convention cooked
files: Pensieve's ``ptr`` in {1..L-1} is our forward slot ``ptr - 1`` from that slot's start.

* Action: ``Discrete(6)``, bitrates ``BITRATES_KBPS`` = [300, 750, 1200, 1850, 2850, 4300]; the
  video is EnvivioDash3 (``plume.envs.abr.video.VIDEO_SIZES``, bytes), 48 chunks of 4 s.
* ``delay_ms = download_s * 1000 + 80`` (RTT) with download through payload scale
  ``1e6 / 8 * 0.95`` bytes per Mbit; training multiplies by ``U(0.9, 1.1)``. Only the
  download moves the trace position.
* ``rebuf = max(delay - buffer, 0)`` (the first chunk is penalised like any other, as in
  Pensieve); ``buffer = max(buffer - delay, 0) + 4 s``; if ``buffer > 60 s`` the player sleeps
  ``ceil((buffer - 60 s) / 0.5 s) * 0.5 s``: ``buffer -= sleep`` and the trace time advances by
  the full sleep (Pensieve's walk drains it across slots and wraps). Arithmetic in ms, as
  Pensieve does, so the ceiling sees the same numbers.
* Reward (raw = agent) = ``br / 1000 - 4.3 * rebuf_s - |br - br_prev| / 1000`` (kbit/s) with
  ``br_prev = 750`` (DEFAULT_QUALITY 1) on an episode's first chunk.
* State 6 x 8 (flattened; ``obs_layout`` = (6, 8)), newest value in column 7, rows rolled left
  each step: row 0 br / 4300; row 1 buffer s / 10; row 2 throughput = size bytes / delay ms /
  1000 (RTT and noise included); row 3 delay ms / 1000 / 10; row 4 cols 0-5 the next chunk's
  6 sizes in MB (overwritten each step, not rolled); row 5 min(chunks left, 48) / 48. Zeros at
  an episode's start except the look-ahead sizes. Not clipped (as Pensieve): the space's
  upper bound is infinite on rows 2-3 (throughput, delay), which have none.
* Training starts at a uniform slot, test mode at slot 0; an episode is ``n_chunks`` (48)
  chunks and ends ``terminated``.

Vector API (both variants)
--------------------------
``metadata["autoreset_mode"] = AutoresetMode.SAME_STEP``: a finished copy is reset inside the
same ``step``, whose observation row is the new episode's first. ``infos`` always holds
``"trace"`` / ``"_trace"``; when some copy finished also ``"final_obs"`` (dense (N, obs_dim),
valid where ``"_final_obs"``) and ``"episode"``, a dict of (N,) arrays (zero where
``"_episode"`` is False) with the fields of ``EPISODE_FIELDS``: ``return`` (raw QoE sum),
``return_transformed`` (sum of agent rewards), ``length`` (steps), ``trace``, ``quality`` (sum
of per-chunk quality: SSIM dB for gelato, bitrate Mbit/s for pensieve), ``stall`` (stall
seconds), ``change`` (sum of the |quality change| terms of the reward, unweighted: for pensieve
the first chunk's change from 750 kbit/s counts), ``first_return`` (raw QoE of the first chunk,
so a score can exclude the start-up chunk), ``video_seconds`` (chunks x chunk length), and
Gymnasium's ``r`` (= ``return_transformed``), ``l`` (= ``length``) and ``t`` (wall seconds
since the env was created; ``plume.envs.vector.GYMNASIUM_EPISODE_KEYS``). In
training the sampler gets ``sampler.update(trace_index, rewards=<the episode's per-step agent
rewards>)`` for every finished episode before the copy draws its next trace with
``sampler.sample_many``; test mode never calls ``update``. Episodes cut short by ``reset()``
are not reported. Actions are validated as TraceBench does (shape (N,), integer-valued, in
range). ``last_step()`` gives the last step's per-copy components in seconds.

Implementation: all per-step arithmetic runs in place on preallocated (N,) float64 arrays;
table look-ups use ``take(..., mode="clip")`` on indices computed here (always in range). The
observation is ping-ponged between two float32 buffers: gelato moves every row up one in a
single contiguous copy (shifting the history and, at once, the look-ahead: rows 1-4 become
0-3) and then writes only the newest history row, the stall column and the new 5th look-ahead
row; pensieve shifts all rows left and writes column 7 and the look-ahead sizes. No extra
per-chunk tables are built for gelato (the look-ahead reads ``chunk_sizes`` / ``ssim_db``
directly), so memory stays that of the TraceSet plus the payload tables; those tables and the
float64 chunk tables are built once per TraceSet and shared by every env over it
(``plume.envs.replay.derived_from``).

Seeding, the default samplers and ``reset`` are those of every batched env here
(``plume.envs.vector``): one generator for the whole batch's start offsets and noise.

Deliberate differences from the references
------------------------------------------
Gelato (Plume's ``ABRSimEnv`` + ``ABRWrapper``):

* The step limit is returned as ``truncated=True`` (the reference reports ``terminated`` and,
  checking before its increment, allows 501 steps): here exactly ``max_steps`` steps, so a
  learner bootstraps at the cut. An episode that ends naturally on that step is terminated.
* The first chunk is recognised by its position in the episode, not by "previous quality ==
  0" (the same unless an SSIM is exactly 0 dB).
* The buffer feature divides by ``max_buffer`` (the reference's constant 15, the default);
  ``history_len`` other than 10 gives ``history_len`` rows and stall groups (>= 5 rows).
* TCP statistics, the logged-only safety cost and per-episode feather logs are not produced.

Pensieve (``sim/env.py`` with its agent loop):

* The agent chooses chunk 0 from the reset observation; Pensieve downloads chunk 0 at
  DEFAULT_QUALITY without asking the policy (its smoothness term still starts from 750 kbit/s,
  kept here). ``first_return`` lets evaluation drop that chunk as Pensieve's does.
* Row 4, columns 6-7 of the state stay 0: Pensieve rolls the whole state, which leaves lagged
  level-0 sizes there that its network never reads (it reads columns 0-5 of row 4).
* ``last_step()["sleep"]`` is the full sleep (Pensieve returns what its walk left over).
* A download that completes *exactly* at a slot end followed by zero-throughput slots
  completes at that slot end; Pensieve's strict ``>`` would first walk through the dead
  slots. Only exact arithmetic reaches this; real traces never tie.
* ``n_chunks`` above 48 tiles the 49-chunk video (Park's tiling); the chunks-left feature is
  normalised by ``n_chunks`` (48, Pensieve's cap, by default).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import numpy as np
from gymnasium import spaces

from plume.checks import choice, fail, finite, integer, positive
from plume.envs.abr.observation import (  # noqa: F401  (re-exported: the sim's constants)
    BUFFER_NORM_S,
    DELAY_NORM_S,
    GELATO_LEVELS,
    LOOKAHEAD,
    PENSIEVE_HISTORY,
    REWARD_CLIP,
    SIZE_NORM_MB,
    SSIM_NORM_DB,
    GelatoObservation,
    PensieveObservation,
    gelato_reward,
    pensieve_video_table,
    symmetric_sqrt_clip,
)
from plume.envs.abr.video import BITRATES_KBPS, VIDEO_SIZES
from plume.envs.draws import Draws
from plume.envs.replay import BatchedDownload, PayloadTables, derived_from, read_only
from plume.envs.single import SingleCopyEnv
from plume.envs.vector import GYMNASIUM_EPISODE_KEYS, TraceVecEnv
from plume.sampling.base import TraceSampler
from plume.traces.traceset import TraceSet

__all__ = [
    "BITRATES_KBPS",
    "EPISODE_FIELDS",
    "GELATO_DEFAULTS",
    "GELATO_LEVELS",
    "LOOKAHEAD",
    "MB_PER_MBIT",
    "PENSIEVE_BYTES_PER_MBIT",
    "PENSIEVE_DEFAULTS",
    "REWARD_CLIP",
    "VARIANTS",
    "AbrEnv",
    "AbrVecEnv",
    "symmetric_sqrt_clip",
]

VARIANTS = ("gelato", "pensieve")
EPISODE_FIELDS = ("return", "return_transformed", "length", "trace", "quality", "stall",
                  "change", "first_return", "video_seconds", *GYMNASIUM_EPISODE_KEYS)
"""Keys of ``infos["episode"]`` (see the module docstring)."""

# Gelato / Puffer (the observation constants live in observation.py).
MB_PER_MBIT = 1.0 / 8.0
"""Payload scale: Mbit/s x s -> MB."""
MAX_STALL_S = 20.0
DELAY_NOISE = (0.03, 0.95, 1.05)
"""Training delay noise: clip(1 + N(0, std), low, high)."""
BUFFER_NOISE = (0.005, 0.98, 1.02)
"""Training buffer-cap noise: clip(1 + N(0, std), low, high)."""
SLOT_EPS = 1e-9
"""Seconds: a download ending this close after a slot start counts as in the previous slot."""
GELATO_DEFAULTS = MappingProxyType({
    "quality_weight": 1.0, "rebuf_weight": 100.0, "change_weight": 1.0, "max_buffer": 15.0,
    "chunk_seconds": 2.002, "max_steps": 500, "history_len": 10, "min_chunks": 86,
})
"""Gelato keyword parameters and their defaults (``max_steps``: 500 in train mode, None = no
limit in test mode unless given)."""

# Pensieve.
PENSIEVE_BYTES_PER_MBIT = 1e6 / 8.0 * 0.95
"""Payload scale: Mbit/s x s -> bytes, with Pensieve's 0.95 payload share."""
PENSIEVE_NOISE = (0.9, 1.1)
"""Training delay noise U(low, high) (Pensieve's NOISE_LOW / NOISE_HIGH)."""
DRAIN_QUANTUM_MS = 500.0
"""Pensieve's DRAIN_BUFFER_SLEEP_TIME."""
DEFAULT_QUALITY = 1
"""Pensieve's previous bitrate at an episode's first chunk (750 kbit/s)."""
PENSIEVE_DEFAULTS = MappingProxyType({
    "rebuf_penalty": 4.3, "smooth_penalty": 1.0, "link_rtt_ms": 80.0, "buffer_cap_s": 60.0,
    "chunk_seconds": 4.0, "n_chunks": 48,
})
"""Pensieve keyword parameters and their defaults."""


# ---------------------------------------------------------------------------- validation
def _params(variant: str, train: bool, given: dict[str, Any]) -> dict[str, Any]:
    """The variant's parameters: defaults overridden by ``given``, unknown keys refused."""
    defaults = dict(GELATO_DEFAULTS if variant == "gelato" else PENSIEVE_DEFAULTS)
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise TypeError(f"unknown parameter(s) {', '.join(unknown)} for variant={variant!r}; "
                        f"valid: {', '.join(defaults)}")
    if variant == "gelato":
        defaults["max_steps"] = 500 if train else None
    p = {**defaults, **given}
    if variant == "gelato":
        for key in ("quality_weight", "rebuf_weight", "change_weight"):
            p[key] = finite(key, p[key])
        for key in ("max_buffer", "chunk_seconds"):
            p[key] = positive(key, p[key])
        if p["max_steps"] is not None:
            p["max_steps"] = integer("max_steps", p["max_steps"], 1)
        p["history_len"] = integer("history_len", p["history_len"], LOOKAHEAD)
        p["min_chunks"] = integer("min_chunks", p["min_chunks"], LOOKAHEAD + 1)
    else:
        for key in ("rebuf_penalty", "smooth_penalty"):
            p[key] = finite(key, p[key])
        p["link_rtt_ms"] = finite("link_rtt_ms", p["link_rtt_ms"])
        if p["link_rtt_ms"] < 0:
            fail("link_rtt_ms", p["link_rtt_ms"], ">= 0")
        for key in ("buffer_cap_s", "chunk_seconds"):
            p[key] = positive(key, p[key])
        p["n_chunks"] = integer("n_chunks", p["n_chunks"], 1)
    return p


def _puffer_chunks(traces: TraceSet) -> tuple[np.ndarray, np.ndarray]:
    """``chunk_sizes`` and ``ssim_db`` as read-only float64 (n, W, 10), checked on every valid
    row (built once per TraceSet and shared: see ``plume.envs.replay.derived_from``)."""
    arrays = []
    for key in ("chunk_sizes", "ssim_db"):
        if key not in traces.chunks:
            raise ValueError(
                f"TraceSet {traces.name!r} has no chunks[{key!r}]: variant='gelato' replays "
                f"Puffer traces with per-chunk sizes (MB) and SSIMs (dB) of all "
                f"{GELATO_LEVELS} encodings; use variant='pensieve' for bandwidth-only traces")
        value = np.asarray(traces.chunks[key], dtype=np.float64)
        n, longest = len(traces), int(traces.lengths.max())
        if value.ndim != 3 or value.shape[0] != n or value.shape[1] < longest or \
                value.shape[2] != GELATO_LEVELS:
            raise ValueError(
                f"TraceSet {traces.name!r}: chunks[{key!r}] must have shape (n_traces={n}, "
                f">= {longest} chunks, {GELATO_LEVELS}), aligned with the series rows; got "
                f"{value.shape}")
        arrays.append(value)
    sizes, ssim = arrays
    valid = np.arange(sizes.shape[1])[None, :] < traces.lengths[:, None]
    bad = ~np.all(np.where(valid[:, :, None], sizes > 0, True), axis=(1, 2))
    if bad.any():
        raise ValueError(f"TraceSet {traces.name!r}: trace "
                         f"{str(traces.trace_ids[int(np.argmax(bad))])!r} has a chunk size <= 0")
    read_only(sizes, ssim)
    return sizes, ssim


# ---------------------------------------------------------------------------- slot ends
class _SlotEnds:
    """Unwrapped end time of the trace slot a time falls in, for N copies at once.

    Gelato's buffer cap jumps to the end of the slot in which the download ended. This is the
    bucketed branchless search of ``PayloadTables`` (its public bucket tables and keys) for the
    slot of ``t - SLOT_EPS``, so a download ending exactly on a boundary (or a rounding error
    past it) is in the slot that just ended, as in the reference's loop.
    """

    def __init__(self, tables: PayloadTables, n: int) -> None:
        self._tables = tables
        self._end = tables.slot_end  # local slot end, padded rows (shared)
        self._per_trace = np.stack([tables.period, tables.buckets / tables.period], axis=1)
        self._state = np.zeros((2, n))
        self._period, self._scale = self._state
        self._base = np.zeros(n, dtype=np.int64)
        self._k, self._x, self._key = np.zeros(n), np.zeros(n), np.zeros(n)
        self._g, self._bucket = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        self._hit = np.zeros(n, dtype=bool)

    def assign(self, copies: np.ndarray, traces: np.ndarray) -> None:
        self._state[:, copies] = self._per_trace[traces].T
        self._base[copies] = traces * (self._tables.buckets + 1)

    def end_after(self, t: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out`` = max(t, unwrapped end of the slot holding ``t - SLOT_EPS``)."""
        tab, k, x, key, g, hit = self._tables, self._k, self._x, self._key, self._g, self._hit
        np.subtract(t, SLOT_EPS, out=x)
        np.divide(x, self._period, out=k)
        np.floor(k, out=k)
        k *= self._period  # k is now the start of x's period
        x -= k
        np.maximum(x, 0.0, out=x)
        np.multiply(x, self._scale, out=key)
        np.copyto(self._bucket, key, casting="unsafe")  # truncation = floor (key >= 0)
        self._bucket += self._base
        tab.time_lo.take(self._bucket, out=g, mode="clip")
        for probe, step in zip(tab.time_probes, tab.time_steps):
            probe.take(g, out=key, mode="clip")
            np.less_equal(key, x, out=hit)
            np.add(g, step, out=g, where=hit)
        g -= 1  # count of slot starts <= x, minus one: the slot index (row base included)
        self._end.take(g, out=out, mode="clip")
        out += k
        np.maximum(out, t, out=out)
        return out


# ---------------------------------------------------------------------------- dynamics
class _Dynamics:
    """Per-step state and arithmetic of one ABR setting for N copies (no Gymnasium API).

    Results of the last step live in (N,) float64 arrays (``raw``, ``quality``, ``stall``,
    ``change``, ...); the observation is built by the setting's ``observer`` (one of
    ``plume.envs.abr.observation``'s builders, which the deployment runtime calls too).
    """

    n_levels: int
    chunk_seconds: float
    max_len: int

    def __init__(self, n: int, observer, train: bool) -> None:
        self.n, self.train, self.observer = n, train, observer
        self.obs_layout, self.obs_dim = observer.layout, observer.obs_dim
        f = lambda: np.zeros(n)  # noqa: E731
        self.raw, self.quality, self.stall, self.change, self.size = f(), f(), f(), f(), f()
        self.chunk = np.zeros(n, dtype=np.int64)  # index of the chunk just downloaded
        self.terminated = np.zeros(n, dtype=bool)
        self._t1, self._s1 = f(), f()
        self._idx = np.zeros(n, dtype=np.int64)

    @property
    def tables(self) -> PayloadTables:
        """The shared download tables of this setting's TraceSet."""
        return self._tables

    @property
    def obs(self) -> np.ndarray:
        """The current observations (a view, valid until the next step)."""
        return self.observer.obs


class _Gelato(_Dynamics):
    """The Puffer / Gelato setting (see the module docstring)."""

    n_levels = GELATO_LEVELS

    def __init__(self, traces: TraceSet, n: int, train: bool, p: dict[str, Any]) -> None:
        sizes, ssim = derived_from(traces, "puffer_chunks", lambda: _puffer_chunks(traces))
        lengths = traces.lengths
        short = lengths < p["min_chunks"]
        if short.any():
            i = int(np.argmax(short))
            raise ValueError(
                f"TraceSet {traces.name!r}: trace {str(traces.trace_ids[i])!r} has {lengths[i]} "
                f"chunks, fewer than min_chunks={p['min_chunks']}")
        self.history_len = p["history_len"]
        super().__init__(n, GelatoObservation(n, p["history_len"], p["max_buffer"]), train)
        self.p = p
        self.chunk_seconds = p["chunk_seconds"]
        self.max_buffer = p["max_buffer"]
        self.max_steps = p["max_steps"]
        longest = int(lengths.max()) - LOOKAHEAD
        self.max_len = longest if self.max_steps is None else min(longest, self.max_steps)
        self.n_starts = np.maximum(lengths - p["min_chunks"], 1).astype(np.int64)

        self._tables = PayloadTables.shared(traces, payload_scale=MB_PER_MBIT)
        self._download = BatchedDownload(self._tables, n)
        self._slot_end = _SlotEnds(self._tables, n)
        self._width = sizes.shape[1]
        self._lengths = lengths
        self._sizes2 = sizes.reshape(-1, GELATO_LEVELS)  # row = trace * width + chunk
        self._ssim2 = ssim.reshape(-1, GELATO_LEVELS)
        self._sizes, self._ssim = self._sizes2.reshape(-1), self._ssim2.reshape(-1)
        self.space = spaces.Box(0.0, 1.0, (self.obs_dim,), np.float32)
        self._allocate()

    def _allocate(self) -> None:
        n = self.n
        f = lambda: np.zeros(n)  # noqa: E731
        self.tau, self.buffer, self.delay, self.sleep, self._prev = f(), f(), f(), f(), f()
        self._last_buffer = f()  # the step's buffer, kept when an autoreset clears the state
        self._vrow = np.zeros(n, dtype=np.int64)  # trace * width + video index
        self._vrow10 = np.zeros(n, dtype=np.int64)  # 10 x that: offset of its sizes
        self._row_base = np.zeros(n, dtype=np.int64)
        self._end_row = np.zeros(n, dtype=np.int64)  # vrow at which the episode ends
        self._cap = np.zeros(n, dtype=bool)
        self._jump = f()
        self._noise = np.ones((2, n))
        self.delay_noise, self.buffer_noise = self._noise
        self._noise_std = np.array([[DELAY_NOISE[0]], [BUFFER_NOISE[0]]])
        self._noise_low = np.array([[DELAY_NOISE[1]], [BUFFER_NOISE[1]]])
        self._noise_high = np.array([[DELAY_NOISE[2]], [BUFFER_NOISE[2]]])
        self._ahead = np.arange(LOOKAHEAD)[None, :]
        self._look_row = np.zeros(n, dtype=np.int64)
        self._look_sizes = np.zeros((n, GELATO_LEVELS))
        self._look_ssim = np.zeros((n, GELATO_LEVELS))
        self._weights = (self.p["quality_weight"], self.p["rebuf_weight"],
                         self.p["change_weight"])

    # ------------------------------------------------------------------ episodes
    def restart(self, ids: np.ndarray, traces: np.ndarray, starts: np.ndarray) -> None:
        """New episodes: copies ``ids`` play ``traces`` from chunk (and slot) ``starts``."""
        base = traces * self._width
        self.tau[ids] = self._tables.local_time[traces, starts]
        self.buffer[ids] = 0.0
        self._prev[ids] = 0.0
        self._row_base[ids] = base
        self._vrow[ids] = base + starts
        self._vrow10[ids] = (base + starts) * GELATO_LEVELS
        self._end_row[ids] = base + self._lengths[traces] - LOOKAHEAD
        self._download.assign(ids, traces)
        self._slot_end.assign(ids, traces)
        rows = (base + starts)[:, None] + self._ahead
        self.observer.restart(ids, self._sizes2[rows], self._ssim2[rows])

    def start_chunk(self) -> np.ndarray:
        return self._vrow - self._row_base

    # ------------------------------------------------------------------ step
    def step(self, a: np.ndarray, draws: Draws | None, first: np.ndarray):
        """One chunk for every copy; returns the agent rewards (a fresh array)."""
        self._download_chunk(a, draws)
        self._play(first)
        rt = self._reward(first)
        self._observe(rt)
        return rt

    def _download_chunk(self, a: np.ndarray, draws: Draws | None) -> None:
        idx, size, quality, delay, t1 = self._idx, self.size, self.quality, self.delay, self._t1
        np.add(self._vrow10, a, out=idx)
        self._sizes.take(idx, out=size, mode="clip")
        self._ssim.take(idx, out=quality, mode="clip")
        self._download.finish_time(self.tau, size, out=t1)
        np.subtract(t1, self.tau, out=delay)
        if draws is not None:
            noise = self._noise  # row 0: delay noise, row 1: buffer-cap noise
            draws.normal(noise)
            noise *= self._noise_std
            noise += 1.0
            np.maximum(noise, self._noise_low, out=noise)
            np.minimum(noise, self._noise_high, out=noise)
            delay *= self.delay_noise  # the noise does not move the trace position

    def _play(self, first: np.ndarray) -> None:
        """Stall and buffer; above the cap the network skips to the end of the slot."""
        delay, buf, stall, tau, t1 = self.delay, self.buffer, self.stall, self.tau, self._t1
        np.subtract(delay, buf, out=stall)
        np.maximum(stall, 0.0, out=stall)
        np.minimum(stall, MAX_STALL_S, out=stall)
        np.copyto(stall, 0.0, where=first)
        buf -= delay
        np.maximum(buf, 0.0, out=buf)
        buf += self.chunk_seconds
        cap = np.greater(buf, self.max_buffer, out=self._cap)
        np.copyto(tau, t1)
        if cap.any():
            np.copyto(tau, self._slot_end.end_after(t1, self._jump), where=cap)
            if self.train:
                np.multiply(self.buffer_noise, self.max_buffer, out=self._s1)
                np.copyto(buf, self._s1, where=cap)
            else:
                np.minimum(buf, self.max_buffer, out=buf)
        np.subtract(tau, t1, out=self.sleep)
        np.copyto(self._last_buffer, buf)

    def _reward(self, first: np.ndarray) -> np.ndarray:
        return gelato_reward(self.quality, self._prev, self.stall, first, self._weights,
                             self.raw, self.change, self._s1)

    def _observe(self, rt: np.ndarray) -> None:
        """The chunk's history row, the stalls and the new 5th look-ahead chunk."""
        np.subtract(self._vrow, self._row_base, out=self.chunk)
        self._vrow += 1
        self._vrow10 += GELATO_LEVELS
        np.add(self._vrow, LOOKAHEAD - 1, out=self._look_row)  # the new 5th chunk ahead
        ls, lq = self._look_sizes, self._look_ssim
        self._sizes2.take(self._look_row, axis=0, out=ls, mode="clip")
        self._ssim2.take(self._look_row, axis=0, out=lq, mode="clip")
        self.observer.push(self.quality, self.size, self.delay, self.buffer, rt, self.stall,
                           ls, lq)
        np.equal(self._vrow, self._end_row, out=self.terminated)

    def last_step(self) -> dict[str, np.ndarray]:
        return {
            "delay": self.delay.copy(), "stall": self.stall.copy(),
            "buffer": self._last_buffer.copy(), "sleep": self.sleep.copy(),
            "size": self.size.copy(), "quality": self.quality.copy(),
            "change": self.change.copy(), "reward": self.raw.copy(),
            "chunk": self.chunk.copy(), "delay_noise": self.delay_noise.copy(),
            "buffer_noise": self.buffer_noise.copy(),
        }


class _Pensieve(_Dynamics):
    """Pensieve's ``sim/env.py`` setting (see the module docstring)."""

    n_levels = len(BITRATES_KBPS)

    def __init__(self, traces: TraceSet, n: int, train: bool, p: dict[str, Any]) -> None:
        super().__init__(n, PensieveObservation(n, p["n_chunks"]), train)
        self.p = p
        self.chunk_seconds = p["chunk_seconds"]
        self.n_chunks = self.max_len = p["n_chunks"]
        self.max_steps = None
        self.n_starts = traces.lengths.astype(np.int64)  # every forward slot
        self._tables = PayloadTables.shared(traces, payload_scale=PENSIEVE_BYTES_PER_MBIT)
        self._download = BatchedDownload(self._tables, n)
        video = pensieve_video_table(self.n_chunks)
        self._sizes = np.ascontiguousarray(video, dtype=np.float64).reshape(-1)  # bytes
        self._sizes_mb = (video / 1e6).astype(np.float32)  # (n_chunks + 1, 6)
        self._kbps = np.asarray(BITRATES_KBPS, dtype=np.float64)
        self._chunk_ms = self.chunk_seconds * 1000.0
        self._cap_ms = p["buffer_cap_s"] * 1000.0
        high = np.full((6, PENSIEVE_HISTORY), np.inf, dtype=np.float32)  # throughput, delay
        high[[0, 5]] = 1.0
        high[1] = p["buffer_cap_s"] / BUFFER_NORM_S  # the buffer after the sleep
        high[4] = VIDEO_SIZES.max() / 1e6
        self.space = spaces.Box(np.zeros(self.obs_dim, np.float32), high.reshape(-1),
                                dtype=np.float32)
        f = lambda: np.zeros(n)  # noqa: E731
        self.tau, self._buf_ms, self._delay_ms, self._sleep_ms = f(), f(), f(), f()
        self._rebuf_ms, self._kbps_now, self._prev_kbps, self._last_buf_ms = f(), f(), f(), f()
        self.delay_noise = np.ones(n)
        self._counter = np.zeros(n, dtype=np.int64)
        self._counter6 = np.zeros(n, dtype=np.int64)
        self._next = np.zeros((n, self.n_levels), dtype=np.float32)

    def restart(self, ids: np.ndarray, traces: np.ndarray, starts: np.ndarray) -> None:
        self.tau[ids] = self._tables.local_time[traces, starts]
        self._buf_ms[ids] = 0.0
        self._prev_kbps[ids] = BITRATES_KBPS[DEFAULT_QUALITY]
        self._counter[ids] = 0
        self._counter6[ids] = 0
        self._download.assign(ids, traces)
        self.observer.restart(ids, self._sizes_mb[0])

    def start_chunk(self) -> np.ndarray:
        return self._counter.copy()

    def step(self, a: np.ndarray, draws: Draws | None, first: np.ndarray):
        """One chunk for every copy (Pensieve's ``get_video_chunk``); returns the rewards."""
        self._download_chunk(a, draws)
        self._play()
        rt = self._reward(a)
        self._observe()
        return rt

    def _download_chunk(self, a: np.ndarray, draws: Draws | None) -> None:
        size, t1, delay = self.size, self._t1, self._delay_ms
        np.add(self._counter6, a, out=self._idx)
        self._sizes.take(self._idx, out=size, mode="clip")
        self._download.finish_time(self.tau, size, out=t1)
        np.subtract(t1, self.tau, out=delay)
        delay *= 1000.0
        delay += self.p["link_rtt_ms"]
        if draws is not None:
            noise = self.delay_noise
            draws.random(noise)
            noise *= PENSIEVE_NOISE[1] - PENSIEVE_NOISE[0]
            noise += PENSIEVE_NOISE[0]
            delay *= noise  # RTT and noise do not move the trace position

    def _play(self) -> None:
        """Rebuffer, buffer and the sleep above the cap (ms, Pensieve's arithmetic)."""
        delay, buf, rebuf, sleep = self._delay_ms, self._buf_ms, self._rebuf_ms, self._sleep_ms
        np.subtract(delay, buf, out=rebuf)
        np.maximum(rebuf, 0.0, out=rebuf)
        buf -= delay
        np.maximum(buf, 0.0, out=buf)
        buf += self._chunk_ms
        np.subtract(buf, self._cap_ms, out=sleep)
        np.divide(sleep, DRAIN_QUANTUM_MS, out=sleep)
        np.ceil(sleep, out=sleep)
        np.maximum(sleep, 0.0, out=sleep)  # no sleep unless buffer > cap
        sleep *= DRAIN_QUANTUM_MS
        buf -= sleep
        np.copyto(self._last_buf_ms, buf)  # kept when an autoreset clears the state
        np.divide(sleep, 1000.0, out=self._s1)
        np.add(self._t1, self._s1, out=self.tau)  # the full sleep, across slots and wraps
        np.divide(rebuf, 1000.0, out=self.stall)

    def _reward(self, a: np.ndarray) -> np.ndarray:
        p, kbps, raw, change, s1 = self.p, self._kbps_now, self.raw, self.change, self._s1
        self._kbps.take(a, out=kbps, mode="clip")
        np.divide(kbps, 1000.0, out=self.quality)
        np.subtract(kbps, self._prev_kbps, out=change)
        np.abs(change, out=change)
        change /= 1000.0
        np.copyto(self._prev_kbps, kbps)
        np.multiply(self.stall, p["rebuf_penalty"], out=s1)
        np.subtract(self.quality, s1, out=raw)
        np.multiply(change, p["smooth_penalty"], out=s1)
        raw -= s1
        return raw.copy()

    def _observe(self) -> None:
        np.copyto(self.chunk, self._counter)
        self._counter += 1
        self._counter6 += self.n_levels
        self._sizes_mb.take(self._counter, axis=0, out=self._next, mode="clip")
        self.observer.push(self._kbps_now, self._buf_ms, self.size, self._delay_ms,
                           self._counter, self._next)
        np.equal(self._counter, self.n_chunks, out=self.terminated)

    def last_step(self) -> dict[str, np.ndarray]:
        return {
            "delay": self._delay_ms / 1000.0, "stall": self.stall.copy(),
            "buffer": self._last_buf_ms / 1000.0, "sleep": self._sleep_ms / 1000.0,
            "size": self.size.copy(), "quality": self.quality.copy(),
            "change": self.change.copy(), "reward": self.raw.copy(),
            "chunk": self.chunk.copy(), "delay_noise": self.delay_noise.copy(),
            "buffer_noise": np.ones(self.n),
        }


# ---------------------------------------------------------------------------- vector env
class AbrVecEnv(TraceVecEnv):
    """N ABR copies in lockstep; Gymnasium vector API with same-step autoreset.

    Args:
        traces: the TraceSet to replay (``time`` / ``bandwidth`` in Mbit/s; for gelato also
            ``chunks["chunk_sizes"]`` (MB) and ``chunks["ssim_db"]``, shape (n, L, 10)).
        n_envs: number of copies; defaults to ``len(traces)`` in test mode (required in train
            mode).
        sampler: picks each episode's trace; defaults to ``UniformSampler`` seeded from
            ``seed`` (train) or ``SequentialSampler`` (test).
        mode: ``"train"`` (random starts, noise, sampler updates) or ``"test"`` (start 0, no
            noise, no updates).
        seed: int, ``np.random.SeedSequence`` or None (see the module docstring).
        variant: ``"gelato"`` (Puffer traces) or ``"pensieve"`` (bandwidth-only traces).
        **params: the variant's parameters, ``GELATO_DEFAULTS`` or ``PENSIEVE_DEFAULTS``.

    Attributes:
        obs_layout: the observation's 2-D shape ((10, 26) or (6, 8)); observations are its
            row-major flattening, so ``obs.reshape(-1, *obs_layout)`` recovers the matrix.
        n_levels: number of actions. params: the validated parameters.
    """

    def __init__(
        self,
        traces: TraceSet,
        n_envs: int | None = None,
        sampler: TraceSampler | None = None,
        *,
        mode: str = "train",
        seed: int | np.random.SeedSequence | None = None,
        variant: str = "gelato",
        **params: Any,
    ) -> None:
        self._setup(traces, n_envs, sampler, mode)
        choice("variant", variant, VARIANTS)
        for key in ("time", "bandwidth"):
            if key not in traces.series:
                raise ValueError(f"TraceSet {traces.name!r} has no series[{key!r}]; the ABR "
                                 "simulator replays time (s) and bandwidth (Mbit/s)")
        self.variant = variant
        self.params = _params(variant, self._train, params)
        dynamics = _Gelato if variant == "gelato" else _Pensieve
        self._sim = dynamics(traces, self.num_envs, self._train, self.params)

        self.n_levels = self._sim.n_levels
        self.obs_layout = self._sim.obs_layout
        self.obs_dim = self._sim.obs_dim
        self._set_spaces(self._sim.space, spaces.Discrete(self.n_levels))
        self._allocate()
        self._seed(seed)

    # ------------------------------------------------------------------ properties
    @property
    def trace_time(self) -> np.ndarray:
        """(N,) unwrapped trace time of each copy, seconds since its trace's t=0 (a copy)."""
        return self._sim.tau.copy()

    @property
    def chunk_index(self) -> np.ndarray:
        """(N,) index of the chunk each copy downloads next (gelato: the row of its trace's
        video; pensieve: the chunk counter, 0 at an episode's start). A copy."""
        return self._sim.start_chunk()

    @property
    def payload_tables(self) -> PayloadTables:
        """The precomputed download tables: read-only, one per TraceSet and payload scale,
        shared by every env over that TraceSet (``PayloadTables.shared``)."""
        return self._sim.tables

    @property
    def max_steps(self) -> int | None:
        """The training step limit (gelato; None: episodes end only at the video's end)."""
        return self._sim.max_steps

    def last_step(self) -> dict[str, np.ndarray]:
        """Per-copy components of the last step (copies, seconds): ``delay`` (download time,
        noise included; pensieve: RTT too), ``stall``, ``buffer`` (after the cap), ``sleep``
        (trace time skipped or slept), ``size`` (MB for gelato, bytes for pensieve),
        ``quality``, ``change``, raw ``reward``, ``trace``, ``chunk`` (video index
        downloaded), ``delay_noise`` and ``buffer_noise`` (the factors applied; 1 in test
        mode)."""
        out = self._sim.last_step()
        out["trace"] = self._last_trace.copy()
        return out

    # ------------------------------------------------------------------ setup
    def _allocate(self) -> None:
        n = self.num_envs
        # Episode sums (return, return_transformed, quality, stall, change, first_return)
        # and counters (length, trace): a restart and the report are a few fancy ops.
        self._fstate = np.zeros((6, n))
        (self._ret, self._ret_t, self._qsum, self._ssum, self._csum,
         self._first_ret) = self._fstate
        self._istate = np.zeros((2, n), dtype=np.int64)
        self._eplen, self._trace = self._istate
        self._first = np.zeros(n, dtype=bool)  # the next step is an episode's first
        self._last_trace = np.zeros(n, dtype=np.int64)
        width = self._sim.max_len
        self._rewbuf = np.zeros((n, width)) if self._train else None
        self._rewflat = None if self._rewbuf is None else self._rewbuf.reshape(-1)
        self._rew_rows = np.arange(n, dtype=np.int64) * width
        self._idx = np.zeros(n, dtype=np.int64)
        self._trunc = np.zeros(n, dtype=bool)
        self._done = np.zeros(n, dtype=bool)
        self._same_starts = bool(np.all(self._sim.n_starts == self._sim.n_starts[0]))

    # ------------------------------------------------------------------ gym API
    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every copy; finished copies are reset in the same call (see the module doc)."""
        a = self._check_step(actions, self.n_levels, "encoding")
        sim = self._sim
        rt = sim.step(a, self._draws if self._train else None, self._first)
        self._account(sim, rt)
        terminated = sim.terminated.copy()
        truncated = self._trunc
        if sim.max_steps is not None:
            np.equal(self._eplen, sim.max_steps, out=truncated)
            np.greater(truncated, terminated, out=truncated)  # and not terminated
        done = np.logical_or(terminated, truncated, out=self._done)
        truncated = truncated.copy()
        infos: dict[str, Any] = {}
        if done.any():
            self._finish(done, infos)
        infos["trace"] = self._trace.copy()
        infos["_trace"] = np.ones(self.num_envs, dtype=bool)
        return sim.obs.copy(), rt, terminated, truncated, infos

    def _account(self, sim: _Dynamics, rt: np.ndarray) -> None:
        """Episode sums, the first chunk's QoE and the reward record for the sampler."""
        self._ret += sim.raw
        self._ret_t += rt
        self._qsum += sim.quality
        self._ssum += sim.stall
        self._csum += sim.change
        np.copyto(self._first_ret, sim.raw, where=self._first)
        self._first.fill(False)
        np.copyto(self._last_trace, self._trace)
        if self._train:
            np.add(self._rew_rows, self._eplen, out=self._idx)
            self._rewflat.put(self._idx, rt, mode="clip")
        self._eplen += 1

    def _observation(self) -> np.ndarray:
        return self._sim.obs

    def _episode_fields(self, mask: np.ndarray) -> dict[str, np.ndarray]:
        ret, ret_t, quality, stall, change, first = np.where(mask, self._fstate, 0.0)
        length, trace = np.where(mask, self._istate, 0)
        return {
            "return": ret, "return_transformed": ret_t, "length": length, "trace": trace,
            "quality": quality, "stall": stall, "change": change, "first_return": first,
            "video_seconds": length * self._sim.chunk_seconds,
        }

    def _restart(self, ids: np.ndarray) -> None:
        """New episodes for copies ``ids``: draw traces (and starts), zero the sums."""
        new, start = self._draw(ids, self._sim.n_starts, self._same_starts)
        self._fstate[:, ids] = 0.0
        self._eplen[ids] = 0
        self._trace[ids] = new
        self._first[ids] = True
        self._sim.restart(ids, new, start)

    def __repr__(self) -> str:
        return (f"AbrVecEnv({self._traces.name!r}, variant={self.variant}, "
                f"num_envs={self.num_envs}, mode={self.mode}, "
                f"sampler={type(self.sampler).__name__})")


class AbrEnv(SingleCopyEnv):
    """Single-copy ABR environment (an ``AbrVecEnv`` with one copy and no autoreset).

    Takes the same arguments as :class:`AbrVecEnv` except ``n_envs``. ``step`` returns the
    agent reward and Gymnasium's ``terminated`` / ``truncated``; ``info`` holds the step's
    ``last_step()`` components as floats, and on the final step an ``episode`` dict. After an
    episode ends call ``reset()``. In test mode with the default sampler, successive
    ``reset()`` calls play traces 0, 1, 2, ... (``reset(seed=...)`` starts again at 0).
    """

    def __init__(self, traces: TraceSet, sampler: TraceSampler | None = None, **kwargs: Any):
        if "n_envs" in kwargs:
            raise TypeError("AbrEnv is a single copy; use AbrVecEnv for n_envs")
        super().__init__(AbrVecEnv(traces, 1, sampler, **kwargs))

    @property
    def obs_layout(self) -> tuple[int, int]:
        return self.vec.obs_layout
