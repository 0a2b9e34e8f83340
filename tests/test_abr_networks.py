"""The paper's ABR feature extractors (plume.envs.abr.networks) and ActorCritic's shared
extractor path (plume.agents.networks.ActorCritic(network=...))."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from plume.agents.networks import ActorCritic, feature_extractor, mlp
from plume.envs.abr.networks import EXTRACTORS, GelatoExtractor, PensieveExtractor
from plume.envs.registry import get_env

GELATO_DIM, PENSIEVE_DIM = 260, 48


def conv1d_params(c_in: int, c_out: int, k: int) -> int:
    return c_in * c_out * k + c_out


def linear_params(n_in: int, n_out: int) -> int:
    return n_in * n_out + n_out


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


# Hand counts from the layer lists (the module docstring / the paper's App. C).
GELATO_EXTRACTOR_PARAMS = (
    conv1d_params(10, 64, 3) + conv1d_params(64, 64, 3)          # history: 1984 + 12352
    + 2 * (conv1d_params(5, 32, 5) + conv1d_params(32, 32, 5))   # sizes, SSIM: 2 x (832 + 5152)
)
PENSIEVE_EXTRACTOR_PARAMS = 3 * linear_params(1, 128) + 3 * conv1d_params(1, 128, 4)
GELATO_OUT = 64 * 2 + 32 * 2 + 32 * 2      # lengths 6 -> 4 -> 2 and 10 -> 6 -> 2
PENSIEVE_OUT = 128 * 3 + 128 * (8 - 3) * 2 + 128 * (6 - 3)


def head_params(n_in: int, hidden: int, n_out: int) -> int:
    return linear_params(n_in, hidden) + linear_params(hidden, n_out)


# Paper heads: Gelato pi/vf [256] over 10 actions, Pensieve pi/vf [128] over 6 actions.
GELATO_AC_PARAMS = (GELATO_EXTRACTOR_PARAMS + head_params(GELATO_OUT, 256, 10)
                    + head_params(GELATO_OUT, 256, 1))
PENSIEVE_AC_PARAMS = (PENSIEVE_EXTRACTOR_PARAMS + head_params(PENSIEVE_OUT, 128, 6)
                      + head_params(PENSIEVE_OUT, 128, 1))


def test_hand_counts_are_the_numbers_reported():
    assert GELATO_EXTRACTOR_PARAMS == 26_304 and GELATO_OUT == 256
    assert PENSIEVE_EXTRACTOR_PARAMS == 2_688 and PENSIEVE_OUT == 2_048
    assert GELATO_AC_PARAMS == 160_715
    assert PENSIEVE_AC_PARAMS == 528_135


@pytest.fixture(scope="module")
def envs():
    """Small real test-mode envs of both variants (one copy per trace, 4 traces)."""
    spec = get_env("abr")
    out = {}
    for variant in ("gelato", "pensieve"):
        params = spec.params(variant=variant)
        traces = spec.load_builtin(spec.default_dataset(params), "test").subset(range(4))
        out[variant] = spec.make(traces, None, None, mode="test", seed=0, params=params)
    yield out
    for env in out.values():
        env.close()


def real_observations(env, steps: int, seed: int = 0) -> np.ndarray:
    """Observations of ``steps`` steps of random actions, stacked (steps * N, obs_dim)."""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    rows = [obs]
    for _ in range(steps - 1):
        actions = rng.integers(0, env.single_action_space.n, size=env.num_envs)
        obs, *_ = env.step(actions)
        rows.append(obs)
    return np.concatenate(rows).astype(np.float32)


# -- extractors ---------------------------------------------------------------------------------
def test_registry_and_feature_extractor():
    assert EXTRACTORS == {"gelato": GelatoExtractor, "pensieve": PensieveExtractor}
    module, dim = feature_extractor("gelato", GELATO_DIM, (), "tanh")
    assert isinstance(module, GelatoExtractor) and dim == GELATO_OUT == module.out_dim
    module, dim = feature_extractor("pensieve", PENSIEVE_DIM, (64,), "relu")
    assert isinstance(module, PensieveExtractor) and dim == PENSIEVE_OUT == module.out_dim


@pytest.mark.parametrize("cls, obs_dim, out_dim, n", [
    (GelatoExtractor, GELATO_DIM, GELATO_OUT, GELATO_EXTRACTOR_PARAMS),
    (PensieveExtractor, PENSIEVE_DIM, PENSIEVE_OUT, PENSIEVE_EXTRACTOR_PARAMS),
])
def test_shapes_and_parameter_counts(cls, obs_dim, out_dim, n):
    torch.manual_seed(0)
    ext = cls(obs_dim)
    assert isinstance(ext.out_dim, int) and ext.out_dim == out_dim
    assert n_params(ext) == n
    for batch in (1, 7, 512):
        y = ext(torch.rand(batch, obs_dim))
        assert y.shape == (batch, out_dim) and y.dtype == torch.float32
        assert torch.isfinite(y).all() and (y >= 0).all()   # ReLU features
    x = torch.rand(2, 3, obs_dim)
    y = ext(x)
    assert y.shape == (2, 3, out_dim)
    assert torch.allclose(y.reshape(6, out_dim), ext(x.reshape(6, obs_dim)), atol=1e-6)
    assert ext(torch.rand(obs_dim)).shape == (out_dim,)
    assert ext(torch.rand(0, obs_dim)).shape == (0, out_dim)


def test_obs_dim_mismatch_errors():
    with pytest.raises(ValueError, match=r"10 x 26.*obs_dim 260\), got 48: use network=pensieve \(algo=a2c_pensieve\)"
                                         r" or mlp for env.variant=pensieve"):
        GelatoExtractor(PENSIEVE_DIM)
    with pytest.raises(ValueError, match=r"6 x 8.*obs_dim 48\), got 260: use network=gelato "
                                         r"\(algo=a2c_gelato\) or mlp for env.variant=gelato"):
        PensieveExtractor(GELATO_DIM)
    for cls in (GelatoExtractor, PensieveExtractor):
        with pytest.raises(ValueError, match=r"got 100: use network=mlp"):
            cls(100)
    with pytest.raises(ValueError, match="init must be one of"):
        GelatoExtractor(GELATO_DIM, init="xavier")


def dependency(ext: nn.Module, obs_dim: int, n_points: int = 6) -> torch.Tensor:
    """|d features / d obs| summed over random points in [0, 1]: (out_dim, obs_dim)."""
    gen = torch.Generator().manual_seed(1)
    total = torch.zeros(ext.out_dim, obs_dim, dtype=torch.float64)
    for _ in range(n_points):
        x = torch.rand(obs_dim, generator=gen)
        total += torch.autograd.functional.jacobian(ext, x).abs().double()
    return total


def test_gelato_reads_exactly_its_blocks():
    torch.manual_seed(0)
    ext = GelatoExtractor(GELATO_DIM)
    dep = dependency(ext, GELATO_DIM).reshape(GELATO_OUT, 10, 26)
    hist, sizes, ssim = slice(0, 128), slice(128, 192), slice(192, 256)
    # History branch: all 10 rows x cols 0-5 (the 5 history columns and the stall column).
    assert (dep[hist, :, 0:6].sum(0) > 0).all()
    assert (dep[hist, :, 6:] == 0).all()
    # Look-ahead branches: rows 0-4 of their own 10 columns, and nothing else.
    assert (dep[sizes, 0:5, 6:16].sum(0) > 0).all()
    assert (dep[ssim, 0:5, 16:26].sum(0) > 0).all()
    mask = torch.zeros(10, 26, dtype=torch.bool)
    mask[0:5, 6:16] = True
    assert (dep[sizes][:, ~mask] == 0).all()
    mask = torch.zeros(10, 26, dtype=torch.bool)
    mask[0:5, 16:26] = True
    assert (dep[ssim][:, ~mask] == 0).all()
    # Rows 5-9 x cols 6-25 (always zero in the env) are not read at all.
    assert (dep[:, 5:10, 6:26] == 0).all()


def test_gelato_perturbations():
    torch.manual_seed(0)
    ext = GelatoExtractor(GELATO_DIM)
    gen = torch.Generator().manual_seed(2)
    x = torch.rand(16, 10, 26, generator=gen)
    x[:, 5:, 6:] = 0
    base = ext(x.reshape(16, -1))

    def changed(rows, cols):
        y = x.clone()
        y[:, rows, cols] = torch.rand(y[:, rows, cols].shape, generator=gen)
        return (ext(y.reshape(16, -1)) != base).any(0)

    for col in range(5):       # each history column, and the stall column, moves the history
        c = changed(slice(None), col)
        assert c[:128].any() and not c[128:].any()
    c = changed(slice(None), 5)
    assert c[:128].any() and not c[128:].any()
    c = changed(slice(0, 5), slice(6, 16))
    assert c[128:192].any() and not c[:128].any() and not c[192:].any()
    c = changed(slice(0, 5), slice(16, 26))
    assert c[192:].any() and not c[:192].any()
    assert not changed(slice(5, 10), slice(6, 26)).any()


def test_pensieve_reads_exactly_its_inputs():
    torch.manual_seed(0)
    ext = PensieveExtractor(PENSIEVE_DIM)
    dep = dependency(ext, PENSIEVE_DIM).reshape(PENSIEVE_OUT, 6, 8)
    parts = {                      # feature slice -> the (row, cols) it reads
        (0, 128): (0, slice(7, 8)),          # last bitrate
        (128, 256): (1, slice(7, 8)),        # buffer
        (256, 896): (2, slice(0, 8)),        # 8 throughputs
        (896, 1536): (3, slice(0, 8)),       # 8 delays
        (1536, 1920): (4, slice(0, 6)),      # next chunk's 6 sizes
        (1920, 2048): (5, slice(7, 8)),      # chunks left
    }
    read = torch.zeros(6, 8, dtype=torch.bool)
    for (lo, hi), (row, cols) in parts.items():
        mask = torch.zeros(6, 8, dtype=torch.bool)
        mask[row, cols] = True
        read |= mask
        assert (dep[lo:hi][:, mask].sum(0) > 0).all()
        assert (dep[lo:hi][:, ~mask] == 0).all()
    assert int(read.sum()) == 1 + 1 + 8 + 8 + 6 + 1
    # The older bitrates / buffers / chunks-left and row 4's cols 6-7 are ignored.
    assert (dep[:, ~read] == 0).all()


def test_orthogonal_and_sb3_initialisation():
    torch.manual_seed(0)
    for ext in (GelatoExtractor(GELATO_DIM), PensieveExtractor(PENSIEVE_DIM)):
        for layer in ext.modules():
            if isinstance(layer, (nn.Conv1d, nn.Linear)):
                w = layer.weight.detach().reshape(layer.weight.shape[0], -1).double()
                gram = w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T
                assert torch.allclose(gram, 2.0 * torch.eye(gram.shape[0], dtype=torch.float64),
                                      atol=1e-5)
                assert (layer.bias == 0).all()
    torch.manual_seed(0)
    for ext in (GelatoExtractor(GELATO_DIM, init="sb3"), PensieveExtractor(PENSIEVE_DIM, "sb3")):
        for layer in ext.modules():
            if isinstance(layer, nn.Conv1d):   # PyTorch's default: U(+-1/sqrt(fan_in))
                bound = 1.0 / math.sqrt(layer.in_channels * layer.kernel_size[0])
                assert layer.weight.abs().max() <= bound and layer.bias.abs().max() > 0
            elif isinstance(layer, nn.Linear):
                assert torch.allclose(layer.weight.norm(), torch.tensor(math.sqrt(2.0)))
                assert (layer.bias == 0).all()


def test_real_observations(envs):
    """On the envs' own observations: the unread gelato block is zero, features are finite."""
    obs = real_observations(envs["gelato"], 30)
    assert (obs.reshape(-1, 10, 26)[:, 5:, 6:] == 0).all()
    torch.manual_seed(0)
    feats = GelatoExtractor(GELATO_DIM)(torch.from_numpy(obs))
    assert feats.shape == (len(obs), GELATO_OUT) and torch.isfinite(feats).all()
    obs = real_observations(envs["pensieve"], 30)
    feats = PensieveExtractor(PENSIEVE_DIM)(torch.from_numpy(obs))
    assert feats.shape == (len(obs), PENSIEVE_OUT) and torch.isfinite(feats).all()
    # Different observations give different features (the network is not constant).
    assert (feats[0] != feats[-1]).any()


