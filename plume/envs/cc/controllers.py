"""Classic congestion controllers, batched over the N copies of a :class:`CcVecEnv`.

Each is evaluated exactly like a learned policy: the evaluator calls ``bind(env)`` on every
test env and then plays the returned ``policy(obs) -> actions``. The observation alone does
not carry what these rules need (the link's bandwidth, the last RTT and loss), so the bound
policy reads it from the env's public read-only properties (``rate``, ``link_bandwidth``,
``last_rtt``, ``last_loss``, ``elapsed``, ``episode_started``, ``max_rate``,
``delta_scale``). Every rule computes a target rate and converts it into the Aurora action
that reaches it in one step (:func:`plume.envs.cc.sim.rate_action`); the env still clips the
rate to its bounds.

====================  =====================================================================
``constant_rate``     a fixed rate, 300 pkt/s by default (the middle of the 100-500 pkt/s
                      training range): no adaptation at all, the normalisation floor.
``oracle``            the link's current bandwidth (perfect knowledge, no queue built), the
                      normalisation ceiling.
``aimd``              Reno-like (TCP Reno's AIMD): window W packets, rate = W / RTT; slow
                      start doubles W per RTT until the first loss, then +1 packet per RTT;
                      a loss event halves W, at most once per RTT (a reduction's losses
                      still arrive for about one RTT). Starts from 10 packets (RFC 6928).
``cubic``             RFC 8312: after a loss W_max = W (fast convergence: W (1 + beta) / 2 when
                      W is below the previous W_max), W = beta W with beta = 0.7, K =
                      cbrt(W_max (1 - beta) / C), C = 0.4; then W(t) = max(C (t - K)^3 +
                      W_max, W_max beta + 3 (1 - beta) / (1 + beta) t / RTT) with t the time
                      since the reduction (the TCP-friendly region); slow start as AIMD.
====================  =====================================================================

A loss event is a whole lost packet: the fluid model reports an MI's *expected* loss, so
random loss makes every MI's loss ratio positive; the rules accumulate the packets lost
(loss ratio x rate x MI duration) outside recoveries and react when one packet is complete,
the fluid counterpart of a loss every 1/p packets.

Windows are capped at ``max_rate x RTT`` (a larger window could not be sent anyway, and an
uncapped slow start on a loss-free link would grow without bound).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np

from plume.envs.cc.sim import rate_action

__all__ = ["CONTROLLERS", "Aimd", "ConstantRate", "Cubic", "Oracle"]

Policy = Callable[[np.ndarray], np.ndarray]


def _action(env, target: np.ndarray) -> np.ndarray:
    """(N, 1) actions moving every copy's rate to ``target``."""
    return rate_action(env.rate, target, env.delta_scale)[:, None]


class ConstantRate:
    """Always send at ``rate`` pkt/s."""

    def __init__(self, rate: float = 300.0) -> None:
        if not (np.isfinite(rate) and rate > 0):
            raise ValueError(f"the constant rate must be a positive number, got {rate}")
        self.rate = float(rate)

    def bind(self, env) -> Policy:
        target = np.full(env.num_envs, self.rate)
        return lambda obs: _action(env, target)


class Oracle:
    """Send at the link's bandwidth at the start of every MI."""

    def bind(self, env) -> Policy:
        return lambda obs: _action(env, env.link_bandwidth)


