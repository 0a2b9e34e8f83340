"""DQN: CartPole learning, exact Q* on tiny chains, learner signal by hand, autoreset modes,
config validation, target updates, records, act and resume."""

from __future__ import annotations

import copy
import io
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from plume.agents.dqn import DQN, DQNConfig
from plume.agents.replay import ReplayBuffer, Transitions

torch.set_num_threads(1)

SAME, NEXT = AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP


# ---------------------------------------------------------------------------------------------
# A tiny deterministic vector environment
# ---------------------------------------------------------------------------------------------
class ChainVecEnv(gym.vector.VectorEnv):
    """Episodes of ``ep_len`` steps; the observation at step ``t`` of an episode is one-hot
    ``t % period`` (``obs_dim = period``; the default ``period = ep_len + 1`` makes it the
    step, the final observation being index ``ep_len``); reward ``rewards[t % period] + gain *
    action`` (``rewards`` default all 1).

    Copy ``i`` starts its first episode at step ``i % ep_len`` so episodes end at different
    steps. Episodes end terminated, or truncated where ``truncate`` (a bool or per copy).
    SAME_STEP: ``infos["final_obs"]`` is a dense array with mask ``infos["_final_obs"]``.
    NEXT_STEP: the step after an end ignores the action, returns the reset obs, reward 0.
    No ``infos["episode"]``: DQN's own sums are the episode statistics.
    """

    def __init__(self, num_envs=2, ep_len=2, truncate=False, period=None, rewards=None,
                 gain=1.0, mode=SAME, start=0):
        self.num_envs, self.ep_len, self.gain, self.start = num_envs, ep_len, gain, start
        self.period = period = ep_len + 1 if period is None else period
        self.rewards = np.ones(period) if rewards is None else np.asarray(rewards, float)
        self.truncate = np.broadcast_to(np.asarray(truncate, dtype=bool), (num_envs,))
        self.metadata = {"autoreset_mode": mode}
        self.single_observation_space = gym.spaces.Box(0.0, 1.0, (period,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2, start=start)
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, num_envs
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self._eye = np.eye(period, dtype=np.float32)
        self.resets = 0

    def _obs(self):
        return self._eye[self.t % self.period]

    def reset(self, *, seed=None, options=None):
        self.resets += 1
        self.t = np.arange(self.num_envs) % self.ep_len
        self.prev_done = np.zeros(self.num_envs, dtype=bool)
        return self._obs(), {}

    def step(self, actions):
        actions = np.asarray(actions) - self.start
        assert actions.shape == (self.num_envs,) and set(actions.tolist()) <= {0, 1}
        if self.metadata["autoreset_mode"] is NEXT:
            resetting = self.prev_done
        else:
            resetting = np.zeros(self.num_envs, dtype=bool)
        self.t[resetting] = 0
        reward = self.rewards[self.t % self.period] + self.gain * actions
        reward[resetting] = 0.0
        self.t[~resetting] += 1
        done = ~resetting & (self.t >= self.ep_len)
        obs, infos = self._obs(), {}
        if self.metadata["autoreset_mode"] is SAME and done.any():
            infos = {"final_obs": obs.copy(), "_final_obs": done.copy()}
            self.t[done] = 0
            obs = self._obs()
        self.prev_done = done
        return obs, reward, done & ~self.truncate, done & self.truncate, infos


def spy(env):
    """Record every ``reset`` and ``step`` of ``env`` (with the actions sent) in a list."""
    seen, inner_reset, inner_step = [], env.reset, env.step

    def reset(**kwargs):
        seen.append(("reset", inner_reset(**kwargs)))
        return seen[-1][1]

    def step(actions):
        seen.append(("step", np.asarray(actions).copy(), inner_step(actions)))
        return seen[-1][2]

    env.reset, env.step = reset, step
    return seen


def q_values(agent, obs, target=False):
    net = agent.target_network if target else agent.q_network
    with torch.no_grad():
        return net(torch.as_tensor(np.asarray(obs), dtype=torch.float32)).double().numpy()


def cartpole(num_envs, seed):
    env = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="sync")
    env = gym.wrappers.vector.RecordEpisodeStatistics(env)
    env.reset(seed=seed)
    return env