# -- ActorCritic --------------------------------------------------------------------------------
@pytest.mark.parametrize("variant, hidden, n_actions, expected", [
    ("gelato", [256], 10, GELATO_AC_PARAMS),
    ("pensieve", [128], 6, PENSIEVE_AC_PARAMS),
])
def test_actor_critic_shared_extractor(envs, variant, hidden, n_actions, expected):
    env = envs[variant]
    torch.manual_seed(0)
    ac = ActorCritic(env.single_observation_space, env.single_action_space, hidden, "relu",
                     network=variant)
    assert ac.shared and ac.network == variant
    assert ac.actor[0] is ac.critic[0] and isinstance(ac.actor[0], EXTRACTORS[variant])
    assert n_params(ac) == expected
    assert len(list(ac.parameters())) == len({id(p) for p in ac.parameters()})

    gen = torch.Generator().manual_seed(3)
    obs_np, _ = env.reset(seed=0)
    for _ in range(5):     # act on real observations, step with the sampled actions
        obs = torch.from_numpy(obs_np)
        actions, log_prob, value = ac.act(obs, generator=gen)
        assert actions.shape == (env.num_envs,) and actions.dtype == torch.int64
        assert ((actions >= 0) & (actions < n_actions)).all()
        assert log_prob.shape == value.shape == (env.num_envs,)
        assert torch.isfinite(log_prob).all() and torch.isfinite(value).all()
        obs_np, *_ = env.step(ac.to_env(actions).numpy())

    obs = torch.from_numpy(real_observations(env, 12))
    # act == sample_actions + value (one extractor pass vs two: the same numbers).
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a1, lp1, v1 = ac.act(obs, generator=g1)
    a2, lp2 = ac.sample_actions(obs, generator=g2)
    assert torch.equal(a1, a2)
    assert torch.allclose(lp1, lp2, atol=1e-6) and torch.allclose(v1, ac.value(obs), atol=1e-6)
    # evaluate == dist / value.
    log_prob, entropy, value = ac.evaluate(obs, a1)
    dist = ac.dist(obs)
    assert torch.allclose(log_prob, dist.log_prob(a1), atol=1e-5)
    assert torch.allclose(entropy, dist.entropy(), atol=1e-5)
    assert torch.allclose(value, ac.value(obs), atol=1e-6)


