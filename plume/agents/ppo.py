"""Proximal Policy Optimisation (clipped surrogate, GAE), CleanRL style.

Read top to bottom: :class:`PPOConfig` (hyperparameters, validated) and :class:`PPO`'s
``update``. What PPO shares with A2C (the environment contract, rollout collection, GAE,
schedules, the learn loop, acting and state) is in :mod:`plume.agents.on_policy`, whose
docstring documents it. The algorithm receives a Gymnasium vector environment and nothing
else: it knows nothing about traces or samplers.

Metrics of an update (besides those of :mod:`plume.agents.on_policy`):

- ``losses/policy_loss``: clipped surrogate loss (to minimise), mean over minibatches.
- ``losses/value_loss``: 0.5 x (clipped, if ``clip_vloss``) squared value error, mean.
- ``losses/entropy``: mean policy entropy, mean over minibatches.
- ``losses/approx_kl``: estimator ``mean((ratio - 1) - log ratio)`` of KL(old || new), mean
  over the minibatches of the epochs run.
- ``losses/clipfrac``: fraction of samples with ``|ratio - 1| > clip_coef``, mean.
- ``losses/n_epochs``: epochs actually run (fewer than ``n_epochs`` when ``target_kl`` stops).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from plume.agents.base import check_bool, check_int, check_real, fail_field
from plume.agents.on_policy import (
    ActorCriticAlgorithm,
    ActorCriticConfig,
    Rollout,
    explained_variance,
)


@dataclass
class PPOConfig(ActorCriticConfig):
    """PPO hyperparameters (defaults: CleanRL's ``ppo.py``, except the network)."""

    n_epochs: int = 4
    """Passes over each rollout."""
    n_minibatches: int = 4
    """Minibatches per epoch (the rollout is split into this many near-equal parts)."""
    clip_coef: float = 0.2
    """Surrogate clipping coefficient (also used for value clipping)."""
    clip_vloss: bool = True
    """Clip the value loss around the rollout's value predictions."""
    target_kl: float | None = None
    """Stop the epochs of an update early when their mean approx KL exceeds this."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(self, "n_epochs", 1)
        check_int(self, "n_minibatches", 1)
        if not check_real(self, "clip_coef") > 0:
            fail_field(self, "clip_coef", "> 0")
        check_bool(self, "clip_vloss")
        if self.target_kl is not None and not check_real(self, "target_kl") > 0:
            fail_field(self, "target_kl", "None or > 0")


def ppo_losses(cfg: PPOConfig, log_prob, entropy, value, old_log_prob, advantages, returns,
               old_value):
    """``(policy loss, value loss, entropy, approx_kl, clipfrac)`` of one minibatch, each the
    mean over the last dimension: ``(M,)`` inputs give scalars, ``(K, M)`` inputs (K seeds
    trained together, :mod:`plume.agents.lockstep`) one value per seed."""
    logratio = log_prob - old_log_prob
    ratio = logratio.exp()
    with torch.no_grad():
        approx_kl = ((ratio - 1.0) - logratio).mean(-1)
        clipfrac = ((ratio - 1.0).abs() > cfg.clip_coef).float().mean(-1)
    adv = advantages
    if cfg.norm_adv and adv.shape[-1] > 1:
        adv = (adv - adv.mean(-1, keepdim=True)) / (adv.std(-1, keepdim=True) + 1e-8)
    pg_loss = torch.max(
        -adv * ratio, -adv * ratio.clamp(1.0 - cfg.clip_coef, 1.0 + cfg.clip_coef)
    ).mean(-1)
    if cfg.clip_vloss:
        v_clipped = old_value + (value - old_value).clamp(-cfg.clip_coef, cfg.clip_coef)
        v_loss = 0.5 * torch.max((value - returns) ** 2, (v_clipped - returns) ** 2).mean(-1)
    else:
        v_loss = 0.5 * ((value - returns) ** 2).mean(-1)
    return pg_loss, v_loss, entropy.mean(-1), approx_kl, clipfrac


class PPO(ActorCriticAlgorithm):
    """PPO on a Gymnasium vector environment (contract: :mod:`plume.agents.on_policy`).

    ``PPO(env, config, seed, total_env_steps)``; the optimiser is Adam (eps 1e-5).
    """

    CONFIG = PPOConfig

    def __init__(self, env, config: PPOConfig | None = None, seed: int = 0,
                 total_env_steps: int | None = None) -> None:
        config = config if config is not None else PPOConfig()
        batch = config.n_steps * int(env.num_envs)
        if config.n_minibatches > batch:
            raise ValueError(
                f"PPOConfig.n_minibatches ({config.n_minibatches}) exceeds the rollout size "
                f"n_steps * num_envs = {batch}"
            )
        super().__init__(env, config, seed, total_env_steps)

    def make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.policy.parameters(), lr=self.config.learning_rate, eps=1e-5,
                                fused=self.config.fused_optimizer or None)

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
                log_prob, entropy, value = self.evaluate_actions(
                    rollout.obs[mb], rollout.actions[mb]
                )
                pg_loss, v_loss, ent, approx_kl, clipfrac = ppo_losses(
                    cfg, log_prob, entropy, value, rollout.log_probs[mb],
                    rollout.advantages[mb], rollout.returns[mb], rollout.values[mb])
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

        mean = {k: torch.stack(v).mean().item() for k, v in stats.items()}
        return {
            "losses/policy_loss": mean["pg"],
            "losses/value_loss": mean["v"],
            "losses/entropy": mean["ent"],
            "losses/approx_kl": mean["kl"],
            "losses/clipfrac": mean["clip"],
            "losses/explained_variance": explained_variance(rollout.values[rollout.valid],
                                                             rollout.returns[rollout.valid]),
            "losses/n_epochs": epochs_run,
        }
