"""What PPO and A2C honestly share: the actor-critic hyperparameters and their schedules, GAE,
the rollout buffer that collects ``n_steps`` per copy, and the learn loop around an update.

Each algorithm (``ppo.py``, ``a2c.py``) adds its own loss and optimiser in ``update``.

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
- ``DISABLED`` is rejected (the algorithm would have to reset copies itself).

Episode ends: ``terminated`` cuts the return (no bootstrap). ``truncated`` (and not
terminated) also cuts the GAE recursion, but ``gamma * V(final_obs)`` is added to the reward of
that step, so time limits and trace ends are not mistaken for terminal states.

Budget and schedules
--------------------
``learn(until_env_steps)`` runs updates (one per rollout of ``n_steps * num_envs`` steps) until
``env_steps >= until_env_steps``. Training progress of update ``i`` (0-based) is ``p = i /
n_updates`` with ``n_updates = ceil(total_env_steps / batch_size)`` (``total_env_steps``: the
constructor's, else the first ``until_env_steps``; it grows to a later, larger target). The
learning rate of that update is ``learning_rate * (1 - p)`` when ``anneal_lr`` (CleanRL's
schedule: never exactly 0), the entropy coefficient is ``ent_coef`` or, when
``ent_coef_final`` is set, linear from ``ent_coef`` to ``ent_coef_final`` over the first
``ent_schedule_fraction`` of training and constant after. A restored agent continues its
schedule from ``updates``.

Seeding
-------
``seed`` drives two torch generators owned by the object (action sampling and minibatch
shuffling; stochastic evaluation) and the network initialisation, which runs under
``torch.random.fork_rng`` so the global torch RNG is left as it was. The environment is
seeded by whoever builds it; the first ``learn`` calls ``env.reset()`` without a seed.

Metrics of every update record
------------------------------
- ``env_steps``, ``updates``, ``wall_time`` (:func:`~plume.agents.base.update_record`).
- ``charts/episodes``: number of episodes that ended during this rollout.
- ``charts/episodic_return`` / ``charts/episodic_length``: mean return and length of those
  episodes, from ``infos["episode"]["return"]`` / ``["length"]`` (or Gymnasium's ``r`` /
  ``l``) under mask ``infos["_episode"]`` when the environment reports them, else the sums
  the algorithm saw. Absent when no episode ended in this rollout.
- ``charts/episode_<field>``: mean of every other numeric per-copy field of
  ``infos["episode"]`` (e.g. reward components; not Gymnasium's wall time ``t``).
- ``charts/learning_rate``, ``charts/ent_coef``: the values used in this update.
- ``losses/*``: the algorithm's (see its module), ``losses/explained_variance``:
  ``1 - Var(returns - values) / Var(returns)`` over the rollout (NaN when constant).
- ``perf/rollout_s``, ``perf/update_s``, ``perf/steps_per_s`` (rollout steps / both).

Learner signal (while ``track_learner_signal``): the GAE advantage of every step,
``(n_steps, num_envs)`` per rollout.
"""

from __future__ import annotations

import copy
import math
import time
from abc import abstractmethod
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from plume.agents.base import (
    Algorithm,
    GreedyPolicy,
    NonFiniteTraining,
    check_bool,
    check_budget,
    check_finite,
    check_int,
    check_network,
    check_real,
    fail_field,
    linear_schedule,
    seeded_init,
    update_record,
)
from plume.agents.networks import ActorCritic
from plume.agents.vector_env import EpisodeStats, autoreset_mode, final_observations

