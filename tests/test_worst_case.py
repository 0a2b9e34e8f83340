"""The worst-case view (``plume.report.tail``): each run's CVaR of its worst 10 % of test
traces, by hand, and in the report (table, interval, verdicts as their own family)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from plume.report import load_scores, scan_runs
from plume.report.cli import main
from plume.report.stats import normalise
from plume.report.tail import cvar, worst_count
from tests.test_report import REPS, synthetic_sweep


def test_cvar_by_hand():
    assert cvar(np.arange(1.0, 11.0)) == 1.0  # 10 traces: the worst 1
    assert cvar(np.arange(1.0, 26.0)) == pytest.approx(2.0)  # 25: ceil(2.5) = 3 -> (1+2+3)/3
    assert cvar(np.array([0.9, 0.2, 0.5])) == 0.2  # fewer than 10: the single worst
    assert cvar(np.arange(20.0)[::-1]) == pytest.approx(0.5)  # 20: the worst 2, any order
    assert [worst_count(n) for n in (1, 9, 10, 11, 20, 21, 100)] == [1, 1, 1, 2, 2, 3, 10]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    runs = synthetic_sweep(tmp_path_factory.mktemp("runs"))
    out = tmp_path_factory.mktemp("report")
    assert main([str(runs), "--out", str(out), "--reps", str(REPS), "--seed", "3"]) == 0
    return runs, out


def test_the_report_states_each_method_s_cvar_with_its_interval(report):
    runs, out = report
    table = pd.read_csv(out / "tables" / "worst_case.csv")
    assert set(table["algorithm"]) == {"uniform", "plume_static", "plume_dynamic"}
    assert (table["cvar"] <= table["mean"] + 1e-12).all()
    assert (table["cvar_lo"] < table["cvar"]).all() and (table["cvar"] < table["cvar_hi"]).all()
    # by hand from the runs: per run, the worst ceil(10 %) normalised trace scores at the end
    scores = normalise(load_scores(scan_runs(runs)))
    final = scores[scores["progress"] == scores["progress"].max()]
    per_run = final.groupby(["sampler", "seed"])["score"].apply(
        lambda s: np.sort(s.to_numpy())[:max(1, int(np.ceil(0.1 * len(s) - 1e-9)))].mean())
    for row in table.itertuples():
        assert row.cvar == pytest.approx(per_run[row.algorithm].mean())
    text = (out / "report.md").read_text()
    assert "## Worst case: worst 10% of test traces (CVaR, normalised)" in text


def test_worst_case_verdicts_are_their_own_holm_family(report):
    _, out = report
    poi = pd.read_csv(out / "tables" / "worst_case_comparisons.csv")
    assert set(poi["scope"]) == {"worst 10% of test traces"} and len(poi) == 2
    assert (poi["design"] == "paired").all()
    p = np.sort(poi["p_value"].to_numpy())
    assert np.sort(poi["p_holm"].to_numpy())[0] == pytest.approx(min(1.0, 2 * p[0]))
    text = (out / "report.md").read_text().split("## Worst case")[1].split("\n## ")[0]
    assert "over 2 verdicts" in text