def greedy_cartpole_return(agent, episodes=20, seed=1000):
    """Mean return of ``episodes`` greedy CartPole episodes (one per copy of a seeded env)."""
    env = gym.make_vec("CartPole-v1", num_envs=episodes, vectorization_mode="sync")
    obs, _ = env.reset(seed=seed)
    returns, alive = np.zeros(episodes), np.ones(episodes, dtype=bool)
    while alive.any():
        obs, reward, terminated, truncated, _ = env.step(agent.act(obs, deterministic=True))
        returns += reward * alive
        alive &= ~(terminated | truncated)
    env.close()
    return float(returns.mean())


# ---------------------------------------------------------------------------------------------
# Learning
# ---------------------------------------------------------------------------------------------
CARTPOLE = {  # RL Zoo's DQN CartPole-v1 settings, on 4 copies and a 128-128 MLP
    "learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 50_000, "learning_starts": 1000,
    "gamma": 0.99, "train_freq": 64, "gradient_steps": 128, "target_update_interval": 256,
    "eps_start": 1.0, "eps_end": 0.04, "eps_decay_steps": 8000, "hidden_sizes": (128, 128),
    "activation": "relu", "double_q": True, "dueling": True, "log_every": 2500,
}


def solve_cartpole(per: bool, budget: int, every: int = 2500):
    """Train with CARTPOLE, evaluating greedily every ``every`` env steps; the env steps at
    which the mean greedy return of 20 episodes first reached 475 (None if never), and the
    returns measured."""
    agent = DQN(cartpole(4, seed=0), DQNConfig(**CARTPOLE, per=per), seed=0,
                total_env_steps=budget)
    assert greedy_cartpole_return(agent) < 100  # untrained
    returns = []
    for steps in range(every, budget + 1, every):
        records = agent.learn(steps)
        assert records and records[-1]["env_steps"] == steps
        returns.append(greedy_cartpole_return(agent))
        if returns[-1] >= 475:
            return steps, returns
    return None, returns


@pytest.mark.slow  # 28 s; in the default suite DQN is checked by the exact Q-value tests below
def test_learns_cartpole():  # and by beating always-lowest on TraceBench (test_algorithms.py)
    solved_at, returns = solve_cartpole(per=False, budget=50_000)
    assert solved_at is not None, returns


@pytest.mark.slow
def test_learns_cartpole_with_per():
    solved_at, returns = solve_cartpole(per=True, budget=50_000)
    assert solved_at is not None, returns


FIXED_POINT = {
    "gamma": 0.5, "learning_rate": 3e-3, "adam_eps": 1e-8, "batch_size": 32,
    "buffer_size": 2000, "learning_starts": 64, "train_freq": 1, "gradient_steps": 1,
    "target_update_interval": 32, "eps_start": 1.0, "eps_end": 1.0, "hidden_sizes": (32, 32),
    "activation": "relu", "log_every": 10**6,
}