def test_gradients_reach_the_shared_extractor(envs):
    env = envs["gelato"]
    torch.manual_seed(0)
    ac = ActorCritic(env.single_observation_space, env.single_action_space, [256], "relu",
                     network="gelato")
    obs = torch.from_numpy(real_observations(env, 20))
    actions = torch.randint(0, 10, (len(obs),), generator=torch.Generator().manual_seed(0))
    extractor, policy_head, value_head = ac.actor[0], ac.actor[1], ac.critic[1]

    log_prob, _, _ = ac.evaluate(obs, actions)
    (-(log_prob * torch.linspace(-1, 1, len(obs))).mean()).backward()   # a policy-gradient loss
    for p in extractor.parameters():
        assert p.grad is not None
    assert sum(float(p.grad.abs().sum()) for p in extractor.parameters()) > 0
    for branch in (extractor.history, extractor.sizes, extractor.ssim):
        assert sum(float(p.grad.abs().sum()) for p in branch.parameters()) > 0
    assert all(p.grad is not None for p in policy_head.parameters())
    assert all(p.grad is None for p in value_head.parameters())

    ac.zero_grad(set_to_none=True)
    ac.value(obs).pow(2).mean().backward()
    assert sum(float(p.grad.abs().sum()) for p in extractor.parameters()) > 0
    assert all(p.grad is None for p in policy_head.parameters())

    # The one-pass evaluate gives the gradient of the two-pass (actor, critic) computation.
    def grads(loss_fn):
        ac.zero_grad(set_to_none=True)
        loss_fn().backward()
        return [p.grad.clone() for p in ac.parameters()]

    def one_pass():
        lp, ent, v = ac.evaluate(obs, actions)
        return -lp.mean() - 0.01 * ent.mean() + 0.5 * v.pow(2).mean()

    def two_pass():
        d = ac.dist(obs)
        return -d.log_prob(actions).mean() - 0.01 * d.entropy().mean() + 0.5 * ac.value(
            obs).pow(2).mean()

    for g1, g2 in zip(grads(one_pass), grads(two_pass)):
        assert torch.allclose(g1, g2, rtol=1e-4, atol=1e-6)


