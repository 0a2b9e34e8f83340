"""What every algorithm here needs to read from a Gymnasium vector environment: its autoreset
mode, the final observations of episodes that just ended, and the statistics of finished
episodes (the env's own ``infos["episode"]`` fields when it reports them, else sums kept
here). Shared by the on-policy algorithms and DQN so that they read envs the same way.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

EPISODE_KEYS = ("return", "r", "length", "l", "t")
"""Mapped to ``charts/episodic_{return,length}``, or (``t``, Gymnasium's wall time) dropped."""


def autoreset_mode(env: gym.vector.VectorEnv, who: str) -> AutoresetMode:
    """The env's autoreset mode (Gymnasium's default when unset); DISABLED is refused."""
    mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    try:
        mode = AutoresetMode(mode.value if isinstance(mode, AutoresetMode) else mode)
    except ValueError:
        raise ValueError(f"unknown env.metadata['autoreset_mode'] {mode!r}") from None
    if mode is AutoresetMode.DISABLED:
        raise ValueError(
            f"{who} needs an autoresetting vector env (AutoresetMode.SAME_STEP or NEXT_STEP); "
            "got AutoresetMode.DISABLED"
        )
    return mode


def final_observations(next_obs, infos: dict, idx: np.ndarray,
                       mode: AutoresetMode) -> np.ndarray:
    """Last observations of the episodes of copies ``idx`` that just ended (NEXT_STEP: the
    returned observation; SAME_STEP: ``infos["final_obs"]``, dense or an object array)."""
    if mode is AutoresetMode.NEXT_STEP:
        return np.asarray(next_obs)[idx]
    if "final_obs" not in infos:
        raise KeyError(
            "SAME_STEP vector env ended an episode without infos['final_obs'] "
            "(needed to bootstrap the value of truncated episodes)"
        )
    final = infos["final_obs"]
    if isinstance(final, np.ndarray) and final.dtype != object:
        return final[idx]
    return np.stack([np.asarray(final[i]) for i in idx])


class EpisodeStats:
    """Statistics of the episodes that finish between two :meth:`take` calls.

    :meth:`step` after every vector step: ``valid`` marks training steps (False for NEXT_STEP
    reset steps), ``done`` the copies whose episode ended. Returns and lengths come from
    ``infos["episode"]["return"]`` / ``["length"]`` (or Gymnasium's ``r`` / ``l``) under mask
    ``infos["_episode"]``, else from the sums of rewards kept here; every other numeric
    per-copy field of ``infos["episode"]`` becomes ``charts/episode_<field>``.
    """

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs
        self._return = np.zeros(num_envs, dtype=np.float64)
        self._length = np.zeros(num_envs, dtype=np.int64)
        self._finished: dict[str, list[np.ndarray]] = {"return": [], "length": []}

    def restart(self) -> None:
        """The env was reset: running episodes are forgotten."""
        self._return[:] = 0.0
        self._length[:] = 0

    def step(self, reward, valid: np.ndarray, done: np.ndarray, infos) -> None:
        self._return += np.where(valid, reward, 0.0)
        self._length += valid
        if done.any():
            self._record(done, infos)
            self._return[done] = 0.0
            self._length[done] = 0

    def _record(self, done: np.ndarray, infos) -> None:
        finished = self._finished
        episode = infos.get("episode") if isinstance(infos, dict) else None
        if episode is None:  # the env reports nothing: use the sums kept here
            finished["return"].append(self._return[done].copy())
            finished["length"].append(self._length[done].astype(np.float64))
            return
        mask = np.asarray(infos.get("_episode", done), dtype=bool)
        ret = episode.get("return", episode.get("r"))
        length = episode.get("length", episode.get("l"))
        finished["return"].append(
            np.asarray(ret, np.float64)[mask] if ret is not None else self._return[mask].copy())
        finished["length"].append(
            np.asarray(length if length is not None else self._length, np.float64)[mask])
        for key, val in episode.items():
            if key in EPISODE_KEYS or key.startswith("_"):
                continue
            arr = np.asarray(val)
            if arr.shape == (self.num_envs,) and arr.dtype.kind in "biuf":
                finished.setdefault(key, []).append(arr[mask].astype(np.float64))

    def take(self) -> dict[str, float]:
        """``charts/episodes`` and, if any ended, their means; then start afresh."""
        finished, self._finished = self._finished, {"return": [], "length": []}
        metrics: dict[str, float] = {"charts/episodes": int(sum(map(len, finished["return"])))}
        if metrics["charts/episodes"] > 0:
            for key, chunks in finished.items():
                name = {"return": "charts/episodic_return",
                        "length": "charts/episodic_length"}.get(key, f"charts/episode_{key}")
                metrics[name] = float(np.concatenate(chunks).mean())
        return metrics