@pytest.mark.parametrize(
    "options, mode",
    [
        ({"n_step": 1, "double_q": True, "dueling": True, "per": False}, SAME),
        ({"n_step": 1, "double_q": False, "dueling": False, "per": True}, NEXT),
        ({"n_step": 3, "double_q": True, "dueling": True, "per": True, "gain": 0.0}, SAME),
        ({"n_step": 2, "double_q": False, "dueling": True, "per": False, "gain": 0.0}, NEXT),
    ],
)
def test_learns_exact_q_values_termination_vs_truncation(options, mode):
    """Off-policy from uniformly random behaviour, gamma 0.5, reward ``r + g * action``:

    - 2-step episodes that terminate, step observations, r = 1:
      Q*(step 1) = [1, 1 + g], Q*(step 0) = [1 + 0.5 (1 + g), 1 + g + 0.5 (1 + g)].
    - 3-step episodes that are truncated (a time limit the observation does not show), the
      observations alternating o0, o1, o0 (final o1, reset o0), r(o0) = 1, r(o1) = 3: as if
      the episodes never ended, V0 = 1 + g + 0.5 V1, V1 = 3 + g + 0.5 V0 and
      Q*(o, a) = r(o) + g a + 0.5 V(other). Treating truncation as termination, or
      bootstrapping from the reset observation instead of the final one, gives other values.
    n-step returns are exact for any behaviour only when rewards do not depend on actions
    (gain 0), hence those cases.
    """
    options = dict(options)
    g = options.pop("gain", 1.0)
    cfg = DQNConfig(**FIXED_POINT, **options)
    terminal = DQN(ChainVecEnv(4, ep_len=2, gain=g, mode=mode), cfg, seed=0)
    terminal.learn(1200)
    q_star = np.array([[1 + 0.5 * (1 + g), 1 + g + 0.5 * (1 + g)], [1, 1 + g]])
    np.testing.assert_allclose(q_values(terminal, np.eye(3)[:2]), q_star, atol=0.02)

    env = ChainVecEnv(4, ep_len=3, truncate=True, period=2, rewards=[1, 3], gain=g, mode=mode)
    timed = DQN(env, cfg, seed=0)
    timed.learn(1200)
    v0, v1 = np.linalg.solve([[1, -0.5], [-0.5, 1]], [1 + g, 3 + g])
    q_star = np.array([[1 + 0.5 * v1, 1 + g + 0.5 * v1], [3 + 0.5 * v0, 3 + g + 0.5 * v0]])
    np.testing.assert_allclose(q_values(timed, np.eye(2)), q_star, atol=0.02)


def test_target_clip_caps_the_bootstrapped_target():
    """Truncated chain with one observation, reward 1: unclipped Q* = 1 / (1 - 0.5) = 2;
    with targets clipped to [-1.5, 1.5] the fixed point is Q = 1.5."""
    cfg = DQNConfig(**FIXED_POINT, target_clip=1.5)
    agent = DQN(ChainVecEnv(4, 2, truncate=True, period=1, gain=0.0), cfg, seed=0)
    agent.learn(1200)
    np.testing.assert_allclose(q_values(agent, np.eye(1)), [[1.5, 1.5]], atol=0.02)


# ---------------------------------------------------------------------------------------------
# Learner signal, autoreset modes, records
# ---------------------------------------------------------------------------------------------
FROZEN = {"learning_starts": 10**9, "hidden_sizes": (16,), "gamma": 0.9, "eps_start": 0.5,
          "eps_end": 0.5}


def negate_target(agent):
    """Q_target = -Q_online (dueling head: negate both output layers), so the double-Q
    bootstrap ``-max Q`` and the plain one ``-min Q`` always differ."""
    with torch.no_grad():
        for head in (agent.target_network.value, agent.target_network.advantage):
            head[-1].weight.neg_()
            head[-1].bias.neg_()


@pytest.mark.parametrize("double_q", [True, False])
@pytest.mark.parametrize("mode", [SAME, NEXT])
def test_learner_signal_is_the_one_step_td_error_by_hand(double_q, mode):
    """Frozen networks (no update yet), 3 copies of 3-step episodes, copy 1 truncated, the
    others terminated: the signal equals r + 0.9 (1 - term) Q_target(s', a*) - Q(s, a) with s'
    the final observation at episode ends, computed here from the networks' outputs; NEXT_STEP
    reset steps give exactly 0."""
    env = ChainVecEnv(3, ep_len=3, truncate=[False, True, False], mode=mode)
    agent = DQN(env, DQNConfig(**FROZEN, double_q=double_q), seed=0)
    negate_target(agent)
    agent.track_learner_signal = True
    seen = spy(env)
    agent.learn(3 * 7)
    signal = agent.learner_signal()
    assert signal.shape == (7, 3) and signal.dtype == np.float64
    assert agent.learner_signal().shape == (0, 3)  # consumed

    def td_errors(obs, actions, reward, after, term):
        q_next_target = q_values(agent, after, target=True)
        best = q_values(agent, after).argmax(1) if double_q else q_next_target.argmax(1)
        bootstrap = q_next_target[np.arange(3), best]
        return reward + 0.9 * ~term * bootstrap - q_values(agent, obs)[np.arange(3), actions]

    obs = seen[0][1][0]
    expected, resets, with_reset_obs = [], [], []
    for _, actions, (next_obs, reward, term, trunc, infos) in seen[1:]:
        after = next_obs  # NEXT_STEP: the step that ends an episode returns the final obs
        if "final_obs" in infos:
            after = np.where((term | trunc)[:, None], infos["final_obs"], next_obs)
        expected.append(td_errors(obs, actions, reward, after, term))
        with_reset_obs.append(td_errors(obs, actions, reward, next_obs, term))
        resets.append(obs.argmax(1) == 3)  # NEXT_STEP: a reset step starts from a final obs
        obs = next_obs
    expected, resets = np.array(expected), np.array(resets)
    if mode is NEXT:
        # Copies start at steps 0, 1, 2: reset steps at calls 4 | 3, 7 | 2, 6; they give 0.
        np.testing.assert_array_equal(np.argwhere(resets), [[1, 2], [2, 1], [3, 0], [5, 2], [6, 1]])
        expected[resets] = 0.0
    else:  # the truncated copy bootstraps from the final obs, not from the reset obs
        assert not resets.any()
        truncated = np.array([s[2][3] for s in seen[1:]])
        assert truncated[:, 1].sum() == 2
        assert np.all(np.abs(np.array(with_reset_obs) - expected)[truncated] > 1e-3)
    np.testing.assert_allclose(signal, expected, rtol=1e-6, atol=1e-6)


