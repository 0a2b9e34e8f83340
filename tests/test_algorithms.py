"""The algorithm contract: every registered learner solves CartPole, trains end to end in the
harness with any sampler, beats the always-lowest policy on TraceBench, and PPO's port onto the
contract reproduces runs recorded before it, bit for bit."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
import torch

from plume.agents import A2C, ALGORITHMS, PPO, A2CConfig, Algorithm, PPOConfig
from plume.harness.apps.train import run_job
from plume.harness.config.schema import ConfigError, validate
from plume.runs.store import RunDirectory
from tests.conftest import TINY, conf_options

torch.set_num_threads(1)
REFERENCE = Path(__file__).parent / "data" / "ppo_reference"


def greedy_cartpole_return(agent: Algorithm, episodes: int = 20, seed: int = 1000) -> float:
    """Mean undiscounted return of ``agent.act(deterministic=True)`` over ``episodes``."""
    env = gym.make_vec("CartPole-v1", num_envs=episodes, vectorization_mode="sync")
    obs, _ = env.reset(seed=seed)
    returns, done = np.zeros(episodes), np.zeros(episodes, dtype=bool)
    while not done.all():
        obs, reward, terminated, truncated, _ = env.step(agent.act(obs))
        returns += reward * ~done
        done |= terminated | truncated
    return float(returns.mean())


CARTPOLE = {
    # (algorithm, config, env steps, copies): each reaches 500 on seed 0 (about 10 s each here)
    "ppo": (PPO, PPOConfig(n_steps=128, n_minibatches=4, n_epochs=10, learning_rate=1e-3,
                           hidden_sizes=(64, 64), ent_coef=0.0), 80_000, 8),
    "a2c": (A2C, A2CConfig(n_steps=8, learning_rate=7e-4, hidden_sizes=(64, 64),
                           ent_coef=0.0), 200_000, 8),
}


@pytest.mark.parametrize("name", sorted(CARTPOLE))
def test_each_algorithm_solves_cartpole(name):
    algo, config, steps, copies = CARTPOLE[name]
    env = gym.make_vec("CartPole-v1", num_envs=copies, vectorization_mode="sync")
    env.reset(seed=0)
    agent = algo(env, config, seed=0, total_env_steps=steps)
    untrained = greedy_cartpole_return(agent)
    records = agent.learn(steps)
    assert records[-1]["env_steps"] >= steps
    assert untrained < 100 <= 475 <= greedy_cartpole_return(agent)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppo", "a2c"])
def test_continuous_actor_critics_swing_up_pendulum(name):
    """Better than -400 mean greedy return on Pendulum-v1 (random: about -1200). Measured on
    seed 0: PPO -189 after 300k steps, A2C -365 after 1M (about 1.5 min each here)."""
    wrappers = gym.wrappers.vector
    env = gym.make_vec("Pendulum-v1", num_envs=8, vectorization_mode="sync")
    env = wrappers.NormalizeReward(wrappers.ClipAction(env), gamma=0.9)
    env.reset(seed=0)
    if name == "ppo":
        agent = PPO(env, PPOConfig(n_steps=256, n_minibatches=32, n_epochs=10, gamma=0.9,
                                   learning_rate=1e-3, ent_coef=0.0, clip_coef=0.2,
                                   gae_lambda=0.95, hidden_sizes=(64, 64)), seed=0)
        steps = 300_000
    else:
        # SB3 zoo's A2C Pendulum settings without gSDE (a fixed log std of -2 instead)
        agent = A2C(env, A2CConfig(n_steps=8, gamma=0.9, gae_lambda=0.9, learning_rate=7e-4,
                                   anneal_lr=True, vf_coef=0.4, ent_coef=0.0, norm_adv=True,
                                   max_grad_norm=0.5, log_std_init=-2.0, hidden_sizes=(64, 64),
                                   activation="relu"), seed=0)
        steps = 1_000_000
    agent.learn(steps)
    test = gym.make_vec("Pendulum-v1", num_envs=20, vectorization_mode="sync")
    obs, _ = test.reset(seed=1000)
    total = np.zeros(20)
    for _ in range(200):
        obs, reward, *_ = test.step(agent.act(obs))
        total += reward
    print(f"{name} on Pendulum-v1 after {steps:,} steps: {total.mean():.0f}")
    assert total.mean() > -400


class _CueEnv(gym.vector.VectorEnv):
    """Two copies; observation a fixed one-hot, reward 1 for action 0; episodes of 3 steps."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self):
        self.num_envs = 2
        self.single_observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, 2)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, 2)
        self.t = np.zeros(2, dtype=int)

    def reset(self, *, seed=None, options=None):
        self.t[:] = 0
        return np.tile(np.float32([1, 0]), (2, 1)), {}

    def step(self, actions):
        self.t += 1
        done = self.t >= 3
        infos = {"final_obs": np.tile(np.float32([1, 0]), (2, 1)), "_final_obs": done.copy()}
        self.t[done] = 0
        return (np.tile(np.float32([1, 0]), (2, 1)), (np.asarray(actions) == 0).astype(float),
                done, np.zeros(2, dtype=bool), infos)


