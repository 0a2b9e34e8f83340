"""Classic ABR controllers as batched policies, evaluated exactly like learned ones.

Every controller maps a batch of flat float32 observations ``(N, obs_dim)`` of
:class:`plume.envs.abr.sim.AbrVecEnv` to ``(N,)`` int64 actions. It keeps no per-copy state
between calls: everything a rule needs (buffer, throughput history, past predictions, the
previous quality, the next chunks) is rebuilt from the observation, so the evaluation loop's
same-step autoreset needs no hook. A copy whose newest history row is empty (no chunk
downloaded yet) is at an episode start; rules that need a throughput estimate then pick the
lowest quality.

Rules (sources: BBA, Huang et al. SIGCOMM 2014; BOLA, Spiteri et al. INFOCOM 2016; RobustMPC,
Yin et al. SIGCOMM 2015; sagar-pa/plume's ``puffer_abr/classic_policies.py``; StanfordSNR/puffer
``src/abr/{linear_bba,bola_basic}.cc``, hongzimao/pensieve ``test/{bb,mpc}.py``):

========================  ==============================================================
``always_lowest/highest``  action 0 / the last action (the reference's "optimistic" = 9)
``bba``          gelato: Puffer's linear BBA, reservoirs 0.2 / 0.9 of the 15 s buffer (3 /
                 13.5 s): size cap grows linearly from the next chunk's smallest to its largest
                 size; the highest-SSIM encoding within the cap. pensieve: ``bb.py``, reservoir
                 5 s, cushion 10 s, level ``int(5 (buffer - 5) / 10)``.
``rate_based``   harmonic mean of the last 5 throughputs; gelato: the highest-SSIM encoding
                 whose next chunk downloads within one chunk length, pensieve: the highest
                 bitrate <= the estimate; else the lowest.
``bola_v1/v2``   gelato: Puffer's BOLA-BASIC, utility SSIM dB (v1) or SSIM index (v2),
                 bounds (3, 15) s, v2 falls back to the max-utility encoding when every score
                 is negative. pensieve: BOLA-BASIC with u = ln(S/S_1), (10, 30) s; v1 takes the
                 argmax even when every score is negative, v2 then takes the top utility.
``robust_mpc``   throughput = harmonic mean of the last 5 / (1 + max relative error of the
                 last 5 predictions); maximise the env's own QoE over 5 chunks: gelato by a
                 dynamic program over a <= 0.1 s buffer grid, pensieve by all 6^h sequences.
``random``       uniform actions from a seeded generator (``seed`` parameter, default 0).
========================  ==============================================================

Fixes against Plume's ``classic_policies.py`` (sagar-pa/plume, ``puffer_abr``), each on purpose:

* **BOLA units.** The reference feeds SSIM *dB* to a utility that expects the SSIM *index*, so
  v1 computes NaN objectives and both versions always pick encoding 0. Here v1's utility is
  the dB value itself and v2's is ``1 - 10^(-dB/10)``; ``gamma``/``V`` are derived from the
  current chunk's two smallest encodings and utilities (Puffer's static ladder is a fleet
  average; the look-ahead gives the real chunk).
* **Stale MPC ladder.** The reference recovers the previous action from a size ladder frozen
  at the first chunk it ever saw (and a policy object reused across episodes). Here the
  previous chunk's quality is read from the newest history row (SSIM dB / bitrate).
* **MPC chunk length and objective.** The reference's MPC (CausalSim's ``mpc.pyx``) adds 4 s
  per chunk, plans 4 chunks and scores Pensieve bitrates. Here the buffer grows by the env's
  ``chunk_seconds`` (2.002 s), is capped at ``max_buffer`` (15 s), stalls are clipped at 20 s
  per chunk like the env's, and the score is the env's reward with its weights, over 5
  chunks.
* **Monotone-ladder assumptions.** Linear BBA and RB pick the highest-*SSIM* encoding among
  those allowed (the reference's argmax over a masked array assumes SSIM grows with the
  index); "lowest" / "highest" in a rule mean the smallest / largest next chunk (Puffer's
  ``min_idx``/``max_idx``).

Pensieve's ``mpc.py`` differs from the pensieve ``robust_mpc`` here in one input: it reads the
*real* sizes of the next 5 chunks from its video tables (one chunk ahead of the one it is about
to fetch, an off-by-one of that script); the observation only holds the next chunk's sizes, so
every chunk of the horizon is planned with them. Its past predictions are recomputed from the
8-sample throughput row, so the oldest two of the five errors use 3 and 4 samples instead of 5
(the gelato history of 10 rows makes its recomputation exact), and they start afresh with each
episode (``mpc.py`` keeps its error list across videos).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from plume.envs.abr.sim import (
    BITRATES_KBPS,
    BUFFER_NORM_S,
    DELAY_NORM_S,
    GELATO_DEFAULTS,
    GELATO_LEVELS,
    LOOKAHEAD,
    MAX_STALL_S,
    PENSIEVE_DEFAULTS,
    PENSIEVE_HISTORY,
    SIZE_NORM_MB,
    SSIM_NORM_DB,
    VARIANTS,
)

__all__ = [
    "CONTROLLERS",
    "AbrObs",
    "AbrSetting",
    "Controller",
    "controller_names",
    "harmonic_mean",
    "make_controller",
    "parse_obs",
    "robust_throughput",
]

WINDOW = 5
"""Past throughputs in every estimate (RB, RobustMPC; Pensieve's ``mpc.py``)."""
HORIZON = 5
"""RobustMPC look-ahead (Pensieve's MPC_FUTURE_CHUNK_COUNT, Fugu's 5)."""
BUFFER_TOL_S = 1e-5
"""The buffer comes back from a float32 observation (relative error ~6e-8); thresholds treat
a buffer within this many seconds above a bound as on it, so 7.0 s is not read as 6.99999."""
GELATO_RESERVOIRS = (0.2, 0.9)
"""Puffer linear BBA's lower / upper reservoir as fractions of the maximum buffer."""
PUFFER_BOLA_MIN_BUF_S = 3.0
"""Puffer BOLA-BASIC's lower buffer bound (its upper bound is the maximum buffer, 15 s)."""
PENSIEVE_BBA = (5.0, 10.0)
"""``bb.py``'s RESEVOIR and CUSHION (s)."""
PENSIEVE_BOLA = (10.0, 30.0)
"""(Q_min, Q_target) in seconds for 4 s chunks (dash.js-style BOLA-BASIC)."""
MPC_GRID_S = 0.1
"""Largest buffer step of the gelato MPC's dynamic program."""


# ---------------------------------------------------------------------------- setting
@dataclass(frozen=True)
class AbrSetting:
    """What the controllers need of an env variant, in one shape for both variants.

    ``quality_weight`` / ``rebuf_weight`` / ``change_weight`` weigh the env's reward terms
    (gelato: SSIM dB, stall s, |delta SSIM dB|; pensieve: Mbit/s, rebuffer s, |delta Mbit/s|);
    ``max_stall`` is the env's per-chunk stall clip (gelato 20 s, pensieve none).
    """

    variant: str
    n_levels: int
    chunk_seconds: float
    max_buffer: float
    history_len: int
    quality_weight: float
    rebuf_weight: float
    change_weight: float
    max_stall: float
    n_chunks: int
    bitrates_kbps: tuple[float, ...] = ()

    @property
    def obs_layout(self) -> tuple[int, int]:
        return ((self.history_len, 2 * GELATO_LEVELS + 6) if self.variant == "gelato"
                else (6, PENSIEVE_HISTORY))

    @property
    def obs_dim(self) -> int:
        return self.obs_layout[0] * self.obs_layout[1]

    @classmethod
    def of(cls, variant: str, **params: Any) -> "AbrSetting":
        """The setting of ``variant`` with the env's parameters (``AbrVecEnv``'s keyword
        arguments; those that do not concern a controller, e.g. ``max_steps``, are accepted
        and ignored). An unknown key is refused, naming the valid ones."""
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
        defaults = GELATO_DEFAULTS if variant == "gelato" else PENSIEVE_DEFAULTS
        unknown = sorted(set(params) - set(defaults))
        if unknown:
            raise TypeError(f"unknown parameter(s) {', '.join(unknown)} for variant="
                            f"{variant!r}; valid: {', '.join(defaults)}")
        p = {**defaults, **params}
        if variant == "gelato":
            return cls(variant, GELATO_LEVELS, float(p["chunk_seconds"]),
                       float(p["max_buffer"]), int(p["history_len"]), float(p["quality_weight"]),
                       float(p["rebuf_weight"]), float(p["change_weight"]), MAX_STALL_S,
                       0)
        return cls(variant, len(BITRATES_KBPS), float(p["chunk_seconds"]),
                   float(p["buffer_cap_s"]), PENSIEVE_HISTORY, 1.0, float(p["rebuf_penalty"]),
                   float(p["smooth_penalty"]), math.inf, int(p["n_chunks"]),
                   tuple(float(b) for b in BITRATES_KBPS))


# ---------------------------------------------------------------------------- observation
@dataclass(frozen=True)
class AbrObs:
    """One batch of observations in physical units (float64).

    Attributes:
        buffer: (N,) seconds of video buffered after the last step.
        throughput: (N, H) MB/s of past chunks, oldest first, 0 where there is none.
        sizes: (N, K, M) MB of the next K chunks at the M levels (K = 5 gelato, 1 pensieve).
        quality: (N, K, M) their quality (SSIM dB; pensieve: Mbit/s).
        lookahead: (N, K) whether each look-ahead row is present.
        prev_quality: (N,) quality of the last chunk played (SSIM dB; pensieve: Mbit/s).
        prev_level: (N,) pensieve: the last bitrate level (-1 for gelato).
        start: (N,) no chunk downloaded yet in this episode.
        chunks_left: (N,) chunks still to download, the next one included (pensieve only;
            gelato: the look-ahead rows present).
    """

    buffer: np.ndarray
    throughput: np.ndarray
    sizes: np.ndarray
    quality: np.ndarray
    lookahead: np.ndarray
    prev_quality: np.ndarray
    prev_level: np.ndarray
    start: np.ndarray
    chunks_left: np.ndarray


def parse_obs(obs: np.ndarray, setting: AbrSetting) -> AbrObs:
    """Un-normalise a batch of flat observations (``AbrVecEnv``'s layout, see sim.py)."""
    obs = np.asarray(obs)
    if obs.ndim == 1:
        obs = obs[None, :]
    if obs.ndim != 2 or obs.shape[1] != setting.obs_dim:
        raise ValueError(f"{setting.variant} observations must have shape (N, "
                         f"{setting.obs_dim}), got {obs.shape}")
    m = obs.reshape(len(obs), *setting.obs_layout).astype(np.float64)
    return _parse_gelato(m, setting) if setting.variant == "gelato" else _parse_pensieve(m, setting)


def _parse_gelato(m: np.ndarray, s: AbrSetting) -> AbrObs:
    """Rows = the last steps (cols 0-4: SSIM/25, MB/3, delay/20, buffer/15, reward), rows 0-4 x
    cols 6-15 / 16-25 = the next 5 chunks' sizes / 3 and SSIM / 25."""
    size, delay = m[:, :, 1] * SIZE_NORM_MB, m[:, :, 2] * DELAY_NORM_S
    thr = np.divide(size, delay, out=np.zeros_like(size), where=delay > 0)
    sizes = m[:, :LOOKAHEAD, 6:6 + GELATO_LEVELS] * SIZE_NORM_MB
    lookahead = sizes.max(axis=2) > 0
    n = len(m)
    return AbrObs(m[:, -1, 3] * s.max_buffer, thr, sizes,
                  m[:, :LOOKAHEAD, 6 + GELATO_LEVELS:] * SSIM_NORM_DB, lookahead,
                  m[:, -1, 0] * SSIM_NORM_DB, np.full(n, -1), m[:, -1, 1] <= 0,
                  lookahead.sum(axis=1))


def _parse_pensieve(m: np.ndarray, s: AbrSetting) -> AbrObs:
    """Rows (newest in column 7): br/4300, buffer/10, MB/s, delay/10, next sizes MB, left/48."""
    kbps = np.asarray(s.bitrates_kbps)
    n = len(m)
    start = m[:, 2, -1] <= 0
    prev_level = np.abs(m[:, 0, -1:] * kbps[-1] - kbps[None, :]).argmin(axis=1)
    left = np.where(start, s.n_chunks, np.rint(m[:, 5, -1] * s.n_chunks)).astype(np.int64)
    return AbrObs(m[:, 1, -1] * BUFFER_NORM_S, m[:, 2, :], m[:, None, 4, :s.n_levels],
                  np.broadcast_to(kbps / 1000.0, (n, 1, s.n_levels)), np.ones((n, 1), bool),
                  kbps[prev_level] / 1000.0, prev_level, start, left)


# ---------------------------------------------------------------------------- throughput
def _window_harmonic(thr: np.ndarray, window: int) -> np.ndarray:
    """(N, H + 1): harmonic mean of the ``window`` samples before each column (column H = the
    next chunk), zeros skipped; 0 where the window has no sample."""
    n = len(thr)
    x = np.concatenate([np.zeros((n, window)), thr], axis=1)
    valid = x > 0
    inv = np.divide(1.0, x, out=np.zeros_like(x), where=valid)
    sums = np.zeros((2, n, x.shape[1] + 1))
    np.cumsum(inv, axis=1, out=sums[0, :, 1:])
    np.cumsum(valid, axis=1, out=sums[1, :, 1:])
    win = sums[:, :, window:] - sums[:, :, :-window]
    return np.divide(win[1], win[0], out=np.zeros_like(win[0]), where=win[1] > 0)


def harmonic_mean(thr: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """(N,) harmonic mean of the last ``window`` throughputs, zero-padded samples skipped
    (Pensieve's ``mpc.py`` strips the leading zeros); 0 where there is none."""
    return _window_harmonic(thr, window)[:, -1]


def robust_throughput(thr: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """(N,) RobustMPC's prediction: harmonic mean / (1 + the largest relative error
    |prediction - actual| / actual of the last ``window`` predictions).

    Each past prediction is recomputed as the harmonic mean of the ``window`` samples before
    it (Pensieve's ``mpc.py`` keeps them in a list; a step with no earlier sample has error 0,
    as its first step). 0 where there is no sample yet."""
    hm = _window_harmonic(thr, window)
    past, actual = hm[:, -1 - window:-1], thr[:, -window:]
    ok = (past > 0) & (actual > 0)
    err = np.divide(np.abs(past - actual), actual, out=np.zeros_like(actual), where=ok)
    return hm[:, -1] / (1.0 + err.max(axis=1))


# ---------------------------------------------------------------------------- helpers
def _best_within(allowed: np.ndarray, quality: np.ndarray) -> np.ndarray:
    """(N,) the highest-quality level among ``allowed`` (N, M), the first on ties (Puffer's
    strict ``>`` scan). A row with nothing allowed gets 0; callers give their fallback."""
    return np.where(allowed, quality, -np.inf).argmax(axis=1)


TIE_DECIMALS = 9
"""MPC scores are rounded to this many decimals before the argmax, so that plans tied in exact
arithmetic tie in floats too (their sums are formed in different orders)."""


def _argmax_last(x: np.ndarray) -> np.ndarray:
    """Index of the last maximum along the last axis among scores equal to ``TIE_DECIMALS``
    decimals (Pensieve's ``>=`` scan keeps the last tied sequence)."""
    x = np.round(x, TIE_DECIMALS)
    return x.shape[-1] - 1 - x[..., ::-1].argmax(axis=-1)


class _Workspace:
    """Named scratch arrays reused across calls (grown when too small): the planners' arrays
    are megabytes, and fresh ones cost a page fault per page on every call (about half of
    the planning time). Scratch only, never state: a call overwrites what it reads. Not for
    concurrent calls from several threads."""

    def __init__(self) -> None:
        self._flat: dict[str, np.ndarray] = {}

    def get(self, name: str, shape: tuple[int, ...], dtype=np.float64) -> np.ndarray:
        size = math.prod(shape)
        flat = self._flat.get(name)
        if flat is None or flat.size < size or flat.dtype != dtype:
            flat = self._flat[name] = np.empty(max(size, 1), dtype)
        return flat[:size].reshape(shape)


# ---------------------------------------------------------------------------- base
class Controller(ABC):
    """A classic ABR rule as a batched policy: ``act(obs) -> (N,) int64`` actions.

    Subclasses implement :meth:`decide` on the parsed observation. ``name`` is the registry
    name, ``variant`` the env setting (``"gelato"`` or ``"pensieve"``)."""

    name = "controller"

    def __init__(self, setting: AbrSetting) -> None:
        self.setting = setting
        self.variant = setting.variant

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Actions for a batch ``(N, obs_dim)`` (a single ``(obs_dim,)`` row gives ``(1,)``)."""
        return np.asarray(self.decide(parse_obs(obs, self.setting)), dtype=np.int64)

    __call__ = act

    @abstractmethod
    def decide(self, o: AbrObs) -> np.ndarray:
        """The (N,) actions for a parsed batch of observations."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, variant={self.variant!r})"

    def _lowest(self, o: AbrObs) -> np.ndarray:
        """The smallest next chunk (level 0 on an ordered ladder)."""
        return o.sizes[:, 0].argmin(axis=1)


class Constant(Controller):
    """Always the same action: ``always_lowest`` (0) and ``always_highest`` (the last)."""

    def __init__(self, setting: AbrSetting, level: int, name: str) -> None:
        super().__init__(setting)
        self.level, self.name = level, name

    def decide(self, o: AbrObs) -> np.ndarray:
        return np.full(len(o.buffer), self.level, dtype=np.int64)


class RandomController(Controller):
    """Uniform random actions from ``numpy.random.default_rng(seed)`` (no global RNG)."""

    name = "random"

    def __init__(self, setting: AbrSetting, seed: int = 0) -> None:
        super().__init__(setting)
        self.rng = np.random.default_rng(seed)

    def decide(self, o: AbrObs) -> np.ndarray:
        return self.rng.integers(self.setting.n_levels, size=len(o.buffer))


# ---------------------------------------------------------------------------- BBA
class BufferBased(Controller):
    """Buffer-based rate selection (Huang et al., SIGCOMM 2014).

    gelato: Puffer's ``linear_bba.cc``: at or above the upper reservoir (0.9 x 15 = 13.5 s)
    the largest next chunk, at or below the lower (0.2 x 15 = 3 s) the smallest; in between
    the highest-SSIM encoding whose size is within ``s_min + (s_max - s_min)(buf - 3)/10.5``.
    pensieve: ``bb.py``: below the reservoir (5 s) level 0, from reservoir + cushion (15 s)
    the top level, else ``int(5 (buf - 5) / 10)``."""

    name = "bba"

    def decide(self, o: AbrObs) -> np.ndarray:
        buf = o.buffer + BUFFER_TOL_S
        if self.variant == "pensieve":
            reservoir, cushion = PENSIEVE_BBA
            top = self.setting.n_levels - 1
            return np.clip(np.floor(top * (buf - reservoir) / cushion), 0, top).astype(np.int64)
        lower, upper = (f * self.setting.max_buffer for f in GELATO_RESERVOIRS)
        sizes = o.sizes[:, 0]
        s_min, s_max = sizes.min(axis=1), sizes.max(axis=1)
        cap = s_min + (s_max - s_min) * np.clip((buf - lower) / (upper - lower), 0.0, 1.0)
        pick = _best_within(sizes <= cap[:, None], o.quality[:, 0])
        pick = np.where(o.buffer <= lower, sizes.argmin(axis=1), pick)
        return np.where(buf >= upper, sizes.argmax(axis=1), pick)


# ---------------------------------------------------------------------------- RB
class RateBased(Controller):
    """Rate-based selection on the harmonic mean of the last 5 throughputs.
    gelato: the highest-SSIM encoding whose next chunk downloads within one chunk
    length at that rate (sustainable); pensieve: the highest bitrate <= the estimate. With no
    sustainable level, or no sample yet, the lowest."""

    name = "rate_based"

    def decide(self, o: AbrObs) -> np.ndarray:
        c = harmonic_mean(o.throughput)
        sizes = o.sizes[:, 0]
        if self.variant == "pensieve":
            ok = np.asarray(self.setting.bitrates_kbps)[None, :] <= c[:, None] * 8000.0
        else:
            ok = sizes <= c[:, None] * self.setting.chunk_seconds
        pick = _best_within(ok, o.quality[:, 0])
        return np.where(ok.any(axis=1), pick, self._lowest(o))


# ---------------------------------------------------------------------------- BOLA
class Bola(Controller):
    """BOLA-BASIC (Spiteri et al., INFOCOM 2016): argmax_m (V (u_m + gamma) - Q) / S_m.

    gelato (Puffer's ``bola_basic.cc``): u = SSIM dB (v1) or SSIM index 1 - 10^(-dB/10) (v2);
    gamma and V put the tie between the two smallest encodings at 3 s and the zero of the top
    utility's score at the 15 s maximum (v1: the chunk's best utility, v2: 1, the largest
    possible), from the current chunk's sizes and utilities. pensieve (dash.js-style):
    u = ln(S_m / S_1), gamma = 1 + u_M / (Q_T / Q_min - 1), V = Q_min / (gamma - 1) with
    (Q_min, Q_T) = (10, 30) s. BOLA pauses when every score is negative; there are no pauses
    here, so v2 then takes the highest-utility level (Puffer v2) and v1 keeps the argmax
    (Puffer v1; the buffer cap does the pausing)."""

    def __init__(self, setting: AbrSetting, version: int) -> None:
        super().__init__(setting)
        self.version = version
        self.name = f"bola_v{version}"

    def decide(self, o: AbrObs) -> np.ndarray:
        sizes = o.sizes[:, 0]
        if self.variant == "gelato":
            u, score, ok = self._puffer_scores(o.buffer, sizes, o.quality[:, 0])
        else:
            u, score, ok = self._dash_scores(o.buffer, sizes)
        pick = score.argmax(axis=1)  # the first maximum, as max_element
        if self.version == 2:
            pick = np.where(score.max(axis=1) >= 0, pick, u.argmax(axis=1))
        return np.where(ok, pick, self._lowest(o))

    def _puffer_scores(self, buf, sizes, ssim_db):
        """Puffer's calculate_params (Vp, gp) per copy, then its objective (the 1/chunk
        length factors of both terms do not change the argmax or the sign)."""
        u = ssim_db if self.version == 1 else 1.0 - np.power(10.0, -ssim_db / 10.0)
        rows = np.arange(len(u))[:, None]
        two = np.argsort(sizes, axis=1, kind="stable")[:, :2]
        (s1, s2), (u1, u2) = sizes[rows, two].T, u[rows, two].T
        high = u.max(axis=1) if self.version == 1 else np.ones(len(u))
        lo, hi = PUFFER_BOLA_MIN_BUF_S, self.setting.max_buffer
        delta = s2 - s1
        with np.errstate(divide="ignore", invalid="ignore"):
            gp = (hi * (s2 * u1 - s1 * u2) - high * lo * delta) / ((lo - hi) * delta)
            vp = hi / (high + gp)
            score = (vp[:, None] * (u + gp[:, None]) - buf[:, None]) / sizes
        ok = (delta > 0) & np.isfinite(vp) & (vp > 0) & np.isfinite(score).all(axis=1)
        return u, np.where(ok[:, None], score, 0.0), ok

    def _dash_scores(self, buf, sizes):
        q_min, q_target = PENSIEVE_BOLA
        with np.errstate(divide="ignore", invalid="ignore"):
            u = np.log(sizes / sizes[:, :1])
            gamma = 1.0 + u.max(axis=1) / (q_target / q_min - 1.0)
            v = q_min / (gamma - 1.0)
            score = (v[:, None] * (u + gamma[:, None]) - buf[:, None]) / sizes
        ok = np.isfinite(v) & (v > 0) & np.isfinite(score).all(axis=1)
        return np.where(np.isfinite(u), u, 0.0), np.where(ok[:, None], score, 0.0), ok


# ---------------------------------------------------------------------------- RobustMPC
class RobustMpc(Controller):
    """RobustMPC (Yin et al., SIGCOMM 2015): plan the next chunks on a discounted throughput
    forecast (:func:`robust_throughput`) and play the first chunk of the best plan.

    The score is the env's own reward summed over the horizon (at most 5 chunks):
    ``qw * quality - rw * stall - cw * |quality change|``, with the buffer model
    ``stall = clip(d - b, 0, max_stall)``, ``b <- min(max(b - d, 0) + chunk, cap)`` and the
    download time ``d = size / forecast``. gelato plans the 5 look-ahead chunks with a dynamic
    program over the buffer (:class:`_GelatoPlanner`; 10^5 plans are too many); pensieve
    enumerates all 6^h plans, h = min(5, chunks left), exactly as ``mpc.py``
    (:class:`_PensievePlanner`). A copy with no throughput sample yet plays the lowest level.

    Cost: about 7 ms per call for N = 300 copies in either variant (one core, numpy; the
    gelato grid is (10 encodings, copies, 131 buffers) per look-ahead chunk). The planners
    reuse scratch arrays between calls, so one controller object must not be called from
    several threads at once."""

    name = "robust_mpc"

    def __init__(self, setting: AbrSetting, grid_s: float = MPC_GRID_S) -> None:
        super().__init__(setting)
        self.planner = (_GelatoPlanner(setting, grid_s) if setting.variant == "gelato"
                        else _PensievePlanner(setting))

    def decide(self, o: AbrObs) -> np.ndarray:
        c = robust_throughput(o.throughput)
        out = self._lowest(o)
        live = (c > 0) & ~o.start & o.lookahead[:, 0]
        if live.any():
            out[live] = self.planner.plan(o, c, live)
        return out


class _GelatoPlanner:
    """Backward dynamic program over the buffer for the Puffer setting (Fugu's MPC structure,
    finer grid).

    State after a step: the buffer b in [chunk, cap] (after any step it is at least one
    chunk) on a uniform grid whose step is at most ``grid_s`` (0.1 s) and whose ends are
    exactly ``chunk`` and ``cap``, so "drained to zero" (b' = chunk) and "full" (b' = cap)
    are grid points; values between points are interpolated linearly (the value is
    non-decreasing and 100-Lipschitz in the buffer). ``u[q, n, i]`` is the best value of the
    remaining chunks given encoding q on the previous chunk and the buffer grid[i] after it,
    computed backwards from the last look-ahead chunk to the third; the first two chunks are
    scored exactly from the real buffer (all 100 pairs) plus u at their exact end buffer.
    float32 (values are at most a few thousand; decisions compare tenths of a dB). Ties go
    to the lowest encoding. On random states the first encoding chosen starts a plan within
    1 dB of the best of all 10^5 (exhaustive search, continuous buffer); with a 0.02 s grid
    it is the exhaustive argmax (tests/test_controllers_abr.py).

    The switch term ``max_q (a_q + qw x_q - cw |x_q - y_p|)`` costs O(M) per state instead of
    O(M^2): with the encodings sorted by SSIM x, those at or above y_p contribute
    ``a_q + (qw - cw) x_q + cw y_p`` (a suffix maximum), those below ``a_q + (qw + cw) x_q -
    cw y_p`` (a prefix maximum). Arrays are (level, copy, grid): every slice is contiguous.
    """

    DTYPE = np.float32
    BLOCK = 150
    """Copies planned together: (10, 150, 131) float32 arrays (0.8 MB) stay in cache."""

    def __init__(self, s: AbrSetting, grid_s: float) -> None:
        self.s = s
        chunk, cap = s.chunk_seconds, max(s.max_buffer, s.chunk_seconds)
        self.cap = cap
        self.g = int(math.ceil((cap - chunk) / grid_s - 1e-9)) + 1
        self.step = (cap - chunk) / (self.g - 1) if self.g > 1 else 1.0
        self.grid = chunk + self.step * np.arange(self.g)
        self.grid32 = self.grid.astype(self.DTYPE)
        self.ws = _Workspace()

    def plan(self, o: AbrObs, c: np.ndarray, live: np.ndarray) -> np.ndarray:
        d = np.moveaxis(o.sizes[live], 0, -1) / c[live]  # (K, M, n) download times
        x = np.moveaxis(o.quality[live], 0, -1)  # (K, M, n) SSIM dB
        rows = o.lookahead[live].T  # (K, n)
        buf, prev = o.buffer[live], o.prev_quality[live]
        out = np.empty(len(buf), dtype=np.int64)
        for lo in range(0, len(buf), self.BLOCK):
            blk = slice(lo, lo + self.BLOCK)
            out[blk] = self._plan(np.ascontiguousarray(d[..., blk]),
                                  np.ascontiguousarray(x[..., blk]), rows[:, blk], buf[blk],
                                  prev[blk])
        return out

    def _plan(self, d, x, rows, buf, prev):
        u = None  # value of chunks k.. given chunk k-1's encoding and the buffer after it
        for k in range(d.shape[0] - 1, 1, -1):
            if u is None:
                a = self.ws.get("a", (*d[k].shape, self.g), self.DTYPE)
                a.fill(0.0)
            else:
                a = self._after(u, d[k])
            self._stall(a, d[k])
            u = self._switch(a, x[k], x[k - 1], "u" + "ab"[k % 2])
            if not rows[k].all():
                u[:, ~rows[k]] = 0.0
        return self._root(u, d, x, rows, buf, prev)

    def _stall(self, a: np.ndarray, d: np.ndarray) -> None:
        """a -= rw * clip(d - b, 0, max_stall), on the grid buffers below the largest d (the
        others cannot stall)."""
        top = min(self.g, int(math.ceil((d.max() - self.grid[0]) / self.step)))
        if top <= 0:
            return
        stall = self.ws.get("stall", (*d.shape, top), self.DTYPE)
        np.subtract(d.astype(self.DTYPE)[..., None], self.grid32[:top], out=stall)
        np.maximum(stall, 0.0, out=stall)
        if math.isfinite(self.s.max_stall):
            np.minimum(stall, self.s.max_stall, out=stall)
        stall *= self.s.rebuf_weight
        a[..., :top] -= stall

    def _after(self, u: np.ndarray, d: np.ndarray) -> np.ndarray:
        """(M, n, G): u[q, n] at the next buffer min(max(grid - d, 0) + chunk, cap), i.e. at
        grid position clip(i + (chunk - d) / step, 0, G - 1): one shifted window per row of
        an edge-padded copy, then linear interpolation."""
        g = self.g
        t = (self.s.chunk_seconds - d) / self.step
        ft = np.clip(np.floor(t), -g, g)
        w = (t - ft).astype(self.DTYPE)[..., None]
        ft = ft.astype(np.int64)
        left, right = max(0, -int(ft.min())), max(0, int(ft.max()) + 1)
        padded = self.ws.get("padded", (*u.shape[:2], left + g + right), self.DTYPE)
        padded[..., :left] = u[..., :1]
        padded[..., left:left + g] = u
        padded[..., left + g:] = u[..., -1:]
        windows = sliding_window_view(padded, g + 1, axis=-1)
        m, n = d.shape
        sel = windows[np.arange(m)[:, None], np.arange(n)[None, :], ft + left]
        out = self.ws.get("a", u.shape, self.DTYPE)
        np.subtract(sel[..., 1:], sel[..., :g], out=out)
        out *= w
        out += sel[..., :g]
        return out

    def _switch(self, a: np.ndarray, x: np.ndarray, y: np.ndarray, name: str) -> np.ndarray:
        """(M, n, G): max_q (a[q] + qw x_q - cw |x_q - y_p|) for every previous level p."""
        qw, cw = self.s.quality_weight, self.s.change_weight
        m, n, g = a.shape
        cols = np.arange(n)
        if (np.diff(x, axis=0) >= 0).all():  # the usual ladder: SSIM grows with the index
            xs, sa = x, a
        else:
            order = np.argsort(x, axis=0, kind="stable")
            xs, sa = np.take_along_axis(x, order, axis=0), a[order, cols[None, :]]
        c_up = ((qw - cw) * xs).astype(self.DTYPE)[..., None]
        c_down = ((qw + cw) * xs).astype(self.DTYPE)[..., None]
        up = self.ws.get("up", (m + 1, n, g), self.DTYPE)  # up[j]: max over sorted q >= j
        down = self.ws.get("down", (m + 1, n, g), self.DTYPE)  # down[j]: over sorted q < j
        up[m] = down[0] = -np.inf
        for j in range(m - 1, -1, -1):  # (numpy's accumulate along axis 0 is slower)
            np.add(sa[j], c_up[j], out=up[j])
            np.maximum(up[j], up[j + 1], out=up[j])
        for j in range(m):
            np.add(sa[j], c_down[j], out=down[j + 1])
            np.maximum(down[j + 1], down[j], out=down[j + 1])
        below = (xs[None, :, :] < y[:, None, :]).sum(axis=1)  # (M_p, n): sorted q < y_p
        rows = below * n + cols[None, :]  # row of (j, copy) in the (M + 1) * n rows
        shift = (cw * y).astype(self.DTYPE)[..., None]
        out = self.ws.get(name, a.shape, self.DTYPE)
        low = self.ws.get("low", a.shape, self.DTYPE)
        np.take(up.reshape(-1, g), rows, axis=0, out=out)
        np.take(down.reshape(-1, g), rows, axis=0, out=low)
        out += shift
        low -= shift
        return np.maximum(out, low, out=out)

    def _step(self, buf, d, x, prev):
        """Reward of one chunk from exact buffers and the buffer after it (broadcasting)."""
        s = self.s
        stall = np.clip(d - buf, 0.0, s.max_stall)
        after = np.minimum(np.maximum(buf - d, 0.0) + s.chunk_seconds, self.cap)
        reward = s.quality_weight * x - s.rebuf_weight * stall - s.change_weight * np.abs(x - prev)
        return reward, after

    def _value_at(self, u: np.ndarray, buf: np.ndarray) -> np.ndarray:
        """u[q, n] interpolated at exact buffers ``buf`` (..., M, n): one value per entry."""
        m, n, g = u.shape
        pos = np.clip((buf - self.s.chunk_seconds) / self.step, 0.0, g - 1)
        i0 = np.minimum(np.floor(pos).astype(np.int64), max(g - 2, 0))
        base = (np.arange(m)[:, None] * n + np.arange(n)[None, :]) * g + i0
        flat = u.reshape(-1)
        lo, hi = flat[base], flat[np.minimum(base + 1, flat.size - 1) if g > 1 else base]
        return lo + (pos - i0) * (hi - lo)

    def _root(self, u, d, x, rows, buf, prev):
        """The first two chunks exactly (a 100-leaf tree from the real buffer), the rest from
        u; the first encoding of the best plan."""
        value, b1 = self._step(buf, d[0], x[0], prev)  # (M, n)
        if d.shape[0] > 1:
            r1, b2 = self._step(b1[:, None], d[1][None], x[1][None], x[0][:, None])  # (q0, q1, n)
            if u is not None:
                r1 = r1 + self._value_at(u, b2)
            value = value + np.where(rows[1], r1.max(axis=1), 0.0)
        return value.argmax(axis=0)


class _PensievePlanner:
    """All 6^h bitrate sequences, h = min(5, chunks left), as Pensieve's ``mpc.py``:
    ``b <- max(b - size / c, 0) + 4`` (no cap), score ``sum br/1000 - 4.3 sum rebuffer -
    sum |delta br| / 1000`` from the last bitrate, ties to the last sequence in
    ``itertools.product`` order (its ``>=``), the first bitrate of the best played. Ties are
    those of exact arithmetic (scores compared to 1e-9): ``mpc.py`` sums kbit/s and divides
    at the end, so float rounding decides some of its exact ties (e.g. on the last chunk with
    no rebuffer every level at or above the last one ties; it may keep 4 where this keeps 5).

    The sequences form a tree evaluated level by level on (copies, q1, rest) arrays: the
    first bitrate q1 on its own axis (the answer is the last q1 whose best completion is the
    maximum, which is the last maximal sequence in product order), the later choices in
    ``rest`` with the newest most significant, so every expansion writes 6 contiguous slabs.
    Copies go in blocks that stay in cache. At the last level a step up never beats staying
    when the change weight is at least the quality weight (Pensieve's 1 and 1: the same
    reward, a chunk no smaller), so when a copy's sizes also grow with the level only the
    steps down or level are scored there (21 of 36 level pairs)."""

    BLOCK = 100

    def __init__(self, s: AbrSetting) -> None:
        self.s = s
        br = np.asarray(s.bitrates_kbps) / 1000.0
        self.m = m = len(br)
        # gain[p, q]: reward of bitrate q after p, rebuffering aside
        self.gain = (s.quality_weight * br[None, :]
                     - s.change_weight * np.abs(br[None, :] - br[:, None]))
        # last[k][j]: the newest bitrate of rest index j after k choices (k >= 2)
        self.last = {k: np.arange(m ** (k - 1)) // m ** (k - 2) for k in range(2, HORIZON + 1)}
        self.ws = _Workspace()

    def plan(self, o: AbrObs, c: np.ndarray, live: np.ndarray) -> np.ndarray:
        d = o.sizes[live, 0] / c[live, None]
        h = np.clip(o.chunks_left[live], 1, HORIZON)
        b0, prev = o.buffer[live], o.prev_level[live]
        prune = np.all(np.diff(d, axis=1) >= 0, axis=1) & (
            self.s.change_weight >= self.s.quality_weight)
        out = np.empty(len(d), dtype=np.int64)
        for depth in np.unique(h):
            idx = np.flatnonzero(h == depth)
            for lo in range(0, len(idx), self.BLOCK):
                blk = idx[lo:lo + self.BLOCK]
                out[blk] = self._search(b0[blk], prev[blk], d[blk], int(depth),
                                        bool(prune[blk].all()))
        return out

    def _search(self, b0, prev, d, depth, prune):
        rp, chunk = self.s.rebuf_weight, self.s.chunk_seconds
        x = d - b0[:, None]
        rebuf = np.maximum(x, 0.0)
        value = (self.gain[prev] - rp * rebuf)[:, :, None]  # (n, q1, rest = 1)
        buf = (rebuf - x + chunk)[:, :, None]  # max(b0 - d, 0) + chunk
        for k in range(1, depth):  # add choice k + 1
            if k + 1 == depth and prune and k >= 2:
                return _argmax_last(self._last_level(value, buf, d, k).max(axis=2))
            value, buf = self._expand(value, buf, d, k, k + 1 < depth)
        return _argmax_last(value.max(axis=2))

    def _gain(self, k: int, q: int) -> np.ndarray:
        """Reward of bitrate q after each plan of k choices, broadcastable to (n, q1, rest)."""
        if k == 1:
            return self.gain[:, q][None, :, None]
        return self.gain[self.last[k], q][None, None, :]

    def _expand(self, value, buf, d, k, more):
        """Plans of k choices -> k + 1 (the new choice most significant in ``rest``)."""
        n, m, r = value.shape
        rp, chunk = self.s.rebuf_weight, self.s.chunk_seconds
        new_v = self.ws.get(f"value{k + 1}", (n, m, m, r))
        new_b = self.ws.get(f"buf{k + 1}", (n, m, m, r)) if more else None
        x, rebuf = self.ws.get("x", value.shape), self.ws.get("rebuf", value.shape)
        for q in range(m):
            np.subtract(d[:, q, None, None], buf, out=x)
            np.maximum(x, 0.0, out=rebuf)
            if more:
                np.subtract(rebuf, x, out=new_b[:, :, q])
                new_b[:, :, q] += chunk
            rebuf *= rp
            np.add(value, self._gain(k, q), out=new_v[:, :, q])
            new_v[:, :, q] -= rebuf
        return new_v.reshape(n, m, m * r), (new_b.reshape(n, m, m * r) if more else None)

    def _last_level(self, value, buf, d, k):
        """(n, q1, rest): the best last choice of every plan of k >= 2 choices, scoring only
        last bitrates q <= the plan's newest p (for q > p the reward is at most q = p's and
        the rebuffer no smaller, so the maximum is unchanged). Plans whose newest bitrate is
        >= q are the contiguous tail ``rest[q * r / 6:]``."""
        n, m, r = value.shape
        rp, tail = self.s.rebuf_weight, r // m
        best = self.ws.get("best", value.shape)
        best.fill(-np.inf)
        for q in range(m):
            sl = slice(q * tail, r)
            shape = (n, m, r - q * tail)
            x, score = self.ws.get("x", shape), self.ws.get("score", shape)
            np.subtract(d[:, q, None, None], buf[:, :, sl], out=x)
            np.maximum(x, 0.0, out=x)
            x *= rp
            np.add(value[:, :, sl], self.gain[self.last[k][sl], q][None, None, :], out=score)
            score -= x
            np.maximum(best[:, :, sl], score, out=best[:, :, sl])
        return best


# ---------------------------------------------------------------------------- registry
def _constant(level: str) -> Callable[[str, Mapping[str, Any]], Controller]:
    def build(variant: str, params: Mapping[str, Any]) -> Controller:
        s = AbrSetting.of(variant, **params)
        return Constant(s, 0 if level == "lowest" else s.n_levels - 1, f"always_{level}")

    return build


def _simple(cls: type, **kwargs: Any) -> Callable[[str, Mapping[str, Any]], Controller]:
    def build(variant: str, params: Mapping[str, Any]) -> Controller:
        return cls(AbrSetting.of(variant, **params), **kwargs)

    return build


def _random(variant: str, params: Mapping[str, Any]) -> Controller:
    params = dict(params)
    seed = params.pop("seed", 0)
    return RandomController(AbrSetting.of(variant, **params), seed=seed)


CONTROLLERS: dict[str, Callable[[str, Mapping[str, Any]], Controller]] = {
    "always_lowest": _constant("lowest"),
    "always_highest": _constant("highest"),
    "bba": _simple(BufferBased),
    "rate_based": _simple(RateBased),
    "robust_mpc": _simple(RobustMpc),
    "bola_v1": _simple(Bola, version=1),
    "bola_v2": _simple(Bola, version=2),
    "random": _random,
}
"""Controller name -> factory ``(variant, env params) -> Controller``."""


def controller_names() -> list[str]:
    """Every registered controller name."""
    return sorted(CONTROLLERS)


def make_controller(name: str, variant: str = "gelato", **params: Any) -> Controller:
    """The controller ``name`` for ``variant`` with the env's parameters (``AbrVecEnv``'s
    keyword arguments; ``random`` also takes ``seed``). ValueError lists the valid names."""
    if name not in CONTROLLERS:
        raise ValueError(f"unknown ABR controller {name!r}; valid: {', '.join(controller_names())}")
    return CONTROLLERS[name](variant, params)
