"""The Algorithm contract: what the harness needs of a DRL learner, and nothing about traces.

An algorithm is built as ``Algo(env, config, seed, total_env_steps=...)`` on a Gymnasium
``VectorEnv`` (Plume's batched envs use same-step autoreset) and is driven by the harness:

- ``learn(until_env_steps)`` trains until ``env_steps >= until_env_steps`` (rounded up to the
  algorithm's own update granularity; a call that is already there does nothing) and returns
  one metrics record per update (each with ``env_steps``). The harness calls it up to the next
  evaluation point, then evaluates, checkpoints and logs: the schedule is the harness's.
- ``total_env_steps`` is the whole budget of the job, given once so that schedules (learning
  rate and entropy annealing, epsilon decay, PER's beta) are fractions of the same budget
  however many ``learn`` calls it takes to spend it.
- ``act(obs, deterministic)``: numpy in, environment actions out, no gradients, never touching
  the training random streams (evaluating must not perturb training).
- ``state_dict()`` / ``load_state_dict()``: everything an exact resume needs (networks,
  optimiser, replay buffer, counters, random generator states).
- ``learner_signal()`` (optional, announced by ``LEARNER_SIGNAL``, a short description): signed
  per-transition scores of the vector steps taken since the previous call, as a
  ``(T, num_envs)`` array in step order (the GAE advantage for actor-critics, the TD error for
  DQN). ``T`` may be less than the steps taken when a score is not known yet (it then comes
  first in the next call). The harness, not the algorithm, maps them to finished episodes for
  samplers that want them (PLR); a sampler that needs them is refused at validation for an
  algorithm whose ``LEARNER_SIGNAL`` is None. The signal is kept only while
  ``track_learner_signal`` is True (the harness sets it before the first ``learn``), so a run
  that does not read it neither pays for it nor accumulates it. It may be called at any time:
  the harness polls it before every training step (through the env wrapper it gives the
  algorithm), so a sampler gets an episode's scores as soon as they exist.

Each algorithm also names its hyperparameter dataclass (``CONFIG``): the harness validates the
``algo`` config section against it before any work starts.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from plume import checks
from plume.agents.networks import ACTIVATIONS, network_names


@dataclass(frozen=True)
class GreedyPolicy:
    """The deterministic actor of a trained learner, for export: ``module`` maps float32
    observations ``(B, obs_dim)`` to ``outputs`` ``(B, k)`` (no value head, no sampling), and
    ``rule`` says how outputs become environment actions, as data a runtime without torch
    applies: ``{"kind": "argmax", "start": s}`` (action = argmax + s) or ``{"kind": "clip",
    "low": [...], "high": [...]}`` (action = outputs clipped to the bounds)."""

    module: torch.nn.Module
    outputs: str
    rule: dict[str, Any]


class Algorithm(ABC):
    """Base of the learners in ``plume.agents.ALGORITHMS`` (see the module docstring)."""

    CONFIG: ClassVar[type]
    """The hyperparameter dataclass; its ``__post_init__`` raises ValueError on a bad value."""
    LEARNER_SIGNAL: ClassVar[str | None] = None
    """What :meth:`learner_signal` gives (e.g. "GAE advantage"), or None if it gives nothing."""

    env_steps: int
    """Environment steps taken so far (``step()`` calls x ``num_envs``)."""
    track_learner_signal: bool = False
    """Keep the learner signal for :meth:`learner_signal` (see the module docstring)."""

    @abstractmethod
    def learn(self, until_env_steps: int) -> list[dict[str, Any]]:
        """Train until ``env_steps >= until_env_steps``; one metrics record per update."""

    @abstractmethod
    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """Environment actions for a batch (or one) of observations."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything an exact resume needs."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the next ``learn`` resets the environment."""

    @abstractmethod
    def episode_state(self) -> dict[str, Any]:
        """What the agent holds of the episodes in flight (the last observation, pending
        n-step transitions, unread learner signal, unfinished episode statistics). Saved
        with the environment's own state, it lets training continue those episodes exactly;
        :meth:`state_dict` alone starts new ones."""

    @abstractmethod
    def load_episode_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`episode_state` (after :meth:`load_state_dict`, with the environment
        restored to the same moment)."""

    def learner_signal(self) -> np.ndarray:
        """``(T, num_envs)`` signed scores of the vector steps since the previous call."""
        raise NotImplementedError(f"{type(self).__name__} gives no learner signal")

    @abstractmethod
    def greedy_policy(self) -> GreedyPolicy:
        """The actor that :meth:`act` applies with ``deterministic=True``, as a module (a copy
        on the CPU in eval mode: exporting never touches the learner) and its action rule."""


_GLOBAL_RNG = threading.Lock()


