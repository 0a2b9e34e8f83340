"""K seeds of one actor-critic preset trained together in one process: one batched forward
pass per step instead of K.

The learners of the smaller presets are bound by per-call overhead rather than arithmetic
(``benchmarks/bench_seeds.py`` measures what stacking gains). :func:`learn_together` takes K
ordinary agents (PPO or A2C, one class, one config, each with its own environment, sampler
and generators) at the same env step and trains them to a common target as if each ran
alone: their weights become ``(K, ...)`` tensors for the duration of the call, every layer
one ``baddbmm``, each seed's actions drawn
from its own generator, its rollout stepped in its own environment, its minibatches
shuffled by its own generator, its gradient clipped by its own norm, and one optimiser over
the stacked weights (Adam and RMSprop are elementwise: K optimisers in one). When the call
returns, each agent holds its weights, optimiser state, counters and episodes in flight as
its own ``learn`` would have left them, so checkpoints, evaluation and export see ordinary
agents. The losses agree with single runs to float rounding (the batched products round
differently from ``Linear``'s in some shapes, e.g. the critic's one output and most
gradients); tests/test_lockstep.py holds it.

A seed whose losses or outputs stop being finite fails alone: its
:class:`~plume.agents.base.NonFiniteTraining` is returned in its place and the others go on.

Scope: network ``mlp``, float32 updates without ``torch.compile``, PPO without
``target_kl`` (its early stop would end epochs per seed), A2C without ``critic_in_update``,
environments with same-step autoreset (Plume's).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from torch import nn

from plume.agents.a2c import A2C, a2c_losses
from plume.agents.base import NonFiniteTraining, check_budget, check_finite, update_record
from plume.agents.networks import (
    MLP,
    ActorCritic,
    categorical_log_prob_entropy,
    gaussian_entropy,
    gaussian_log_prob,
)
from plume.agents.on_policy import ActorCriticAlgorithm, compute_gae, explained_variance
from plume.agents.ppo import PPO, ppo_losses
from plume.agents.vector_env import autoreset_mode, final_observations

__all__ = ["StackedActorCritic", "learn_together", "lockstep_refusal"]


def lockstep_refusal(algo: type, config) -> str | None:
    """Why K seeds of ``algo`` with ``config`` cannot be trained together, or None."""
    if algo not in (PPO, A2C):
        return f"{algo.__name__} is not an actor-critic trained here together (PPO, A2C)"
    reasons = {
        "network": config.network != MLP,
        "update_precision": config.update_precision != "float32",
        "compile_update": config.compile_update,
        "fused_optimizer": config.fused_optimizer,
        "target_kl": getattr(config, "target_kl", None) is not None,
        "critic_in_update": getattr(config, "critic_in_update", False),
    }
    wrong = [key for key, bad in reasons.items() if bad]
    if wrong:
        return (f"algo.{wrong[0]}={getattr(config, wrong[0])} is not supported with seeds "
                "trained together (they need network=mlp, float32 updates without compile or "
                "fused Adam, no target_kl, no critic_in_update)")
    return None


# ---------------------------------------------------------------------------------------------
# The stacked network
# ---------------------------------------------------------------------------------------------
class StackedActorCritic:
    """K :class:`ActorCritic` MLPs of one shape as ``(K, ...)`` leaf tensors; every method
    takes ``(K, M, obs_dim)`` observations and returns ``(K, M, ...)``."""

    def __init__(self, policies: Sequence[ActorCritic]) -> None:
        first = policies[0]
        if first.network != MLP:
            raise ValueError(f"seeds trained together need network=mlp, not {first.network}")
        self.discrete, self.obs_dim = first.discrete, first.obs_dim
        self.layers = {"actor": list(first.actor), "critic": list(first.critic)}
        named = [dict(p.named_parameters()) for p in policies]
        self.params = {name: torch.stack([n[name].detach() for n in named]).requires_grad_()
                       for name in named[0]}
        if self.discrete:
            self.action_start = first.action_start
        else:
            self.act_dim = first.act_dim
            self.action_low, self.action_high = first.action_low, first.action_high

    def parameters(self) -> list[torch.Tensor]:
        return list(self.params.values())

    def write_back(self, policies: Sequence[ActorCritic]) -> None:
        """Each seed's weights into its own module."""
        with torch.no_grad():
            for k, policy in enumerate(policies):
                for name, param in policy.named_parameters():
                    param.copy_(self.params[name][k])

    def _mlp(self, head: str, x: torch.Tensor, seed: int | None = None) -> torch.Tensor:
        """``head`` over ``x``: all seeds (``x`` (K, M, D)) or one (``seed``, ``x`` (M, D))."""
        for i, layer in enumerate(self.layers[head]):
            if not isinstance(layer, nn.Linear):
                x = layer(x)
                continue
            weight, bias = self.params[f"{head}.{i}.weight"], self.params[f"{head}.{i}.bias"]
            if seed is not None:
                x = nn.functional.linear(x, weight[seed], bias[seed])
            else:
                x = torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))
        return x

    def actor(self, obs: torch.Tensor) -> torch.Tensor:
        return self._mlp("actor", obs)

    def value(self, obs: torch.Tensor, seed: int | None = None) -> torch.Tensor:
        return self._mlp("critic", obs, seed).squeeze(-1)

    def sample(self, out: torch.Tensor, generators: Sequence[torch.Generator]):
        """``(actions, log_prob)`` from the actor's outputs, seed k drawing from its own
        generator exactly as :meth:`ActorCritic.sample_actions` does."""
        if self.discrete:
            log_probs = torch.log_softmax(out, dim=-1)
            probs = log_probs.exp()
            actions = torch.stack([torch.multinomial(probs[k], 1, generator=g).squeeze(-1)
                                   for k, g in enumerate(generators)])
            return actions, log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        noise = torch.stack([torch.randn(out.shape[1:], generator=g, dtype=out.dtype)
                             for g in generators])
        log_std = self.params["log_std"].unsqueeze(1)
        actions = out + noise * log_std.exp()
        return actions, self._gaussian_log_prob(out, actions)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor):
        """``(log_prob, entropy, value)`` of ``actions``, each ``(K, M)``."""
        out, value = self.actor(obs), self.value(obs)
        if self.discrete:
            log_prob, entropy = categorical_log_prob_entropy(out, actions)
        else:
            log_prob = self._gaussian_log_prob(out, actions)
            entropy = gaussian_entropy(self.params["log_std"]).unsqueeze(-1).expand(out.shape[:2])
        return log_prob, entropy, value

    def to_env(self, actions: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            return actions + self.action_start if self.action_start else actions
        return torch.maximum(torch.minimum(actions, self.action_high), self.action_low)

    def _gaussian_log_prob(self, mean: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return gaussian_log_prob(mean, actions, self.params["log_std"].unsqueeze(1))


# ---------------------------------------------------------------------------------------------
# K optimisers as one
# ---------------------------------------------------------------------------------------------
def stacked_optimizer(optimizers: Sequence[torch.optim.Optimizer],
                      params: Sequence[torch.Tensor]) -> torch.optim.Optimizer:
    """One optimiser of the seeds' class and hyperparameters over the stacked ``params``,
    holding each seed's state (moments stacked; the step count, equal for all, once)."""
    first = optimizers[0]
    (group,) = first.param_groups
    hyper = {key: value for key, value in group.items() if key != "params"}
    stacked = type(first)([{"params": list(params), **hyper}])
    states = [opt.state_dict()["state"] for opt in optimizers]
    if not states[0]:
        return stacked
    merged = {i: {key: _stack_state([s[i][key] for s in states], params[i])
                  for key in states[0][i]} for i in states[0]}
    stacked.load_state_dict({"state": merged, "param_groups": stacked.state_dict()["param_groups"]})
    return stacked


def _stack_state(values: list[torch.Tensor], param: torch.Tensor) -> torch.Tensor:
    if values[0].shape == param.shape[1:] and values[0].dim() > 0:
        return torch.stack(values)
    if any(not torch.equal(v, values[0]) for v in values[1:]):
        raise ValueError("the seeds' optimisers are at different steps")
    return values[0].clone()


def unstack_optimizer(stacked: torch.optim.Optimizer,
                      optimizers: Sequence[torch.optim.Optimizer]) -> None:
    """Seed k's slice of ``stacked``'s state and learning rate into ``optimizers[k]``."""
    state = stacked.state_dict()
    (group,) = state["param_groups"]
    params = stacked.param_groups[0]["params"]
    for k, opt in enumerate(optimizers):
        own = opt.state_dict()
        own["param_groups"][0]["lr"] = group["lr"]
        own["state"] = {i: {key: value[k].clone() if value.dim() and value.shape == params[i].shape
                            else value.clone() for key, value in entry.items()}
                        for i, entry in state["state"].items()}
        opt.load_state_dict(own)


def clip_grad_norms(params: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` per seed over stacked ``params``; the ``(K,)`` norms
    before clipping."""
    grads = [p.grad for p in params if p.grad is not None]
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads]).norm(dim=0)
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.view((-1,) + (1,) * (g.dim() - 1)))
    return norms


# ---------------------------------------------------------------------------------------------
# Training together
# ---------------------------------------------------------------------------------------------
def learn_together(agents: Sequence[ActorCriticAlgorithm | None],
                   until_env_steps: int) -> list[list[dict[str, Any]] | NonFiniteTraining | None]:
    """Train every agent to ``until_env_steps`` as its own ``learn`` would; per agent its
    update records, or the NonFiniteTraining that stopped it (the others go on).

    ``agents`` are slots: None leaves one empty (computed on zero weights, stepping no env),
    so that a seed's numbers never depend on which other slots are filled: a resumed group
    whose seeds stand at different env steps trains each stretch in the same slots and gets
    the numbers of the run that was not interrupted, to the bit."""
    until = check_budget("until_env_steps", until_env_steps)
    slots = list(agents)
    live = [k for k, agent in enumerate(slots) if agent is not None]
    if not live:
        raise ValueError("learn_together needs at least one agent")
    _check_together([slots[k] for k in live])
    results: list[Any] = [[] if agent is not None else None for agent in slots]
    while live and slots[live[0]].env_steps < until:
        stack = _Stack(slots)
        failures = stack.run(until, results)
        stack.write_back()
        for k, error in failures.items():
            results[k], slots[k] = error, None
        live = [k for k in live if k not in failures]
    return results


def _check_together(agents: Sequence[ActorCriticAlgorithm]) -> None:
    first = agents[0]
    refusal = lockstep_refusal(type(first), first.config)
    if refusal:
        raise ValueError(refusal)
    for agent in agents:
        if type(agent) is not type(first) or asdict(agent.config) != asdict(first.config):
            raise ValueError("seeds trained together need one algorithm and one config")
        if (agent.env_steps, agent.updates, agent.num_envs) != (
                first.env_steps, first.updates, first.num_envs):
            raise ValueError("seeds trained together must stand at the same env step")
        if autoreset_mode(agent.env, type(agent).__name__) is not AutoresetMode.SAME_STEP:
            raise ValueError("seeds trained together need environments with same-step autoreset")


def _empty_slot(agent: ActorCriticAlgorithm) -> tuple[ActorCritic, torch.optim.Optimizer]:
    """A zero-weight network shaped like ``agent``'s and an optimiser whose state has the
    same keys and step count, all moments zero (what an empty slot computes on)."""
    policy = copy.deepcopy(agent.policy)
    with torch.no_grad():
        for param in policy.parameters():
            param.zero_()
    state = agent.optimizer.state_dict()
    (group,) = agent.optimizer.param_groups
    optimizer = type(agent.optimizer)(
        policy.parameters(), **{k: v for k, v in group.items() if k != "params"})
    optimizer.load_state_dict({**state, "state": {
        i: {key: value.clone() if key == "step" else torch.zeros_like(value)
            for key, value in entry.items()} for i, entry in state["state"].items()}})
    return policy, optimizer


class _Stack:
    """The slots' networks and optimiser stacked for one stretch of updates."""

    def __init__(self, slots: Sequence[ActorCriticAlgorithm | None]) -> None:
        self.slots = slots
        self.live = [k for k, agent in enumerate(slots) if agent is not None]
        first = self.first = slots[self.live[0]]
        self.config = first.config
        empty = [None if agent is not None else _empty_slot(first) for agent in slots]
        self.policies = [a.policy if a is not None else e[0] for a, e in zip(slots, empty)]
        self.optimizers = [a.optimizer if a is not None else e[1] for a, e in zip(slots, empty)]
        self.net = StackedActorCritic(self.policies)
        self.optimizer = stacked_optimizer(self.optimizers, self.net.parameters())
        self.generators = [a.generator if a is not None else torch.Generator().manual_seed(0)
                           for a in slots]
        self.update = _ppo_update if isinstance(first, PPO) else _a2c_update

    def write_back(self) -> None:
        self.net.write_back(self.policies)
        unstack_optimizer(self.optimizer, self.optimizers)

    def run(self, until: int, records: list[Any]) -> dict[int, Exception]:
        """Updates until ``until`` or until some seed fails; the failed seeds by slot."""
        first = self.first
        for k in self.live:
            agent = self.slots[k]
            agent.total_env_steps = max(agent.total_env_steps or until, until)
            agent.rollouts.start()
        n_updates = math.ceil(first.total_env_steps / first.batch_size)
        while first.env_steps < until:
            progress = first.updates / n_updates
            learning_rate = self.config.learning_rate_at(progress)
            ent_coef = self.config.ent_coef_at(progress)
            t0 = time.perf_counter()
            batch, failures = self.collect()
            t1 = time.perf_counter()
            losses = self.update(self, batch, learning_rate, ent_coef)
            t2 = time.perf_counter()
            for k in self.live:
                agent = self.slots[k]
                agent.updates += 1
                own = {key: float(value[k]) for key, value in losses.items()}
                own["losses/explained_variance"] = explained_variance(
                    batch["values"][k], batch["returns"][k])
                try:
                    check_finite(agent.updates, own)
                except NonFiniteTraining as err:
                    failures.setdefault(k, err)
                records[k].append(update_record(
                    agent.env_steps, agent.updates, **agent.rollouts.episodes.take(),
                    **{"charts/learning_rate": learning_rate, "charts/ent_coef": ent_coef},
                    **own, **{"perf/rollout_s": t1 - t0, "perf/update_s": t2 - t1,
                              "perf/steps_per_s": agent.batch_size / max(t2 - t0, 1e-12)}))
            if failures:
                return failures
        return {}

    @torch.no_grad()
    def collect(self) -> tuple[dict[str, torch.Tensor], dict[int, Exception]]:
        """One rollout of every seed in its own env; per slot ``(K, n_steps * N, ...)``
        samples in the order its own rollout would have (step-major), and the seeds whose
        network stopped giving finite outputs."""
        net, cfg, live = self.net, self.config, self.live
        K, T, N = len(self.slots), cfg.n_steps, self.first.num_envs
        obs = torch.zeros((T, K, N, net.obs_dim))
        actions = torch.zeros((T, K, N) if net.discrete else (T, K, N, net.act_dim),
                              dtype=torch.int64 if net.discrete else torch.float32)
        log_probs, values = torch.zeros((T, K, N)), torch.zeros((T, K, N))
        rewards, dones = np.zeros((T, K, N), np.float32), np.zeros((T, K, N), np.float32)
        failures: dict[int, Exception] = {}
        for t in range(T):
            obs[t] = self._observations()
            out = net.actor(obs[t])
            values[t] = net.value(obs[t])
            out = self._finite(out, failures)
            actions[t], log_probs[t] = net.sample(out, self.generators)
            env_actions = net.to_env(actions[t]).numpy()
            for k in live:
                rewards[t, k], dones[t, k] = self._step(k, self.slots[k], env_actions[k])
        last_value = net.value(self._observations())
        next_values = torch.cat([values[1:], last_value.unsqueeze(0)])
        advantages, returns = compute_gae(torch.from_numpy(rewards), values, next_values,
                                          torch.from_numpy(dones), cfg.gamma, cfg.gae_lambda)
        for k in live:
            self.slots[k].count_rollout(advantages[:, k])
        per_slot = {"obs": obs, "actions": actions, "log_probs": log_probs, "values": values,
                    "advantages": advantages, "returns": returns}
        return {name: x.transpose(0, 1).reshape((K, T * N) + x.shape[3:])
                for name, x in per_slot.items()}, failures

    def _observations(self) -> torch.Tensor:
        """``(K, N, obs_dim)``: each seed's current observation, zeros in an empty slot."""
        shape = (self.first.num_envs, self.net.obs_dim)
        return torch.from_numpy(np.stack([
            np.asarray(a.rollouts.current_obs, dtype=np.float32) if a is not None
            else np.zeros(shape, np.float32) for a in self.slots]))

    def _finite(self, out: torch.Tensor, failures: dict[int, Exception]) -> torch.Tensor:
        """``out`` with the rows of seeds whose outputs overflowed zeroed (those seeds fail,
        as a single run's acting would)."""
        finite = torch.isfinite(out).flatten(1).all(dim=1)
        if bool(finite.all()):
            return out
        for k in torch.nonzero(~finite).flatten().tolist():
            failures.setdefault(k, NonFiniteTraining(
                f"update {self.slots[k].updates}: the network's outputs are no longer finite; "
                "a smaller algo.learning_rate usually helps"))
        return torch.where(finite.view(-1, 1, 1), out, torch.zeros_like(out))

    def _step(self, k: int, agent: ActorCriticAlgorithm, env_actions: np.ndarray):
        """Seed k's env step, as :class:`~plume.agents.on_policy.RolloutBuffer` takes it."""
        rollouts = agent.rollouts
        next_obs, reward, terminated, truncated, infos = agent.env.step(env_actions)
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        done = terminated | truncated
        rewards = np.asarray(reward, dtype=np.float32).copy()
        bootstrap = truncated & ~terminated
        if bootstrap.any():
            idx = np.flatnonzero(bootstrap)
            final = final_observations(next_obs, infos, idx, AutoresetMode.SAME_STEP)
            final_t = torch.as_tensor(final, dtype=torch.float32)
            rewards[idx] += self.config.gamma * self.net.value(final_t, seed=k).numpy()
        rollouts.current_obs = next_obs
        rollouts.episodes.step(reward, np.ones_like(done), done, infos)
        return rewards, done


def _set_lr(optimizer: torch.optim.Optimizer, learning_rate: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = learning_rate


def _step_optimizer(stack: _Stack, loss: torch.Tensor) -> torch.Tensor:
    """Backward of the seeds' summed losses (each seed's gradient is its own), clipping per
    seed, one optimiser step; the ``(K,)`` gradient norms."""
    stack.optimizer.zero_grad(set_to_none=True)
    loss.sum().backward()
    norms = clip_grad_norms(stack.net.parameters(), stack.config.max_grad_norm)
    stack.optimizer.step()
    return norms


def _ppo_update(stack: _Stack, batch: dict[str, torch.Tensor], learning_rate: float,
                ent_coef: float) -> dict[str, torch.Tensor]:
    """:meth:`PPO.update` for every seed: its own shuffles, its own minibatch losses."""
    cfg = stack.config
    _set_lr(stack.optimizer, learning_rate)
    K, n = batch["advantages"].shape
    rows = torch.arange(K).unsqueeze(1)
    stats = []
    for _ in range(cfg.n_epochs):
        perms = torch.stack([torch.randperm(n, generator=g) for g in stack.generators])
        for mb in torch.tensor_split(perms, cfg.n_minibatches, dim=1):
            log_prob, entropy, value = stack.net.evaluate(batch["obs"][rows, mb],
                                                          batch["actions"][rows, mb])
            pg, v, ent, kl, clip = ppo_losses(
                cfg, log_prob, entropy, value, batch["log_probs"][rows, mb],
                batch["advantages"][rows, mb], batch["returns"][rows, mb],
                batch["values"][rows, mb])
            _step_optimizer(stack, pg - ent_coef * ent + cfg.vf_coef * v)
            stats.append(torch.stack([pg, v, ent, kl, clip]).detach())
    mean = torch.stack(stats).mean(0)
    return {"losses/policy_loss": mean[0], "losses/value_loss": mean[1],
            "losses/entropy": mean[2], "losses/approx_kl": mean[3], "losses/clipfrac": mean[4],
            "losses/n_epochs": torch.full((K,), cfg.n_epochs)}


def _a2c_update(stack: _Stack, batch: dict[str, torch.Tensor], learning_rate: float,
                ent_coef: float) -> dict[str, torch.Tensor]:
    """:meth:`A2C.update` for every seed: one gradient step on its whole rollout."""
    cfg = stack.config
    _set_lr(stack.optimizer, learning_rate)
    log_prob, entropy, value = stack.net.evaluate(batch["obs"], batch["actions"])
    policy_loss, value_loss, ent = a2c_losses(cfg, log_prob, entropy, value,
                                              batch["advantages"], batch["returns"])
    norms = _step_optimizer(stack, policy_loss - ent_coef * ent + cfg.vf_coef * value_loss)
    return {"losses/policy_loss": policy_loss.detach(), "losses/value_loss": value_loss.detach(),
            "losses/entropy": ent.detach(), "losses/grad_norm": norms}
