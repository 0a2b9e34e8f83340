"""Policy/value networks for the on-policy agents (PPO, A2C).

``mlp`` builds a plain multilayer perceptron with orthogonal initialisation (the CleanRL/SB3
convention: hidden layers gain sqrt(2), biases zero, the output layer a caller-chosen gain:
0.01 for policy heads so the initial policy is near uniform, 1.0 for value heads).

``ActorCritic`` holds an actor and a critic, built from Gymnasium spaces: two separate MLPs
(``network="mlp"``) or, for a network an environment declares (``EnvSpec.networks``), one
shared feature extractor with separate MLP heads (see the class docstring):

- observation space: a flat (1-D) ``Box``;
- action space: ``Discrete(n, start)`` -> categorical over ``n`` logits, or a flat ``Box`` ->
  diagonal Gaussian whose mean comes from the actor and whose log standard deviation is a
  state-independent parameter.

Actions handled by the network ("policy actions") are the raw samples: integers ``0..n-1`` for
``Discrete`` and unclipped reals for ``Box``. Log-probabilities are always those of the raw
sample. :meth:`ActorCritic.to_env` maps policy actions to what the environment accepts (adds
``Discrete.start``; clips ``Box`` actions to the bounds). Store policy actions in rollouts,
step the environment with ``to_env(actions)``.

The networks know nothing about traces, samplers or environments beyond their spaces: a
network name other than ``mlp`` is resolved through the environment registry
(:func:`network_names`, :func:`feature_extractor`), whose specs load their extractors lazily.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import torch
from torch import nn

from plume.envs.registry import declared_networks

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU,
}
MLP = "mlp"
"""The agents' own network: plain MLPs over the flat observation."""
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def mlp(
    in_dim: int,
    hidden_sizes: Sequence[int],
    out_dim: int,
    activation: str = "tanh",
    out_gain: float = 1.0,
) -> nn.Sequential:
    """``in_dim -> hidden_sizes... -> out_dim`` MLP, orthogonally initialised.

    Hidden layers: ``Linear`` (orthogonal, gain sqrt(2), bias 0) followed by ``activation``
    (one of ``"tanh"``, ``"relu"``, ``"elu"``). Output layer: ``Linear`` (orthogonal, gain
    ``out_gain``, bias 0), no activation.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    sizes = [int(in_dim), *(int(h) for h in hidden_sizes), int(out_dim)]
    if any(s < 1 for s in sizes):
        raise ValueError(f"layer sizes must be positive, got {sizes}")
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        last = i == len(sizes) - 2
        linear = nn.Linear(sizes[i], sizes[i + 1])
        nn.init.orthogonal_(linear.weight, gain=out_gain if last else math.sqrt(2.0))
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if not last:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


def network_names() -> tuple[str, ...]:
    """Every valid ``network``: ``mlp`` and each network an environment declares."""
    return (MLP, *declared_networks())


def feature_extractor(
    network: str, obs_dim: int, hidden_sizes: Sequence[int], activation: str
) -> tuple[nn.Module, int]:
    """``(module, out_dim)`` mapping flat observations ``(B, obs_dim)`` to features ``(B,
    out_dim)``. ``mlp``: hidden layers of ``hidden_sizes`` with ``activation`` (the identity
    when empty); another name: the extractor an environment declares for it, built as
    ``cls(obs_dim)``, which checks that ``obs_dim`` is its observation (heads on top use
    ``hidden_sizes``)."""
    if network == MLP:
        sizes = [int(obs_dim), *(int(h) for h in hidden_sizes)]
        if len(sizes) == 1:
            return nn.Identity(), int(obs_dim)
        body = mlp(sizes[0], sizes[1:-1], sizes[-1], activation, out_gain=math.sqrt(2.0))
        return nn.Sequential(*body, ACTIVATIONS[activation]()), sizes[-1]
    declared = declared_networks()
    if network in declared:
        module = declared[network]()(int(obs_dim))
        return module, int(module.out_dim)
    raise ValueError(f"network must be one of {network_names()}, got {network!r}")


def mixed_precision(module: nn.Module, x: torch.Tensor, dtype: torch.dtype | None):
    """``module(x)`` with every layer but the last ``Linear`` under ``dtype`` autocast (None:
    plain float32). The output layers stay in float32: logits and values in bfloat16 make the
    PPO ratio ``exp(log pi - log pi_old)`` noisy against the float32 rollout (all-bf16 collapsed
    learning in a trial)."""
    if dtype is None:
        return module(x)
    if not isinstance(module, nn.Sequential):  # a feature extractor: all of it
        with torch.autocast(x.device.type, dtype=dtype):
            return module(x)
    *body, last = module
    with torch.autocast(x.device.type, dtype=dtype):
        for layer in body:
            x = layer(x)
    if isinstance(last, nn.Sequential):
        return mixed_precision(last, x, dtype)
    return last(x.float())


class ActorCritic(nn.Module):
    """Actor and critic for a flat ``Box`` observation space.

    ``network="mlp"`` (default): two separate MLPs over the flat observation, ``self.actor``
    and ``self.critic``. Another network (one an environment declares, :func:`network_names`):
    its feature extractor shared by the two (Stable-Baselines3's
    ``share_features_extractor``), then separate MLP heads: ``self.actor = Sequential(extractor,
    policy_head)`` and ``self.critic = Sequential(extractor, value_head)`` hold the *same*
    extractor module, so both losses' gradients reach it and the optimiser sees its parameters
    once (``parameters()`` de-duplicates; ``state_dict()`` lists them under ``actor.0.*`` and
    ``critic.0.*``, which load back into the one module). Calling ``self.actor`` and
    ``self.critic`` separately (``dist``, ``value``, ``sample_actions``) runs the extractor
    once each; :meth:`act` and :meth:`evaluate` compute the features once and apply both heads.

    Args:
        observation_space: flat ``gymnasium.spaces.Box`` (one observation, not a batch).
        action_space: ``Discrete`` or flat ``Box`` (one action, not a batch).
        hidden_sizes, activation: hidden layers of both MLPs / heads (see :func:`mlp`); an
            environment's extractor has its own layers and activations.
        log_std_init: initial log standard deviation of the Gaussian (``Box`` actions only).
        network: one of :func:`network_names`.

    All methods take batched observations ``(B, obs_dim)`` float32 tensors.
    """

    def __init__(
        self,
        observation_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
        log_std_init: float = 0.0,
        network: str = "mlp",
    ) -> None:
        super().__init__()
        if network not in network_names():
            raise ValueError(f"network must be one of {network_names()}, got {network!r}")
        if not isinstance(observation_space, gym.spaces.Box) or len(observation_space.shape) != 1:
            raise ValueError(
                "ActorCritic needs a flat Box observation space (shape (obs_dim,)), "
                f"got {observation_space}"
            )
        self.obs_dim = int(observation_space.shape[0])
        self.network = network
        self.update_dtype: torch.dtype | None = None  # see evaluate()
        self.shared = network != MLP
        if self.shared:
            # The shared extractor draws its random initialisation before both heads.
            extractor, feature_dim = feature_extractor(network, self.obs_dim, (), activation)

        def build(out_dim: int, out_gain: float) -> nn.Module:
            # network="mlp": exactly the calls (and draw order) of the plain actor and critic.
            if not self.shared:
                return mlp(self.obs_dim, hidden_sizes, out_dim, activation, out_gain=out_gain)
            head = mlp(feature_dim, hidden_sizes, out_dim, activation, out_gain=out_gain)
            return nn.Sequential(extractor, head)

        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if self.discrete:
            self.n_actions = int(action_space.n)
            self.action_start = int(action_space.start)
            self.actor = build(self.n_actions, 0.01)
        elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
            self.act_dim = int(action_space.shape[0])
            self.actor = build(self.act_dim, 0.01)
            self.log_std = nn.Parameter(torch.full((self.act_dim,), float(log_std_init)))
            # Bounds may be infinite; clamping against +-inf is a no-op.
            self.register_buffer(
                "action_low", torch.as_tensor(action_space.low, dtype=torch.float32)
            )
            self.register_buffer(
                "action_high", torch.as_tensor(action_space.high, dtype=torch.float32)
            )
        else:
            raise ValueError(
                f"ActorCritic supports Discrete or flat Box action spaces, got {action_space}"
            )
        self.critic = build(1, 1.0)

    # -- basic heads ----------------------------------------------------------------------------
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State value ``V(obs)``, shape ``(B,)``."""
        return self.critic(obs).squeeze(-1)

    def dist(self, obs: torch.Tensor) -> torch.distributions.Distribution:
        """The policy distribution at ``obs`` (batch shape ``(B,)``; for ``Box`` the event
        shape is ``(act_dim,)``, so ``log_prob`` and ``entropy`` are per-sample)."""
        out = self.actor(obs)
        if self.discrete:
            return torch.distributions.Categorical(logits=out, validate_args=False)
        normal = torch.distributions.Normal(
            out, self.log_std.exp().expand_as(out), validate_args=False
        )
        return torch.distributions.Independent(normal, 1, validate_args=False)

    # -- what the algorithms use (hand-written densities: faster than torch.distributions) -----
    def sample_actions(
        self,
        obs: torch.Tensor,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample (or, if ``deterministic``, take the mode of) the policy; actor only.

        Returns ``(actions, log_prob)``: policy actions (``(B,)`` int64 for ``Discrete``,
        ``(B, act_dim)`` unclipped float for ``Box``) and their log-probability ``(B,)``.
        Randomness comes from ``generator`` (torch's default generator if None).
        """
        return self._sample(self.actor(obs), deterministic, generator)

    def _sample(
        self, out: torch.Tensor, deterministic: bool, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`sample_actions` from the actor's output ``out``."""
        if self.discrete:
            log_probs = torch.log_softmax(out, dim=-1)
            if deterministic:
                actions = out.argmax(dim=-1)
            else:
                actions = torch.multinomial(log_probs.exp(), 1, generator=generator).squeeze(-1)
            return actions, log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        if deterministic:
            actions = out
        else:
            noise = torch.randn(out.shape, generator=generator, dtype=out.dtype, device=out.device)
            actions = out + noise * self.log_std.exp()
        return actions, self._gaussian_log_prob(out, actions)

    def act(
        self,
        obs: torch.Tensor,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(actions, log_prob, value)``: :meth:`sample_actions` plus ``V(obs)`` (a shared
        extractor runs once)."""
        if self.shared:
            features = self.actor[0](obs)
            actions, log_prob = self._sample(self.actor[1](features), deterministic, generator)
            return actions, log_prob, self.critic[1](features).squeeze(-1)
        actions, log_prob = self.sample_actions(obs, deterministic, generator)
        return actions, log_prob, self.value(obs)

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log_prob, entropy, value)`` of given policy ``actions`` at ``obs``, each ``(B,)``
        (a shared extractor runs once; its gradient is the sum of both heads')."""
        dtype = self.update_dtype
        if self.shared:
            features = mixed_precision(self.actor[0], obs, dtype)
            out = mixed_precision(self.actor[1], features, dtype)
            value = mixed_precision(self.critic[1], features, dtype)
        else:
            out = mixed_precision(self.actor, obs, dtype)
            value = mixed_precision(self.critic, obs, dtype)
        if self.discrete:
            log_prob, entropy = categorical_log_prob_entropy(out, actions)
        else:
            log_prob = self._gaussian_log_prob(out, actions)
            entropy = gaussian_entropy(self.log_std).expand(out.shape[0])
        return log_prob, entropy, value.squeeze(-1)

    def to_env(self, actions: torch.Tensor) -> torch.Tensor:
        """Policy actions -> environment actions (``Discrete``: ``+ start``; ``Box``: clipped)."""
        if self.discrete:
            return actions + self.action_start if self.action_start else actions
        return torch.maximum(torch.minimum(actions, self.action_high), self.action_low)

    def _gaussian_log_prob(self, mean: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return gaussian_log_prob(mean, actions, self.log_std)


def categorical_log_prob_entropy(logits: torch.Tensor, actions: torch.Tensor):
    """``(log_prob, entropy)`` of ``actions`` under the categorical of ``logits`` (the last
    dimension), for one network or K stacked ones (``plume.agents.lockstep``)."""
    log_probs = torch.log_softmax(logits, dim=-1)
    log_prob = log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    return log_prob, -(log_probs.exp() * log_probs).sum(-1)


def gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    """Entropy of the diagonal Gaussian with ``log_std`` (the last dimension)."""
    return (0.5 + _LOG_SQRT_2PI + log_std).sum(-1)


def gaussian_log_prob(mean: torch.Tensor, actions: torch.Tensor,
                      log_std: torch.Tensor) -> torch.Tensor:
    """Log-density of ``actions`` under the diagonal Gaussian (``log_std`` broadcast against
    ``mean``), summed over the last dimension."""
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z.pow(2) - log_std - _LOG_SQRT_2PI).sum(-1)
