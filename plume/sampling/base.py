"""The TraceSampler contract: which trace an environment copy replays next.

The environment calls :meth:`TraceSampler.sample_many` whenever copies start new episodes and
:meth:`TraceSampler.update` when a training episode ends. The DRL algorithm never sees the
sampler: that is Plume's "no change to the DRL workflow".

A sampler class is a plug-in of the same shape as an algorithm (``plume.agents.base``):

- ``name``: what ``sampler.name`` selects (``plume.sampling.register_sampler`` adds a class).
- ``CONFIG``: a dataclass of its options, documented field by field, with their defaults (the
  only place they are written) and range checks in ``__post_init__`` (``plume.checks``: errors
  name the field, so the harness reports ``sampler.<field>``). Every init field is a
  command-line key; a sampler reads its options from ``self.config``, never copies them
  (:class:`ConfigField` shows one on the sampler).
- ``NEEDS`` (a :class:`SamplerNeeds`), refined from a config by :meth:`TraceSampler.needs`:
  everything the harness must supply or do for it, declared instead of probed; its data
  inputs are kinds of ``plume.sampling.inputs.INPUT_KINDS``.
- Construction, one way for all: ``cls(n_traces, rng, *data_inputs, config=None, **options)``,
  with the per-trace arrays ``NEEDS.inputs`` names (by name or in that order) and either a
  ``CONFIG`` instance or its fields as keywords (or both: keywords replace config fields).
- Optional capabilities are hooks with no-op defaults here (policy consultation, weight
  updates), so the harness calls them on every sampler and never asks what a sampler has.
"""

from __future__ import annotations

import dataclasses
import inspect
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from plume.checks import integer
from plume.sampling.inputs import SAMPLER_INPUTS


@dataclasses.dataclass(frozen=True)
class SamplerNeeds:
    """What a sampler needs from the harness, in one statement (``TraceSampler.NEEDS``)."""

    inputs: tuple[str, ...] = ()
    """Per-trace arrays (kinds of ``plume.sampling.inputs.INPUT_KINDS``), passed to the
    constructor in this order; never dependent on the config (the harness prepares them
    before building)."""
    learner_signal: bool = False
    """:meth:`TraceSampler.update` wants ``value_l1`` / ``positive_value_loss`` (the mean
    |learner signal| / mean positive signal over the episode's steps); refused at validation
    for an algorithm that gives no learner signal."""
    policy_every: int = 0
    """Env steps between policy consultations (0: never): the harness stops training there,
    plays the policy on :meth:`TraceSampler.evaluation_traces` and hands the scores to
    :meth:`TraceSampler.observe_policy`."""
    weight_updates: bool = False
    """It recomputes cluster weights during training and lists them in
    :meth:`TraceSampler.weight_updates` (logged to ``sampler.parquet`` as they happen)."""

    def __post_init__(self) -> None:
        unknown = [name for name in self.inputs if name not in SAMPLER_INPUTS]
        if unknown:
            raise ValueError(f"unknown sampler input(s) {unknown}; known: {SAMPLER_INPUTS}")
        integer("policy_every", self.policy_every, 0)


@dataclasses.dataclass
class NoConfig:
    """The config of a sampler without options."""


