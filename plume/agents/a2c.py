"""Advantage Actor-Critic (synchronous A2C), as the paper trains Gelato, Pensieve and Aurora.

Read top to bottom: :class:`A2CConfig` and :class:`A2C`'s ``update``: one gradient step per
rollout of ``n_steps`` per copy on

    loss = -mean(A_t * log pi(a_t|s_t)) - ent_coef * mean(H(pi(.|s_t)))
           + vf_coef * mean((R_t - V(s_t))^2)

with ``R_t = A_t + V(s_t)``. ``gae_lambda = 1`` (the default) makes ``A_t`` the n-step
advantage bootstrapped at the rollout's end (the paper's "t_max / n-step 15"); lower values
give GAE. Defaults are Stable-Baselines3's A2C (the library the paper used): RMSprop (alpha
0.99, eps 1e-5), lr 7e-4, n_steps 5, no advantage normalisation, value loss the plain mean
squared error (no 1/2). Rollout collection, GAE, schedules (learning rate, entropy annealing as
the paper's 5.75 -> 0.0025), acting and state are shared with PPO in
:mod:`plume.agents.on_policy`, whose docstring documents the environment contract and the
common metrics. Because the one gradient step uses the parameters that acted,
``critic_in_update`` can take the rollout's values V(s_t) from the update's own forward pass
(run as the rollout ends) instead of running the critic at every acting step. Metrics of an
update: ``losses/policy_loss``, ``losses/value_loss``, ``losses/entropy``,
``losses/grad_norm`` (before clipping).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from plume.agents.base import check_bool, check_real, fail_field
from plume.agents.on_policy import (
    ActorCriticAlgorithm,
    ActorCriticConfig,
    Rollout,
    explained_variance,
)

OPTIMIZERS = ("rmsprop", "adam")


@dataclass
class A2CConfig(ActorCriticConfig):
    """A2C hyperparameters (defaults: Stable-Baselines3's A2C, except the network)."""

    learning_rate: float = 7e-4
    """Learning rate at the start of training."""
    anneal_lr: bool = False
    """Linearly anneal the learning rate towards 0 over the budget."""
    n_steps: int = 5
    """Steps per environment copy per rollout (the paper's t_max)."""
    gae_lambda: float = 1.0
    """1 = n-step returns; below 1, GAE."""
    norm_adv: bool = False
    """Normalise the rollout's advantages."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient (start value when scheduled)."""
    optimizer: str = "rmsprop"
    """rmsprop (SB3's and the A3C paper's choice) or adam."""
    rms_alpha: float = 0.99
    """RMSprop smoothing constant."""
    optimizer_eps: float = 1e-5
    """Epsilon of RMSprop or Adam."""
    critic_in_update: bool = False
    """Take V(s_t) from the update's forward pass, run once over the rollout as it ends,
    instead of running the critic at every acting step: the same values up to rounding (with
    ``update_precision=bfloat16``, those of the bf16 pass), because A2C's one gradient step
    uses the parameters that acted, for one critic pass less per sample. Off by default so
    earlier runs stay bit-identical (a batch of the whole rollout rounds differently from
    batches of one step)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.optimizer not in OPTIMIZERS:
            fail_field(self, "optimizer", f"one of {list(OPTIMIZERS)}")
        if not 0 <= check_real(self, "rms_alpha") < 1:
            fail_field(self, "rms_alpha", "in [0, 1)")
        if not check_real(self, "optimizer_eps") > 0:
            fail_field(self, "optimizer_eps", "> 0")
        check_bool(self, "critic_in_update")
        if self.fused_optimizer and self.optimizer != "adam":
            fail_field(self, "fused_optimizer", "false unless optimizer=adam (torch fuses Adam)")


def a2c_losses(cfg: A2CConfig, log_prob, entropy, value, advantages, returns):
    """``(policy loss, value loss, entropy)`` of a rollout, each the mean over the last
    dimension: ``(B,)`` inputs give scalars, ``(K, B)`` inputs (K seeds trained together,
    :mod:`plume.agents.lockstep`) one value per seed."""
    adv = advantages
    if cfg.norm_adv and adv.shape[-1] > 1:
        adv = (adv - adv.mean(-1, keepdim=True)) / (adv.std(-1, keepdim=True) + 1e-8)
    policy_loss = -(adv * log_prob).mean(-1)
    value_loss = ((returns - value) ** 2).mean(-1)
    return policy_loss, value_loss, entropy.mean(-1)


class A2C(ActorCriticAlgorithm):
    """A2C on a Gymnasium vector environment (contract: :mod:`plume.agents.on_policy`)."""

    CONFIG = A2CConfig

    def make_optimizer(self) -> torch.optim.Optimizer:
        cfg, params = self.config, self.policy.parameters()
        if cfg.optimizer == "rmsprop":
            return torch.optim.RMSprop(params, lr=cfg.learning_rate, alpha=cfg.rms_alpha,
                                       eps=cfg.optimizer_eps)
        return torch.optim.Adam(params, lr=cfg.learning_rate, eps=cfg.optimizer_eps,
                                fused=cfg.fused_optimizer or None)

    def rollout_forward(self):
        return self.evaluate_actions if self.config.critic_in_update else None

    def update(self, rollout: Rollout, learning_rate: float, ent_coef: float) -> dict[str, float]:
        """One gradient step on the whole rollout (its training samples)."""
        cfg = self.config
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        idx = rollout.valid
        if rollout.forward is not None:
            log_prob, entropy, value = (x[idx] for x in rollout.forward)
        else:
            log_prob, entropy, value = self.evaluate_actions(rollout.obs[idx],
                                                             rollout.actions[idx])
        policy_loss, value_loss, ent = a2c_losses(cfg, log_prob, entropy, value,
                                                  rollout.advantages[idx], rollout.returns[idx])
        loss = policy_loss - ent_coef * ent + cfg.vf_coef * value_loss
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        return {
            "losses/policy_loss": policy_loss.item(),
            "losses/value_loss": value_loss.item(),
            "losses/entropy": ent.item(),
            "losses/grad_norm": float(grad_norm),
            "losses/explained_variance": explained_variance(rollout.values[rollout.valid],
                                                             rollout.returns[rollout.valid]),
        }