UPDATE_PRECISIONS = {"float32": None, "bfloat16": torch.bfloat16}


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------
@dataclass
class ActorCriticConfig:
    """Hyperparameters every actor-critic here has (schedules: the module docstring)."""

    learning_rate: float = 3e-4
    """Learning rate at the start of training."""
    anneal_lr: bool = True
    """Linearly anneal the learning rate towards 0 over the budget."""
    n_steps: int = 128
    """Steps per environment copy per rollout; a rollout holds ``n_steps * num_envs`` steps."""
    gamma: float = 0.99
    """Discount factor, in (0, 1]."""
    gae_lambda: float = 0.95
    """GAE lambda, in [0, 1] (1 = n-step returns bootstrapped at the rollout's end)."""
    norm_adv: bool = True
    """Normalise advantages (per minibatch)."""
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
    hidden_sizes: tuple[int, ...] = (64, 64)
    """MLP hidden layers (``network=mlp``: actor and critic; else the heads)."""
    activation: str = "tanh"
    """Hidden activation: tanh, relu, elu or gelu."""
    network: str = "mlp"
    """mlp, or the paper's ABR extractors gelato / pensieve with MLP heads."""
    device: str = "cpu"
    """Torch device of the networks and rollout tensors."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (Box actions only)."""
    update_precision: str = "float32"
    """float32, or bfloat16: autocast of the update's forward passes, output layers in float32
    (benchmarks/bench_learners.py measures speed and score)."""
    fused_optimizer: bool = False
    """Torch's fused Adam kernel (Adam only)."""
    compile_update: bool = False
    """``torch.compile`` the update's forward pass (about 20 s of compilation first; needs a
    C++ compiler; benchmarks/bench_learners.py measures it)."""

    def __post_init__(self) -> None:
        if not check_real(self, "learning_rate") > 0:
            fail_field(self, "learning_rate", "> 0")
        check_int(self, "n_steps", 1)
        if not 0 < check_real(self, "gamma") <= 1:
            fail_field(self, "gamma", "in (0, 1]")
        if not 0 <= check_real(self, "gae_lambda") <= 1:
            fail_field(self, "gae_lambda", "in [0, 1]")
        if not check_real(self, "ent_coef") >= 0:
            fail_field(self, "ent_coef", ">= 0")
        if self.ent_coef_final is not None and not check_real(self, "ent_coef_final") >= 0:
            fail_field(self, "ent_coef_final", "None or >= 0")
        if not 0 < check_real(self, "ent_schedule_fraction") <= 1:
            fail_field(self, "ent_schedule_fraction", "in (0, 1]")
        if not check_real(self, "vf_coef") >= 0:
            fail_field(self, "vf_coef", ">= 0")
        if not check_real(self, "max_grad_norm") > 0:
            fail_field(self, "max_grad_norm", "> 0 (math.inf disables clipping)")
        check_real(self, "log_std_init")
        check_bool(self, "anneal_lr", "norm_adv", "fused_optimizer", "compile_update")
        check_network(self)
        if self.update_precision not in UPDATE_PRECISIONS:
            fail_field(self, "update_precision", f"one of {list(UPDATE_PRECISIONS)}")

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
# Rollout storage and collection
# ---------------------------------------------------------------------------------------------
@dataclass
class Rollout:
    """One rollout, flattened to ``B = n_steps * num_envs`` samples for the update.

    The tensors are views of the collector's preallocated buffers: valid until the next
    :meth:`RolloutBuffer.collect`.
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
    forward: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    """``(log_prob, entropy, value)`` of every sample with their autograd graph, when the
    update's forward pass ran as the rollout ended (see :meth:`RolloutBuffer.collect`)."""


def explained_variance(y_pred: torch.Tensor, y_true: torch.Tensor) -> float:
    """``1 - Var(returns - values) / Var(returns)`` over a rollout's training samples."""
    var_y = y_true.var().item() if y_true.numel() > 1 else 0.0
    return float("nan") if var_y == 0 else 1.0 - (y_true - y_pred).var().item() / var_y


