"""K seeds trained together (``plume.agents.lockstep``): each seed ends where its own single
run ends, to float rounding (the batched products round differently from ``Linear``; the
env steps, episodes and updates are the same), and stays so over several calls (optimiser
state and episodes handed back); a seed that diverges fails alone; what cannot be trained
together is refused with the reason."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from plume.agents import A2C, DQN, PPO, A2CConfig, DQNConfig, PPOConfig
from plume.agents.base import NonFiniteTraining
from plume.agents.lockstep import (
    learn_together,
    lockstep_refusal,
    stacked_optimizer,
    unstack_optimizer,
)
from plume.envs.registry import get_env
from plume.sampling import UniformSampler

A2C_SMALL = A2CConfig(n_steps=5, norm_adv=True, hidden_sizes=(16, 16), ent_coef=0.01)
PPO_SMALL = PPOConfig(n_steps=32, n_minibatches=4, n_epochs=2, hidden_sizes=(16, 16))


def _agent(env_name: str, algo, config, seed: int):
    spec = get_env(env_name)
    params = spec.params()
    traces = spec.load_builtin(spec.default_dataset(params), "train").subset(range(6))
    env = spec.make(traces, 4, UniformSampler(len(traces), np.random.default_rng(seed)),
                    mode="train", seed=seed, params=params)
    agent = algo(env, config, seed=seed, total_env_steps=2_000)
    agent.track_learner_signal = True
    return agent


def _weights(agent) -> list[torch.Tensor]:
    return [p.detach().clone() for p in agent.policy.parameters()]


def _close(mine: list[dict], theirs: list[dict], keys: tuple[str, ...]) -> None:
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs):
        assert a["env_steps"] == b["env_steps"] and a["updates"] == b["updates"]
        for key in keys:
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key


def _same_weights(a, b) -> None:
    for p, q in zip(_weights(a), _weights(b)):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_a2c_seeds_together_end_where_their_single_runs_end():
    singles = [_agent("cc", A2C, A2C_SMALL, s) for s in range(3)]
    together = [_agent("cc", A2C, A2C_SMALL, s) for s in range(3)]
    for until in (400, 1_000):  # two calls: the optimiser state and episodes go back and forth
        alone = [a.learn(until) for a in singles]
        joint = learn_together(together, until)
        for k in range(3):
            _close(joint[k], alone[k], ("losses/policy_loss", "losses/value_loss",
                                        "losses/grad_norm", "charts/episodes"))
            _same_weights(together[k], singles[k])
            np.testing.assert_allclose(together[k].learner_signal(),
                                       singles[k].learner_signal(), rtol=1e-4, atol=1e-5)
            assert together[k].env_steps == singles[k].env_steps >= until
            assert together[k].optimizer.state_dict()["state"][0]["step"] == \
                singles[k].optimizer.state_dict()["state"][0]["step"]
    # the seeds differ from one another: a test that merged them could not pass
    assert not torch.equal(_weights(together[0])[0], _weights(together[1])[0])


def test_ppo_seeds_together_match_their_single_runs_to_rounding():
    singles = [_agent("lb", PPO, PPO_SMALL, s) for s in range(3)]
    together = [_agent("lb", PPO, PPO_SMALL, s) for s in range(3)]
    alone = [a.learn(256) for a in singles]
    joint = learn_together(together, 256)
    for k in range(3):
        assert len(joint[k]) == 2
        _close(joint[k], alone[k], ("losses/policy_loss", "losses/value_loss",
                                    "losses/entropy", "losses/approx_kl", "charts/episodes"))
        _same_weights(together[k], singles[k])
        assert together[k].env_steps == singles[k].env_steps == 256
        assert together[k].updates == 2


def test_a_seed_that_diverges_fails_alone():
    together = [_agent("cc", A2C, A2C_SMALL, s) for s in range(3)]
    singles = [_agent("cc", A2C, A2C_SMALL, s) for s in (0, 2)]
    with torch.no_grad():
        together[1].policy.actor[0].weight.fill_(float("nan"))
    joint = learn_together(together, 400)
    assert isinstance(joint[1], NonFiniteTraining)
    assert "update 0" in str(joint[1]) and "no longer finite" in str(joint[1])
    for k, single in zip((0, 2), singles):
        alone = single.learn(400)
        _close(joint[k], alone, ("losses/policy_loss", "losses/value_loss"))
        _same_weights(together[k], single)
    assert together[1].env_steps < 400  # it stopped where it failed


def test_what_cannot_be_trained_together_is_refused_with_the_reason():
    assert lockstep_refusal(PPO, PPOConfig()) is None
    assert lockstep_refusal(A2C, A2CConfig()) is None
    assert "DQN" in lockstep_refusal(DQN, DQNConfig())
    assert "algo.target_kl=0.02" in lockstep_refusal(PPO, PPOConfig(target_kl=0.02))
    assert "algo.network=gelato" in lockstep_refusal(A2C, A2CConfig(network="gelato"))
    assert "algo.critic_in_update=True" in lockstep_refusal(
        A2C, A2CConfig(critic_in_update=True))
    a, b = _agent("cc", A2C, A2C_SMALL, 0), _agent("cc", A2C, A2C_SMALL, 1)
    a.learn(100)
    with pytest.raises(ValueError, match="same env step"):
        learn_together([a, b], 400)
    c = _agent("cc", A2C, dataclasses.replace(A2C_SMALL, learning_rate=1e-3), 2)
    with pytest.raises(ValueError, match="one config"):
        learn_together([b, c], 400)


def test_stacked_optimiser_state_goes_back_to_each_seed_unchanged():
    """Stacking K Adams' states and handing them back is the identity (the state of a
    run's checkpoint is what its own optimiser would hold)."""
    torch.manual_seed(0)
    params = [[torch.randn(3, 2, requires_grad=True), torch.randn(2, requires_grad=True)]
              for _ in range(3)]
    optimizers = [torch.optim.Adam(p, lr=1e-2) for p in params]
    for step in range(2 + 1):
        for p, opt in zip(params, optimizers):
            opt.zero_grad()
            (sum((x ** 2).sum() for x in p) * (step + 1)).backward()
            opt.step()
    before = [opt.state_dict() for opt in optimizers]
    stacked_params = [torch.stack([p[i].detach() for p in params]) for i in range(2)]
    stacked = stacked_optimizer(optimizers, stacked_params)
    assert torch.equal(stacked.state_dict()["state"][0]["exp_avg"][2],
                       before[2]["state"][0]["exp_avg"])
    unstack_optimizer(stacked, optimizers)
    for opt, old in zip(optimizers, before):
        new = opt.state_dict()
        for i in (0, 1):
            for key in ("step", "exp_avg", "exp_avg_sq"):
                assert torch.equal(new["state"][i][key], old["state"][i][key])


