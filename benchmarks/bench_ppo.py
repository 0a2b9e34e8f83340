"""PPO training throughput on TraceBench (one CPU thread).

    python benchmarks/bench_ppo.py [--updates 5] [--envs 16 64]

For each number of copies N, with the harness default PPO config (conf/algo/ppo.yaml: the
TraceBench network, hidden (256, 256) ELU, n_steps 128, 4 epochs x 16 minibatches), it prints:

- env-only: a plain loop stepping ``TraceBenchVecEnv`` with random actions (same process,
  same thread), i.e. the ceiling set by the simulator;
- PPO: env steps/s of the whole ``learn`` loop (rollouts, GAE and gradient updates; the first
  update is a warm-up and is excluded), with the rollout/update time split;
- ratio: PPO / env-only, the learning overhead.

Target: >= 10,000 PPO env steps/s at N = 64.
"""

from __future__ import annotations

import single_thread  # noqa: F401  (one thread; must precede numpy)

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from plume.agents import PPO, PPOConfig
from plume.envs.tracebench import TraceBenchVecEnv
from plume.traces.tracebench import load_tracebench

TARGET_STEPS_PER_S = 10_000
CONF_ALGO = Path(__file__).resolve().parents[1] / "conf" / "algo" / "ppo.yaml"


def env_only(traces, n_envs: int, n_steps: int) -> float:
    """Env steps/s of a loop that only steps the env with uniformly random actions."""
    env = TraceBenchVecEnv(traces, n_envs=n_envs, mode="train", seed=0)
    env.reset()
    actions = np.random.default_rng(0).integers(3, size=(n_steps, n_envs))
    for t in range(min(50, n_steps)):  # warm-up
        env.step(actions[t])
    start = time.perf_counter()
    for t in range(n_steps):
        env.step(actions[t])
    return n_steps * n_envs / (time.perf_counter() - start)


def default_config() -> PPOConfig:
    """The harness default (conf/algo/ppo.yaml): what `plume-train` trains with."""
    values = OmegaConf.to_container(OmegaConf.load(CONF_ALGO))
    values.pop("name")
    return PPOConfig(**values)


def ppo(traces, n_envs: int, n_updates: int) -> dict[str, float]:
    """Steps/s of ``learn`` over ``n_updates`` updates after one warm-up update."""
    env = TraceBenchVecEnv(traces, n_envs=n_envs, mode="train", seed=0)
    config = default_config()
    agent = PPO(env, config, seed=0, total_env_steps=(n_updates + 1) * n_envs * config.n_steps)
    agent.learn(agent.batch_size)  # warm-up update, not timed
    start = time.perf_counter()
    timed = agent.learn((n_updates + 1) * agent.batch_size)
    wall = time.perf_counter() - start
    rollout = sum(m["perf/rollout_s"] for m in timed)
    update = sum(m["perf/update_s"] for m in timed)
    steps = len(timed) * agent.batch_size
    return {
        "steps_per_s": steps / wall,
        "rollout_s": rollout / len(timed),
        "update_s": update / len(timed),
        "rollout_steps_per_s": steps / rollout,
        "batch": agent.batch_size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=5, help="timed updates per N")
    parser.add_argument("--envs", type=int, nargs="+", default=[16, 64], help="numbers of copies")
    args = parser.parse_args()

    torch.set_num_threads(1)
    traces = load_tracebench("majority_fast", "train")
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"dataset majority_fast/train ({len(traces)} traces)"
    )
    c = default_config()
    print(
        f"PPO (conf/algo/ppo.yaml): n_steps={c.n_steps}, hidden {c.hidden_sizes} {c.activation}, "
        f"{c.n_epochs} epochs x {c.n_minibatches} minibatches"
    )
    header = (
        f"{'N':>4} {'batch':>6} {'env-only/s':>11} {'PPO/s':>9} {'ratio':>6} "
        f"{'rollout s':>10} {'update s':>9} {'rollout %':>9} {'rollout/s':>10}"
    )
    print(header)
    results = {}
    for n in args.envs:
        base = env_only(traces, n, 2048 if n <= 16 else 512)
        r = ppo(traces, n, args.updates)
        results[n] = r
        share = r["rollout_s"] / (r["rollout_s"] + r["update_s"])
        print(
            f"{n:>4} {r['batch']:>6} {base:>11,.0f} {r['steps_per_s']:>9,.0f} "
            f"{r['steps_per_s'] / base:>6.3f} {r['rollout_s']:>10.3f} {r['update_s']:>9.3f} "
            f"{share:>9.0%} {r['rollout_steps_per_s']:>10,.0f}"
        )
    if 64 in results:
        ok = results[64]["steps_per_s"] >= TARGET_STEPS_PER_S
        print(
            f"target >= {TARGET_STEPS_PER_S:,} PPO env steps/s at N=64: "
            f"{'met' if ok else 'NOT met'} ({results[64]['steps_per_s']:,.0f})"
        )


if __name__ == "__main__":
    main()