@pytest.mark.parametrize("critic_in_update", [False, True])
def test_a2c_takes_one_step_on_the_hand_written_loss(critic_in_update):
    agent = A2C(_CueEnv(), A2CConfig(n_steps=6, hidden_sizes=(4,), vf_coef=0.25,
                                     ent_coef=0.1, optimizer="adam", learning_rate=0.01,
                                     critic_in_update=critic_in_update),
                seed=0, total_env_steps=12)
    agent.rollouts.start()
    rollout = agent.collect_rollout()
    log_prob, entropy, value = agent.policy.evaluate(rollout.obs, rollout.actions)
    policy_loss = -(rollout.advantages * log_prob).mean()
    value_loss = ((rollout.returns - value) ** 2).mean()
    before = [p.detach().clone() for p in agent.policy.parameters()]
    losses = agent.update(rollout, learning_rate=0.01, ent_coef=0.1)
    assert losses["losses/policy_loss"] == pytest.approx(policy_loss.item(), rel=1e-6)
    assert losses["losses/value_loss"] == pytest.approx(value_loss.item(), rel=1e-6)
    assert losses["losses/entropy"] == pytest.approx(entropy.mean().item(), rel=1e-6)
    # Adam's first step moves every parameter with a gradient by about lr (sign of the grad)
    moved = [float((p.detach() - b).abs().max())
             for p, b in zip(agent.policy.parameters(), before)]
    assert max(moved) == pytest.approx(0.01, rel=1e-3)
    # returns are n-step: gamma-discounted rewards to the episode's end (3 steps, no bootstrap)
    rewards = rollout.rewards[:3, 0].astype(np.float64)
    gamma = agent.config.gamma
    expected = rewards[0] + gamma * rewards[1] + gamma**2 * rewards[2]
    assert rollout.returns[0].item() == pytest.approx(expected, rel=1e-6)


