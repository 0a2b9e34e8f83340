"""Sessions: from the raw measurements a real client has to the observation a policy was
trained on, and from the policy's action back to the real system's units.

Each session keeps its own history and builds the observation with the simulator's own
builder (``plume.envs.<env>.observation``, the code the batched environment calls), for one
copy. Measurements are dicts whose keys name their units; a missing or ill-typed field raises
:class:`MeasurementError` naming it. Only numpy is imported: a deployed controller needs no
torch.

========  ===========================================================================
env       ``decide(measurement)`` takes / returns
========  ===========================================================================
abr       gelato: ``{"last": None | {size_mb, ssim_db, delay_s, buffer_s, stall_s},
          next_sizes_mb: 5 x 10, next_ssim_db: 5 x 10}`` -> format index;
          pensieve: ``{"last": None | {level, size_bytes, delay_ms, buffer_s},
          next_sizes_bytes (optional, 6)}`` -> level. ``last=None``: a new session.
cc        ``None`` (the first decision after ``reset(initial_rate_bps=...)``) or one
          monitor interval, as packets ``{bytes_sent, bytes_acked, send_start_s,
          send_end_s, rtt_samples_s}`` or as statistics ``{sending_rate_bps,
          receiving_rate_bps, latency_s, latency_inflation}`` -> the sending rate in bit/s
lb        ``{job_size, loads: S}`` (Park's load per server: queued work + time left
          of the running job, 0 when idle; classic rules also read ``work_left`` and
          ``queue_lengths``) -> server index
========  ===========================================================================
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from plume.deploy.contract import ContractError
from plume.envs.abr.observation import (
    GELATO_LEVELS,
    LOOKAHEAD,
    GelatoObservation,
    PensieveObservation,
    gelato_reward,
    pensieve_video_table,
)
from plume.envs.cc.observation import AuroraObservation, change_rate
from plume.envs.lb.observation import park_observation

__all__ = ["SESSIONS", "AuroraSession", "GelatoSession", "MeasurementError", "ParkSession",
           "PensieveSession", "constant", "constant_array", "has_session", "no_session_reason",
           "session_for"]


class MeasurementError(ValueError):
    """A measurement a session cannot use: one line naming the field."""


def number(record: dict[str, Any], key: str, where: str = "", low: float | None = None) -> float:
    """``record[key]`` as a finite float (>= ``low`` when given), or MeasurementError."""
    if not isinstance(record, dict):
        raise MeasurementError(f"{where or 'measurement'} must be an object with {key!r}, got "
                               f"{type(record).__name__}")
    if key not in record:
        raise MeasurementError(f"missing field {where}{key}")
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise MeasurementError(f"field {where}{key} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or (low is not None and value < low):
        bound = "a finite number" if low is None else f"a finite number >= {low:g}"
        raise MeasurementError(f"field {where}{key} must be {bound}, got {value}")
    return value


def matrix(record: dict[str, Any], key: str, shape: tuple[int, ...]) -> np.ndarray:
    """``record[key]`` as a finite float64 array of ``shape``, or MeasurementError."""
    if key not in record:
        raise MeasurementError(f"missing field {key}")
    try:
        value = np.asarray(record[key], dtype=np.float64)
    except (TypeError, ValueError):
        raise MeasurementError(f"field {key} must be numbers of shape {shape}") from None
    if value.shape != shape or not np.all(np.isfinite(value)):
        raise MeasurementError(f"field {key} must be finite numbers of shape {shape}, got "
                               f"shape {value.shape}")
    return value


def constant(constants: dict[str, Any], key: str, low: float | None = None,
             above: float | None = None, integer: bool = False) -> float:
    """A contract constant a session uses, checked when the session is built (never at the
    first request): finite, >= ``low`` / > ``above``, integral when asked; ContractError."""
    value = constants.get(key)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (low is None or value >= low) and (above is None or value > above)
    if not ok or (integer and value != int(value)):
        bound = (f" >= {low:g}" if low is not None else "") + (
            f" > {above:g}" if above is not None else "")
        kind = "an integer" if integer else "a finite number"
        raise ContractError(f"constants.{key} must be {kind}{bound}, got {value!r}")
    return float(value)


def constant_array(constants: dict[str, Any], key: str, ndim: int) -> np.ndarray:
    """A constant table of positive finite numbers with ``ndim`` axes, or ContractError."""
    try:
        value = np.asarray(constants.get(key), dtype=np.float64)
    except (TypeError, ValueError):
        value = np.zeros(0)
    if value.ndim != ndim or value.size == 0 or not np.all(np.isfinite(value) & (value > 0)):
        raise ContractError(f"constants.{key} must be a {ndim}-axis table of positive finite "
                            "numbers")
    return value


def _one(x: float) -> np.ndarray:
    return np.array([x], dtype=np.float64)


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
        quality, size, delay, buffer = (_one(number(last, key, "last.", low)) for key, low in (
            ("ssim_db", None), ("size_mb", 0.0), ("delay_s", 0.0), ("buffer_s", 0.0)))
        stall = _one(number(last, "stall_s", "last.", 0.0))
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
        self.observer.push(_one(self.levels_kbps[int(level)]), _one(buffer_ms), _one(size),
                           _one(delay), self.downloaded,
                           (next_sizes / 1e6).astype(np.float32)[None])
        return self.observer.obs

    def action(self, a: Any) -> int:
        return int(a)


class AuroraSession:
    """Aurora's rate control: monitor intervals in, a sending rate in bit/s out. The policy's
    action changes the rate multiplicatively; the rate is clipped to ``clip_bps`` (the
    training clip by default).

    The session also offers the sender state that the classic CC rules read from the
    simulator (``rate``, ``last_rtt``, ``last_loss``, ``elapsed``, ``episode_started``,
    ``max_rate``, ``delta_scale``; rates in packets/s as there), so a rule is served like a
    model. Rules need ``reset(initial_rtt_s=...)`` (their first window is 10 packets per RTT)
    and each MI's duration and loss."""

    num_envs = 1

    def __init__(self, constants: dict[str, Any], clip_bps: tuple[float, float] | None = None):
        self.observer = AuroraObservation(1, int(constant(constants, "history", 1,
                                                          integer=True)))
        self.delta_scale = constant(constants, "delta_scale", above=0.0)
        self.bits_per_packet = 8.0 * constant(constants, "packet_bytes", above=0.0)
        low = constant(constants, "min_rate", above=0.0)
        high = constant(constants, "max_rate", above=low)
        self.clip_bps = clip_bps or (low * self.bits_per_packet, high * self.bits_per_packet)
        self.max_rate = self.clip_bps[1] / self.bits_per_packet
        self.rate_bps: np.ndarray | None = None
        self._scaled, self._factor = np.zeros(1), np.zeros(1)
        self._negative = np.zeros(1, dtype=bool)
        self.last_rtt, self.last_loss, self.elapsed = np.zeros(1), np.zeros(1), np.zeros(1)
        self.episode_started = np.ones(1, dtype=bool)

    @property
    def rate(self) -> np.ndarray:
        """(1,) the sending rate in packets/s (the simulator's unit, for the rules)."""
        return self.rate_bps / self.bits_per_packet

    @property
    def link_bandwidth(self) -> np.ndarray:
        raise MeasurementError("a real sender cannot know its link's bandwidth (the oracle "
                               "rule runs only in the simulator)")

    def reset(self, initial_rate_bps: float | None = None,
              initial_rtt_s: float | None = None) -> None:
        """A new flow at ``initial_rate_bps`` (clipped); ``initial_rtt_s`` (the handshake's
        RTT) for the classic rules."""
        if initial_rate_bps is None:
            raise MeasurementError("a CC session starts with reset(initial_rate_bps=...)")
        low, high = self.clip_bps
        self.rate_bps = np.clip(np.array([float(initial_rate_bps)]), low, high)
        self.observer.restart(np.arange(1))
        self.last_rtt[:] = np.nan if initial_rtt_s is None else float(initial_rtt_s)
        self.last_loss[:], self.elapsed[:] = 0.0, 0.0
        self.episode_started[:] = True

    def observe(self, m: dict[str, Any] | None) -> np.ndarray:
        if self.rate_bps is None:
            raise MeasurementError("no flow: call reset(initial_rate_bps=...) first")
        if m is None:
            return self.observer.obs
        stats = self._statistics(m) if "latency_s" in m else self._from_packets(m)
        inflation, latency, received, sent, duration, loss = stats
        self.observer.push(_one(inflation), _one(latency), _one(received), _one(sent))
        self.last_rtt[:], self.last_loss[:] = latency, loss
        self.elapsed += duration
        self.episode_started[:] = False
        return self.observer.obs

    @staticmethod
    def _statistics(m: dict[str, Any]) -> tuple[float, ...]:
        """A sender that computes its MI statistics itself (PCC-Uspace's C++ side does)."""
        return (number(m, "latency_inflation"), number(m, "latency_s", low=0.0),
                number(m, "receiving_rate_bps", low=0.0), number(m, "sending_rate_bps", low=0.0),
                number(m, "duration_s", low=0.0) if "duration_s" in m else 0.0,
                number(m, "loss", low=0.0) if "loss" in m else 0.0)

    @staticmethod
    def _from_packets(m: dict[str, Any]) -> tuple[float, ...]:
        """An MI as counted packets (PCC-RL's helper arguments): mean RTT of the samples,
        inflation = (mean of the second half of the samples - first half) / duration, rates
        = bytes / duration, loss = bytes lost / bytes sent."""
        start, end = number(m, "send_start_s"), number(m, "send_end_s")
        if end <= start:
            raise MeasurementError(f"send_end_s ({end}) must be after send_start_s ({start})")
        try:
            samples = np.asarray(m.get("rtt_samples_s", ()), dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise MeasurementError("field rtt_samples_s must be a list of numbers") from None
        if samples.size == 0 or not np.all(np.isfinite(samples)):
            raise MeasurementError("field rtt_samples_s must hold at least one finite RTT")
        duration, half = end - start, samples.size // 2
        inflation = ((samples[half:].mean() - samples[:half].mean()) / duration
                     if samples.size > 1 else 0.0)
        sent = number(m, "bytes_sent", low=0.0)
        lost = number(m, "bytes_lost", low=0.0) if "bytes_lost" in m else 0.0
        loss = lost / sent if sent > 0 else 0.0
        return (inflation, float(samples.mean()), number(m, "bytes_acked", low=0.0) / duration,
                sent / duration, duration, loss)

    def action(self, a: Any) -> float:
        """The new rate (bit/s): Aurora's multiplicative change, then the clip (the
        simulator's own function)."""
        scaled = np.multiply(np.asarray(a, dtype=np.float64).reshape(1), self.delta_scale,
                             out=self._scaled)
        change_rate(self.rate_bps, scaled, *self.clip_bps, self._factor, self._negative)
        return float(self.rate_bps[0])


class ParkSession:
    """Park's load balancing: no history, one decision per arriving job. Also offers the
    servers' state the classic rules read (``work_left()``, ``queue_lengths()``,
    ``service_times()``, ``service_rates``, ``job_size``, ``job_index``), from the
    measurement's optional ``work_left`` and ``queue_lengths`` fields."""

    num_envs = 1

    def __init__(self, constants: dict[str, Any]) -> None:
        self.n_servers = int(constant(constants, "n_servers", 1, integer=True))
        self.obs_high = constant(constants, "obs_high", above=0.0)
        self.obs_scale = constant(constants, "obs_scale", above=0.0)
        self.service_rates = constant_array(constants, "service_rates", 1)
        if len(self.service_rates) != self.n_servers:
            raise ContractError(f"constants.service_rates must list {self.n_servers} rates")
        self.obs = np.zeros((1, self.n_servers + 1), dtype=np.float32)
        self.job_index = np.zeros(1, dtype=np.int64)
        self.job_size = np.zeros(1)
        self._last: dict[str, Any] = {}

    def reset(self) -> None:
        """A new job sequence (the round-robin rule counts from its first job)."""
        self.job_index[:] = 0
        self._last = {}

    def observe(self, m: dict[str, Any]) -> np.ndarray:
        if not isinstance(m, dict):
            raise MeasurementError(f"measurement must be an object, got {type(m).__name__}")
        loads = matrix(m, "loads", (self.n_servers,))
        if np.any(loads < 0):
            raise MeasurementError("field loads must be >= 0")
        size = number(m, "job_size", low=0.0)
        if self._last:
            self.job_index += 1
        self._last = m
        self.job_size[:] = size
        park_observation(loads[None].copy(), self.job_size.copy(), self.obs_high,
                         self.obs_scale, self.obs)
        return self.obs

    def work_left(self) -> np.ndarray:
        """(1, S) time until each server is idle (measurement field ``work_left``)."""
        return matrix(self._last, "work_left", (self.n_servers,))[None]

    def queue_lengths(self) -> np.ndarray:
        """(1, S) jobs at each server (measurement field ``queue_lengths``)."""
        return matrix(self._last, "queue_lengths", (self.n_servers,))[None]

    def service_times(self) -> np.ndarray:
        """(1, S) time the arriving job would need on each server: ``int(size / rate)``."""
        return np.floor(self.job_size[:, None] / self.service_rates)

    def action(self, a: Any) -> int:
        return int(a)


SESSIONS = {("abr", "gelato"): GelatoSession, ("abr", "pensieve"): PensieveSession,
            ("cc", None): AuroraSession, ("lb", None): ParkSession}
"""(env, variant) -> the session class of Plume's built-in environments."""


def _key(contract: dict[str, Any]) -> tuple[Any, Any]:
    return contract["env"].get("name"), contract["env"].get("variant")


def has_session(contract: dict[str, Any]) -> bool:
    """Whether the runtime has a session for the contract's environment."""
    return _key(contract) in SESSIONS


def no_session_reason(contract: dict[str, Any]) -> str:
    name, variant = _key(contract)
    return (f"no deployment session for env={name}" + (f" variant={variant}" if variant else "")
            + "; pass observations with act_observation() instead")


def session_for(contract: dict[str, Any], **options: Any):
    """The session of a contract's environment (``options``: CC's ``clip_bps``), its
    constants checked (ContractError); ValueError for an environment without one."""
    if not has_session(contract):
        raise ValueError(no_session_reason(contract))
    constants = {**contract["constants"], **contract["action"]}
    return SESSIONS[_key(contract)](constants, **options)