def test_shared_state_dict_round_trip(envs):
    env = envs["pensieve"]
    spaces = env.single_observation_space, env.single_action_space
    torch.manual_seed(0)
    a = ActorCritic(*spaces, [128], "relu", network="pensieve")
    torch.manual_seed(1)
    b = ActorCritic(*spaces, [128], "relu", network="pensieve")
    obs = torch.from_numpy(real_observations(env, 6))
    assert not torch.equal(a.value(obs), b.value(obs))
    b.load_state_dict(a.state_dict())
    assert b.actor[0] is b.critic[0]
    assert torch.equal(a.value(obs), b.value(obs))
    assert torch.equal(a.dist(obs).logits, b.dist(obs).logits)


def test_actor_critic_network_errors(envs):
    gelato = envs["gelato"].single_observation_space, envs["gelato"].single_action_space
    pensieve = envs["pensieve"].single_observation_space, envs["pensieve"].single_action_space
    with pytest.raises(ValueError, match=r"use network=gelato \(algo=a2c_gelato\) or mlp for env.variant=gelato"):
        ActorCritic(*gelato, [128], "relu", network="pensieve")
    with pytest.raises(ValueError, match=r"use network=pensieve \(algo=a2c_pensieve\) or mlp for env.variant=pensieve"):
        ActorCritic(*pensieve, [256], "relu", network="gelato")
    with pytest.raises(ValueError, match="network must be one of"):
        ActorCritic(*gelato, network="cnn")


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(10, start=1),
                                          gym.spaces.Box(-1.0, 1.0, (3,))])