class RolloutBuffer:
    """Preallocated ``(n_steps, num_envs, ...)`` storage, filled by stepping ``env`` with
    ``policy``; keeps the env's current observation and episode sums between rollouts."""

    def __init__(self, env, policy: ActorCritic, n_steps: int, device: torch.device,
                 who: str) -> None:
        self.env, self.policy, self.n_steps, self.device = env, policy, n_steps, device
        self.num_envs = N = int(env.num_envs)
        self.autoreset_mode = autoreset_mode(env, who)
        T = n_steps
        self.obs = torch.zeros((T, N, policy.obs_dim), dtype=torch.float32, device=device)
        if policy.discrete:
            self.actions = torch.zeros((T, N), dtype=torch.int64, device=device)
        else:
            self.actions = torch.zeros((T, N, policy.act_dim), dtype=torch.float32,
                                       device=device)
        self.log_probs = torch.zeros((T, N), dtype=torch.float32, device=device)
        self.values = torch.zeros((T, N), dtype=torch.float32, device=device)
        self.rewards = np.zeros((T, N), dtype=np.float32)
        self.dones = np.zeros((T, N), dtype=np.float32)
        self.valid = np.ones((T, N), dtype=bool)
        self.current_obs: np.ndarray | None = None  # None: reset at the next collect
        self._reset_step_next = np.zeros(N, dtype=bool)  # NEXT_STEP: next step() is a reset
        self.episodes = EpisodeStats(N)

    def episode_state(self) -> dict[str, Any]:
        """The episodes in flight as this buffer sees them (see Algorithm.episode_state)."""
        return {"obs": None if self.current_obs is None else np.array(self.current_obs),
                "reset_step_next": self._reset_step_next.copy(),
                "episodes": copy.deepcopy(self.episodes)}

    def load_episode_state(self, state: dict[str, Any]) -> None:
        self.current_obs = None if state["obs"] is None else np.array(state["obs"])
        self._reset_step_next = state["reset_step_next"].copy()
        self.episodes = copy.deepcopy(state["episodes"])

    def start(self) -> None:
        """Reset the env if no episode is running (first rollout, or after a restore)."""
        if self.current_obs is None:
            self.current_obs, _ = self.env.reset()
            self._reset_step_next[:] = False
            self.episodes.restart()

    @torch.no_grad()
    def collect(self, gamma: float, gae_lambda: float, generator: torch.Generator,
                forward=None) -> Rollout:
        """Step the env ``n_steps`` times with the current policy; compute GAE.

        ``forward``: None, or the update's ``forward(obs, actions) -> (log_prob, entropy,
        value)`` for an algorithm whose one gradient step uses the parameters that acted
        (A2C). Then the critic does not run at every step: ``forward`` runs once over the
        whole rollout, with gradients, its values give GAE, and its outputs travel in
        :attr:`Rollout.forward` for the update to reuse.
        """
        if self.current_obs is None:
            raise RuntimeError("call learn() (or start()) before collecting a rollout")
        next_step_mode = self.autoreset_mode is AutoresetMode.NEXT_STEP
        for t in range(self.n_steps):
            valid = ~self._reset_step_next
            self.valid[t] = valid
            reward, done, infos = self._step(t, gamma, generator, with_critic=forward is None)
            self.episodes.step(reward, valid, done, infos)
            if next_step_mode:
                self._reset_step_next = done
        return self._finish(gamma, gae_lambda, forward)

    def _step(self, t: int, gamma: float, generator: torch.Generator, with_critic: bool):
        obs_t = self.obs[t]
        obs_t.copy_(torch.from_numpy(np.asarray(self.current_obs)))
        if with_critic:
            actions, log_prob, self.values[t] = self.policy.act(obs_t, generator=generator)
        else:
            actions, log_prob = self.policy.sample_actions(obs_t, generator=generator)
        self.actions[t] = actions
        self.log_probs[t] = log_prob
        next_obs, reward, terminated, truncated, infos = self.env.step(
            self.policy.to_env(actions).cpu().numpy()
        )
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        done = terminated | truncated
        self.rewards[t] = reward
        self.dones[t] = done
        # Truncated, not terminated: bootstrap with gamma * V(last observation).
        bootstrap = truncated & ~terminated
        if bootstrap.any():
            idx = np.flatnonzero(bootstrap)
            final = final_observations(next_obs, infos, idx, self.autoreset_mode)
            final_t = torch.as_tensor(final, dtype=torch.float32, device=self.device)
            self.rewards[t, idx] += gamma * self.policy.value(final_t).cpu().numpy()
        self.current_obs = next_obs
        return reward, done, infos

    def _finish(self, gamma: float, gae_lambda: float, forward) -> Rollout:
        """GAE over the rollout (V(s_T) bootstraps the unfinished episodes) and its metrics."""
        B = self.n_steps * self.num_envs
        obs = self.obs.reshape(B, -1)
        actions = self.actions.reshape((B,) + self.actions.shape[2:])
        outputs = None
        if forward is not None:
            with torch.enable_grad():
                outputs = forward(obs, actions)
            self.values.copy_(outputs[2].detach().reshape(self.values.shape))
        last_value = self.policy.value(
            torch.as_tensor(np.asarray(self.current_obs), dtype=torch.float32, device=self.device)
        )
        next_values = torch.cat([self.values[1:], last_value.unsqueeze(0)])
        rewards = torch.from_numpy(self.rewards).to(self.device)
        dones = torch.from_numpy(self.dones).to(self.device)
        advantages, returns = compute_gae(
            rewards, self.values, next_values, dones, gamma, gae_lambda
        )
        valid_idx = torch.from_numpy(np.flatnonzero(self.valid.reshape(-1))).to(self.device)
        return Rollout(
            obs=obs,
            actions=actions,
            log_probs=self.log_probs.reshape(B),
            values=self.values.reshape(B),
            advantages=advantages.reshape(B),
            returns=returns.reshape(B),
            valid=valid_idx,
            rewards=self.rewards.copy(),
            dones=self.dones.copy(),
            episode_metrics=self.episodes.take(),
            forward=outputs,
        )


