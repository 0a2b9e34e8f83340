"""PPO: learning on tasks a random policy cannot solve, GAE numbers, config, schedules, state."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from hypothesis import given, settings
from hypothesis import strategies as st

from plume.agents import PPO, ActorCritic, PPOConfig, compute_gae

torch.set_num_threads(1)


# ---------------------------------------------------------------------------------------------
# Small numpy vector environments
# ---------------------------------------------------------------------------------------------
class CopyCueVecEnv(gym.vector.VectorEnv):
    """Observation: one-hot cue of ``n_classes``; reward 1 if the action equals the cue.

    A new cue every step; episodes last ``ep_len`` steps and end terminated (or truncated
    when ``truncate``). A random policy scores ``ep_len / n_classes``. Reports
    ``infos["episode"] = {"return", "length", "accuracy"}`` with mask ``infos["_episode"]``.
    """

    def __init__(
        self,
        num_envs=8,
        n_classes=4,
        ep_len=8,
        seed=0,
        mode=AutoresetMode.SAME_STEP,
        truncate=False,
        report_episodes=True,
    ):
        self.num_envs = num_envs
        self.n_classes, self.ep_len, self.truncate = n_classes, ep_len, truncate
        self.report_episodes = report_episodes
        self.metadata = {"autoreset_mode": mode}
        self.single_observation_space = gym.spaces.Box(0.0, 1.0, (n_classes,), np.float32)
        self.single_action_space = gym.spaces.Discrete(n_classes)
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, num_envs
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.rng = np.random.default_rng(seed)
        self.step_calls = 0
        self._eye = np.eye(n_classes, dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.cue = self.rng.integers(self.n_classes, size=self.num_envs)
        self.t = np.zeros(self.num_envs, dtype=np.int64)
        self.ret = np.zeros(self.num_envs)
        self.prev_done = np.zeros(self.num_envs, dtype=bool)
        return self._eye[self.cue], {}

    def step(self, actions):
        self.step_calls += 1
        actions = np.asarray(actions)
        assert actions.shape == (self.num_envs,)
        if self.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP and self.prev_done.any():
            # Reset step of the copies that ended last step: action ignored, reward 0.
            r = self.prev_done
            self.cue[r] = self.rng.integers(self.n_classes, size=r.sum())
            self.t[r] = 0
            self.ret[r] = 0.0
        reward = (actions == self.cue).astype(np.float64)
        if self.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP:
            reward[self.prev_done] = 0.0
            live = ~self.prev_done
        else:
            live = np.ones(self.num_envs, dtype=bool)
        self.t += live
        self.ret += reward
        done = live & (self.t >= self.ep_len)
        self.cue[live] = self.rng.integers(self.n_classes, size=live.sum())
        obs = self._eye[self.cue]
        infos = {}
        if done.any():
            if self.report_episodes:
                infos["episode"] = {
                    "return": np.where(done, self.ret, 0.0),
                    "length": np.where(done, self.t, 0),
                    "accuracy": np.where(done, self.ret / np.maximum(self.t, 1), 0.0),
                }
                infos["_episode"] = done.copy()
            if self.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP:
                final = np.empty(self.num_envs, dtype=object)
                for i in np.flatnonzero(done):
                    final[i] = obs[i].copy()
                infos["final_obs"], infos["_final_obs"] = final, done.copy()
                self.cue[done] = self.rng.integers(self.n_classes, size=done.sum())
                self.t[done] = 0
                self.ret[done] = 0.0
                obs = self._eye[self.cue]
        self.prev_done = done
        terminated = done & (not self.truncate)
        truncated = done & self.truncate
        return obs, reward, terminated, truncated, infos


class TargetVecEnv(gym.vector.VectorEnv):
    """Observation: a target in [-0.9, 0.9]; action in [-1, 1]; reward ``-|action - target|``.

    A new target every step; episodes of ``ep_len`` steps end truncated (time limit), so the
    bootstrap path is exercised. SAME_STEP autoreset; episode returns computed by PPO.
    """

    def __init__(self, num_envs=8, ep_len=8, seed=0):
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.num_envs, self.ep_len = num_envs, ep_len
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, num_envs
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.rng = np.random.default_rng(seed)

    def _draw(self, n):
        return self.rng.uniform(-0.9, 0.9, size=(n, 1)).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        self.target = self._draw(self.num_envs)
        self.t = np.zeros(self.num_envs, dtype=np.int64)
        return self.target.copy(), {}

    def step(self, actions):
        actions = np.asarray(actions, dtype=np.float32)
        assert actions.shape == (self.num_envs, 1)
        assert np.all(np.abs(actions) <= 1.0), "PPO must clip Box actions to the bounds"
        reward = -np.abs(actions - self.target)[:, 0].astype(np.float64)
        self.t += 1
        self.target = self._draw(self.num_envs)
        done = self.t >= self.ep_len
        infos = {}
        if done.any():
            final = np.empty(self.num_envs, dtype=object)
            for i in np.flatnonzero(done):
                final[i] = self.target[i].copy()
            infos["final_obs"], infos["_final_obs"] = final, done.copy()
            self.target[done] = self._draw(done.sum())
            self.t[done] = 0
        return self.target.copy(), reward, np.zeros_like(done), done, infos


def greedy_return(agent: PPO, env: gym.vector.VectorEnv, n_steps: int) -> float:
    """Mean per-episode return of the greedy policy: (sum of rewards) / episodes."""
    obs, _ = env.reset(seed=12345)
    total = 0.0
    for _ in range(n_steps):
        obs, reward, _, _, _ = env.step(agent.act(obs, deterministic=True))
        total += float(np.sum(reward))
    return total / (env.num_envs * n_steps / env.ep_len)


def spy_on_steps(env: gym.vector.VectorEnv) -> list:
    """Record every ``env.step`` result from now on into the returned list."""
    seen, inner_step = [], env.step

    def step(actions):
        seen.append(inner_step(actions))
        return seen[-1]

    env.step = step
    return seen


# ---------------------------------------------------------------------------------------------
# Learning
# ---------------------------------------------------------------------------------------------
FAST = {
    "n_steps": 32,
    "n_epochs": 4,
    "n_minibatches": 4,
    "learning_rate": 2.5e-3,
    "hidden_sizes": (32, 32),
}


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_learns_copy_cue(mode):
    env = CopyCueVecEnv(num_envs=16, seed=1, mode=mode)
    agent = PPO(env, PPOConfig(**FAST, gamma=0.9), seed=0)
    assert greedy_return(agent, CopyCueVecEnv(16, seed=2), 64) < 4.0  # untrained: near 2/8
    log = agent.learn(15_000)
    score = greedy_return(agent, CopyCueVecEnv(16, seed=2), 64)
    assert score >= 7.5, score
    # Training statistics come from infos["episode"]; the extra field is logged too.
    last = log[-1]
    assert last["charts/episodic_length"] == 8.0
    assert last["charts/episodic_return"] > 6.0
    assert last["charts/episode_accuracy"] == pytest.approx(last["charts/episodic_return"] / 8)


def test_learns_continuous_target():
    env = TargetVecEnv(num_envs=16, seed=1)
    agent = PPO(env, PPOConfig(**FAST, gamma=0.9, ent_coef=0.0), seed=0)
    untrained = greedy_return(agent, TargetVecEnv(16, seed=2), 64)
    agent.learn(40_000)
    score = greedy_return(agent, TargetVecEnv(16, seed=2), 64)
    # Greedy untrained ~ -8 * E|target| = -3.6; uniform random actions ~ -4.3; perfect 0.
    assert untrained < -2.5
    assert score >= -0.4, score


# ---------------------------------------------------------------------------------------------
# GAE
# ---------------------------------------------------------------------------------------------
def test_gae_hand_computed():
    # gamma = lam = 0.5; two copies, three steps (T, N) = (3, 2).
    # copy 0: truncated at step 1 with V(final_obs) = 4, so its reward 2 became 2 + 0.5*4 = 4.
    # copy 1: terminated at step 0.
    rewards = np.array([[1.0, 1.0], [4.0, 0.0], [3.0, 1.0]])
    values = np.array([[1.0, 0.0], [1.0, 2.0], [1.0, 1.0]])
    last_value = np.array([2.0, 0.0])
    next_values = np.vstack([values[1:], last_value])
    dones = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    adv, ret = compute_gae(rewards, values, next_values, dones, gamma=0.5, lam=0.5)
    # copy 0: d2 = 3 + .5*2 - 1 = 3 -> A2 = 3; d1 = 4 - 1 = 3 -> A1 = 3 (episode cut);
    #         d0 = 1 + .5*1 - 1 = .5 -> A0 = .5 + .25*3 = 1.25
    # copy 1: d2 = 1 + 0 - 1 = 0 -> A2 = 0; d1 = 0 + .5*1 - 2 = -1.5 -> A1 = -1.5;
    #         d0 = 1 - 0 = 1 (terminated) -> A0 = 1
    np.testing.assert_allclose(adv, [[1.25, 1.0], [3.0, -1.5], [3.0, 0.0]])
    np.testing.assert_allclose(ret, [[2.25, 1.0], [4.0, 0.5], [4.0, 1.0]])
    adv_t, _ = compute_gae(
        *(torch.as_tensor(x) for x in (rewards, values, next_values, dones)), 0.5, 0.5
    )
    np.testing.assert_allclose(adv_t.numpy(), adv)


@settings(max_examples=40, deadline=None)
@given(
    T=st.integers(1, 6),
    N=st.integers(1, 3),
    gamma=st.floats(0.1, 1.0),
    lam=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
)
def test_gae_matches_forward_sum(T, N, gamma, lam, seed):
    rng = np.random.default_rng(seed)
    r, v, nv = rng.normal(size=(3, T, N))
    d = (rng.random((T, N)) < 0.3).astype(float)
    adv, ret = compute_gae(r, v, nv, d, gamma, lam)
    for i in range(N):  # A_t = sum_k (gamma lam)^k delta_{t+k}, stopping after a done
        delta = r[:, i] + gamma * (1 - d[:, i]) * nv[:, i] - v[:, i]
        for t in range(T):
            expected, w = 0.0, 1.0
            for k in range(t, T):
                expected += w * delta[k]
                if d[k, i]:
                    break
                w *= gamma * lam
            assert adv[t, i] == pytest.approx(expected, abs=1e-9)
    np.testing.assert_allclose(ret, adv + v)


def test_rollout_bootstraps_truncation_not_termination():
    for truncate in (True, False):
        env = CopyCueVecEnv(num_envs=3, ep_len=3, seed=0, truncate=truncate)
        agent = PPO(env, PPOConfig(n_steps=7, n_minibatches=1, gamma=0.9), seed=0)
        agent.learn(1)  # one update (7 steps per copy); also resets the env
        seen = spy_on_steps(env)
        rollout = agent.collect_rollout()  # steps 8..14: episodes end at steps 9 and 12
        assert rollout.dones.sum(axis=0).tolist() == [2, 2, 2]
        for t, (_, reward, term, trunc, infos) in enumerate(seen):
            expected = np.asarray(reward, dtype=np.float64).copy()
            if truncate and trunc.any():
                idx = np.flatnonzero(trunc)
                final = torch.as_tensor(np.stack(infos["final_obs"][idx]))
                with torch.no_grad():
                    expected[idx] += 0.9 * agent.policy.value(final).numpy()
                assert not np.allclose(rollout.rewards[t], reward)  # V(final_obs) != 0
            np.testing.assert_allclose(rollout.rewards[t], expected, rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(rollout.dones[t], term | trunc)


# ---------------------------------------------------------------------------------------------
# Config, schedules, budget, state
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "field,value",
    [
        ("gamma", 0.0),
        ("gamma", 1.5),
        ("gamma", float("nan")),
        ("gae_lambda", -0.1),
        ("n_steps", 0),
        ("n_steps", 2.5),
        ("n_epochs", 0),
        ("n_minibatches", 0),
        ("clip_coef", 0.0),
        ("max_grad_norm", 0.0),
        ("max_grad_norm", -1.0),
        ("learning_rate", 0.0),
        ("ent_coef", -0.1),
        ("ent_coef_final", -1.0),
        ("ent_schedule_fraction", 0.0),
        ("ent_schedule_fraction", 1.5),
        ("vf_coef", -1.0),
        ("target_kl", 0.0),
        ("hidden_sizes", (64, 0)),
        ("activation", "swish"),
        ("network", "resnet"),
        ("anneal_lr", "yes"),
        ("device", "not-a-device"),
    ],
)
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=rf"PPOConfig\.{field}\b"):
        PPOConfig(**{field: value})


def test_config_accepts_lists_and_defaults():
    cfg = PPOConfig(hidden_sizes=[256, 256], activation="elu")
    assert cfg.hidden_sizes == (256, 256)
    assert PPOConfig().n_steps == 128


def test_rejects_too_many_minibatches_and_disabled_autoreset():
    with pytest.raises(ValueError, match="n_minibatches"):
        PPO(CopyCueVecEnv(num_envs=2), PPOConfig(n_steps=2, n_minibatches=5))
    with pytest.raises(ValueError, match="DISABLED"):
        PPO(CopyCueVecEnv(num_envs=2, mode=AutoresetMode.DISABLED), PPOConfig())


def test_schedules_hand_computed():
    cfg = PPOConfig(
        learning_rate=1e-3, ent_coef=0.1, ent_coef_final=0.02, ent_schedule_fraction=0.5
    )
    assert cfg.learning_rate_at(0.0) == pytest.approx(1e-3)
    assert cfg.learning_rate_at(0.5) == pytest.approx(5e-4)
    assert cfg.learning_rate_at(1.0) == pytest.approx(0.0)
    assert cfg.ent_coef_at(0.0) == pytest.approx(0.1)
    assert cfg.ent_coef_at(0.25) == pytest.approx(0.06)  # halfway through its half
    assert cfg.ent_coef_at(0.5) == pytest.approx(0.02)
    assert cfg.ent_coef_at(1.0) == pytest.approx(0.02)
    const = PPOConfig(learning_rate=1e-3, anneal_lr=False, ent_coef=0.05)
    assert const.learning_rate_at(0.7) == 1e-3 and const.ent_coef_at(0.7) == 0.05

    # In training: update i of n uses progress i / n.
    env = CopyCueVecEnv(num_envs=2)
    agent = PPO(
        env,
        PPOConfig(
            n_steps=4,
            n_minibatches=1,
            n_epochs=1,
            learning_rate=1e-3,
            ent_coef=0.1,
            ent_coef_final=0.0,
        ),
        seed=0,
    )
    log = agent.learn(4 * 2 * 4)  # 4 updates
    assert [m["charts/learning_rate"] for m in log] == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4])
    assert [m["charts/ent_coef"] for m in log] == pytest.approx([0.1, 0.075, 0.05, 0.025])
    assert agent.optimizer.param_groups[0]["lr"] == pytest.approx(2.5e-4)


def test_env_step_count_and_metric_names():
    env = CopyCueVecEnv(num_envs=3, ep_len=5)
    agent = PPO(env, PPOConfig(n_steps=7, n_minibatches=2), seed=0)
    log = agent.learn(100)  # ceil(100 / 21) = 5 updates
    assert agent.updates == 5 == len(log)
    assert env.step_calls == 5 * 7
    assert agent.env_steps == 5 * 7 * 3
    assert [m["env_steps"] for m in log] == [21, 42, 63, 84, 105]
    expected = {
        "env_steps",
        "updates",
        "wall_time",
        "charts/episodes",
        "charts/episodic_return",
        "charts/episodic_length",
        "charts/episode_accuracy",
        "charts/learning_rate",
        "charts/ent_coef",
        "losses/value_loss",
        "losses/policy_loss",
        "losses/entropy",
        "losses/approx_kl",
        "losses/clipfrac",
        "losses/explained_variance",
        "losses/n_epochs",
        "perf/steps_per_s",
        "perf/rollout_s",
        "perf/update_s",
    }
    assert set(log[-1]) == expected
    assert all(math.isfinite(v) for k, v in log[-1].items())
    # A second learn() with the same budget does nothing; a larger one continues.
    agent.learn(100)
    assert agent.updates == 5
    agent.learn(126)
    assert agent.updates == 6 and env.step_calls == 6 * 7


def test_episode_stats_without_env_reports_and_no_episode_keys_when_none_ended():
    env = CopyCueVecEnv(num_envs=2, ep_len=3, report_episodes=False)
    agent = PPO(env, PPOConfig(n_steps=2, n_minibatches=1), seed=0)
    log = agent.learn(2 * 2 * 3)  # steps 1-2, 3-4, 5-6: ends at steps 3 and 6
    assert "charts/episodic_return" not in log[0] and log[0]["charts/episodes"] == 0
    assert log[1]["charts/episodes"] == 2 and log[1]["charts/episodic_length"] == 3.0
    assert 0.0 <= log[1]["charts/episodic_return"] <= 3.0
    assert "charts/episode_accuracy" not in log[1]


def test_learn_runs_to_a_target_and_a_reached_target_does_nothing():
    env = CopyCueVecEnv(num_envs=2)
    agent = PPO(env, PPOConfig(n_steps=4, n_minibatches=1), seed=0, total_env_steps=80)
    assert [r["updates"] for r in agent.learn(17)] == [1, 2, 3]  # 8 steps per update
    assert agent.learn(24) == [] and agent.env_steps == 24 and env.step_calls == 12
    records = agent.learn(40)
    assert [r["env_steps"] for r in records] == [32, 40]
    # the schedule is a fraction of the whole budget (80 steps = 10 updates), not of a call
    assert [r["charts/learning_rate"] for r in records] == pytest.approx([3e-4 * 0.7, 3e-4 * 0.6])
    with pytest.raises(ValueError, match="until_env_steps must be a positive integer"):
        agent.learn(0)


def test_same_seed_same_training_and_global_rng_untouched():
    def run(seed):
        agent = PPO(
            CopyCueVecEnv(num_envs=4, seed=3), PPOConfig(n_steps=8, n_minibatches=2), seed=seed
        )
        agent.learn(64)
        return torch.cat([p.detach().flatten() for p in agent.policy.parameters()])

    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b, c = run(0), run(0), run(1)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_state_dict_round_trip():
    env = TargetVecEnv(num_envs=4)
    agent = PPO(env, PPOConfig(n_steps=8, n_minibatches=2), seed=0)
    agent.learn(64)
    state = agent.state_dict()
    restored = PPO(TargetVecEnv(num_envs=4), PPOConfig(n_steps=8, n_minibatches=2), seed=99)
    restored.load_state_dict(state)
    assert (restored.env_steps, restored.updates) == (64, 2)
    obs = np.random.default_rng(0).uniform(-1, 1, size=(32, 1)).astype(np.float32)
    np.testing.assert_array_equal(agent.act(obs), restored.act(obs))
    np.testing.assert_array_equal(
        agent.act(obs, deterministic=False), restored.act(obs, deterministic=False)
    )
    assert torch.equal(agent.generator.get_state(), restored.generator.get_state())
    # Optimiser moments came along too: one identical update gives identical parameters.
    for a in (agent, restored):
        a.rollouts.env = TargetVecEnv(num_envs=4, seed=7)
        a.rollouts.env.reset()
        a.rollouts.current_obs = np.zeros((4, 1), dtype=np.float32)
        a.update(a.collect_rollout(), 1e-3, 0.0)
    for p, q in zip(agent.policy.parameters(), restored.policy.parameters()):
        assert torch.equal(p, q)


def test_act_numpy_io_and_actor_critic_shapes():
    env = TargetVecEnv(num_envs=2)
    agent = PPO(env, PPOConfig(n_steps=4, n_minibatches=1), seed=0)
    single = agent.act(np.array([0.5], dtype=np.float32))
    assert isinstance(single, np.ndarray) and single.shape == (1,)
    batch = agent.act(np.full((5, 1), 0.5, dtype=np.float32), deterministic=False)
    assert batch.shape == (5, 1) and np.all(np.abs(batch) <= 1.0)

    net = ActorCritic(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(4, start=1), (8,), "relu")
    obs = torch.zeros(6, 3)
    actions, logp, value = net.act(obs)
    assert actions.shape == logp.shape == value.shape == (6,)
    assert set(net.to_env(actions).tolist()) <= {1, 2, 3, 4}
    logp2, ent, _ = net.evaluate(obs, actions)
    torch.testing.assert_close(logp2, logp)
    torch.testing.assert_close(logp, net.dist(obs).log_prob(actions))
    torch.testing.assert_close(ent, net.dist(obs).entropy())
    assert ent[0].item() == pytest.approx(math.log(4), abs=1e-3)  # out_gain 0.01: near uniform

    box = ActorCritic(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,)), (8,), "elu")
    actions, logp, _ = box.act(obs)
    torch.testing.assert_close(logp, box.dist(obs).log_prob(actions))
    torch.testing.assert_close(box.evaluate(obs, actions)[1], box.dist(obs).entropy())
    with pytest.raises(ValueError, match="flat Box observation"):
        ActorCritic(gym.spaces.Box(-1, 1, (2, 2)), gym.spaces.Discrete(2))


def test_gymnasium_sync_vector_env_smoke():
    for mode in (AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP):
        env = gym.make_vec(
            "CartPole-v1",
            num_envs=2,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": mode},
        )
        env = gym.wrappers.vector.RecordEpisodeStatistics(env)
        env.reset(seed=0)
        agent = PPO(env, PPOConfig(n_steps=64, n_minibatches=2), seed=0)
        log = agent.learn(256)
        assert sum(m["charts/episodes"] for m in log) > 0
        # Gymnasium's wall time "t" is not an episode metric
        assert "charts/episode_t" not in {k for m in log for k in m}
        env.close()


def test_next_step_reset_steps_are_masked_and_bootstrap_from_returned_obs():
    env = CopyCueVecEnv(num_envs=2, ep_len=3, seed=0, mode=AutoresetMode.NEXT_STEP, truncate=True)
    agent = PPO(env, PPOConfig(n_steps=9, n_minibatches=1, gamma=0.9), seed=0)
    log = agent.learn(36)  # 2 updates of 9 step calls
    # Per copy: step calls 1-3 episode, 4 reset, 5-7 episode, 8 reset, 9-11, 12 reset, ...
    assert [m["charts/episodes"] for m in log] == [4, 4]
    assert log[0]["charts/episodic_length"] == 3.0
    seen = spy_on_steps(env)
    rollout = agent.collect_rollout()  # step calls 19..27: ends at 19, 23, 27; resets at 20, 24
    valid_steps = sorted(set((rollout.valid // 2).tolist()))
    assert valid_steps == [0, 2, 3, 4, 6, 7, 8]
    assert rollout.valid.numel() == 14
    with torch.no_grad():  # NEXT_STEP: the truncated step's returned obs is the final obs
        v_final = agent.policy.value(torch.as_tensor(seen[0][0])).numpy()
    np.testing.assert_allclose(rollout.rewards[0], seen[0][1] + 0.9 * v_final, rtol=1e-5)