def huber(x, delta):
    return np.where(np.abs(x) <= delta, 0.5 * x**2, delta * (np.abs(x) - 0.5 * delta))


def test_prioritized_gradient_step_by_hand():
    """One PER gradient step (after earlier ones made the priorities uneven): the logged loss
    is mean(w * Huber(Q(s, a) - y)) with y = R + discount * Q_target(s', argmax Q(s')) and w
    the importance weights of the batch, recomputed here from a replica of the buffer (same
    contents, priorities and generator state) and the networks before the step; the sampled
    priorities become (|Q - y| + eps)^alpha."""
    cfg = DQNConfig(per=True, per_alpha=0.7, per_eps=0.01, per_beta_start=0.4, n_step=2,
                    learning_starts=20, batch_size=16, target_update_interval=10**6,
                    huber_delta=0.5, learning_rate=1e-2, log_every=1, hidden_sizes=(8,),
                    eps_start=0.5, eps_end=0.5)
    agent = DQN(ChainVecEnv(2, ep_len=3, truncate=[False, True]), cfg, seed=0,
                total_env_steps=100)
    negate_target(agent)
    agent.learn(30)  # updates at env steps 20..30
    replica = copy.deepcopy(agent.replay)  # contents, priorities and generator state
    online, target = copy.deepcopy(agent.q_network), copy.deepcopy(agent.target_network)
    pos = agent.replay.pos
    (record,) = agent.learn(32)  # one vector step: store its transitions, one gradient step
    new = np.arange(pos, agent.replay.pos)
    replica.add(Transitions(*(getattr(agent.replay, f)[new] for f in ReplayBuffer.FIELDS)))
    batch = replica.sample(16, beta=0.4 + 0.6 * 32 / 100)
    assert batch.weights.min() < 0.9  # the priorities are uneven: the weights matter

    with torch.no_grad():
        next_obs = torch.as_tensor(batch.next_obs)
        best = online(next_obs).argmax(1)
        bootstrap = target(next_obs)[torch.arange(16), best].double().numpy()
        q = online(torch.as_tensor(batch.obs))[torch.arange(16), batch.actions].double().numpy()
    y = batch.rewards + batch.discounts * bootstrap
    expected = np.mean(batch.weights * huber(q - y, 0.5))
    assert record["losses/td_loss"] == pytest.approx(expected, rel=1e-5)
    assert record["losses/q_mean"] == pytest.approx(q.mean(), rel=1e-5, abs=1e-6)
    np.testing.assert_allclose(agent.replay.tree.leaves(batch.indices),
                               (np.abs(q - y) + 0.01) ** 0.7, rtol=1e-5)


def test_learner_signal_off_costs_nothing_and_is_empty():
    env = ChainVecEnv(2, ep_len=3)
    agent = DQN(env, DQNConfig(**FROZEN), seed=0)
    agent.learn(20)
    assert agent.learner_signal().shape == (0, 2)


