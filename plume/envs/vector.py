"""What every batched trace-driven environment here shares, in one place: the mode and copy
count, the sampler and its default, seeding, ``reset``, action checks, drawing each new
episode's trace and start, and reporting finished episodes (final observations, episode
fields, ``sampler.update``, same-step autoreset).

A subclass (TraceBench, ABR, CC, LB, a user's own) owns its dynamics and its episode sums. The
protocol is :class:`TraceVecEnv`'s abstract methods, so a subclass that lacks one fails at
construction with a TypeError naming it: ``step(actions)``, ``_observation()``,
``_restart(ids)`` and ``_episode_fields(mask)`` (shapes and call times on each). Its
constructor calls ``_setup`` first, ``_set_spaces`` (the single-copy and batched spaces) and
``_seed`` last; it keeps ``_trace``, ``_eplen`` and, in train mode, ``_rewbuf`` (per-copy agent
rewards of the episode so far, ``(N, >= longest episode)``) up to date. The base provides the
rest: ``reset``, ``_check_step`` (discrete actions), ``_draw`` (each new episode's trace and
start) and ``_finish`` (which adds ``trace`` and ``length`` from ``_trace`` and ``_eplen``
unless given, and Gymnasium's episode-statistics keys, :data:`GYMNASIUM_EPISODE_KEYS`).

Seeding: ``seed`` (an int, a ``numpy.random.SeedSequence`` or None) gives two independent
child streams, derived without mutating a SeedSequence passed in: one for the whole batch's
start offsets and noise, and one for the default ``UniformSampler`` (a sampler passed in owns
its own generator and is never reseeded). A subclass draws through ``self._draws``
(``plume.envs.draws``): by default one ``np.random.Generator`` in order of use, so that a
training trajectory depends on ``n_envs`` as well as the seed (speed over N-independence);
after :meth:`TraceVecEnv.key_draws_by_visit` (``train.crn``) each episode's draws are keyed by
(seed, trace, visit number on that trace) instead. Test mode draws nothing.
``reset(seed=...)`` reseeds both streams (the default sampler is rebuilt); in test mode a
default ``SequentialSampler`` restarts at trace 0 on every ``reset()``, so after reset copy i
plays trace i.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Self

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from plume.checks import choice, integer
from plume.envs.draws import CommonDraws, OrderedDraws
from plume.sampling.base import SequentialSampler, TraceSampler, UniformSampler
from plume.traces.traceset import TraceSet

MODES = ("train", "test")
GYMNASIUM_EPISODE_KEYS = ("r", "l", "t")
"""Keys that ``infos["episode"]`` carries beside the environment's own fields, with the meaning
Gymnasium's ``RecordEpisodeStatistics`` and SB3's ``Monitor`` give them, so that code reading
those (SB3's ``ep_info_buffer`` and logger) needs no wrapper: ``r`` = the sum of the rewards
``step`` returned (the agent's return; for ABR and TraceBench the transformed reward, i.e. our
``return_transformed``, not the raw QoE ``return``), ``l`` = the episode length (= ``length``),
``t`` = wall-clock seconds from the environment's creation to the episode's end, rounded to 6
decimals (SB3 ``Monitor``'s ``t``; Gymnasium's wrapper times the episode alone instead)."""


def child_seeds(seed: int | np.random.SeedSequence | None, count: int):
    """``count`` children of ``seed`` as SeedSequence.spawn would give, without mutating it."""
    if isinstance(seed, np.random.SeedSequence):
        ss = seed
    elif seed is None or (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool)):
        if seed is not None and int(seed) < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed}")
        ss = np.random.SeedSequence(None if seed is None else int(seed))
    else:
        raise TypeError(f"seed must be an int, a numpy SeedSequence or None, got {seed!r}")
    return [
        np.random.SeedSequence(
            ss.entropy, spawn_key=(*ss.spawn_key, ss.n_children_spawned + i),
            pool_size=ss.pool_size,
        )
        for i in range(count)
    ]


class TraceVecEnv(VectorEnv, ABC):
    """Base of the batched trace-driven environments (see the module docstring).

    A Gymnasium ``VectorEnv``, not a Stable-Baselines3 ``VecEnv``: SB3 rejects it as "not a
    Gymnasium environment"; wrap it in ``plume.envs.sb3.PlumeVecEnv`` to train SB3 on it."""

    metadata: ClassVar[dict[str, Any]] = {
        "autoreset_mode": AutoresetMode.SAME_STEP,
        "render_modes": [],
    }
    render_mode = None

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        """Refuse a subclass that lacks a hook, naming it (before its ``__init__`` runs)."""
        missing = sorted(getattr(cls, "__abstractmethods__", ()))
        if missing:
            raise TypeError(f"{cls.__name__} does not implement the TraceVecEnv hook(s) "
                            f"{', '.join(missing)} (see plume.envs.vector)")
        return super().__new__(cls)

    # ------------------------------------------------------------------ the subclass's hooks
    @abstractmethod
    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                          dict[str, Any]]:
        """One step of every copy: ``actions`` (N,) (or (N, action_dim)), checked (discrete:
        :meth:`_check_step`); returns ``(obs (N, obs_dim), rewards (N,), terminated (N,),
        truncated (N,), infos)``. Where a copy's episode ended it calls :meth:`_finish`
        (same-step autoreset) after updating ``_eplen`` and ``_rewbuf``."""

    @abstractmethod
    def _observation(self) -> np.ndarray:
        """The current ``(N, obs_dim)`` observation of every copy (the base copies it):
        read by ``reset`` after :meth:`_restart`, and by :meth:`_finish` before autoreset
        (the finished copies' ``final_obs``)."""

    @abstractmethod
    def _restart(self, ids: np.ndarray) -> None:
        """Start new episodes in copies ``ids`` (int array, ascending; all of them at
        ``reset``, the finished ones at autoreset): draw traces and starts with
        :meth:`_draw`, set ``_trace[ids]``, zero ``_eplen[ids]`` (and ``_rewbuf[ids]``) and
        the dynamics, so that :meth:`_observation` shows the first observation."""

    @abstractmethod
    def _episode_fields(self, mask: np.ndarray) -> dict[str, np.ndarray]:
        """The episode sums of the copies where ``mask`` (N,) bool is True, as ``(N,)`` arrays
        zero elsewhere: at least ``return`` and ``return_transformed`` (the sum of the rewards
        ``step`` returned), plus the env's own metric fields. Called by :meth:`_finish`
        before the finished copies restart."""

    def _setup(self, traces: TraceSet, n_envs: int | None, sampler: TraceSampler | None,
               mode: str) -> None:
        """Check and store what every subclass takes first; call before anything else."""
        choice("mode", mode, MODES)
        if not isinstance(traces, TraceSet):
            raise TypeError(f"traces must be a TraceSet, got {type(traces).__name__}")
        self._train = mode == "train"
        self.mode = mode
        if n_envs is None:
            if self._train:
                raise ValueError("n_envs is required in train mode")
            n_envs = len(traces)
        n_envs = integer("n_envs", n_envs, 1)
        if sampler is not None:
            if not isinstance(sampler, TraceSampler):
                raise TypeError(f"sampler must be a TraceSampler, got {type(sampler).__name__}")
            if sampler.n_traces != len(traces):
                raise ValueError(f"sampler covers {sampler.n_traces} traces but the TraceSet "
                                 f"{traces.name!r} has {len(traces)}")
        self._traces = traces
        self.num_envs = int(n_envs)
        self._trace = np.zeros(self.num_envs, dtype=np.int64)  # a subclass may reallocate these
        self._eplen = np.zeros(self.num_envs, dtype=np.int64)
        self._user_sampler = sampler
        self.sampler: TraceSampler = sampler  # type: ignore[assignment]  (set by _seed)
        self.autoreset = True  # public: False = a finished copy waits for reset() (SingleCopyEnv)
        self._needs_reset = True
        self._created = time.perf_counter()  # the origin of the episodes' "t"

    def _set_spaces(self, observation: spaces.Space, action: spaces.Space) -> None:
        """Set the single-copy spaces and their batched versions (call after ``_setup``)."""
        self.single_observation_space, self.single_action_space = observation, action
        self.observation_space = batch_space(observation, self.num_envs)
        self.action_space = batch_space(action, self.num_envs)

    # ------------------------------------------------------------------ properties
    @property
    def trace_set(self) -> TraceSet:
        """The TraceSet this environment replays."""
        return self._traces

    @property
    def current_traces(self) -> np.ndarray:
        """(N,) trace index each copy currently plays (read-only view)."""
        view = self._trace.view()
        view.setflags(write=False)
        return view

    # ------------------------------------------------------------------ seeding
    def _seed(self, seed: int | np.random.SeedSequence | None) -> None:
        env_ss, sampler_ss = child_seeds(seed, 2)
        self._rng = np.random.default_rng(env_ss)
        self._draw_key = child_seeds(env_ss, 1)[0].generate_state(2, dtype=np.uint64)
        self._draws = self._new_draws()
        self._np_random = self._rng
        self._np_random_seed = int(seed) if isinstance(seed, (int, np.integer)) else -1
        self._sampler_ss = sampler_ss
        if self._user_sampler is None:
            self._default_sampler()

    def _default_sampler(self) -> None:
        n = len(self._traces)
        if self._train:
            self.sampler = UniformSampler(n, np.random.default_rng(self._sampler_ss))
        else:
            self.sampler = SequentialSampler(n)

    keyed_draws = False
    """Whether the draws are keyed by trace and visit (:meth:`key_draws_by_visit`)."""

    def key_draws_by_visit(self) -> None:
        """Common random numbers from now on (``train.crn``): every episode's start offset and
        noise keyed by (seed, trace, visit number on that trace), before the first ``reset``.
        Only for an env whose every draw goes through ``self._draws`` (the EnvSpec declares
        it: ``common_random_numbers``)."""
        self.keyed_draws = True
        self._draws = self._new_draws()
        self._needs_reset = True

    def _new_draws(self) -> CommonDraws | OrderedDraws:
        """Fresh draws of this env's seed: keyed by visit, or the Generator in order."""
        if self.keyed_draws:
            return CommonDraws(self._draw_key, len(self._traces), self.num_envs)
        return OrderedDraws(self._rng)

    # ------------------------------------------------------------------ gym API
    def reset(
        self,
        *,
        seed: int | np.random.SeedSequence | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start a new episode in every copy (unfinished episodes are dropped unreported).
        ``options`` is accepted for API compatibility and ignored."""
        if seed is not None:
            self._seed(seed)
        elif self._user_sampler is None and not self._train and self.autoreset:
            self._default_sampler()  # test mode: copy i plays trace i after every reset
        self._restart(np.arange(self.num_envs))
        self._needs_reset = False
        return self._observation().copy(), self._trace_info()

    def _check_step(self, actions: Any, n_actions: int, what: str) -> np.ndarray:
        """The actions as (N,) int64 in [0, n_actions), after checking reset was called."""
        if self._needs_reset:
            raise RuntimeError("call reset() before step() (and after an episode ends when "
                               "autoreset is off)")
        a = np.asarray(actions)
        if a.shape != (self.num_envs,):
            if a.size != self.num_envs:
                raise ValueError(f"actions must have shape ({self.num_envs},), got {a.shape}")
            a = a.reshape(self.num_envs)
        if a.dtype.kind not in "iu":
            if a.dtype.kind == "f" and np.all(a == np.floor(a)):
                a = a.astype(np.int64)
            else:
                raise ValueError(f"actions must be integer {what} indices, got dtype {a.dtype}")
        if np.minimum.reduce(a) < 0 or np.maximum.reduce(a) >= n_actions:
            raise ValueError(f"actions must lie in [0, {n_actions - 1}], got {a}")
        return a

    def last_step(self) -> dict[str, np.ndarray]:
        """The last step's components per copy, e.g. ``{"stall": (N,)}`` (the single-copy
        view puts them in ``info``); none unless the environment overrides this."""
        return {}

    def _trace_info(self) -> dict[str, np.ndarray]:
        return {"trace": self._trace.copy(), "_trace": np.ones(self.num_envs, dtype=bool)}

    # ------------------------------------------------------------------ episodes
    def _draw(self, ids: np.ndarray | int, n_starts: np.ndarray, same_starts: bool):
        """Traces from the sampler and start offsets (0 in test mode, uniform below
        ``n_starts[trace]`` in training) for new episodes in copies ``ids`` (what ``_restart``
        was given; a count is accepted where draws are not keyed by visit)."""
        count = int(ids) if np.ndim(ids) == 0 else len(ids)
        new = np.asarray(self.sampler.sample_many(count), dtype=np.int64).reshape(-1)
        if (new.shape != (count,) or np.minimum.reduce(new) < 0
                or np.maximum.reduce(new) >= len(self._traces)):
            raise RuntimeError(
                f"sampler {type(self.sampler).__name__} returned invalid trace indices {new!r}")
        if not self._train:
            return new, np.zeros(count, dtype=np.int64)
        if np.ndim(ids) == 0:
            if self.keyed_draws:
                raise TypeError(f"{type(self).__name__}._restart passes _draw a count: draws "
                                "keyed by visit (train.crn) need the copies' ids")
            ids = np.arange(count)  # ordered draws never read them
        self._draws.begin(ids, new)
        return new, self._draws.integers(n_starts[0] if same_starts else n_starts[new], ids)

    def _finish(self, done: np.ndarray, infos: dict[str, Any]) -> None:
        """Report finished episodes, update the sampler, autoreset (same step)."""
        ended = np.flatnonzero(done)
        mask = done.copy()
        infos["final_obs"] = self._observation().copy()
        infos["_final_obs"] = mask.copy()
        episode = self._episode_fields(mask)
        episode.setdefault("trace", np.where(mask, self._trace, 0))
        episode.setdefault("length", np.where(mask, self._eplen, 0))
        infos["episode"] = self._with_gymnasium_keys(episode, mask)
        infos["_episode"] = mask
        if self._train:
            for i in ended:
                self.sampler.update(
                    int(self._trace[i]), rewards=self._rewbuf[i, : self._eplen[i]].copy())
        if self.autoreset:
            self._restart(ended)
        else:
            self._needs_reset = True

    def _with_gymnasium_keys(self, episode: dict[str, np.ndarray],
                             mask: np.ndarray) -> dict[str, np.ndarray]:
        """``episode`` plus ``r``, ``l`` and ``t`` (see :data:`GYMNASIUM_EPISODE_KEYS`), zero
        where ``mask`` is False like every other field; the existing fields are unchanged."""
        elapsed = round(time.perf_counter() - self._created, 6)
        episode["r"] = episode["return_transformed"].copy()
        episode["l"] = episode["length"].copy()
        episode["t"] = np.where(mask, elapsed, 0.0)
        return episode

    def close_extras(self, **kwargs: Any) -> None:
        pass

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self._traces.name!r}, num_envs={self.num_envs}, "
                f"mode={self.mode}, sampler={type(self.sampler).__name__})")
