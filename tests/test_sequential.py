"""Seeds added in rounds (``plume.report.sequential``, ``python -m experiments NAME --seeds
auto``): the design's boundaries against published values, its family-wise error and power by
simulation of the very statistics the rounds use (the paired t of the same seeds, and Welch's t,
through their p-values), and the round
logic of the experiments on synthetic runs, without training."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from experiments import rounds, runner
from experiments.catalog import TRAINING_FIGURES
from plume.report import load_scores, normalise, scan_runs
from plume.report.sequential import (
    CONTINUE,
    NO_DIFFERENCE,
    REJECTED,
    crossing_probabilities,
    decide,
    design,
    design_power,
    obrien_fleming_spending,
    paired_z,
    welch_z,
)
from tests.test_report import write_run

pytestmark = pytest.mark.filterwarnings(
    "ignore:(?s).*is validated against ConfigStore schema:UserWarning")
LOOKS = (5, 10, 15, 20)


def test_obrien_fleming_type_boundaries_match_the_published_values():
    """Lan-DeMets O'Brien-Fleming-type spending, 4 equally spaced looks, two-sided 0.05:
    4.33, 2.96, 2.36, 2.01 (Jennison & Turnbull 2000)."""
    plan = design(LOOKS, 20, 0.05)
    assert plan.boundaries == pytest.approx((4.33, 2.96, 2.36, 2.01), abs=0.02)
    assert plan.spent == pytest.approx(obrien_fleming_spending(np.array(LOOKS) / 20, 0.05))
    assert plan.spent[-1] == pytest.approx(0.05)
    # under no difference, the design spends exactly its level, look by look
    crossing = crossing_probabilities(plan, 0.0)
    assert np.cumsum(crossing) == pytest.approx(plan.spent, rel=1e-6)
    # one look is the fixed-sample test
    assert design((20,), 20, 0.05).boundaries[0] == pytest.approx(1.95996, abs=1e-4)


def test_bonferroni_splits_the_level_and_bad_rounds_are_refused():
    plan = design(LOOKS, 20, 0.05, comparisons=3)
    assert plan.level == pytest.approx(0.05 / 3) and plan.spent[-1] == pytest.approx(0.05 / 3)
    assert all(b > a for a, b in zip(design(LOOKS, 20, 0.05).boundaries, plan.boundaries))
    for bad in ((5, 10, 15), (10, 5, 20), (3, 10, 20)):
        with pytest.raises(ValueError):
            design(bad, 20, 0.05)
    assert rounds.looks_of(20) == LOOKS and rounds.looks_of(12) == (5, 10, 12)
    assert rounds.looks_of(20, [5, 8, 30]) == (5, 8, 20)


def _simulate(plan, x: np.ndarray, y: np.ndarray, statistic=welch_z) -> np.ndarray:
    """Per simulated experiment and comparison: rejected at some look. ``x`` (sims,
    comparisons, runs), ``y`` (sims, 1, runs): the baseline every comparison shares."""
    rejected = np.zeros(x.shape[:2], dtype=bool)
    for look, n in enumerate(plan.looks):
        rejected |= np.abs(statistic(x[..., :n], y[..., :n])) >= plan.boundaries[look]
    return rejected


def test_paired_looks_keep_the_family_wise_error_and_the_power_of_the_design():
    """The same seeds on both sides, a seed effect shared by the pair (correlation 0.8): with
    no difference, 3 comparisons sharing one baseline reject at most 0.05 over 4 looks; with
    a difference of 0.5 (sd of a pair's difference sqrt(2 * 0.2) = 0.63), power within 0.05
    of the design's at drift 0.5 / 0.63 * sqrt(20) (measured in the test's output)."""
    plan3, plan1 = design(LOOKS, 20, 0.05, comparisons=3), design(LOOKS, 20, 0.05)
    rng = np.random.default_rng(13)
    sims = 20_000
    seed_effect = rng.normal(0, np.sqrt(0.8), (sims, 1, 20))
    def noisy(shape):
        return rng.normal(0, np.sqrt(0.2), shape)
    x, y = seed_effect + noisy((sims, 3, 20)), seed_effect + noisy((sims, 1, 20))
    error = _simulate(plan3, x, y, paired_z).any(axis=1).mean()
    shifted = seed_effect + 0.5 + noisy((sims, 1, 20))
    power = _simulate(plan1, shifted, y, paired_z).mean()
    stated = design_power(plan1, 0.5 / np.sqrt(0.4) * np.sqrt(20))
    print(f"paired: family-wise error {error:.4f}, power {power:.3f} vs design {stated:.3f}")
    assert 0.03 < error <= 0.05
    assert abs(power - stated) < 0.05 and 0.7 < stated < 0.95


def test_family_wise_error_under_no_difference_is_at_most_005():
    """3 comparisons sharing one baseline, looks at 5, 10, 15, 20 runs, no difference
    anywhere: the chance of any rejection at any look, 40,000 simulated figures (measured
    0.0435, standard error 0.0010)."""
    plan = design(LOOKS, 20, 0.05, comparisons=3)
    rng = np.random.default_rng(11)
    sims = 40_000
    rejected = _simulate(plan, rng.normal(size=(sims, 3, 20)), rng.normal(size=(sims, 1, 20)))
    error = rejected.any(axis=1).mean()
    standard_error = np.sqrt(error * (1 - error) / sims)
    print(f"family-wise error {error:.4f} (standard error {standard_error:.4f})")
    assert standard_error < 0.0015
    assert error <= 0.05
    assert error > 0.03  # Bonferroni over 3 correlated comparisons: not far below


def test_power_by_simulation_is_within_005_of_the_design_s():
    """One comparison, a difference of 0.9 run-to-run standard deviations: the design's
    power from the canonical distribution (drift 0.9 sqrt(20 / 2)) against 40,000 simulated
    sequences of Welch tests (measured 0.782 vs 0.805: Welch's t at 5-10 runs gives a little
    less than the normal it is mapped to)."""
    plan = design(LOOKS, 20, 0.05)
    rng = np.random.default_rng(12)
    sims, effect = 40_000, 0.9
    rejected = _simulate(plan, rng.normal(effect, 1.0, (sims, 1, 20)),
                         rng.normal(size=(sims, 1, 20)))
    simulated, stated = rejected.mean(), design_power(plan, effect * np.sqrt(20 / 2))
    print(f"power simulated {simulated:.3f}, design {stated:.3f}")
    assert abs(simulated - stated) < 0.05
    assert 0.7 < stated < 0.9


def test_decide_rejects_at_the_boundary_and_ends_at_the_cap():
    plan = design(LOOKS, 20, 0.05)
    stats = {"big": 4.5, "small": -1.0, "negative": -4.4, "missing": float("nan")}
    assert decide(plan, 1, stats) == {"big": REJECTED, "small": CONTINUE,
                                      "negative": REJECTED, "missing": CONTINUE}
    assert decide(plan, 4, {"small": -1.0, "edge": 2.02}) == {"small": NO_DIFFERENCE,
                                                              "edge": REJECTED}
    with pytest.raises(ValueError):
        decide(plan, 0, stats)


# --------------------------------------------------------------------------- the experiments


QUICKSTART = TRAINING_FIGURES["quickstart"]
COMPARISONS = rounds.figure_comparisons(QUICKSTART)
STATIC, DYNAMIC = COMPARISONS


def test_only_the_curves_of_undecided_comparisons_get_the_next_seeds():
    """Synthetic per-run scores: Plume-Dynamic far above Random, Plume-Static level with it.
    After round 1 only Plume-Dynamic is decided, so round 2 trains seeds 5-9 of Random and
    Plume-Static and no controller."""
    assert [c.name for c in COMPARISONS] == ["ppo: Plume-Static vs Random",
                                             "ppo: Plume-Dynamic vs Random"]
    plan = design(LOOKS, 20, 0.05, comparisons=len(COMPARISONS))
    rng = np.random.default_rng(5)
    random, static = rng.normal(0.80, 0.01, 5), rng.normal(0.80, 0.01, 5)
    dynamic = random + 0.2 + rng.normal(0.0, 0.001, 5)
    stats = {STATIC: {"z": float(welch_z(static, random))},
             DYNAMIC: {"z": float(welch_z(dynamic, random))}}
    decisions = rounds.decide_look(plan, 1, stats)
    assert decisions == {STATIC: CONTINUE, DYNAMIC: REJECTED}
    curves = rounds.next_curves(COMPARISONS, decisions)
    assert curves == {("ppo", "Random"), ("ppo", "Plume-Static")}
    jobs = rounds.round_jobs("quickstart", "quick", range(5, 10), curves, controllers=False)
    assert {(j.axis("sampler"), j.seed) for j in jobs} == {
        (s, seed) for s in ("uniform", "plume_static") for seed in range(5, 10)}
    assert rounds.next_curves(COMPARISONS, {STATIC: NO_DIFFERENCE, DYNAMIC: REJECTED}) == set()
    first = rounds.round_jobs("quickstart", "quick", range(5), curves | {("ppo", "x")}, True)
    assert len(first) == 10  # the round's curves; quickstart has no controllers


def _synthetic_runs(root: Path, n_seeds: int, shifts: dict[str, float]) -> dict:
    roles = {}
    labels = {"uniform": "Random", "plume_static": "Plume-Static",
              "plume_dynamic": "Plume-Dynamic"}
    for sampler, shift in shifts.items():
        for seed in range(n_seeds):
            run = write_run(root, sampler, seed, shift=shift, n_traces=8)
            roles[run] = ("ppo", labels[sampler])
    return roles


def test_a_look_s_statistic_is_the_report_s_paired_test_on_its_first_seeds(tmp_path):
    """From run directories: the per-run score the report pools (normalised, each run's mean
    over the compared kinds), the paired t of seeds 0-4 only though 7 are on disk."""
    roles = _synthetic_runs(tmp_path, 7, {"uniform": 0.0, "plume_static": 0.15})
    stat = rounds.pair_statistic(QUICKSTART.groups[0], STATIC, roles, 5)
    scores = normalise(load_scores(scan_runs(list(roles))))
    final = scores[(scores["progress"] == 1.0) & (scores["seed"] < 5)]
    per_run = (final.groupby(["sampler", "seed", "label"])["score"].mean()
               .groupby(["sampler", "seed"]).mean())
    by_hand = paired_z(per_run["plume_static"].to_numpy(), per_run["uniform"].to_numpy())
    assert stat["n"] == 5
    assert stat["diff"] == pytest.approx(per_run["plume_static"].mean()
                                         - per_run["uniform"].mean())
    assert stat["z"] == pytest.approx(float(by_hand))


def test_the_rounds_train_undecided_curves_until_decided_and_record_them(tmp_path, capsys,
                                                                         monkeypatch):
    """``--seeds auto`` end to end with the launcher replaced by synthetic runs written where
    each job's run directory is: Plume-Dynamic (far above Random) is decided in round 1,
    Plume-Static (no difference) takes every round to the cap of 15."""
    shifts = {"uniform": 0.0, "plume_static": 0.0, "plume_dynamic": 5.0}
    launched: list[list[str]] = []

    def fake_launch(pending, overrides, stream=None, progress_every_s=30.0, seeds_in_process=1):
        if pending:  # the runner hands each round's controllers, then its training jobs
            launched.append(sorted(f"{p.job.axis('sampler')}:{p.job.seed}" for p in pending))
        for item in pending:
            sampler = item.job.axis("sampler")
            run = write_run(tmp_path / "made", sampler, item.job.seed, shift=shifts[sampler],
                            n_traces=8)
            item.run_dir.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(run, item.run_dir)
        return []

    monkeypatch.setattr(runner, "launch", fake_launch)
    root, out = tmp_path / "runs", tmp_path / "reports"
    argv = ["quickstart", "--seeds", "auto", "--seeds-cap", "15", "--root", str(root),
            "--out", str(out), "--reps", "50", "--override", "logger=none"]
    assert runner.main(argv) == 0
    printed = capsys.readouterr().out
    assert len(launched) == 3 and len(launched[0]) == 15  # quickstart has no controllers
    for seeds, jobs in zip((range(5, 10), range(10, 15)), launched[1:]):
        assert jobs == sorted(f"{s}:{seed}" for s in ("uniform", "plume_static")
                              for seed in seeds)
    lines = [line for line in printed.splitlines() if line.startswith("round 1/3")]
    assert len(lines) == 1 and "ppo: Plume-Dynamic vs Random z = +" in lines[0]
    assert "Plume-Dynamic vs Random z" in lines[0] and "rejected, better" in lines[0]
    assert "look 1: 5 runs per side, reject when |z| >= " in printed

    record = json.loads((out / "quickstart" / "sequential.json").read_text())
    assert [r["runs_per_side"] for r in record["rounds"]] == [5, 10, 15]
    assert record["design"]["comparisons"] == 2
    assert [len(r["statistics"]) for r in record["rounds"]] == [2, 1, 1]
    final = record["decisions"]
    assert final["ppo: Plume-Dynamic vs Random"]["decision"] == REJECTED
    assert final["ppo: Plume-Dynamic vs Random"]["runs_per_side"] == 5
    assert final["ppo: Plume-Static vs Random"] == {
        "decision": NO_DIFFERENCE, "direction": None, "look": 3, "runs_per_side": 15,
        "z": record["rounds"][2]["statistics"][0]["z"]}
    assert abs(final["ppo: Plume-Static vs Random"]["z"]) < record["design"]["looks"][2][
        "boundary"]
    assert "ppo: Plume-Static vs Random z = " in printed and ": no difference at the cap" in printed
    summary = (out / "quickstart" / "summary.md").read_text()
    assert "## Sequential seeds (--seeds auto)" in summary and summary.startswith("# ")
    assert "- ppo: Plume-Dynamic vs Random: rejected, better (round 1, 5 runs per side)" in summary
    assert (out / "quickstart" / "report" / "report.md").is_file()
    seeds = pd.Series([p.name for p in root.rglob("seed=*")])
    assert len(seeds) == 5 + 15 + 15  # Plume-Dynamic stopped at 5 seeds


def test_dry_run_prints_the_design_and_the_first_round_and_trains_nothing(tmp_path, capsys):
    code = runner.main(["quickstart", "--seeds", "auto", "--dry-run", "--root",
                        str(tmp_path / "runs"), "--out", str(tmp_path / "reports")])
    printed = capsys.readouterr().out
    assert code == 0
    assert "each at 0.05/2 = 0.025" in printed
    for look in ("look 1: 5 runs per side, reject when |z| >= 4.860",
                 "look 2: 10 runs per side, reject when |z| >= 3.345",
                 "look 3: 15 runs per side, reject when |z| >= 2.670",
                 "look 4: 20 runs per side, reject when |z| >= 2.281"):
        assert look in printed
    assert "comparisons: ppo: Plume-Static vs Random; ppo: Plume-Dynamic vs Random" in printed
    assert "round 1: seeds 0-4 of 15 job(s), 0 already completed" in printed
    assert printed.count("plume-train experiment=quickstart_quick ") == 15
    assert "seed=5" not in printed and "estimated runtime:" in printed
    assert not (tmp_path / "runs").exists() and not (tmp_path / "reports").exists()


def test_the_seed_options_are_checked_before_anything_runs(capsys):
    assert rounds.check_options("quickstart", "auto", None, None) is None
    assert rounds.check_options("fig9", 10, None, None) is None
    assert rounds.check_options("fig9", 10, 30, None) == "--seeds-cap only with --seeds auto"
    assert "fig7 has none" in rounds.check_options("fig7", "auto", None, None)
    assert "all has none" in rounds.check_options("all", "auto", None, None)
    assert "at least 5" in rounds.check_options("fig9", "auto", 4, None)
    assert "start at 5" in rounds.check_options("fig9", "auto", None, [3, 10])
    assert "--render-only" in rounds.check_options("fig9", "auto", None, None, True)
    for argv in (["fig7", "--seeds", "auto"], ["fig9", "--seeds", "0"],
                 ["fig9", "--seeds", "auto", "--seeds-rounds", "10,5"]):
        with pytest.raises(SystemExit) as stop:
            runner.main(argv)
        assert stop.value.code == 2
    assert "--seeds-rounds: must increase" in capsys.readouterr().err