@pytest.mark.parametrize("mode", [SAME, NEXT])
def test_stored_transitions_and_next_step_reset_steps_not_stored(mode):
    """2 copies of 3-step terminating episodes, 12 step calls. SAME_STEP: 24 transitions.
    NEXT_STEP: every 4th step call of a copy is a reset step: 9 per copy stored, none of them
    starting from a final observation. Every stored transition moves one step along the chain
    (final obs at episode ends, never the reset obs) with discount 0 exactly at episode ends."""
    env = ChainVecEnv(2, ep_len=3, mode=mode)
    agent = DQN(env, DQNConfig(**FROZEN, buffer_size=100), seed=0)
    agent.learn(24)
    assert agent.env_steps == 24 and env.resets == 1
    n = len(agent.replay)
    assert n == (24 if mode is SAME else 18)
    step_of = agent.replay.obs[:n].argmax(1)
    next_step_of = agent.replay.next_obs[:n].argmax(1)
    assert not np.any(step_of == 3)
    np.testing.assert_array_equal(next_step_of, step_of + 1)
    np.testing.assert_allclose(agent.replay.discounts[:n], np.where(next_step_of == 3, 0.0, 0.9))
    np.testing.assert_array_equal(agent.replay.rewards[:n], 1.0 + agent.replay.actions[:n])


def test_records_counters_and_episode_statistics():
    env = ChainVecEnv(2, ep_len=4, gain=0.0)  # no infos["episode"]: DQN's own sums
    cfg = DQNConfig(learning_starts=20, batch_size=8, train_freq=2, gradient_steps=3,
                    log_every=40, hidden_sizes=(8,), eps_decay_steps=100)
    agent = DQN(env, cfg, seed=0)
    assert agent.learn(100) and agent.learn(100) == [] and agent.learn(3) == []
    agent = DQN(ChainVecEnv(2, ep_len=4, gain=0.0), cfg, seed=0)
    records = agent.learn(101)  # one vector step = 2 env steps: stops at 102
    assert agent.env_steps == 102
    # Update phases at even vector steps from env step 20: 20, 24, ..., 100 -> 21 phases.
    assert agent.updates == 21 * 3
    # Records after the first phase >= 40 env steps after the previous one (0 -> 40 -> 80),
    # then one at the end of learn for the phases not yet reported.
    assert [r["env_steps"] for r in records] == [40, 80, 102]
    assert [r["updates"] for r in records] == [6 * 3, 16 * 3, 21 * 3]
    first = records[0]
    # Copies start at steps 0 and 1: by env step 40 (20 step calls) 5 + 5 episodes ended,
    # of length 4 (return 4) except copy 1's first (3).
    assert first["charts/episodes"] == 10
    assert first["charts/episodic_return"] == first["charts/episodic_length"] == 3.9
    assert first["charts/epsilon"] == pytest.approx(1.0 - 0.95 * 40 / 100)
    assert records[-1]["charts/epsilon"] == 0.05
    for key in ("losses/td_loss", "losses/q_mean", "losses/td_abs", "perf/steps_per_s",
                "perf/update_s", "wall_time"):
        assert all(math.isfinite(r[key]) for r in records)
    assert "charts/per_beta" not in first


def test_per_beta_anneals_over_the_total_budget():
    cfg = DQNConfig(per=True, learning_starts=10, batch_size=4, log_every=100,
                    hidden_sizes=(8,), per_beta_start=0.4, per_beta_end=1.0)
    agent = DQN(ChainVecEnv(2), cfg, seed=0, total_env_steps=1000)
    assert agent.learn(500)[-1]["charts/per_beta"] == pytest.approx(0.7)
    assert agent.learn(1000)[-1]["charts/per_beta"] == pytest.approx(1.0)
    agent = DQN(ChainVecEnv(2), cfg, seed=0)  # no budget given: the first learn's target
    agent.learn(400)
    assert agent.total_env_steps == 400
    assert agent.learn(800)[-1]["charts/per_beta"] == pytest.approx(1.0)