@pytest.mark.parametrize("env_name, algo, config", [("cc", A2C, A2C_SMALL),
                                                    ("lb", PPO, PPO_SMALL)])
def test_a_seeds_numbers_do_not_depend_on_the_other_slots(env_name, algo, config):
    """Slot 1 alone (the others empty) ends bit-identical to slot 1 beside two other seeds:
    what lets a resumed group, whose seeds stand at different env steps, catch up exactly."""
    alone = [None, _agent(env_name, algo, config, 1), None]
    full = [_agent(env_name, algo, config, s) for s in range(3)]
    records_alone = learn_together(alone, 600)
    records_full = learn_together(full, 600)
    assert records_alone[0] is None and records_alone[2] is None
    assert [r["losses/value_loss"] for r in records_alone[1]] == \
        [r["losses/value_loss"] for r in records_full[1]]
    assert all(torch.equal(p, q) for p, q in zip(_weights(alone[1]), _weights(full[1])))
    # and the two stretches joined: slot 1 trained alone to 600, then with the others to 1200
    rest = [_agent(env_name, algo, config, s) for s in (0, 2)]
    learn_together([rest[0], None, rest[1]], 600)
    learn_together([rest[0], alone[1], rest[1]], 1_200)
    learn_together(full, 1_200)
    for mine, theirs in zip((rest[0], alone[1], rest[1]), full):
        assert all(torch.equal(p, q) for p, q in zip(_weights(mine), _weights(theirs)))
