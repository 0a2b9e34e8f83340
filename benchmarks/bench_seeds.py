"""K seeds of one preset trained together in one process (``plume.agents.lockstep``) against
one seed per process, on one CPU thread per process.

    python benchmarks/bench_seeds.py [--presets a2c_aurora_quick ppo_lb_quick] [--ks 1 4 8 16]
                                     [--steps 20000] [--repeats 3] [--envs 16]

For each preset (on its figure's env: CC for Aurora's A2C, LB for the load balancer's PPO,
16 copies as conf/env has them), after a warm-up of two updates per contender:
- ``single``: one ordinary agent's ``learn``, env steps/s (the baseline of every ratio);
- ``K together``: ``learn_together`` over K agents (seeds 0..K-1), aggregate env steps/s;
- ``2 processes``: two single-seed processes started together (each warms up, then both are
  released at once), the sum of their rates: what two cores give without stacking;
- ``2 processes x K``: the same with K seeds together in each (the best K): two cores with it.
Rates are medians over ``--repeats`` rounds in which the contenders take turns; each trains
``--steps`` env steps per seed. Agreement: seeds 0..3 trained together against their own
single runs, the largest relative difference of any loss at each of the first 5 updates
(rounding: the batched products round differently from ``Linear``, and a preset's updates
amplify it, PPO's 128 minibatch steps per update more than A2C's one).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import single_thread  # noqa: F401  (one thread; must precede numpy)

from plume.agents import A2C, PPO
from plume.agents.lockstep import learn_together
from plume.envs.registry import get_env
from plume.harness.config.schema import load_algo_preset
from plume.sampling import UniformSampler

PRESETS = {"a2c_aurora_quick": ("cc", A2C), "ppo_lb_quick": ("lb", PPO)}
LOSSES = ("losses/policy_loss", "losses/value_loss", "losses/entropy")


def make_agents(preset: str, seeds, n_envs: int):
    env_name, algo = PRESETS[preset]
    spec = get_env(env_name)
    params = spec.params()
    traces = spec.load_builtin(spec.default_dataset(params), "train")
    values = load_algo_preset(preset, env_name)
    values.pop("name")
    config = algo.CONFIG(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})
    agents = []
    for seed in seeds:
        env = spec.make(traces, n_envs, UniformSampler(len(traces), np.random.default_rng(seed)),
                        mode="train", seed=seed, params=params)
        agents.append(algo(env, config, seed=seed))
    return agents


def timed(train, agents, steps: int) -> float:
    """Aggregate env steps/s of ``train(agents, until)`` over ``steps`` more env steps each."""
    start_steps = agents[0].env_steps
    start = time.perf_counter()
    train(agents, start_steps + steps)
    return len(agents) * (agents[0].env_steps - start_steps) / (time.perf_counter() - start)


def alone(agents, until):
    for agent in agents:
        agent.learn(until)


def two_processes(preset: str, steps: int, n_envs: int, k: int = 1) -> float:
    """Sum of two processes' rates (``k`` seeds together in each), released together after
    their warm-ups."""
    with tempfile.TemporaryDirectory() as tmp:
        go = Path(tmp) / "go"
        children = [subprocess.Popen(
            [sys.executable, __file__, "--child", preset, str(slot), str(k), str(steps),
             str(n_envs), str(go)], stdout=subprocess.PIPE, text=True) for slot in (0, 1)]
        for _ in range(6000):  # bounded: 10 min
            if all((Path(tmp) / f"ready{slot}").exists() for slot in (0, 1)):
                break
            time.sleep(0.1)
        go.touch()
        rates = [float(child.communicate(timeout=600)[0].split()[-1]) for child in children]
    return sum(rates)


def child(preset: str, slot: int, k: int, steps: int, n_envs: int, go: Path) -> None:
    agents = make_agents(preset, range(slot * k, slot * k + k), n_envs)
    train = alone if k == 1 else learn_together
    train(agents, 2 * agents[0].batch_size)
    (go.parent / f"ready{slot}").touch()
    for _ in range(6000):
        if go.exists():
            break
        time.sleep(0.1)
    print(timed(train, agents, steps))


def agreement(preset: str, n_envs: int) -> list[float]:
    """Per update (1..5), the largest relative difference of any loss between seeds 0-3
    trained together and their own single runs."""
    singles, together = make_agents(preset, range(4), n_envs), make_agents(preset, range(4), n_envs)
    until = 5 * singles[0].batch_size
    mine = learn_together(together, until)
    worst = [0.0] * 5
    for agent, records in zip(singles, mine):
        for i, (a, b) in enumerate(zip(agent.learn(until), records)):
            for key in LOSSES:
                worst[i] = max(worst[i], abs(a[key] - b[key]) / max(abs(a[key]), 1e-12))
    return worst


def bench(preset: str, ks: list[int], steps: int, repeats: int, n_envs: int) -> None:
    contenders = {"single": (alone, make_agents(preset, [0], n_envs))}
    for k in ks:
        contenders[f"{k} together"] = (learn_together, make_agents(preset, range(k), n_envs))
    for train, agents in contenders.values():
        train(agents, 2 * agents[0].batch_size)
    rates: dict[str, list[float]] = {name: [] for name in [*contenders, "2 processes"]}
    for round_ in range(repeats):
        for name, (train, agents) in contenders.items():
            rates[name].append(timed(train, agents, steps))
        rates["2 processes"].append(two_processes(preset, steps, n_envs))
        print(f"  {preset}: round {round_ + 1}/{repeats} done", flush=True)
    median = {name: statistics.median(r) for name, r in rates.items()}
    best = max(ks, key=lambda k: median[f"{k} together"])
    median[f"2 processes x {best}"] = statistics.median(
        two_processes(preset, steps, n_envs, best) for _ in range(repeats))
    base, pair = median["single"], median["2 processes"]
    print(f"\n{preset} ({n_envs} copies per seed, {steps:,} env steps per seed, median of "
          f"{repeats})")
    print(f"{'':>18} {'env steps/s':>12} {'vs single':>10} {'vs 2 procs':>11}")
    for name, rate in median.items():
        print(f"{name:>18} {rate:>12,.0f} {rate / base:>9.2f}x {rate / pair:>10.2f}x")
    print(f"best K = {best}: x{median[f'{best} together'] / base:.2f} a single-seed process")
    print("agreement with single runs, seeds 0-3, largest relative loss difference at "
          "updates 1-5: " + ", ".join(f"{d:.1e}" for d in agreement(preset, n_envs)))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        preset, slot, k, steps, n_envs, go = sys.argv[2:8]
        child(preset, int(slot), int(k), int(steps), int(n_envs), Path(go))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    parser.add_argument("--ks", nargs="+", type=int, default=[1, 4, 8, 16])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--envs", type=int, default=16)
    args = parser.parse_args()
    for preset in args.presets:
        bench(preset, args.ks, args.steps, args.repeats, args.envs)


if __name__ == "__main__":
    main()