def test_gymnasium_statistics_and_metrics_names():
    agent = DQN(cartpole(2, seed=0), DQNConfig(learning_starts=100, hidden_sizes=(16,),
                                               log_every=200), seed=0)
    records = agent.learn(600)
    assert len(records) == 3
    ended = [r for r in records if r["charts/episodes"] > 0]
    assert ended and all(r["charts/episodic_length"] == r["charts/episodic_return"]
                         for r in ended)  # CartPole: reward 1 per step, from infos["episode"]
    assert "charts/episode_t" not in ended[0]  # Gymnasium's wall time is not a metric


@pytest.mark.parametrize("tau", [1.0, 0.25])
def test_target_updates_hard_copy_or_polyak(tau):
    env = ChainVecEnv(2, ep_len=3)
    cfg = DQNConfig(learning_starts=0, batch_size=2, target_update_interval=4, tau=tau,
                    hidden_sizes=(8,), learning_rate=1e-2)
    agent = DQN(env, cfg, seed=0)

    def params(net):
        return [p.detach().clone() for p in net.parameters()]

    agent.learn(2)  # vector step 1: one update, 2 // 4 = 0 multiples crossed: no target update
    before = params(agent.target_network)
    assert not all(torch.equal(a, b) for a, b in zip(before, params(agent.q_network)))
    agent.learn(4)  # vector step 2: an update, then env step 4 crosses a multiple of 4
    online, after = params(agent.q_network), params(agent.target_network)
    for o, b, a in zip(online, before, after):
        torch.testing.assert_close(a, tau * o + (1 - tau) * b, rtol=0, atol=1e-7)
    assert agent.target_updates == 1
    agent.learn(6)
    assert all(torch.equal(a, b) for a, b in zip(after, params(agent.target_network)))


# ---------------------------------------------------------------------------------------------
# Configuration and construction
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "field, value",
    [
        ("learning_rate", 0.0), ("adam_eps", -1.0), ("buffer_size", 0), ("batch_size", 1.5),
        ("learning_starts", -1), ("gamma", 0.0), ("gamma", 1.1), ("n_step", 0),
        ("train_freq", 0), ("gradient_steps", True), ("target_update_interval", 0),
        ("tau", 0.0), ("tau", 1.5), ("double_q", "yes"), ("dueling", 1), ("eps_start", 1.5),
        ("eps_end", -0.1), ("eps_decay_steps", -1), ("huber_delta", 0.0),
        ("max_grad_norm", 0.0), ("target_clip", 0.0), ("per", None), ("per_alpha", -1.0),
        ("per_beta_start", 2.0), ("per_beta_end", float("nan")), ("per_eps", 0.0),
        ("hidden_sizes", [0]), ("hidden_sizes", 3), ("activation", "swish"),
        ("network", "cnn"), ("device", "nonsense"), ("log_every", 0),
    ],
)
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=rf"DQNConfig\.{field} "):
        DQNConfig(**{field: value})


def test_config_defaults_and_accepted_values():
    cfg = DQNConfig()
    assert (cfg.learning_rate, cfg.adam_eps, cfg.buffer_size, cfg.batch_size) == (
        1e-4, 1.5e-4, 100_000, 32)
    assert (cfg.n_step, cfg.double_q, cfg.dueling, cfg.per, cfg.hidden_sizes) == (
        1, True, True, False, (256, 256))
    cfg = DQNConfig(hidden_sizes=[32], max_grad_norm=math.inf, target_clip=32, eps_decay_steps=0)
    assert cfg.hidden_sizes == (32,) and cfg.epsilon_at(0) == cfg.eps_end
    assert DQNConfig(eps_decay_steps=100).epsilon_at(50) == pytest.approx(0.525)


def test_rejects_unsupported_envs():
    env = ChainVecEnv(2, mode=AutoresetMode.DISABLED)
    with pytest.raises(ValueError, match="DISABLED"):
        DQN(env)
    box = gym.make_vec("MountainCarContinuous-v0", num_envs=2, vectorization_mode="sync")
    with pytest.raises(ValueError, match="Discrete"):
        DQN(box)
    with pytest.raises(ValueError, match="total_env_steps"):
        DQN(ChainVecEnv(2), total_env_steps=0)
    with pytest.raises(ValueError, match="until_env_steps"):
        DQN(ChainVecEnv(2)).learn(0)


# ---------------------------------------------------------------------------------------------
# act, seeding, resume
# ---------------------------------------------------------------------------------------------
def training_rng_states(agent):
    return (agent.explore_generator.get_state(), agent.replay.state_dict()["rng"])


