"""DQN and its Rainbow-lite extensions (double Q, dueling, n-step, PER), CleanRL style.

Read top to bottom: :class:`DQNConfig` (hyperparameters, validated), :class:`QNetwork`,
:class:`DQN` (``learn`` = ``_collect_step`` -> ``_update_phase`` -> ``_sync_target``). The
replay machinery (n-step windows, uniform and prioritized buffers) is
:mod:`plume.agents.replay`. The algorithm receives a Gymnasium vector environment and nothing
else (the :class:`~plume.agents.base.Algorithm` contract).

Environment contract
--------------------
``env`` is a ``gymnasium.vector.VectorEnv`` with a flat ``Box`` single observation space and a
``Discrete(n, start)`` single action space. Autoreset mode from ``env.metadata`` (missing =
``NEXT_STEP``, as in Gymnasium):

- ``SAME_STEP`` (Plume's environments): the step that ends an episode returns the next
  episode's first observation; the last one is ``infos["final_obs"]`` (mask
  ``infos["_final_obs"]``, dense or object array) and is what the transition stores as its
  next observation.
- ``NEXT_STEP`` (Gymnasium's default): the step after an episode end ignores the action and
  returns the reset observation with reward 0. Those reset steps are not stored and give 0 in
  :meth:`DQN.learner_signal`; they still count as environment steps.
- ``DISABLED`` is rejected.

Termination cuts the bootstrap (``discount = 0``); truncation bootstraps from the final
observation. ``env_steps`` counts ``step()`` calls x ``num_envs``; ``learn`` advances one vector
step at a time, so it stops at the first multiple of ``num_envs`` >= its target.

One iteration of ``learn``
--------------------------
1. Act epsilon-greedily for all copies with one forward pass (random actions and coin flips
   drawn for all copies at once from the exploration generator); epsilon goes linearly from
   ``eps_start`` to ``eps_end`` over the first ``eps_decay_steps`` env steps.
2. Step the env, push the step into the per-copy n-step windows, store the completed n-step
   transitions in the replay buffer.
3. Every ``train_freq`` vector steps, once ``env_steps >= learning_starts`` and the buffer holds
   ``batch_size`` transitions: an update phase of ``gradient_steps`` gradient steps. Each step
   samples a minibatch (PER: stratified, beta linear from ``per_beta_start`` to
   ``per_beta_end`` over ``total_env_steps``), regresses ``Q(s, a)`` on
   ``y = R + discount * Q_target(s', a*)`` (``a* = argmax_a Q_online(s', a)`` when
   ``double_q``, else the target's own max; ``y`` clipped to ``[-target_clip, target_clip]``
   when set) with the Huber loss (``torch.nn.functional.huber_loss``, ``delta = huber_delta``;
   the same as ``smooth_l1`` for delta 1), weighted by the importance weights under PER, Adam,
   global gradient-norm clipping, then (PER) sets the sampled priorities to ``|y - Q| + per_eps``.
4. Whenever ``env_steps`` crosses a multiple of ``target_update_interval``, the target network
   is updated: ``target = tau * online + (1 - tau) * target`` (a hard copy for ``tau = 1``).

``updates`` counts gradient steps. ``total_env_steps`` (the job's budget, for PER's beta) is
the constructor argument or, if None, the target of the first ``learn`` call. Epsilon and beta
are functions of ``env_steps`` and ``total_env_steps``, so a restored agent continues both.

Learner signal
--------------
With ``track_learner_signal = True`` (set by the harness before the first ``learn``), each
vector step records, for every copy, the signed one-step TD error
``r_t + gamma (1 - terminated_t) Q_target(s_{t+1}, a*) - Q_online(s_t, a_t)`` (``a*`` as in the
loss; no ``target_clip``), with the networks of that step, computed right after the step from
the observation it returned (the final observation when the episode ended), so ``T`` always
equals the vector steps taken since the previous call. NEXT_STEP reset steps give 0. When the
flag is False no extra forward pass is made and the signal is empty.

Metrics records
---------------
``learn`` returns one record (``plume.agents.base.update_record``) after the first update
phase that ends at least ``log_every`` env steps after the previous record, and one at the end
of ``learn`` for the phases not yet reported; a record aggregates the update phases since the
previous one:

- ``env_steps``, ``updates`` (gradient steps so far), ``wall_time``.
- ``losses/td_loss``: mean (importance-weighted) Huber loss of those gradient steps.
- ``losses/q_mean``: mean ``Q(s, a)`` of the sampled transitions.
- ``losses/td_abs``: mean ``|y - Q(s, a)|``.
- ``charts/epsilon``: exploration epsilon at the record.
- ``charts/per_beta``: PER importance exponent at the record (PER only).
- ``charts/episodes``: episodes ended since the previous record.
- ``charts/episodic_return`` / ``charts/episodic_length``: their mean return / length, from
  ``infos["episode"]["return"]`` / ``["length"]`` (or Gymnasium's ``r`` / ``l``) under mask
  ``infos["_episode"]``, else DQN's own sums of raw rewards. Absent when none ended.
- ``charts/episode_<field>``: mean of every other numeric per-copy field of
  ``infos["episode"]``. Absent when none ended.
- ``perf/update_s``: seconds spent in gradient steps since the previous record.
- ``perf/steps_per_s``: env steps / wall seconds since the previous record.

Seeding and state
-----------------
``seed`` drives the network initialisation (under ``torch.random.fork_rng``: the global torch
RNG is left as it was), the exploration generator, a separate evaluation generator (used by
``act(deterministic=False)``, epsilon-greedy with ``eps_end``) and the replay buffer's numpy
generator. ``state_dict`` holds copies of the networks, optimiser, replay contents (and
priorities / sum tree), n-step windows, counters, ``total_env_steps`` and every generator
state; not the env. After ``load_state_dict`` the next ``learn`` resets the env, which drops
the pending n-step windows (their episodes are abandoned) and the unread learner signal.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from gymnasium.vector import AutoresetMode
from torch import nn

from plume.agents.base import (
    Algorithm,
    GreedyPolicy,
    check_bool,
    check_budget,
    check_finite,
    check_int,
    check_network,
    check_real,
    check_sizes,
    fail_field,
    linear_schedule,
    seeded_init,
    update_record,
)
from plume.agents.networks import feature_extractor, mlp
from plume.agents.replay import NStepWindows, PrioritizedReplayBuffer, ReplayBuffer
from plume.agents.vector_env import EpisodeStats, autoreset_mode, final_observations


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------
@dataclass
class DQNConfig:
    """DQN hyperparameters; ``__post_init__`` raises ValueError naming a bad field."""

    learning_rate: float = 1e-4
    """Adam learning rate."""
    adam_eps: float = 1.5e-4
    """Adam epsilon."""
    buffer_size: int = 100_000
    """Replay capacity in (n-step) transitions."""
    batch_size: int = 32
    """Transitions per gradient step."""
    learning_starts: int = 1000
    """Env steps before the first update phase."""
    gamma: float = 0.99
    """Discount factor, in (0, 1]."""
    n_step: int = 1
    """Rewards summed per transition (n-step returns, per copy; episode ends flush shorter)."""
    train_freq: int = 1
    """Vector steps between update phases."""
    gradient_steps: int = 1
    """Gradient steps per update phase."""
    target_update_interval: int = 1000
    """Env steps between target-network updates."""
    tau: float = 1.0
    """Target update ``target = tau * online + (1 - tau) * target``, in (0, 1] (1: hard copy)."""
    double_q: bool = True
    """Double Q-learning: the online network picks the bootstrap action, the target rates it."""
    dueling: bool = True
    """Dueling head ``Q = V + A - mean(A)`` instead of a linear Q head."""
    eps_start: float = 1.0
    """Exploration epsilon at env step 0, in [0, 1]."""
    eps_end: float = 0.05
    """Exploration epsilon after the decay (and of ``act(deterministic=False)``), in [0, 1]."""
    eps_decay_steps: int = 10_000
    """Env steps of the linear epsilon decay (0: ``eps_end`` from the start)."""
    huber_delta: float = 1.0
    """Huber loss threshold (> 0)."""
    max_grad_norm: float = 10.0
    """Global gradient-norm clipping threshold (> 0; ``math.inf`` disables clipping)."""
    target_clip: float | None = None
    """None, or clip the bootstrapped target to ``[-target_clip, target_clip]``."""
    per: bool = False
    """Proportional prioritized experience replay."""
    per_alpha: float = 0.6
    """PER priority exponent (>= 0; 0 is uniform)."""
    per_beta_start: float = 0.4
    """PER importance-sampling exponent at the start, in [0, 1]."""
    per_beta_end: float = 1.0
    """PER importance-sampling exponent at the end of the budget (linear), in [0, 1]."""
    per_eps: float = 1e-6
    """Added to ``|td|`` so no priority is 0 (> 0)."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden layers of the ``mlp`` body (the ABR extractors have their own layers)."""
    head_sizes: tuple[int, ...] = ()
    """Hidden layers of each head stream (value, advantage; or the Q head): RLlib's
    ``hiddens``, the paper's dueling head of 256 = ``[256]``; empty = linear streams."""
    activation: str = "elu"
    """Hidden activation (a key of ``plume.agents.networks.ACTIVATIONS``)."""
    network: str = "mlp"
    """Feature extractor: ``mlp``, ``gelato`` or ``pensieve``."""
    fused_optimizer: bool = False
    """Torch's fused Adam kernel (about 16 % off a 256-256 gradient step on one CPU thread)."""
    log_every: int = 1000
    """Env steps between metrics records (a record aggregates the update phases since the last)."""
    device: str = "cpu"
    """Torch device of the networks."""

    def __post_init__(self) -> None:
        for name in ("learning_rate", "adam_eps", "huber_delta", "per_eps", "max_grad_norm"):
            if not check_real(self, name) > 0:
                fail_field(self, name, "> 0")
        for name in ("buffer_size", "batch_size", "n_step", "train_freq", "gradient_steps",
                     "target_update_interval", "log_every"):
            check_int(self, name, 1)
        check_int(self, "learning_starts", 0)
        check_int(self, "eps_decay_steps", 0)
        for name, low_open in (("gamma", True), ("tau", True), ("eps_start", False),
                               ("eps_end", False), ("per_beta_start", False),
                               ("per_beta_end", False)):
            value = check_real(self, name)
            if not ((0 < value) if low_open else (0 <= value)) or not value <= 1:
                fail_field(self, name, f"in {'(' if low_open else '['}0, 1]")
        if not check_real(self, "per_alpha") >= 0:
            fail_field(self, "per_alpha", ">= 0")
        if self.target_clip is not None and not check_real(self, "target_clip") > 0:
            fail_field(self, "target_clip", "None or > 0")
        check_bool(self, "double_q", "dueling", "per", "fused_optimizer")
        check_network(self)
        check_sizes(self, "head_sizes")

    def epsilon_at(self, env_steps: int) -> float:
        """Exploration epsilon after ``env_steps`` env steps."""
        if self.eps_decay_steps == 0:
            return float(self.eps_end)
        return linear_schedule(self.eps_start, self.eps_end, env_steps / self.eps_decay_steps)

    def per_beta_at(self, progress: float) -> float:
        """PER importance exponent at budget fraction ``progress`` in [0, 1]."""
        return linear_schedule(self.per_beta_start, self.per_beta_end, progress)


