"""Classic load-balancing controllers, batched over an env's copies.

Each controller is an object with ``bind(env) -> policy`` (EnvSpec.controllers): the
observation mixes work and time units and omits queue lengths and job numbers, so the rules
read the simulator's public state instead (``LbVecEnv.queue_lengths``, ``work_left``,
``service_times``, ``job_index``, ``service_rates``). The bound policy is a callable
``obs -> actions`` that the evaluator plays exactly like a learned one; binding again starts
afresh (the randomised controllers reseed), so every evaluation is reproducible.

With ``Q_k`` the jobs at server ``k`` (queued + running), ``W_k = max(last finish - now, 0)``
its remaining work in time units, ``mu_k`` its rate and ``s`` the incoming size:

===================  ================================================================
least_work_left      argmin W_k
earliest_finish      argmin W_k + int(s / mu_k) (when the job would finish there)
join_shortest_queue  argmin Q_k
power_of_two         JSQ(2): two distinct servers drawn uniformly, the one with smaller Q
round_robin          a = job index mod S (each copy counts its own trace's jobs)
random               uniform over the servers
===================  ================================================================

Ties go to the faster server (then to the lower index), for every argmin above.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np

__all__ = ["CONTROLLERS", "EarliestFinish", "JoinShortestQueue", "LeastWorkLeft",
           "PowerOfTwo", "RandomServer", "RoundRobin", "argmin_faster"]

Policy = Callable[[np.ndarray], np.ndarray]


def argmin_faster(values: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """(N,) index of each row's smallest value, ties to the faster server (higher rate),
    then to the lower index."""
    order = np.argsort(-np.asarray(rates), kind="stable")
    return order[np.argmin(values[:, order], axis=1)]


class _StateRule(ABC):
    """A deterministic rule ``argmin_faster(score(env))`` over the env's public state."""

    @abstractmethod
    def score(self, env) -> np.ndarray:
        """(N, S) value per server; the job goes to the smallest."""

    def bind(self, env) -> Policy:
        rates = env.service_rates

        def policy(obs: np.ndarray) -> np.ndarray:
            return argmin_faster(self.score(env), rates)

        return policy


class LeastWorkLeft(_StateRule):
    """The server that empties first (Park's defaults give it a mean JCT near 790)."""

    def score(self, env) -> np.ndarray:
        return env.work_left()


class EarliestFinish(_StateRule):
    """The server on which the incoming job would finish first (shortest expected delay)."""

    def score(self, env) -> np.ndarray:
        return env.work_left() + env.service_times()


class JoinShortestQueue(_StateRule):
    """The server with the fewest jobs, ties to the faster one."""

    def score(self, env) -> np.ndarray:
        return env.queue_lengths()


class RoundRobin:
    """Server ``job index mod S``: every server gets 1/S of the jobs, whatever its rate."""

    def bind(self, env) -> Policy:
        n_servers = len(env.service_rates)
        return lambda obs: env.job_index % n_servers


class RandomServer:
    """A uniformly random server per job from a generator seeded at every ``bind``."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def bind(self, env) -> Policy:
        rng = np.random.default_rng(self.seed)
        n_servers = len(env.service_rates)
        return lambda obs: rng.integers(0, n_servers, len(obs))


class PowerOfTwo:
    """Power of two choices, the classic JSQ(2) variant: draw two distinct servers uniformly
    at random (seeded at every ``bind``), send the job to the one with fewer jobs; a tie
    goes to the faster of the two (then the lower index). Uniform sampling ignores the rates,
    which is why it trails JSQ on Park's heterogeneous servers."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def bind(self, env) -> Policy:
        rng = np.random.default_rng(self.seed)
        rates = env.service_rates
        n_servers = len(rates)

        def policy(obs: np.ndarray) -> np.ndarray:
            n = len(obs)
            first = rng.integers(0, n_servers, n)
            second = (first + rng.integers(1, n_servers, n)) % n_servers
            pair = np.stack([first, second], axis=1)
            queues = np.take_along_axis(env.queue_lengths(), pair, axis=1)
            pick = _shorter_of_two(queues, rates[pair], pair)
            return pair[np.arange(n), pick]

        return policy


def _shorter_of_two(queues: np.ndarray, rates: np.ndarray, servers: np.ndarray) -> np.ndarray:
    """Column (0 or 1) of each row's shorter queue; ties to the higher rate, then the lower
    server index."""
    second = (queues[:, 1] < queues[:, 0]) | ((queues[:, 1] == queues[:, 0]) & (
        (rates[:, 1] > rates[:, 0]) | ((rates[:, 1] == rates[:, 0])
                                       & (servers[:, 1] < servers[:, 0]))))
    return second.astype(np.int64)


CONTROLLERS: dict[str, Callable[[], object]] = {
    "least_work_left": LeastWorkLeft,
    "earliest_finish": EarliestFinish,
    "join_shortest_queue": JoinShortestQueue,
    "power_of_two": PowerOfTwo,
    "round_robin": RoundRobin,
    "random": RandomServer,
}
"""Controller name -> constructor (no arguments needed)."""