def test_a2c_with_the_critic_in_the_update_takes_the_same_steps_with_one_critic_pass():
    """critic_in_update: V(s_t) from the update's forward pass over the whole rollout, on a
    NEXT_STEP env (CartPole; reset steps masked); the same actions, values and parameters as
    running the critic at every step, and the critic runs once per rollout, not per step."""
    config = A2CConfig(n_steps=32, hidden_sizes=(16, 16), ent_coef=0.01)
    agents, critic_calls = {}, {}
    for on in (False, True):
        env = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")
        env.reset(seed=3)
        agent = agents[on] = A2C(env, replace(config, critic_in_update=on),
                                 seed=0, total_env_steps=4 * 32 * 4)
        calls = critic_calls[on] = []
        agent.policy.critic.register_forward_hook(lambda *_, calls=calls: calls.append(1))
    records = {on: agent.learn(4 * 32 * 4) for on, agent in agents.items()}
    assert [r["charts/episodes"] for r in records[True]] == \
        [r["charts/episodes"] for r in records[False]] and records[True][0]["charts/episodes"]
    for before, after in zip(records[False], records[True]):
        for key in ("losses/policy_loss", "losses/value_loss", "losses/entropy",
                    "losses/explained_variance"):
            assert after[key] == pytest.approx(before[key], rel=1e-4, abs=1e-6)
    for p, q in zip(agents[False].policy.parameters(), agents[True].policy.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    rollouts = {on: agent.rollouts for on, agent in agents.items()}
    torch.testing.assert_close(rollouts[True].values, rollouts[False].values, rtol=1e-5,
                               atol=1e-5)
    torch.testing.assert_close(rollouts[True].actions, rollouts[False].actions)
    # per update: the acting steps + V(s_T) + the update's pass, or V(s_T) + the end-of-rollout
    # pass (CartPole truncates no episode this early, so no bootstrap passes)
    assert (len(critic_calls[False]), len(critic_calls[True])) == (4 * (32 + 2), 4 * 2)


def test_the_learner_signal_is_each_rollouts_advantages_once():
    agent = PPO(_CueEnv(), PPOConfig(n_steps=5, n_minibatches=1, hidden_sizes=(4,)), seed=1)
    agent.rollouts.start()
    agent.collect_rollout()
    assert agent.learner_signal().shape == (0, 2)  # not tracked: nothing kept
    agent.track_learner_signal = True
    given = []
    for _ in range(2):
        rollout = agent.collect_rollout()
        given.append(rollout.advantages.reshape(5, 2).numpy().astype(np.float64))
    signal = agent.learner_signal()
    np.testing.assert_array_equal(signal, np.concatenate(given))
    assert agent.learner_signal().shape == (0, 2)


@pytest.mark.parametrize("name", ["plr", "abr"])
def test_ppo_on_the_contract_reproduces_the_recorded_runs(compose_cfg, tmp_path, name):
    """tests/data/ppo_reference/record.py ran these jobs before PPO moved onto the contract
    (PLR got its scores through the old bridge). Every row must match bit for bit."""
    sys.path.insert(0, str(REFERENCE))
    try:
        from record import JOBS
    finally:
        sys.path.remove(str(REFERENCE))
    run_job(compose_cfg(*JOBS[name], f"paths.cache={tmp_path / 'cache'}"), tmp_path / "run")
    for table in ("eval.parquet", "sampler.parquet"):
        expected = pd.read_parquet(REFERENCE / name / table)
        got = pd.read_parquet(tmp_path / "run" / table)
        pd.testing.assert_frame_equal(got[expected.columns], expected, check_exact=True)


SMALL = {  # per algorithm: budgets a few thousand steps can show something in
    "ppo": [],
    "a2c": ["algo.n_steps=16"],
    "dqn": ["algo.learning_starts=512", "algo.buffer_size=20000", "algo.log_every=512",
            "algo.target_update_interval=512", "algo.eps_decay_steps=4000",
            "algo.learning_rate=5e-4", "algo.n_step=3", "algo.head_sizes=[]"],
}


def _tiny(tmp_path, algo, *extra):
    """TINY for ``algo`` (DQN has no rollout length), with its SMALL settings. Stage 1-2 comes
    from TINY's cache for the whole session (bit-identical arrays to a fresh fit, ~3 s saved
    per job; the cache's own tests are in tests/test_analysis.py)."""
    tiny = [o for o in TINY if not (algo == "dqn" and o.startswith("algo.n_steps"))]
    return [*tiny, f"algo={algo}", *SMALL[algo], "logger=none", *extra]


@pytest.mark.parametrize("algo", sorted(SMALL))
def test_plr_gets_the_learner_signal_of_every_algorithm(compose_cfg, tmp_path, algo):
    run_job(compose_cfg(*_tiny(tmp_path, algo, "sampler=plr", "train.total_steps=4096")),
            tmp_path / "run")
    run = tmp_path / "run"
    state = RunDirectory(run).load_checkpoint()["sampler"]
    assert state["proxy_scores"] == 0 and int(np.sum(state["episodes"])) > 0
    assert np.count_nonzero(state["scores"]) > 0
    lines = [json.loads(line) for line in (run / "train.jsonl").read_text().splitlines()]
    assert lines[-1]["env_steps"] >= 4096 and all("time_s" in r for r in lines)


# Every sampler once in the default suite, A2C and DQN in turn (the exact-resume tests train
# the other pairs); all 22 pairs with -m slow.
SAMPLER_ALGOS = [pytest.param(a, s, marks=() if (i % 2 == 0) == (a == "a2c")
                              else pytest.mark.slow)
                 for i, s in enumerate(conf_options("sampler")) for a in ("a2c", "dqn")]


@pytest.mark.parametrize("algo,sampler", SAMPLER_ALGOS)
def test_every_sampler_trains_with_every_algorithm(compose_cfg, tmp_path, algo, sampler):
    extra = ["algo.per=true"] if algo == "dqn" and sampler == "uniform" else []
    run_job(compose_cfg(*_tiny(tmp_path, algo, f"sampler={sampler}", *extra)), tmp_path / "run")
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "completed" and status["summary"]["env_steps"] >= 2048
    frame = pd.read_parquet(tmp_path / "run" / "eval.parquet")
    assert sorted(frame["progress"].unique()) == [0.0, 0.5, 1.0]
    assert frame["score"].notna().all()


def test_a_sampler_that_needs_a_signal_is_refused_for_an_algorithm_without_one(
        compose_cfg, monkeypatch):
    class Silent(PPO):
        LEARNER_SIGNAL = None

    monkeypatch.setitem(ALGORITHMS, "silent", Silent)
    with pytest.raises(ConfigError, match=r"sampler=plr .* algo=silent does not give"):
        validate(compose_cfg("sampler=plr", "algo.name=silent"))
    validate(compose_cfg("sampler=plr", "sampler.score=return_delta", "algo.name=silent"))


PRESET_ENV = {"a2c_gelato": ["env=abr"], "ppo_abr": ["env=abr"],
              "a2c_pensieve": ["env=abr", "env.variant=pensieve"]}


@pytest.mark.parametrize("preset", conf_options("algo"))
def test_every_algorithm_preset_validates(compose_cfg, preset):
    job = validate(compose_cfg(f"algo={preset}", *PRESET_ENV.get(preset, [])))
    assert isinstance(job.algo, ALGORITHMS[job.algo_name].CONFIG)


@pytest.mark.parametrize("algo", sorted(SMALL))
def test_every_algorithm_beats_the_always_lowest_policy_on_tracebench(
        compose_cfg, tmp_path, algo):
    """Trained on majority_fast for 20k steps; always-lowest scores 1.0 on majority_slow, the
    untrained policy about 1.16; the learners reach the best fixed bitrate's 4.34 or more."""
    run_job(compose_cfg(*_tiny(tmp_path, algo, "train.total_steps=20000",
                               "algo.hidden_sizes=[64,64]")), tmp_path / "run")
    floor = json.loads((tmp_path / "run" / "score.json").read_text())[
        "normalisation"]["test_sets"]["majority_slow"]["floor"]
    scores = pd.read_parquet(tmp_path / "run" / "eval.parquet").groupby("progress")["score"]
    untrained, final = scores.mean().iloc[0], scores.mean().iloc[-1]
    print(f"{algo}: always-lowest {floor:.3f}, untrained {untrained:.3f}, trained {final:.3f}")
    assert final > max(floor, untrained) + 0.5


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("algo", sorted(SMALL))
def test_a_cuda_device_without_cuda_is_refused_at_validation(compose_cfg, algo):
    with pytest.raises(ConfigError, match=r"algo: \w+Config\.device must be 'cpu' on this"):
        validate(compose_cfg(f"algo={algo}", "algo.device=cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("algo,extra", [("ppo", []), ("a2c", []),
                                        ("a2c", ["algo.critic_in_update=true"]),
                                        ("dqn", []), ("dqn", ["algo.per=true"])])
def test_every_algorithm_trains_on_cuda_with_plr(compose_cfg, tmp_path, algo, extra):
    """``algo.device=cuda`` through the harness: training, the learner signal, evaluation and
    the checkpoint (its model tensors are saved from the GPU)."""
    run_job(compose_cfg(*_tiny(tmp_path, algo, "sampler=plr", "algo.device=cuda", *extra)),
            tmp_path / "run")
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "completed" and status["summary"]["env_steps"] >= 2048
    assert pd.read_parquet(tmp_path / "run" / "eval.parquet")["score"].notna().all()
    agent = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["agent"]
    weights = agent["q_network" if algo == "dqn" else "model"]
    assert {t.device.type for t in weights.values()} == {"cuda"}


@pytest.mark.slow
def test_a_compiled_update_computes_what_the_eager_one_does():
    """``compile_update`` changes speed, not the update: same losses on the same rollout."""
    losses = []
    for compiled in (False, True):
        agent = PPO(_CueEnv(), PPOConfig(n_steps=8, n_minibatches=2, hidden_sizes=(16,),
                                         compile_update=compiled), seed=3)
        agent.rollouts.start()
        losses.append(agent.update(agent.collect_rollout(), 1e-3, 0.01))
    for key in ("losses/policy_loss", "losses/value_loss", "losses/entropy"):
        assert losses[1][key] == pytest.approx(losses[0][key], rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("algo", ["ppo", "a2c", "dqn"])
def test_a_diverging_learner_stops_at_once_naming_the_update(algo, compose_cfg, tmp_path):
    from plume.agents.base import NonFiniteTraining

    extra = (["algo.learning_starts=64", "algo.log_every=1", "algo.train_freq=1"]
             if algo == "dqn" else ["algo.n_steps=64"])
    cfg = compose_cfg(*[o for o in TINY if not o.startswith("algo.n_steps")], "logger=none",
                      f"algo={algo}", "algo.learning_rate=1e30", "algo.max_grad_norm=1e30",
                      *extra)
    with pytest.raises(NonFiniteTraining, match=r"^update \d+: "):
        run_job(cfg, tmp_path)
    assert "NonFiniteTraining: update" in RunDirectory(tmp_path).status()["error"]
