"""Stable-Baselines3 over Plume's batched environments, with no change to SB3.

SB3 steps a ``VecEnv``; Plume's environments are batched Gymnasium ``VectorEnv`` objects (N
copies in numpy lockstep, same-step autoreset, one trace sampler). :class:`PlumeVecEnv` is the
thin adapter between the two::

    from stable_baselines3 import PPO
    from plume.envs.sb3 import PlumeVecEnv

    env = spec.make(traces, 64, sampler, mode="train", seed=0, params=spec.params())
    model = PPO("MlpPolicy", PlumeVecEnv(env)).learn(100_000)

Why an adapter and not ``DummyVecEnv`` of single copies: one batched step replaces N Python
steps, and there is exactly one environment and one sampler, which sees every episode. A
``DummyVecEnv`` of ``spec.single(traces, sampler)`` copies sharing one sampler also works (the
copies share the trace tables, ``plume.envs.replay.derived_from``); a ``SubprocVecEnv`` pickles
the sampler into every worker, so each worker then updates its *own* copy of the sampler and an
adaptive sampler (Plume-Dynamic, PLR, ...) sees only that worker's episodes. The adapter is the
supported way.

Passing the batched env to SB3 directly (``PPO("MlpPolicy", env)``) fails inside SB3's
``_patch_env`` with "The environment is of type <...TraceBenchVecEnv>, not a Gymnasium
environment": SB3 only accepts its own ``VecEnv`` or a single ``gymnasium.Env``, and rejects
anything else before reading any attribute, so the fix is to wrap it in :class:`PlumeVecEnv`.

:func:`sb3_policy` turns a trained SB3 model into the ``obs batch -> actions`` callable that
``plume.harness.training.evaluation.evaluate_policy`` evaluates on Plume's test sets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

try:
    from stable_baselines3.common.vec_env import VecEnv
except ImportError as err:  # the optional extra is not installed
    raise ImportError(
        "plume.envs.sb3 needs Stable-Baselines3: pip install 'plume-rl[sb3]' "
        "(from a checkout: pip install -e '.[sb3]')"
    ) from err

__all__ = ["PlumeVecEnv", "sb3_policy"]


class PlumeVecEnv(VecEnv):
    """SB3 ``VecEnv`` view of one batched Plume environment (see the module docstring).

    ``env`` is a batched env from ``spec.make(...)`` (or a Gymnasium ``VectorWrapper`` of
    one) with same-step autoreset and Plume's infos (``final_obs``, ``episode`` with masks).
    Stepping follows SB3's conventions:

    * ``reset()`` returns the observations; ``reset_infos[i]`` is ``{"trace": index}``;
    * ``step_wait()`` returns ``(obs, rewards, dones, infos)``: ``dones = terminated |
      truncated``; ``obs`` rows of finished copies already start the next episode;
    * ``infos`` is a list of one dict per copy. A copy that finished gets
      ``terminal_observation`` (its final observation, ``infos["final_obs"]``),
      ``TimeLimit.truncated`` (truncated and not terminated, for bootstrapping) and
      ``episode``: Gymnasium's ``r`` / ``l`` / ``t`` (SB3's ``ep_info_buffer`` and logger read
      them; no ``Monitor`` needed) beside the environment's own fields (QoE ``return``,
      ``quality``, ``stall``, ``trace``, ...). Every other copy gets an empty dict, so a step
      costs one dict per copy and real content only for the few that finished.

    Every copy is the same environment, so the per-copy methods act on the whole batch:
    ``get_attr`` returns the batched env's attribute once per requested index (the same
    object: ``get_attr("sampler")[0]`` is the one sampler); ``set_attr`` and ``env_method``
    set or call once on the batched env and need ``indices`` to cover every copy (set_attr) or
    return the result once per index (env_method); ``env_is_wrapped`` looks for the wrapper
    class among Gymnasium ``VectorWrapper`` layers of ``env`` (a ``gymnasium.Wrapper`` such as
    SB3's ``Monitor`` can never wrap a batched env, so it is always False). ``seed(s)`` stores
    one seed for the whole batch, applied at the next ``reset()`` (SB3's rule); None leaves
    the environment's streams running; ``set_options`` likewise takes one dict for the batch.
    A sampler passed to ``spec.make`` is never reseeded (``plume.envs.vector``).
    """

    def __init__(self, env: VectorEnv) -> None:
        _check_batched(env)
        self.env = env
        self._pending_seed: int | None = None
        self._pending_options: dict[str, Any] | None = None
        self._actions: np.ndarray | None = None
        super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)

    # ------------------------------------------------------------------ stepping
    def reset(self) -> np.ndarray:
        obs, info = self.env.reset(seed=self._pending_seed, options=self._pending_options)
        self._pending_seed = self._pending_options = None  # used once, as SB3 does
        traces = info.get("trace")
        self.reset_infos = ([{"trace": int(t)} for t in traces] if traces is not None
                            else [{} for _ in range(self.num_envs)])
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        if self._actions is None:
            raise RuntimeError("step_wait() called without step_async()")
        actions, self._actions = self._actions, None
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        dones = np.logical_or(terminated, truncated)
        return obs, rewards, dones, self._per_copy_infos(dones, terminated, truncated, infos)

    def _per_copy_infos(self, dones: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                        infos: dict[str, Any]) -> list[dict[str, Any]]:
        """Plume's dict of (N,) arrays as SB3's list of per-copy dicts (see the class doc):
        column-wise ``tolist`` over the finished copies only, then one small dict each."""
        out: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        ended = np.flatnonzero(dones)
        if ended.size == 0:
            return out
        if "final_obs" not in infos:
            raise KeyError("a copy finished without infos['final_obs']: PlumeVecEnv needs a "
                           "same-step autoreset env that reports final observations")
        final_obs = infos["final_obs"][ended]
        timeouts = (truncated & ~terminated)[ended].tolist()
        episode = infos.get("episode")
        reported = (np.asarray(infos["_episode"], dtype=bool)[ended].tolist()
                    if episode is not None else [False] * ended.size)
        columns = {} if episode is None else {
            key: np.asarray(values)[ended].tolist() for key, values in episode.items()}
        for j, i in enumerate(ended.tolist()):
            info: dict[str, Any] = {"terminal_observation": final_obs[j],
                                    "TimeLimit.truncated": timeouts[j]}
            if reported[j]:
                info["episode"] = {key: column[j] for key, column in columns.items()}
            out[i] = info
        return out

    def seed(self, seed: int | None = None) -> list[int | None]:
        """One seed for the whole batch at the next ``reset()``; returns it once per copy."""
        self._pending_seed = seed
        return [seed] * self.num_envs

    def set_options(self, options: list[dict] | dict | None = None) -> None:
        """Options for the next ``reset()``: one dict for the whole batch (a list must hold
        the same dict for every copy). Plume's envs accept and ignore them."""
        if isinstance(options, list):
            if any(o != options[0] for o in options):
                raise ValueError("the copies are one batched env: give every copy the same "
                                 "reset options")
            options = options[0] if options else None
        self._pending_options = options or None

    def close(self) -> None:
        self.env.close()

    # ------------------------------------------------------------------ per-copy access
    def get_attr(self, attr_name: str, indices: Iterable[int] | int | None = None) -> list[Any]:
        value = getattr(self._owner_of(attr_name), attr_name)
        return [value] * len(self._index_list(indices))

    def set_attr(self, attr_name: str, value: Any,
                 indices: Iterable[int] | int | None = None) -> None:
        self._require_every_copy(indices, f"set_attr({attr_name!r})")
        setattr(self._owner_of(attr_name), attr_name, value)

    def env_method(self, method_name: str, *method_args,
                   indices: Iterable[int] | int | None = None, **method_kwargs) -> list[Any]:
        result = getattr(self._owner_of(method_name), method_name)(*method_args, **method_kwargs)
        return [result] * len(self._index_list(indices))

    def env_is_wrapped(self, wrapper_class: type,
                       indices: Iterable[int] | int | None = None) -> list[bool]:
        layer, wrapped = self.env, False
        while isinstance(layer, VectorWrapper):
            wrapped = wrapped or isinstance(layer, wrapper_class)
            layer = layer.env
        return [wrapped] * len(self._index_list(indices))

    def _owner_of(self, name: str) -> Any:
        """The outermost layer of ``env`` that has ``name`` (Gymnasium's vector wrappers do
        not forward attributes), else the unwrapped env (which then raises AttributeError,
        as SB3's ``has_attr`` expects)."""
        layer = self.env
        while isinstance(layer, VectorWrapper) and not hasattr(layer, name):
            layer = layer.env
        return layer

    def _index_list(self, indices: Iterable[int] | int | None) -> list[int]:
        """SB3's ``indices`` (None = every copy, an int, or an iterable) as a checked list."""
        if indices is None:
            return list(range(self.num_envs))
        listed = [indices] if isinstance(indices, (int, np.integer)) else list(indices)
        bad = [i for i in listed if not 0 <= int(i) < self.num_envs]
        if bad:
            raise IndexError(f"copy indices {bad} out of range [0, {self.num_envs})")
        return listed

    def _require_every_copy(self, indices: Iterable[int] | int | None, what: str) -> None:
        if set(self._index_list(indices)) != set(range(self.num_envs)):
            raise ValueError(f"{what}: the {self.num_envs} copies are one batched environment, "
                             "so an attribute can only be set for all of them (indices=None)")

    def __repr__(self) -> str:
        return f"PlumeVecEnv({self.env!r})"


def _check_batched(env: Any) -> None:
    """Reject what the adapter cannot step, with the fix in the message."""
    if isinstance(env, VecEnv):
        raise TypeError(f"{type(env).__name__} is already an SB3 VecEnv; pass it to SB3 as is")
    if not isinstance(env, VectorEnv):
        raise TypeError(
            f"PlumeVecEnv wraps a batched Plume environment (spec.make(...), a gymnasium "
            f"VectorEnv), got {type(env).__name__}; for single-copy envs (spec.single(...)) "
            "use SB3's DummyVecEnv")
    mode = env.metadata.get("autoreset_mode")
    if mode != AutoresetMode.SAME_STEP:
        raise ValueError(f"PlumeVecEnv needs a same-step autoreset env (SB3's convention), "
                         f"got autoreset_mode={mode!r}")


def sb3_policy(model: Any) -> Callable[[np.ndarray], np.ndarray]:
    """``obs batch -> greedy actions`` of an SB3 model, for ``evaluate_policy`` (Plume's test
    sets are played as one batch per set, so the model sees (n_traces, obs_dim) batches)."""

    def act(obs: np.ndarray) -> np.ndarray:
        actions, _ = model.predict(obs, deterministic=True)
        return actions

    return act
