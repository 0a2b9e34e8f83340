"""Train Stable-Baselines3 PPO on TraceBench through Plume's batched env and sampler.

    pip install -e '.[sb3]'
    python examples/sb3_tracebench.py --steps 30000

What it does, in the order a user would:

1. loads TraceBench's built-in ``majority_fast`` training set (generated, no download);
2. runs a small Plume stage 1-2 analysis (no feature selection, 3-5 GMM clusters, ~1 s) and
   builds a Plume sampler from it exactly as ``plume-train`` does
   (``plume.harness.training.samplers.build_sampler``); Plume-Dynamic gets a short warm-up so that its
   cluster weights move within a small budget;
3. trains SB3 PPO on ``PlumeVecEnv(spec.make(...))``: one batched env, one sampler, no
   ``Monitor`` (the env reports Gymnasium's episode keys itself);
4. evaluates the greedy policy on every TraceBench test set with
   ``plume.harness.training.evaluation.evaluate_policy`` (the table ``plume-train`` writes) and prints
   the mean score per test set and the sampler's weights and draws per cluster and kind.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from plume.analysis import AnalysisSettings, analyze
from plume.envs.registry import get_env
from plume.harness.training.evaluation import eval_scores, evaluate_policy, sampler_weights
from plume.harness.training.samplers import build_sampler

SAMPLER_PARAMS = {
    "uniform": {},
    "plume_static": {},
    # The paper's schedule (warm-up 2,250 draws) needs far more episodes than a demo budget.
    "plume_dynamic": {"warmup": 64, "recompute_every": 32, "train_every": 32},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000,
                        help="PPO environment steps (default 200000: well under a minute on "
                             "2 cores)")
    parser.add_argument("--n-envs", type=int, default=64, help="copies in the batched env")
    parser.add_argument("--sampler", choices=sorted(SAMPLER_PARAMS), default="plume_dynamic")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch CPU threads (1: fastest for these small networks, and no "
                             "contention with other processes)")
    return parser.parse_args(argv)


def make_sampler(name: str, traces, seed: int):
    """A Plume sampler over ``traces`` from a quick stage 1-2 analysis (none for uniform)."""
    analysis = None
    if name != "uniform":
        settings = AnalysisSettings(feature_set="tracebench", select=False, k_range=(3, 5),
                                    restarts=3, seed=seed)
        analysis = analyze(traces, settings)
        print(f"analysis: k={analysis.k} clusters of sizes {analysis.cluster_sizes.tolist()}")
    rng = np.random.default_rng(seed)
    return build_sampler(name, SAMPLER_PARAMS[name], traces, rng, analysis)


def train(spec, traces, sampler, steps: int, n_envs: int, seed: int):
    from stable_baselines3 import PPO

    from plume.envs.sb3 import PlumeVecEnv

    env = PlumeVecEnv(spec.make(traces, n_envs, sampler, mode="train", seed=seed,
                                params=spec.params()))
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=512, n_epochs=4, learning_rate=3e-4,
                gamma=0.99, seed=seed, verbose=0)
    started = time.perf_counter()
    model.learn(total_timesteps=steps)
    elapsed = time.perf_counter() - started
    episodes = list(model.ep_info_buffer)
    print(f"trained {model.num_timesteps:,} env steps in {elapsed:.1f} s "
          f"({model.num_timesteps / elapsed:,.0f} steps/s); last {len(episodes)} episodes: "
          f"mean return (agent reward) {np.mean([e['r'] for e in episodes]):.2f}, "
          f"mean QoE per chunk {np.mean([e['return'] / e['l'] for e in episodes]):.3f}")
    return model


def report(spec, model, sampler, traces) -> None:
    from plume.envs.sb3 import sb3_policy

    test_sets = {name: spec.load_builtin(name, "test") for name in spec.builtin_test_sets(
        "majority_fast")}
    frame = evaluate_policy(sb3_policy(model), spec, test_sets,
                            env_steps=int(model.num_timesteps))
    scores = eval_scores(frame)
    print(f"\ngreedy evaluation ({spec.score.name}, {spec.score.unit}; 1 = always-lowest "
          f"bitrate, 6 = perfect):")
    for name, test_set in test_sets.items():
        print(f"  {name:<14} {scores[f'eval/{name}/score']:7.3f}   ({len(test_set)} traces)")
    weights = sampler_weights(sampler, traces.labels, np.zeros_like(sampler.draws))
    print(f"\nsampler {sampler.name}: {int(sampler.draws.sum()):,} draws")
    if weights.empty:
        print("  (uniform: every trace equally likely)")
    for row in weights.itertuples():
        print(f"  {row.grouping:<8} {row.group:<22} weight {row.weight:6.3f}   "
              f"draw share {row.draw_share:6.3f}   ({row.n_traces} traces)")
    recomputes = len(getattr(sampler, "history", []))
    if recomputes:
        print(f"  Plume-Dynamic recomputed its cluster weights {recomputes} times")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.torch_threads)
    spec = get_env("tracebench")
    traces = spec.load_builtin(spec.default_dataset(spec.params()), "train")
    print(f"training set: {traces.name} ({len(traces)} traces)")
    sampler = make_sampler(args.sampler, traces, args.seed)
    model = train(spec, traces, sampler, args.steps, args.n_envs, args.seed)
    report(spec, model, sampler, traces)


if __name__ == "__main__":
    main()