@contextlib.contextmanager
def seeded_init(seed: int) -> Iterator[None]:
    """Build networks from torch's global RNG seeded with ``seed``, leaving that RNG as it
    was (``fork_rng``), one thread at a time: torch's layers initialise from the global RNG,
    which seeds trained together in one process (one thread each) share."""
    with _GLOBAL_RNG, torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        yield


def update_record(env_steps: int, updates: int, **metrics: Any) -> dict[str, Any]:
    """A metrics record as ``learn`` returns it: counters, the wall-clock time it was made (so
    a training curve keeps its timing though the harness logs it after ``learn`` returns),
    then the algorithm's own metrics."""
    return {"env_steps": int(env_steps), "updates": int(updates), "wall_time": time.time(),
            **metrics}


class NonFiniteTraining(FloatingPointError):
    """A loss or a network parameter became NaN or infinite: training stops at once (a diverged
    network would otherwise fail later with an unrelated error, or act on NaNs silently)."""


def check_finite(updates: int, metrics: dict[str, Any],
                 network: torch.nn.Module | None = None) -> None:
    """Raise NonFiniteTraining naming the update and the first non-finite ``losses/*`` metric,
    or saying that ``network``'s parameters (when given: a check that costs a sync per
    tensor, so callers make it only where NaN weights would otherwise pass unseen) left the
    finite range after the update."""
    for key, value in metrics.items():
        if key.startswith("losses/") and not math.isfinite(value):
            raise NonFiniteTraining(f"update {updates}: {key} = {value}; training diverged "
                                    "(a smaller algo.learning_rate usually helps)")
    if network is None:
        return
    if not all(bool(torch.isfinite(p).all()) for p in network.parameters()):
        raise NonFiniteTraining(f"update {updates}: the network's parameters are no longer "
                                "finite after the optimiser step (losses were "
                                + ", ".join(f"{k} = {v:.4g}" for k, v in metrics.items()
                                            if k.startswith("losses/"))
                                + "); a smaller algo.learning_rate usually helps")


def check_budget(name: str, value: Any) -> int:
    """``value`` as a positive int, or a ValueError (``plume.checks.FieldError``) naming
    ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        checks.fail(name, value, "a positive integer")
    return int(value)


# The checks every algorithm's config dataclass runs in __post_init__: plume.checks on a field,
# failing as a plain ValueError that names "<Config>.<field>" (a FieldError would be renamed
# "algo.<field>" by the schema, which reports an algo error as it stands, under "algo:").
def _field(config: Any, name: str, check: Callable[..., Any], *args: Any) -> Any:
    """``check(f"<Config>.{name}", value, *args)`` on the field ``name`` of ``config``."""
    try:
        return check(f"{type(config).__name__}.{name}", getattr(config, name), *args)
    except checks.FieldError as err:
        raise ValueError(str(err)) from None


def fail_field(config: Any, name: str, expected: str) -> None:
    """Raise ``<Config>.<name> must be <expected>, got <value>`` (always raises)."""
    _field(config, name, checks.fail, expected)


def check_real(config: Any, name: str) -> float:
    """The field ``name`` of ``config`` as a float (NaN refused, infinity allowed)."""
    return _field(config, name, checks.real)


def check_int(config: Any, name: str, minimum: int) -> None:
    """The field ``name`` made an int >= ``minimum``."""
    setattr(config, name, _field(config, name, checks.integer, minimum))


def check_bool(config: Any, *names: str) -> None:
    for name in names:
        _field(config, name, checks.boolean)


def check_sizes(config: Any, name: str) -> None:
    """The field ``name`` as a tuple of positive ints (lists from YAML become tuples)."""
    setattr(config, name, _field(config, name, checks.sizes))


def check_network(config: Any) -> None:
    """``hidden_sizes`` (made a tuple), ``activation``, ``network`` and ``device``."""
    check_sizes(config, "hidden_sizes")
    _field(config, "activation", checks.choice, sorted(ACTIVATIONS))
    if config.network not in network_names():
        fail_field(config, "network", f"one of {list(network_names())}")
    try:
        device = torch.device(config.device)
    except (RuntimeError, TypeError):
        fail_field(config, "device", "a torch device string such as 'cpu' or 'cuda:0'")
    if device.type == "cuda" and not torch.cuda.is_available():
        fail_field(config, "device", "'cpu' on this machine (torch sees no CUDA device)")


def linear_schedule(start: float, end: float, progress: float, fraction: float = 1.0) -> float:
    """``start`` -> ``end`` linearly over progress ``[0, fraction]``, exactly ``end`` after."""
    p = min(max(progress / fraction, 0.0), 1.0)
    return float(end) if p == 1.0 else float(start + p * (end - start))