class _WindowPolicy(ABC):
    """Shared machinery of the window-based rules bound to one env: per-copy window, slow
    start flag and loss-recovery deadline, reset at every episode start; one reduction per
    RTT; rate = window / RTT."""

    initial_window = 10.0

    def __init__(self, env) -> None:
        n = env.num_envs
        self.env = env
        self.window = np.full(n, self.initial_window)
        self.slow_start = np.ones(n, dtype=bool)
        self.recovery_until = np.zeros(n)
        self.last_time = np.zeros(n)
        self.lost = np.zeros(n)  # packets lost since the last loss event

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        env = self.env
        rtt, now = env.last_rtt, env.elapsed
        started = env.episode_started
        self.restart(started)
        lossy = self._loss_events(now, started)
        if lossy.any():
            self.reduce(lossy, now)
            self.slow_start[lossy] = False
            self.recovery_until[lossy] = now[lossy] + rtt[lossy]
        rounds = (now - self.last_time) / rtt  # RTTs since the last decision
        growing = ~lossy & ~started
        slow = growing & self.slow_start
        self.window[slow] *= 2.0 ** rounds[slow]
        self.grow(growing & ~self.slow_start, now, rtt, rounds)
        np.minimum(self.window, env.max_rate * rtt, out=self.window)
        np.maximum(self.window, 1.0, out=self.window)
        self.last_time[:] = now
        return _action(env, self.window / rtt)

    def _loss_events(self, now: np.ndarray, started: np.ndarray) -> np.ndarray:
        """Copies that see a loss event now. The fluid model reports the expected loss of an
        MI (random loss makes every MI's loss positive), so lost packets are accumulated and
        a loss event is a whole lost packet; losses during a recovery belong to the event
        that started it and are not counted."""
        env = self.env
        in_recovery = now < self.recovery_until
        lost = env.last_loss * env.rate * (now - self.last_time)
        self.lost += np.where(in_recovery | started, 0.0, lost)
        events = self.lost >= 1.0
        self.lost[events] = 0.0
        return events

    def restart(self, ids: np.ndarray) -> None:
        self.window[ids] = self.initial_window
        self.slow_start[ids] = True
        self.recovery_until[ids] = 0.0
        self.lost[ids] = 0.0

    @abstractmethod
    def reduce(self, ids: np.ndarray, now: np.ndarray) -> None:
        """Multiplicative decrease of the windows where ``ids`` (a mask) saw a loss."""

    @abstractmethod
    def grow(self, ids: np.ndarray, now: np.ndarray, rtt: np.ndarray,
             rounds: np.ndarray) -> None:
        """Congestion-avoidance growth where ``ids``; ``rounds`` = RTTs since the last call."""


class _AimdPolicy(_WindowPolicy):
    def reduce(self, ids, now) -> None:
        self.window[ids] *= 0.5

    def grow(self, ids, now, rtt, rounds) -> None:
        self.window[ids] += rounds[ids]


class Aimd:
    """Reno-like additive increase (+1 packet per RTT), multiplicative decrease (x 0.5)."""

    def bind(self, env) -> Policy:
        return _AimdPolicy(env)


class _CubicPolicy(_WindowPolicy):
    C = 0.4
    BETA = 0.7

    def __init__(self, env) -> None:
        super().__init__(env)
        n = env.num_envs
        self.w_max = np.zeros(n)
        self.w_last_max = np.zeros(n)
        self.k = np.zeros(n)
        self.epoch = np.zeros(n)

    def restart(self, ids) -> None:
        super().restart(ids)
        self.w_max[ids] = 0.0
        self.w_last_max[ids] = 0.0

    def reduce(self, ids, now) -> None:
        w = self.window[ids]
        converging = w < self.w_last_max[ids]
        self.w_last_max[ids] = w
        self.w_max[ids] = np.where(converging, w * (1.0 + self.BETA) / 2.0, w)
        self.window[ids] = w * self.BETA
        self.k[ids] = np.cbrt(self.w_max[ids] * (1.0 - self.BETA) / self.C)
        self.epoch[ids] = now[ids]

    def grow(self, ids, now, rtt, rounds) -> None:
        t = now[ids] - self.epoch[ids]
        cubic = self.C * (t - self.k[ids]) ** 3 + self.w_max[ids]
        friendly = (self.w_max[ids] * self.BETA
                    + 3.0 * (1.0 - self.BETA) / (1.0 + self.BETA) * t / rtt[ids])
        self.window[ids] = np.maximum(cubic, friendly)


class Cubic:
    """RFC 8312 Cubic (C = 0.4, beta = 0.7, fast convergence, TCP-friendly region)."""

    def bind(self, env) -> Policy:
        return _CubicPolicy(env)


CONTROLLERS: dict[str, type] = {"constant_rate": ConstantRate, "oracle": Oracle,
                                "aimd": Aimd, "cubic": Cubic}
