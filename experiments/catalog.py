"""What each paper figure is: its curves, the runs that make them, the controllers drawn beside
them and the claim it answers. Data only: ``runner`` turns it into jobs, ``figures`` draws it.

A **training figure** (:class:`Figure`) is one or more **groups**; a group is what one rliable
report compares (one environment setting, one learner, one test set or all of them): a few
**curves**, each one ``plume-train`` configuration trained over the profile's seeds, and the
classic controllers evaluated with ``plume-eval`` on the same test traces. A curve names its
experiment config (``conf/experiment/<base>.yaml``; ``<base>_quick`` in the quick profile) and
the overrides that make it; curves of two figures with the same experiment and overrides are
the same runs, trained once (fig8 reuses fig9's Majority Fast runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

PROFILES = ("quick", "paper")
SEEDS = {"quick": 5, "paper": 5}  # >= plume.report.inference.MIN_RUNS
DATASETS = ("majority_fast", "balanced", "majority_slow")
DATASET_LABELS = {"majority_fast": "Majority Fast", "balanced": "Balanced",
                  "majority_slow": "Majority Slow"}
# The paper's Fig. 9 scenarios: (training dataset, test set).
SCENARIOS = {
    "S1": ("majority_fast", "majority_slow"),
    "S2": ("balanced", "balanced"),
    "S3": ("majority_slow", "majority_fast"),
}
MAIN_SAMPLERS = ("uniform", "plume_static", "plume_dynamic")
FIG8_SAMPLERS = ("uniform", "trace_error", "plume_static", "plume_dynamic")
FIG10_DATASETS = ("majority_fast", "majority_slow")
SAMPLER_LABELS = {"uniform": "Random", "trace_error": "Trace-Error",
                  "plume_static": "Plume-Static", "plume_dynamic": "Plume-Dynamic",
                  "two_class": "2-Class", "plr": "PLR", "genet": "Genet", "cl2": "CL2",
                  "tscl": "TSCL"}
PEER_SAMPLERS = ("uniform", "plume_static", "plume_dynamic", "plr", "genet", "cl2", "tscl")


@dataclass(frozen=True)
class Curve:
    """One line of a figure: ``plume-train experiment=<base>[_quick] <overrides>`` per seed."""

    label: str
    base: str
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class Group:
    """What one report compares: curves against the ``baseline`` curve (its label), on
    ``test_set`` (None: every test set of the runs), beside ``controllers`` evaluated with
    ``plume-eval env=<env> <env_overrides> controller=<name>``. ``hard`` names the trace
    labels of the "hard traces" panels (a label prefix, e.g. ``slow``; None: no such panel).
    ``seeds``: train at least this many seeds (more than the profile's where the effect to
    resolve is small; 0: the profile's)."""

    key: str
    title: str
    curves: tuple[Curve, ...]
    baseline: str
    env: str
    env_overrides: tuple[str, ...] = ()
    controllers: tuple[str, ...] = ()
    test_set: str | None = None
    hard: str | None = None
    seeds: int = 0

    def curve(self, label: str) -> Curve:
        return next(c for c in self.curves if c.label == label)


@dataclass(frozen=True)
class Figure:
    """A training figure: its groups, the claim of the paper it answers, the figure's stem;
    ``table``: also one table of every curve across the groups (the peers comparison)."""

    name: str
    title: str
    claim: str
    groups: tuple[Group, ...]
    stem: str
    table: bool = False

    def only(self, keys: Sequence[str] | None) -> Figure:
        """This figure with only the groups ``keys`` (None: all of them), in the figure's
        order: re-running some columns (a learner changed) leaves the others' runs alone."""
        if keys is None:
            return self
        known = [g.key for g in self.groups]
        if unknown := [k for k in keys if k not in known]:
            raise ValueError(f"{self.name} has no group {', '.join(map(repr, unknown))}; "
                             f"its groups: {', '.join(known)}")
        return replace(self, groups=tuple(g for g in self.groups if g.key in keys))


def _samplers(base: str, samplers, *extra: str, prefix: str = "") -> tuple[Curve, ...]:
    return tuple(Curve(prefix + SAMPLER_LABELS[s], base, (*extra, f"sampler={s}"))
                 for s in samplers)


def _tracebench(base: str, dataset: str, samplers=MAIN_SAMPLERS) -> tuple[Curve, ...]:
    return _samplers(base, samplers, f"env.dataset={dataset}")


def _scenarios(learner: str, base: str, small_effects: dict[str, int]) -> tuple[Group, ...]:
    return tuple(
        Group(f"{learner.lower()}_{name}", f"{name} ({learner}): train {DATASET_LABELS[train]}, "
              f"test {DATASET_LABELS[test]}", _tracebench(base, train), "Random", "tracebench",
              test_set=test, hard="slow", seeds=small_effects.get(name, 0))
        for name, (train, test) in SCENARIOS.items())


# Pensieve's setting (conf/experiment/fig6a_pensieve.yaml), for its controllers' evaluations
PENSIEVE_ENV = ("env.dataset=pensieve_synthetic", "env.variant=pensieve")
ABR_CONTROLLERS = ("bba", "robust_mpc", "bola_v1")
PER_OFF, PER_ON = "algo.per=false", "algo.per=true"
TWO_CLASS = ("sampler=two_class", "sampler.threshold=6.0")

TRAINING_FIGURES: dict[str, Figure] = {f.name: f for f in (
    Figure("quickstart", "Quickstart: Random vs Plume on Majority Fast (PPO)",
           "Plume converges to a higher test reward than Random, on all and on slow traces "
           "(paper §6.2, Fig. 9 S1)",
           (Group("ppo", "PPO, train Majority Fast", _tracebench("quickstart", "majority_fast"),
                  "Random", "tracebench", hard="slow"),),
           "quickstart_test_score"),
    Figure("fig3", "Fig. 3: prioritising transitions (PER) vs traces (2-Class), Gelato-DQN",
           "2-Class Equal Weighted gives the best performance on all and slow traces; PER "
           "gives no significant gain and falls short of the naive trace scheme (paper §1)",
           (Group("dqn", "Gelato-DQN on puffer_synthetic", (
               Curve("Random", "fig3", (PER_OFF, "sampler=uniform")),
               Curve("Random+PER", "fig3", (PER_ON, "sampler=uniform")),
               Curve("2-Class", "fig3", (PER_OFF, *TWO_CLASS)),
               Curve("2-Class+PER", "fig3", (PER_ON, *TWO_CLASS))),
               "Random", "abr", hard="slow"),),
           "fig3_per_vs_traces"),
    Figure("fig6a", "Fig. 6a: ABR in simulation, Gelato and Pensieve (A2C)",
           "Plume (Static and Dynamic) converges to a higher test reward than Random on all and "
           "slow traces; Pensieve-Plume-Dynamic beats Pensieve-Random; Plume-trained Gelato "
           "beats BBA, MPC and BOLA (paper §6.2)",
           (Group("gelato", "Gelato (A2C) on puffer_synthetic",
                  _samplers("fig6a", MAIN_SAMPLERS, prefix="Gelato-"), "Gelato-Random", "abr",
                  controllers=ABR_CONTROLLERS, hard="slow"),
            Group("pensieve", "Pensieve (A2C) on pensieve_synthetic",
                  _samplers("fig6a_pensieve", ("uniform", "plume_dynamic"),
                            prefix="Pensieve-"),
                  "Pensieve-Random", "abr", env_overrides=PENSIEVE_ENV,
                  controllers=ABR_CONTROLLERS, hard="slow")),
           "fig6a_abr"),
    Figure("fig6b", "Fig. 6b: congestion control (Aurora, A2C)",
           "Plume-Dynamic and Plume-Static give statistically significant gains in convergence "
           "and final performance over Random (paper §6.2)",
           (Group("aurora", "Aurora (A2C) on aurora link tuples",
                  _samplers("fig6b", MAIN_SAMPLERS), "Random", "cc",
                  controllers=("aimd", "cubic", "constant_rate", "oracle")),),
           "fig6b_cc"),
    Figure("fig6c", "Fig. 6c: load balancing (Park, PPO)",
           "Plume converges to a lower average job completion time than Random (paper §6.2)",
           (Group("ppo", "PPO on lb_mixed", _samplers("fig6c", MAIN_SAMPLERS), "Random", "lb",
                  controllers=("least_work_left", "join_shortest_queue", "power_of_two",
                               "random")),),
           "fig6c_lb"),
    Figure("fig8", "Fig. 8: Majority Fast ablation, with PER",
           "Trace-Error can be worse than Random, especially on slow traces; Plume-Dynamic "
           "(both terms) is best on fast and slow traces; PER is not the best (paper §6.4)",
           (Group("ppo", "PPO, train Majority Fast", (
               *_tracebench("fig9", "majority_fast", ("uniform",)),
               *_tracebench("fig8", "majority_fast", ("trace_error",)),
               *_tracebench("fig9", "majority_fast", ("plume_static", "plume_dynamic"))),
               "Random", "tracebench", hard="slow"),
            Group("dqn", "DQN, train Majority Fast", (
                *_tracebench("fig9_dqn", "majority_fast", ("uniform",)),
                Curve("Random+PER", "fig8_dqn", ("env.dataset=majority_fast", PER_ON,
                                                 "sampler=uniform")),
                *_tracebench("fig8_dqn", "majority_fast", ("trace_error",)),
                *_tracebench("fig9_dqn", "majority_fast", ("plume_static", "plume_dynamic"))),
                "Random", "tracebench", hard="slow")),
           "fig8_ablation"),
    Figure("fig9", "Fig. 9: scenarios S1-S3, PPO and the paper's DQN",
           "Plume-Dynamic beats Random in all three scenarios; Plume-Static is good in S1 but "
           "behind Plume-Dynamic in S2 and S3; Random's slow-trace reward depends on the "
           "training set, Plume-Dynamic's much less (paper §6.4)",
           # 10 seeds where 5 left a small difference unresolved (PPO S2 +0.012, Holm p = 0.1;
           # S3, the scenario that does not reproduce, with both learners)
           (*_scenarios("PPO", "fig9", {"S2": 10, "S3": 10}),
            *_scenarios("DQN", "fig9_dqn", {"S3": 10})),
           "fig9_scenarios"),
    Figure("peers", "Plume against its peers: one comparison across every environment",
           "(not a claim of the paper, which compares no curriculum peer) which trace sampler "
           "trains the best controller, with each env's default learner",
           (Group("tracebench", "TraceBench S1 (PPO), train Majority Fast",
                  _tracebench("fig9", "majority_fast", PEER_SAMPLERS), "Random", "tracebench",
                  test_set="majority_slow", hard="slow"),
            Group("abr", "ABR, Gelato (A2C) on puffer_synthetic",
                  _samplers("fig6a", PEER_SAMPLERS), "Random", "abr", hard="slow"),
            Group("cc", "CC, Aurora (A2C) on aurora", _samplers("fig6b", PEER_SAMPLERS),
                  "Random", "cc"),
            Group("lb", "LB (PPO) on lb_mixed", _samplers("fig6c", PEER_SAMPLERS), "Random",
                  "lb")),
           "peers_curves", table=True),
)}
"""Every figure that trains, by name (fig10 draws fig9's PPO Plume-Dynamic runs)."""

DATASET_FIGURES = ("fig7", "fig11", "fig12", "fig13")
"""Figures drawn from datasets and stage 1-2 analyses only (no training)."""

FIGURES = ("quickstart", "fig3", "fig6a", "fig6b", "fig6c", "fig7", "fig8", "fig9", "fig10",
           "fig11", "fig12", "fig13", "peers")
DESCRIPTIONS = {
    "quickstart": "Random vs Plume-Static vs Plume-Dynamic on Majority Fast + rliable report",
    "fig3": "Gelato-DQN on ABR: Random, Random+PER, 2-Class, 2-Class+PER",
    "fig6a": "ABR: Gelato and Pensieve (A2C) x samplers, beside BBA, MPC, BOLA",
    "fig6b": "CC: Aurora (A2C) x samplers, beside AIMD, Cubic, constant rate, oracle",
    "fig6c": "LB: PPO x samplers, beside least-work-left, JSQ, power of two, random",
    "fig7": "TraceBench dataset composition (no training)",
    "fig8": "Majority Fast ablation with PPO and with DQN (+ PER)",
    "fig9": "scenarios S1-S3 with PPO and with DQN: Random vs Plume-Static vs Plume-Dynamic",
    "fig10": "Plume-Dynamic sampling weight per trace kind (fig9's PPO plume_dynamic runs)",
    "fig11": "clusters of the ABR, CC and LB training traces (no training)",
    "fig12": "cluster scatter per TraceBench dataset (no training)",
    "fig13": "example TraceBench traces of each kind (no training)",
    "peers": "7 samplers (Plume, PLR, Genet, CL2, TSCL) x TraceBench, ABR, CC, LB",
}