def test_act_io_and_never_touches_training_randomness():
    cfg = DQNConfig(learning_starts=8, batch_size=4, hidden_sizes=(8,), eps_end=0.5)
    agent = DQN(ChainVecEnv(2, start=3), cfg, seed=0)
    obs = np.eye(3, dtype=np.float32)
    greedy = agent.act(obs)
    assert greedy.shape == (3,) and set(greedy.tolist()) <= {3, 4}  # Discrete.start added
    np.testing.assert_array_equal(greedy, q_values(agent, obs).argmax(1) + 3)
    single = agent.act(obs[0])
    assert np.ndim(single) == 0 and single == greedy[0]
    assert isinstance(single, np.integer)

    twin = DQN(ChainVecEnv(2, start=3), cfg, seed=0)
    agent.learn(20)
    twin.learn(20)
    explore, replay = training_rng_states(agent)
    noisy = agent.act(np.tile(obs, (100, 1)), deterministic=False)
    assert 0.1 < np.mean(noisy != np.tile(greedy, 100)) < 0.4  # eps_end 0.5: ~1/4 flipped
    agent.act(obs)
    assert torch.equal(agent.explore_generator.get_state(), explore)
    assert agent.replay.state_dict()["rng"] == replay
    agent.learn(60)
    twin.learn(60)
    assert all(torch.equal(p, q) for p, q in zip(agent.q_network.parameters(),
                                                 twin.q_network.parameters()))


def test_same_seed_same_training_and_global_rng_untouched():
    def run(seed):
        cfg = DQNConfig(learning_starts=10, batch_size=8, hidden_sizes=(8,), per=True,
                        n_step=2)
        agent = DQN(ChainVecEnv(2, ep_len=3), cfg, seed=seed)
        agent.learn(100)
        return torch.cat([p.detach().flatten() for p in agent.q_network.parameters()])

    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b, c = run(0), run(0), run(1)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert torch.equal(a, b) and not torch.equal(a, c)


def assert_same(a, b, path="state"):
    """Recursive exact equality of nested dicts / lists / tensors / arrays / scalars."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            assert_same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), path
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=path)
    else:
        assert a == b, path


RESUME = DQNConfig(
    per=True, n_step=3, learning_starts=100, buffer_size=300, batch_size=16, train_freq=2,
    gradient_steps=2, target_update_interval=50, tau=0.5, hidden_sizes=(16, 16),
    eps_decay_steps=500, log_every=100,
)


def test_state_dict_round_trip_and_exact_resume():
    """Train 600 steps, checkpoint (through deepcopy and torch.save/torch.load), restore into
    an agent built with another seed: identical buffer, priorities, counters, networks and
    generators; both continue from identically seeded envs and stay bit-identical."""
    agent = DQN(cartpole(2, seed=0), RESUME, seed=0)
    agent.track_learner_signal = True
    agent.learn(600)
    state = agent.state_dict()
    snapshot = copy.deepcopy(state)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert_same(loaded, snapshot)
    assert state["replay"]["size"] == 300 and state["n_step_windows"]["length"].sum() > 0

    restored = DQN(cartpole(2, seed=1), RESUME, seed=99)
    restored.load_state_dict(loaded)
    assert_same(restored.state_dict(), snapshot)
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    np.testing.assert_array_equal(q_values(restored, obs), q_values(agent, obs))
    np.testing.assert_array_equal(q_values(restored, obs, True), q_values(agent, obs, True))
    np.testing.assert_array_equal(restored.replay.tree.tree, agent.replay.tree.tree)
    assert (restored.env_steps, restored.updates) == (agent.env_steps, agent.updates)

    agent.load_state_dict(state)  # the agent resumes from its checkpoint too (env reset)
    assert agent.learner_signal().shape == (0, 2)  # unread signal dropped with the episodes
    for a in (agent, restored):
        a.env.reset(seed=7)  # the next learn's env.reset() continues this seeded stream
        a.learn(1200)
    assert_same(agent.state_dict(), restored.state_dict())
    assert_same(state, snapshot)  # the checkpoint did not move with the agent

