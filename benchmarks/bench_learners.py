"""Our PPO, A2C and DQN against Stable-Baselines3's, on the same env, hyperparameters, network
and number of copies (TraceBench, trained on ``balanced``, one CPU thread, one process).

    python benchmarks/bench_learners.py [--envs 64] [--speed-steps 40000] [--repeats 3]
                                        [--steps 200000] [--dqn-steps 1000000] [--seeds 5]
                                        [--algos ppo a2c dqn] [--device cpu]

For each algorithm, "ours" is the preset as configured and "ours, fast" adds the optional
speed settings (PPO: bf16 autocast of the update + fused Adam + torch.compile of the update's
forward pass; A2C: bf16 + compile + ``critic_in_update``, the rollout's values taken from the
update's forward pass; DQN: fused Adam; compiling DQN's networks gave nothing). Speed: env
steps/s of the whole training loop, after a warm-up, for ours, ours fast, SB3 through
``plume.envs.sb3.PlumeVecEnv`` over the same batched env, and SB3 the ordinary way over
``DummyVecEnv`` of single-copy views sharing one sampler; the median of ``--repeats`` rounds
in which the four take turns; ratios are against ours fast.
Score (with ``--seeds`` > 0): each trains ``--steps`` env steps (DQN: ``--dqn-steps``, 1M by
default: with 64 copies and one gradient step per vector step, 200k steps are 3,125 gradient
steps, after which every DQN still plays the always-highest policy) on every seed, then plays the
three TraceBench test sets greedily (``evaluate_policy``); printed: mean test QoE per chunk
over the three sets with a 95 % Student-t interval over seeds (``balanced`` is used for
training because on ``majority_fast`` every learner sits at the always-highest policy for the
first few hundred thousand steps, where no comparison can show anything).
Targets: PPO and A2C >= 1.5x SB3 through the adapter and >= 2.5x the ordinary way; DQN >= 3x;
scores equal or better (intervals overlapping or ours higher).

Hyperparameters: ours from conf/algo/{ppo,a2c}.yaml; DQN is vanilla DQN on both sides (SB3 has
no double Q, dueling head, n-step or prioritized replay) with a 100 k buffer, 1 k learning
starts, batch 32, one gradient step per ``--dqn-train-freq`` vector steps (1: every step of
the 64 copies; SB3's own default cadence is 4), target copy every 1,000 env steps.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import single_thread  # noqa: F401,E402,I001  (one thread; must precede numpy)
import torch
from omegaconf import OmegaConf
from scipy import stats

from plume.agents import A2C, DQN, PPO, A2CConfig, DQNConfig, PPOConfig
from plume.envs.registry import get_env
from plume.harness.training.evaluation import eval_scores, evaluate_policy
from plume.sampling import UniformSampler

CONF = Path(__file__).resolve().parents[1] / "conf" / "algo"
SPEC = get_env("tracebench")
TEST_SETS = ("majority_fast", "balanced", "majority_slow")


def preset(name: str, config_class):
    values = OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml"))
    values.pop("name")
    return config_class(**values)


def configs(algo: str, dqn_train_freq: int = 1, device: str = "cpu") -> dict[str, object]:
    """``{"ours": preset, "ours_fast": preset + the optional speed settings}`` on ``device``
    (SB3's models take the same device)."""
    return {"ours": replace(ours_config(algo, False, dqn_train_freq), device=device),
            "ours_fast": replace(ours_config(algo, True, dqn_train_freq), device=device)}


def ours_config(algo: str, fast: bool = False, dqn_train_freq: int = 1):
    if algo == "ppo":
        config = preset("ppo", PPOConfig)
        return (replace(config, update_precision="bfloat16", fused_optimizer=True,
                        compile_update=True) if fast else config)
    if algo == "a2c":
        config = preset("a2c", A2CConfig)
        return (replace(config, update_precision="bfloat16", compile_update=True,
                        critic_in_update=True) if fast else config)
    return DQNConfig(fused_optimizer=fast, learning_rate=1e-4, adam_eps=1e-8, buffer_size=100_000, batch_size=32,
                     learning_starts=1_000, gamma=0.975, n_step=1, train_freq=dqn_train_freq,
                     gradient_steps=1, target_update_interval=1_000, tau=1.0, double_q=False,
                     dueling=False, eps_start=1.0, eps_end=0.05, eps_decay_steps=20_000,
                     huber_delta=1.0, max_grad_norm=10.0, per=False, hidden_sizes=(256, 256),
                     activation="elu")


def batched_env(traces, n_envs: int, seed: int):
    sampler = UniformSampler(len(traces), np.random.default_rng(seed))
    return SPEC.make(traces, n_envs, sampler, mode="train", seed=seed, params=SPEC.params())


def sb3_model(algo: str, venv, config, seed: int, total: int):
    """SB3's PPO / A2C / DQN with ``config``'s hyperparameters and network."""
    import stable_baselines3 as sb3

    kwargs = {"activation_fn": torch.nn.ELU if config.activation == "elu" else torch.nn.Tanh}
    if algo in ("ppo", "a2c"):
        kwargs["net_arch"] = {"pi": list(config.hidden_sizes), "vf": list(config.hidden_sizes)}
        lr = config.learning_rate
        schedule = (lambda remaining: lr * remaining) if config.anneal_lr else lr
        common = {"learning_rate": schedule, "n_steps": config.n_steps, "gamma": config.gamma,
                  "gae_lambda": config.gae_lambda, "ent_coef": config.ent_coef,
                  "vf_coef": config.vf_coef, "max_grad_norm": config.max_grad_norm,
                  "normalize_advantage": config.norm_adv, "policy_kwargs": kwargs, "seed": seed,
                  "device": config.device}
        if algo == "ppo":
            batch = config.n_steps * venv.num_envs // config.n_minibatches
            model = sb3.PPO("MlpPolicy", venv, batch_size=batch, n_epochs=config.n_epochs,
                            clip_range=config.clip_coef,
                            clip_range_vf=config.clip_coef if config.clip_vloss else None,
                            target_kl=config.target_kl, **common)
        else:
            model = sb3.A2C("MlpPolicy", venv, use_rms_prop=config.optimizer == "rmsprop",
                            rms_prop_eps=config.optimizer_eps, **common)
        return without_log_folder(model)
    kwargs["net_arch"] = list(config.hidden_sizes)
    kwargs["optimizer_kwargs"] = {"eps": config.adam_eps}
    model = sb3.DQN("MlpPolicy", venv, learning_rate=config.learning_rate,
                    buffer_size=config.buffer_size, learning_starts=config.learning_starts,
                    batch_size=config.batch_size, tau=config.tau, gamma=config.gamma,
                    train_freq=(config.train_freq, "step"), gradient_steps=config.gradient_steps,
                    target_update_interval=config.target_update_interval,
                    exploration_fraction=config.eps_decay_steps / total,
                    exploration_initial_eps=config.eps_start,
                    exploration_final_eps=config.eps_end, max_grad_norm=config.max_grad_norm,
                    policy_kwargs=kwargs, seed=seed, device=config.device)
    return without_log_folder(model)


def without_log_folder(model):
    """SB3's ``learn`` otherwise makes an empty ``<tempdir>/SB3-<time>`` folder per call."""
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def ours(algo: str, config, traces, n_envs: int, seed: int, total: int):
    """Our ``algo`` with ``config`` on a fresh batched env seeded like SB3's."""
    cls = {"ppo": PPO, "a2c": A2C, "dqn": DQN}[algo]
    return cls(batched_env(traces, n_envs, seed), config, seed=seed, total_env_steps=total)


def steps_per_s(train, steps_done, steps: int) -> float:
    """Env steps/s of ``train(steps)`` (train at least ``steps`` more env steps), counting
    the steps ``steps_done()`` says were taken (learners stop at whole rollouts)."""
    before, start = steps_done(), time.perf_counter()
    train(steps)
    return (steps_done() - before) / (time.perf_counter() - start)


def speed(algo: str, ours_configs, traces, n_envs: int, steps: int,
          repeats: int) -> dict[str, float]:
    """Median env steps/s of each trainer over ``repeats`` rounds, the trainers interleaved in
    every round (so a slow moment of the machine hits one round, not one trainer)."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    from plume.envs.sb3 import PlumeVecEnv

    config = ours_configs["ours"]
    warmup = steps // 4 if algo != "dqn" else max(steps // 4, config.learning_starts * 2)
    total = warmup + steps * repeats
    trainers = {}  # name: (train(more_steps), steps_done(), timed steps per round)
    for name, config_ in ours_configs.items():
        agent = ours(algo, config_, traces, n_envs, 0, total)
        trainers[name] = (lambda n, a=agent: a.learn(a.env_steps + n),
                          lambda a=agent: a.env_steps, steps)
    adapter = sb3_model(algo, PlumeVecEnv(batched_env(traces, n_envs, 0)), config, 0, total)
    sampler = UniformSampler(len(traces), np.random.default_rng(0))
    dummy_env = DummyVecEnv([
        (lambda i=i: SPEC.single(traces, sampler, mode="train", seed=i, params=SPEC.params()))
        for i in range(n_envs)])
    dummy = sb3_model(algo, dummy_env, config, 0, total)
    for name, model, timed in (("sb3_adapter", adapter, steps), ("sb3_dummy", dummy, steps // 4)):
        trainers[name] = (lambda n, m=model: m.learn(n, reset_num_timesteps=False),
                          lambda m=model: m.num_timesteps, timed)
    for train, _, _ in trainers.values():
        train(warmup)
    rates: dict[str, list[float]] = {name: [] for name in trainers}
    for _ in range(repeats):
        for name, (train, steps_done, timed) in trainers.items():
            rates[name].append(steps_per_s(train, steps_done, timed))
    return {name: float(np.median(r)) for name, r in rates.items()}


def test_score(policy, test_sets) -> float:
    """Mean over the test sets of the mean test QoE per chunk."""
    scores = eval_scores(evaluate_policy(policy, SPEC, test_sets))
    return float(np.mean([v for k, v in scores.items() if k.endswith("/score")]))


def scores(algo: str, ours_configs, traces, test_sets, n_envs: int, steps: int,
           seeds: int) -> dict[str, list[float]]:
    from plume.envs.sb3 import PlumeVecEnv, sb3_policy

    out: dict[str, list[float]] = {"ours": [], "ours_fast": [], "sb3": []}
    for seed in range(seeds):
        for name, config_ in ours_configs.items():
            agent = ours(algo, config_, traces, n_envs, seed, steps)
            agent.learn(steps)
            out[name].append(test_score(agent.act, test_sets))
        model = sb3_model(algo, PlumeVecEnv(batched_env(traces, n_envs, seed)),
                          ours_configs["ours"], seed, steps)
        model.learn(steps)
        out["sb3"].append(test_score(sb3_policy(model), test_sets))
    return out


def t_interval(values: list[float]) -> str:
    """``mean [low, high]``: 95 % Student-t interval over seeds."""
    x = np.asarray(values)
    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return f"{x.mean():.3f} [{x.mean() - half:.3f}, {x.mean() + half:.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=64, help="environment copies")
    parser.add_argument("--speed-steps", type=int, default=40_000, help="timed env steps")
    parser.add_argument("--device", default="cpu", help="torch device of both sides' networks")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timing rounds (the median is printed)")
    parser.add_argument("--steps", type=int, default=200_000, help="budget per scored run")
    parser.add_argument("--dqn-steps", type=int, default=1_000_000,
                        help="budget per scored DQN run")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per side (0: speed only)")
    parser.add_argument("--algos", nargs="+", default=["ppo", "a2c", "dqn"])
    parser.add_argument("--dqn-train-freq", type=int, default=1,
                        help="DQN: vector steps per gradient step (SB3's default cadence is 4)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    import stable_baselines3

    traces = SPEC.load_builtin("balanced", "train")
    test_sets = {name: SPEC.load_builtin(name, "test") for name in TEST_SETS}
    print(f"torch {torch.__version__}, SB3 {stable_baselines3.__version__}, one thread, "
          f"TraceBench balanced ({len(traces)} train traces), N = {args.envs} copies, "
          f"device {args.device}")
    for algo in args.algos:
        ours_configs = configs(algo, args.dqn_train_freq, args.device)
        print(f"\n{algo}: {ours_configs['ours']}", flush=True)
        r = speed(algo, ours_configs, traces, args.envs, args.speed_steps, args.repeats)
        fast = r["ours_fast"]
        print(f"  env steps/s: ours {r['ours']:,.0f} | ours, fast {fast:,.0f} | SB3 via "
              f"PlumeVecEnv {r['sb3_adapter']:,.0f} (ours fast x{fast / r['sb3_adapter']:.2f}, "
              f"ours x{r['ours'] / r['sb3_adapter']:.2f}) | SB3 over DummyVecEnv "
              f"{r['sb3_dummy']:,.0f} (ours fast x{fast / r['sb3_dummy']:.2f})", flush=True)
        if args.seeds:
            budget = args.dqn_steps if algo == "dqn" else args.steps
            got = scores(algo, ours_configs, traces, test_sets, args.envs, budget, args.seeds)
            print(f"  test QoE/chunk after {budget:,} steps, {args.seeds} seeds, mean "
                  f"[95 % t-interval]: ours {t_interval(got['ours'])} | ours, fast "
                  f"{t_interval(got['ours_fast'])} | SB3 {t_interval(got['sb3'])}", flush=True)


if __name__ == "__main__":
    main()