# ---------------------------------------------------------------------------------------------
# Q-network
# ---------------------------------------------------------------------------------------------
class QNetwork(nn.Module):
    """``feature_extractor`` body and a dueling (``V + A - mean(A)``) or linear Q head.

    The body is ``feature_extractor(network, ...)`` (``mlp``: the layers of ``hidden_sizes``);
    each head stream is an MLP with hidden layers ``head_sizes`` (none: linear). Orthogonal
    init as :func:`plume.agents.networks.mlp` (output layers gain 1).
    """

    def __init__(self, obs_dim: int, n_actions: int, config: DQNConfig) -> None:
        super().__init__()
        self.body, features = feature_extractor(
            config.network, obs_dim, config.hidden_sizes, config.activation
        )
        head_hidden = config.head_sizes
        self.dueling = bool(config.dueling)
        if self.dueling:
            self.value = mlp(features, head_hidden, 1, config.activation, out_gain=1.0)
            self.advantage = mlp(features, head_hidden, n_actions, config.activation, out_gain=1.0)
        else:
            self.q = mlp(features, head_hidden, n_actions, config.activation, out_gain=1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values ``(B, n_actions)`` of observations ``(B, obs_dim)``."""
        features = self.body(obs)
        if not self.dueling:
            return self.q(features)
        advantage = self.advantage(features)
        return self.value(features) + advantage - advantage.mean(dim=-1, keepdim=True)


# ---------------------------------------------------------------------------------------------
# The agent
# ---------------------------------------------------------------------------------------------
class DQN(Algorithm):
    """DQN on a Gymnasium vector environment (see the module docstring for the contract).

    Attributes: ``env``, ``config``, ``q_network`` / ``target_network`` (:class:`QNetwork`),
    ``optimizer`` (Adam), ``replay`` (:class:`ReplayBuffer` or
    :class:`PrioritizedReplayBuffer`), ``env_steps``, ``updates`` (gradient steps),
    ``total_env_steps``, ``track_learner_signal``.
    """

    CONFIG = DQNConfig
    LEARNER_SIGNAL = "TD error"

    def __init__(
        self,
        env: gym.vector.VectorEnv,
        config: DQNConfig | None = None,
        seed: int = 0,
        total_env_steps: int | None = None,
    ) -> None:
        self.env = env
        self.config = config = config if config is not None else DQNConfig()
        self.seed = int(seed)
        self.device = torch.device(config.device)
        self.num_envs = int(env.num_envs)
        self.total_env_steps = (
            None if total_env_steps is None else check_budget("total_env_steps", total_env_steps)
        )
        self.autoreset_mode = autoreset_mode(env, "DQN")
        obs_space, act_space = env.single_observation_space, env.single_action_space
        if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
            raise ValueError(f"DQN needs a flat Box observation space, got {obs_space}")
        if not isinstance(act_space, gym.spaces.Discrete):  # ValueError like every setup check
            raise ValueError(f"DQN needs a Discrete action space, got {act_space}")  # noqa: TRY004
        self.obs_dim = int(obs_space.shape[0])
        self.n_actions, self.action_start = int(act_space.n), int(act_space.start)

        # Seeding: network init under a forked global RNG; sampling from generators we own.
        init_seed, explore_seed, eval_seed, replay_seed = (
            int(s) for s in np.random.SeedSequence(self.seed).generate_state(4)
        )
        with seeded_init(init_seed):
            self.q_network = QNetwork(self.obs_dim, self.n_actions, config).to(self.device)
        self.target_network = copy.deepcopy(self.q_network).requires_grad_(False)
        self.optimizer = torch.optim.Adam(
            self.q_network.parameters(), lr=config.learning_rate, eps=config.adam_eps,
            fused=config.fused_optimizer or None,
        )
        self.explore_generator = torch.Generator(device=self.device).manual_seed(explore_seed)
        self.eval_generator = torch.Generator(device=self.device).manual_seed(eval_seed)
        if config.per:
            self.replay: ReplayBuffer = PrioritizedReplayBuffer(
                config.buffer_size, self.obs_dim, config.per_alpha, config.per_eps, replay_seed
            )
        else:
            self.replay = ReplayBuffer(config.buffer_size, self.obs_dim, replay_seed)
        self.windows = NStepWindows(self.num_envs, config.n_step, config.gamma, self.obs_dim)

        self.env_steps = 0
        self.updates = 0
        self.target_updates = 0
        self.track_learner_signal = False

        # Environment state carried between learn() calls (set by the first one).
        self._obs: np.ndarray | None = None
        self._reset_step_next = np.zeros(self.num_envs, dtype=bool)  # NEXT_STEP reset pending
        self.episodes = EpisodeStats(self.num_envs)
        self._signal: list[np.ndarray] = []
        self._stats = _RecordStats(self.env_steps)

    # -----------------------------------------------------------------------------------------
    def learn(self, until_env_steps: int) -> list[dict[str, Any]]:
        """Train until ``env_steps >= until_env_steps``; metrics records as documented above."""
        until = check_budget("until_env_steps", until_env_steps)
        if self.total_env_steps is None:
            self.total_env_steps = until
        if self.env_steps >= until:
            return []
        if self._obs is None:
            self._reset_env()
        cfg, records = self.config, []
        while self.env_steps < until:
            self._collect_step()
            vector_steps = self.env_steps // self.num_envs
            if self._can_update() and vector_steps % cfg.train_freq == 0:
                self._update_phase()
                if self.env_steps - self._stats.since_env_steps >= cfg.log_every:
                    records.append(self._make_record())
            self._sync_target()
        if self._stats.phases > 0:
            records.append(self._make_record())
        return records

    def _reset_env(self) -> None:
        self._obs, _ = self.env.reset()
        self._reset_step_next[:] = False
        self.episodes.restart()
        self.windows.clear()
        self._signal.clear()

    def _can_update(self) -> bool:
        return (
            self.env_steps >= self.config.learning_starts
            and len(self.replay) >= self.config.batch_size
        )

    # -----------------------------------------------------------------------------------------
    def _collect_step(self) -> None:
        """One epsilon-greedy vector step; its completed n-step transitions go to the buffer."""
        obs = np.asarray(self._obs, dtype=np.float32)
        epsilon = self.config.epsilon_at(self.env_steps)
        with torch.inference_mode():
            q_values = self.q_network(torch.from_numpy(obs).to(self.device))
            actions = self._epsilon_greedy(q_values, epsilon, self.explore_generator)
        actions_np = actions.cpu().numpy()
        next_obs, reward, terminated, truncated, infos = self.env.step(
            actions_np + self.action_start
        )
        self.env_steps += self.num_envs
        reward = np.asarray(reward, dtype=np.float64)
        terminated = np.asarray(terminated, dtype=bool)
        done = terminated | np.asarray(truncated, dtype=bool)
        valid = ~self._reset_step_next
        bootstrap_obs = self._bootstrap_obs(next_obs, infos, done, terminated)

        if self.track_learner_signal:
            td = self._td_errors(q_values, actions, reward, bootstrap_obs, terminated)
            self._signal.append(np.where(valid, td, 0.0))
        ready = self.windows.push(obs, actions_np, reward, bootstrap_obs, terminated, done, valid)
        if len(ready):
            self.replay.add(ready)

        self.episodes.step(reward, valid, done, infos)
        if self.autoreset_mode is AutoresetMode.NEXT_STEP:
            self._reset_step_next = done
        self._obs = next_obs

    def _epsilon_greedy(
        self, q_values: torch.Tensor, epsilon: float, generator: torch.Generator
    ) -> torch.Tensor:
        """Greedy actions, each replaced by a uniform one with probability ``epsilon``; draws
        the same amount of randomness whatever ``epsilon`` is."""
        shape, device = q_values.shape[:1], q_values.device
        explore = torch.rand(shape, generator=generator, device=device) < epsilon
        random = torch.randint(self.n_actions, shape, generator=generator, device=device)
        return torch.where(explore, random, q_values.argmax(dim=-1))

    def _bootstrap_obs(self, next_obs, infos, done, terminated) -> np.ndarray:
        """Observations after this step as the transitions see them: ``next_obs`` with the
        final observation of the copies whose episode ended (SAME_STEP). Terminated copies
        without a final observation keep ``next_obs`` (they never bootstrap)."""
        out = np.array(next_obs, dtype=np.float32)
        if self.autoreset_mode is AutoresetMode.NEXT_STEP or not done.any():
            return out
        has_final = np.asarray(infos.get("_final_obs", np.zeros_like(done)), dtype=bool)
        if (done & ~terminated & ~has_final).any():
            raise KeyError(
                "SAME_STEP vector env truncated an episode without infos['final_obs'] "
                "(needed to bootstrap the value of truncated episodes)"
            )
        idx = np.flatnonzero(done & has_final)
        if len(idx):
            out[idx] = final_observations(next_obs, infos, idx, self.autoreset_mode)
        return out

    def _td_errors(self, q_values, actions, reward, bootstrap_obs, terminated) -> np.ndarray:
        """Signed one-step TD errors of this vector step (the learner signal), float64."""
        with torch.inference_mode():
            next_obs = torch.from_numpy(bootstrap_obs).to(self.device)
            next_value = self._bootstrap_value(next_obs).double().cpu().numpy()
            q_taken = q_values.gather(1, actions.unsqueeze(1)).squeeze(1).double().cpu().numpy()
        return reward + self.config.gamma * ~terminated * next_value - q_taken

    def _bootstrap_value(self, next_obs: torch.Tensor) -> torch.Tensor:
        """``Q_target(s', a*)``: ``a*`` from the online network (double Q) or the target's."""
        next_q = self.target_network(next_obs)
        if not self.config.double_q:
            return next_q.max(dim=-1).values
        best = self.q_network(next_obs).argmax(dim=-1, keepdim=True)
        return next_q.gather(1, best).squeeze(1)

    # -----------------------------------------------------------------------------------------
    def _update_phase(self) -> None:
        """``gradient_steps`` gradient steps on replayed minibatches."""
        t0 = time.perf_counter()
        for _ in range(self.config.gradient_steps):
            self._gradient_step()
        self._stats.add_phase(time.perf_counter() - t0)

    def _gradient_step(self) -> None:
        cfg = self.config
        if cfg.per:
            beta = cfg.per_beta_at(self.env_steps / self.total_env_steps)
            batch = self.replay.sample(cfg.batch_size, beta)
        else:
            batch = self.replay.sample(cfg.batch_size)
        obs, next_obs, actions, rewards, discounts, weights = (
            torch.from_numpy(x).to(self.device)
            for x in (batch.obs, batch.next_obs, batch.actions, batch.rewards,
                      batch.discounts, batch.weights)
        )
        with torch.no_grad():
            target = rewards + discounts * self._bootstrap_value(next_obs)
            if cfg.target_clip is not None:
                target = target.clamp(-cfg.target_clip, cfg.target_clip)
        q_taken = self.q_network(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
        losses = F.huber_loss(q_taken, target, reduction="none", delta=cfg.huber_delta)
        loss = (weights * losses).mean()

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.q_network.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        self.updates += 1

        td_abs = (q_taken.detach() - target).abs()
        if cfg.per:
            self.replay.update_priorities(batch.indices, td_abs.double().cpu().numpy())
        self._stats.add_step(loss.item(), q_taken.detach().mean().item(), td_abs.mean().item())

    def _sync_target(self) -> None:
        """Target update for each multiple of ``target_update_interval`` crossed (Polyak with
        ``tau``; a hard copy for ``tau = 1``)."""
        due = self.env_steps // self.config.target_update_interval
        if due <= self.target_updates:
            return
        tau = self.config.tau
        if tau == 1.0:
            self.target_network.load_state_dict(self.q_network.state_dict())
        else:
            with torch.no_grad():
                for target, online in zip(
                    self.target_network.parameters(), self.q_network.parameters()
                ):
                    target.lerp_(online, tau)
                for target, online in zip(self.target_network.buffers(), self.q_network.buffers()):
                    target.copy_(online)
        self.target_updates = due

    # -----------------------------------------------------------------------------------------
    def _make_record(self) -> dict[str, Any]:
        cfg = self.config
        metrics = {**self._stats.metrics(self.env_steps), **self.episodes.take()}
        metrics["charts/epsilon"] = cfg.epsilon_at(self.env_steps)
        if cfg.per:
            metrics["charts/per_beta"] = cfg.per_beta_at(self.env_steps / self.total_env_steps)
        self._stats = _RecordStats(self.env_steps)
        check_finite(self.updates, metrics, self.q_network)
        return update_record(self.env_steps, self.updates, **metrics)

    # -----------------------------------------------------------------------------------------
    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """Environment actions for ``obs`` ``(B, obs_dim)`` -> ``(B,)`` or ``(obs_dim,)`` -> a
        numpy integer scalar. Greedy, or (``deterministic=False``) epsilon-greedy with
        ``eps_end`` drawn from the evaluation generator, never the training ones."""
        obs_np = np.asarray(obs, dtype=np.float32)
        single = obs_np.ndim == 1
        with torch.inference_mode():
            x = torch.tensor(obs_np.reshape(-1, self.obs_dim), device=self.device)
            q_values = self.q_network(x)
            if deterministic:
                actions = q_values.argmax(dim=-1)
            else:
                actions = self._epsilon_greedy(q_values, self.config.eps_end, self.eval_generator)
        out = actions.cpu().numpy() + self.action_start
        return out[0] if single else out

    def greedy_policy(self) -> GreedyPolicy:
        """The online Q-network; the greedy action is the argmax of its Q-values."""
        module = copy.deepcopy(self.q_network).cpu().eval()
        return GreedyPolicy(module, "q_values", {"kind": "argmax", "start": self.action_start})

    def learner_signal(self) -> np.ndarray:
        """``(T, num_envs)`` float64 TD errors of the vector steps since the previous call
        (``T`` = those steps; empty unless ``track_learner_signal``)."""
        signal = np.stack(self._signal) if self._signal else np.zeros((0, self.num_envs))
        self._signal.clear()
        return signal.astype(np.float64)

    def state_dict(self) -> dict[str, Any]:
        """Copies of everything an exact resume needs (not the env's state)."""
        return {
            "q_network": _cloned(self.q_network.state_dict()),
            "target_network": _cloned(self.target_network.state_dict()),
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "replay": self.replay.state_dict(),
            "n_step_windows": self.windows.state_dict(),
            "env_steps": self.env_steps,
            "updates": self.updates,
            "target_updates": self.target_updates,
            "total_env_steps": self.total_env_steps,
            "explore_rng": self.explore_generator.get_state(),
            "eval_rng": self.eval_generator.get_state(),
            "config": asdict(self.config),
        }

    def episode_state(self) -> dict[str, Any]:
        """The episodes in flight: last observation, next-step-reset mask, episode statistics,
        unread TD-error signal, the record being aggregated (n-step windows are in
        :meth:`state_dict`)."""
        return {"obs": None if self._obs is None else np.array(self._obs),
                "reset_step_next": self._reset_step_next.copy(),
                "episodes": copy.deepcopy(self.episodes),
                "signal": [s.copy() for s in self._signal],
                "record_stats": copy.deepcopy(self._stats)}

    def load_episode_state(self, state: dict[str, Any]) -> None:
        self._obs = None if state["obs"] is None else np.array(state["obs"])
        self._reset_step_next = state["reset_step_next"].copy()
        self.episodes = copy.deepcopy(state["episodes"])
        self._signal = [s.copy() for s in state["signal"]]
        self._stats = copy.deepcopy(state["record_stats"])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the next ``learn`` resets the env (dropping the pending
        n-step windows restored here) and continues, unless :meth:`load_episode_state`
        restores the episodes in flight too."""
        self.q_network.load_state_dict(state["q_network"])
        self.target_network.load_state_dict(state["target_network"])
        # Deep copy: Optimizer.load_state_dict keeps references to same-device tensors.
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        self.replay.load_state_dict(state["replay"])
        self.windows.load_state_dict(state["n_step_windows"])
        self.env_steps = int(state["env_steps"])
        self.updates = int(state["updates"])
        self.target_updates = int(state["target_updates"])
        total = state["total_env_steps"]
        self.total_env_steps = None if total is None else int(total)
        self.explore_generator.set_state(state["explore_rng"])
        self.eval_generator.set_state(state["eval_rng"])
        self._obs = None
        self._signal.clear()
        self._stats = _RecordStats(self.env_steps)


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------
def _cloned(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in tensors.items()}


class _RecordStats:
    """What the next metrics record aggregates: update phases and gradient steps."""

    def __init__(self, env_steps: int) -> None:
        self.since_env_steps, self.since_time = env_steps, time.perf_counter()
        self.phases, self.update_s = 0, 0.0
        self.steps: list[tuple[float, float, float]] = []  # (loss, q_mean, td_abs)

    def add_phase(self, seconds: float) -> None:
        self.phases += 1
        self.update_s += seconds

    def add_step(self, loss: float, q_mean: float, td_abs: float) -> None:
        self.steps.append((loss, q_mean, td_abs))

    def metrics(self, env_steps: int) -> dict[str, float]:
        loss, q_mean, td_abs = np.mean(self.steps, axis=0)
        out = {"losses/td_loss": float(loss), "losses/q_mean": float(q_mean),
               "losses/td_abs": float(td_abs)}
        elapsed = max(time.perf_counter() - self.since_time, 1e-12)
        out["perf/update_s"] = self.update_s
        out["perf/steps_per_s"] = (env_steps - self.since_env_steps) / elapsed
        return out