@pytest.mark.parametrize("hidden, activation", [((64, 64), "tanh"), ((32,), "relu"), ((), "elu")])
def test_mlp_path_is_bit_identical(action_space, hidden, activation):
    """network="mlp" (and the default) draws exactly the plain construction's parameters, in
    the same order, and leaves the global RNG where the plain construction leaves it."""
    obs_space = gym.spaces.Box(0.0, 1.0, (GELATO_DIM,), np.float32)
    n_out = 10 if isinstance(action_space, gym.spaces.Discrete) else 3
    torch.manual_seed(1234)
    actor = mlp(GELATO_DIM, hidden, n_out, activation, out_gain=0.01)
    critic = mlp(GELATO_DIM, hidden, 1, activation, out_gain=1.0)
    rng_after = torch.get_rng_state()
    for kwargs in ({}, {"network": "mlp"}):
        torch.manual_seed(1234)
        ac = ActorCritic(obs_space, action_space, hidden, activation, **kwargs)
        assert torch.equal(torch.get_rng_state(), rng_after)
        assert not ac.shared and ac.actor is not ac.critic
        for mine, ref in ((ac.actor, actor), (ac.critic, critic)):
            assert [type(m) for m in mine] == [type(m) for m in ref]
            ref_state = ref.state_dict()
            assert list(mine.state_dict()) == list(ref_state)
            for key, value in mine.state_dict().items():
                assert torch.equal(value, ref_state[key])
        expected = [*(["log_std"] if n_out == 3 else []),
                    *(f"actor.{k}" for k in actor.state_dict()),
                    *(f"critic.{k}" for k in critic.state_dict())]
        assert [name for name, _ in ac.named_parameters()] == expected
