"""CC's deployment slice (``SPEC.deploy``): Aurora's rate-control session and the recorder
that turns the simulator's monitor intervals into what a real sender measures.

Imported only by the layers above envs, through the spec's lazy loader: it builds on
``plume.deploy.sessions``, which an env package must not import when it is imported.

``decide(measurement)`` takes ``None`` (the first decision after
``reset(initial_rate_bps=...)``) or one monitor interval, as packets ``{bytes_sent, bytes_acked,
send_start_s, send_end_s, rtt_samples_s}`` or as statistics ``{sending_rate_bps,
receiving_rate_bps, latency_s, latency_inflation}``, and returns the sending rate in bit/s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from plume.deploy.sessions import MeasurementError, constant, number, one
from plume.envs.cc.observation import AuroraObservation, change_rate
from plume.envs.registry import Deployment

__all__ = ["DEPLOYMENTS", "AuroraRecorder", "AuroraSession", "simulated_mi"]


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
        self.observer.push(one(inflation), one(latency), one(received), one(sent))
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


class AuroraRecorder:
    """Monitor intervals as statistics (PCC-Uspace's form): packet counts and two RTT
    samples could not carry the fluid model's rounding (an inflation of -1e-16 s/s)."""

    def __init__(self, env, traces, contract) -> None:
        self.env = env
        self.bits = 8.0 * float(contract["constants"]["packet_bytes"])

    def start(self, i: int) -> tuple[dict[str, Any], Any]:
        return {"initial_rate_bps": float(self.env.rate[i]) * self.bits,
                "initial_rtt_s": float(self.env.last_rtt[i])}, None

    def after(self, i: int, step: dict[str, np.ndarray], action) -> tuple[Any, Any]:
        """The rate the action set is the next MI's rate; after an episode's last step the
        copy has restarted, so that step's decision is unknown (None: not recorded)."""
        if step["done"][i]:
            return None, None
        sample = simulated_mi(step, i, self.bits)
        return sample["sending_rate_bps"], sample


def simulated_mi(step: dict[str, np.ndarray], i: int, bits_per_packet: float) -> dict:
    """Copy ``i``'s monitor interval of a CC env's ``last_step()`` as the runtime's
    statistics-form measurement (rates in bit/s)."""
    return {"sending_rate_bps": float(step["rate"][i]) * bits_per_packet,
            "receiving_rate_bps": float(step["throughput"][i]) * bits_per_packet,
            "latency_s": float(step["latency"][i]),
            "latency_inflation": float(step["inflation"][i]),
            "loss": float(step["loss"][i]), "duration_s": float(step["duration"][i])}


DEPLOYMENTS = {None: Deployment(AuroraSession, AuroraRecorder, protocols=("pcc",))}
"""CC has no variants: one runtime slice."""