class ConfigField:
    """An option readable on the sampler (``sampler.alpha``) while stored once, in its
    ``config``: a read-only view of ``config.<name>`` (a sampler reads its options from its
    config, never copies them, so the two cannot disagree)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, sampler: Any, owner: type | None = None) -> Any:
        return self if sampler is None else getattr(sampler.config, self.name)

    def __set__(self, sampler: Any, value: Any) -> None:
        raise AttributeError(f"{type(sampler).__name__}.{self.name} is read from its config; "
                             f"build the sampler with {self.name}=... instead")


class TraceSampler(ABC):
    """Base class of all samplers; owns its random generator and per-trace counters.

    Subclasses implement :meth:`sample` (and, for speed, :meth:`sample_many`) and
    :meth:`probabilities`; stateful ones extend :meth:`update`, :meth:`state_dict` and
    :meth:`load_state_dict`. ``clusters`` is a per-trace cluster id, or None for samplers
    that do not group traces; the harness logs weights per cluster from it. ``config`` is the
    sampler's ``CONFIG`` instance (see the module docstring for the rest of the contract).

    Samplers must stay picklable and deep-copyable (no modules or open resources as
    attributes): a copy, e.g. the one each ``SubprocVecEnv`` worker receives, continues with
    the same draws and probabilities as the original.
    """

    name: ClassVar[str] = "base"
    CONFIG: ClassVar[type] = NoConfig
    """The options dataclass (see the module docstring)."""
    NEEDS: ClassVar[SamplerNeeds] = SamplerNeeds()
    """What the harness supplies and does for this sampler; :meth:`needs` may refine it."""
    inputs: ClassVar[tuple[str, ...]] = ()
    """``NEEDS.inputs``, derived for every subclass (declare ``NEEDS``, never this)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "inputs" in vars(cls):
            raise TypeError(f"{cls.__name__}: declare NEEDS = SamplerNeeds(inputs=...) "
                            "instead of inputs")
        if not (isinstance(cls.CONFIG, type) and dataclasses.is_dataclass(cls.CONFIG)):
            raise TypeError(f"{cls.__name__}.CONFIG must be a dataclass, got {cls.CONFIG!r}")
        cls.inputs = cls.NEEDS.inputs
        _document_options(cls)

    def __init__(self, n_traces: int, rng: np.random.Generator, config: Any = None,
                 **options: Any) -> None:
        if int(n_traces) < 1:
            raise ValueError(f"{type(self).__name__} needs at least one trace, got {n_traces}")
        self.config = self.configure(config, **options)
        self.n_traces = int(n_traces)
        self.rng = rng
        self.draws = np.zeros(self.n_traces, dtype=np.int64)
        self.episodes = np.zeros(self.n_traces, dtype=np.int64)
        self.clusters: np.ndarray | None = None

    @classmethod
    def configure(cls, config: Any = None, **options: Any) -> Any:
        """The ``CONFIG`` to build with: ``config`` (default: all defaults) with ``options``
        replacing its fields, checked by the config's own ``__post_init__``."""
        if config is None:
            return cls.CONFIG(**options)
        if type(config) is not cls.CONFIG:
            raise TypeError(f"{cls.__name__} takes a {cls.CONFIG.__name__}, got a "
                            f"{type(config).__name__}")
        return dataclasses.replace(config, **options) if options else config

    @classmethod
    def needs(cls, config: Any) -> SamplerNeeds:
        """What this sampler, built with ``config``, needs; ``NEEDS`` unless an option changes
        it (PLR's score decides whether it wants the learner signal)."""
        return cls.NEEDS

    @abstractmethod
    def sample(self) -> int:
        """Index of the trace the next episode replays."""

    def sample_many(self, count: int) -> np.ndarray:
        """``count`` independent draws; override with a vectorised version where possible."""
        return np.fromiter((self.sample() for _ in range(count)), dtype=np.int64, count=count)

    def update(self, trace_index: int, rewards: np.ndarray, **learner_stats: Any) -> None:
        """Record a finished training episode: its trace and per-step rewards."""
        self.episodes[trace_index] += 1

    @abstractmethod
    def probabilities(self) -> np.ndarray:
        """Current probability of drawing each trace, shape (n_traces,), summing to 1."""

    # -- optional capabilities: no-ops unless a sampler's NEEDS asks for them ------------------
    @property
    def evaluation_every(self) -> int:
        """Env steps between policy consultations (``needs(config).policy_every``; 0: none)."""
        return self.needs(self.config).policy_every

    def evaluation_traces(self) -> np.ndarray:
        """Training trace indices to play the policy on at a consultation (none here)."""
        return np.zeros(0, dtype=np.int64)

    def observe_policy(self, traces: np.ndarray, scores: np.ndarray) -> int | None:
        """The policy's scores on :meth:`evaluation_traces`; returns the cluster it chose to
        favour, or None (here: ignored)."""
        return None

    def weight_updates(self) -> list[tuple[int, np.ndarray]]:
        """Every cluster-weight recompute so far, as ``(draws at the time, weights)`` (none)."""
        return []

    # -- persistence ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rng": self.rng.bit_generator.state,
            "draws": self.draws.copy(),
            "episodes": self.episodes.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("name") != self.name:
            raise ValueError(f"state of sampler {state.get('name')!r} given to {self.name!r}")
        self.rng.bit_generator.state = state["rng"]
        self.draws[:] = state["draws"]
        self.episodes[:] = state["episodes"]


def _document_options(cls: type[TraceSampler]) -> None:
    """Show the ``CONFIG`` fields as keyword options in place of ``**options`` in the class's
    signature (and its own ``__init__``'s): what ``help()`` and ``inspect`` report."""
    init = vars(cls).get("__init__")
    if init is not None:
        cls._init_signature = inspect.signature(init)
    raw = cls._init_signature
    params = list(raw.parameters.values())
    if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
        taken = {p.name for p in params}
        params = params[:-1] + [
            inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=f.type,
                              default=_field_default(f))
            for f in dataclasses.fields(cls.CONFIG) if f.init and f.name not in taken]
    signature = raw.replace(parameters=params)
    if init is not None:
        init.__signature__ = signature
    cls.__signature__ = signature.replace(parameters=params[1:])


def _field_default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return inspect.Parameter.empty


TraceSampler._init_signature = inspect.signature(TraceSampler.__init__)


class UniformSampler(TraceSampler):
    """Every trace equally likely: the "domain randomisation" default of Pensieve and Plume."""

    name = "uniform"

    def sample(self) -> int:
        index = int(self.rng.integers(self.n_traces))
        self.draws[index] += 1
        return index

    def sample_many(self, count: int) -> np.ndarray:
        indices = self.rng.integers(self.n_traces, size=count)
        np.add.at(self.draws, indices, 1)
        return indices

    def probabilities(self) -> np.ndarray:
        return np.full(self.n_traces, 1.0 / self.n_traces)


class SequentialSampler(TraceSampler):
    """Traces 0, 1, 2, ... in order, wrapping around: test mode plays every trace once."""

    name = "sequential"

    def __init__(self, n_traces: int, rng: np.random.Generator | None = None) -> None:
        super().__init__(n_traces, rng if rng is not None else np.random.default_rng(0))
        self._next = 0

    def sample(self) -> int:
        return int(self.sample_many(1)[0])

    def sample_many(self, count: int) -> np.ndarray:
        indices = (self._next + np.arange(count)) % self.n_traces
        self._next = int((self._next + count) % self.n_traces)
        np.add.at(self.draws, indices, 1)
        return indices

    def probabilities(self) -> np.ndarray:
        probs = np.zeros(self.n_traces)
        probs[self._next] = 1.0
        return probs

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "next": self._next}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._next = int(state["next"])
