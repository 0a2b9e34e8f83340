"""Proximal Policy Optimisation (clipped surrogate, GAE), CleanRL style, in one file.

Read top to bottom: :class:`PPOConfig` (hyperparameters, validated), :func:`compute_gae`,
:class:`PPO` (``collect_rollout`` -> ``update`` -> ``learn``). The algorithm receives a
Gymnasium vector environment and nothing else: it knows nothing about traces or samplers.

Environment contract
--------------------
``env`` is a ``gymnasium.vector.VectorEnv`` with a flat ``Box`` single observation space and a
``Discrete`` or flat ``Box`` single action space (see :class:`~plume.agents.networks.ActorCritic`).
Its autoreset mode is read from ``env.metadata["autoreset_mode"]`` (missing = ``NEXT_STEP``, as
in Gymnasium):

- ``SAME_STEP`` (Plume's environments): the step that ends an episode returns the first
  observation of the next one; the last observation is in ``infos["final_obs"]`` (mask
  ``infos["_final_obs"]``). Every step is a training transition.
- ``NEXT_STEP`` (Gymnasium's default): the step that ends an episode returns its last
  observation; the following ``step()`` call ignores the action and returns the reset
  observation with reward 0. Such reset steps are stored but masked out of every loss,
  normalisation and statistic. They still count as environment steps (``env_steps`` counts
  ``step()`` calls times ``num_envs``).
- ``DISABLED`` is rejected (PPO would have to reset copies itself).

Episode ends: ``terminated`` cuts the return (no bootstrap). ``truncated`` (and not
terminated) also cuts the GAE recursion, but ``gamma * V(final_obs)`` is added to the reward of
that step, so time limits and trace ends are not mistaken for terminal states.

Budget and schedules
--------------------
``learn(total_steps)`` runs ``ceil(total_steps / (n_steps * num_envs))`` updates counted from
the agent's beginning (``self.updates``): a fresh agent runs them all, an agent restored with
:meth:`PPO.load_state_dict` runs the remaining ones, so schedules continue where they stopped.
Training progress of update ``i`` (0-based) is ``p = i / n_updates``; the learning rate of that
update is ``learning_rate * (1 - p)`` when ``anneal_lr`` (CleanRL's schedule: never exactly 0),
the entropy coefficient is ``ent_coef`` or, when ``ent_coef_final`` is set, linear from
``ent_coef`` to ``ent_coef_final`` over the first ``ent_schedule_fraction`` of training and
constant after.

Seeding
-------
``seed`` drives two torch generators owned by the object (action sampling and minibatch
shuffling; stochastic evaluation) and the network initialisation, which runs under
``torch.random.fork_rng`` so the global torch RNG is left as it was. The environment is
seeded by whoever builds it (its constructor or ``env.reset(seed=...)`` before ``learn``);
PPO calls ``env.reset()`` without a seed at the start of its first ``learn``.

Metrics passed to ``callback(metrics)`` after each update
--------------------------------------------------------
- ``env_steps``: environment steps so far (``step()`` calls x ``num_envs``).
- ``updates``: updates done so far.
- ``charts/episodes``: number of episodes that ended during this rollout.
- ``charts/episodic_return``: mean return of those episodes, from ``infos["episode"]["return"]``
  (or Gymnasium's ``["r"]``) under mask ``infos["_episode"]`` when the environment provides
  it, else the sum of raw rewards PPO saw. Absent when no episode ended in this rollout.
- ``charts/episodic_length``: mean length of those episodes (``["length"]`` / ``["l"]`` or
  counted). Absent when no episode ended.
- ``charts/episode_<field>``: mean of every other numeric per-copy field of
  ``infos["episode"]`` (e.g. reward components). Absent when no episode ended.
- ``charts/learning_rate``: learning rate used in this update.
- ``charts/ent_coef``: entropy coefficient used in this update.
- ``losses/policy_loss``: clipped surrogate loss (to minimise), mean over minibatches.
- ``losses/value_loss``: 0.5 x (clipped, if ``clip_vloss``) squared value error, mean.
- ``losses/entropy``: mean policy entropy, mean over minibatches.
- ``losses/approx_kl``: estimator ``mean((ratio - 1) - log ratio)`` of KL(old || new), mean
  over the minibatches of the epochs run.
- ``losses/clipfrac``: fraction of samples with ``|ratio - 1| > clip_coef``, mean.
- ``losses/explained_variance``: ``1 - Var(returns - values) / Var(returns)`` over the rollout
  (NaN when the returns are constant).
- ``losses/n_epochs``: epochs actually run (fewer than ``n_epochs`` when ``target_kl`` stops).
- ``perf/rollout_s``: seconds spent collecting the rollout (acting, stepping, GAE).
- ``perf/update_s``: seconds spent in the gradient updates.
- ``perf/steps_per_s``: rollout env steps / (``rollout_s`` + ``update_s``).

If the callback returns ``False`` (not merely falsy), training stops after that update.
"""

