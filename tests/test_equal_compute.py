"""The compute view (``plume.report.compute``): each method's env steps with its sampler's
scoring rollouts, and the comparison at equal total steps, by hand and in the report."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from plume.report import load_scores, scan_runs
from plume.report.cli import main
from plume.report.compute import equal_compute, run_steps
from plume.report.stats import normalise
from tests.test_report import REPS, SEEDS, write_run


def _per_task(algorithm: str, seed: int, points: list[tuple[float, int, int, float]]
              ) -> pd.DataFrame:
    """Rows of (progress, env steps, scoring steps, score) on two tasks, the second task's
    score 0.2 above the first."""
    return pd.DataFrame([
        {"algorithm": algorithm, "seed": seed, "task": task, "progress": p, "env_steps": env,
         "scoring_steps": scoring, "score": score + 0.2 * j}
        for p, env, scoring, score in points for j, task in enumerate(("a", "b"))])


def test_the_budget_is_the_smallest_final_total_and_each_run_stops_within_it():
    rows = pd.concat([
        _per_task("uniform", 0, [(0.5, 500, 0, 0.3), (1.0, 1000, 0, 0.5)]),
        _per_task("uniform", 1, [(0.5, 500, 0, 0.1), (1.0, 1000, 0, 0.7)]),
        _per_task("genet", 0, [(0.5, 500, 400, 0.4), (1.0, 1000, 800, 0.9)]),
        _per_task("genet", 1, [(0.5, 500, 500, 0.2), (1.0, 1000, 1000, 0.8)]),
    ], ignore_index=True)
    steps = run_steps(rows, ["a", "b"], [0, 1])
    genet_0 = steps[(steps["algorithm"] == "genet") & (steps["seed"] == 0)]
    assert genet_0["total_steps"].tolist() == [900, 1800]
    assert genet_0["score"].tolist() == pytest.approx([0.5, 1.0])  # mean over the two tasks
    view = equal_compute(steps, ["genet", "uniform"], "uniform", [0, 1], reps=50, seed=0)
    assert view.budget == 1000  # uniform's final total; genet's are 1800 and 2000
    table = view.table.set_index("algorithm")
    # genet: compared at progress 0.5 (totals 900 and 1000 <= 1000), scores 0.5 and 0.3
    assert table.loc["genet", "budget_progress"] == 0.5
    assert table.loc["genet", "budget_steps"] == 950
    assert table.loc["genet", "budget_score"] == pytest.approx(0.4)
    assert table.loc["genet", "scoring_steps"] == 900
    assert table.loc["genet", "scoring_share"] == pytest.approx(900 / 1900)
    assert table.loc["uniform", "budget_progress"] == 1.0
    assert table.loc["uniform", "budget_score"] == pytest.approx(0.7)  # (0.6 + 0.8) / 2
    assert view.comparisons["verdict"].tolist() == ["too few runs"]  # 2 seeds: no verdict
    assert view.comparisons["diff"].tolist() == pytest.approx([0.4 - 0.7])


def test_without_scoring_rollouts_there_is_no_compute_view():
    rows = _per_task("uniform", 0, [(1.0, 1000, 0, 0.5)])
    view = equal_compute(run_steps(rows, ["a", "b"], [0]), ["uniform"], "uniform", [0],
                         reps=50, seed=0)
    assert view.table.empty and view.comparisons.empty and not view.notes


def test_runs_without_env_steps_are_not_compared_and_the_report_says_why():
    rows = pd.concat([_per_task("uniform", 0, [(1.0, 1000, 0, 0.5)]),
                      _per_task("genet", 0, [(1.0, 1000, 10, 0.5)])], ignore_index=True)
    rows.loc[rows["algorithm"] == "uniform", "env_steps"] = np.nan
    view = equal_compute(run_steps(rows, ["a", "b"], [0]), ["genet", "uniform"], "uniform",
                         [0], reps=50, seed=0)
    assert view.table.empty and "record no env_steps" in view.notes[0]


SCORING = {0.0: 0, 0.5: 1024, 1.0: 2048}  # plume_dynamic's scoring steps at each evaluation


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The synthetic sweep of test_report (3 samplers x 5 seeds, 4,096 env steps each), with
    plume_dynamic charged 2,048 scoring steps: totals 0 / 3,072 / 6,144."""
    root = tmp_path_factory.mktemp("runs")
    for sampler in ("uniform", "plume_static", "plume_dynamic"):
        for seed in SEEDS:
            run = write_run(root, sampler, seed, n_traces=8)
            if sampler == "plume_dynamic":
                table = pd.read_parquet(run / "eval.parquet")
                table["scoring_steps"] = table["progress"].map(SCORING).astype("int64")
                table.to_parquet(run / "eval.parquet", index=False)
    out = tmp_path_factory.mktemp("report")
    assert main([str(root / "synthetic"), "--out", str(out), "--reps", str(REPS)]) == 0
    return root, out


def test_the_report_charges_each_method_its_scoring_steps(report):
    root, out = report
    table = pd.read_csv(out / "tables" / "compute.csv").set_index("algorithm")
    assert table["env_steps"].tolist() == [4096.0] * 3
    assert table.loc["plume_dynamic", "total_steps"] == 6144
    assert table.loc["uniform", "scoring_steps"] == 0
    # the budget is 4,096 (the others' totals): plume_dynamic is compared at progress 0.5
    assert table.loc["plume_dynamic", "budget_progress"] == 0.5
    assert table.loc["plume_dynamic", "budget_steps"] == 3072
    assert table.loc["uniform", "budget_progress"] == 1.0
    scores = normalise(load_scores(scan_runs(root)))
    halfway = scores[(scores["sampler"] == "plume_dynamic") & (scores["progress"] == 0.5)]
    per_run = halfway.groupby(["seed", "test_set"])["score"].mean().groupby("seed").mean()
    assert table.loc["plume_dynamic", "budget_score"] == pytest.approx(per_run.mean())


def test_equal_compute_verdicts_are_their_own_family_in_the_report(report):
    _, out = report
    poi = pd.read_csv(out / "tables" / "equal_compute_comparisons.csv")
    assert set(poi["scope"]) == {"all tasks at 4,096 total env steps"} and len(poi) == 2
    assert (poi["design"] == "paired").all()
    p = np.sort(poi["p_value"].to_numpy())
    assert np.sort(poi["p_holm"].to_numpy())[0] == pytest.approx(min(1.0, 2 * p[0]))
    text = (out / "report.md").read_text()
    section = text.split("## Compute: env steps spent, scoring rollouts included")[1]
    section = section.split("\n## ")[0]
    assert "4,096 total env steps" in section and "over 2 verdicts" in section
    assert "6,144" in section and "33.3%" in section  # plume_dynamic's total, its share
    assert "**Equal compute**" in text