# ---------------------------------------------------------------------------------------------
# The learn loop around an update
# ---------------------------------------------------------------------------------------------
class ActorCriticAlgorithm(Algorithm):
    """Rollout -> ``update`` -> record, with the schedules of :class:`ActorCriticConfig`.

    Attributes: ``env``, ``config``, ``policy`` (:class:`ActorCritic`), ``optimizer``,
    ``env_steps``, ``updates``, ``batch_size`` (= ``n_steps * num_envs``), ``rollouts`` (the
    :class:`RolloutBuffer`).
    """

    LEARNER_SIGNAL = "GAE advantage"

    def __init__(self, env: gym.vector.VectorEnv, config: ActorCriticConfig | None = None,
                 seed: int = 0, total_env_steps: int | None = None) -> None:
        self.env = env
        self.config = config = config if config is not None else self.CONFIG()
        self.seed = int(seed)
        self.device = torch.device(config.device)
        self.num_envs = int(env.num_envs)
        self.batch_size = config.n_steps * self.num_envs
        self.total_env_steps = (None if total_env_steps is None
                                else check_budget("total_env_steps", total_env_steps))
        who = type(self).__name__
        autoreset_mode(env, who)  # refuse DISABLED before building anything
        # Seeding: network init under a forked global RNG; sampling from generators we own.
        init_seed, sample_seed, eval_seed = np.random.SeedSequence(self.seed).generate_state(3)
        with seeded_init(init_seed):
            self.policy = ActorCritic(
                env.single_observation_space,
                env.single_action_space,
                hidden_sizes=config.hidden_sizes,
                activation=config.activation,
                network=config.network,
                log_std_init=config.log_std_init,
            ).to(self.device)
        self.policy.update_dtype = UPDATE_PRECISIONS[config.update_precision]
        self.generator = torch.Generator(device=self.device).manual_seed(int(sample_seed))
        self.eval_generator = torch.Generator(device=self.device).manual_seed(int(eval_seed))
        self.optimizer = self.make_optimizer()
        # What ``update`` calls for log-probabilities, entropies and values of a minibatch.
        self.evaluate_actions = (torch.compile(self.policy.evaluate) if config.compile_update
                                 else self.policy.evaluate)
        self.env_steps = 0
        self.updates = 0
        self.rollouts = RolloutBuffer(env, self.policy, config.n_steps, self.device, who)
        self._signal: list[np.ndarray] = []

    @abstractmethod
    def make_optimizer(self) -> torch.optim.Optimizer:
        """The optimiser over ``self.policy``'s parameters."""

    @abstractmethod
    def update(self, rollout: Rollout, learning_rate: float, ent_coef: float) -> dict[str, float]:
        """Gradient step(s) on one rollout; returns its ``losses/*`` metrics."""

    def rollout_forward(self):
        """None, or the update's forward pass to run as each rollout ends (see
        :meth:`RolloutBuffer.collect`); only for one gradient step per rollout."""
        return

    def collect_rollout(self) -> Rollout:
        """One rollout with the current policy (its advantages join the learner signal)."""
        cfg = self.config
        rollout = self.rollouts.collect(cfg.gamma, cfg.gae_lambda, self.generator,
                                        self.rollout_forward())
        self.count_rollout(rollout.advantages.reshape(cfg.n_steps, -1))
        return rollout

    def count_rollout(self, advantages: torch.Tensor) -> None:
        """A rollout was collected, here or by K seeds trained together
        (:mod:`plume.agents.lockstep`): its env steps, and its ``(n_steps, num_envs)`` GAE
        advantages for the learner signal."""
        self.env_steps += self.batch_size
        if self.track_learner_signal:
            self._signal.append(advantages.cpu().numpy().astype(np.float64))

    def learn(self, until_env_steps: int) -> list[dict[str, Any]]:
        """Updates until ``env_steps >= until_env_steps``; one record per update."""
        until = check_budget("until_env_steps", until_env_steps)
        self.total_env_steps = max(self.total_env_steps or until, until)
        n_updates = math.ceil(self.total_env_steps / self.batch_size)
        self.rollouts.start()
        records = []
        while self.env_steps < until:
            progress = self.updates / n_updates
            learning_rate = self.config.learning_rate_at(progress)
            ent_coef = self.config.ent_coef_at(progress)
            t0 = time.perf_counter()
            rollout = self._collect_checked()
            t1 = time.perf_counter()
            losses = self.update(rollout, learning_rate, ent_coef)
            t2 = time.perf_counter()
            self.updates += 1
            # losses each update; weights that overflowed show when acting next
            # (_collect_checked) or as NaN losses of the next update
            check_finite(self.updates, losses)
            records.append(update_record(
                self.env_steps, self.updates, **rollout.episode_metrics,
                **{"charts/learning_rate": learning_rate, "charts/ent_coef": ent_coef},
                **losses,
                **{"perf/rollout_s": t1 - t0, "perf/update_s": t2 - t1,
                   "perf/steps_per_s": self.batch_size / max(t2 - t0, 1e-12)},
            ))
        return records

    def _collect_checked(self) -> Rollout:
        """:meth:`collect_rollout`; a network whose outputs overflowed after the last update
        (finite but huge weights: sampling then fails inside torch) is reported as such."""
        try:
            return self.collect_rollout()
        except RuntimeError as err:
            obs = torch.as_tensor(np.asarray(self.rollouts.current_obs), dtype=torch.float32,
                                  device=self.device)
            with torch.no_grad():
                outputs = self.policy.actor(obs), self.policy.value(obs)
            if all(bool(torch.isfinite(o).all()) for o in outputs):
                raise
            raise NonFiniteTraining(
                f"update {self.updates}: the network's outputs are no longer finite (acting "
                f"failed: {str(err).splitlines()[0]}); a smaller algo.learning_rate usually "
                "helps") from err

    def episode_state(self) -> dict[str, Any]:
        return {**self.rollouts.episode_state(), "signal": [s.copy() for s in self._signal]}

    def load_episode_state(self, state: dict[str, Any]) -> None:
        self.rollouts.load_episode_state(state)
        self._signal = [s.copy() for s in state["signal"]]

    def learner_signal(self) -> np.ndarray:
        """The GAE advantages of the rollouts collected since the previous call."""
        signal = (np.concatenate(self._signal) if self._signal
                  else np.zeros((0, self.num_envs)))
        self._signal = []
        return signal

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

    def greedy_policy(self) -> GreedyPolicy:
        """The actor alone: logits (argmax) for ``Discrete`` actions, the Gaussian mean
        (clipped to the bounds) for ``Box`` actions."""
        actor = copy.deepcopy(self.policy.actor).cpu().eval()
        if self.policy.discrete:
            return GreedyPolicy(actor, "logits", {"kind": "argmax",
                                                  "start": self.policy.action_start})
        return GreedyPolicy(actor, "mean", {
            "kind": "clip", "low": self.policy.action_low.cpu().tolist(),
            "high": self.policy.action_high.cpu().tolist()})

    def state_dict(self) -> dict[str, Any]:
        """Model, optimiser, counters, budget and RNG states (the env's state is not
        included: a restored agent starts new episodes)."""
        return {
            "model": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "env_steps": self.env_steps,
            "updates": self.updates,
            "total_env_steps": self.total_env_steps,
            "torch_rng": self.generator.get_state(),
            "eval_rng": self.eval_generator.get_state(),
            "config": asdict(self.config),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the next ``learn`` resets the env and continues."""
        self.policy.load_state_dict(state["model"])
        # Deep copy: torch's Optimizer.load_state_dict keeps references to same-device tensors,
        # so an in-memory checkpoint would otherwise share optimiser moments with its source.
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        self.env_steps = int(state["env_steps"])
        self.updates = int(state["updates"])
        self.total_env_steps = state.get("total_env_steps")
        self.generator.set_state(state["torch_rng"])
        self.eval_generator.set_state(state["eval_rng"])
        self.rollouts.current_obs = None
        self._signal = []