from __future__ import annotations

import copy
import math
import numbers
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from plume.agents.networks import ACTIVATIONS, ActorCritic


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------
@dataclass
class PPOConfig:
    """PPO hyperparameters (defaults: CleanRL's ``ppo.py``, except the network)."""

    learning_rate: float = 3e-4
    """Adam learning rate at the start of training."""
    anneal_lr: bool = True
    """Linearly anneal the learning rate towards 0 over the budget of ``learn``."""
    n_steps: int = 128
    """Steps per environment copy per rollout; a rollout holds ``n_steps * num_envs`` steps."""
    gamma: float = 0.99
    """Discount factor, in (0, 1]."""
    gae_lambda: float = 0.95
    """GAE lambda, in [0, 1]."""
    n_epochs: int = 4
    """Passes over each rollout."""
    n_minibatches: int = 4
    """Minibatches per epoch (the rollout is split into this many near-equal parts)."""
    clip_coef: float = 0.2
    """Surrogate clipping coefficient (also used for value clipping)."""
    clip_vloss: bool = True
    """Clip the value loss around the rollout's value predictions."""
    norm_adv: bool = True
    """Normalise advantages per minibatch."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient (start value when scheduled)."""
    ent_coef_final: float | None = None
    """None: constant ``ent_coef``; else linear from ``ent_coef`` to this value."""
    ent_schedule_fraction: float = 1.0
    """Fraction of training over which the entropy schedule runs, in (0, 1]."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clipping threshold (> 0; ``math.inf`` disables clipping)."""
    target_kl: float | None = None
    """Stop the epochs of an update early when their mean approx KL exceeds this."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of both actor and critic MLPs."""
    activation: str = "tanh"
    """Hidden activation: tanh, relu or elu."""
    device: str = "cpu"
    """Torch device of the networks and rollout tensors."""

    def __post_init__(self) -> None:
        def fail(name: str, expected: str) -> None:
            raise ValueError(f"PPOConfig.{name} must be {expected}, got {getattr(self, name)!r}")

        def real(name: str) -> float:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or math.isnan(v):
                fail(name, "a real number")
            return float(v)

        def integer(name: str, minimum: int) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < minimum:
                fail(name, f"an integer >= {minimum}")

        if not real("learning_rate") > 0:
            fail("learning_rate", "> 0")
        integer("n_steps", 1)
        if not 0 < real("gamma") <= 1:
            fail("gamma", "in (0, 1]")
        if not 0 <= real("gae_lambda") <= 1:
            fail("gae_lambda", "in [0, 1]")
        integer("n_epochs", 1)
        integer("n_minibatches", 1)
        if not real("clip_coef") > 0:
            fail("clip_coef", "> 0")
        if not real("ent_coef") >= 0:
            fail("ent_coef", ">= 0")
        if self.ent_coef_final is not None and not real("ent_coef_final") >= 0:
            fail("ent_coef_final", "None or >= 0")
        if not 0 < real("ent_schedule_fraction") <= 1:
            fail("ent_schedule_fraction", "in (0, 1]")
        if not real("vf_coef") >= 0:
            fail("vf_coef", ">= 0")
        if not real("max_grad_norm") > 0:
            fail("max_grad_norm", "> 0 (math.inf disables clipping)")
        if self.target_kl is not None and not real("target_kl") > 0:
            fail("target_kl", "None or > 0")
        for name in ("anneal_lr", "clip_vloss", "norm_adv"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                fail(name, "a bool")
        try:
            sizes = tuple(self.hidden_sizes)
        except TypeError:
            fail("hidden_sizes", "a sequence of positive integers")
        if not all(
            isinstance(h, numbers.Integral) and not isinstance(h, bool) and h >= 1 for h in sizes
        ):
            fail("hidden_sizes", "a sequence of positive integers")
        self.hidden_sizes = tuple(int(h) for h in sizes)
        if self.activation not in ACTIVATIONS:
            fail("activation", f"one of {sorted(ACTIVATIONS)}")
        try:
            torch.device(self.device)
        except (RuntimeError, TypeError):
            fail("device", "a torch device string such as 'cpu' or 'cuda:0'")

    def learning_rate_at(self, progress: float) -> float:
        """Learning rate at training progress ``progress`` in [0, 1]."""
        if not self.anneal_lr:
            return float(self.learning_rate)
        return linear_schedule(self.learning_rate, 0.0, progress)

    def ent_coef_at(self, progress: float) -> float:
        """Entropy coefficient at training progress ``progress`` in [0, 1]."""
        if self.ent_coef_final is None:
            return float(self.ent_coef)
        return linear_schedule(
            self.ent_coef, self.ent_coef_final, progress, self.ent_schedule_fraction
        )


def linear_schedule(start: float, end: float, progress: float, fraction: float = 1.0) -> float:
    """``start`` -> ``end`` linearly over progress ``[0, fraction]``, ``end`` after."""
    p = min(max(progress / fraction, 0.0), 1.0)
    return float(start + p * (end - start))


# ---------------------------------------------------------------------------------------------
# Generalised advantage estimation
# ---------------------------------------------------------------------------------------------
def compute_gae(rewards, values, next_values, dones, gamma: float, lam: float):
    """GAE(gamma, lambda) advantages and returns for a ``(T, ...)`` rollout.

    ``rewards[t]``: reward of step t (truncation bootstrap already added);
    ``values[t]``: V(s_t); ``next_values[t]``: V(s_{t+1}), the observation the policy saw
    after step t (only used where ``dones[t]`` is 0); ``dones[t]``: 1 if step t ended the
    episode (terminated or truncated), which stops both bootstrap and the GAE recursion.

    delta_t = r_t + gamma (1 - d_t) V(s_{t+1}) - V(s_t)
    A_t     = delta_t + gamma lambda (1 - d_t) A_{t+1}
    Returns ``(advantages, returns = advantages + values)``, torch tensors, or numpy arrays when
    ``rewards`` is a numpy array.
    """
    as_numpy = isinstance(rewards, np.ndarray)
    r = torch.as_tensor(rewards)
    dtype = r.dtype if r.is_floating_point() else torch.float32
    r = r.to(dtype)
    v, nv, d = (
        torch.as_tensor(x).to(device=r.device, dtype=dtype) for x in (values, next_values, dones)
    )
    not_done = 1.0 - d
    deltas = r + gamma * not_done * nv - v
    advantages = torch.empty_like(deltas)
    last = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        last = deltas[t] + (gamma * lam) * not_done[t] * last
        advantages[t] = last
    returns = advantages + v
    if as_numpy:
        return advantages.numpy(), returns.numpy()
    return advantages, returns


# ---------------------------------------------------------------------------------------------
# Rollout storage
# ---------------------------------------------------------------------------------------------
@dataclass
class Rollout:
    """One rollout, flattened to ``B = n_steps * num_envs`` samples for the update.

    The tensors are views of the agent's preallocated buffers: valid until the next
    :meth:`PPO.collect_rollout`.
    """

    obs: torch.Tensor  # (B, obs_dim)
    actions: torch.Tensor  # (B,) int64 or (B, act_dim) policy actions
    log_probs: torch.Tensor  # (B,)
    values: torch.Tensor  # (B,)
    advantages: torch.Tensor  # (B,)
    returns: torch.Tensor  # (B,)
    valid: torch.Tensor  # (n_valid,) indices of training samples (all but NEXT_STEP reset steps)
    rewards: np.ndarray  # (n_steps, num_envs) rewards incl. truncation bootstrap
    dones: np.ndarray  # (n_steps, num_envs) terminated | truncated
    episode_metrics: dict[str, float]  # charts/* entries for the episodes that ended


Callback = Callable[[dict[str, Any]], Any]
_EPISODE_KEYS = ("return", "r", "length", "l")  # mapped to charts/episodic_{return,length}


# ---------------------------------------------------------------------------------------------
# The agent
# ---------------------------------------------------------------------------------------------
class PPO:
    """PPO on a Gymnasium vector environment (see the module docstring for the contract).

    Attributes: ``env``, ``config``, ``policy`` (:class:`ActorCritic`), ``optimizer`` (Adam,
    eps 1e-5), ``env_steps``, ``updates``, ``batch_size`` (= ``n_steps * num_envs``),
    ``last_rollout`` (the latest :class:`Rollout`, valid until the next one is collected; its
    advantages feed learner-statistics consumers such as PLR's value-L1 score).
    """

    def __init__(
        self, env: gym.vector.VectorEnv, config: PPOConfig | None = None, seed: int = 0
    ) -> None:
        self.env = env
        self.config = config = config if config is not None else PPOConfig()
        self.seed = int(seed)
        self.device = torch.device(config.device)
        self.num_envs = int(env.num_envs)
        self.batch_size = config.n_steps * self.num_envs
        if config.n_minibatches > self.batch_size:
            raise ValueError(
                f"PPOConfig.n_minibatches ({config.n_minibatches}) exceeds the rollout size "
                f"n_steps * num_envs = {self.batch_size}"
            )
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        try:
            mode = AutoresetMode(mode.value if isinstance(mode, AutoresetMode) else mode)
        except ValueError:
            raise ValueError(f"unknown env.metadata['autoreset_mode'] {mode!r}") from None
        if mode is AutoresetMode.DISABLED:
            raise ValueError(
                "PPO needs an autoresetting vector env (AutoresetMode.SAME_STEP or NEXT_STEP); "
                "got AutoresetMode.DISABLED"
            )
        self.autoreset_mode = mode

        # Seeding: network init under a forked global RNG; sampling from generators we own.
        init_seed, sample_seed, eval_seed = np.random.SeedSequence(self.seed).generate_state(3)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(init_seed))
            self.policy = ActorCritic(
                env.single_observation_space,
                env.single_action_space,
                hidden_sizes=config.hidden_sizes,
                activation=config.activation,
            ).to(self.device)
        self.generator = torch.Generator(device=self.device).manual_seed(int(sample_seed))
        self.eval_generator = torch.Generator(device=self.device).manual_seed(int(eval_seed))
        self.optimizer = torch.optim.Adam(
            self.policy.parameters(), lr=config.learning_rate, eps=1e-5
        )

        self.env_steps = 0
        self.updates = 0
        self.last_rollout: Rollout | None = None

        # Preallocated rollout buffers (n_steps, num_envs, ...).
        T, N = config.n_steps, self.num_envs
        obs_dim = self.policy.obs_dim
        self._obs_buf = torch.zeros((T, N, obs_dim), dtype=torch.float32, device=self.device)
        if self.policy.discrete:
            self._act_buf = torch.zeros((T, N), dtype=torch.int64, device=self.device)
        else:
            self._act_buf = torch.zeros(
                (T, N, self.policy.act_dim), dtype=torch.float32, device=self.device
            )
        self._logp_buf = torch.zeros((T, N), dtype=torch.float32, device=self.device)
        self._value_buf = torch.zeros((T, N), dtype=torch.float32, device=self.device)
        self._rewards = np.zeros((T, N), dtype=np.float32)
        self._dones = np.zeros((T, N), dtype=np.float32)
        self._valid = np.ones((T, N), dtype=bool)

        # Environment state carried between rollouts (set by the first learn()).
        self._obs: np.ndarray | None = None
        self._reset_step_next = np.zeros(N, dtype=bool)  # NEXT_STEP: next step() is a reset
        self._ep_return = np.zeros(N, dtype=np.float64)  # fallback episode statistics
        self._ep_length = np.zeros(N, dtype=np.int64)

    # -----------------------------------------------------------------------------------------
    def learn(self, total_steps: int, callback: Callback | None = None) -> None:
        """Train until ``ceil(total_steps / batch_size)`` updates are done (see module doc)."""
        if (
            isinstance(total_steps, bool)
            or not isinstance(total_steps, numbers.Integral)
            or total_steps < 1
        ):
            raise ValueError(f"total_steps must be a positive integer, got {total_steps!r}")
        n_updates = math.ceil(int(total_steps) / self.batch_size)
        if self._obs is None:
            self._obs, _ = self.env.reset()
            self._reset_step_next[:] = False
            self._ep_return[:] = 0.0
            self._ep_length[:] = 0

        while self.updates < n_updates:
            progress = self.updates / n_updates
            learning_rate = self.config.learning_rate_at(progress)
            ent_coef = self.config.ent_coef_at(progress)

            t0 = time.perf_counter()
            rollout = self.collect_rollout()
            self.last_rollout = rollout  # read by learner-statistics consumers (e.g. PLR)
            t1 = time.perf_counter()
            losses = self.update(rollout, learning_rate, ent_coef)
            t2 = time.perf_counter()
            self.updates += 1

            metrics: dict[str, Any] = {"env_steps": self.env_steps, "updates": self.updates}
            metrics.update(rollout.episode_metrics)
            metrics["charts/learning_rate"] = learning_rate
            metrics["charts/ent_coef"] = ent_coef
            metrics.update(losses)
            metrics["perf/rollout_s"] = t1 - t0
            metrics["perf/update_s"] = t2 - t1
            metrics["perf/steps_per_s"] = self.batch_size / max(t2 - t0, 1e-12)
            if callback is not None and callback(metrics) is False:
                break

    # -----------------------------------------------------------------------------------------
    @torch.no_grad()
    def collect_rollout(self) -> Rollout:
        """Step the env ``n_steps`` times with the current policy; compute GAE."""
        if self._obs is None:
            raise RuntimeError(
                "call learn() (or reset the agent's env state) before collect_rollout()"
            )
        cfg, N = self.config, self.num_envs
        next_step_mode = self.autoreset_mode is AutoresetMode.NEXT_STEP
        ep_returns: list[np.ndarray] = []
        ep_lengths: list[np.ndarray] = []
        ep_extras: dict[str, list[np.ndarray]] = {}

        for t in range(cfg.n_steps):
            obs_t = self._obs_buf[t]
            obs_t.copy_(torch.from_numpy(np.asarray(self._obs)))
            valid = ~self._reset_step_next
            self._valid[t] = valid

            actions, log_prob, value = self.policy.act(obs_t, generator=self.generator)
            self._act_buf[t] = actions
            self._logp_buf[t] = log_prob
            self._value_buf[t] = value

            next_obs, reward, terminated, truncated, infos = self.env.step(
                self.policy.to_env(actions).cpu().numpy()
            )
            self.env_steps += N
            terminated = np.asarray(terminated, dtype=bool)
            truncated = np.asarray(truncated, dtype=bool)
            done = terminated | truncated
            self._rewards[t] = reward
            self._dones[t] = done

            # Truncated, not terminated: bootstrap with gamma * V(last observation).
            bootstrap = truncated & ~terminated
            if bootstrap.any():
                idx = np.flatnonzero(bootstrap)
                final = self._final_obs(next_obs, infos, idx)
                final_t = torch.as_tensor(final, dtype=torch.float32, device=self.device)
                self._rewards[t, idx] += cfg.gamma * self.policy.value(final_t).cpu().numpy()

            # Episode statistics (the env's own when it reports them).
            self._ep_return += np.where(valid, reward, 0.0)
            self._ep_length += valid
            if done.any():
                self._record_episodes(done, infos, ep_returns, ep_lengths, ep_extras)
                self._ep_return[done] = 0.0
                self._ep_length[done] = 0
            if next_step_mode:
                self._reset_step_next = done
            self._obs = next_obs

        # GAE over the rollout; V(s_T) bootstraps the unfinished episodes.
        last_value = self.policy.value(
            torch.as_tensor(np.asarray(self._obs), dtype=torch.float32, device=self.device)
        )
        next_values = torch.cat([self._value_buf[1:], last_value.unsqueeze(0)])
        rewards = torch.from_numpy(self._rewards).to(self.device)
        dones = torch.from_numpy(self._dones).to(self.device)
        advantages, returns = compute_gae(
            rewards, self._value_buf, next_values, dones, cfg.gamma, cfg.gae_lambda
        )

        B = self.batch_size
        valid_idx = torch.from_numpy(np.flatnonzero(self._valid.reshape(-1))).to(self.device)
        episode_metrics: dict[str, float] = {
            "charts/episodes": int(sum(len(x) for x in ep_returns))
        }
        if episode_metrics["charts/episodes"] > 0:
            episode_metrics["charts/episodic_return"] = float(np.concatenate(ep_returns).mean())
            episode_metrics["charts/episodic_length"] = float(np.concatenate(ep_lengths).mean())
            for key, chunks in ep_extras.items():
                episode_metrics[f"charts/episode_{key}"] = float(np.concatenate(chunks).mean())
        return Rollout(
            obs=self._obs_buf.reshape(B, -1),
            actions=self._act_buf.reshape((B,) + self._act_buf.shape[2:]),
            log_probs=self._logp_buf.reshape(B),
            values=self._value_buf.reshape(B),
            advantages=advantages.reshape(B),
            returns=returns.reshape(B),
            valid=valid_idx,
            rewards=self._rewards.copy(),
            dones=self._dones.copy(),
            episode_metrics=episode_metrics,
        )

    def _final_obs(self, next_obs: np.ndarray, infos: dict, idx: np.ndarray) -> np.ndarray:
        """Last observations of the episodes of copies ``idx`` that just ended."""
        if self.autoreset_mode is AutoresetMode.NEXT_STEP:
            return np.asarray(next_obs)[idx]
        if "final_obs" not in infos:
            raise KeyError(
                "SAME_STEP vector env truncated an episode without infos['final_obs'] "
                "(needed to bootstrap the value of truncated episodes)"
            )
        final = infos["final_obs"]
        if isinstance(final, np.ndarray) and final.dtype != object:
            return final[idx]
        return np.stack([np.asarray(final[i]) for i in idx])

    def _record_episodes(self, done, infos, ep_returns, ep_lengths, ep_extras) -> None:
        """Append the statistics of the episodes that ended at this step."""
        episode = infos.get("episode") if isinstance(infos, dict) else None
        if episode is None:  # the env reports nothing: use the sums PPO kept
            ep_returns.append(self._ep_return[done].copy())
            ep_lengths.append(self._ep_length[done].astype(np.float64))
            return
        mask = np.asarray(infos.get("_episode", done), dtype=bool)
        ret = episode.get("return", episode.get("r"))
        length = episode.get("length", episode.get("l"))
        ep_returns.append(
            np.asarray(ret, np.float64)[mask] if ret is not None else self._ep_return[mask].copy()
        )
        ep_lengths.append(
            np.asarray(length if length is not None else self._ep_length, np.float64)[mask]
        )
        for key, val in episode.items():
            if key in _EPISODE_KEYS or key.startswith("_"):
                continue
            arr = np.asarray(val)
            if arr.shape == (self.num_envs,) and arr.dtype.kind in "biuf":
                ep_extras.setdefault(key, []).append(arr[mask].astype(np.float64))

    # -----------------------------------------------------------------------------------------
    def update(self, rollout: Rollout, learning_rate: float, ent_coef: float) -> dict[str, float]:
        """``n_epochs`` passes of clipped-surrogate minibatch SGD over ``rollout``."""
        cfg = self.config
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        idx_all = rollout.valid
        n = idx_all.numel()
        stats: dict[str, list[torch.Tensor]] = {k: [] for k in ("pg", "v", "ent", "kl", "clip")}
        epochs_run = 0
        for _ in range(cfg.n_epochs):
            perm = idx_all[torch.randperm(n, generator=self.generator, device=self.device)]
            epoch_kl = []
            for mb in torch.tensor_split(perm, cfg.n_minibatches):
                log_prob, entropy, value = self.policy.evaluate(
                    rollout.obs[mb], rollout.actions[mb]
                )
                logratio = log_prob - rollout.log_probs[mb]
                ratio = logratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1.0) - logratio).mean()
                    clipfrac = ((ratio - 1.0).abs() > cfg.clip_coef).float().mean()

                adv = rollout.advantages[mb]
                if cfg.norm_adv and adv.numel() > 1:
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg_loss = torch.max(
                    -adv * ratio, -adv * ratio.clamp(1.0 - cfg.clip_coef, 1.0 + cfg.clip_coef)
                ).mean()

                ret, old_value = rollout.returns[mb], rollout.values[mb]
                if cfg.clip_vloss:
                    v_clipped = old_value + (value - old_value).clamp(-cfg.clip_coef, cfg.clip_coef)
                    v_loss = 0.5 * torch.max((value - ret) ** 2, (v_clipped - ret) ** 2).mean()
                else:
                    v_loss = 0.5 * ((value - ret) ** 2).mean()
                ent = entropy.mean()
                loss = pg_loss - ent_coef * ent + cfg.vf_coef * v_loss

                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
                self.optimizer.step()

                for key, val in (
                    ("pg", pg_loss),
                    ("v", v_loss),
                    ("ent", ent),
                    ("kl", approx_kl),
                    ("clip", clipfrac),
                ):
                    stats[key].append(val.detach())
                epoch_kl.append(approx_kl)
            epochs_run += 1
            if cfg.target_kl is not None and torch.stack(epoch_kl).mean().item() > cfg.target_kl:
                break

        y_pred, y_true = rollout.values[idx_all], rollout.returns[idx_all]
        var_y = y_true.var().item() if n > 1 else 0.0
        explained_var = float("nan") if var_y == 0 else 1.0 - (y_true - y_pred).var().item() / var_y
        mean = {k: torch.stack(v).mean().item() for k, v in stats.items()}
        return {
            "losses/policy_loss": mean["pg"],
            "losses/value_loss": mean["v"],
            "losses/entropy": mean["ent"],
            "losses/approx_kl": mean["kl"],
            "losses/clipfrac": mean["clip"],
            "losses/explained_variance": explained_var,
            "losses/n_epochs": epochs_run,
        }

    # -----------------------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """Environment actions for ``obs``, numpy in and out, without gradients.

        ``obs`` is one observation ``(obs_dim,)`` (-> one action: a numpy integer scalar for
        ``Discrete``, ``(act_dim,)`` for ``Box``) or a batch ``(B, obs_dim)`` (-> ``(B,)`` or
        ``(B, act_dim)``). Box actions are clipped to the bounds; stochastic draws use a
        generator separate from training's, so evaluating never perturbs training.
        """
        obs_np = np.asarray(obs, dtype=np.float32)
        single = obs_np.ndim == 1
        x = torch.from_numpy(obs_np).to(self.device)
        if single:
            x = x.unsqueeze(0)
        actions, _ = self.policy.sample_actions(x, deterministic, generator=self.eval_generator)
        out = self.policy.to_env(actions).cpu().numpy()
        return out[0] if single else out

    def state_dict(self) -> dict[str, Any]:
        """Model, optimiser, counters and RNG states (the env's state is not included)."""
        return {
            "model": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "env_steps": self.env_steps,
            "updates": self.updates,
            "torch_rng": self.generator.get_state(),
            "eval_rng": self.eval_generator.get_state(),
            "config": asdict(self.config),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the next ``learn`` resets the env and continues."""
        self.policy.load_state_dict(state["model"])
        # Deep copy: torch's Optimizer.load_state_dict keeps references to same-device tensors,
        # so an in-memory checkpoint would otherwise share Adam moments with its source.
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        self.env_steps = int(state["env_steps"])
        self.updates = int(state["updates"])
        self.generator.set_state(state["torch_rng"])
        self.eval_generator.set_state(state["eval_rng"])
        self._obs = None
